/* mpi.c - the MPI data transport (see mpi.h): every posted transfer is one
 * or more MPI requests in a slot table that the engine thread tests with
 * MPI_Testsome. Compiled only when weft is built with MPI. */
#include "transport/mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

/* Largest piece one MPI message carries (counts are ints). */
#define WF_MPI_CHUNK ((size_t)1 << 30)
/* Tags: the group id above TAG_SEQ_BITS bits of the collective's sequence
 * number (when MPI_TAG_UB allows; else the group id alone, folded). */
#define TAG_SEQ_BITS 7
/* How long cancel_data waits for cancelled receives to be confirmed (or to
 * complete), and for sends to finish. */
#define CANCEL_RECV_WAIT_NS (1000 * 1000 * 1000LL)
#define CANCEL_SEND_WAIT_NS (200 * 1000 * 1000LL)
/* How long receives from a departed peer may take to land (checked by
 * wf_mpi_tr_progress, from the engine's loop). */
#define DEPART_WAIT_NS (2000 * 1000 * 1000LL)

/* A transfer split over several MPI messages: completes with its last one. */
typedef struct multi {
  int left;
} multi;

typedef struct slot {
  int *pending;   /* NULL: free slot */
  multi *m;       /* NULL unless the transfer has several pieces */
  int peer;
  int is_recv;
  int count;      /* bytes of the piece */
  int abandoned;  /* cancelled, but MPI has not given the request back yet */
} slot;

struct wf_mpi_tr {
  wf_transport base;
  MPI_Comm comm;
  wf_mpi_tr_cfg cfg;
  int tag_ub;
  int tag_shift;     /* TAG_SEQ_BITS, or 0 when the tag space is small */
  MPI_Request *reqs; /* cap entries, MPI_REQUEST_NULL where unused */
  slot *slots;
  int *free_idx, nfree;
  int cap, hw;       /* table size; one past the highest slot ever used */
  int active;        /* slots in use */
  size_t bytes;      /* their bytes */
  int *per_peer;     /* slots in use per peer (not abandoned ones) */
  int64_t *depart_by; /* per peer: it left; its receives must land by then (0: none) */
  int nabandoned;    /* abandoned slots (not in active) */
  int abandoned_recvs;
  int orphan;        /* what abandoned slots' pending points to */
  int *idx;          /* Testsome scratch (cap) */
  MPI_Status *sts;   /* Testsome scratch (cap) */
};

static void mpi_msg(int rc, char *out, size_t outlen) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
  snprintf(out, outlen, "%s", s);
}

/* The MPI tag of a collective's data tag seq. A group whose tag would
 * exceed MPI_TAG_UB is refused: folding would let two groups share a tag
 * and match each other's messages. */
static weft_status make_tag(wf_mpi_tr *t, uint64_t seq, int *tag) {
  uint64_t group = seq >> WF_TAG_GROUP_SHIFT;
  uint64_t v = (group << t->tag_shift) | (seq & ((1u << t->tag_shift) - 1));
  if (v > (uint64_t)t->tag_ub)
    return wf_err(WEFT_ERR_NOT_SUPPORTED,
                  "WEFT_TRANSPORT=mpi: group %llu needs MPI tag %llu, above this MPI's MPI_TAG_UB %d (use fewer "
                  "groups, or WEFT_TRANSPORT=tcp)",
                  (unsigned long long)group, (unsigned long long)v, t->tag_ub);
  *tag = (int)v;
  return WEFT_OK;
}

static weft_status grow(wf_mpi_tr *t, int need) {
  if (t->nfree >= need) return WEFT_OK;
  int ncap = t->cap ? t->cap : 64;
  while (ncap - t->cap + t->nfree < need) ncap *= 2;
  MPI_Request *r = realloc(t->reqs, sizeof *r * (size_t)ncap);
  if (r) t->reqs = r;
  slot *s = realloc(t->slots, sizeof *s * (size_t)ncap);
  if (s) t->slots = s;
  int *f = realloc(t->free_idx, sizeof *f * (size_t)ncap);
  if (f) t->free_idx = f;
  int *ix = realloc(t->idx, sizeof *ix * (size_t)ncap);
  if (ix) t->idx = ix;
  MPI_Status *st = realloc(t->sts, sizeof *st * (size_t)ncap);
  if (st) t->sts = st;
  if (!r || !s || !f || !ix || !st) return wf_err(WEFT_ERR_NO_MEMORY, "MPI transport: out of memory");
  for (int i = t->cap; i < ncap; i++) {
    t->reqs[i] = MPI_REQUEST_NULL;
    t->slots[i].pending = NULL;
    t->slots[i].abandoned = 0;
  }
  /* new slots go on the free stack highest first, so low ones are used first */
  for (int i = ncap - 1; i >= t->cap; i--) t->free_idx[t->nfree++] = i;
  t->cap = ncap;
  return WEFT_OK;
}

static int take_slot(wf_mpi_tr *t) {
  int i = t->free_idx[--t->nfree];
  if (i >= t->hw) t->hw = i + 1;
  t->active++;
  return i;
}

static void release_slot(wf_mpi_tr *t, int i) {
  slot *s = &t->slots[i];
  t->per_peer[s->peer]--;
  t->bytes -= (size_t)s->count;
  s->pending = NULL;
  s->m = NULL;
  t->reqs[i] = MPI_REQUEST_NULL;
  t->free_idx[t->nfree++] = i;
  t->active--;
}

/* A cancelled slot MPI still holds: out of the counts, kept in the table
 * (tested by progress) until MPI completes it. */
static void abandon_slot(wf_mpi_tr *t, int i) {
  slot *s = &t->slots[i];
  t->per_peer[s->peer]--;
  t->bytes -= (size_t)s->count;
  t->active--;
  s->pending = &t->orphan;
  s->m = NULL;
  s->abandoned = 1;
  t->nabandoned++;
  t->abandoned_recvs += s->is_recv;
}

/* An abandoned slot's request completed: the slot is free. */
static void free_abandoned(wf_mpi_tr *t, int i) {
  slot *s = &t->slots[i];
  t->nabandoned--;
  t->abandoned_recvs -= s->is_recv;
  s->pending = NULL;
  s->abandoned = 0;
  t->reqs[i] = MPI_REQUEST_NULL;
  t->free_idx[t->nfree++] = i;
}

static weft_status post(wf_mpi_tr *t, int peer, uint64_t seq, void *buf, size_t len, int *pending, int is_recv) {
  if (peer < 0 || peer >= t->cfg.size)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "MPI transport: peer %d is out of range", peer);
  int tag = 0;
  WF_CHECK(make_tag(t, seq, &tag));
  if (t->depart_by[peer] && !is_recv)
    return wf_err(WEFT_ERR_PEER_LOST, "MPI transport: rank %d has shut down: a send to it would never complete", peer);
  size_t npieces = len ? (len + WF_MPI_CHUNK - 1) / WF_MPI_CHUNK : 1;
  if (npieces > INT_MAX / 2) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "MPI transport: %zu bytes is too large", len);
  WF_CHECK(grow(t, (int)npieces));
  multi *m = NULL;
  if (npieces > 1) {
    m = malloc(sizeof *m);
    if (!m) return wf_err(WEFT_ERR_NO_MEMORY, "MPI transport: out of memory");
    m->left = (int)npieces;
  }
  char *p = buf;
  (*pending)++; /* the executor's count of unfinished transfers */
  for (size_t k = 0; k < npieces; k++) {
    size_t off = k * WF_MPI_CHUNK;
    int count = (int)(len - off < WF_MPI_CHUNK ? len - off : WF_MPI_CHUNK);
    int i = take_slot(t);
    slot *s = &t->slots[i];
    *s = (slot){pending, m, peer, is_recv, count, 0};
    t->per_peer[peer]++;
    t->bytes += (size_t)count;
    int rc = is_recv ? MPI_Irecv(p + off, count, MPI_BYTE, peer, tag, t->comm, &t->reqs[i])
                     : MPI_Isend(p + off, count, MPI_BYTE, peer, tag, t->comm, &t->reqs[i]);
    if (rc != MPI_SUCCESS) {
      char e[MPI_MAX_ERROR_STRING];
      mpi_msg(rc, e, sizeof e);
      release_slot(t, i);
      /* earlier pieces stay posted: the caller fails the world, and
       * cancel_data then takes them back */
      if (m && (m->left -= (int)(npieces - k)) == 0) free(m);
      if (k == 0) (*pending)--; /* nothing of it was posted */
      return wf_err(WEFT_ERR_PEER_LOST, "MPI_%s of %d bytes %s rank %d failed: %s", is_recv ? "Irecv" : "Isend",
                    count, is_recv ? "from" : "to", peer, e);
    }
  }
  if (t->depart_by[peer]) t->depart_by[peer] = wf_now_ns() + DEPART_WAIT_NS; /* a receive posted after it left */
  return WEFT_OK;
}

static weft_status mpi_send(wf_transport *tr, int peer, uint64_t seq, uint32_t idx, const void *buf, size_t len,
                            int *pending) {
  (void)idx; /* order within the pair is MPI's in-order matching */
  return post((wf_mpi_tr *)tr, peer, seq, (void *)buf, len, pending, 0);
}

static weft_status mpi_recv(wf_transport *tr, int peer, uint64_t seq, uint32_t idx, void *buf, size_t len,
                            int *pending) {
  (void)idx;
  return post((wf_mpi_tr *)tr, peer, seq, buf, len, pending, 1);
}

/* A piece in slot i completed with status st (rc: Testsome's code). */
static int complete(wf_mpi_tr *t, int i, const MPI_Status *st, int rc) {
  if (t->slots[i].abandoned) { /* cancelled earlier: MPI has given it back */
    free_abandoned(t, i);
    return 0;
  }
  slot s = t->slots[i];
  release_slot(t, i);
  int last_piece = !s.m || --s.m->left == 0;
  if (last_piece) free(s.m);
  char msg[512];
  if (rc == MPI_ERR_IN_STATUS && st->MPI_ERROR != MPI_SUCCESS) {
    char e[MPI_MAX_ERROR_STRING];
    mpi_msg(st->MPI_ERROR, e, sizeof e);
    snprintf(msg, sizeof msg, "MPI %s %s rank %d failed: %s", s.is_recv ? "receive" : "send",
             s.is_recv ? "from" : "to", s.peer, e);
    t->cfg.on_error(t->cfg.cb_ctx, s.peer, WEFT_ERR_PEER_LOST, msg);
    return 0; /* the transfer never completes: the world fails */
  }
  if (s.is_recv) {
    int got = -1, cancelled = 0;
    MPI_Test_cancelled(st, &cancelled);
    if (cancelled) return 0;
    MPI_Get_count(st, MPI_BYTE, &got);
    if (got != s.count) {
      snprintf(msg, sizeof msg, "MPI transport: received %d bytes from rank %d where %d were expected (tag %d)",
               got, s.peer, s.count, st->MPI_TAG);
      t->cfg.on_error(t->cfg.cb_ctx, s.peer, WEFT_ERR_PROTOCOL, msg);
      return 0;
    }
  }
  if (!last_piece) return 0;
  (*s.pending)--;
  return 1;
}

/* Receives from a peer that left must land within DEPART_WAIT_NS. */
static void check_departed(wf_mpi_tr *t) {
  int64_t now = wf_now_ns();
  for (int p = 0; p < t->cfg.size; p++) {
    if (!t->depart_by[p] || !t->per_peer[p] || now < t->depart_by[p]) continue;
    char msg[256];
    snprintf(msg, sizeof msg, "rank %d has shut down (weft_finalize), but %d MPI transfer piece(s) from it did not "
             "arrive within %g s", p, t->per_peer[p], DEPART_WAIT_NS / 1e9);
    t->depart_by[p] = INT64_MAX; /* reported once */
    t->cfg.on_error(t->cfg.cb_ctx, p, WEFT_ERR_PEER_LOST, msg);
  }
}

int wf_mpi_tr_progress(wf_mpi_tr *t) {
  if (!t || (!t->active && !t->nabandoned)) return 0;
  int n = 0, done = 0;
  int rc = MPI_Testsome(t->hw, t->reqs, &n, t->idx, t->sts);
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    char e[MPI_MAX_ERROR_STRING], msg[512];
    mpi_msg(rc, e, sizeof e);
    snprintf(msg, sizeof msg, "MPI_Testsome failed: %s", e);
    /* no request to blame: name the first pending one's peer */
    for (int i = 0; i < t->hw; i++)
      if (t->slots[i].pending && !t->slots[i].abandoned) {
        t->cfg.on_error(t->cfg.cb_ctx, t->slots[i].peer, WEFT_ERR_PEER_LOST, msg);
        break;
      }
    return 0;
  }
  if (n == MPI_UNDEFINED) return 0;
  for (int k = 0; k < n; k++) done += complete(t, t->idx[k], &t->sts[k], rc);
  if (t->active) check_departed(t);
  /* completed slots were freed: the scan range shrinks with the high end */
  while (t->hw > 0 && !t->slots[t->hw - 1].pending) t->hw--;
  if (t->hw == 0) { /* table empty: restart the free stack in order */
    t->nfree = 0;
    for (int i = t->cap - 1; i >= 0; i--) t->free_idx[t->nfree++] = i;
  }
  return done;
}

int wf_mpi_tr_active(const wf_mpi_tr *t) { return t ? t->active : 0; }

size_t wf_mpi_tr_bytes(const wf_mpi_tr *t) { return t ? t->bytes : 0; }

/* Cancels what is pending. Receives are MPI_Cancel'ed and tested until MPI
 * confirms the cancellation or completes them (a matched receive finishes
 * while its sender is alive), for up to CANCEL_RECV_WAIT_NS; sends (which
 * most MPIs cannot cancel, and only read their buffer) for up to
 * CANCEL_SEND_WAIT_NS. Nothing is MPI_Request_free'd: what MPI still holds
 * stays in the table as abandoned slots that progress keeps testing. */
static void mpi_cancel(wf_transport *tr) {
  wf_mpi_tr *t = (wf_mpi_tr *)tr;
  if (!t->active && !t->nabandoned) return;
  int fresh = t->active; /* 0: only what an earlier call waited for already: one test pass */
  for (int i = 0; i < t->hw; i++) {
    slot *s = &t->slots[i];
    if (!s->pending || s->abandoned) continue;
    multi *m = s->m; /* a split transfer's pieces share m: free it once */
    if (m) {
      for (int j = i; j < t->hw; j++)
        if (t->slots[j].m == m) t->slots[j].m = NULL;
      free(m);
    }
    if (s->is_recv) MPI_Cancel(&t->reqs[i]);
    abandon_slot(t, i);
  }
  int64_t start = wf_now_ns();
  struct timespec nap = {0, 50 * 1000};
  for (int spins = 0; t->nabandoned; spins++) {
    int64_t now = wf_now_ns();
    if (spins && (!fresh || (!(t->abandoned_recvs && now < start + CANCEL_RECV_WAIT_NS) &&
                             !(now < start + CANCEL_SEND_WAIT_NS))))
      break;
    int n = 0;
    int rc = MPI_Testsome(t->hw, t->reqs, &n, t->idx, t->sts);
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) break;
    if (n == MPI_UNDEFINED) break;
    for (int k = 0; k < n; k++) free_abandoned(t, t->idx[k]);
    if (!n && spins > 64) nanosleep(&nap, NULL); /* let the peers (and MPI's progress) run */
  }
  while (t->hw > 0 && !t->slots[t->hw - 1].pending) t->hw--;
  if (t->abandoned_recvs && fresh) {
    char who[128] = "";
    size_t len = 0;
    for (int i = 0; i < t->hw && len + 16 < sizeof who; i++)
      if (t->slots[i].abandoned && t->slots[i].is_recv)
        len += (size_t)snprintf(who + len, sizeof who - len, "%s%d", len ? "," : "", t->slots[i].peer);
    WF_WARN(WF_SUB_ENGINE, "MPI transport: %d cancelled receive(s) (from rank(s) %s) neither confirmed cancelled "
            "nor completed within %g s (a peer failed in the middle of a transfer?): MPI still holds them",
            t->abandoned_recvs, who, CANCEL_RECV_WAIT_NS / 1e9);
  }
  else if (t->nabandoned)
    WF_DEBUG(WF_SUB_ENGINE, "MPI transport: %d unmatched send(s) left with MPI after the cancellation",
             t->nabandoned);
  for (int p = 0; p < t->cfg.size; p++)
    if (t->depart_by[p]) t->depart_by[p] = INT64_MAX; /* nothing left to check */
}

/* The engine asks once, when peer says goodbye on TCP (after its last
 * transfer completed on its side). A send to it will never be received: 1.
 * Receives from it may still be on their way through MPI: 0, and progress
 * fails the world if they have not landed within DEPART_WAIT_NS. */
static int mpi_incomplete(wf_transport *tr, int peer) {
  wf_mpi_tr *t = (wf_mpi_tr *)tr;
  if (peer < 0 || peer >= t->cfg.size) return 0;
  wf_mpi_tr_progress(t); /* one non-blocking pass */
  t->depart_by[peer] = wf_now_ns() + DEPART_WAIT_NS;
  if (!t->per_peer[peer]) return 0;
  for (int i = 0; i < t->hw; i++)
    if (t->slots[i].pending && !t->slots[i].abandoned && t->slots[i].peer == peer && !t->slots[i].is_recv) return 1;
  return 0;
}

static const wf_transport_ops mpi_ops = {
    .name = "mpi",
    .send = mpi_send,
    .recv = mpi_recv,
    .cancel_data = mpi_cancel,
    .incomplete = mpi_incomplete,
};

weft_status wf_mpi_tr_create(wf_mpi_comm *c, const wf_mpi_tr_cfg *cfg, wf_mpi_tr **out) {
  *out = NULL;
  if (!c) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "MPI transport: no MPI communicator");
  if (!wf_mpi_comm_multiple(c))
    return wf_err(WEFT_ERR_NOT_SUPPORTED,
                  "WEFT_TRANSPORT=mpi needs MPI_THREAD_MULTIPLE (weft's engine thread calls MPI), but MPI provides "
                  "less: initialise MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE), or use WEFT_TRANSPORT=tcp");
  wf_mpi_tr *t = calloc(1, sizeof *t);
  if (!t) return wf_err(WEFT_ERR_NO_MEMORY, "MPI transport: out of memory");
  t->per_peer = calloc((size_t)cfg->size, sizeof *t->per_peer);
  t->depart_by = calloc((size_t)cfg->size, sizeof *t->depart_by);
  if (!t->per_peer || !t->depart_by) {
    free(t->per_peer);
    free(t->depart_by);
    free(t);
    return wf_err(WEFT_ERR_NO_MEMORY, "MPI transport: out of memory");
  }
  t->base.ops = &mpi_ops;
  t->comm = wf_mpi_comm_handle(c);
  t->cfg = *cfg;
  int *ub = NULL, flag = 0;
  MPI_Comm_get_attr(t->comm, MPI_TAG_UB, &ub, &flag);
  t->tag_ub = flag && ub ? *ub : 32767;
  t->tag_shift = (uint64_t)t->tag_ub >= ((1ull << (24 + TAG_SEQ_BITS)) - 1) ? TAG_SEQ_BITS : 0;
  WF_INFO(WF_SUB_ENGINE, "MPI transport up (MPI_TAG_UB %d)", t->tag_ub);
  *out = t;
  return WEFT_OK;
}

void wf_mpi_tr_destroy(wf_mpi_tr *t) {
  if (!t) return;
  mpi_cancel(&t->base);
  /* the last chance to test them: MPI keeps what it still holds */
  for (int i = 0; i < t->hw; i++)
    if (t->slots[i].abandoned && t->reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&t->reqs[i]);
  free(t->reqs);
  free(t->slots);
  free(t->free_idx);
  free(t->idx);
  free(t->sts);
  free(t->per_peer);
  free(t->depart_by);
  free(t);
}

wf_transport *wf_mpi_tr_transport(wf_mpi_tr *t) { return &t->base; }

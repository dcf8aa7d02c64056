/* coord.c - the coordinator's message table: name -> every rank's request.
 * A tensor becomes ready when the last rank's request arrives; it is then
 * validated (validate.c) and turned into an OK or ERROR response with the
 * next sequence number. Entries that wait too long for some rank become
 * ERROR responses naming the missing ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/coord.h"
#include "negotiate/cache.h"
#include "util/log.h"
#include "util/params.h"
#include "util/strmap.h"
#include "util/time.h"

typedef struct entry {
  wf_request_msg *reqs; /* size entries */
  uint8_t *have;        /* size flags */
  int count;
  int64_t deadline;     /* negotiation fails after this (timeout / stall shutdown) */
  int64_t first_ns;     /* when the first rank's request arrived */
  int64_t next_warn;    /* next stall report */
} entry;

/* The coordinator's response-cache payload for a name: every member's
 * request as last negotiated (have[r] 0: rank r had joined). */
typedef struct cpay {
  int size;
  wf_request_msg *reqs;
  uint8_t *have;
} cpay;

static void cpay_free(void *p) {
  cpay *c = p;
  if (!c) return;
  for (int r = 0; r < c->size; r++) free(c->reqs[r].splits);
  free(c->reqs);
  free(c->have);
  free(c);
}

/* What fusion and ordering need to know about a ready response. */
typedef struct meta {
  int32_t priority;
  uint64_t bytes;
  uint8_t dtype, reduce_op;
  double prescale, postscale;
  cpay *pay;            /* for the response cache (assigned in response order, at take) */
} meta;

struct wf_coord {
  int size;
  const int *ranks; /* group rank -> world rank (messages name world ranks); NULL: identity */
  double timeout;
  double stall_check, stall_shutdown;
  wf_stall_fn on_stall;
  void *stall_ctx;
  wf_strmap table;
  uint64_t next_seq;
  wf_response_msg *ready; /* seq not yet assigned */
  meta *meta;
  size_t nready, cap;
  uint8_t *departed; /* per rank: said BYE */
  uint8_t *joined;   /* per rank: weft_join pending */
  int njoined, last_joined;
  char join_name[WF_NAME_MAX + 1];
  wf_cache *cache;   /* response cache (NULL: WEFT_CACHE_CAPACITY=0) */
};

weft_status wf_coord_create(int size, const int *ranks, double timeout_seconds, wf_coord **out) {
  wf_coord *c = calloc(1, sizeof *c);
  if (!c) return WEFT_ERR_NO_MEMORY;
  c->size = size;
  c->ranks = ranks;
  c->timeout = timeout_seconds;
  c->stall_check = wf_param_int("WEFT_STALL_CHECK_DISABLE") ? 0 : wf_param_double("WEFT_STALL_CHECK_SECONDS");
  c->stall_shutdown = wf_param_double("WEFT_STALL_SHUTDOWN_SECONDS");
  /* a stall shutdown shortens the negotiation deadline */
  if (c->stall_shutdown > 0 && c->stall_shutdown < c->timeout) c->timeout = c->stall_shutdown;
  c->departed = calloc((size_t)size, 1);
  c->joined = calloc((size_t)size, 1);
  if (!c->departed || !c->joined) {
    free(c->departed);
    free(c->joined);
    free(c);
    return WEFT_ERR_NO_MEMORY;
  }
  wf_strmap_init(&c->table);
  /* the coordinator keeps every member's request per entry: at most 64 MiB
   * of them (a smaller cache than the members' only costs RESENDs) */
  uint32_t cap = wf_cache_capacity_param();
  size_t fit = ((size_t)64 << 20) / ((size_t)size * sizeof(wf_request_msg));
  if (cap > fit) cap = fit > 0 ? (uint32_t)fit : 1;
  c->cache = wf_cache_create(cap, cpay_free);
  *out = c;
  return WEFT_OK;
}

static void entry_free(entry *e, int size) {
  if (!e) return;
  for (int r = 0; e->reqs && r < size; r++) free(e->reqs[r].splits);
  free(e->reqs);
  free(e->have);
  free(e);
}

void wf_coord_destroy(wf_coord *c) {
  if (!c) return;
  for (size_t i = 0; i < c->table.cap; i++) {
    wf_strmap_entry *s = &c->table.slots[i];
    if (s->key && !s->tomb) entry_free(s->val, c->size);
  }
  wf_strmap_free(&c->table);
  for (size_t i = 0; i < c->nready; i++) {
    wf_response_msg_free(&c->ready[i]);
    cpay_free(c->meta[i].pay);
  }
  wf_cache_destroy(c->cache);
  free(c->ready);
  free(c->meta);
  free(c->departed);
  free(c->joined);
  free(c);
}

/* Appends a response for name (seq assigned at take time); takes resp's
 * arrays. m may be NULL (errors: never fused, priority 0). */
/* the world rank of group rank r, for messages */
static int WR(const wf_coord *c, int r) { return c->ranks ? c->ranks[r] : r; }

static void emit(wf_coord *c, wf_response_msg *resp, const char *name, const meta *m) {
  if (c->nready == c->cap) {
    size_t ncap = c->cap ? c->cap * 2 : 16;
    wf_response_msg *n = realloc(c->ready, ncap * sizeof *n);
    if (n) c->ready = n;
    meta *nm = n ? realloc(c->meta, ncap * sizeof *nm) : NULL;
    if (nm) c->meta = nm;
    if (!n || !nm) {
      WF_WARN(WF_SUB_COORD, "out of memory queueing the response for '%s'", name);
      wf_response_msg_free(resp);
      if (m) cpay_free(m->pay);
      return;
    }
    c->cap = ncap;
  }
  resp->names = malloc(sizeof(char *));
  if (resp->names) resp->names[0] = strdup(name);
  if (!resp->names || !resp->names[0]) {
    WF_WARN(WF_SUB_COORD, "out of memory building the response for '%s'", name);
    free(resp->names);
    resp->names = NULL;
    resp->nnames = 0;
  } else {
    resp->nnames = 1;
  }
  meta none = {0, 0, 0, 0, 1.0, 1.0, NULL};
  c->meta[c->nready] = m ? *m : none;
  c->ready[c->nready++] = *resp;
}

static void emit_error(wf_coord *c, uint8_t coll, const char *name, weft_status st, const char *msg) {
  wf_response_msg resp;
  memset(&resp, 0, sizeof resp);
  resp.type = WF_RESP_ERROR;
  resp.coll = coll;
  resp.status = st;
  resp.error = strdup(msg);
  emit(c, &resp, name, NULL);
}

/* Validates the entry (ranks that joined stand in with the first request
 * present: they take part with the operation's identity) and emits its
 * response. */
static void finish(wf_coord *c, const char *name, entry *e) {
  const wf_request_msg **reqs = malloc(sizeof *reqs * (size_t)c->size);
  wf_response_msg resp;
  memset(&resp, 0, sizeof resp);
  char err[WF_ERRMSG_MAX];
  const wf_request_msg *q = NULL;
  for (int r = 0; r < c->size && !q; r++)
    if (e->have[r]) q = &e->reqs[r];
  if (!reqs) {
    emit_error(c, q->coll, name, WEFT_ERR_NO_MEMORY, "out of memory at the coordinator");
  } else {
    for (int r = 0; r < c->size; r++) reqs[r] = e->have[r] ? &e->reqs[r] : q;
    weft_status st = wf_validate(reqs, c->size, c->ranks, &resp, err, sizeof err);
    if (st == WEFT_OK && q->coll == WF_COLL_ALLREDUCE) {
      /* what a joined rank needs to take part: dtype, op, element count */
      resp.sizes = malloc(3 * sizeof(int64_t));
      if (!resp.sizes) {
        st = WEFT_ERR_NO_MEMORY;
        snprintf(err, sizeof err, "tensor '%s': out of memory at the coordinator", name);
      } else {
        int64_t n = 1;
        for (int d = 0; d < q->ndim; d++) n *= q->shape[d];
        resp.sizes[0] = q->dtype;
        resp.sizes[1] = q->reduce_op;
        resp.sizes[2] = n;
        resp.nsizes = 3;
      }
    }
    if (st != WEFT_OK) {
      free(resp.sizes);
      WF_INFO(WF_SUB_COORD, "%s", err);
      emit_error(c, q->coll, name, st, err);
    } else {
      resp.type = WF_RESP_OK;
      resp.coll = q->coll;
      meta m = {q->priority, weft_dtype_size(q->dtype), q->dtype, q->reduce_op, q->prescale, q->postscale, NULL};
      for (int d = 0; d < q->ndim; d++) m.bytes *= (uint64_t)q->shape[d];
      if (q->coll == WF_COLL_ALLGATHER && q->ndim >= 1) { /* fusion holds every rank's rows */
        uint64_t rows = 0, row = weft_dtype_size(q->dtype);
        for (int d = 1; d < q->ndim; d++) row *= (uint64_t)q->shape[d];
        for (uint32_t r = 0; r < resp.nsizes; r++) rows += (uint64_t)resp.sizes[r];
        m.bytes = rows * row;
      }
      for (int r = 0; r < c->size; r++)
        if (e->have[r] && e->reqs[r].priority > m.priority) m.priority = e->reqs[r].priority;
      if (c->cache && wf_cache_assigns(&resp) && (m.pay = malloc(sizeof *m.pay))) {
        /* the requests move to the cache payload (entry_free skips them) */
        m.pay->size = c->size;
        m.pay->reqs = e->reqs;
        m.pay->have = e->have;
        e->reqs = NULL;
        e->have = NULL;
      }
      emit(c, &resp, name, &m);
    }
  }
  free(reqs);
  wf_strmap_del(&c->table, name);
  entry_free(e, c->size);
}

/* Completes the entry if every rank has submitted it or joined. Returns 1
 * if the entry is gone. */
static int try_complete(wf_coord *c, const char *name, entry *e) {
  if (e->count == c->size) {
    finish(c, name, e);
    return 1;
  }
  int waiting = 0;
  for (int r = 0; r < c->size; r++) waiting += !e->have[r] && !c->joined[r];
  if (waiting || !c->njoined) return 0;
  uint8_t coll = 0;
  for (int r = 0; r < c->size; r++)
    if (e->have[r]) coll = e->reqs[r].coll;
  if (coll == WF_COLL_ALLREDUCE || coll == WF_COLL_BARRIER) {
    finish(c, name, e);
    return 1;
  }
  char list[512], msg[WF_ERRMSG_MAX];
  size_t k = 0;
  for (int r = 0; r < c->size && k < sizeof list; r++)
    if (c->joined[r] && !e->have[r]) k += (size_t)snprintf(list + k, sizeof list - k, k ? ", %d" : "%d", WR(c, r));
  snprintf(msg, sizeof msg,
           "tensor '%s': %s is not possible while rank(s) %s have joined (weft_join): only allreduce and barrier can "
           "complete without them",
           name, wf_coll_name(coll), list);
  emit_error(c, coll, name, WEFT_ERR_INVALID_ARGUMENT, msg);
  wf_strmap_del(&c->table, name);
  entry_free(e, c->size);
  return 1;
}

/* rank called weft_join: it takes part in the others' allreduces with the
 * identity. When every rank has joined, the join completes everywhere with
 * the rank that joined last. */
static void add_join(wf_coord *c, int rank, const wf_request_msg *m) {
  if (c->joined[rank]) {
    char msg[256];
    snprintf(msg, sizeof msg, "rank %d joined twice", WR(c, rank));
    emit_error(c, WF_COLL_JOIN, m->name, WEFT_ERR_PROTOCOL, msg);
    return;
  }
  c->joined[rank] = 1;
  c->njoined++;
  c->last_joined = rank;
  snprintf(c->join_name, sizeof c->join_name, "%s", m->name);
  if (c->njoined == c->size) {
    wf_response_msg resp;
    memset(&resp, 0, sizeof resp);
    resp.type = WF_RESP_OK;
    resp.coll = WF_COLL_JOIN;
    resp.sizes = malloc(sizeof(int64_t));
    if (resp.sizes) {
      resp.sizes[0] = c->last_joined; /* a group rank, like every rank the API returns for a group */
      resp.nsizes = 1;
    }
    emit(c, &resp, c->join_name, NULL);
    memset(c->joined, 0, (size_t)c->size);
    c->njoined = 0;
    return;
  }
  /* entries that only waited for this rank can now complete (or fail) */
  for (size_t i = 0; i < c->table.cap; i++) {
    wf_strmap_entry *s = &c->table.slots[i];
    if (!s->key || s->tomb) continue;
    char *key = strdup(s->key);
    if (!key) continue;
    try_complete(c, key, s->val);
    free(key);
  }
}

static void fail_departed(wf_coord *c, const char *name, entry *e, int gone) {
  char msg[512];
  snprintf(msg, sizeof msg, "tensor '%s': rank %d has shut down (weft_finalize) without submitting it", name,
           WR(c, gone));
  uint8_t coll = 0;
  for (int r = 0; r < c->size; r++)
    if (e->have[r]) coll = e->reqs[r].coll;
  emit_error(c, coll, name, WEFT_ERR_PEER_LOST, msg);
  wf_strmap_del(&c->table, name);
  entry_free(e, c->size);
}

void wf_coord_add(wf_coord *c, int rank, const wf_request_msg *m) {
  if (m->coll == WF_COLL_JOIN) {
    add_join(c, rank, m);
    return;
  }
  entry *e = wf_strmap_get(&c->table, m->name);
  if (!e) {
    e = calloc(1, sizeof *e);
    if (e) {
      e->reqs = calloc((size_t)c->size, sizeof *e->reqs);
      e->have = calloc((size_t)c->size, 1);
    }
    if (!e || !e->reqs || !e->have || wf_strmap_put(&c->table, m->name, e)) {
      entry_free(e, c->size);
      emit_error(c, m->coll, m->name, WEFT_ERR_NO_MEMORY, "out of memory at the coordinator");
      return;
    }
    e->deadline = wf_deadline_after(c->timeout);
    e->first_ns = wf_now_ns();
    e->next_warn = c->stall_check > 0 ? e->first_ns + (int64_t)(c->stall_check * 1e9) : INT64_MAX;
  }
  if (e->have[rank]) {
    char msg[512];
    snprintf(msg, sizeof msg, "tensor '%s': rank %d submitted it twice while it was in flight", m->name, WR(c, rank));
    emit_error(c, m->coll, m->name, WEFT_ERR_PROTOCOL, msg);
    wf_strmap_del(&c->table, m->name);
    entry_free(e, c->size);
    return;
  }
  e->reqs[rank] = *m;
  e->reqs[rank].splits = NULL;
  if (m->nsplits) {
    e->reqs[rank].splits = malloc(sizeof(int64_t) * m->nsplits);
    if (!e->reqs[rank].splits) {
      emit_error(c, m->coll, m->name, WEFT_ERR_NO_MEMORY, "out of memory at the coordinator");
      return;
    }
    memcpy(e->reqs[rank].splits, m->splits, sizeof(int64_t) * m->nsplits);
  }
  e->have[rank] = 1;
  e->count++;
  if (try_complete(c, m->name, e)) return;
  for (int r = 0; r < c->size; r++)
    if (c->departed[r] && !e->have[r]) {
      fail_departed(c, m->name, e, r);
      return;
    }
}

void wf_coord_rank_departed(wf_coord *c, int rank) {
  c->departed[rank] = 1;
  for (size_t i = 0; i < c->table.cap; i++) {
    wf_strmap_entry *s = &c->table.slots[i];
    if (!s->key || s->tomb || ((entry *)s->val)->have[rank]) continue;
    char *key = strdup(s->key);
    if (!key) continue;
    fail_departed(c, key, s->val, rank);
    free(key);
  }
}

/* Can response j join the fused response that starts at i (and has j - i
 * tensors)? Allreduces and reducescatters: same dtype, op and scales;
 * allgathers: same dtype (their per-tensor, per-rank row counts must fit
 * one response's sizes). */
static int fusable(const wf_coord *c, size_t i, size_t j, uint64_t total, uint64_t threshold) {
  const wf_response_msg *a = &c->ready[i], *b = &c->ready[j];
  const meta *ma = &c->meta[i], *mb = &c->meta[j];
  if (a->type != WF_RESP_OK || b->type != WF_RESP_OK || a->coll != b->coll || a->group_id != b->group_id ||
      ma->dtype != mb->dtype || total + mb->bytes > threshold)
    return 0;
  switch (a->coll) {
    case WF_COLL_ALLREDUCE:
    case WF_COLL_REDUCESCATTER:
      return ma->reduce_op == mb->reduce_op && ma->prescale == mb->prescale && ma->postscale == mb->postscale;
    case WF_COLL_ALLGATHER:
      return a->nsizes == b->nsizes && (uint64_t)(j - i + 1) * b->nsizes <= WF_MAX_RANKS;
    default:
      return 0;
  }
}

size_t wf_coord_take(wf_coord *c, uint64_t fusion_threshold, wf_response_msg **out) {
  size_t n = c->nready;
  *out = NULL;
  if (!n) return 0;
  /* Higher priority first; among equals, the order they became ready
   * (insertion sort: stable, and batches are small). */
  for (size_t i = 1; i < n; i++) {
    wf_response_msg r = c->ready[i];
    meta m = c->meta[i];
    size_t j = i;
    while (j > 0 && c->meta[j - 1].priority < m.priority) {
      c->ready[j] = c->ready[j - 1];
      c->meta[j] = c->meta[j - 1];
      j--;
    }
    c->ready[j] = r;
    c->meta[j] = m;
  }
  /* The response cache's assignments, in response order (fusion below
   * keeps the order of names). */
  for (size_t i = 0; i < n; i++) {
    if (c->cache && c->ready[i].nnames && wf_cache_assigns(&c->ready[i])) {
      uint64_t epoch;
      wf_cache_assign(c->cache, c->ready[i].names[0], c->meta[i].pay, &epoch); /* takes the payload */
    } else {
      cpay_free(c->meta[i].pay);
    }
    c->meta[i].pay = NULL;
  }
  /* Fusion: consecutive compatible allreduces become one response naming
   * them all, up to the threshold. */
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    uint64_t total = c->meta[i].bytes;
    while (j < n && j - i < 4096 && fusable(c, i, j, total, fusion_threshold)) total += c->meta[j++].bytes;
    wf_response_msg r = c->ready[i];
    if (j > i + 1) {
      /* sizes: allreduce: dtype, op, then each tensor's count; allgather:
       * each tensor's rows per rank, tensor after tensor; reducescatter: none */
      int ar = r.coll == WF_COLL_ALLREDUCE;
      size_t nsizes = r.nsizes;
      for (size_t m = i + 1; m < j; m++) nsizes += ar ? 1 : c->ready[m].nsizes;
      char **names = realloc(r.names, sizeof(char *) * (j - i));
      if (names) r.names = names;
      int64_t *sizes = r.sizes;
      if (names && nsizes) sizes = realloc(r.sizes, sizeof(int64_t) * nsizes);
      if (!names || (nsizes && !sizes)) {
        j = i + 1; /* no memory to fuse: send it alone */
      } else {
        r.sizes = sizes;
        for (size_t m = i + 1; m < j; m++) {
          const wf_response_msg *q = &c->ready[m];
          r.names[r.nnames++] = q->names[0];
          if (ar) r.sizes[r.nsizes++] = q->sizes && q->nsizes >= 3 ? q->sizes[2] : 0;
          else
            for (uint32_t z = 0; z < q->nsizes; z++) r.sizes[r.nsizes++] = q->sizes[z];
          c->ready[m].names[0] = NULL;
          wf_response_msg_free(&c->ready[m]);
        }
      }
    }
    r.seq = c->next_seq++;
    c->ready[k++] = r;
    i = j;
  }
  *out = c->ready;
  c->ready = NULL;
  free(c->meta);
  c->meta = NULL;
  c->nready = c->cap = 0;
  return k;
}

void wf_coord_set_stall_handler(wf_coord *c, wf_stall_fn fn, void *ctx) {
  c->on_stall = fn;
  c->stall_ctx = ctx;
}

/* Lists the ranks with (want = 1) or without (want = 0) a request. */
static size_t rank_list(const wf_coord *c, const entry *e, int want, char *out, size_t n) {
  size_t k = 0;
  int first = 1;
  out[0] = '\0';
  for (int r = 0; r < c->size && k < n; r++)
    if (!!e->have[r] == want) {
      k += (size_t)snprintf(out + k, n - k, first ? "%d" : ", %d", WR(c, r));
      first = 0;
    }
  return k;
}

/* The stall inspector: a tensor some ranks submitted long ago and others
 * never did is reported, naming exactly which ranks are missing, at rank 0
 * and (through on_stall) on every rank that waits for it. */
static void stall_report(wf_coord *c, const char *name, entry *e, int64_t now) {
  char have[512], missing[512], msg[WF_ERRMSG_MAX];
  rank_list(c, e, 1, have, sizeof have);
  rank_list(c, e, 0, missing, sizeof missing);
  uint8_t coll = 0;
  for (int r = 0; r < c->size; r++)
    if (e->have[r]) coll = e->reqs[r].coll;
  snprintf(msg, sizeof msg,
           "stalled: tensor '%s' (%s) was submitted by rank(s) %s %.0f s ago and is waiting for rank(s) %s to submit "
           "it%s",
           name, wf_coll_name(coll), have, (now - e->first_ns) / 1e9, missing,
           c->stall_shutdown > 0 ? "; it will fail at the stall shutdown time" : "");
  WF_WARN(WF_SUB_COORD, "%s", msg);
  if (c->on_stall) c->on_stall(c->stall_ctx, msg, e->have);
  e->next_warn = now + (int64_t)(c->stall_check * 1e9);
}

void wf_coord_check_timeouts(wf_coord *c, int64_t now) {
  for (size_t i = 0; i < c->table.cap; i++) {
    wf_strmap_entry *s = &c->table.slots[i];
    if (!s->key || s->tomb) continue;
    entry *e = s->val;
    if (e->next_warn <= now && e->deadline > now) stall_report(c, s->key, e, now);
    if (e->deadline > now) continue;
    char msg[WF_ERRMSG_MAX];
    size_t k = (size_t)snprintf(msg, sizeof msg, "tensor '%s': timed out after %g s waiting for rank(s) ", s->key,
                                c->timeout);
    int first = 1;
    for (int r = 0; r < c->size && k < sizeof msg; r++)
      if (!e->have[r]) {
        k += (size_t)snprintf(msg + k, sizeof msg - k, first ? "%d" : ", %d", WR(c, r));
        first = 0;
      }
    if (k < sizeof msg) snprintf(msg + k, sizeof msg - k, " to submit it");
    WF_WARN(WF_SUB_COORD, "%s", msg);
    uint8_t coll = 0;
    for (int r = 0; r < c->size; r++)
      if (e->have[r]) coll = e->reqs[r].coll;
    char *key = strdup(s->key);
    if (!key) continue;
    emit_error(c, coll, key, WEFT_ERR_TIMEOUT, msg);
    wf_strmap_del(&c->table, key);
    entry_free(e, c->size);
    free(key);
  }
}

int64_t wf_coord_next_deadline(const wf_coord *c) {
  int64_t d = INT64_MAX;
  for (size_t i = 0; i < c->table.cap; i++) {
    const wf_strmap_entry *s = &c->table.slots[i];
    if (!s->key || s->tomb) continue;
    const entry *e = s->val;
    if (e->deadline < d) d = e->deadline;
    if (e->next_warn < d) d = e->next_warn;
  }
  return d;
}

size_t wf_coord_pending(const wf_coord *c) { return c->table.len; }

const wf_request_msg *wf_coord_cached(wf_coord *c, int rank, uint32_t id, uint64_t epoch) {
  if (!c->cache || rank < 0 || rank >= c->size) return NULL;
  const cpay *p = wf_cache_by_id(c->cache, id, epoch, NULL);
  return p && p->have[rank] ? &p->reqs[rank] : NULL;
}

/* fuzz_coord.c - libFuzzer target for the coordinator (src/negotiate:
 * coord.c, coord_take.c, coord_unit.c, cache.c, validate.c), driven in one
 * process through its real entry points, as the engine drives it
 * (src/engine/inbox.c, engine.c): the input is decoded into a world of 1..6
 * ranks (the coordinator is group rank 0; a process set's group -> world
 * rank map or none; response cache off or 1..3 or 1024 entries; the fusion
 * hold on or off; a small WEFT_FUSION_PACK_MAX_BYTES; the stall inspector
 * and a stall shutdown; members mode, below) and a sequence of control
 * messages and events:
 *   REQUESTS  1..3 requests from one rank, structurally valid (they are
 *             encoded and decoded with the real wire code, and what the
 *             decoder hands back goes to wf_coord_add), with names from a
 *             small pool (grouped-op children "u.0".."u.2" among them) or
 *             arbitrary, any collective (JOIN too), dtype, reduce op,
 *             shape, root, device, priority, unit, scales and splits
 *   ALL       one request template submitted by every rank, in some order,
 *             maybe with per-rank rows / splits (so negotiations complete)
 *   CACHED    a reference (id, epoch) from a member: the one the name got
 *             at its last assignment (tracked with a mirror of the cache,
 *             run in response order as a member does), or one near the
 *             current epoch, or arbitrary; a RESEND is answered with the
 *             full request, sometimes
 *   ALLC      a template from rank 0 in full and CACHED from the others
 *   BYE       a member departs (wf_coord_rank_departed), maybe twice
 *   TAKE      wf_coord_take with a threshold of 0, 64 bytes, 4 KiB or 128 MiB
 *   TIME      the (virtual: wf_now_ns is this file's) clock advances by
 *             0 s .. past the timeout; wf_coord_check_timeouts
 *   DELIVER   members mode: a member handles the next responses on their
 *             way to it
 * The coordinator's own rank (0) submits what the API lets through (finite
 * scales, CPU, a shape that fits memory, a root in the group, one split per
 * rank); the members send anything the decoder accepts. In members mode the
 * members also run their side of the response cache (negotiate/cache.c,
 * each with a capacity of its own) as the engine does: a request goes by
 * reference when its cache holds it, a RESEND (handled after some of the
 * responses on their way) sends it in full, each response updates the
 * member's cache when the member gets it (later than the coordinator: a
 * queue per member), a member never has two requests for a name in
 * flight, and a member that joined submits nothing until it has the join's
 * response (weft_join blocks it).
 *
 * Properties checked on every response (a violation aborts, so libFuzzer
 * keeps the input), whatever the members send:
 *  - sequence numbers run 0, 1, 2, ... across takes;
 *  - the response encodes (wf_encode_responses: the engine could not send
 *    it otherwise, and every member would wait for it);
 *  - an OK response of a tensor collective names only tensors that every
 *    rank requested (each request used by one OK response at most), a rank
 *    that joined standing in only for allreduce and barrier; its
 *    sizes have the shape members index them by (allreduce: dtype, op, one
 *    count per tensor; allgather: one row count per rank per tensor;
 *    alltoall: size x size; others none); only allreduce, allgather and
 *    reducescatter fuse;
 *  - an OK JOIN comes once every rank joined, naming the last to join; an
 *    OK allreduce or barrier counts on a joined rank standing in only until
 *    the OK of its join (after it, the rank has moved on: the response
 *    would name a tensor it never submitted);
 *  - an ERROR names one tensor that some rank requested (or a join), and
 *    its message quotes that name (JOIN errors aside);
 *  - a CACHED reference resolves only to a name that was assigned; a
 *    member's reference resolves to exactly the tensor it named, and to the
 *    member's own request for it; a RESEND names a reference the member
 *    still has pending;
 *  - while anything is pending or held, wf_coord_next_deadline is within
 *    the timeout (the engine sleeps until then: a later one would hang);
 *  - stall reports name a tensor some ranks have and some have not sent;
 *  - at the end, with the clock past every deadline, nothing is pending,
 *    held or ready, every tensor that some rank requested got a response,
 *    and every member request got one (failures never hang).
 * Crashes, leaks, out-of-bounds accesses and UB are the sanitizers' to report. */
/* Its files: this one (the run, the members, the seeds), fuzz_coord.h (the
 * model), fuzz_coord_input.c (requests from the input), fuzz_coord_check.c
 * (the oracle and the checks). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_coord.h"
#include "util/settings.h"

/* ------------------------------------------------------------ the clock */
/* The coordinator's (wf_coord_set_clock): every run is deterministic, and
 * TIME moves it. */
int64_t g_now;
static int64_t fz_clock(void *ctx) {
  (void)ctx;
  return g_now;
}

/* ------------------------------------------------------------ allocation failures */
/* Header bit f:7 reads one more byte: bit 6 makes allocations inside the
 * coordinator's entry points fail (every period-th, period 2..65 from bits
 * 0-5; the target links with -Wl,--wrap for malloc, calloc, realloc and
 * strdup); bit 7 destroys the coordinator with whatever it holds instead
 * of draining it (a finalize mid-negotiation). With failures the
 * coordinator may drop a response (loudly; that tensor then times out on
 * its members), so the end-of-run liveness checks are off; everything else
 * holds, a member's reference resolving to its own tensor and request above
 * all. */
void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);

int g_oom;         /* this run has allocation failures */
static int g_armed;      /* inside a coordinator entry point */
unsigned g_period; /* 0: no failures */
static unsigned g_allocs;
static int fail_now(void) { return g_armed && g_period && ++g_allocs % g_period == 0; }
void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return fail_now() ? NULL : __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return fail_now() ? NULL : __real_strdup(s); }
#define COORD(call) (g_armed = 1, (call), g_armed = 0)
#define COORD_V(var, call) (g_armed = 1, (var) = (call), g_armed = 0)

/* ------------------------------------------------------------ the model (fuzz_coord.h) */
fz_model S;
member g_mem[MAXN];

rec *find_rec(const char *name) {
  for (int i = 0; i < S.nrecs; i++)
    if (!strcmp(S.recs[i].name, name)) return &S.recs[i];
  return NULL;
}

rec *get_rec(const char *name) {
  rec *r = find_rec(name);
  if (r || S.nrecs == MAX_RECS) return r;
  r = &S.recs[S.nrecs++];
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", name);
  return r;
}

/* ------------------------------------------------------------ feeding the coordinator */
int g_debug; /* FZ_COORD_DEBUG=1: print requests and responses (to see what an input does) */

static void note_request(int rank, const wf_request_msg *m) {
  rec *r = get_rec(m->name);
  if (!r) fz_fail("model: out of records");
  if (m->coll != WF_COLL_JOIN) {
    r->sub[rank]++;
    return;
  }
  r->join = 1;
  if (S.joined_now[rank]) return; /* joined twice: an error for the join */
  S.joined_now[rank] = S.joined_ever[rank] = 1;
  S.join_done[rank] = 0;
  S.last_joined = rank;
  if (++S.njoined == S.n) {
    S.last_joined_at[(S.join_head + S.join_oks++) % 2048] = rank;
    memset(S.joined_now, 0, sizeof S.joined_now);
    S.njoined = 0;
  }
}

/* Sends reqs from rank as the engine receives them: one REQUESTS frame,
 * encoded and decoded by the wire code, each decoded request handed to
 * wf_coord_add (and its splits freed, as inbox.c does). */
static void send_requests(int rank, wf_request_msg *reqs, uint32_t count) {
  wf_buf b = {0};
  char err[256];
  /* a name the model cannot record is not sent */
  for (uint32_t i = 0; i < count; i++)
    if (!get_rec(reqs[i].name)) return;
  if (wf_encode_requests(&b, (uint32_t)rank, reqs, count) != WEFT_OK || b.oom)
    fz_fail("a valid REQUESTS was rejected by the encoder: %s", weft_last_error());
  wf_requests_msg m;
  if (wf_decode_requests(b.data + WF_FRAME_HDR_SIZE, b.len - WF_FRAME_HDR_SIZE, &m, err, sizeof err) != WEFT_OK)
    fz_fail("a valid REQUESTS does not decode: %s", err);
  wf_buf_free(&b);
  for (uint32_t i = 0; i < m.count; i++) {
    wf_request_msg *q = &m.reqs[i];
    if (g_debug) {
      fprintf(stderr, "rank %d: %s '%s' dtype %u op %u shape", rank, wf_coll_name(q->coll), q->name, q->dtype,
              q->reduce_op);
      for (int d = 0; d < q->ndim; d++) fprintf(stderr, " %lld", (long long)q->shape[d]);
      fprintf(stderr, " root %d prio %d unit %u nsplits %u\n", q->root, q->priority, q->unit, q->nsplits);
    }
    note_request(rank, q);
    COORD(wf_coord_add(S.c, rank, q));
    if (g_debug && q->coll == WF_COLL_JOIN) fprintf(stderr, "  joined: %d of %d, ready %zu\n", S.c->njoined, S.n, S.c->nready);
    free(q->splits);
  }
  free(m.reqs);
}

static void send_cached(int rank, uint32_t id, uint64_t epoch, const wf_request_msg *full_if_resend) {
  const char *name = NULL;
  if (g_debug) fprintf(stderr, "rank %d: CACHED (%u, %llu)\n", rank, id, (unsigned long long)epoch);
  if (id >= WF_CACHE_MAX_IDS || epoch == 0) return; /* the decoder rejects these */
  int got;
  COORD_V(got, wf_coord_add_cached(S.c, rank, id, epoch, &name));
  if (!got) {
    if (full_if_resend) { /* RESEND: the member sends it in full */
      wf_request_msg q = *full_if_resend;
      send_requests(rank, &q, 1);
    }
    return;
  }
  if (!name) fz_fail("CACHED (%u, %llu) resolved without a name", id, (unsigned long long)epoch);
  rec *r = find_rec(name);
  /* (with allocation failures, a response whose assignment ran may be lost) */
  if (!r || (!r->assigned && !g_oom))
    fz_fail("CACHED (%u, %llu) resolved to '%s', which was never assigned", id, (unsigned long long)epoch, name);
  r->sub[rank]++;
}

/* ------------------------------------------------------------ members */
static pend *pending(member *m, const char *name) {
  for (int i = 0; i < m->npend; i++)
    if (!strcmp(m->pend[i].q.name, name)) return &m->pend[i];
  return NULL;
}

static const wf_request_msg *own_request(void *ctx, const char *name) {
  pend *p = pending(ctx, name);
  return p ? &p->q : NULL;
}

/* Member k handles its next n queued responses (in order). */
static void deliver(int k, int n) {
  member *m = &g_mem[k];
  for (; n > 0 && m->qlen > 0; n--) {
    rcopy *c = &m->q[m->qhead];
    if (g_debug) fprintf(stderr, "rank %d gets the response for '%s'%s\n", k, c->names[0], c->nnames > 1 ? " (fused)" : "");
    wf_response_msg r;
    memset(&r, 0, sizeof r);
    r.type = c->type, r.coll = c->coll, r.nnames = c->nnames, r.names = c->names;
    if (c->coll == WF_COLL_JOIN) m->joining = 0;
    int64_t me = k; /* an ERROR decided without k lists it (the rest of its sizes do not matter here) */
    if (c->without) r.nsizes = 1, r.sizes = &me;
    if (m->mc) wf_mcache_response(m->mc, &r, k, own_request, m);
    for (uint32_t i = 0; i < c->nnames; i++) { /* those requests are done (as the engine's exec.c decides) */
      pend *p = c->without ? NULL : pending(m, c->names[i]);
      if (p) *p = m->pend[--m->npend], p->q.splits = p->splits;
      free(c->names[i]);
    }
    free(c->names);
    m->qhead = (m->qhead + 1) % QMAX, m->qlen--;
  }
}

/* Every member gets a copy of a response the coordinator published. */
static void broadcast(const wf_response_msg *r) {
  for (int k = 1; S.members && k < S.n; k++) {
    member *m = &g_mem[k];
    if (m->qlen == QMAX) deliver(k, 1);
    rcopy *c = &m->q[(m->qhead + m->qlen++) % QMAX];
    c->type = r->type, c->coll = r->coll, c->nnames = r->nnames;
    c->without = 0;
    for (uint32_t i = 0; r->type == WF_RESP_ERROR && i < r->nsizes; i++) c->without |= r->sizes[i] == k;
    c->names = malloc(sizeof(char *) * r->nnames);
    if (!c->names) fz_fail("out of memory");
    for (uint32_t i = 0; i < r->nnames; i++)
      if (!(c->names[i] = strdup(r->names[i]))) fz_fail("out of memory");
  }
}

static void send_requests(int rank, wf_request_msg *reqs, uint32_t count);

/* Member k submits q as the engine does: by cache reference if its cache
 * holds exactly q, else in full; a RESEND (handled after `lag` of its
 * queued responses) sends it in full. An honest member never has two
 * requests for one name in flight: then nothing is sent. */
static void member_submit(int k, const wf_request_msg *q, int lag) {
  member *m = &g_mem[k];
  if (S.departed[k] || S.joined_now[k] || m->joining) return; /* gone, or has no more data */
  if (pending(m, q->name) || !get_rec(q->name)) return;
  /* A rank may submit a name while a response for it that is not about its
   * request is on its way (a timeout or a departure that failed the name
   * before the request arrived): that ERROR lists the rank among those it
   * was decided without, and the rank keeps its request pending for the
   * next negotiation (regress-timeout-race). */
  if (m->npend == MAX_PEND) deliver(k, QMAX);
  if (m->npend == MAX_PEND) return;
  pend *p = &m->pend[m->npend++];
  p->q = *q;
  if (q->nsplits) memcpy(p->splits, q->splits, sizeof(int64_t) * q->nsplits);
  p->q.splits = q->nsplits ? p->splits : NULL;
  wf_cache_ref ref;
  if (!m->mc || !wf_mcache_lookup(m->mc, 7, &p->q, &ref)) {
    send_requests(k, &p->q, 1);
    return;
  }
  const char *name = NULL;
  if (g_debug) fprintf(stderr, "rank %d: CACHED (%u, %llu) for '%s'\n", k, ref.id, (unsigned long long)ref.epoch, q->name);
  /* what the coordinator will take it for: its cache's request of rank k
   * under (id, epoch), if it still holds that assignment */
  const char *held = NULL;
  const rblock *h = S.c->cache ? wf_cache_by_id(S.c->cache, ref.id, ref.epoch, &held) : NULL;
  if (h && h->have[k] && (strcmp(held, q->name) || !wf_req_same(&h->reqs[k], q)))
    fz_fail("rank %d's reference (%u, %llu) for '%s' stands for %s request for '%s' at the coordinator", k, ref.id,
            (unsigned long long)ref.epoch, q->name, strcmp(held, q->name) ? "a" : "another", held);
  int got;
  COORD_V(got, wf_coord_add_cached(S.c, k, ref.id, ref.epoch, &name));
  if (got) {
    /* an id is never mistaken for another tensor's, and the request it
     * stands for is the member's own (cache.h) */
    if (!name || strcmp(name, q->name))
      fz_fail("rank %d's reference (%u, %llu) for '%s' resolved to '%s'", k, ref.id, (unsigned long long)ref.epoch,
              q->name, name ? name : "(null)");
    rec *r = find_rec(name);
    r->sub[k]++;
    return;
  }
  deliver(k, lag); /* the RESEND comes after what was on its way */
  char again[WF_NAME_MAX + 1];
  int known = wf_mcache_resend(m->mc, &ref, again);
  if (!pending(m, q->name)) return; /* a response for the name came first: done with it */
  if (!known) fz_fail("rank %d lost its pending reference (%u, %llu) for '%s'", k, ref.id, (unsigned long long)ref.epoch,
                      q->name);
  if (strcmp(again, q->name)) fz_fail("RESEND for rank %d's '%s' names '%s'", k, q->name, again);
  send_requests(k, &pending(m, q->name)->q, 1);
}

/* A join: in members mode only from a rank that is still there and has
 * not joined already (weft_join is its last word). */
static void send_join(int k, wf_request_msg *q) {
  if (S.members && (S.departed[k] || S.joined_now[k] || g_mem[k].joining)) return;
  if (S.members) g_mem[k].joining = 1;
  send_requests(k, q, 1);
}

/* ------------------------------------------------------------ taking responses */
static size_t take(uint64_t threshold) {
  wf_response_msg *out = NULL;
  size_t nready = S.c->nready;
  size_t n;
  for (size_t i = 0; g_debug && i < S.c->nready; i++)
    fprintf(stderr, "  ready[%zu]: %s %s '%s' prio %d bytes %llu\n", i, S.c->ready[i].resp.type ? "ERROR" : "OK",
            wf_coll_name(S.c->ready[i].resp.coll), S.c->ready[i].name, S.c->ready[i].m.priority,
            (unsigned long long)S.c->ready[i].m.bytes);
  COORD_V(n, wf_coord_take(S.c, threshold, &out));
  if (g_debug) fprintf(stderr, "take (threshold %llu): %zu of %zu ready\n", (unsigned long long)threshold, n, nready);
  if (n == 0 && out) fz_fail("take returned 0 responses and an array");
  for (size_t i = 0; i < n; i++) {
    check_response(&out[i]);
    broadcast(&out[i]);
    if (S.members && out[i].coll == WF_COLL_JOIN) g_mem[0].joining = 0; /* the coordinator's own rank: at once */
    for (uint32_t j = 0; S.members && j < out[i].nnames; j++) { /* the coordinator's own rank: at once */
      pend *p = pending(&g_mem[0], out[i].names[j]);
      if (p) *p = g_mem[0].pend[--g_mem[0].npend], p->q.splits = p->splits;
    }
    wf_response_msg_free(&out[i]);
  }
  free(out);
  if (n == 0 && nready > 0 && !g_oom) { /* held: the engine must be woken in time (no memory: when it next looks) */
    int64_t d = wf_coord_next_deadline(S.c);
    if (d > g_now + HOLD_MAX_NS) fz_fail("holding %zu responses, next deadline %lld ns away", nready, (long long)(d - g_now));
  }
  return n;
}

/* ------------------------------------------------------------ the run */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in = {data, size, 0};
  memset(&S, 0, sizeof S);
  g_now = 1000 * NS;
  S.n = 1 + (int)(fz_take(&in, 1) % MAXN);
  unsigned f = (unsigned)fz_take(&in, 1), g = (unsigned)fz_take(&in, 1);
  unsigned h = f & 0x80 ? (unsigned)fz_take(&in, 1) : 0;
  g_period = h & 0x40 ? 2 + (h & 63) : 0;
  g_oom = g_period != 0;
  g_allocs = 0;
  g_armed = 0;
  int abandon = (h >> 7) & 1;
  S.use_map = f & 1;
  for (int k = 0; k < S.n; k++) S.wranks[k] = 3 * k + 2; /* a process set's world ranks */
  static const uint32_t caps[8] = {0, 1, 2, 3, 1024, 1024, 1024, 1024};
  S.cap = caps[(f >> 1) & 7];
  wf_settings set = *wf_settings_default();
  set.cache_capacity = S.cap;
  set.cycle_time_us = (f >> 4) & 1; /* 0: the fusion hold */
  set.cycle_time_ms = 0;
  set.fusion_pack_max_bytes = (f >> 5) & 1 ? 16 : 1048576;
  set.stall_check_disable = (g & 3) == 3;
  set.stall_check_seconds = (g & 1) ? 5 : 60;
  set.stall_shutdown_seconds = (g & 2) ? 10 : 0;
  if (wf_coord_create_with(S.n, S.use_map ? S.wranks : NULL, TIMEOUT_S, &set, &S.c) != WEFT_OK)
    fz_fail("wf_coord_create_with");
  wf_coord_set_clock(S.c, fz_clock, NULL);
  wf_coord_set_stall_handler(S.c, on_stall, NULL);
  if ((f >> 6) & 1) wf_coord_set_unpacked_allreduce(S.c);
  S.mirror = S.cap ? wf_cache_create(S.cap, NULL) : NULL;
  S.members = (g >> 2) & 1;
  g_mem[0].npend = g_mem[0].qlen = g_mem[0].joining = 0; /* the coordinator's own rank: requests in full, responses at once */
  g_mem[0].mc = NULL;
  for (int k = 1; S.members && k < S.n; k++) { /* a capacity of its own, maybe not the coordinator's */
    uint32_t cap = caps[(g >> (3 + (k & 1) * 3)) & 7];
    g_mem[k].npend = g_mem[k].qhead = g_mem[k].qlen = g_mem[k].joining = 0;
    g_mem[k].mc = wf_mcache_create(cap);
  }
  static const uint64_t thresholds[4] = {0, 64, 4096, (uint64_t)128 << 20};
  static const int64_t steps[8] = {0, 50000, 150000, 2000000, NS, 6 * NS, 11 * NS, 31 * NS};

  for (int op = 0; op < MAX_OPS && in.off < in.n; op++) {
    unsigned kind = (unsigned)fz_take(&in, 1) % 11;
    int rank = (int)(fz_take(&in, 1) % (unsigned)S.n);
    switch (kind) {
      case 0:
      case 1: { /* REQUESTS from one rank */
        wf_request_msg reqs[3];
        int64_t splits[3][MAXN + 8];
        uint32_t count = 1 + (uint32_t)(fz_take(&in, 1) % 3);
        for (uint32_t i = 0; i < count; i++) {
          build_request(&in, &reqs[i], splits[i]);
          if (rank == 0) as_api(&reqs[i], splits[i]);
        }
        if (S.ntmpl < 4 || fz_take(&in, 1) % 2) { /* remember it as a template */
          int t = S.ntmpl < 4 ? S.ntmpl++ : (int)(fz_take(&in, 1) % 4);
          S.tmpl[t] = reqs[0];
          if (reqs[0].nsplits) {
            memcpy(S.tmpl_splits[t], reqs[0].splits, sizeof(int64_t) * (reqs[0].nsplits < MAXN ? reqs[0].nsplits : MAXN));
            if (reqs[0].nsplits > MAXN) S.tmpl[t].nsplits = MAXN;
            S.tmpl[t].splits = S.tmpl_splits[t];
          }
        }
        if (S.members) { /* one at a time, as the rank keeps them */
          for (uint32_t i = 0; i < count; i++) /* a join is not a tensor (it completes when every rank joined) */
            if (reqs[i].coll == WF_COLL_JOIN) send_join(rank, &reqs[i]);
            else member_submit(rank, &reqs[i], 0);
        } else {
          send_requests(rank, reqs, count);
        }
        break;
      }
      case 2:
      case 3:
      case 4: { /* ALL: a template from every rank (ALLC: rank 0 in full, the others by cache reference) */
        if (!S.ntmpl) break;
        int t = (int)(fz_take(&in, 1) % (unsigned)S.ntmpl);
        unsigned vary = (unsigned)fz_take(&in, 1);
        int cached = kind == 4 && S.cap;
        rec *q = find_rec(S.tmpl[t].name);
        for (int k = 0; k < S.n; k++) {
          int who = (rank + k) % S.n;
          wf_request_msg m = S.tmpl[t];
          int64_t splits[MAXN];
          if (m.nsplits) {
            memcpy(splits, S.tmpl_splits[t], sizeof(int64_t) * m.nsplits);
            m.splits = splits;
          }
          if (vary & 1 && m.ndim) m.shape[0] = m.shape[0] % 1025 + who;         /* allgather rows */
          if (vary & 2 && m.nsplits) splits[who % m.nsplits] = splits[who % m.nsplits] % 1025 + who; /* alltoall */
          if (vary & 4 && who == (int)(vary >> 4) % S.n) m.priority ^= 1;      /* one rank differs */
          if (who == 0) as_api(&m, splits);
          if (S.members)
            m.coll == WF_COLL_JOIN ? send_join(who, &m) : member_submit(who, &m, (int)(vary >> 5));
          else if (cached && who != 0 && q && q->assigned)
            send_cached(who, q->id, q->epoch, vary & 8 ? &m : NULL);
          else
            send_requests(who, &m, 1);
        }
        break;
      }
      case 5: { /* CACHED from a member (not an honest one's: see member_submit) */
        if (rank == 0 || !S.cap || S.members) break;
        unsigned b = (unsigned)fz_take(&in, 1);
        uint32_t id;
        uint64_t epoch;
        if (b < 128 && S.nrecs) {
          rec *q = &S.recs[fz_take(&in, 1) % (unsigned)S.nrecs];
          if (!q->assigned) break;
          id = q->id, epoch = q->epoch;
        } else if (b < 240) {
          id = (uint32_t)(fz_take(&in, 1) % (S.cap + 1));
          uint64_t back = fz_take(&in, 1) % 8;
          epoch = S.epoch > back ? S.epoch - back : 1;
        } else {
          id = (uint32_t)fz_take(&in, 4);
          epoch = fz_take(&in, 8);
        }
        send_cached(rank, id, epoch, NULL);
        break;
      }
      case 6: { /* JOIN */
        wf_request_msg m;
        memset(&m, 0, sizeof m);
        m.coll = WF_COLL_JOIN;
        m.root = -1;
        m.device = WEFT_DEVICE_CPU;
        m.prescale = m.postscale = 1.0;
        take_name(&in, m.name);
        send_join(rank, &m);
        break;
      }
      case 7: /* BYE: a member departs (the coordinator's own rank never does) */
        if (rank == 0 || (S.members && S.departed[rank])) break;
        S.departed[rank] = 1;
        COORD(wf_coord_rank_departed(S.c, rank));
        break;
      case 8:
        take(thresholds[fz_take(&in, 1) % 4]);
        break;
      case 9:
        g_now += steps[fz_take(&in, 1) % 8];
        COORD(wf_coord_check_timeouts(S.c, g_now));
        break;
      case 10: { /* DELIVER: a member handles responses on their way to it */
        unsigned b = (unsigned)fz_take(&in, 1);
        if (S.members && rank != 0) deliver(rank, b < 200 ? 1 + (int)(b % 8) : QMAX);
        break;
      }
    }
    check_deadline();
  }

  if (abandon) { /* finalize mid-negotiation: nothing may leak */
    for (int k = 1; S.members && k < S.n; k++) {
      g_mem[k].npend = 0;
      deliver(k, QMAX);
      wf_mcache_destroy(g_mem[k].mc);
    }
    wf_coord_destroy(S.c);
    wf_cache_destroy(S.mirror);
    return 0;
  }
  /* the end: past every deadline, everything must have been answered */
  for (int round = 0; round < 3; round++) {
    g_now += 2 * (int64_t)(TIMEOUT_S * NS);
    COORD(wf_coord_check_timeouts(S.c, g_now));
    take(thresholds[3]);
  }
  /* then with memory again (a take that could not allocate retries): the
   * coordinator's state must be clean; that every request was answered is
   * checked only without failures */
  g_period = 0;
  g_now += 2 * (int64_t)(TIMEOUT_S * NS);
  wf_coord_check_timeouts(S.c, g_now);
  take(thresholds[3]);
  int live = !g_oom;
  if (wf_coord_pending(S.c)) fz_fail("%zu tensor(s) still pending past every deadline", wf_coord_pending(S.c));
  if (S.c->units.len) fz_fail("%zu grouped op(s) still held past every deadline", S.c->units.len);
  if (S.c->nready) fz_fail("%zu response(s) still not taken", S.c->nready);
  if (wf_coord_next_deadline(S.c) != INT64_MAX) fz_fail("nothing pending, but a deadline");
  for (int i = 0; i < S.nrecs; i++) {
    const rec *q = &S.recs[i];
    int any = 0;
    for (int k = 0; k < S.n; k++) any += q->sub[k];
    if (live && any && !q->resp) fz_fail("'%s' was requested (%d time(s)) and never answered", q->name, any);
  }
  if (live && S.join_oks) fz_fail("%d OK JOIN(s) never came", S.join_oks);
  for (int k = 0; S.members && k < S.n; k++) {
    if (k) deliver(k, QMAX);
    if (live && g_mem[k].npend)
      fz_fail("rank %d's request for '%s' never got a response", k, g_mem[k].pend[0].q.name);
    wf_mcache_destroy(g_mem[k].mc);
  }
  wf_coord_destroy(S.c);
  wf_cache_destroy(S.mirror);
  return 0;
}

/* ------------------------------------------------------------ seeds */
/* Inputs in the format above, built op by op: complete negotiations of
 * each collective, a grouped op, cache hits and a stale reference, a join,
 * a departure, a timeout, a mismatch. */
typedef struct sb {
  uint8_t b[512];
  size_t n;
} sb;
static void put(sb *s, int v) { s->b[s->n++] = (uint8_t)v; }
/* header: ranks, flags (f: bit 0 map, bits 1-3 cache, bit 4 no hold), g */
static void head(sb *s, int n, int f, int g) { s->n = 0, put(s, n - 1), put(s, f), put(s, g); }
/* REQUESTS: one plain request (1-d, 2 elements, float32, sum) */
static void req(sb *s, int rank, int coll, int name_ix, int unit_byte, int n) {
  put(s, 0), put(s, rank), put(s, 0);
  put(s, coll == 0 ? 0 : 133 + coll);
  put(s, 0), put(s, 0), put(s, 0), put(s, 2 + rank * (coll == WF_COLL_ALLGATHER));
  put(s, 0), put(s, 0), put(s, 2), put(s, unit_byte), put(s, 0), put(s, 0);
  if (coll == WF_COLL_ALLTOALL) {
    put(s, 0);
    for (int k = 0; k < n; k++) put(s, 1);
  }
  put(s, name_ix);
}
static void all(sb *s, int t, int vary) { put(s, 2), put(s, 0), put(s, t), put(s, vary); }
static void allc(sb *s, int t, int vary) { put(s, 4), put(s, 0), put(s, t), put(s, vary); }
static void take_op(sb *s) { put(s, 8), put(s, 0), put(s, 3); }
static void time_op(sb *s, int step) { put(s, 9), put(s, 0), put(s, step); }

static void seed(sb *s, const char *name) {
  fz_seed(name, s->b[0], s->b + 1, s->n - 1);
  LLVMFuzzerTestOneInput(s->b, s->n); /* runs clean, or the seed run fails */
}

static void fz_write_seeds(void) {
  static const int colls[] = {WF_COLL_ALLREDUCE, WF_COLL_ALLGATHER, WF_COLL_BROADCAST, WF_COLL_ALLTOALL,
                              WF_COLL_REDUCESCATTER, WF_COLL_BARRIER};
  sb s;
  for (int i = 0; i < 6; i++) { /* each collective on 3 ranks: template from rank 0, then every rank */
    char name[32];
    head(&s, 3, 0x18, 0);
    req(&s, 0, colls[i], i, 0, 3);
    for (int r = 1; r < 3; r++) req(&s, r, colls[i], i, 0, 3);
    take_op(&s);
    all(&s, 0, colls[i] == WF_COLL_ALLGATHER || colls[i] == WF_COLL_ALLTOALL ? 3 : 0);
    take_op(&s);
    snprintf(name, sizeof name, "coll-%s", wf_coll_name((wf_coll)colls[i]));
    seed(&s, name);
  }
  head(&s, 2, 0x18, 0); /* the cache: negotiate, then hits, then a stale one */
  req(&s, 0, 0, 0, 0, 2), req(&s, 1, 0, 0, 0, 2), take_op(&s);
  allc(&s, 0, 0), take_op(&s), allc(&s, 0, 8), take_op(&s);
  put(&s, 5), put(&s, 1), put(&s, 200), put(&s, 0), put(&s, 3); /* a reference near the epoch */
  time_op(&s, 7), take_op(&s);
  seed(&s, "cache");
  /* members mode (member 1's cache holds 3, member 2's 1024): negotiated
   * in full, then by cache reference once the members got the response */
  head(&s, 3, 0x18, 0x04 | 0x20 | 0xc0);
  req(&s, 1, 0, 0, 0, 3), all(&s, 0, 0), take_op(&s);
  for (int i = 0; i < 2; i++) {
    put(&s, 10), put(&s, 1), put(&s, 255), put(&s, 10), put(&s, 2), put(&s, 255);
    all(&s, 0, 0), take_op(&s);
  }
  seed(&s, "members");
  head(&s, 2, 0x00, 0); /* a grouped op of 2 (u.0, u.1), with the hold */
  req(&s, 0, 0, 4, 128, 2), req(&s, 1, 0, 4, 128, 2), take_op(&s);
  req(&s, 1, 0, 5, 128, 2), req(&s, 0, 0, 5, 128, 2), time_op(&s, 2), take_op(&s);
  seed(&s, "unit");
  head(&s, 3, 0x10, 0); /* rank 1 joins; an allreduce completes without it; all join */
  put(&s, 6), put(&s, 1), put(&s, 11);
  req(&s, 0, 0, 0, 0, 3), req(&s, 2, 0, 0, 0, 3), take_op(&s);
  put(&s, 6), put(&s, 0), put(&s, 11), put(&s, 6), put(&s, 2), put(&s, 11), take_op(&s);
  seed(&s, "join");
  head(&s, 3, 0x10, 0); /* rank 2 departs with a tensor pending */
  req(&s, 0, 0, 1, 0, 3), put(&s, 7), put(&s, 2), take_op(&s);
  seed(&s, "bye");
  head(&s, 3, 0x11, 1); /* a stall report, then a stall shutdown (process-set ranks) */
  req(&s, 1, 0, 2, 0, 3), time_op(&s, 5), time_op(&s, 6), take_op(&s);
  seed(&s, "timeout");
  head(&s, 2, 0x10, 0); /* a shape mismatch */
  req(&s, 0, 0, 3, 0, 2), req(&s, 1, 0, 3, 0, 2);
  s.b[s.n - 8] = 3;  /* rank 1's shape: 3 elements */
  take_op(&s);
  seed(&s, "mismatch");
  head(&s, 2, 0x10, 0); /* rank 0 joined; rank 1's allreduce claims [2^62, 4] (once UB at the coordinator) */
  put(&s, 6), put(&s, 0), put(&s, 11);
  put(&s, 0), put(&s, 1), put(&s, 0), put(&s, 0), put(&s, 0), put(&s, 0), put(&s, 138); /* ndim 2 */
  put(&s, 255);
  for (int i = 0; i < 8; i++) put(&s, i == 0 ? 0x80 : 0); /* 2^63 >> 1 */
  put(&s, 4);
  put(&s, 0), put(&s, 0), put(&s, 2), put(&s, 0), put(&s, 0), put(&s, 0), put(&s, 0);
  take_op(&s);
  seed(&s, "hostile-shape");
  for (uint64_t i = 1; i <= 8; i++) { /* pseudo-random sequences */
    char name[32];
    fz_fill(s.b, 400, i * 104729);
    s.n = 400;
    snprintf(name, sizeof name, "random-%d", (int)i);
    seed(&s, name);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  g_debug = getenv("FZ_COORD_DEBUG") != NULL;
  setenv("WEFT_LOG_LEVEL", "none", 1); /* stall reports and timeouts are expected here */
  fz_seed_init("fuzz_coord");
  return 0;
}

/* fuzz_coord_check.c - fuzz_coord's checks (model: fuzz_coord.h): the
 * oracle behind every wf_validate the coordinator calls, the properties of
 * every response taken, the next deadline while anything is pending or held,
 * and the stall reports (the list: fuzz_coord.c's header). A violation
 * aborts (fz_fail), so libFuzzer keeps the input. */
#include <stdio.h>
#include <string.h>

#include "fuzz_coord.h"


/* ------------------------------------------------------------ the validation oracle */
/* The coordinator's calls of wf_validate come here (the target links with
 * -Wl,--wrap=wf_validate): the real one decides, and this oracle, written
 * from the rules (design.md: "ranks disagree (dtype, shape, op, root,
 * scales, 0-d)"), must decide the same: OK exactly when every request
 * agrees with the first on the collective, dtype, grouped op and device kind
 * (host memory, CUDA, sim: not the index, wire.h WF_DEVICE_CODE),
 * the collectives that need dimensions have some, no shape exceeds 2^63
 * bytes, allreduce / broadcast / reducescatter shapes are equal,
 * allgather / alltoall shapes equal but for the first dimension,
 * allreduce / reducescatter reduce ops and scales equal (as doubles
 * compare), broadcast roots equal and alltoall has one split per rank,
 * permute shapes equal and every perm the same permutation of 0..n-1.
 * An OK response carries the row counts (allgather), the split matrix
 * (alltoall) or the perm (permute) of exactly those requests; an error
 * names the tensor. */
weft_status __real_wf_validate(const wf_request_msg *const *reqs, int n, const int *ranks, wf_response_msg *resp,
                               char *err, size_t errlen);
weft_status __wrap_wf_validate(const wf_request_msg *const *reqs, int n, const int *ranks, wf_response_msg *resp,
                               char *err, size_t errlen);

static int oracle_agree(const wf_request_msg *const *reqs, int n) {
  const wf_request_msg *a = reqs[0];
  for (int r = 0; r < n; r++) {
    const wf_request_msg *b = reqs[r];
    uint8_t c = b->coll;
    if (c != a->coll) return 0;
    if ((c == WF_COLL_ALLGATHER || c == WF_COLL_ALLTOALL || c == WF_COLL_REDUCESCATTER) && b->ndim == 0) return 0;
    uint64_t bytes = weft_dtype_size((weft_dtype)b->dtype);
    for (int d = 0; d < b->ndim; d++) {
      unsigned __int128 x = (unsigned __int128)bytes * (uint64_t)b->shape[d];
      if (x > INT64_MAX) return 0;
      bytes = (uint64_t)x;
    }
    if (c == WF_COLL_ALLTOALL && b->nsplits != (uint32_t)n) return 0;
    if (c == WF_COLL_PERMUTE) { /* a permutation: every rank of 0..n-1 exactly once */
      if (b->nsplits != (uint32_t)n) return 0;
      for (int v = 0; v < n; v++) {
        int hits = 0;
        for (int i = 0; i < n; i++) hits += b->splits[i] == v;
        if (hits != 1) return 0;
      }
      if (r && memcmp(a->splits, b->splits, sizeof(int64_t) * (size_t)n)) return 0;
    }
    if (r == 0) continue;
    int kinds = WF_DEVICE_CODE_KIND(b->device) != WF_DEVICE_CODE_KIND(a->device);
    if (b->dtype != a->dtype || b->unit != a->unit || kinds || b->ndim != a->ndim) {
      if (b->dtype != a->dtype || b->unit != a->unit || kinds) return 0;
      if (c != WF_COLL_BARRIER) return 0; /* a barrier's shape is nobody's business */
    }
    int first = c == WF_COLL_ALLGATHER || c == WF_COLL_ALLTOALL; /* may differ */
    if (c != WF_COLL_BARRIER)
      for (int d = first; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    if ((c == WF_COLL_ALLREDUCE || c == WF_COLL_REDUCESCATTER) &&
        (b->reduce_op != a->reduce_op || b->prescale != a->prescale || b->postscale != a->postscale))
      return 0;
    if (c == WF_COLL_BROADCAST && b->root != a->root) return 0;
  }
  return 1;
}

weft_status __wrap_wf_validate(const wf_request_msg *const *reqs, int n, const int *ranks, wf_response_msg *resp,
                               char *err, size_t errlen) {
  weft_status st = __real_wf_validate(reqs, n, ranks, resp, err, errlen);
  if (st == WEFT_ERR_NO_MEMORY && g_period) return st;
  int agree = oracle_agree(reqs, n);
  const char *name = reqs[0]->name;
  if (st == WEFT_OK && !agree) fz_fail("the coordinator accepted requests for '%s' that disagree", name);
  if (st != WEFT_OK && agree) fz_fail("the coordinator rejected agreeing requests for '%s': %s", name, err);
  if (st != WEFT_OK) {
    char quoted[WF_NAME_MAX + 3];
    snprintf(quoted, sizeof quoted, "'%s'", name);
    if (st >= 0 || !strstr(err, quoted)) fz_fail("validation error %d for '%s' does not name it: %s", st, name, err);
    return st;
  }
  uint8_t c = reqs[0]->coll;
  uint32_t want = c == WF_COLL_ALLGATHER || c == WF_COLL_PERMUTE ? (uint32_t)n
                  : c == WF_COLL_ALLTOALL                       ? (uint32_t)(n * n)
                                                                : 0;
  if (resp->nsizes != want) fz_fail("validated '%s' (%s): %u sizes, not %u", name, wf_coll_name(c), resp->nsizes, want);
  for (int r = 0; r < n; r++) {
    if (c == WF_COLL_ALLGATHER && resp->sizes[r] != reqs[r]->shape[0])
      fz_fail("validated allgather '%s': rank %d's rows %lld, it sent %lld", name, r, (long long)resp->sizes[r],
              (long long)reqs[r]->shape[0]);
    if (c == WF_COLL_PERMUTE && resp->sizes[r] != reqs[0]->splits[r])
      fz_fail("validated permute '%s': perm[%d] is %lld, the ranks sent %lld", name, r, (long long)resp->sizes[r],
              (long long)reqs[0]->splits[r]);
    for (int k = 0; c == WF_COLL_ALLTOALL && k < n; k++)
      if (resp->sizes[r * n + k] != reqs[r]->splits[k])
        fz_fail("validated alltoall '%s': split [%d][%d] is %lld, rank %d sent %lld", name, r, k,
                (long long)resp->sizes[r * n + k], r, (long long)reqs[r]->splits[k]);
  }
  return st;
}

/* ------------------------------------------------------------ checking responses */
static int is_fusable(uint8_t coll) {
  return coll == WF_COLL_ALLREDUCE || coll == WF_COLL_ALLGATHER || coll == WF_COLL_REDUCESCATTER;
}

void check_response(const wf_response_msg *r) {
  if (g_debug) {
    fprintf(stderr, "seq %llu %s %s:", (unsigned long long)r->seq, r->type == WF_RESP_OK ? "OK" : "ERROR",
            wf_coll_name(r->coll));
    for (uint32_t i = 0; i < r->nnames; i++) fprintf(stderr, " '%s'", r->names[i]);
    fprintf(stderr, " sizes %u%s%s\n", r->nsizes, r->error ? ": " : "", r->error ? r->error : "");
  }
  if (r->seq != S.seq) fz_fail("response seq %llu, expected %llu", (unsigned long long)r->seq, (unsigned long long)S.seq);
  S.seq++;
  wf_buf b = {0};
  if (wf_encode_responses(&b, 0, r, 1) != WEFT_OK)
    fz_fail("the coordinator made a response its own encoder rejects (seq %llu, '%s'): %s", (unsigned long long)r->seq,
            r->nnames ? r->names[0] : "", weft_last_error());
  wf_buf_free(&b);
  const char *first = r->names[0];
  if (r->type == WF_RESP_ERROR) {
    if (r->nnames != 1) fz_fail("an ERROR response names %u tensors", r->nnames);
    for (uint32_t i = 0; i < r->nsizes; i++) /* the ranks it was decided without: ascending group ranks */
      if (r->sizes[i] < 0 || r->sizes[i] >= S.n || (i && r->sizes[i] <= r->sizes[i - 1]))
        fz_fail("ERROR response for '%s' lists rank %lld at %u among those it was decided without", first,
                (long long)r->sizes[i], i);
    rec *q = find_rec(first);
    int msg = r->error && r->error[0];
    if (!msg && !g_oom) fz_fail("ERROR response for '%s' without a message", first); /* no memory: members take "" */
    if (r->coll == WF_COLL_JOIN) {
      if (!q || !q->join) fz_fail("JOIN ERROR for '%s', which no rank joined with", first);
    } else {
      int any = 0;
      for (int k = 0; q && k < S.n; k++) any += q->sub[k];
      if (!any) fz_fail("ERROR response for '%s', which no rank requested", first);
      char quoted[WF_NAME_MAX + 3];
      snprintf(quoted, sizeof quoted, "'%s'", first);
      if (msg && !strstr(r->error, quoted) && !(g_oom && r->status == WEFT_ERR_NO_MEMORY)) fz_fail("ERROR response for '%s' does not name it: %s", first, r->error);
      q->resp++;
    }
    return;
  }
  /* OK */
  if (r->error && r->error[0]) fz_fail("OK response with an error message");
  if (r->nnames > 1 && !is_fusable(r->coll)) fz_fail("a %s response fused %u tensors", wf_coll_name(r->coll), r->nnames);
  uint32_t want;
  switch (r->coll) {
    case WF_COLL_ALLREDUCE: want = 2 + r->nnames; break;
    case WF_COLL_ALLGATHER: want = r->nnames * (uint32_t)S.n; break;
    case WF_COLL_ALLTOALL: want = (uint32_t)(S.n * S.n); break;
    case WF_COLL_PERMUTE: want = (uint32_t)S.n; break;
    case WF_COLL_JOIN: want = g_oom && !r->nsizes ? 0 : 1; break; /* out of memory: members take -1 */
    default: want = 0;
  }
  if (r->nsizes != want)
    fz_fail("OK %s response for %u tensor(s) ('%s') has %u sizes, members expect %u", wf_coll_name(r->coll), r->nnames,
            first, r->nsizes, want);
  if (r->coll == WF_COLL_ALLREDUCE &&
      (r->sizes[0] >= WEFT_DTYPE_COUNT_ || (r->sizes[1] & ~(int64_t)WF_AR_STAGED) >= WEFT_OP_COUNT_))
    fz_fail("OK allreduce response: dtype %lld, op %lld", (long long)r->sizes[0], (long long)r->sizes[1]);
  if (r->coll == WF_COLL_JOIN) {
    rec *q = find_rec(first);
    if (!q || !q->join) fz_fail("OK JOIN for '%s', which no rank joined with", first);
    /* out of memory, a join's response may be lost: then the next one due matches */
    while (g_oom && r->nsizes && S.join_oks > 1 && S.last_joined_at[S.join_head % 2048] != r->sizes[0])
      S.join_head++, S.join_oks--;
    if (S.join_oks == 0) fz_fail("OK JOIN for '%s' before every rank joined", first);
    int last = S.last_joined_at[S.join_head % 2048];
    S.join_head++, S.join_oks--;
    if (r->nsizes && r->sizes[0] != last)
      fz_fail("OK JOIN names rank %lld as the last to join, not %d", (long long)r->sizes[0], last);
    for (int k = 0; k < S.n; k++) /* their weft_join returns (a rank that joined again since stands in again) */
      if (!S.joined_now[k]) S.join_done[k] |= S.joined_ever[k];
    return;
  }
  int stand_in = r->coll == WF_COLL_ALLREDUCE || r->coll == WF_COLL_BARRIER;
  for (uint32_t i = 0; i < r->nnames; i++) {
    rec *q = find_rec(r->names[i]);
    if (!q) fz_fail("OK response for '%s', which no rank requested", r->names[i]);
    q->resp++;
    /* each OK used one request of every rank, each request at most once
     * (errors use some too: the check is weaker after one, never wrong);
     * a rank that joined may stand in instead: not counted either way */
    for (int k = 0; k < S.n; k++) {
      if (stand_in && S.joined_ever[k]) {
        /* with no request of its own left it stands in: only until its join's OK (then it has moved on) */
        if (q->used[k] >= q->sub[k] && S.join_done[k])
          fz_fail("OK %s response for '%s' counts on rank %d standing in, after the OK of its join", wf_coll_name(r->coll),
                  r->names[i], k);
        continue;
      }
      if (q->used[k] >= q->sub[k])
        fz_fail("OK %s response for '%s', but rank %d's %d request(s) for it were used by %d earlier OK response(s)",
                wf_coll_name(r->coll), r->names[i], k, q->sub[k], q->used[k]);
      q->used[k]++;
    }
    if (S.mirror && wf_cache_assigns(r)) { /* a member runs the assignment */
      q->id = wf_cache_assign(S.mirror, q->name, NULL, &q->epoch);
      q->assigned = 1;
      if (q->epoch != ++S.epoch) fz_fail("mirror: epoch %llu", (unsigned long long)q->epoch);
    }
  }
}

void check_deadline(void) {
  if (!wf_coord_pending(S.c) && !S.c->units.len) return;
  int64_t d = wf_coord_next_deadline(S.c), lim = g_now + (int64_t)(S.c->timeout * 1e9);
  if (d > lim)
    fz_fail("%zu tensor(s) pending, %zu unit(s) held, but the next deadline is %lld ns away (timeout %g s)",
            wf_coord_pending(S.c), S.c->units.len, (long long)(d - g_now), S.c->timeout);
}

void on_stall(void *ctx, const char *report, const uint8_t *submitted) {
  (void)ctx;
  int have = 0;
  for (int k = 0; k < S.n; k++) have += submitted[k] != 0;
  if (strncmp(report, "stalled: tensor '", 17) != 0) fz_fail("stall report: %s", report);
  if (have == 0 || have == S.n) fz_fail("stall report with %d of %d ranks submitted: %s", have, S.n, report);
}


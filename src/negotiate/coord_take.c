/* coord_take.c - the coordinator's output side (see coord.c for the
 * table): ready responses ordered by priority and fused into as few
 * collectives as the threshold allows (wf_coord_take), and the scan for
 * stalled and timed-out entries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/coord_impl.h"
#include "util/log.h"
#include "util/time.h"

/* ------------------------------------------------------------------ take */
void wf_coord_set_unpacked_allreduce(wf_coord *c) { c->ar_unpacked = 1; }

void wf_coord_set_clock(wf_coord *c, wf_clock_fn now, void *ctx) {
  c->now = now;
  c->now_ctx = ctx;
}

/* One response of a take, planned: ready[i..j) and its arrays. */
typedef struct built {
  size_t i, j;
  char **names;
  int64_t *sizes;
  size_t nsizes;
  int own; /* sizes is the built array (else the first ready's own) */
} built;

/* Can response j join the fused response that starts at i (and has j - i
 * tensors)? Allreduces and reducescatters: same dtype, op and scales;
 * allgathers: same dtype (their per-tensor, per-rank row counts must fit
 * one response's sizes). Where fusing means packing, not tensors larger
 * than pack_max: two more passes over their bytes cost more than the
 * negotiation fusion saves (bench/NOTES.md, "WEFT_FUSION_PACK_MAX_BYTES"). */
static int fusable(const wf_coord *c, size_t i, size_t j, uint64_t total, uint64_t threshold) {
  const ready *a = &c->ready[i], *b = &c->ready[j];
  if (a->resp.type != WF_RESP_OK || b->resp.type != WF_RESP_OK || a->resp.coll != b->resp.coll ||
      a->m.dtype != b->m.dtype || total + b->m.bytes > threshold)
    return 0;
  if (c->pack_max && !(c->ar_unpacked && a->resp.coll == WF_COLL_ALLREDUCE) &&
      (a->m.bytes > c->pack_max || b->m.bytes > c->pack_max))
    return 0;
  switch (a->resp.coll) {
    case WF_COLL_ALLREDUCE:
    case WF_COLL_REDUCESCATTER:
      return a->m.reduce_op == b->m.reduce_op && a->m.prescale == b->m.prescale && a->m.postscale == b->m.postscale;
    case WF_COLL_ALLGATHER:
      return a->resp.nsizes == b->resp.nsizes && (uint64_t)(j - i + 1) * b->resp.nsizes <= WF_MAX_RANKS;
    default:
      return 0;
  }
}

/* The arrays of the response for ready[i..j) (one, or fused): its names
 * and sizes, which are, for allreduce: dtype, op (with WF_AR_STAGED when a
 * tensor is a device's), then each tensor's count; allgather: each tensor's
 * rows per rank, tensor after tensor; reducescatter: none. Allocates only:
 * 0, or -1 out of memory (nothing allocated). */
static int build_alloc(const wf_coord *c, size_t i, size_t j, built *b) {
  const ready *a = &c->ready[i];
  size_t k = j - i;
  int ar = a->resp.type == WF_RESP_OK && a->resp.coll == WF_COLL_ALLREDUCE;
  size_t nsizes = ar ? 2 + k : 0;
  if (!ar && k > 1)
    for (size_t m = i; m < j; m++) nsizes += c->ready[m].resp.nsizes;
  b->i = i;
  b->j = j;
  b->own = ar || k > 1; /* else the response keeps its own sizes */
  b->nsizes = b->own ? nsizes : a->resp.nsizes;
  b->names = malloc(sizeof(char *) * k);
  b->sizes = b->own && nsizes ? malloc(sizeof(int64_t) * nsizes) : NULL;
  if (!b->names || (b->own && nsizes && !b->sizes)) {
    free(b->names);
    free(b->sizes);
    return -1;
  }
  return 0;
}

/* Fills *out from ready[b->i..b->j) and b's arrays, taking their names,
 * sizes and error. Cannot fail. */
static void build_fill(wf_coord *c, const built *b, wf_response_msg *out) {
  const ready *a = &c->ready[b->i];
  int ar = a->resp.type == WF_RESP_OK && a->resp.coll == WF_COLL_ALLREDUCE;
  int64_t *sizes = b->own ? b->sizes : a->resp.sizes;
  *out = a->resp;
  out->names = b->names;
  out->nnames = (uint32_t)(b->j - b->i);
  out->sizes = sizes;
  out->nsizes = (uint32_t)b->nsizes;
  size_t z = 0;
  if (ar) {
    int staged = 0;
    for (size_t m = b->i; m < b->j; m++) staged |= c->ready[m].m.staged;
    sizes[z++] = a->m.dtype;
    sizes[z++] = a->m.reduce_op | (staged ? WF_AR_STAGED : 0);
  }
  for (size_t m = b->i; m < b->j; m++) {
    ready *q = &c->ready[m];
    b->names[m - b->i] = q->name;
    q->name = NULL;
    if (ar) {
      sizes[z++] = q->m.elems;
    } else if (b->j - b->i > 1) {
      for (uint32_t s = 0; s < q->resp.nsizes; s++) sizes[z++] = q->resp.sizes[s];
    }
    if (sizes != q->resp.sizes) free(q->resp.sizes);
    q->resp.sizes = NULL;
  }
}

/* Where a ready response goes in the order of a take (higher first). */
static int64_t order_key(const ready *r) { return r->resp.coll == WF_COLL_JOIN ? INT64_MIN : r->m.priority; }

size_t wf_coord_take(wf_coord *c, uint64_t fusion_threshold, wf_response_msg **out) {
  size_t n = c->nready;
  *out = NULL;
  if (!n) return 0;
  if (c->hold && fusion_threshold > 0 && c->nready_fusable > 0 && c->npending_fusable > 0) {
    int64_t now = wf_cd_now(c), until = c->add_e[0] ? c->add_ns[0] + HOLD_GAP_NS : 0;
    if (until > c->first_ready_ns + HOLD_MAX_NS) until = c->first_ready_ns + HOLD_MAX_NS;
    if (now < until) {
      c->hold_until = until;
      return 0;
    }
  }
  c->hold_until = INT64_MAX;
  c->nready_fusable = 0;
  wf_response_msg *res = malloc(n * sizeof *res);
  built *plan = malloc(n * sizeof *plan);
  if (!res || !plan) { /* the responses stay ready: the next call retries */
    free(res);
    free(plan);
    WF_WARN(WF_SUB_COORD, "out of memory publishing %zu responses", n);
    return 0;
  }
  /* Higher priority first; among equals, the order they became ready
   * (insertion sort: stable, and batches are small). A JOIN comes after
   * everything else: the responses it was taken with may count on the
   * joined ranks standing in, and a rank whose join completed no longer does. */
  for (size_t i = 1; i < n; i++) {
    if (order_key(&c->ready[i - 1]) >= order_key(&c->ready[i])) continue;
    ready r = c->ready[i];
    size_t j = i;
    while (j > 0 && order_key(&c->ready[j - 1]) < order_key(&r)) {
      c->ready[j] = c->ready[j - 1];
      j--;
    }
    c->ready[j] = r;
  }
  /* Fusion: consecutive compatible responses become one naming them all,
   * up to the threshold. Their arrays first: a response that cannot be
   * had is dropped before the cache's assignments, so that members, which
   * assign for the responses they receive, count the same epochs. */
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    uint64_t total = c->ready[i].m.bytes;
    while (j < n && j - i < 4096 && fusable(c, i, j, total, fusion_threshold)) total += c->ready[j++].m.bytes;
    int st = build_alloc(c, i, j, &plan[k]);
    if (st && j > i + 1) st = build_alloc(c, i, j = i + 1, &plan[k]); /* no memory to fuse: send it alone */
    if (st == 0) {
      k++;
    } else { /* cannot even send it alone: drop it, loudly (its tensor times out) */
      WF_WARN(WF_SUB_COORD, "out of memory building the response for '%s'", c->ready[i].name);
      wf_cd_ready_free(&c->ready[i]);
      c->ready[i].name = NULL;
      c->ready[i].pay = NULL;
      c->ready[i].dropped = 1;
    }
    i = j;
  }
  /* The response cache's assignments, in response order (fusion keeps the
   * order of names). */
  for (size_t i = 0; i < n; i++) {
    ready *q = &c->ready[i];
    if (q->dropped) continue;
    if (c->cache && wf_cache_assigns(&q->resp)) {
      uint64_t epoch;
      int kept; /* all hits: the name's slot holds this payload already */
      wf_cache_assign_hint(c->cache, q->slot, q->name, q->pay, &epoch, &kept); /* takes the pin, unless it kept it */
      if (kept) wf_cd_block_unpin(q->pay);
    } else {
      wf_cd_block_unpin(q->pay);
    }
    q->pay = NULL;
  }
  for (size_t b = 0; b < k; b++) {
    build_fill(c, &plan[b], &res[b]);
    res[b].seq = c->next_seq++;
  }
  free(plan);
  c->nready = 0;
  if (!k) {
    free(res);
    return 0;
  }
  *out = res;
  return k;
}

void wf_coord_set_stall_handler(wf_coord *c, wf_stall_fn fn, void *ctx) {
  c->on_stall = fn;
  c->stall_ctx = ctx;
}

/* ------------------------------------------------------------------ stalls and timeouts */
/* Lists the ranks with (want = 1) or without (want = 0) a request; ranks
 * that joined (weft_join) stand in for theirs, so they are not missing. */
static size_t rank_list(const wf_coord *c, const entry *e, int want, char *out, size_t n) {
  size_t k = 0;
  int first = 1;
  out[0] = '\0';
  for (int r = 0; r < c->size && k < n; r++)
    if (!!e->b->have[r] == want && (want || !c->joined[r])) {
      k += (size_t)snprintf(out + k, n - k, first ? "%d" : ", %d", WR(c, r));
      first = 0;
    }
  return k;
}

/* The stall inspector: a tensor some ranks submitted long ago and others
 * never did is reported, naming exactly which ranks are missing, at rank 0
 * and (through on_stall) on every rank that waits for it. */
static void stall_report(wf_coord *c, entry *e, int64_t now) {
  char have[512], missing[512], msg[WF_ERRMSG_MAX];
  rank_list(c, e, 1, have, sizeof have);
  rank_list(c, e, 0, missing, sizeof missing);
  snprintf(msg, sizeof msg,
           "stalled: tensor '%s' (%s) was submitted by rank(s) %s %.0f s ago and is waiting for rank(s) %s to submit "
           "it%s",
           e->name, wf_coll_name(wf_cd_entry_coll(c, e)), have, (now - e->first_ns) / 1e9, missing,
           c->stall_shutdown > 0 ? "; it will fail at the stall shutdown time" : "");
  WF_WARN(WF_SUB_COORD, "%s", msg);
  if (c->on_stall) c->on_stall(c->stall_ctx, msg, e->b->have);
  e->next_warn = now + (int64_t)(c->stall_check * 1e9);
}

void wf_coord_check_timeouts(wf_coord *c, int64_t now) {
  wf_cd_units_sweep(c, now); /* at once when nothing is due */
  if (now < c->next_check) return; /* nothing due: no scan */
  int64_t next = INT64_MAX;
  for (size_t i = 0; i < c->table.cap; i++) {
    wf_strmap_entry *s = &c->table.slots[i];
    if (!s->key || s->tomb) continue;
    entry *e = s->val;
    if (e->next_warn <= now && e->deadline > now) stall_report(c, e, now);
    if (e->deadline > now) {
      if (e->deadline < next) next = e->deadline;
      if (e->next_warn < next) next = e->next_warn;
      continue;
    }
    char msg[WF_ERRMSG_MAX], missing[3000]; /* fits beside the name and the rest */
    rank_list(c, e, 0, missing, sizeof missing);
    snprintf(msg, sizeof msg, "tensor '%s': timed out after %g s waiting for rank(s) %s to submit it", e->name,
             c->timeout, missing);
    WF_WARN(WF_SUB_COORD, "%s", msg);
    wf_cd_fail_missing(c, e, WEFT_ERR_TIMEOUT, msg);
    wf_cd_entry_drop(c, e);
  }
  c->next_check = next;
}

int64_t wf_coord_next_deadline(const wf_coord *c) {
  int64_t d = c->table.len ? c->next_check : INT64_MAX, u = wf_cd_units_next(c);
  if (u < d) d = u;
  return c->nready && c->hold_until < d ? c->hold_until : d;
}

size_t wf_coord_pending(const wf_coord *c) { return c->table.len; }

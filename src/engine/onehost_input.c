/* onehost_input.c - what each collective puts on the one-host board, and a
 * rank's result from a DONE round: its output allocated as the executor
 * would, the data moved and folded by the board-slot algorithms
 * (algo/board_coll.h). onehost.c runs the protocol.
 *
 * Every member's input sits in the round's slot (but for what only its owner
 * reads: an alltoall's own block, a reducescatter's own rows, a WF_SPLIT_OWN
 * round's own slice; see wf_fast_unshared), so each rank
 * reads what it needs straight from there: allreduce and reducescatter fold the
 * (prescaled) inputs in group-rank order, ((x0 op x1) op x2) ..., then apply
 * average/postscale, exactly as exec.c with the `direct` algorithms does
 * (same bits); allgather, alltoall and broadcast copy blocks out. Outputs
 * that weft allocates (allgather, alltoall, reducescatter without an output
 * tensor) go through the request's allocator, as exec.c does.
 *
 * Eligible: no callback, not a grouped op's child, timeline off, host
 * memory, WEFT_FAST=1, no cycle time, and the input fits: allreduce folded
 * whole by each rank up to WEFT_FAST_ALLREDUCE_BYTES (256 KiB by default:
 * every rank reads every input, which pays only while inputs are small; see
 * bench/NOTES.md, "One-host board: thresholds"), split (board.h; each slice
 * folded once) from WEFT_FAST_SPLIT_BYTES on 3+ ranks or with own folds
 * (WF_SPLIT_OWN), and beyond WEFT_FAST_ALLREDUCE_BYTES on 2, up to the large
 * slots' size like the others; allgather, alltoall and reducescatter need a
 * first dimension, alltoall an even split. Members whose descriptions
 * differ (an allgather with another first dimension, uneven splits on one
 * rank) divert the round, and the coordinator handles it as without the
 * board. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/board_coll.h"
#include "algo/cma.h"
#include "negotiate/board.h"
#include "engine/onehost_impl.h"
#include "reduce/reduce.h"
#include "util/copy.h"
#include "util/err.h"

static size_t elems(const wf_request_msg *m) { return (size_t)wf_elems(m->shape, 0, m->ndim); }

static int even_splits(const wf_request_msg *m, int n) {
  if (m->ndim < 1 || m->nsplits != (uint32_t)n || m->shape[0] % n) return 0;
  for (int j = 0; j < n; j++)
    if (m->splits[j] != m->shape[0] / n) return 0;
  return 1;
}

int wf_fast_input(weft_world *w, weft_request *r, wf_board_desc *d, const void **part, size_t *len, void **tmp) {
  const wf_request_msg *m = &r->msg;
  int n = r->group->size, me = r->group->rank;
  *part = NULL;
  *len = 0;
  *tmp = NULL;
  /* a cycle time asks the coordinator to hold ops to fuse and order them
   * by priority: that path it is */
  if (!w->one->fast_on || w->cycle_ns > 0 || r->callback || r->parent || wf_tl_on(&w->tl) || m->device != WEFT_DEVICE_CPU)
    return 0;
  size_t bytes = m->coll == WF_COLL_BARRIER ? 0 : elems(m) * weft_dtype_size((weft_dtype)m->dtype);
  /* a split round's members fold their own slices from their own inputs
   * (WF_SPLIT_OWN, board.h) when asked (WEFT_FAST_SPLIT_OWN), the cores
   * suffice (a board property: the same on every rank) and the input is
   * not prescaled (a prescaled copy is what goes in) */
  int own = w->one->fast_split_own && !wf_board_oversubscribed(w->one->board) && m->prescale == 1.0;
  int split = 0;
  /* the board row of the selection table (algo/select.c): sizes */
  int fits = wf_select_board((wf_coll)m->coll, bytes, n, own, wf_board_part_bytes(w->one->board),
                             wf_board_large_bytes(w->one->board), &w->set, &split);
  switch (m->coll) {
    case WF_COLL_BARRIER:
      break;
    case WF_COLL_ALLREDUCE:
    case WF_COLL_REDUCESCATTER:
      if (m->coll == WF_COLL_REDUCESCATTER && m->ndim < 1) return 0;
      *part = r->in.data;
      *len = bytes;
      if (fits && bytes && m->prescale != 1.0) { /* prescaled as exec.c does it, so the bits match */
        if (!(*tmp = malloc(bytes))) return 0;
        wf_scale_copy((weft_dtype)m->dtype, *tmp, r->in.data, elems(m), m->prescale);
        *part = *tmp;
      }
      break;
    case WF_COLL_BROADCAST:
      if (me == m->root) {
        *part = r->in.data;
        *len = bytes;
      }
      break;
    case WF_COLL_ALLGATHER:
      if (m->ndim < 1) return 0;
      *part = r->in.data;
      *len = bytes;
      break;
    case WF_COLL_ALLTOALL:
      if (!even_splits(m, n)) return 0;
      *part = r->in.data;
      *len = bytes;
      break;
    default:
      return 0;
  }
  if (!fits) {
    free(*tmp);
    *tmp = NULL;
    *part = NULL;
    *len = 0;
    return 0;
  }
  if (!*len) *part = NULL;
  memset(d, 0, offsetof(wf_board_desc, shape)); /* the shape's first ndim entries are set below; the rest unread */
  /* Copy-free when asked (WEFT_FAST_CMA_BYTES, off by default) and the
   * host may read across processes: inputs stay where they are (board.h,
   * remote rounds); every rank decides alike (the same description, cma_ok
   * agreed at init; a rank that does not diverts). One copy instead of two,
   * but process_vm_readv pins and maps page by page and copies well below
   * memcpy's speed, so two user-space copies can win; hence off by default
   * (bench/NOTES.md, "Remote rounds"). Never for broadcast (a
   * root waiting for its readers loses to copying in and leaving), nor when
   * the host's ranks outnumber its cores (members waiting for the others'
   * reads take the readers' cores). */
  d->remote = w->cma_ok && w->one->fast_cma_bytes && bytes >= w->one->fast_cma_bytes && bytes > wf_board_part_bytes(w->one->board) &&
              !wf_board_oversubscribed(w->one->board) && (m->coll == WF_COLL_ALLGATHER || m->coll == WF_COLL_ALLTOALL);
  /* own folds (WF_SPLIT_OWN, where the cores suffice): each rank reads its
   * own slice from its input and the folder writes each folded chunk
   * straight into its output, which moves less memory than WF_SPLIT_ANY
   * (bench/NOTES.md, "Own splits") */
  d->split = !split ? WF_SPLIT_NONE : own ? WF_SPLIT_OWN : WF_SPLIT_ANY;
  d->ordered = r->auto_barrier != 0; /* board_name(): unnamed barriers share records */
  d->coll = m->coll;
  d->dtype = m->dtype;
  d->ndim = m->ndim;
  d->op = m->reduce_op;
  d->root = m->coll == WF_COLL_BROADCAST ? m->root : -1;
  d->prescale = m->prescale;
  d->postscale = m->postscale;
  for (int i = 0; i < m->ndim; i++) d->shape[i] = m->shape[i];
  return 1;
}

/* Remote rounds (wf_slot.read): member k's input by process_vm_readv. */
static weft_status read_remote(void *ctx, int k, size_t off, void *dst, size_t len) {
  weft_request *r = ctx;
  wf_board *b = r->world->one->board;
  int pid;
  uint64_t addr, have;
  wf_board_remote(b, r->fast_t, k, &pid, &addr, &have);
  int rank = r->group->ranks[k];
  if (off + len > have || !addr)
    return wf_err(WEFT_ERR_PROTOCOL, "'%s': rank %d published %llu input bytes, %zu needed", r->msg.name, rank,
                  (unsigned long long)have, off + len);
  char what[WF_NAME_MAX + 8];
  snprintf(what, sizeof what, "'%s': ", r->msg.name);
  weft_status st = wf_cma_read(pid, addr + off, dst, len, rank, what);
  if (st != WEFT_OK && wf_board_abandoned(b, r->fast_t)) /* why it failed: the owner took its buffer back */
    return wf_err(WEFT_ERR_TIMEOUT, "'%s': rank %d stopped waiting for this rank to read its input", r->msg.name,
                  rank);
  return st;
}

/* r's DONE round as the board-slot algorithms see it (parts: n entries). */
static wf_slot slot_of(weft_world *w, weft_request *r, const void **parts) {
  wf_slot s = {.n = r->fast_n, .me = r->fast_rank, .part = parts, .own = r->in.data,
               .remote = wf_board_is_remote(w->one->board, r->fast_t), .read = read_remote, .ctx = r};
  for (int k = 0; k < s.n && !s.remote; k++) parts[k] = wf_board_part(w->one->board, r->fast_t, k);
  return s;
}

/* After a remote round's reads: a member that gave up waiting (its input
 * went back to its caller) may have changed what was read. */
static weft_status still_valid(weft_world *w, weft_request *r) {
  if (!wf_board_is_remote(w->one->board, r->fast_t)) return WEFT_OK;
  atomic_thread_fence(memory_order_seq_cst); /* the reads above before the look */
  if (!wf_board_abandoned(w->one->board, r->fast_t)) return WEFT_OK;
  return wf_err(WEFT_ERR_TIMEOUT, "'%s': a member stopped waiting for this rank to read its input", r->msg.name);
}

/* An output of bytes as exec.c makes it; nobody else reads this rank's
 * output, so an allocator's NULL fails this request at once. */
static weft_status alloc_result(weft_request *r, size_t bytes) {
  if (wf_alloc_result(r, bytes) != WEFT_OK)
    return wf_err(WEFT_ERR_NO_MEMORY, "'%s': out of memory for the output (%zu bytes)", r->msg.name, bytes);
  if (!r->alloc_failed) return WEFT_OK;
  free(r->result); /* the private stand-in exec.c would compute into */
  r->result = NULL;
  r->result_owned = 0;
  return wf_err(WEFT_ERR_NO_MEMORY, "'%s': the output allocator returned NULL (%zu bytes)", r->msg.name, bytes);
}

/* A reducescatter's own rows stay out of the slot and are folded from the
 * input (wf_fast_unshared, wf_fast_result), unless prescaled: only the slot
 * holds the scaled copy. */
static int rs_own_rows(double prescale) { return prescale == 1.0; }

wf_board_span wf_fast_unshared(const weft_request *r, const wf_board_desc *d, size_t bytes) {
  int n = r->group->size, me = r->group->rank;
  if (d->coll == WF_COLL_ALLTOALL && !d->remote) { /* even splits (wf_fast_input) */
    size_t blk = bytes / (size_t)n;
    return (wf_board_span){blk * (size_t)me, blk};
  }
  if (d->coll == WF_COLL_REDUCESCATTER && rs_own_rows(d->prescale) && d->ndim >= 1 && d->shape[0] > 0) {
    size_t dim0 = (size_t)d->shape[0], row = bytes / dim0; /* in bytes */
    return (wf_board_span){wf_rs_first(dim0, n, me) * row, wf_rs_rows(dim0, n, me) * row};
  }
  if (d->split == WF_SPLIT_OWN) { /* folded by this rank from its own input (wf_fast_split_pass) */
    size_t es = weft_dtype_size((weft_dtype)d->dtype), lo, hi;
    wf_board_slice(bytes / es, n, me, &lo, &hi);
    return (wf_board_span){lo * es, (hi - lo) * es};
  }
  return (wf_board_span){0, 0};
}

int wf_fast_split_pass(weft_world *w, weft_request *r) {
  const wf_request_msg *m = &r->msg;
  int n = r->fast_n, me = r->fast_rank, own = r->fast_split == WF_SPLIT_OWN; /* the round's: descriptions agree */
  size_t count = elems(m), es = weft_dtype_size((weft_dtype)m->dtype), lo, hi;
  const void *parts[WF_BOARD_MAX_MEMBERS];
  wf_slot sl = slot_of(w, r, parts);
  /* folded a chunk at a time here (in cache), then written over slice s of
   * member s's input, which only this fold reads, and into this rank's
   * output (not copied out of the slot again) */
  uint64_t tmp[2048];
  size_t chunk = sizeof tmp / es;
  uint64_t have = atomic_load_explicit(&r->split_have, memory_order_relaxed);
  for (int i = 0; i < (own ? 1 : n); i++) {
    int s = (me + i) % n; /* its own slice first: the others start at theirs */
    if (!wf_board_slice_take(w->one->board, r->fast_t, s, me)) continue;
    char *dst = wf_board_part_mut(w->one->board, r->fast_t, s);
    wf_board_slice(count, n, s, &lo, &hi);
    for (size_t c = lo; c < hi; c += chunk) {
      size_t k = hi - c < chunk ? hi - c : chunk;
      wf_slot_fold(&sl, (weft_dtype)m->dtype, (weft_reduce_op)m->reduce_op, m->postscale, tmp, c, k, own);
      wf_copy(dst + c * es, tmp, k * es);
      wf_copy((char *)r->out.data + c * es, tmp, k * es);
    }
    wf_board_slice_done(w->one->board, r->fast_t, s);
    have |= 1ull << s;
  }
  uint64_t fresh = wf_board_slices_done(w->one->board, r->fast_t, n, NULL, NULL) & ~have;
  for (int s = 0; s < n; s++) {
    if (!(fresh >> s & 1)) continue;
    wf_board_slice(count, n, s, &lo, &hi);
    if (hi > lo)
      wf_copy((char *)r->out.data + lo * es, (const char *)wf_board_part(w->one->board, r->fast_t, s) + lo * es,
              (hi - lo) * es);
  }
  have |= fresh;
  atomic_store_explicit(&r->split_have, have, memory_order_relaxed); /* the waiter's hint (wf_board_wait_slices) */
  return have == wf_board_all(n);
}

/* A remote allgather's or alltoall's own block is copied after the claim
 * (wf_fast_own): the others, waiting for this rank to read their inputs,
 * go on meanwhile. */
static int own_later(weft_world *w, weft_request *r) {
  return (r->msg.coll == WF_COLL_ALLGATHER || r->msg.coll == WF_COLL_ALLTOALL) &&
         wf_board_is_remote(w->one->board, r->fast_t);
}

void wf_fast_own(weft_world *w, weft_request *r) {
  const wf_request_msg *m = &r->msg;
  size_t bytes = elems(m) * weft_dtype_size((weft_dtype)m->dtype);
  (void)w;
  if (!bytes || !r->result || (m->coll != WF_COLL_ALLGATHER && m->coll != WF_COLL_ALLTOALL)) return;
  size_t me = (size_t)r->fast_rank, block = m->coll == WF_COLL_ALLTOALL ? bytes / (size_t)r->fast_n : bytes;
  size_t from = m->coll == WF_COLL_ALLTOALL ? me * block : 0;
  wf_copy((char *)r->result + me * block, (const char *)r->in.data + from, block);
}

/* The output wf_slot_result writes, allocated as exec.c would. */
static weft_status output_of(weft_request *r, size_t bytes, int n, void **out) {
  const wf_request_msg *m = &r->msg;
  size_t es = weft_dtype_size((weft_dtype)m->dtype), dim0 = m->ndim ? (size_t)m->shape[0] : 0;
  switch (m->coll) {
    case WF_COLL_ALLREDUCE:
      *out = r->out.data;
      return WEFT_OK;
    case WF_COLL_BROADCAST:
      *out = r->in.data;
      return WEFT_OK;
    case WF_COLL_ALLGATHER:
      WF_CHECK(alloc_result(r, bytes * (size_t)n));
      wf_set_result_shape(r, m->shape[0] * n);
      break;
    case WF_COLL_ALLTOALL:
      if (!(r->recv_splits = malloc(sizeof(int64_t) * (size_t)n)))
        return wf_err(WEFT_ERR_NO_MEMORY, "'%s': out of memory", m->name);
      r->nrecv_splits = n;
      for (int k = 0; k < n; k++) r->recv_splits[k] = m->shape[0] / n;
      WF_CHECK(alloc_result(r, bytes));
      wf_set_result_shape(r, m->shape[0]);
      break;
    case WF_COLL_REDUCESCATTER: {
      size_t rows = wf_rs_rows(dim0, n, r->fast_rank), row = dim0 ? bytes / es / dim0 : 0;
      if (r->out.data) {
        r->result = r->out.data;
        r->result_owned = 0;
      } else {
        WF_CHECK(alloc_result(r, rows * row * es));
      }
      wf_set_result_shape(r, (int64_t)rows);
      break;
    }
    default:
      *out = NULL;
      return WEFT_OK;
  }
  *out = r->result;
  return WEFT_OK;
}

weft_status wf_fast_result(weft_world *w, weft_request *r) {
  const wf_request_msg *m = &r->msg;
  int n = r->fast_n;
  size_t count = elems(m), bytes = count * weft_dtype_size((weft_dtype)m->dtype);
  void *out = NULL;
  WF_CHECK(output_of(r, bytes, n, &out));
  const void *parts[WF_BOARD_MAX_MEMBERS];
  wf_slot sl = slot_of(w, r, parts);
  wf_slot_args a = {.coll = (wf_coll)m->coll, .dtype = (weft_dtype)m->dtype, .op = (weft_reduce_op)m->reduce_op,
                    .postscale = m->postscale, .root = m->root, .count = count,
                    .dim0 = m->ndim ? (size_t)m->shape[0] : 0, .own_rows = rs_own_rows(m->prescale),
                    .skip_own = own_later(w, r), .out = out};
  WF_CHECK(wf_slot_result(&sl, &a));
  return m->coll == WF_COLL_ALLREDUCE || m->coll == WF_COLL_REDUCESCATTER ? WEFT_OK : still_valid(w, r);
}

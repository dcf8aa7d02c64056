/* select.c - the automatic choice of a collective's algorithm: one table per
 * collective, read top to bottom. A row is (where the group lives, how
 * many ranks, a size range) -> an algorithm name; the first row that
 * matches the arguments and whose algorithm supports() them wins. A forced
 * name (WEFT_ALGO_<COLL>) is tried before the table, in registry.c.
 *
 * Where:
 *   board   one host, the board (negotiate/): the first row of every table.
 *           It is decided when the operation is submitted, before any
 *           negotiation (wf_select_board); an operation that reaches the
 *           executor has left the board, so there the row matches nothing;
 *   numa    staged, and the host's ranks on several NUMA nodes (the
 *           segment's layout: wf_stage_numa); from WF_SEL_NUMA_MIN_BYTES, below
 *           which the flat pattern's single flag round is shorter;
 *   staged  every member on this host with shm staging attached
 *           (wf_stage_supports decides what staging can run);
 *   hier    the group spans hosts and the hierarchical rule holds
 *           (WEFT_HIERARCHICAL, per collective: wf_hier_rule);
 *   cma     one host with cross-memory attach (wf_cma_usable) and no shared-
 *           memory rings between the members (no host segment: WEFT_TRANSPORT=
 *           tcp, or /dev/shm unusable). With the rings, the ring transport's
 *           algorithms are as fast or faster, and staging (the world group)
 *           faster still: see bench/NOTES.md (staging, CMA and rings);
 *   any     anywhere.
 * Size: the collective's elements times the element size: allreduce and
 * broadcast the buffer, allgather the whole output, reducescatter the whole
 * input. Alltoall rows take any size: a rank knows only its own row of the
 * split matrix, and every rank must choose the same. A bound is compared
 * in elements (n >= bytes / elem_size), so no product can overflow.
 *
 * Every rank of a group reads the same table with the same settings and
 * the same negotiated arguments, so every rank makes the same choice.
 * Reductions end on "direct" at every size: it folds every element in rank
 * order, so a result's bits do not depend on the size, the element's
 * position or the fusion of small tensors (allreduce_direct.c); cma and shm
 * fold in the same order. The thresholds below were measured (see
 * bench/NOTES.md); the settings' ones come from the world's wf_settings. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/cma.h"
#include "algo/hier.h"
#include "algo/shm_stage.h"

/* Cross-memory attach from these sizes on: below them the transport's
 * algorithms are as fast. Broadcast never on 2 ranks: there the chain's two
 * copies (into the transport by the root, out of it by the receiver) run on
 * both cores at once, while with cma the receiver alone copies. */
#define WF_SEL_ALLREDUCE_CMA_MIN_BYTES_2 ((size_t)2 << 20)      /* 2 ranks */
#define WF_SEL_ALLREDUCE_CMA_MIN_BYTES ((size_t)256 << 10)      /* 3 ranks or more */
#define WF_SEL_REDUCESCATTER_CMA_MIN_BYTES_2 ((size_t)1 << 20)  /* 2 ranks */
#define WF_SEL_REDUCESCATTER_CMA_MIN_BYTES ((size_t)256 << 10)  /* 3 ranks or more */
#define WF_SEL_ALLGATHER_CMA_MIN_BYTES ((size_t)1 << 20)
#define WF_SEL_BROADCAST_CMA_MIN_BYTES ((size_t)64 << 10)       /* 3 ranks or more; never on 2 */

/* The node-aware staged pattern from this size on (shm_numa.c): below it
 * the flat allreduce folds a chunk in one flag round (its FOLD_ALL_BYTES),
 * and a relay's extra flag round costs more than the copies it saves. */
#define WF_SEL_NUMA_MIN_BYTES ((size_t)64 << 10)

typedef enum sel_where { SEL_BOARD, SEL_NUMA, SEL_STAGED, SEL_HIER, SEL_CMA, SEL_ANY } sel_where;

/* The upper end of a size range: none, or a setting (negative: no size). */
typedef enum sel_upto {
  SEL_UNBOUNDED,
  SEL_SMALL_BROADCAST, /* at most WEFT_SMALL_BROADCAST_BYTES */
  SEL_UNSEGMENTED      /* any size, when WEFT_RING_SEGMENT_BYTES is 0 (no pipelining) */
} sel_upto;

typedef struct sel_row {
  sel_where where;
  int min_ranks, max_ranks; /* group size in [min_ranks, max_ranks]; max_ranks 0: no bound */
  size_t min_bytes;         /* size at least this (0: any) */
  sel_upto upto;            /* and at most this */
  const char *algo;
} sel_row;

/* Rows that several tables share. The board's place comes first in every
 * table, staging next (it runs everything it supports fastest on one
 * host), then the hierarchical algorithms across hosts. */
#define SEL_ROW_BOARD {SEL_BOARD, 1, 0, 0, SEL_UNBOUNDED, "board"}
#define SEL_ROW_NUMA {SEL_NUMA, 1, 0, WF_SEL_NUMA_MIN_BYTES, SEL_UNBOUNDED, "numa"}
#define SEL_ROW_STAGED {SEL_STAGED, 1, 0, 0, SEL_UNBOUNDED, "shm"}
#define SEL_ROW_HIER {SEL_HIER, 1, 0, 0, SEL_UNBOUNDED, "hier"}
#define SEL_END {SEL_ANY, 0, 0, 0, SEL_UNBOUNDED, NULL}

static const sel_row k_allreduce[] = {
    SEL_ROW_BOARD,
    SEL_ROW_NUMA,
    SEL_ROW_STAGED,
    SEL_ROW_HIER,
    {SEL_CMA, 2, 2, WF_SEL_ALLREDUCE_CMA_MIN_BYTES_2, SEL_UNBOUNDED, "cma"},
    {SEL_CMA, 3, 0, WF_SEL_ALLREDUCE_CMA_MIN_BYTES, SEL_UNBOUNDED, "cma"},
    {SEL_ANY, 1, 0, 0, SEL_UNBOUNDED, "direct"},
    SEL_END,
};

static const sel_row k_allgather[] = {
    SEL_ROW_BOARD,
    SEL_ROW_NUMA,
    SEL_ROW_STAGED,
    SEL_ROW_HIER,
    {SEL_CMA, 2, 0, WF_SEL_ALLGATHER_CMA_MIN_BYTES, SEL_UNBOUNDED, "cma"},
    {SEL_ANY, 1, 0, 0, SEL_UNBOUNDED, "ring"},
    SEL_END,
};

static const sel_row k_broadcast[] = {
    SEL_ROW_BOARD,
    SEL_ROW_NUMA,
    SEL_ROW_STAGED,
    SEL_ROW_HIER,
    {SEL_CMA, 3, 0, WF_SEL_BROADCAST_CMA_MIN_BYTES, SEL_UNBOUNDED, "cma"},
    {SEL_ANY, 1, 0, 0, SEL_SMALL_BROADCAST, "tree"},
    /* a chain that cannot pipeline passes the whole tensor p - 1 times in turn */
    {SEL_ANY, 3, 0, 0, SEL_UNSEGMENTED, "tree"},
    {SEL_ANY, 1, 0, 0, SEL_UNBOUNDED, "chain"},
    SEL_END,
};

static const sel_row k_alltoall[] = {
    SEL_ROW_BOARD,
    SEL_ROW_STAGED,
    {SEL_CMA, 2, 0, 0, SEL_UNBOUNDED, "cma"},
    {SEL_ANY, 1, 0, 0, SEL_UNBOUNDED, "pairwise"},
    SEL_END,
};

static const sel_row k_reducescatter[] = {
    SEL_ROW_BOARD,
    SEL_ROW_STAGED,
    {SEL_CMA, 2, 2, WF_SEL_REDUCESCATTER_CMA_MIN_BYTES_2, SEL_UNBOUNDED, "cma"},
    {SEL_CMA, 3, 0, WF_SEL_REDUCESCATTER_CMA_MIN_BYTES, SEL_UNBOUNDED, "cma"},
    {SEL_ANY, 1, 0, 0, SEL_UNBOUNDED, "direct"},
    SEL_END,
};

/* One algorithm: each rank sends once and receives once (see permute_direct.c). */
static const sel_row k_permute[] = {
    {SEL_ANY, 1, 0, 0, SEL_UNBOUNDED, "direct"},
    SEL_END,
};

static const sel_row *table_of(wf_coll c) {
  switch (c) {
    case WF_COLL_ALLREDUCE: return k_allreduce;
    case WF_COLL_ALLGATHER: return k_allgather;
    case WF_COLL_BROADCAST: return k_broadcast;
    case WF_COLL_ALLTOALL: return k_alltoall;
    case WF_COLL_REDUCESCATTER: return k_reducescatter;
    case WF_COLL_PERMUTE: return k_permute;
    default: return NULL;
  }
}

/* The board's row at execution: an operation the executor runs has left
 * the board (wf_select_board decided at submission), so the rows below
 * decide. */
static int board_row(const wf_coll_args *a) {
  (void)a;
  return 0;
}

static size_t setting_bytes(int64_t v) { return v > 0 ? (size_t)v : 0; }

int wf_select_board(wf_coll c, size_t bytes, int n, int own, size_t part_bytes, size_t large_bytes,
                    const wf_settings *s, int *split) {
  size_t cap = large_bytes, whole = setting_bytes(s->fast_allreduce_bytes), from = setting_bytes(s->fast_split_bytes);
  *split = 0;
  if (c == WF_COLL_ALLREDUCE) {
    /* split from WEFT_FAST_SPLIT_BYTES on 3+ ranks or with own folds, and
     * beyond WEFT_FAST_ALLREDUCE_BYTES on 2; whole folds (every rank folds
     * every input) up to WEFT_FAST_ALLREDUCE_BYTES, at least the pooled
     * slots' size */
    *split = from && bytes >= from && (n >= 3 || own || bytes > whole);
    if (!*split && cap > whole) cap = whole;
    if (cap < part_bytes) cap = part_bytes;
  }
  return bytes <= cap;
}

static int where_holds(sel_where w, const wf_coll_args *a) {
  switch (w) {
    case SEL_BOARD: return board_row(a);
    case SEL_NUMA: return a->topo && wf_stage_numa(a->topo->stage);
    case SEL_STAGED: return a->topo && a->topo->stage;
    case SEL_HIER: return wf_hier_rule(a);
    case SEL_CMA: return wf_cma_usable(a) && !(a->topo && a->topo->rings);
    case SEL_ANY: return 1;
  }
  return 0;
}

/* The collective's size in elements (see the top of the file). */
static size_t elems_of(const wf_coll_args *a) {
  size_t t = 0;
  switch (a->coll) {
    case WF_COLL_ALLGATHER:
    case WF_COLL_REDUCESCATTER:
      for (int i = 0; i < a->size; i++) t += a->counts[i];
      return t;
    case WF_COLL_ALLTOALL:
      return 0;
    default:
      return a->count;
  }
}

static int row_holds(const sel_row *r, const wf_coll_args *a) {
  if (a->size < r->min_ranks || (r->max_ranks && a->size > r->max_ranks)) return 0;
  if (!where_holds(r->where, a)) return 0;
  size_t n = elems_of(a), es = a->elem_size;
  if (r->min_bytes && n < r->min_bytes / es) return 0;
  if (r->upto == SEL_SMALL_BROADCAST) {
    int64_t small = wf_algo_set(a)->small_broadcast_bytes;
    if (small < 0 || n > (uint64_t)small / es) return 0;
  }
  if (r->upto == SEL_UNSEGMENTED && a->segment_bytes) return 0;
  return 1;
}

const wf_algo *wf_select(const wf_coll_args *a) {
  const sel_row *r = table_of(a->coll);
  for (; r && r->algo; r++) {
    if (!row_holds(r, a)) continue;
    const wf_algo *alg = wf_algo_find(a->coll, r->algo);
    if (alg && alg->supports(a)) return alg;
  }
  return NULL;
}

/* ------------------------------------------------------------ describe */
/* Appends to out (outlen bytes, NUL-terminated), cutting what does not fit. */
static void put(char *out, size_t outlen, size_t *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *out, size_t outlen, size_t *o, const char *fmt, ...) {
  if (*o + 1 >= outlen) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(out + *o, outlen - *o, fmt, ap);
  va_end(ap);
  if (w > 0) *o = (size_t)w >= outlen - *o ? outlen - 1 : *o + (size_t)w;
}

static void put_bytes(char *out, size_t outlen, size_t *o, uint64_t b) {
  if (b && b % (1u << 20) == 0) put(out, outlen, o, "%llu MiB", (unsigned long long)(b >> 20));
  else if (b && b % (1u << 10) == 0) put(out, outlen, o, "%llu KiB", (unsigned long long)(b >> 10));
  else put(out, outlen, o, "%llu B", (unsigned long long)b);
}

static void put_where(char *out, size_t outlen, size_t *o, wf_coll c, sel_where w, const wf_settings *s) {
  switch (w) {
    case SEL_BOARD: put(out, outlen, o, "one host, board"); return;
    case SEL_NUMA: put(out, outlen, o, "one host, staging, ranks on several NUMA nodes"); return;
    case SEL_STAGED: put(out, outlen, o, "one host, staging"); return;
    case SEL_CMA: put(out, outlen, o, "one host without rings, cma"); return;
    case SEL_ANY: put(out, outlen, o, "any"); return;
    case SEL_HIER: {
      int64_t m = wf_hier_mode(c, s);
      put(out, outlen, o, "spans hosts, %s",
          m == 0 ? "hierarchical off" : m == 1 ? "hierarchical on" : "some host with several ranks");
      return;
    }
  }
}

void wf_select_describe(wf_coll c, const wf_settings *s, char *out, size_t outlen) {
  size_t o = 0;
  if (outlen) out[0] = '\0';
  if (!s) s = wf_settings_default();
  for (const sel_row *r = table_of(c); r && r->algo; r++) {
    if (o) put(out, outlen, &o, "; ");
    put_where(out, outlen, &o, c, r->where, s);
    if (r->where == SEL_BOARD) {
      if (!s->fast || s->fast_bytes <= 0) {
        put(out, outlen, &o, ": off (WEFT_FAST=%lld, WEFT_FAST_BYTES=%lld)", (long long)s->fast,
            (long long)s->fast_bytes);
        continue;
      }
      if (c == WF_COLL_ALLREDUCE) {
        put(out, outlen, &o, ": every rank folds every input up to ");
        put_bytes(out, outlen, &o, (uint64_t)setting_bytes(s->fast_allreduce_bytes));
        put(out, outlen, &o, " (WEFT_FAST_ALLREDUCE_BYTES), split folds from ");
        put_bytes(out, outlen, &o, (uint64_t)setting_bytes(s->fast_split_bytes));
        put(out, outlen, &o, " (WEFT_FAST_SPLIT_BYTES) on 3+ ranks, up to the board's large slots -> board");
      } else {
        put(out, outlen, &o, ": up to the board's large slots (WEFT_FAST_LARGE_BYTES) -> board");
      }
      continue;
    }
    if (r->max_ranks && r->max_ranks == r->min_ranks) put(out, outlen, &o, ", %d ranks", r->min_ranks);
    else if (r->min_ranks > 1) put(out, outlen, &o, ", >= %d ranks", r->min_ranks);
    put(out, outlen, &o, ": ");
    if (r->upto == SEL_SMALL_BROADCAST) {
      if (s->small_broadcast_bytes < 0) {
        put(out, outlen, &o, "no size (WEFT_SMALL_BROADCAST_BYTES < 0)");
      } else {
        put(out, outlen, &o, "<= ");
        put_bytes(out, outlen, &o, (uint64_t)s->small_broadcast_bytes);
        put(out, outlen, &o, " (WEFT_SMALL_BROADCAST_BYTES)");
      }
    } else if (r->upto == SEL_UNSEGMENTED) {
      put(out, outlen, &o, "any size when WEFT_RING_SEGMENT_BYTES=0");
    } else if (r->min_bytes) {
      put(out, outlen, &o, ">= ");
      put_bytes(out, outlen, &o, r->min_bytes);
    } else {
      put(out, outlen, &o, "any size");
    }
    put(out, outlen, &o, " -> %s", r->algo);
  }
}

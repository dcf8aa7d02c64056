/* registry.c - the table of collective algorithms, the choice among them,
 * and the table by name (weft_algorithm_*, weft.h). Arguments are validated
 * once here (ranges, NULL buffers, byte-size overflow) so the algorithms
 * can trust them. Then a forced name (WEFT_ALGO_<COLL>) runs if it supports
 * the arguments; a declining one is warned about once and the choice is
 * automatic: the collective's selection table (select.c), whose first
 * matching row with a supporting algorithm wins. An unknown forced name is
 * WEFT_ERR_NOT_FOUND (weft_init refuses it before any call gets here).
 * Every rank computes the same choice from the same negotiated arguments,
 * which the schedules rely on. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "algo/algo.h"
#include "util/err.h"
#include "util/log.h"
#include "util/settings.h"

extern const wf_algo wf_algo_allreduce_direct;
extern const wf_algo wf_algo_allreduce_rd;
extern const wf_algo wf_algo_allreduce_ring;
extern const wf_algo wf_algo_allgather_ring;
extern const wf_algo wf_algo_broadcast_tree;
extern const wf_algo wf_algo_broadcast_chain;
extern const wf_algo wf_algo_alltoall_pairwise;
extern const wf_algo wf_algo_reducescatter_direct;
extern const wf_algo wf_algo_reducescatter_ring;
extern const wf_algo wf_algo_allreduce_cma;
extern const wf_algo wf_algo_allgather_cma;
extern const wf_algo wf_algo_broadcast_cma;
extern const wf_algo wf_algo_alltoall_cma;
extern const wf_algo wf_algo_reducescatter_cma;
extern const wf_algo wf_algo_allreduce_hier;
extern const wf_algo wf_algo_allgather_hier;
extern const wf_algo wf_algo_broadcast_hier;
extern const wf_algo wf_algo_allreduce_shm;
extern const wf_algo wf_algo_reducescatter_shm;
extern const wf_algo wf_algo_allgather_shm;
extern const wf_algo wf_algo_broadcast_shm;
extern const wf_algo wf_algo_alltoall_shm;
extern const wf_algo wf_algo_permute_direct;
extern const wf_algo wf_algo_allreduce_numa;
extern const wf_algo wf_algo_broadcast_numa;
extern const wf_algo wf_algo_allgather_numa;

static const wf_algo *const g_table[] = {
    &wf_algo_allreduce_direct,    &wf_algo_allreduce_rd,        &wf_algo_allreduce_ring,
    &wf_algo_allgather_ring,      &wf_algo_broadcast_tree,      &wf_algo_broadcast_chain,
    &wf_algo_alltoall_pairwise,   &wf_algo_reducescatter_direct, &wf_algo_reducescatter_ring,
    &wf_algo_allreduce_hier,      &wf_algo_allgather_hier,      &wf_algo_broadcast_hier,
    &wf_algo_allreduce_cma,       &wf_algo_allgather_cma,       &wf_algo_broadcast_cma,
    &wf_algo_alltoall_cma,        &wf_algo_reducescatter_cma,   &wf_algo_allreduce_shm,
    &wf_algo_reducescatter_shm,   &wf_algo_allgather_shm,       &wf_algo_broadcast_shm,
    &wf_algo_alltoall_shm,        &wf_algo_permute_direct,      &wf_algo_allreduce_numa,
    &wf_algo_broadcast_numa,      &wf_algo_allgather_numa,      NULL};

const wf_algo *const *wf_algo_table(void) { return g_table; }

/* The collective's algorithm of that name, or NULL. */
static const wf_algo *find(wf_coll c, const char *name) {
  for (const wf_algo *const *it = g_table; *it; it++)
    if ((*it)->coll == c && !strcmp((*it)->name, name)) return *it;
  return NULL;
}

const wf_algo *wf_algo_find(wf_coll c, const char *name) { return name ? find(c, name) : NULL; }

void wf_algo_names(wf_coll c, char *out, size_t outlen) {
  size_t o = 0;
  if (outlen) out[0] = '\0';
  for (const wf_algo *const *it = g_table; *it; it++) {
    if ((*it)->coll != c || o + 1 >= outlen) continue;
    int w = snprintf(out + o, outlen - o, "%s%s", o ? ", " : "", (*it)->name);
    if (w > 0) o = (size_t)w >= outlen - o ? outlen - 1 : o + (size_t)w;
  }
}

const wf_settings *wf_algo_set(const wf_coll_args *a) { return a->set ? a->set : wf_settings_default(); }

/* Local names: the collective's wire name lives in wire.c, which the
 * algorithms do not otherwise need. */
static const char *coll_name(wf_coll c) {
  static const char *const names[] = {"allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier",
                                      "join",      "permute"};
  return (unsigned)c < sizeof names / sizeof names[0] ? names[c] : "unknown";
}

/* 1 if off + n elements of es bytes fit in size_t. */
static int span_ok(size_t off, size_t n, size_t es) {
  if (n > SIZE_MAX - off) return 0;
  return off + n <= SIZE_MAX / es;
}

/* Per-rank block arrays (allgather, reducescatter, alltoall): present, and
 * every block addressable. Sets *total to the sum of counts. */
static weft_status check_blocks(const wf_coll_args *a, const size_t *counts, const size_t *displs, const char *what,
                                size_t *total) {
  if (!counts || !displs)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: %scounts/displs are NULL", coll_name(a->coll), what);
  size_t sum = 0;
  for (int i = 0; i < a->size; i++) {
    if (!span_ok(displs[i], counts[i], a->elem_size) || counts[i] > SIZE_MAX - sum)
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: %sblock of rank %d (%zu elements at %zu) overflows",
                    coll_name(a->coll), what, i, counts[i], displs[i]);
    sum += counts[i];
  }
  *total = sum;
  return WEFT_OK;
}

static weft_status validate(const wf_coll_args *a) {
  const char *cn = coll_name(a->coll);
  if (a->size < 1 || a->rank < 0 || a->rank >= a->size)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: rank %d out of range for size %d", cn, a->rank, a->size);
  if (a->elem_size == 0) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: element size 0", cn);
  size_t total = 0;
  switch (a->coll) {
    case WF_COLL_ALLREDUCE:
    case WF_COLL_BROADCAST:
      if (!span_ok(0, a->count, a->elem_size))
        return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: %zu elements overflow", cn, a->count);
      if (a->nsegs && a->coll == WF_COLL_ALLREDUCE) {
        size_t at = 0;
        for (size_t i = 0; i < a->nsegs; i++) {
          if (!a->segs[i].ptr || !a->segs[i].count || a->segs[i].at != at)
            return wf_err(WEFT_ERR_INVALID_ARGUMENT, "allreduce: segment %zu is empty, NULL or out of order", i);
          at += a->segs[i].count;
        }
        if (at != a->count)
          return wf_err(WEFT_ERR_INVALID_ARGUMENT, "allreduce: segments hold %zu elements, not %zu", at, a->count);
      } else if (a->count && !a->buf) {
        return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: NULL buffer", cn);
      }
      if (a->coll == WF_COLL_BROADCAST && (a->root < 0 || a->root >= a->size))
        return wf_err(WEFT_ERR_INVALID_ARGUMENT, "broadcast: root %d out of range for size %d", a->root, a->size);
      if (a->coll == WF_COLL_ALLREDUCE &&
          ((unsigned)a->op >= WEFT_OP_COUNT_ || (unsigned)a->dtype >= WEFT_DTYPE_COUNT_))
        return wf_err(WEFT_ERR_INVALID_ARGUMENT, "allreduce: unknown op %d or dtype %d", (int)a->op, (int)a->dtype);
      return WEFT_OK;
    case WF_COLL_ALLGATHER:
      WF_CHECK(check_blocks(a, a->counts, a->displs, "", &total));
      if (total && !a->out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "allgather: NULL output");
      if (a->counts[a->rank] && !a->in) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "allgather: NULL input");
      return WEFT_OK;
    case WF_COLL_REDUCESCATTER:
      WF_CHECK(check_blocks(a, a->counts, a->displs, "", &total));
      if (total && !a->in) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "reducescatter: NULL input");
      if (a->counts[a->rank] && !a->out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "reducescatter: NULL output");
      if ((unsigned)a->op >= WEFT_OP_COUNT_ || (unsigned)a->dtype >= WEFT_DTYPE_COUNT_)
        return wf_err(WEFT_ERR_INVALID_ARGUMENT, "reducescatter: unknown op %d or dtype %d", (int)a->op,
                      (int)a->dtype);
      return WEFT_OK;
    case WF_COLL_ALLTOALL:
      WF_CHECK(check_blocks(a, a->send_counts, a->send_displs, "send ", &total));
      if (total && !a->in) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "alltoall: NULL input");
      WF_CHECK(check_blocks(a, a->recv_counts, a->recv_displs, "receive ", &total));
      if (total && !a->out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "alltoall: NULL output");
      if (a->send_counts[a->rank] != a->recv_counts[a->rank])
        return wf_err(WEFT_ERR_INVALID_ARGUMENT, "alltoall: rank %d sends itself %zu elements but expects %zu",
                      a->rank, a->send_counts[a->rank], a->recv_counts[a->rank]);
      return WEFT_OK;
    case WF_COLL_PERMUTE:
      if (a->send_to < 0 || a->send_to >= a->size || a->recv_from < 0 || a->recv_from >= a->size ||
          (a->send_to == a->rank) != (a->recv_from == a->rank))
        return wf_err(WEFT_ERR_INVALID_ARGUMENT, "permute: rank %d sends to %d and receives from %d (size %d)",
                      a->rank, a->send_to, a->recv_from, a->size);
      if (!span_ok(0, a->count, a->elem_size))
        return wf_err(WEFT_ERR_INVALID_ARGUMENT, "permute: %zu elements overflow", a->count);
      if (a->count && (!a->in || !a->out)) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "permute: NULL buffer");
      return WEFT_OK;
    default:
      return WEFT_OK; /* no algorithm will take it; reported by the caller */
  }
}

/* A forced name is read for every collective: warn once per collective
 * that it declined instead of on every call. Relaxed: the flags only
 * throttle log lines. */
static _Atomic unsigned g_warned;
static int first_warning(wf_coll c, int kind) {
  unsigned bit = 1u << ((unsigned)c % 16 * 2 + (unsigned)kind);
  return !(atomic_fetch_or_explicit(&g_warned, bit, memory_order_relaxed) & bit);
}

/* a's elements per rank for messages: the buffer's, or this rank's input
 * (allgather, reducescatter and alltoall count no buffer). */
static size_t elems_of(const wf_coll_args *a) {
  const size_t *c = a->coll == WF_COLL_ALLTOALL ? a->send_counts
                    : a->coll == WF_COLL_ALLGATHER || a->coll == WF_COLL_REDUCESCATTER ? a->counts
                                                                                        : NULL;
  if (!c) return a->count;
  if (a->coll == WF_COLL_ALLGATHER) return c[a->rank];
  size_t t = 0;
  for (int i = 0; i < a->size; i++) t += c[i];
  return t;
}

/* The algorithm for a: forced, else the selection table's (select.c);
 * NULL if none supports a, or (*unknown = 1) if forced names none. */
static const wf_algo *choose(const wf_coll_args *a, const char *forced, int *unknown) {
  const char *cn = coll_name(a->coll);
  const wf_algo *pick = NULL;

  *unknown = 0;
  if (forced && *forced) {
    const wf_algo *named = find(a->coll, forced);
    if (!named) {
      *unknown = 1;
      return NULL;
    } else if (!named->supports(a)) {
      if (first_warning(a->coll, 1))
        WF_WARN(WF_SUB_ALGO,
                "%s algorithm '%s' declines %zu elements on %d ranks; choosing automatically (warned once)", cn,
                forced, elems_of(a), a->size);
    } else {
      pick = named;
    }
  }

  return pick ? pick : wf_select(a);
}

int wf_algo_takes_segments(const wf_coll_args *a, const char *forced) {
  if (!a || a->coll != WF_COLL_ALLREDUCE) return 0;
  wf_coll_args c = *a; /* the choice as for one contiguous buffer */
  c.segs = NULL;
  c.nsegs = 0;
  int unknown;
  const wf_algo *pick = choose(&c, forced, &unknown);
  return pick && pick->segments;
}

weft_status wf_algo_build(const wf_coll_args *a, const char *forced, wf_sched *s, const char **chosen) {
  if (chosen) *chosen = NULL;
  if (!a || !s) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_algo_build: NULL arguments");
  WF_CHECK(validate(a));
  const char *cn = coll_name(a->coll);
  int unknown;
  const wf_algo *pick = choose(a, forced, &unknown);
  if (unknown) {
    char names[256];
    wf_algo_names(a->coll, names, sizeof names);
    return wf_err(WEFT_ERR_NOT_FOUND, "%s has no algorithm '%s' (it has: %s)", cn, forced, names);
  }
  if (!pick)
    return wf_err(WEFT_ERR_NOT_SUPPORTED, "%s: no algorithm supports %zu elements on %d ranks", cn, a->count, a->size);
  if (a->nsegs && !pick->segments)
    return wf_err(WEFT_ERR_INTERNAL, "%s %s: cannot take %zu segments", cn, pick->name, a->nsegs);

  WF_DEBUG(WF_SUB_ALGO, "%s: %s (rank %d of %d, %zu elements)", cn, pick->name, a->rank, a->size, a->count);
  /* the schedule's REDUCE/SCALE steps are of this collective's type */
  s->dtype = a->dtype;
  s->op = a->op;
  weft_status st = pick->build(a, s);
  if (st < 0) return st;
  st = wf_sched_finish(s);
  if (st < 0) return wf_err(st, "%s %s: no memory for the schedule", cn, pick->name);
  if (chosen) *chosen = pick->name;
  return WEFT_OK;
}

/* ------------------------------------------------------------ by name (weft.h) */
_Static_assert((int)WEFT_COLLECTIVE_ALLREDUCE == (int)WF_COLL_ALLREDUCE &&
                   (int)WEFT_COLLECTIVE_ALLGATHER == (int)WF_COLL_ALLGATHER &&
                   (int)WEFT_COLLECTIVE_BROADCAST == (int)WF_COLL_BROADCAST &&
                   (int)WEFT_COLLECTIVE_ALLTOALL == (int)WF_COLL_ALLTOALL &&
                   (int)WEFT_COLLECTIVE_REDUCESCATTER == (int)WF_COLL_REDUCESCATTER,
               "weft_collective numbers are wf_coll's");

static int known_coll(weft_collective c) { return (unsigned)c < (unsigned)WEFT_COLLECTIVE_COUNT_; }

const char *weft_collective_name(weft_collective c) { return known_coll(c) ? coll_name((wf_coll)c) : "unknown"; }

int weft_algorithm_count(weft_collective c) {
  if (!known_coll(c)) return -1;
  int n = 0;
  for (const wf_algo *const *it = g_table; *it; it++) n += (*it)->coll == (wf_coll)c;
  return n;
}

const char *weft_algorithm_name(weft_collective c, int index) {
  if (!known_coll(c) || index < 0) return NULL;
  for (const wf_algo *const *it = g_table; *it; it++)
    if ((*it)->coll == (wf_coll)c && index-- == 0) return (*it)->name;
  return NULL;
}

weft_status weft_algorithm_lookup(weft_collective c, const char *name, int *index) {
  wf_err_clear();
  if (index) *index = -1;
  if (!known_coll(c))
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_algorithm_lookup: unknown collective %d", (int)c);
  if (!name || !index)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_algorithm_lookup: %s is NULL", name ? "index" : "name");
  int i = 0;
  for (const wf_algo *const *it = g_table; *it; it++) {
    if ((*it)->coll != (wf_coll)c) continue;
    if (!strcmp((*it)->name, name)) {
      *index = i;
      return WEFT_OK;
    }
    i++;
  }
  char names[256];
  wf_algo_names((wf_coll)c, names, sizeof names);
  return wf_err(WEFT_ERR_NOT_FOUND, "weft_algorithm_lookup: %s has no algorithm '%s' (it has: %s)%s",
                coll_name((wf_coll)c), name, names,
                !strcmp(name, "board") ? "; \"board\" is the one-host fast path, never forced (WEFT_FAST)" : "");
}

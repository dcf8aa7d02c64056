/* shm_stage.c - the staged collectives' runtime (see shm_stage.h): chunk
 * geometry, the per-chunk phases of each collective, and the resumable
 * state machine the executor polls.
 *
 * Every collective is a pipeline of chunks, each going through up to three
 * phases on every rank:
 *   A  copy in: this rank's data for chunk c into slot c % nslots of its own
 *      region; publish ready = v(c). Needs the slot free: every peer's done
 *      shows it finished reading the slot's previous chunk.
 *   B  fold (allreduce, reducescatter): once every peer's ready shows c, fold
 *      this rank's share of c in rank order, ((x_0 op x_1) op x_2) ..., the
 *      order of "direct", so both give the same bits; allreduce publishes
 *      reduced = v(c) (the slice is in its slot for the peers).
 *   C  copy out (allreduce, allgather, broadcast, alltoall): each peer's
 *      part of c from its region into this rank's output, as soon as that
 *      peer's flag shows it.
 * then done = v(c). Allreduce: rank r folds slice r of each chunk (its own
 * slice straight from its buffer, the others' from their slots; the result
 * goes to its buffer and to slice r of its slot, which no peer reads as
 * input; with two ranks, into the peer's slot over the operand it just
 * read), then copies the other slices out. Small allreduces ("fold all")
 * skip C: every rank folds the whole chunk from all slots, same order, same
 * bits, one flag round. Reducescatter: slot = one piece per rank; rank r
 * folds its block's piece into its output. Allgather: each rank's block
 * piece; broadcast: the root's. Alltoall: slot = one piece of each block the
 * rank sends; each rank copies its pieces out of every peer's slot. A rank's
 * own allgather or alltoall block goes from input to output right after it
 * publishes the chunk (copy_own): nobody waits for that copy. Copy-in runs
 * at most `ahead` chunks ahead of the copies out, so a chunk's buffer lines
 * are still in cache when written. Copies into the outputs use plain stores
 * while the host's outputs (this rank's times the local ranks) fit in the
 * last-level cache, streaming stores beyond (NT_HOST_BYTES; each rank's own
 * choice): then the lines would be evicted unread anyway, and skipping
 * their read-for-ownership saves a third of the copy's memory traffic.
 * Two-rank allreduce keeps plain stores at every size: there streaming does
 * not pay, because its copy-out is half of what it writes (bench/NOTES.md,
 * "Streaming stores in staging").
 */
#include "algo/shm_stage_int.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "algo/numa_plan.h"
#include "reduce/reduce.h"
#include "util/err.h"
#include "util/time.h"

/* ------------------------------------------------------------------ helpers */

static void cpu_relax(void) {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

void wf_stage_publish(stage_op *o, _Atomic uint64_t *f, uint64_t v) {
  /* release: this rank's slot writes (and reads, for done) happen before */
  atomic_store_explicit(f, v, memory_order_release);
  if (o->g->wake) o->g->wake(o->g->wake_ctx);
}

/* Allreduce buffer pieces: elements [pos, end) of the segments' concatenation,
 * segment by segment. */
typedef struct pieces {
  const stage_op *o;
  size_t k, pos, end;
} pieces;

static pieces pieces_of(const stage_op *o, size_t lo, size_t len) {
  size_t a = 0, b = o->nsegs; /* the last segment starting at or before lo */
  while (b - a > 1) {
    size_t m = a + (b - a) / 2;
    if (o->segs[m].at <= lo) a = m;
    else b = m;
  }
  return (pieces){o, a, lo, lo + len};
}

/* The next piece: *p its memory, *n its elements, *rel its position from
 * the range's start; 0 when none is left. */
static int next_piece(pieces *it, size_t lo, char **p, size_t *n, size_t *rel) {
  if (it->pos >= it->end) return 0;
  const wf_seg *s = &it->o->segs[it->k];
  while (it->pos >= s->at + s->count) s = &it->o->segs[++it->k];
  size_t off = it->pos - s->at, m = s->count - off;
  if (m > it->end - it->pos) m = it->end - it->pos;
  *p = (char *)s->ptr + off * it->o->es;
  *n = m;
  *rel = it->pos - lo;
  it->pos += m;
  return 1;
}

/* Copies elements [lo, lo + len) of the allreduce buffer to dst. */
void wf_stage_gather(const stage_op *o, char *dst, size_t lo, size_t len) {
  pieces it = pieces_of(o, lo, len);
  char *p;
  size_t n, rel;
  while (next_piece(&it, lo, &p, &n, &rel)) wf_copy(dst + rel * o->es, p, n * o->es);
}

/* Copies src to elements [lo, lo + len) of the allreduce buffer. */
void wf_stage_scatter(const stage_op *o, size_t lo, const char *src, size_t len) {
  pieces it = pieces_of(o, lo, len);
  char *p;
  size_t n, rel;
  while (next_piece(&it, lo, &p, &n, &rel)) o->put(p, src + rel * o->es, n * o->es);
}

/* ------------------------------------------------------------------ context */

weft_status wf_stage_create(int n, int me, void *const *regions, size_t bytes, wf_stage_wake_fn wake, void *wake_ctx,
                            wf_stage **out) {
  *out = NULL;
  if (n < 1 || me < 0 || me >= n || !regions)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "staging: %d regions (rank %d) cannot be used", n, me);
  if (bytes < HDR_BYTES + 4096) return WEFT_OK; /* too small to pay: no staging (alike on every rank) */
  wf_stage *g = calloc(1, sizeof *g);
  if (!g || !(g->hdr = calloc((size_t)n, sizeof *g->hdr)) || !(g->data = calloc((size_t)n, sizeof *g->data))) {
    wf_stage_destroy(g);
    return wf_err(WEFT_ERR_NO_MEMORY, "staging: out of memory");
  }
  for (int i = 0; i < n; i++) {
    if (!regions[i] || (uintptr_t)regions[i] % LINE) {
      wf_stage_destroy(g);
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "staging: region %d is missing or misaligned", i);
    }
    g->hdr[i] = regions[i];
    g->data[i] = (char *)regions[i] + HDR_BYTES;
  }
  g->n = n;
  g->me = me;
  g->payload = bytes - HDR_BYTES;
  g->wake = wake;
  g->wake_ctx = wake_ctx;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  if (!sched_getaffinity(0, sizeof set, &set) && CPU_COUNT(&set) < cpus) cpus = CPU_COUNT(&set);
  g->spin_ns = cpus > 0 && n > cpus ? 0 : SPIN_NS;
  *out = g;
  return WEFT_OK;
}

void wf_stage_destroy(wf_stage *g) {
  if (!g) return;
  if (g->cur) g->cur->g = NULL; /* an op that outlives us must not touch g */
  free(g->hdr);
  free(g->data);
  free(g);
}

int wf_stage_size(const wf_stage *g) { return g ? g->n : 0; }

void wf_stage_set_spin(wf_stage *g, int64_t ns) { g->spin_ns = ns > 0 ? ns : 0; }

void wf_stage_set_numa(wf_stage *g, const int *nodes) {
  g->plan = nodes && wf_numa_plan_make(g->n, nodes, &g->plan_mem) ? &g->plan_mem : NULL;
}

const wf_numa_plan *wf_stage_numa(const wf_stage *g) { return g ? g->plan : NULL; }

/* ------------------------------------------------------------------ geometry */

/* Chunking of a's collective over g's regions; 0 if it cannot run. */
static int plan(const wf_coll_args *a, const wf_stage *g, int numa, geom *gm) {
  size_t es = a->elem_size, n = (size_t)a->size, cap = g->payload / MIN_SLOTS, len = 0;
  if (cap > CHUNK_BYTES) cap = CHUNK_BYTES;
  cap -= cap % 64;
  memset(gm, 0, sizeof *gm);
  switch (a->coll) {
    case WF_COLL_ALLREDUCE: {
      len = a->count;
      gm->fold_all = !numa && a->count * es <= FOLD_ALL_BYTES;
      size_t q = n * (64 / es); /* slices of whole cache lines (es <= 8) */
      gm->E = cap / es;
      if (!gm->fold_all && gm->E >= 2 * q) gm->E -= gm->E % q;
      if (gm->E < n) return 0;
      gm->slot = gm->E * es;
      break;
    }
    case WF_COLL_REDUCESCATTER:
    case WF_COLL_ALLGATHER:
    case WF_COLL_ALLTOALL: { /* slot: one piece per rank (allgather: its own only, unless node-aware) */
      if (a->coll == WF_COLL_ALLTOALL) {
        if (!a->block_max) return 0; /* the chunk count must be the same on every rank */
        len = a->block_max;
      } else {
        for (int i = 0; i < a->size; i++)
          if (a->counts[i] > len) len = a->counts[i];
      }
      size_t per = a->coll == WF_COLL_ALLGATHER && !numa ? 1 : n; /* node-aware: a relay holds others' pieces */
      gm->E = cap / per / es;
      if (gm->E >= 2 * (64 / es)) gm->E -= gm->E % (64 / es); /* pieces of whole cache lines */
      if (gm->E < 1) return 0;
      gm->slot = gm->E * es * per;
      break;
    }
    case WF_COLL_BROADCAST:
      len = a->count;
      gm->E = cap / es;
      if (gm->E < 1) return 0;
      gm->slot = gm->E * es;
      break;
    default:
      return 0;
  }
  gm->nslots = g->payload / gm->slot;
  gm->nchunks = len / gm->E + (len % gm->E ? 1 : 0);
  return gm->nslots >= 2 && gm->nchunks <= MAX_CHUNKS;
}

int wf_stage_supports(const wf_coll_args *a) { return wf_stage_supports_as(a, 0); }

int wf_stage_supports_as(const wf_coll_args *a, int numa) {
  const wf_stage *g = a->topo ? a->topo->stage : NULL;
  geom gm;
  return g && a->size >= 2 && a->size <= MAX_RANKS && a->size == g->n && a->rank == g->me && plan(a, g, numa, &gm);
}

/* The copy into a's outputs: streaming once the host's outputs outgrow the
 * cache (see the top of the file). */
static wf_copy_fn output_copy(const wf_coll_args *a) {
  size_t per = 0; /* output elements per rank that copy-out writes */
  const size_t *blocks = a->coll == WF_COLL_ALLGATHER ? a->counts : a->coll == WF_COLL_ALLTOALL ? a->recv_counts : NULL;
  if (blocks)
    for (int i = 0; i < a->size; i++) per += blocks[i];
  else if (a->coll == WF_COLL_BROADCAST || (a->coll == WF_COLL_ALLREDUCE && a->size >= 3))
    per = a->count;
  wf_copy_fn nt = per * a->elem_size >= NT_HOST_BYTES / (size_t)a->size ? wf_copy_nt() : NULL;
  return nt ? nt : wf_copy;
}

weft_status wf_stage_build(const wf_coll_args *a, wf_sched *s) { return wf_stage_build_as(a, s, 0); }

weft_status wf_stage_build_as(const wf_coll_args *a, wf_sched *s, int numa) {
  wf_stage *g = a->topo ? a->topo->stage : NULL;
  geom gm;
  if (!g || !plan(a, g, numa, &gm) || (numa && !g->plan))
    return wf_err(WEFT_ERR_INTERNAL, "staging cannot run this collective");
  if (gm.nchunks == 0) return WEFT_OK;
  size_t n = (size_t)a->size, nsegs = a->coll != WF_COLL_ALLREDUCE ? 0 : a->nsegs ? a->nsegs : 1;
  size_t tmp = numa && a->coll == WF_COLL_ALLREDUCE ? SUB_BYTES : 0; /* fold scratch, 64-byte aligned below */
  size_t bytes = sizeof(stage_op) + 4 * n * sizeof(size_t) + (n + 1) * sizeof(char *) + nsegs * sizeof(wf_seg) +
                 (tmp ? tmp + 64 : 0);
  char *p = wf_sched_scratch(s, bytes);
  if (!p) return wf_err(WEFT_ERR_NO_MEMORY, "staging: no memory for %zu bytes of scratch", bytes);
  stage_op *o = (stage_op *)(void *)p;
  memset(o, 0, sizeof *o);
  o->counts = (size_t *)(void *)(p + sizeof *o);
  o->displs = o->counts + n;
  o->rcounts = o->displs + n;
  o->rdispls = o->rcounts + n;
  o->x = (const char **)(void *)(o->rdispls + n);
  if (nsegs) { /* the allreduce buffer as segments: its own, or the one buffer */
    wf_seg *sg = (wf_seg *)(void *)(o->x + n + 1);
    if (a->nsegs) memcpy(sg, a->segs, nsegs * sizeof *sg);
    else sg[0] = (wf_seg){a->buf, 0, a->count};
    o->segs = sg;
    o->nsegs = nsegs;
  }
  o->g = g;
  o->coll = a->coll;
  o->dt = a->dtype;
  o->op = a->op;
  o->es = a->elem_size;
  o->n = a->size;
  o->me = a->rank;
  o->root = a->root;
  o->buf = a->coll == WF_COLL_BROADCAST ? a->buf : NULL;
  o->in = a->in;
  o->out = a->out;
  o->count = a->count;
  o->gm = gm;
  o->put = output_copy(a);
  /* oversubscribed: run as far ahead as the slots allow (a peer may be off
   * its core a while); else stay close so the buffer lines stay in cache */
  o->ahead = !g->spin_ns || gm.nslots < AHEAD ? gm.nslots : AHEAD;
  if (a->coll == WF_COLL_REDUCESCATTER || a->coll == WF_COLL_ALLGATHER || a->coll == WF_COLL_ALLTOALL) {
    int a2a = a->coll == WF_COLL_ALLTOALL;
    memcpy(o->counts, a2a ? a->send_counts : a->counts, n * sizeof(size_t));
    memcpy(o->displs, a2a ? a->send_displs : a->displs, n * sizeof(size_t));
    if (a2a) {
      memcpy(o->rcounts, a->recv_counts, n * sizeof(size_t));
      memcpy(o->rdispls, a->recv_displs, n * sizeof(size_t));
    }
  }
  o->has_a = a->coll != WF_COLL_BROADCAST || a->rank == a->root;
  o->has_b = a->coll == WF_COLL_ALLREDUCE || a->coll == WF_COLL_REDUCESCATTER;
  o->has_c = (a->coll == WF_COLL_ALLREDUCE && !gm.fold_all) || a->coll == WF_COLL_ALLGATHER ||
             a->coll == WF_COLL_ALLTOALL || (a->coll == WF_COLL_BROADCAST && a->rank != a->root);
  if (tmp) { /* after everything else: the scratch's end is the allocation's */
    uintptr_t at = (uintptr_t)(p + bytes - tmp - 64);
    o->tmp = (char *)((at + 63) & ~(uintptr_t)63);
  }
  o->numa = numa;
  wf_sched_stage(s, o);
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "staging: no memory for the schedule") : WEFT_OK;
}

/* ------------------------------------------------------------------ phases */

/* Allreduce chunk c: its first element and length. */
static size_t ar_chunk(const stage_op *o, size_t c, size_t *start) {
  return wf_stage_piece(o->count, o->gm.E, c, start);
}

/* A: this rank's data of chunk c into its slot. */
static void copy_in(stage_op *o, size_t c) {
  size_t es = o->es, off, len;
  char *slot = wf_stage_slot(o, o->me, c);
  switch (o->coll) {
    case WF_COLL_ALLREDUCE: {
      size_t start, m = ar_chunk(o, c, &start);
      if (o->gm.fold_all) {
        wf_stage_gather(o, slot, start, m);
        break;
      }
      /* the peers' slices only: this rank reads its own from its buffer */
      wf_stage_block(m, o->n, o->me, &off, &len);
      wf_stage_gather(o, slot, start, off);
      wf_stage_gather(o, slot + (off + len) * es, start + off + len, m - off - len);
      break;
    }
    case WF_COLL_REDUCESCATTER:
      for (int j = 0; j < o->n; j++) {
        if (j == o->me) continue;
        size_t l = wf_stage_piece(o->counts[j], o->gm.E, c, &off);
        if (l) wf_copy(slot + (size_t)j * o->gm.E * es, o->in + (o->displs[j] + off) * es, l * es);
      }
      break;
    case WF_COLL_ALLGATHER:
      len = wf_stage_piece(o->counts[o->me], o->gm.E, c, &off);
      if (!len) break;
      wf_copy(slot, o->in + off * es, len * es); /* its own block: copy_own, after the publish */
      break;
    case WF_COLL_BROADCAST:
      len = wf_stage_piece(o->count, o->gm.E, c, &off);
      wf_copy(slot, o->buf + off * es, len * es);
      break;
    case WF_COLL_ALLTOALL: /* piece c of each peer's block (its own: copy_own) */
      for (int j = 0; j < o->n; j++) {
        size_t l = j == o->me ? 0 : wf_stage_piece(o->counts[j], o->gm.E, c, &off);
        if (l) wf_copy(slot + (size_t)j * o->gm.E * es, o->in + (o->displs[j] + off) * es, l * es);
      }
      break;
    default:
      break;
  }
}

/* A': chunk c of this rank's own block from its input to its output
 * (allgather not in place, alltoall), after publishing ready: no peer waits
 * for it. */
void wf_stage_copy_own(stage_op *o, size_t c) {
  if (o->coll != WF_COLL_ALLGATHER && o->coll != WF_COLL_ALLTOALL) return;
  int a2a = o->coll == WF_COLL_ALLTOALL;
  size_t es = o->es, off, from = a2a ? o->displs[o->me] : 0, to = a2a ? o->rdispls[o->me] : o->displs[o->me];
  if (!a2a && o->in == o->out + to * es) return; /* in place */
  size_t len = wf_stage_piece(o->counts[o->me], o->gm.E, c, &off);
  if (len) o->put(o->out + (to + off) * es, o->in + (from + off) * es, len * es);
}

/* B: this rank's share of chunk c, folded in rank order. */
static void reduce(stage_op *o, size_t c) {
  size_t es = o->es, off, len;
  if (o->coll == WF_COLL_REDUCESCATTER) {
    len = wf_stage_piece(o->counts[o->me], o->gm.E, c, &off);
    if (!len) return;
    for (int k = 0; k < o->n; k++)
      o->x[k] = k == o->me ? o->in + (o->displs[k] + off) * es : wf_stage_slot(o, k, c) + (size_t)o->me * o->gm.E * es;
    /* dst is the output, never an operand: accumulate there */
    wf_fold(o->dt, o->op, o->out + off * es, (const void *const *)o->x, o->n, len, NULL);
    return;
  }
  size_t start, m = ar_chunk(o, c, &start), rel, k2;
  char *p;
  if (o->gm.fold_all) { /* every operand from its slot; the result into the buffer */
    pieces it = pieces_of(o, start, m);
    while (next_piece(&it, start, &p, &k2, &rel)) {
      for (int k = 0; k < o->n; k++) o->x[k] = wf_stage_slot(o, k, c) + rel * es;
      wf_fold(o->dt, o->op, p, (const void *const *)o->x, o->n, k2, NULL);
    }
    return;
  }
  wf_stage_block(m, o->n, o->me, &off, &len);
  if (!len) return;
  char *tmp = wf_stage_slot(o, o->me, c) + off * es;
  /* Intermediate results in this rank's own slice of its slot (no peer reads
   * it as input), the last into the buffer; then the result goes where the
   * peers copy it from: this rank's slot, or with two ranks the peer's slot
   * over the operand just read (its only reader is this fold; the lines are
   * in this core's cache, so writing them costs no transfer, and the folds
   * run faster than when they write lines of this rank's own slot; see
   * bench/NOTES.md, "Two-rank folds into the peer's slot"). */
  char *res = o->n == 2 ? wf_stage_slot(o, 1 - o->me, c) + off * es : tmp;
  size_t sub = SUB_BYTES / es; /* the copy reads what the fold just wrote, from L1 */
  for (size_t at = 0; at < len; at += sub) {
    size_t m2 = len - at < sub ? len - at : sub, lo = start + off + at;
    pieces it = pieces_of(o, lo, m2); /* this rank's slice, segment by segment */
    while (next_piece(&it, lo, &p, &k2, &rel)) {
      size_t b = (at + rel) * es;
      for (int k = 0; k < o->n; k++) o->x[k] = k == o->me ? p : wf_stage_slot(o, k, c) + off * es + b;
      wf_fold(o->dt, o->op, p, (const void *const *)o->x, o->n, k2, tmp + b);
      wf_copy(res + b, p, k2 * es);
    }
  }
}

/* The flag of peer j that shows its part of chunk c can be copied out. */
static _Atomic uint64_t *out_flag(const stage_op *o, int j) {
  return o->coll == WF_COLL_ALLREDUCE ? &o->g->hdr[j]->reduced : &o->g->hdr[j]->ready;
}

/* C: peer j's part of chunk c into this rank's output. */
static void copy_out(stage_op *o, int j, size_t c) {
  size_t es = o->es, off, len;
  /* allreduce of two ranks: the peer wrote its slice into this rank's slot */
  const char *slot = wf_stage_slot(o, o->coll == WF_COLL_ALLREDUCE && o->n == 2 ? o->me : j, c);
  if (o->coll == WF_COLL_ALLREDUCE) {
    size_t start, m = ar_chunk(o, c, &start);
    wf_stage_block(m, o->n, j, &off, &len);
    wf_stage_scatter(o, start + off, slot + off * es, len);
  } else if (o->coll == WF_COLL_ALLGATHER) {
    len = wf_stage_piece(o->counts[j], o->gm.E, c, &off);
    if (len) o->put(o->out + (o->displs[j] + off) * es, slot, len * es);
  } else if (o->coll == WF_COLL_ALLTOALL) { /* this rank's piece in peer j's slot */
    len = wf_stage_piece(o->rcounts[j], o->gm.E, c, &off);
    if (len) o->put(o->out + (o->rdispls[j] + off) * es, slot + (size_t)o->me * o->gm.E * es, len * es);
  } else { /* broadcast from the root's slot */
    len = wf_stage_piece(o->count, o->gm.E, c, &off);
    o->put(o->buf + off * es, slot, len * es);
  }
}

/* The peers that chunk c's copy-out reads from (bit mask). */
static uint64_t out_peers(const stage_op *o) {
  if (o->coll == WF_COLL_BROADCAST) return (uint64_t)1 << o->root;
  uint64_t m = o->n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << o->n) - 1);
  return m & ~((uint64_t)1 << o->me);
}

/* ------------------------------------------------------------------ conditions */

static int all_ready(const stage_op *o, size_t c) {
  for (int k = 0; k < o->n; k++)
    if (k != o->me && !wf_stage_reached(wf_stage_load(&o->g->hdr[k]->ready), wf_stage_vflag(o, c))) return 0;
  return 1;
}

/* Slot of chunk c is free to write, and copy-in is not too far ahead. */
int wf_stage_slot_free(const stage_op *o, size_t c) {
  if (c - o->cout >= o->ahead) return 0;
  uint64_t t = c >= o->gm.nslots ? wf_stage_vflag(o, c - o->gm.nslots) : o->g->last;
  for (int k = 0; k < o->n; k++)
    if (k != o->me && !wf_stage_reached(wf_stage_load(&o->g->hdr[k]->done), t)) return 0;
  return 1;
}

static int can_move(const stage_op *o) {
  if (o->numa) return wf_stage_numa_can_move(o);
  if (o->cout < o->cred) {
    if (!o->has_c) return 1;
    uint64_t left = out_peers(o) & ~o->cmask;
    for (int j = 0; j < o->n; j++)
      if ((left >> j & 1) && wf_stage_reached(wf_stage_load(out_flag(o, j)), wf_stage_vflag(o, o->cout))) return 1;
  }
  if (o->cred < o->cin && (!o->has_b || all_ready(o, o->cred))) return 1;
  return o->has_a && o->cin < o->gm.nchunks && wf_stage_slot_free(o, o->cin);
}

/* One pass over the phases; 1 if anything moved. */
static int step_once(stage_op *o) {
  if (o->numa) return wf_stage_numa_step(o);
  int moved = 0;
  stage_hdr *me = o->g->hdr[o->me];
  if (o->cout < o->cred) {
    uint64_t v = wf_stage_vflag(o, o->cout);
    if (o->has_c) {
      uint64_t need = out_peers(o);
      for (int j = 0; j < o->n; j++)
        if ((need >> j & 1) && !(o->cmask >> j & 1) && wf_stage_reached(wf_stage_load(out_flag(o, j)), v)) {
          copy_out(o, j, o->cout);
          o->cmask |= (uint64_t)1 << j;
          moved = 1;
        }
      if (o->cmask == need) {
        wf_stage_publish(o, &me->done, v);
        o->cout++;
        o->cmask = 0;
      }
    } else {
      wf_stage_publish(o, &me->done, v);
      o->cout++;
      moved = 1;
    }
  }
  if (o->cred < o->cin) {
    if (!o->has_b) {
      o->cred = o->cin;
      moved = 1;
    } else if (all_ready(o, o->cred)) {
      reduce(o, o->cred);
      if (o->has_c) wf_stage_publish(o, &me->reduced, wf_stage_vflag(o, o->cred));
      o->cred++;
      moved = 1;
    }
  }
  if (o->has_a && o->cin < o->gm.nchunks && wf_stage_slot_free(o, o->cin)) {
    copy_in(o, o->cin);
    wf_stage_publish(o, &me->ready, wf_stage_vflag(o, o->cin));
    wf_stage_copy_own(o, o->cin);
    o->cin++;
    moved = 1;
  }
  return moved;
}

/* ------------------------------------------------------------------ the step */

/* A peer that gave up this collective, or left the world without finishing
 * it (its done flag short of the last chunk), or -1. */
static int peer_gone(const stage_op *o) {
  for (int k = 0; k < o->n; k++) {
    if (k == o->me) continue;
    uint64_t gone = wf_stage_load(&o->g->hdr[k]->gone);
    if ((gone == o->g->epoch || gone == LEFT) &&
        !wf_stage_reached(wf_stage_load(&o->g->hdr[k]->done), wf_stage_vflag(o, o->gm.nchunks - 1)))
      return k;
  }
  return -1;
}

int wf_stage_ready(void *p) {
  wf_stage *g = p;
  stage_op *o = g ? g->cur : NULL;
  if (!o || o->state != 1) return 0;
  if (o->more) return 1;
  return can_move(o) || peer_gone(o) >= 0; /* a peer gave up: the step reports it */
}

static void start(stage_op *o) {
  wf_stage *g = o->g;
  g->epoch++;
  g->cur = o;
  o->base = g->epoch << 24;
  o->state = 1;
  if (!o->has_a) o->cin = o->cred = o->gm.nchunks; /* broadcast, not the root */
}

weft_status wf_stage_run(void *p) {
  stage_op *o = p;
  if (!o->g) return wf_err(WEFT_ERR_INTERNAL, "staging: the collective outlived the staging regions");
  if (o->state == 0) start(o);
  if (o->state == 2) return WEFT_OK;
  wf_stage *g = o->g;
  o->more = 0;
  int64_t t0 = wf_now_ns(), spin_end = 0;
  for (unsigned it = 1;; it++) {
    int moved = step_once(o);
    if (o->cout == o->gm.nchunks) {
      o->state = 2;
      g->last = wf_stage_vflag(o, o->gm.nchunks - 1);
      g->cur = NULL;
      return WEFT_OK;
    }
    if (moved) {
      spin_end = 0;
      if (!(it & 7) && wf_now_ns() - t0 > BUDGET_NS) {
        o->more = 1; /* heartbeats and the other groups get their turn */
        return WEFT_IN_PROGRESS;
      }
      continue;
    }
    int k = peer_gone(o);
    if (k >= 0)
      return wf_err(WEFT_ERR_PEER_LOST, "rank %d %s", k,
                    wf_stage_load(&g->hdr[k]->gone) == LEFT
                        ? "has shut down (weft_finalize) but this shared-memory collective needs it"
                        : "gave up its part of this shared-memory collective (it failed or shut down)");
    if (!g->spin_ns) return WEFT_IN_PROGRESS; /* the peer we wait for may need this core */
    int64_t now = wf_now_ns();
    if (!spin_end) spin_end = now + g->spin_ns;
    else if (now >= spin_end) return WEFT_IN_PROGRESS;
    if (now > spin_end - g->spin_ns + YIELD_NS) sched_yield(); /* other work on this core (a loaded host) */
    else for (int k = 0; k < 32; k++) cpu_relax();
  }
}

void wf_stage_leave(wf_stage *g) {
  if (!g) return;
  atomic_store_explicit(&g->hdr[g->me]->gone, LEFT, memory_order_release);
  if (g->wake) g->wake(g->wake_ctx);
}

void wf_stage_release(void *p) {
  stage_op *o = p;
  if (!o || !o->g) return;
  wf_stage *g = o->g;
  if (o->state == 1) {
    /* cut short: the peers must not wait for this rank's flags, and its
     * region may hold a half-written chunk: never used again by this world
     * (a failed world stays failed) */
    atomic_store_explicit(&g->hdr[g->me]->gone, g->epoch, memory_order_release);
    if (g->wake) g->wake(g->wake_ctx);
  }
  if (g->cur == o) g->cur = NULL;
  o->g = NULL;
}

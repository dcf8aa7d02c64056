/* sched.c - building schedules (rounds of transfers, then local steps) and
 * running their local steps. Appends never fail loudly: a failed allocation
 * marks the schedule (oom) and wf_sched_finish reports it once, so builders
 * stay straight-line code. Zero-sized steps are dropped here, which keeps the
 * rule "never a SEND/RECV of 0 bytes" true on both sides of every pair
 * whatever the builder does. Cross-memory steps run in sched_cma.c, staged
 * collectives in shm_stage.c. */
#include "algo/sched.h"

#include <stdlib.h>
#include <string.h>

#include "algo/shm_stage.h"
#include "reduce/reduce.h"
#include "util/copy.h"
#include "util/time.h"

/* COPY steps of at least this many bytes use streaming stores. */
#define WF_COPY_NT_BYTES ((size_t)1 << 20)

#define WF_SCHED_ALIGN 64

void wf_sched_init(wf_sched *s, weft_dtype dtype, weft_reduce_op op) {
  memset(s, 0, sizeof *s);
  s->dtype = dtype;
  s->op = op;
}

void wf_sched_free(wf_sched *s) {
  if (!s) return;
  /* a staged collective cut short tells its peers (they stop waiting for it) */
  for (size_t i = 0; i < s->nsteps; i++)
    if (s->steps[i].kind == WF_STEP_STAGE) wf_stage_release(s->steps[i].tmp);
  free(s->steps);
  free(s->round_end);
  free(s->mems);
  free(s->scratch);
  memset(s, 0, sizeof *s);
}

void *wf_sched_scratch(wf_sched *s, size_t bytes) {
  if (s->scratch) return bytes <= s->scratch_bytes ? s->scratch : NULL;
  /* aligned_alloc wants a multiple of the alignment; at least one block so
   * a zero-byte request still yields a distinct pointer. */
  size_t rounded = bytes + (WF_SCHED_ALIGN - 1);
  if (rounded < bytes) {
    s->oom = 1;
    return NULL;
  }
  rounded -= rounded % WF_SCHED_ALIGN;
  if (rounded == 0) rounded = WF_SCHED_ALIGN;
  s->scratch = aligned_alloc(WF_SCHED_ALIGN, rounded);
  if (!s->scratch) {
    s->oom = 1;
    return NULL;
  }
  s->scratch_bytes = bytes;
  return s->scratch;
}

/* Index of the first step of the open round (== nsteps when none is open). */
static size_t round_start(const wf_sched *s) { return s->nrounds ? s->round_end[s->nrounds - 1] : 0; }

static wf_step *append(wf_sched *s) {
  if (s->oom) return NULL;
  if (s->nsteps == s->cap) {
    if (s->cap > SIZE_MAX / 2 / sizeof *s->steps) {
      s->oom = 1;
      return NULL;
    }
    size_t ncap = s->cap ? s->cap * 2 : 64;
    wf_step *p = realloc(s->steps, ncap * sizeof *p);
    if (!p) {
      s->oom = 1;
      return NULL;
    }
    s->steps = p;
    s->cap = ncap;
  }
  wf_step *st = &s->steps[s->nsteps++];
  memset(st, 0, sizeof *st);
  st->peer = -1;
  return st;
}

void wf_sched_send(wf_sched *s, int peer, const void *src, size_t bytes) {
  if (bytes == 0) return;
  wf_step *st = append(s);
  if (!st) return;
  st->kind = WF_STEP_SEND;
  st->peer = peer;
  st->src = src;
  st->bytes = bytes;
}

void wf_sched_recv(wf_sched *s, int peer, void *dst, size_t bytes) {
  if (bytes == 0) return;
  wf_step *st = append(s);
  if (!st) return;
  st->kind = WF_STEP_RECV;
  st->peer = peer;
  st->dst = dst;
  st->bytes = bytes;
}

void wf_sched_reduce(wf_sched *s, void *dst, const void *src, size_t count) {
  if (count == 0) return;
  wf_step *st = append(s);
  if (!st) return;
  st->kind = WF_STEP_REDUCE;
  st->dst = dst;
  st->src = src;
  st->count = count;
}

void wf_sched_copy(wf_sched *s, void *dst, const void *src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  wf_step *st = append(s);
  if (!st) return;
  st->kind = WF_STEP_COPY;
  st->dst = dst;
  st->src = src;
  st->bytes = bytes;
}

void wf_sched_scale(wf_sched *s, void *dst, const void *src, size_t count, double factor) {
  if (count == 0 || (factor == 1.0 && dst == src)) return;
  wf_step *st = append(s);
  if (!st) return;
  st->kind = WF_STEP_SCALE;
  st->dst = dst;
  st->src = src;
  st->count = count;
  st->factor = factor;
}

wf_mem wf_mem_local(const void *p) { return (wf_mem){.peer = -1, .local = p}; }

wf_mem wf_mem_peer(int peer, int pid, const uint64_t *base, size_t off) {
  return (wf_mem){.peer = peer, .pid = pid, .base = base, .off = off};
}

/* Appends n operands; returns the index of the first, or SIZE_MAX (oom). */
static size_t add_mems(wf_sched *s, const wf_mem *m, size_t n) {
  if (s->oom) return SIZE_MAX;
  if (s->nmems + n > s->mcap) {
    size_t ncap = s->mcap ? s->mcap : 32;
    while (ncap < s->nmems + n) ncap *= 2;
    wf_mem *p = realloc(s->mems, ncap * sizeof *p);
    if (!p) {
      s->oom = 1;
      return SIZE_MAX;
    }
    s->mems = p;
    s->mcap = ncap;
  }
  memcpy(s->mems + s->nmems, m, n * sizeof *m);
  s->nmems += n;
  return s->nmems - n;
}

void wf_sched_cma_read(wf_sched *s, void *dst, wf_mem from, size_t bytes) {
  if (bytes == 0) return;
  size_t m = add_mems(s, &from, 1);
  wf_step *st = m == SIZE_MAX ? NULL : append(s);
  if (!st) return;
  st->kind = WF_STEP_CMA_READ;
  st->peer = from.peer;
  st->dst = dst;
  st->bytes = bytes;
  st->mem0 = m;
}

void wf_sched_cma_fold(wf_sched *s, void *dst, const wf_mem *src, int nsrc, size_t count, void *tmp, size_t chunk) {
  if (count == 0 || nsrc < 1) return;
  size_t m = add_mems(s, src, (size_t)nsrc);
  wf_step *st = m == SIZE_MAX ? NULL : append(s);
  if (!st) return;
  st->kind = WF_STEP_CMA_FOLD;
  st->dst = dst;
  st->count = count;
  st->mem0 = m;
  st->nsrc = (uint32_t)nsrc;
  st->tmp = tmp;
  st->chunk = chunk ? chunk : 1;
}

void wf_sched_stage(wf_sched *s, void *op) {
  wf_sched_end_round(s);
  wf_step *st = append(s);
  if (!st) return;
  st->kind = WF_STEP_STAGE;
  st->tmp = op;
  wf_sched_end_round(s);
}

void wf_sched_end_round(wf_sched *s) {
  if (s->oom || s->nsteps == round_start(s)) return;
  if (s->nrounds == s->rcap) {
    size_t ncap = s->rcap ? s->rcap * 2 : 16;
    size_t *p = realloc(s->round_end, ncap * sizeof *p);
    if (!p) {
      s->oom = 1;
      return;
    }
    s->round_end = p;
    s->rcap = ncap;
  }
  s->round_end[s->nrounds++] = s->nsteps;
}

weft_status wf_sched_finish(wf_sched *s) {
  wf_sched_end_round(s);
  return s->oom ? WEFT_ERR_NO_MEMORY : WEFT_OK;
}

/* Pieces of REDUCE, SCALE and COPY steps between looks at the clock. */
#define WF_PIECE_BYTES ((size_t)256 << 10)

/* Runs one REDUCE, SCALE or COPY step from *done on, piece by piece, until
 * it is complete (WEFT_OK) or the clock passes until_ns (WEFT_IN_PROGRESS). */
static weft_status run_plain(const wf_sched *s, const wf_step *st, size_t *done, int64_t until_ns) {
  size_t es = st->kind == WF_STEP_COPY ? 1 : weft_dtype_size(s->dtype);
  size_t total = st->kind == WF_STEP_COPY ? st->bytes : st->count;
  size_t piece = WF_PIECE_BYTES / (es ? es : 1);
  if (st->kind == WF_STEP_COPY && (char *)st->dst < (const char *)st->src + st->bytes &&
      (const char *)st->src < (char *)st->dst + st->bytes) {
    memmove(st->dst, st->src, st->bytes); /* overlapping: at once (pieces could overwrite their source) */
    *done = total;
    return WEFT_OK;
  }
  /* a large copy streams past the caches: its destination (an output, not
   * read again by this collective) would only evict useful lines, and the
   * stores skip reading each line first (an alltoall's own block is such a
   * copy; see bench/NOTES.md, "Streaming copies in schedules") */
  wf_copy_fn nt = st->kind == WF_STEP_COPY && st->bytes >= WF_COPY_NT_BYTES ? wf_copy_nt() : NULL;
  while (*done < total) {
    size_t i = *done, m = total - i < piece ? total - i : piece;
    char *d = (char *)st->dst + i * es;
    const char *x = (const char *)st->src + i * es;
    if (st->kind == WF_STEP_REDUCE) wf_reduce(s->dtype, s->op, d, x, m);
    else if (st->kind == WF_STEP_SCALE) wf_scale_copy(s->dtype, d, x, m, st->factor);
    else if (nt) nt(d, x, m);
    else wf_copy(d, x, m);
    *done = i + m;
    if (*done < total && until_ns && wf_now_ns() >= until_ns) return WEFT_IN_PROGRESS;
  }
  return WEFT_OK;
}

weft_status wf_sched_run_local_until(const wf_sched *s, wf_sched_cursor *c, size_t last, int64_t until_ns) {
  if (last > s->nsteps) last = s->nsteps;
  for (; c->step < last; c->step++, c->done = 0) {
    const wf_step *st = &s->steps[c->step];
    weft_status rc = WEFT_OK;
    switch (st->kind) {
      case WF_STEP_CMA_READ:
      case WF_STEP_CMA_FOLD:
        rc = wf_sched_run_cma(s, st, &c->done, until_ns);
        break;
      case WF_STEP_STAGE:
        rc = wf_stage_run(st->tmp); /* WEFT_IN_PROGRESS: waits for its peers */
        break;
      case WF_STEP_REDUCE:
      case WF_STEP_COPY:
      case WF_STEP_SCALE:
        rc = run_plain(s, st, &c->done, until_ns);
        break;
      default: /* transfers belong to the engine (or the test simulator) */
        break;
    }
    if (rc != WEFT_OK) return rc;
    if (until_ns && c->step + 1 < last && wf_now_ns() >= until_ns) {
      c->step++;
      c->done = 0;
      return WEFT_IN_PROGRESS;
    }
  }
  return WEFT_OK;
}

weft_status wf_sched_run_local(const wf_sched *s, size_t first, size_t last) {
  wf_sched_cursor c = {first, 0};
  return wf_sched_run_local_until(s, &c, last, 0);
}

int wf_sched_reads_peer(const wf_sched *s, size_t from, int peer) {
  for (size_t i = from; i < s->nsteps; i++) {
    const wf_step *st = &s->steps[i];
    uint32_t n = st->kind == WF_STEP_CMA_FOLD ? st->nsrc : st->kind == WF_STEP_CMA_READ ? 1 : 0;
    for (uint32_t k = 0; k < n; k++)
      if (s->mems[st->mem0 + k].peer == peer) return 1;
  }
  return 0;
}

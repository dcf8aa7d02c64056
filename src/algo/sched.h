/* sched.h - a collective algorithm compiles to a schedule: rounds of
 * point-to-point transfers followed by local steps (libnbc/UCC style). The
 * engine runs schedules without blocking; algorithms never see sockets, and
 * tests run schedules of n simulated ranks in one process.
 *
 * Round semantics: in round r, every SEND and RECV step is posted at once
 * (transfers to/from the same peer keep their step order); when all of them
 * have completed, the local steps of round r (REDUCE, COPY, SCALE) run in
 * step order; then round r+1 starts. A round may have no transfers (local
 * steps only) or no local steps.
 *
 * Matching: messages between a (sender, receiver) pair are matched in order.
 * The k-th SEND from a to b in a's schedule must have the same byte count as
 * the k-th RECV from a in b's schedule. */
#ifndef WF_ALGO_SCHED_H
#define WF_ALGO_SCHED_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef enum wf_step_kind {
  WF_STEP_SEND = 0,   /* send bytes from src to peer */
  WF_STEP_RECV = 1,   /* receive bytes from peer into dst */
  WF_STEP_REDUCE = 2, /* dst = dst op src, count elements of the schedule's dtype/op */
  WF_STEP_COPY = 3,   /* memcpy(dst, src, bytes) (memmove if overlapping) */
  WF_STEP_SCALE = 4   /* dst = src * factor, count elements (dst may equal src) */
} wf_step_kind;

typedef struct wf_step {
  uint8_t kind;      /* wf_step_kind */
  int peer;          /* SEND/RECV: group rank of the peer */
  void *dst;
  const void *src;
  size_t bytes;      /* SEND/RECV/COPY */
  size_t count;      /* REDUCE/SCALE: elements */
  double factor;     /* SCALE */
} wf_step;

typedef struct wf_sched {
  wf_step *steps;
  size_t nsteps, cap;
  size_t *round_end; /* steps [round_end[r-1], round_end[r]) are round r */
  size_t nrounds, rcap;
  weft_dtype dtype;  /* for REDUCE/SCALE */
  weft_reduce_op op; /* for REDUCE */
  void *scratch;     /* owned; see wf_sched_scratch */
  size_t scratch_bytes;
  int oom;           /* an append failed: the schedule is unusable */
} wf_sched;

void wf_sched_init(wf_sched *s, weft_dtype dtype, weft_reduce_op op);
void wf_sched_free(wf_sched *s);
/* Scratch memory owned by the schedule (64-byte aligned); a second call
 * returns the same block if large enough, else NULL. Call before adding
 * steps that point into it. NULL (and s->oom) on allocation failure. */
void *wf_sched_scratch(wf_sched *s, size_t bytes);

/* Appending steps: they go into the current (last) round. */
void wf_sched_send(wf_sched *s, int peer, const void *src, size_t bytes);
void wf_sched_recv(wf_sched *s, int peer, void *dst, size_t bytes);
void wf_sched_reduce(wf_sched *s, void *dst, const void *src, size_t count);
void wf_sched_copy(wf_sched *s, void *dst, const void *src, size_t bytes);
void wf_sched_scale(wf_sched *s, void *dst, const void *src, size_t count, double factor);
/* Closes the current round; the next append starts a new one. Closing an
 * empty round does nothing. */
void wf_sched_end_round(wf_sched *s);
/* Closes the last round if open. WEFT_OK, or WEFT_ERR_NO_MEMORY if any
 * append failed. */
weft_status wf_sched_finish(wf_sched *s);

/* Runs the local steps [first, last) of a schedule (engine and tests). */
void wf_sched_run_local(const wf_sched *s, size_t first, size_t last);

#endif

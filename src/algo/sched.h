/* sched.h - a collective algorithm compiles to a schedule: rounds of
 * point-to-point transfers followed by local steps (libnbc/UCC style). The
 * engine runs schedules without blocking; algorithms never see sockets, and
 * tests run schedules of n simulated ranks in one process.
 *
 * Round semantics: in round r, every SEND and RECV step is posted at once
 * (transfers to/from the same peer keep their step order); when all of them
 * have completed, the local steps of round r (REDUCE, COPY, SCALE and the
 * CMA steps below) run in step order; then round r+1 starts. A round may have no transfers (local
 * steps only) or no local steps.
 *
 * Matching: messages between a (sender, receiver) pair are matched in order.
 * The k-th SEND from a to b in a's schedule must have the same byte count as
 * the k-th RECV from a in b's schedule.
 *
 * Cross-memory attach (CMA) steps are local steps that read a same-host
 * peer's memory directly (process_vm_readv, one copy). The peer's address
 * is only known at run time: an earlier round RECVs it (a uint64_t) into a
 * slot, and the step points at that slot. Ordinary tiny
 * SEND/RECV rounds are the synchronisation that makes this safe (the peer's
 * data is ready when its address arrives; a peer does not finish, reusing
 * its buffer, before every reader sent "done"). Steps only ever write this
 * process's memory: a peer that gave up on a failed collective may reuse its
 * buffer at once, and reading it then is harmless, writing into it is not.
 *
 * A STAGE step (algo/shm_stage.h) runs a whole collective through the
 * staging regions of the host's shared segment, synchronised by flags in
 * shared memory instead of messages. It is resumable: running it returns
 * WEFT_IN_PROGRESS while it waits for its peers, and the engine runs it again
 * on its next loop. It is always alone in its round. */
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
  WF_STEP_SCALE = 4,  /* dst = src * factor, count elements (dst may equal src) */
  WF_STEP_CMA_READ = 5, /* dst <- bytes of operand mems[mem0] (a peer's memory) */
  WF_STEP_CMA_FOLD = 6, /* see wf_sched_cma_fold */
  WF_STEP_STAGE = 7     /* a whole collective through the shm staging regions (algo/shm_stage.h) */
} wf_step_kind;

/* An operand of a CMA step: local memory (peer < 0: local + off) or a
 * peer's (*base + off in process pid; *base is read when the step runs). */
typedef struct wf_mem {
  int peer;             /* group rank, -1: local */
  int pid;              /* peer's process id */
  const void *local;    /* local operand */
  const uint64_t *base; /* peer operand: slot holding the peer's address */
  size_t off;           /* bytes added to the address */
} wf_mem;

typedef struct wf_step {
  uint8_t kind;      /* wf_step_kind */
  int peer;          /* SEND/RECV: group rank of the peer */
  void *dst;
  const void *src;
  size_t bytes;      /* SEND/RECV/COPY */
  size_t count;      /* REDUCE/SCALE: elements */
  double factor;     /* SCALE */
  size_t mem0;       /* CMA: first operand in the schedule's mems */
  uint32_t nsrc;     /* CMA_FOLD: sources mems[mem0 .. mem0 + nsrc) */
  void *tmp;         /* CMA_FOLD: scratch of 2 x chunk elements; STAGE: its wf_stage_op */
  size_t chunk;      /* CMA_FOLD: elements per chunk */
} wf_step;

typedef struct wf_sched {
  wf_step *steps;
  size_t nsteps, cap;
  size_t *round_end; /* steps [round_end[r-1], round_end[r]) are round r */
  size_t nrounds, rcap;
  weft_dtype dtype;  /* for REDUCE/SCALE */
  weft_reduce_op op; /* for REDUCE */
  wf_mem *mems;      /* operands of CMA steps */
  size_t nmems, mcap;
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
/* CMA operands. */
wf_mem wf_mem_local(const void *p);
wf_mem wf_mem_peer(int peer, int pid, const uint64_t *base, size_t off);
/* dst <- bytes at from (a peer's memory). */
void wf_sched_cma_read(wf_sched *s, void *dst, wf_mem from, size_t bytes);
/* Reduces count elements, chunk (elements) at a time so each chunk is
 * combined while in cache: dst = ((src[0] op src[1]) op src[2]) ... (left
 * fold in the given order, the bits of a chain of REDUCE steps), where every
 * source is local or a peer's. dst may be one of the local sources. tmp
 * holds 2 x chunk elements. */
void wf_sched_cma_fold(wf_sched *s, void *dst, const wf_mem *src, int nsrc, size_t count, void *tmp, size_t chunk);
/* A STAGE step (op: a struct wf_stage_op in the schedule's scratch, see
 * algo/shm_stage.h) in a round of its own. */
void wf_sched_stage(wf_sched *s, void *op);
/* Closes the current round; the next append starts a new one. Closing an
 * empty round does nothing. */
void wf_sched_end_round(wf_sched *s);
/* Closes the last round if open. WEFT_OK, or WEFT_ERR_NO_MEMORY if any
 * append failed. */
weft_status wf_sched_finish(wf_sched *s);

/* Where the local steps of a round stand: the next step to run, and how
 * much of it is done (elements for REDUCE, SCALE and CMA_FOLD, bytes for
 * COPY and CMA_READ). */
typedef struct wf_sched_cursor {
  size_t step;
  size_t done;
} wf_sched_cursor;

/* Runs local steps from c up to step last, in pieces of a few hundred KiB,
 * and stops after the piece during which the clock (wf_now_ns) passes
 * until_ns (0: never stops early), so that the engine thread that runs a
 * 128 MiB fold still answers its sockets every millisecond. WEFT_OK (c at
 * last), WEFT_IN_PROGRESS (c says where to go on: time ran out, or a STAGE
 * step waits for its peers), or an error (a CMA transfer failed, a staging
 * peer gave up: the message names the peer and the cause). */
weft_status wf_sched_run_local_until(const wf_sched *s, wf_sched_cursor *c, size_t last, int64_t until_ns);
/* Runs the local steps [first, last) at once (tests, simulators). WEFT_OK,
 * WEFT_IN_PROGRESS (a STAGE step waits for its peers: run the same steps
 * again later), or an error as above. */
weft_status wf_sched_run_local(const wf_sched *s, size_t first, size_t last);
/* Runs one CMA step from *done on, up to until_ns as above (sched_cma.c):
 * WEFT_OK when the step is complete, WEFT_IN_PROGRESS with *done advanced. */
weft_status wf_sched_run_cma(const wf_sched *s, const wf_step *st, size_t *done, int64_t until_ns);
/* 1 if a step in [from, nsteps) reads group rank peer's memory (CMA). */
int wf_sched_reads_peer(const wf_sched *s, size_t from, int peer);

#endif

/* shm_stage_int.h - the staged collectives' runtime state, shared by
 * shm_stage.c (the flat pattern and the step) and shm_numa.c (the
 * node-aware pattern). Private to those two files. */
#ifndef WF_ALGO_SHM_STAGE_INT_H
#define WF_ALGO_SHM_STAGE_INT_H
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "algo/numa_plan.h"
#include "algo/shm_stage.h"
#include "util/copy.h"

#define LINE 128u
#define HDR_BYTES 640u             /* region header: the flags */
#define MAX_RANKS 64               /* copy-out progress is a 64-bit mask */
#define MAX_CHUNKS ((1u << 24) - 2) /* chunk numbers fit below the epoch */
#define MIN_SLOTS 4                /* slots per region at least (else smaller chunks) */
#define AHEAD 3                    /* copy-in runs at most this many chunks ahead */
#define CHUNK_BYTES ((size_t)256 << 10) /* slot size target: in L2 with its peers' */
#define FOLD_ALL_BYTES ((size_t)64 << 10) /* allreduce up to this: every rank folds all */
#define SUB_BYTES ((size_t)16 << 10) /* fold sub-blocks (L1) */
#define SPIN_NS 50000              /* blocked on dedicated cores: spin this long before returning */
#define YIELD_NS 1000              /* ... yielding after this long: a peer woken on this core runs at once */
#define BUDGET_NS 2000000          /* return to the engine loop after this much work */
#define NT_HOST_BYTES ((size_t)32 << 20) /* outputs of all local ranks: stream past this */

typedef struct stage_hdr {
  alignas(LINE) _Atomic uint64_t ready;
  alignas(LINE) _Atomic uint64_t reduced;
  alignas(LINE) _Atomic uint64_t done;
  alignas(LINE) _Atomic uint64_t gone; /* epoch given up, or LEFT */
  alignas(LINE) _Atomic uint64_t final; /* node-aware (shm_numa.c): items relayed into this rank's slots */
} stage_hdr;
#define LEFT UINT64_MAX /* gone: the rank finalized */
_Static_assert(sizeof(stage_hdr) <= HDR_BYTES, "stage header too large");

struct wf_stage {
  int n, me;
  size_t payload;    /* slot bytes per region */
  stage_hdr **hdr;   /* [n] */
  char **data;       /* [n] payload of each region */
  wf_stage_wake_fn wake;
  void *wake_ctx;
  uint64_t epoch;    /* staged collectives started here */
  uint64_t last;     /* done value of the previous staged collective's last chunk */
  struct stage_op *cur;
  int64_t spin_ns;   /* blocked: spin this long (0: more local ranks than CPUs) */
  const wf_numa_plan *plan; /* &plan_mem when the host's NUMA layout makes one (wf_stage_set_numa), else NULL */
  wf_numa_plan plan_mem;
};

typedef struct geom {
  size_t E;       /* elements per chunk (allreduce, broadcast) or per block piece */
  size_t slot;    /* bytes per slot */
  size_t nslots, nchunks;
  int fold_all;
} geom;

typedef struct stage_op {
  wf_stage *g;
  wf_coll coll;
  weft_dtype dt;
  weft_reduce_op op;
  size_t es;
  int n, me, root;
  char *buf;       /* broadcast */
  const wf_seg *segs; /* allreduce: the buffer's segments (one for a contiguous buffer) */
  size_t nsegs;
  const char *in;  /* reducescatter, allgather, alltoall */
  char *out;
  size_t count;
  size_t *counts, *displs; /* [n] reducescatter, allgather; alltoall: what it sends */
  size_t *rcounts, *rdispls; /* [n] alltoall: what it receives */
  const char **x;  /* [n + 1] fold operands */
  wf_copy_fn put; /* copies into the output */
  geom gm;
  size_t ahead;
  int has_a, has_b, has_c;
  int state;       /* 0 not started, 1 running, 2 finished */
  uint64_t base;   /* epoch << 24 */
  size_t cin, cred, cout;
  uint64_t cmask;  /* peers copied out of chunk cout (node-aware: slices or the chunk) */
  int numa;        /* the node-aware pattern (shm_numa.c): o->g->plan */
  size_t crel;     /* node-aware: chunks relayed into this node */
  char *tmp;       /* node-aware allreduce: SUB_BYTES of fold scratch */
  int more;        /* returned with work left */
} stage_op;

/* Flag comparison in serial-number arithmetic: a flag has reached v. */
static inline int wf_stage_reached(uint64_t flag, uint64_t v) { return (int64_t)(flag - v) >= 0; }

static inline uint64_t wf_stage_load(_Atomic uint64_t *f) {
  /* acquire: the owner's writes of the slot before its release store */
  return atomic_load_explicit(f, memory_order_acquire);
}

static inline uint64_t wf_stage_vflag(const stage_op *o, size_t c) { return o->base + (uint64_t)c + 1; }

/* Block b of count elements cut in p blocks: *off, *n. */
static inline void wf_stage_block(size_t count, int p, int b, size_t *off, size_t *n) {
  size_t q = count / (size_t)p, r = count % (size_t)p, ub = (size_t)b;
  *n = q + (ub < r ? 1 : 0);
  *off = q * ub + (ub < r ? ub : r);
}

/* Piece c of a block of len elements cut in pieces of E: *off, returns length. */
static inline size_t wf_stage_piece(size_t len, size_t E, size_t c, size_t *off) {
  *off = c * E;
  if (*off >= len) return 0;
  return len - *off < E ? len - *off : E;
}

static inline char *wf_stage_slot(const stage_op *o, int rank, size_t c) {
  return o->g->data[rank] + (c % o->gm.nslots) * o->gm.slot;
}

/* Stores v into this rank's flag f (release) and wakes the peers. */
void wf_stage_publish(stage_op *o, _Atomic uint64_t *f, uint64_t v);
/* Copies elements [lo, lo + len) of the allreduce buffer to dst, and back. */
void wf_stage_gather(const stage_op *o, char *dst, size_t lo, size_t len);
void wf_stage_scatter(const stage_op *o, size_t lo, const char *src, size_t len);
/* The slot of chunk c is free to write (every peer has read what it held),
 * and copy-in is not too far ahead. */
int wf_stage_slot_free(const stage_op *o, size_t c);
/* Chunk c of this rank's own allgather or alltoall block from its input to
 * its output (nothing in place, nothing for the other collectives). */
void wf_stage_copy_own(stage_op *o, size_t c);
/* wf_stage_supports with the node-aware geometry (numa) or the flat one. */
int wf_stage_supports_as(const wf_coll_args *a, int numa);
/* Appends the STAGE step (shm_stage.c's wf_stage_build), node-aware or not. */
weft_status wf_stage_build_as(const wf_coll_args *a, wf_sched *s, int numa);

/* The node-aware pattern (shm_numa.c): one pass over its phases (1 if
 * anything moved), and whether one could move now. */
int wf_stage_numa_step(stage_op *o);
int wf_stage_numa_can_move(const stage_op *o);

#endif

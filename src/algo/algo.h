/* algo.h - collective algorithms and the registry that chooses them.
 *
 * Every algorithm is one file (algo/<coll>_<name>.c) exporting a wf_algo:
 * what it can run (supports) and how (build). The registry runs the
 * algorithm forced by WEFT_ALGO_<COLL>=name if it can run the arguments,
 * else the one the collective's selection table names (select.c): rows of
 * (where the group lives, ranks, size range) -> algorithm, the first row
 * that matches and whose algorithm supports the arguments wins. Reductions
 * end on "direct" (every element a left fold in rank order, so results do
 * not depend on size, segment, position or fusion). Algorithms see only
 * group ranks, buffers and counts. */
#ifndef WF_ALGO_H
#define WF_ALGO_H
#include <stddef.h>
#include <stdint.h>

#include "algo/sched.h"
#include "util/settings.h"
#include "wire/wire.h"

/* Where a group's members live (filled by the engine per group; NULL in
 * args built by tests that do not care). Hosts are numbered 0..nhosts-1 in
 * order of their lowest group rank. */
typedef struct wf_topo {
  int nhosts;
  const int *host_of;  /* group rank -> host index */
  const int *pid_of;   /* group rank -> process id (meaningful on this host) */
  int cma;             /* 1: this rank may read every same-host member's memory
                          with process_vm_readv (cross-memory attach) */
  int rings;           /* 1: the same-host members talk through the shared-memory
                          ring transport (0: no host segment, e.g. WEFT_TRANSPORT=tcp) */
  struct wf_stage *stage; /* the host's shm staging regions (algo/shm_stage.h): set
                             on the world group only, when all its ranks are local */
} wf_topo;

/* Arguments of one collective on one rank, after negotiation. All counts are
 * in elements of dtype. Scales are NOT the algorithm's business: the engine
 * applies prescale before and postscale (and average) after. */
typedef struct wf_coll_args {
  wf_coll coll;
  weft_dtype dtype;
  weft_reduce_op op;   /* allreduce, reducescatter */
  size_t elem_size;
  int rank, size;      /* within the group */

  /* ALLREDUCE: in-place on buf (count elements). The engine has already
   * copied the input into buf. */
  /* BROADCAST: buf (count elements) is the source on root, the destination
   * elsewhere. */
  void *buf;
  size_t count;
  int root;

  /* ALLGATHER: rank i contributes counts[i] elements; in (counts[rank]
   * elements) may alias out + displs[rank]; out holds sum(counts) elements,
   * rank i's block at displs[i].
   * REDUCESCATTER: in holds sum(counts) elements (rank i's block at
   * displs[i]); out receives this rank's reduced block (counts[rank]
   * elements). in is read-only.
   * ALLTOALL: this rank sends send_counts[j] elements from in + send_displs[j]
   * to rank j and receives recv_counts[j] elements into out + recv_displs[j]. */
  const void *in;
  void *out;
  const size_t *counts, *displs;            /* size entries */
  const size_t *send_counts, *send_displs;  /* size entries */
  const size_t *recv_counts, *recv_displs;  /* size entries */
  /* ALLTOALL: the largest block of the whole split matrix (the same on every
   * rank, from the coordinator's response), or 0 when unknown or when every
   * block is empty. A choice of algorithm may depend on it; on a rank's own
   * counts it may not (the others' differ). */
  size_t block_max;

  size_t segment_bytes; /* pipeline segment (WEFT_RING_SEGMENT_BYTES) */
  const wf_topo *topo;  /* NULL: unknown (treat as one host, no CMA) */
  const wf_settings *set; /* the world's settings (thresholds); NULL: the defaults (wf_algo_set) */

  /* ALLREDUCE of fused tensors without packing them (nsegs > 0): the
   * count elements are the segments' concatenation, each segment in its
   * own memory, and buf is unused. Only algorithms with .segments take
   * them (wf_algo_takes_segments). */
  const struct wf_seg *segs;
  size_t nsegs;

  /* PERMUTE: this rank sends in (count elements) to group rank send_to and
   * receives out (count elements) from recv_from; both are this rank or
   * neither is. in and out do not overlap (the engine copies an in-place
   * input aside first). */
  int send_to, recv_from;
} wf_coll_args;

/* Elements [at, at + count) of a segmented allreduce buffer live at ptr.
 * Segments are in order, adjacent (at = the previous at + count) and not
 * empty. */
typedef struct wf_seg {
  void *ptr;
  size_t at, count;
} wf_seg;

typedef struct wf_algo {
  const char *name;  /* "direct", "ring", "rd", "tree", "chain", "pairwise" */
  wf_coll coll;
  /* 1 if this algorithm can run these arguments, else 0 (decline). Must
   * give the same answer on every rank of the group for the same
   * arguments: the selection table relies on it. */
  int (*supports)(const wf_coll_args *a);
  /* Appends the schedule. Returns WEFT_OK or an error (e.g. NO_MEMORY). */
  weft_status (*build)(const wf_coll_args *a, wf_sched *s);
  int segments; /* build takes segmented allreduce buffers (a->nsegs > 0) */
} wf_algo;

/* Picks and builds: forced name (may be NULL or "") first; if forced
 * declines, falls back (with a warning, once) to the selection table
 * (wf_select); a forced name the collective does not have is
 * WEFT_ERR_NOT_FOUND. *chosen gets the algorithm's name. */
weft_status wf_algo_build(const wf_coll_args *a, const char *forced, wf_sched *s, const char **chosen);

/* 1 if the algorithm wf_algo_build would choose for a (read as one
 * contiguous buffer of a->count elements) takes segments: the engine then
 * hands it fused tensors where they lie instead of packing them. The same
 * answer on every rank of the group, as the choice itself. */
int wf_algo_takes_segments(const wf_coll_args *a, const char *forced);

/* The table: all algorithms, NULL-terminated. */
const wf_algo *const *wf_algo_table(void);

/* The collective's algorithm of that name, or NULL. */
const wf_algo *wf_algo_find(wf_coll c, const char *name);
/* The collective's algorithm names, "a, b, c", in table order. */
void wf_algo_names(wf_coll c, char *out, size_t outlen);
/* a->set, or the defaults when the caller gave none. */
const wf_settings *wf_algo_set(const wf_coll_args *a);

/* The selection table's choice for a (select.c): the algorithm of the
 * first row that matches a and supports it, or NULL. The same on every rank
 * of the group for the same negotiated arguments. a is valid (registry.c
 * validates it first). */
const wf_algo *wf_select(const wf_coll_args *a);
/* The table of collective c as text, rows in order, "; " between them
 * ("one host, staging: any size -> shm; one host, cma, 2 ranks: >= 2 MiB ->
 * cma; ..."), thresholds from s (NULL: the defaults); the first row is the
 * one-host board's place. Writes at most outlen - 1 bytes and a NUL. */
void wf_select_describe(wf_coll c, const wf_settings *s, char *out, size_t outlen);

/* The board row, the first of every table: whether a collective c of bytes
 * per member on n members of one host goes on the negotiation board
 * (engine/onehost.c asks before the coordinator is involved), given the
 * board's slot sizes (part_bytes: the pooled slots; large_bytes: the large
 * ones) and the settings. For an allreduce, *split says whether the round
 * is split (each slice folded once; own: members fold their own slices).
 * The request's own conditions (no callback, host memory, ...) are the
 * driver's. */
int wf_select_board(wf_coll c, size_t bytes, int n, int own, size_t part_bytes, size_t large_bytes,
                    const wf_settings *s, int *split);

/* Ring subdivisions (WEFT_RING_SUBDIVS, allreduce_ring.c; TensorFlow's
 * subdiv_offsets): how many rings a's settings ask for (1..8); where rank
 * sits in ring i of nrings over p ranks (its position, the group ranks it
 * sends to and receives from); the group rank at position pos of ring i.
 * Ring i's order is the group's rotated by i * max(1, p / nrings), reversed
 * for odd i. */
#define WF_RING_MAX_SUBDIVS 8
int wf_ring_subdivs(const wf_coll_args *a);
void wf_ring_place(int p, int nrings, int i, int rank, int *pos, int *right, int *left);
int wf_ring_rank_at(int p, int nrings, int i, int pos);

#endif

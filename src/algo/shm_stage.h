/* shm_stage.h - collectives through staging regions in shared memory (the
 * "shm" algorithms, coll_shm.c): every rank of the host has a staging region in
 * the job's shared segment, mapped by all of them. A rank copies its data
 * into its own region, chunk by chunk, and publishes a flag; its peers read
 * the chunk there with plain loads (reductions fold it straight out of every
 * peer's region, in cache) and publish their own flags. No message, no
 * system call, no page pinning: the only costs are the copies.
 *
 * Regions: a header of flags, each alone on a 128-byte line and written only
 * by the region's owner (ready: chunks copied in; reduced: allreduce slices
 * reduced; done: chunks this rank has finished reading everywhere; gone: a
 * staged collective this rank gave up), then slots of one chunk each, used
 * round robin. A flag value names the collective and the chunk, (epoch << 24)
 * + chunk + 1, epoch counting the staged collectives of the world (every
 * local rank runs the same ones in the same order), so a flag left by an
 * earlier collective never satisfies a later one. A rank writes a slot again
 * only when every peer's done flag shows it has finished reading what the
 * slot held. A rank writes its own buffers and region, and (allreduce of two
 * ranks) its reduced slice over the operand it read from its peer's slot.
 *
 * Engine integration: the whole collective is one STAGE step (sched.h),
 * polled by the executor on every engine loop: it does what its peers'
 * flags allow (copies, folds), spins briefly when blocked on dedicated cores
 * (never when the host's ranks outnumber its CPUs), and returns
 * WEFT_IN_PROGRESS; wf_stage_ready tells the shared-memory wait
 * (wf_shm_set_poll) when it could go on, and publishing a flag wakes the
 * peers (wf_shm_wake_peers). So heartbeats, failures and finalize keep
 * running; a deadline or a peer's death ends the collective through the
 * engine's usual abort, and a rank that gives up (or finalizes) marks its
 * region "gone" so its peers stop waiting for it.
 *
 * Only the world group uses staging (one collective at a time), and only
 * when every rank of the world is on this host (engine/local.c). The
 * node-aware allreduce, broadcast and allgather ("numa", shm_numa.c) run under the
 * same step and flags when the host's NUMA layout makes a plan
 * (wf_stage_set_numa). */
#ifndef WF_ALGO_SHM_STAGE_H
#define WF_ALGO_SHM_STAGE_H
#include <stddef.h>
#include <stdint.h>

#include "algo/algo.h"

typedef struct wf_stage wf_stage;

/* Wakes the local peers that sleep waiting for a flag (e.g.
 * wf_shm_wake_peers); called after every publish. May be NULL (peers poll). */
typedef void (*wf_stage_wake_fn)(void *ctx);

/* This rank's view of the host's n staging regions: regions[i] (bytes each,
 * zero-filled when created, every rank's at the same index in every local
 * rank) belongs to local index i; this rank is local index me. Local index ==
 * world rank == world group rank (every rank of the world is local).
 * Regions under 4.625 KiB are not used: WEFT_OK with *out NULL. */
weft_status wf_stage_create(int n, int me, void *const *regions, size_t bytes, wf_stage_wake_fn wake, void *wake_ctx,
                            wf_stage **out);
void wf_stage_destroy(wf_stage *g);
/* This rank leaves the world (finalize): a peer waiting in a staged
 * collective this rank did not finish fails naming it. */
void wf_stage_leave(wf_stage *g);
int wf_stage_size(const wf_stage *g);
/* How long a step blocked on its peers spins before returning (default 50
 * us, 0 when the host's ranks outnumber its CPUs). Tests. */
void wf_stage_set_spin(wf_stage *g, int64_t ns);
/* The host's NUMA layout for the node-aware pattern (shm_numa.c, "numa"):
 * nodes[i] the node of local index i (the same on every local rank: the
 * segment's header), NULL: none. Keeps a plan (algo/numa_plan.h) when the
 * layout names every rank's node and at least two nodes; else the pattern
 * declines. */
struct wf_numa_plan;
void wf_stage_set_numa(wf_stage *g, const int *nodes);
/* The plan kept by wf_stage_set_numa, or NULL. */
const struct wf_numa_plan *wf_stage_numa(const wf_stage *g);
/* 1 if the running staged collective could progress now (a poll condition
 * for wf_shm_set_poll; cheap, any number of calls). */
int wf_stage_ready(void *g);

/* For the coll_shm.c algorithms: 1 if staging can run these arguments (every
 * member local, staging attached, 2..64 ranks, the chunks fit; alltoall:
 * block_max known and not 0, since the chunk count must not depend on a
 * rank's own counts). */
int wf_stage_supports(const wf_coll_args *a);
/* Appends the STAGE step of a->coll (allreduce, reducescatter, allgather,
 * broadcast, alltoall); nothing for an empty collective. */
weft_status wf_stage_build(const wf_coll_args *a, wf_sched *s);
/* For the node-aware algorithms (shm_numa.c): 1 if staging can run a's
 * allreduce, broadcast or allgather node by node (a plan, and the chunks
 * fit: an allgather's slot holds a piece of every rank's block). */
int wf_stage_numa_supports(const wf_coll_args *a);

/* The STAGE step (sched.c): runs as far as the peers allow; WEFT_OK when
 * finished, WEFT_IN_PROGRESS to be run again, or an error naming a peer that
 * gave up. */
weft_status wf_stage_run(void *op);
/* The step's schedule is freed: if it started and did not finish, its peers
 * learn that this rank gave up (its "gone" flag). NULL is a no-op. */
void wf_stage_release(void *op);

#endif

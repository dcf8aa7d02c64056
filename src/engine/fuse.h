/* fuse.h - the executor's side of tensor fusion (fuse.c): a response naming
 * several tensors (x->nfused > 1) becomes one collective's arguments, and
 * its result goes back to each tensor. Engine thread only. */
#ifndef WF_ENGINE_FUSE_H
#define WF_ENGINE_FUSE_H
#include "algo/algo.h"
#include "engine/engine.h"

/* Fill a's buffers for gs's fused response (a's type fields, x->arrays and
 * the outputs' shapes as exec.c's prepare does for one tensor). forced:
 * WEFT_ALGO_ALLREDUCE, which decides whether the tensors stay where they
 * lie. err: a message for a response that does not match this rank. */
weft_status wf_fuse_prepare_allreduce(wf_gstate *gs, wf_coll_args *a, const char *forced);
weft_status wf_fuse_prepare_allgather(wf_gstate *gs, wf_coll_args *a, char *err, size_t errlen);
weft_status wf_fuse_prepare_reducescatter(wf_gstate *gs, wf_coll_args *a);

/* After the collective ran: each tensor's output (unpacked, post-scaled). */
void wf_fuse_finalize(wf_gstate *gs);

#endif

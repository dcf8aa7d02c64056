/* coord.h - the coordinator (rank 0): collects every rank's request for a
 * named tensor (the message table), validates them against each other when
 * the last one arrives, and emits one response per tensor, numbered in the
 * global order every rank executes. Runs on rank 0's engine thread. */
#ifndef WF_COORD_H
#define WF_COORD_H
#include <stddef.h>
#include <stdint.h>

#include "util/settings.h"
#include "weft.h"
#include "wire/wire.h"

typedef struct wf_coord wf_coord;

/* Stall reports go to this handler: report is the message, submitted[r] is
 * 1 for the ranks that wait for the tensor (they should hear about it). */
typedef void (*wf_stall_fn)(void *ctx, const char *report, const uint8_t *submitted);

/* timeout_seconds: how long a tensor may wait for some rank before it fails
 * (shortened by WEFT_STALL_SHUTDOWN_SECONDS when that is set); stall reports
 * every WEFT_STALL_CHECK_SECONDS while it waits. */
weft_status wf_coord_create(int size, const int *ranks, double timeout_seconds, wf_coord **out);
/* The same with the world's settings (stall inspector, hold, pack limit,
 * cache capacity); NULL: the defaults, as wf_coord_create. */
weft_status wf_coord_create_with(int size, const int *ranks, double timeout_seconds, const wf_settings *set,
                                 wf_coord **out);
void wf_coord_set_stall_handler(wf_coord *c, wf_stall_fn fn, void *ctx);
/* The members reduce fused allreduces where the tensors lie (one host's
 * staging): no copies, so WEFT_FUSION_PACK_MAX_BYTES no longer applies to
 * allreduces. */
void wf_coord_set_unpacked_allreduce(wf_coord *c);
void wf_coord_destroy(wf_coord *c);

/* Records rank's request (copied). A second request for the same name from
 * the same rank while the first is pending is a protocol error: it yields an
 * ERROR response for that name to every rank. */
void wf_coord_add(wf_coord *c, int rank, const wf_request_msg *m);

/* rank withdraws its request for name (weft_request_cancel, or timeout:
 * its own deadline of seconds passed): if the name still waits for ranks
 * and rank's request is in, every rank that submitted it gets an ERROR
 * response, WEFT_ERR_CANCELLED "tensor 'x': cancelled by rank R" or
 * WEFT_ERR_TIMEOUT naming the missing ranks, now (listing the others as
 * decided without), and each rank that had not gets it when its request
 * comes (once; for the timeout), so a later request for the name is
 * negotiated anew. Returns 1 if withdrawn; 0 if rank had no request of the
 * name waiting (its response is out: it runs; or a grouped op's tensor,
 * which cannot be withdrawn alone). */
int wf_coord_withdraw(wf_coord *c, int rank, const char *name, int timeout, double seconds);

/* rank said goodbye: tensors it has not submitted fail (now and later)
 * with an ERROR response naming it. */
void wf_coord_rank_departed(wf_coord *c, int rank);

/* Moves out the responses ready so far: higher priority first, compatible
 * allreduces or reducescatters (same group, dtype, reduce op, scales) and
 * allgathers (same group, dtype) fused into one response naming them all
 * while their total stays within fusion_threshold bytes (allgather: the
 * gathered bytes), then numbered in that order; the response cache's
 * assignments run in that order too. *out is a malloc'd array (caller frees each
 * with wf_response_msg_free, then the array). Without a cycle time
 * (WEFT_CYCLE_TIME_US) and with fusion on, it may hold them back (returns 0)
 * while a burst of requests that could fuse with them is still arriving,
 * at most a millisecond: wf_coord_next_deadline says when to ask again. */
size_t wf_coord_take(wf_coord *c, uint64_t fusion_threshold, wf_response_msg **out);

/* Fails tensors that waited longer than the timeout for some rank: an ERROR
 * response (WEFT_ERR_TIMEOUT) naming the ranks that did not submit. */
void wf_coord_check_timeouts(wf_coord *c, int64_t now);
/* Earliest deadline of a pending tensor, or of a hold (INT64_MAX if none). */
int64_t wf_coord_next_deadline(const wf_coord *c);
/* Number of tensors waiting for some rank. */
size_t wf_coord_pending(const wf_coord *c);

/* The coordinator's clock: every time it keeps (a request's arrival, the
 * fusion hold, deadlines, grouped ops' idle time) is now(ctx), in the
 * nanoseconds of wf_now_ns, which it is unless set (NULL). Set it before the
 * first request. For tests, which then step time themselves instead of
 * sleeping and hoping the machine kept up. */
typedef int64_t (*wf_clock_fn)(void *ctx);
void wf_coord_set_clock(wf_coord *c, wf_clock_fn now, void *ctx);

/* The response cache (negotiate/cache.h): records rank's request as the
 * coordinator stored it under (id, epoch), like wf_coord_add; *name gets
 * the tensor's name (valid until the next wf_coord_take). Returns 0 if the
 * coordinator no longer holds that assignment (the rank must send the
 * request in full: RESEND). */
int wf_coord_add_cached(wf_coord *c, int rank, uint32_t id, uint64_t epoch, const char **name);

/* Cross-rank validation of n requests for one name (index = group rank).
 * ranks maps group ranks to the world ranks messages name (NULL: identity).
 * Returns WEFT_OK and fills resp->sizes (allgather: dim 0 per rank;
 * alltoall: n x n splits, row = sender), or WEFT_ERR_MISMATCH with a message
 * naming the tensor, the ranks and both values. */
weft_status wf_validate(const wf_request_msg *const *reqs, int n, const int *ranks, wf_response_msg *resp, char *err,
                        size_t errlen);

#endif

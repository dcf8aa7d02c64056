/* cache.h - the response cache: a tensor negotiated before is requested by
 * a compact (id, epoch) reference instead of its full description.
 *
 * Protocol (docs/design.md, "Response cache"):
 *  - State changes only on responses, which every member of a group sees in
 *    the same order: each name of an OK response of a data collective
 *    (allreduce, allgather, broadcast, alltoall, reducescatter) is an
 *    *assignment*, in response order (names of a fused response in order).
 *    Assignment k gets epoch k (from 1; never reused) and an id: the name's
 *    id if cached, else the next free id, else the least recently assigned
 *    entry's id (evicted). The coordinator (in seq order, when it numbers
 *    responses) and every member (when it queues them) run the same
 *    assignments, so with equal WEFT_CACHE_CAPACITY they hold the same
 *    (name, id, epoch) table.
 *  - Payloads differ: a member keeps its own request's description for the
 *    name (none if it had no request: a joined rank); the coordinator keeps
 *    every member's, and the response they negotiated to.
 *  - A member whose new request equals (every field: wf_req_same) its cached
 *    description sends CACHED {group, id, epoch} instead of the request; any
 *    difference (shape, dtype, op, root, scales, priority, splits) sends the
 *    full REQUESTS entry, so the coordinator's checks see what changed.
 *  - The coordinator resolves (id, epoch) only if its slot id holds exactly
 *    that epoch, and then uses that member's stored description (equal, by
 *    construction, to the member's own). A member may refer to an entry the
 *    coordinator has already evicted (it had not yet seen the responses that
 *    evicted it): the epoch differs, and the coordinator answers RESEND
 *    {group, id, epoch}; the member sends that request in full. An id is
 *    never mistaken for another tensor's, whatever the timing or capacities.
 *  - When every rank's request for a name equals what the coordinator
 *    stored at the name's last assignment, the coordinator skips validation
 *    and reuses that response (negotiate/coord.c).
 * Engine thread only. */
#ifndef WF_CACHE_H
#define WF_CACHE_H
#include <stdint.h>

#include "util/settings.h"
#include "util/strmap.h"
#include "wire/wire.h"

typedef struct wf_cache wf_cache;

/* WEFT_CACHE_CAPACITY of s (NULL: the default), clamped to 0..WF_CACHE_MAX_IDS. */
uint32_t wf_cache_capacity(const wf_settings *s);

/* NULL when capacity is 0 (off) or out of memory. free_payload frees a
 * payload (NULL payloads are never passed to it). */
wf_cache *wf_cache_create(uint32_t capacity, void (*free_payload)(void *));
void wf_cache_destroy(wf_cache *c);

/* Does this response assign cache entries (OK, data collective)? */
int wf_cache_assigns(const wf_response_msg *r);

/* The next assignment: name gets an id and the next epoch; the slot takes
 * payload (may be NULL: known name, no description), freeing the one it
 * held unless that is payload itself. Returns the id. */
uint32_t wf_cache_assign(wf_cache *c, const char *name, void *payload, uint64_t *epoch);

/* Same, when the caller believes slot hint holds name (from a reference
 * it received; any value is safe): saves the name lookup when it does.
 * *kept (may be NULL): 1 when the slot the name gets (its own, or the one
 * evicted for it) held payload already, so it took no new reference to it;
 * else 0. Only the slot's answer says so: a payload may sit in another slot
 * too (one that lost its name for want of memory). */
uint32_t wf_cache_assign_hint(wf_cache *c, uint32_t hint, const char *name, void *payload, uint64_t *epoch,
                              int *kept);

/* The payload of slot id if it holds exactly epoch, else NULL; *name gets
 * its name. */
void *wf_cache_by_id(const wf_cache *c, uint32_t id, uint64_t epoch, const char **name);

/* Same description (everything a coordinator checks or uses: collective,
 * dtype, op, dims, shape, root, device, priority, scales bit for bit, splits)? */
int wf_req_same(const wf_request_msg *a, const wf_request_msg *b);
/* A malloc'd deep copy (splits too), or NULL. */
wf_request_msg *wf_req_dup(const wf_request_msg *m);
void wf_req_free(void *m);

/* ---- member side: the cache plus the references sent and not yet
 * answered (kept in their slot; moved aside if the slot is reassigned to
 * another name first) */
typedef struct wf_mcache {
  wf_cache *c;
  uint64_t hits, misses, resends; /* statistics (debug log; the tests read them there) */
} wf_mcache;

/* NULL when WEFT_CACHE_CAPACITY is 0 or out of memory. */
wf_mcache *wf_mcache_create(uint32_t capacity);
void wf_mcache_destroy(wf_mcache *m);
/* q is about to be requested: 1 and *ref filled (and remembered) if the
 * cache holds exactly q's description, else 0 (send it in full). */
int wf_mcache_lookup(wf_mcache *m, uint32_t group_id, const wf_request_msg *q, wf_cache_ref *ref);
/* A response for the group, in order: runs its assignments; own(ctx, name)
 * gives this rank's request for a name (NULL: none), asked only for names
 * this rank did not send as a cache hit. Forgets the references it answers.
 * rank is this rank's group rank: an ERROR that lists it among the ranks it
 * was decided without (its sizes) answers none of its requests, so its
 * references stand (a RESEND for them may still come). */
void wf_mcache_response(wf_mcache *m, const wf_response_msg *r, int rank,
                        const wf_request_msg *(*own)(void *ctx, const char *name), void *ctx);
/* RESEND for ref: copies the name sent with it into name (WF_NAME_MAX + 1
 * bytes) and forgets it; 0 if no such reference is pending. */
int wf_mcache_resend(wf_mcache *m, const wf_cache_ref *ref, char *name);

#endif

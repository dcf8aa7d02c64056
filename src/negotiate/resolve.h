/* resolve.h - a group leader: resolves groups at their first use, as seed
 * 004's group resolution does. World rank 0 leads keyed groups; a member
 * list's lowest member leads it (so lists with the same lowest member meet
 * in one table). Pure logic (no sockets, the
 * clock passed in): the engine feeds it GROUP_JOIN messages and deadlines and
 * sends the GROUP_REPLY messages it produces (engine/resolve.c).
 *
 * Keyed groups (weft_group_resolve): the first JOIN for a key fixes its size
 * and device type; later joiners must agree, else every joiner so far (and
 * the later one) gets WEFT_ERR_MISMATCH naming both ranks and both values.
 * When size ranks have joined, each gets the members (ascending world ranks)
 * and the group's id. A rank joining a complete group that it is not a
 * member of gets MISMATCH naming the members; a member joining again with
 * the same values gets the answer again. A key still short of members when
 * its deadline (the first JOIN + the timeout) passes fails every joiner with
 * WEFT_ERR_TIMEOUT ("group 7: waiting for 4 members, have ranks 0, 2").
 * A failure is final for the key: later joiners get the same error.
 *
 * Listed groups (weft_group_create): a group forms when every listed member
 * has sent a JOIN with the same list; the entry then goes (the same list may
 * be created again later). Each rank blocks in one creation at a time, so a
 * rank waiting in list A that is a member of list B while a rank of B waits
 * in B and is a member of A can never be satisfied: both lists' joiners get
 * MISMATCH naming the ranks and what each lists, at once; the two lists
 * then answer their other members the same when they come (until each
 * member had it, or the deadline). A list short of
 * members at its deadline fails its joiners with TIMEOUT naming the missing
 * ranks and, for each, the list it is creating instead, if any. */
#ifndef WF_NEGOTIATE_RESOLVE_H
#define WF_NEGOTIATE_RESOLVE_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"
#include "wire/wire.h"

typedef struct wf_resolver wf_resolver;

/* A reply to send: to world rank `to`. msg's arrays are the list's own. */
typedef struct wf_resolve_reply {
  int to;
  wf_group_msg msg;
} wf_resolve_reply;

typedef struct wf_resolve_replies {
  wf_resolve_reply *v;
  size_t n, cap;
} wf_resolve_replies;

/* A leader for a world of world_size ranks whose groups wait at most
 * timeout_seconds for their members. NULL: out of memory. */
wf_resolver *wf_resolver_create(int world_size, double timeout_seconds);
void wf_resolver_destroy(wf_resolver *r);

/* rank's JOIN m (decoded, so valid) at time now (ns): appends the replies it
 * decides to out. WEFT_OK, or WEFT_ERR_NO_MEMORY (nothing decided). */
weft_status wf_resolver_join(wf_resolver *r, int rank, const wf_group_msg *m, int64_t now, wf_resolve_replies *out);
/* Fails the groups whose deadline is at or before now (replies to out). */
weft_status wf_resolver_tick(wf_resolver *r, int64_t now, wf_resolve_replies *out);
/* The earliest deadline of a group still gathering (INT64_MAX: none). */
int64_t wf_resolver_next_deadline(const wf_resolver *r);
/* Frees the messages in out and empties it (keeps its array). */
void wf_resolve_replies_clear(wf_resolve_replies *out);
void wf_resolve_replies_free(wf_resolve_replies *out);

#endif

/* onehost.h - collectives of one-host groups negotiated and run in shared
 * memory by the calling threads (board.h), without the coordinator's round
 * trip or a hand-off to the engine thread.
 *
 * Who does what:
 *   - submit (caller thread, ops.c): every named collective of a group whose
 *     members all share this host visits the board. An eligible one
 *     (onehost_input.c: any collective up to the board's sizes, no callback, not
 *     part of a grouped op, timeline off, WEFT_FAST=1) copies its input in;
 *     if it was the last to arrive it completes at once.
 *     Otherwise, or when the round was diverted, it takes the engine path.
 *   - wait/test (caller thread, request.c): a pending fast request is
 *     completed by whoever sees its round done first (a CAS on r->fast):
 *     that thread folds every member's input in rank order, exactly as the
 *     `direct` algorithm does (same bits), applies postscale/average, claims
 *     the round and completes the request; a diverted round's request is
 *     handed to the engine, which negotiates it as usual.
 *   - remote rounds (board.h: allgather/alltoall inputs read across
 *     processes): a request whose reads are done waits in F_DRAIN until
 *     every member claimed (read its input), completed by its waiter, a
 *     weft_test or the engine's scan; at its deadline or a world failure it
 *     abandons the round, so a late reader fails instead of reading reused
 *     memory.
 *   - split rounds (board.h: larger allreduces): a request whose round is
 *     DONE waits in F_SPLIT while it folds the slices nobody took yet and
 *     copies out the folded ones, one pass at a time (never waiting), by
 *     its waiter, a weft_test or the engine's scan; nobody waits for a
 *     particular member.
 *   - the engine thread scans pending fast requests every millisecond (for
 *     requests nobody waits for), diverts rounds older than
 *     WEFT_FAST_WAIT_SECONDS (so the stall inspector sees them), and fails
 *     them with the world.
 * A join turns the board off for good (a joined rank never arrives). */
#ifndef WF_ENGINE_FAST_H
#define WF_ENGINE_FAST_H
#include <stdint.h>

#include "negotiate/board.h"
#include "engine/engine.h"

/* The algorithm name of a request completed on the board
 * (weft_request_algorithm). */
#define WF_FAST_ALGO "board"

/* The engine looks at pending fast requests this often. */
#define WF_FAST_SCAN_NS 5000000

/* Engine start, after the shared segment exists: the one-host state
 * (w->one), and the board if the segment has one. WEFT_OK or NO_MEMORY. */
weft_status wf_fast_start(weft_world *w);
/* Engine stop, before the segment is unmapped: waits (bounded) until no
 * caller thread is inside the board, then frees the one-host state.
 * Idempotent. */
void wf_fast_stop(weft_world *w);
/* Bytes of board the segment's creator reserves (0: none), and the large
 * slots' input size that board has (from WEFT_FAST_LARGE_BYTES; the segment
 * carries the creator's to every local rank). */
size_t wf_fast_board_bytes(const wf_settings *s, int nlocal);
size_t wf_fast_large_bytes(const wf_settings *s, int nlocal);

/* 1 if r must go through wf_fast_submit (its group is on this host and the
 * board is on, or it is a join): cheap, no lock. */
int wf_fast_wants(weft_world *w, weft_request *r);
/* Under w->mu: r joins (leaves) the pending list the engine scans. Submit
 * lists a fast request with its in-flight registration, the completion
 * unlists it with its in-flight removal: one lock each. */
void wf_fast_list_locked(weft_world *w, weft_request *r);
void wf_fast_unlist_locked(weft_world *w, weft_request *r);
/* r is registered in flight and listed. Returns 1 if the fast path took it (pending
 * or already complete), 0 if the caller must hand it to the engine. */
int wf_fast_submit(weft_world *w, weft_request *r);
/* Grouped-op children and other requests that always take the engine
 * path: keeps the board's counts in step. */
void wf_fast_visit(weft_world *w, weft_request *r);
/* A join: the board is off from now on, on every local rank. */
void wf_fast_off(weft_world *w);

/* onehost_input.c: fills d and this rank's input for the board (*tmp: a
 * buffer to free after the arrival); 0 if r is not eligible. */
int wf_fast_input(weft_world *w, weft_request *r, wf_board_desc *d, const void **part, size_t *len, void **tmp);
/* The bytes of r's input (bytes long, described by d) that only this rank
 * reads, kept out of the slot: an alltoall's own block, a reducescatter's
 * own rows (not prescaled), a WF_SPLIT_OWN round's own slice (len 0: none). */
wf_board_span wf_fast_unshared(const weft_request *r, const wf_board_desc *d, size_t bytes);
/* onehost_input.c: r's result from its DONE round (before the claim). */
weft_status wf_fast_result(weft_world *w, weft_request *r);
/* A remote allgather's or alltoall's own block, which wf_fast_result left
 * for after the claim; nothing for other collectives. Only for a remote
 * round (as its ticket said before the claim), after a successful
 * wf_fast_result. */
void wf_fast_own(weft_world *w, weft_request *r);
/* onehost_input.c: one pass over r's DONE split round (the caller holds
 * r->split_busy): folds every slice nobody took yet, its own first, then
 * copies every folded slice it does not have yet into its output. 1 when
 * it has every slice. Never waits. */
int wf_fast_split_pass(weft_world *w, weft_request *r);

/* Caller side: progresses a pending fast request until it completes or is
 * handed to the engine, or until deadline (wait = 0: one look only). */
void wf_fast_progress(weft_request *r, int64_t deadline, int wait);
/* 1 while r is the fast path's (pending, waiting for its remote round's
 * readers, or copying a split round's slices). */
int wf_fast_busy(weft_request *r);

/* Engine thread: scan pending fast requests; returns the time of the next
 * scan needed (INT64_MAX: none pending). */
int64_t wf_fast_scan(weft_world *w, int64_t now);
/* Engine thread: when the next scan is due (for the loop's wait), and the
 * scan itself when it is due or a request was added since the last. */
int64_t wf_fast_next_scan(weft_world *w, int64_t now);
void wf_fast_scan_due(weft_world *w, int64_t now);
/* Engine thread: fails every pending fast request. */
void wf_fast_fail_all(weft_world *w, weft_status st, const char *msg);

#endif

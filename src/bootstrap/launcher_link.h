/* launcher_link.h - tells the launcher (weftrun) why this rank's world
 * failed, so that weftrun can report the root cause of a job's failure
 * rather than the first exit it happened to see.
 *
 * weftrun sets WEFT_LAUNCHER_FD (a pipe, or 2 for remote ranks whose stderr
 * it relays) and WEFT_LAUNCHER_TAG (its job id). On the world's first
 * failure this rank writes one line there, in one write(2) (atomic on a
 * pipe):
 *   "weft-link <tag> rank=<r> cause=<n|self> status=<code>\n"
 * cause=<n>: the failure came from rank n (it was lost, it aborted, it
 * reported the failure); cause=self: this rank's own failure. Without the
 * variables nothing is written. Never blocks (the launcher's pipe is
 * non-blocking; a full pipe drops the line).
 *
 * The variables are read once, at the first weft_init, and removed from the
 * environment (the rank's own children are not weftrun's ranks). The fd
 * must then be a pipe (S_ISFIFO), or 2 (stderr, as remote ranks get it);
 * the line is written only if the fd still refers to that same file, so a
 * process that inherited the variables but not the pipe, and has another
 * file open at that number, never gets the line in its file. */
#ifndef WF_BOOTSTRAP_LAUNCHER_LINK_H
#define WF_BOOTSTRAP_LAUNCHER_LINK_H

#include "weft.h"

/* Reads (and unsets) WEFT_LAUNCHER_FD and WEFT_LAUNCHER_TAG, the first time
 * it is called in the process; later calls do nothing. weft_init calls it
 * before it starts any thread of its own. */
void wf_launcher_link_init(void);

/* Engine or caller thread; called once, on the world's first failure:
 * this rank (of size) failed with st and msg. */
void wf_launcher_link_report(int rank, int size, weft_status st, const char *msg);

/* The rank msg blames (see above), or -1 for the rank's own failure. self:
 * this rank; size: the world size. Exposed for unit tests. */
int wf_launcher_link_cause(weft_status st, const char *msg, int self, int size);

#endif

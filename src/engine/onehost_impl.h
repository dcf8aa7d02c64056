/* onehost_impl.h - the one-host path's private state (struct wf_onehost),
 * shared by onehost.c and onehost_input.c only: the world holds a pointer
 * to it and nothing else reads it. */
#ifndef WF_ONEHOST_IMPL_H
#define WF_ONEHOST_IMPL_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/onehost.h"

struct wf_onehost {
  struct wf_board *board;    /* NULL: none (no local peers, or WEFT_FAST_BYTES=0 on the host's first rank) */
  int fast_on;               /* WEFT_FAST on this rank */
  size_t fast_cma_bytes;     /* WEFT_FAST_CMA_BYTES (0: never) */
  int fast_split_own;        /* WEFT_FAST_SPLIT_OWN */
  int64_t fast_wait_ns;      /* WEFT_FAST_WAIT_SECONDS */
  int64_t timeout_ns;        /* timeout_seconds as wf_deadline_after adds it */
  _Atomic int board_users, board_closing; /* caller threads inside the board; finalize under way */
  weft_request **fast;       /* pending fast requests (under the world's mu) */
  int nfast, fast_cap, fast_lost;
  _Atomic int fast_kick;     /* a request was added: scan soon */
  _Atomic uint64_t fast_done, fast_diverted; /* requests completed on the board / handed to the engine after arriving */
  _Atomic uint64_t fast_remote;              /* of fast_done: remote rounds (read across processes) */
  _Atomic int64_t fast_next; /* next scan (written by the engine thread; callers read it) */
};

#endif

/* shm.h - the shared-memory transport for ranks on one host (the data
 * vtable of transport.h, like tcp.h, but through memory).
 *
 * It runs over its regions of the host's shared segment (host/segment.h):
 * one single-producer/single-consumer ring of fixed-size slots per ordered
 * pair of local ranks, plus a doorbell (futex word) per rank.
 *
 * A send copies the message into the ring slot by slot (a message larger than
 * a slot takes consecutive slots) and completes when its last byte is in the
 * ring; the receiver copies each slot out into the posted buffer as soon as it
 * is published, so large messages stream through the ring pipelined. A
 * message at the head of a ring whose receive is not posted yet stays there
 * (backpressure: the ring fills, then the sender's send stays pending). Both
 * sides post a pair's transfers in the same order, so the head always belongs
 * to the earliest posted receive from that peer or to a later one; a tag or
 * length mismatch there is a protocol error. After cancel_data, what is left
 * of a message cut short is dropped by the receiver once it posts a receive
 * of a later collective (tags carry the collective's sequence number).
 *
 * Threads: everything runs on the engine thread, except wf_shm_interrupt.
 * Nothing here blocks except wf_shm_wait (timeout). A dead peer never blocks progress: its transfers stay pending
 * until cancel_data (the engine detects deaths over TCP). */
#ifndef WF_SHM_H
#define WF_SHM_H
#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

struct wf_host;

typedef struct wf_shm wf_shm;

/* How data is copied out of the rings into receive buffers. Copies into the
 * rings are always plain (the consumer reads them next, from cache). AUTO and
 * NT: non-temporal (streaming) stores for receives of 4 MiB or more, which
 * skip reading the destination into cache (faster for large receives; see
 * bench/NOTES.md, "Ring copies"); MEMCPY: plain memcpy always. */
enum { WF_SHM_COPY_AUTO = 0, WF_SHM_COPY_MEMCPY = 1, WF_SHM_COPY_NT = 2 };

typedef struct wf_shm_cfg {
  int rank, size;         /* world */
  int copy_mode;          /* WF_SHM_COPY_* */
  /* Called (engine thread, from send/recv/progress) when a peer breaks the
   * protocol (length or tag mismatch, malformed slot): st is
   * WEFT_ERR_PROTOCOL. The pair carries nothing more. May be NULL. */
  void *cb_ctx;
  void (*on_error)(void *ctx, int peer, weft_status st, const char *msg);
} wf_shm_cfg;

/* The transport over the rings and doorbells of the host's segment
 * (host/segment.h), which must outlive it. host NULL: no local peer (every
 * send or receive is refused). WEFT_OK or NO_MEMORY. */
weft_status wf_shm_create(struct wf_host *host, const wf_shm_cfg *cfg, wf_shm **out);

/* Frees everything (posted transfers are forgotten); the segment stays
 * (the host's). NULL is a no-op. */
void wf_shm_destroy(wf_shm *s);

/* The data vtable (transport.h) for local peers: send, recv, cancel_data,
 * incomplete. Zero-byte transfers complete at once (nothing goes through the
 * ring), as with TCP. send/recv to a non-local peer fail with
 * WEFT_ERR_INVALID_ARGUMENT. send/recv already copy what they can. */
wf_transport *wf_shm_transport(wf_shm *s);

/* 1 if world_rank is another rank on this host (reachable through s). */
int wf_shm_is_local(const wf_shm *s, int world_rank);

/* Moves data: copies from posted sends into rings and from rings into posted
 * receives; decrements the *pending counters of completed transfers. Returns
 * 1 if anything moved. Engine thread only; never blocks. */
int wf_shm_progress(wf_shm *s);

/* Waits until there is something for wf_shm_progress to do (data at the head
 * of a ring with a receive posted, room in a ring a send waits for), until
 * wf_shm_interrupt, or until timeout_ns passed; returns at once if there is
 * already something to do. Spins briefly (yielding the core), then blocks on
 * this rank's futex word in the segment. May return early (spurious wake):
 * callers loop. Peers wake it only when it is marked waiting, so the fast
 * path of a send has no syscall. Returns at once when there is no local
 * peer (nlocal == 1). Engine thread only. */
void wf_shm_wait(wf_shm *s, int64_t timeout_ns);

/* An extra wake-up condition for wf_shm_wait: ready(ctx) != 0 counts as
 * something to do (the staged collectives' flags, algo/shm_stage.h). It must
 * be cheap and read shared memory with acquire loads; whoever makes it true
 * calls wf_shm_wake_peers after its store. NULL removes it. Engine thread. */
void wf_shm_set_poll(wf_shm *s, int (*ready)(void *ctx), void *ctx);

/* Wakes every local peer that sleeps in wf_shm_wait, after this rank stored
 * something a peer's poll condition reads (same Dekker pattern as the rings:
 * no system call unless a peer sleeps). Engine thread. */
void wf_shm_wake_peers(wf_shm *s);

/* Local index of this rank and number of local ranks. */
int wf_shm_local_index(const wf_shm *s);
int wf_shm_nlocal(const wf_shm *s);

/* Makes a wf_shm_wait in progress (or the next one) return at once. Any
 * thread; async-signal-safe. For the engine's own wake-ups (new
 * submissions) while it waits on shared memory. */
void wf_shm_interrupt(wf_shm *s);

#endif

/* mux.h - the data transport the executor uses: routes every transfer to
 * shared memory when the peer is on this host and a segment exists, else to
 * TCP; with WEFT_TRANSPORT=mpi, every transfer to MPI (transport/mpi.h).
 * Same vtable (transport.h). */
#ifndef WF_MUX_H
#define WF_MUX_H
#include "bootstrap/mpi_boot.h"
#include "transport/mpi.h"
#include "transport/shm.h"
#include "transport/tcp.h"
#include "util/settings.h"

typedef struct wf_mux {
  wf_transport base;
  wf_transport *tcp;
  wf_shm *shm; /* NULL: TCP only */
  /* The job's MPI communicator when weft_init bootstrapped from MPI (set
   * before the engine starts; wf_mux_init leaves it), else NULL. */
  wf_mpi_comm *mpi_comm;
  wf_mpi_tr *mpi;       /* WEFT_TRANSPORT=mpi: carries all data */
  int64_t mpi_busy_at;  /* last MPI post or completion (the engine spins a while after) */
  int64_t mpi_spin_ns;  /* WEFT_MPI_SPIN_US */
} wf_mux;

void wf_mux_init(wf_mux *m, wf_transport *tcp, wf_shm *shm);

/* WEFT_TRANSPORT=mpi: creates the MPI transport on mpi_comm (errors: weft
 * built without MPI, not started by an MPI launcher, no
 * MPI_THREAD_MULTIPLE). Otherwise does nothing. on_error as in mpi.h. */
weft_status wf_mux_start_mpi(wf_mux *m, const wf_settings *s, int rank, int size, void *ctx,
                             void (*on_error)(void *ctx, int peer, weft_status st, const char *msg));

/* The engine's poll hook: how long it may block in epoll (ms as it
 * planned; while MPI transfers are pending: 0 (after a sched_yield) for
 * WEFT_MPI_SPIN_US plus 1 ns per pending byte since the last post or
 * completion, then at most 1 ms: MPI has no fd to wake epoll). */
int wf_mux_wait_ms(wf_mux *m, int ms);
/* Drives the MPI transport (tests its requests); engine thread. */
void wf_mux_progress(wf_mux *m);

/* After the engine stopped: destroys the MPI transport and frees the
 * communicator. Idempotent. */
void wf_mux_release_mpi(wf_mux *m);

#endif

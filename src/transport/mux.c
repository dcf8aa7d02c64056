/* mux.c - per-peer routing between the shared-memory, TCP and MPI
 * transports, and the MPI transport's polling hook for the engine. */
#include "transport/mux.h"

#include <sched.h>
#include <string.h>

#include "util/err.h"
#include "util/time.h"

static wf_transport *route(wf_mux *m, int peer) {
  if (m->mpi) {
    m->mpi_busy_at = wf_now_ns();
    return wf_mpi_tr_transport(m->mpi);
  }
  return m->shm && wf_shm_is_local(m->shm, peer) ? wf_shm_transport(m->shm) : m->tcp;
}

static weft_status mux_send(wf_transport *t, int peer, uint64_t seq, uint32_t idx, const void *buf, size_t len,
                            int *pending) {
  wf_transport *r = route((wf_mux *)t, peer);
  return r->ops->send(r, peer, seq, idx, buf, len, pending);
}

static weft_status mux_recv(wf_transport *t, int peer, uint64_t seq, uint32_t idx, void *buf, size_t len,
                            int *pending) {
  wf_transport *r = route((wf_mux *)t, peer);
  return r->ops->recv(r, peer, seq, idx, buf, len, pending);
}

static void mux_cancel(wf_transport *t) {
  wf_mux *m = (wf_mux *)t;
  m->tcp->ops->cancel_data(m->tcp);
  if (m->shm) wf_shm_transport(m->shm)->ops->cancel_data(wf_shm_transport(m->shm));
  if (m->mpi) wf_mpi_tr_transport(m->mpi)->ops->cancel_data(wf_mpi_tr_transport(m->mpi));
}

static int mux_incomplete(wf_transport *t, int peer) {
  wf_transport *r = route((wf_mux *)t, peer);
  return r->ops->incomplete(r, peer);
}

static const wf_transport_ops mux_ops = {
    .name = "mux",
    .send = mux_send,
    .recv = mux_recv,
    .cancel_data = mux_cancel,
    .incomplete = mux_incomplete,
};

void wf_mux_init(wf_mux *m, wf_transport *tcp, wf_shm *shm) {
  m->base.ops = &mux_ops;
  m->tcp = tcp;
  m->shm = shm;
}

weft_status wf_mux_start_mpi(wf_mux *m, const wf_settings *s, int rank, int size, void *ctx,
                             void (*on_error)(void *ctx, int peer, weft_status st, const char *msg)) {
  if (strcmp(s->transport, "mpi") || size == 1) return WEFT_OK;
  if (!wf_mpi_built())
    return wf_err(WEFT_ERR_NOT_SUPPORTED, "WEFT_TRANSPORT=mpi: weft was built without MPI (rebuild with "
                                          "-DWEFT_WITH_MPI=ON; Debian: libopenmpi-dev)");
  if (!m->mpi_comm)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT,
                  "WEFT_TRANSPORT=mpi needs a job started by an MPI launcher (mpirun, srun) without WEFT_ADDR, so "
                  "that weft bootstraps from MPI; this one was not (launched by weftrun, or WEFT_ADDR is set)");
  wf_mpi_tr_cfg cfg = {.rank = rank, .size = size, .cb_ctx = ctx, .on_error = on_error};
  m->mpi_spin_ns = s->mpi_spin_us * 1000;
  return wf_mpi_tr_create(m->mpi_comm, &cfg, &m->mpi);
}

int wf_mux_wait_ms(wf_mux *m, int ms) {
  if (!m->mpi || !wf_mpi_tr_active(m->mpi) || ms <= 0) return ms;
  /* MPI moves large messages only while someone calls it (fragments,
   * rendezvous): keep polling as long as the pending bytes would take at
   * 1 GB/s, plus the spin time; yield so that oversubscribed peers run */
  int64_t window = m->mpi_spin_ns + (int64_t)wf_mpi_tr_bytes(m->mpi);
  if (wf_now_ns() - m->mpi_busy_at < window) {
    sched_yield();
    return 0;
  }
  return 1;
}

void wf_mux_progress(wf_mux *m) {
  if (m->mpi && wf_mpi_tr_progress(m->mpi) > 0) m->mpi_busy_at = wf_now_ns();
}

void wf_mux_release_mpi(wf_mux *m) {
  wf_mpi_tr_destroy(m->mpi);
  m->mpi = NULL;
  wf_mpi_comm_close(m->mpi_comm);
  m->mpi_comm = NULL;
}

/* mux.c - per-peer routing between the shared-memory and TCP transports. */
#include "transport/mux.h"

static wf_transport *route(wf_mux *m, int peer) {
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

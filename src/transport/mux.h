/* mux.h - the data transport the executor uses: routes every transfer to
 * shared memory when the peer is on this host and a segment exists, else to
 * TCP. Same vtable (transport.h). */
#ifndef WF_MUX_H
#define WF_MUX_H
#include "transport/shm.h"
#include "transport/tcp.h"

typedef struct wf_mux {
  wf_transport base;
  wf_transport *tcp;
  wf_shm *shm; /* NULL: TCP only */
} wf_mux;

void wf_mux_init(wf_mux *m, wf_transport *tcp, wf_shm *shm);

#endif

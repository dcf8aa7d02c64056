/* ext.h - the engine's hook for a layer above it that exchanges its own
 * frames with peers over the world's connections (remote execution,
 * src/remote/): outgoing frames queued from any thread and sent by the
 * engine thread; incoming frames of its types handed to it in arrival order
 * (held, bounded, until it attaches); each peer's state. */
#ifndef WF_ENGINE_EXT_H
#define WF_ENGINE_EXT_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"
#include "wire/wire.h"

typedef struct wf_ext_ops {
  /* A frame of the layer's types from peer (payload p, n bytes, valid during
   * the call). Called on the engine thread, or in wf_ext_attach with the
   * world's lock held, or by engine/rmbox.c's drain on the thread that
   * drains (a frame of this host's ranks from its remote ring); must not
   * call back into the world. Returns WEFT_OK,
   * or an error (a malformed frame: the connection is dropped, the world fails). */
  weft_status (*deliver)(void *ctx, int peer, uint8_t type, const uint8_t *p, size_t n, char *err, size_t errlen);
  /* The world is stopping: stop using it (its threads joined) and free ctx.
   * Called once, before the engine thread stops. */
  void (*stop)(void *ctx);
} wf_ext_ops;

/* Attaches ctx (once per world; any thread): *out is the attached ctx, ctx
 * itself or the one another thread attached first (the caller then frees
 * its own). Frames that came earlier are delivered now, in order. */
weft_status wf_ext_attach(weft_world *w, void *ctx, const wf_ext_ops *ops, void **out);
/* The attached ctx or NULL (any thread). */
void *wf_ext_get(weft_world *w);
/* Queues a whole frame (taken) for peer; the engine thread sends it (any thread). */
weft_status wf_ext_send(weft_world *w, int peer, wf_buf *frame);
/* 0: peer is fine; 1: the world failed or peer finalized (why in msg); 2:
 * peer was lost (died or went silent); 3: the world failed because a rank
 * was lost, which may or may not be peer (the message names it). Any
 * thread. */
int wf_ext_peer_state(weft_world *w, int peer, char *msg, size_t len);

/* Engine side (engine thread): a frame of the layer's types arrived; the
 * queued frames go out; peer said BYE / was lost; the engine stops. */
void wf_ext_on_frame(weft_world *w, int peer, uint8_t type, const uint8_t *p, size_t n);
void wf_ext_progress(weft_world *w);
void wf_ext_peer_gone(weft_world *w, int peer, int how);
void wf_ext_stop(weft_world *w);
int wf_ext_is_type(uint8_t type);

#endif

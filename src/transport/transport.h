/* transport.h - the point-to-point data interface algorithms' schedules are
 * executed on (Gloo transport::Pair / NCCL ncclTransport style). A transport
 * moves tagged byte messages between this rank and a peer (world ranks);
 * it never blocks: the engine's loop drives it and it reports completion by
 * decrementing a counter the executor owns.
 *
 * Tags: (seq, idx) = (collective's sequence number, k-th message of this
 * (sender, receiver) pair within it). A receive matches exactly one send
 * with the same tag and byte count; a mismatch is a protocol error. */
#ifndef WF_TRANSPORT_H
#define WF_TRANSPORT_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef struct wf_transport wf_transport;

/* A data tag's seq: the group id in the top 24 bits, the group's response
 * sequence below, so collectives of different groups never collide and
 * "older"/"newer" compare only within one group. */
#define WF_TAG_GROUP_SHIFT 40
static inline uint64_t wf_data_tag(uint32_t group_id, uint64_t seq) {
  return ((uint64_t)group_id << WF_TAG_GROUP_SHIFT) | (seq & ((1ull << WF_TAG_GROUP_SHIFT) - 1));
}
/* The tag group of point-to-point data (engine/p2p.c): its seq is the
 * sender's message number; no process set gets this id (api/group.c). */
#define WF_P2P_TAG_GROUP 0xffffffu
static inline int wf_tag_same_group(uint64_t a, uint64_t b) {
  return (a >> WF_TAG_GROUP_SHIFT) == (b >> WF_TAG_GROUP_SHIFT);
}

typedef struct wf_transport_ops {
  const char *name;
  /* Queues len bytes of buf for peer; *pending is decremented (engine
   * thread) once buf is no longer needed. buf must stay valid until then or
   * until cancel_data(). Must not block. */
  weft_status (*send)(wf_transport *t, int peer, uint64_t seq, uint32_t idx, const void *buf, size_t len,
                      int *pending);
  /* Posts a receive of exactly len bytes into buf; *pending is decremented
   * when all have arrived. Must not block. */
  weft_status (*recv)(wf_transport *t, int peer, uint64_t seq, uint32_t idx, void *buf, size_t len, int *pending);
  /* Forgets every posted send and receive (the collective failed): the
   * transport no longer touches their buffers when this returns. */
  void (*cancel_data)(wf_transport *t);
  /* 1 if a posted receive from peer or a send to it has not completed. */
  int (*incomplete)(wf_transport *t, int peer);
} wf_transport_ops;

struct wf_transport {
  const wf_transport_ops *ops;
};

#endif

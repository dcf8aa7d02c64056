/* shm_seg.h - the shared-memory segment behind shm.c: its layout (the
 * structures every local rank maps) and its collective creation. Internal to
 * src/transport/shm*.c.
 *
 * Layout (offsets page-aligned):
 *   header   magic, geometry, the local ranks (validated by every mapper)
 *   bells    one 128-byte line per local rank: futex word + "waiting" flag
 *   rings    nlocal*(nlocal-1) rings; ring (i->j) of local indices i != j at
 *            index i*(nlocal-1) + (j < i ? j : j-1); each: head line, tail
 *            line, then nslots slots of a 64-byte header + slot_bytes payload.
 *   board    board_bytes for the one-host negotiation board (engine/board.c)
 *   stages   nlocal staging regions of stage_bytes each, local index order
 * head counts slots published by the producer, tail slots released by the
 * consumer (both only grow; slot k lives at k % nslots). Each sits alone on
 * 128 bytes: the adjacent-line prefetcher pulls 64-byte lines in pairs. */
#ifndef WF_SHM_SEG_H
#define WF_SHM_SEG_H
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/shm.h"

#define WF_SHM_SLOT_HDR 64u /* slot header bytes before the payload */
#define WF_SHM_LINE 128u    /* spacing of independently written words */

typedef struct wf_shm_seg_hdr {
  uint64_t magic;
  uint32_t version, nlocal;
  uint64_t slot_bytes, nslots, ring_bytes, size;
  uint64_t board_bytes, stage_bytes; /* the creator's choice: every mapper uses these */
  uint64_t board_param;              /* the creator's, for the board's geometry (engine/board.c) */
  int32_t ranks[]; /* nlocal world ranks */
} wf_shm_seg_hdr;

typedef struct wf_shm_bell {
  _Atomic uint32_t word;    /* futex word: bumped by whoever wakes this rank */
  _Atomic uint32_t waiting; /* 1 while this rank is about to sleep or asleep on word */
  char pad[WF_SHM_LINE - 8];
} wf_shm_bell;

typedef struct wf_shm_ring {
  alignas(WF_SHM_LINE) _Atomic uint64_t head; /* written by the producer only */
  alignas(WF_SHM_LINE) _Atomic uint64_t tail; /* written by the consumer only */
} wf_shm_ring;

typedef struct wf_shm_slot_hdr {
  uint64_t seq, msg_len, offset; /* message tag, total length, where this chunk goes */
  uint32_t idx, len;             /* len: payload bytes in this slot (> 0) */
} wf_shm_slot_hdr;

typedef struct wf_shm_layout {
  size_t slot_bytes, nslots; /* slot payload bytes (multiple of 64), slots per ring */
  size_t stride;             /* bytes from one slot to the next */
  size_t ring_bytes;         /* bytes of one ring (control lines + slots) */
  size_t bells_off, rings_off, size;
  size_t board_off, board_bytes; /* the board region (page multiple, may be 0) */
  size_t stage_off, stage_bytes; /* nlocal staging regions of stage_bytes each (page multiple, may be 0) */
} wf_shm_layout;

/* The ring from local index `from` to local index `to` (from != to). */
static inline wf_shm_ring *wf_shm_ring_at(uint8_t *map, const wf_shm_layout *l, int nlocal, int from, int to) {
  size_t k = (size_t)from * (size_t)(nlocal - 1) + (size_t)(to < from ? to : to - 1);
  return (wf_shm_ring *)(map + l->rings_off + l->ring_bytes * k);
}

/* Creates (lowest local rank) or maps (the others) the segment: collective
 * over cfg->fds, bounded by the deadline. On success *map holds l->size
 * mapped bytes and no file is left in /dev/shm; on failure nothing is mapped
 * or left behind and err says what failed (see wf_shm_create for which
 * failures all local ranks share). local != WEFT_OK: this rank cannot take
 * part (err holds why) but still goes through the exchange, so every local
 * rank fails with that status. */
weft_status wf_shm_seg_setup(const wf_shm_cfg *cfg, weft_status local, int64_t deadline, wf_shm_layout *l,
                             uint8_t **map, char *err, size_t errlen);

#endif

/* segment.h - the host's shared segment: one per job and host, created in
 * /dev/shm by the lowest local rank, mapped by every local rank and unlinked
 * as soon as all have mapped it (once wf_host_create returns no file exists,
 * so a crash leaks nothing). It hands out named regions: the doorbells and
 * rings of the shared-memory transport (transport/shm.c), the one-host
 * negotiation board (negotiate/board.c) and one staging region per local
 * rank (algo/shm_stage.c). Each user decides for itself whether its region
 * is used; the segment only reserves it (the creator's sizes are everyone's).
 *
 * Layout (offsets page-aligned), linear in the number of local ranks n:
 *   header   magic, geometry, the local ranks (validated by every mapper),
 *            the creator's NUMA layout (wf_host_numa: every rank learns it)
 *   inboxes  one inbox of inbox_bytes per local rank j (its receiver): j's
 *            doorbell (a 128-byte line: futex word + "waiting" flag), then
 *            the n - 1 rings into j, ring (i->j) at index (i < j ? i : i-1),
 *            ring_bytes apart; each: head line, tail line, then nslots
 *            slots of a 64-byte header + slot_bytes payload. The inbox has
 *            a fixed size, shared out among its senders (per-sender
 *            credits): each ring gets (inbox_bytes - 128) / (n - 1) bytes,
 *            so as n grows a pair's ring gets fewer slots (never more than
 *            the configured count), then smaller ones.
 *   board    board_bytes for the one-host negotiation board (negotiate/board.c)
 *   stages   n staging regions of stage_bytes each, local index order
 *   mboxes   the point-to-point mailboxes (host/mailbox.h: n inboxes)
 * Size: PAGE + n * (inbox_bytes + stage_bytes + WF_MBOX_BLOCK) + board_bytes
 * (the header's page holds up to ~500 ranks). inbox_bytes by default is
 * twice a full ring of the configured geometry (so up to 3 local ranks
 * every pair has its full ring), at most WF_SHM_RINGS_CAP / n unless both
 * the slot size and count were configured. Each inbox, staging region
 * and mailbox inbox is page-aligned, so the creator can place it on its
 * rank's NUMA node (host/numa.h, wf_host_cfg.numa_nodes).
 * head counts slots published by the producer, tail slots released by the
 * consumer (both only grow; slot k lives at k % nslots). Each sits alone on
 * 128 bytes: the adjacent-line prefetcher pulls 64-byte lines in pairs. */
#ifndef WF_SHM_SEG_H
#define WF_SHM_SEG_H
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define WF_SHM_SLOT_HDR 64u /* slot header bytes before the payload */
#define WF_SHM_LINE 128u    /* spacing of independently written words */
#define WF_SHM_RINGS_CAP ((size_t)256 << 20) /* the inboxes of all local ranks together, at most */

typedef struct wf_shm_seg_hdr {
  uint64_t magic;
  uint32_t version, nlocal;
  uint64_t slot_bytes, nslots, inbox_bytes, size; /* slot_bytes, nslots: the configured (largest) pair geometry */
  uint64_t board_bytes, stage_bytes; /* the creator's choice: every mapper uses these */
  uint64_t board_param;              /* the creator's, for the board's geometry (negotiate/board.c) */
  int32_t ranks[]; /* nlocal world ranks, then nlocal NUMA nodes (-1: unknown or no layout) */
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
  size_t slot_bytes, nslots; /* of each pair's ring: slot payload bytes (multiple of 64), slots */
  size_t stride;             /* bytes from one slot to the next */
  size_t ring_bytes;         /* bytes from one ring of an inbox to the next (control lines + slots) */
  size_t cfg_slot_bytes, cfg_nslots; /* the configured pair geometry (the most a ring gets) */
  size_t inbox_bytes;        /* one receiver's inbox: its bell and the rings into it (page multiple) */
  size_t rings_off, size;    /* the first inbox; the whole segment */
  size_t board_off, board_bytes; /* the board region (page multiple, may be 0) */
  size_t stage_off, stage_bytes; /* nlocal staging regions of stage_bytes each (page multiple, may be 0) */
  size_t mbox_off, mbox_bytes;   /* the mailboxes (host/mailbox.h), page multiple */
} wf_shm_layout;

/* The ring from local index `from` to local index `to` (from != to), in
 * to's inbox. */
static inline wf_shm_ring *wf_shm_ring_at(uint8_t *map, const wf_shm_layout *l, int from, int to) {
  size_t k = (size_t)(from < to ? from : from - 1);
  return (wf_shm_ring *)(map + l->rings_off + l->inbox_bytes * (size_t)to + WF_SHM_LINE + l->ring_bytes * k);
}

/* The doorbell of local index li (the first line of its inbox). */
static inline wf_shm_bell *wf_shm_bell_at(uint8_t *map, const wf_shm_layout *l, int li) {
  return (wf_shm_bell *)(map + l->rings_off + l->inbox_bytes * (size_t)li);
}

/* The layout wf_host_create makes for nlocal ranks and these sizes (0
 * slot_bytes/nslots: the defaults; board_bytes and stage_bytes as in
 * wf_host_cfg): 1, or 0 when it cannot be made (sizes overflow, or too many
 * ranks for a ring of two 64-byte slots each). Pure: weft-info and the
 * tests use it. */
int wf_host_plan(int nlocal, size_t slot_bytes, size_t nslots, size_t board_bytes, size_t stage_bytes,
                 wf_shm_layout *out);

typedef struct wf_host_cfg {
  int rank, size;         /* world */
  const int *local_ranks; /* world ranks on this host, ascending, nlocal (>= 2) entries, rank among them */
  int nlocal;
  /* size entries: connected, authenticated sockets to every peer (fds[rank]
   * == -1). Only the local peers' are used, and only during wf_host_create,
   * with strictly paired fixed-size records. They stay open and owned by the
   * caller. */
  const int *fds;
  const char *job_id;     /* part of the segment name (may be NULL or "") */
  double timeout_seconds; /* deadline for the whole setup */
  /* Ring geometry per ordered pair, the most a ring gets: slot payload
   * bytes and slot count; 0 = defaults (64 KiB x 16). Each receiver's inbox
   * holds two such rings' worth, shared out among its senders (see the
   * layout above). */
  size_t slot_bytes, nslots;
  /* One board of board_bytes and one staging region of stage_bytes per local
   * rank (0 = none), zero-filled. */
  size_t board_bytes, stage_bytes;
  uint64_t board_param; /* stored for the board (wf_host_board) */
  /* The creator's: the NUMA node of each local rank (nlocal entries, -1
   * unknown), whose parts of the segment go there (host/numa.h); NULL: no
   * placement. */
  const int *numa_nodes;
} wf_host_cfg;

typedef struct wf_host wf_host;

/* Creates (lowest local rank) or maps (the others) the segment: collective
 * among the local ranks over cfg->fds, blocking, bounded by
 * cfg->timeout_seconds. On failure nothing is left mapped or in /dev/shm, and
 * the message (wf_err) says what failed and suggests WEFT_TRANSPORT=tcp.
 *
 * Which failures the local ranks share: WEFT_ERR_INVALID_ARGUMENT (a bad
 * cfg) is found before any exchange. WEFT_ERR_TIMEOUT and WEFT_ERR_PEER_LOST
 * (a rank too slow or gone) may leave the ranks disagreeing and setup bytes
 * unread in the sockets: fail the job. Any other failure (no space in
 * /dev/shm, permissions, out of memory, ranks disagreeing about the host's
 * ranks) is decided in the exchange: every local rank fails and nothing is
 * left unread, so all may do without shared memory together. */
weft_status wf_host_create(const wf_host_cfg *cfg, wf_host **out);
/* Unmaps the segment. NULL is a no-op. */
void wf_host_destroy(wf_host *h);

int wf_host_nlocal(const wf_host *h);
int wf_host_local_index(const wf_host *h); /* this rank's */
/* The local index of world_rank, or -1 if it is not on this host. */
int wf_host_index_of(const wf_host *h, int world_rank);
/* The whole mapping and its layout (for the ring transport). */
uint8_t *wf_host_map(const wf_host *h);
const wf_shm_layout *wf_host_layout(const wf_host *h);
/* The board region (NULL, *bytes = 0: none) and the creator's board_param;
 * local index li's staging region (NULL, *bytes = 0: none). Any thread. */
void *wf_host_board(const wf_host *h, size_t *bytes, uint64_t *param);
void *wf_host_stage(const wf_host *h, int li, size_t *bytes);
/* The mailbox region (host/mailbox.h: wf_mbox_region_bytes(nlocal) bytes,
 * zero-filled at creation). Any thread. */
void *wf_host_mbox(const wf_host *h);
/* The creator's NUMA layout (wf_host_cfg.numa_nodes, as it stands in the
 * header, so every local rank has the same): node of each local index,
 * nlocal entries; NULL when the creator had none or knew no rank's node.
 * Valid while h is. */
const int *wf_host_numa(const wf_host *h);

#endif

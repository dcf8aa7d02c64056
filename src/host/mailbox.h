/* mailbox.h - the point-to-point mailboxes in the host's shared segment: one
 * inbox per local rank (its receiver), each a futex bell and WF_MBOX_INBOX
 * slots shared out among the other local ranks: sender i owns a ring of
 * wf_mbox_pair_slots(nlocal) = min(WF_MBOX_SLOTS, WF_MBOX_INBOX / (nlocal -
 * 1)) consecutive slots of it (0 beyond WF_MBOX_INBOX + 1 local ranks: no
 * fast path then). Each slot is a 64-byte header and WF_MBOX_INLINE bytes
 * (a larger message: its address in the sender, read across processes by
 * the receiver), written by the sender's threads and read by the receiver's
 * (engine/p2p_fast.c decides what goes in). So the region grows linearly:
 * nlocal * WF_MBOX_BLOCK bytes.
 *
 * Slot k % ps of ring (i->j), ps = wf_mbox_pair_slots(nlocal), carries
 * message k (k = 0, 1, ...):
 *  - the producer (i) fills it only when message k - ps was reaped (its
 *    result read), then stores seq = k + 1 (release);
 *  - the consumer (j), in any order among the published ones, writes the
 *    result (status, its dtype and count) and stores done = k + 1 (release);
 *  - the producer reaps in order: done == k + 1 (acquire).
 * A slot is thus owned by one side at a time; nothing but seq and done is
 * read concurrently. Inbox j is a page-aligned block at j * WF_MBOX_BLOCK
 * (so it can be placed on j's NUMA node): bell, then the rings, ring
 * (i->j) at index (i < j ? i : i - 1).
 *
 * Each inbox block then holds (page-aligned, WF_RMBOX_OFF into it) the
 * remote-execution frame rings (engine/rmbox.c): two bells of j (0 WORK: call
 * frames, its worker sleeps on it; 1 DONE: replies, its waiting callers
 * sleep on it), j's state line (its worker runs a function), one control
 * line per sender (j's tail of ring (i->j), and
 * how many of i's frames j has taken from the engine's path) and
 * WF_RMBOX_INBOX slots of WF_RMBOX_SLOT_BYTES shared out as above:
 * wf_rmbox_pair_slots(nlocal) per sender. Slot k % ps of ring (i->j)
 * carries frame k: i fills it once j's tail passed k - ps, then stores seq
 * = k + 1 (release); j reads frames in order and advances its tail. */
#ifndef WF_HOST_MAILBOX_H
#define WF_HOST_MAILBOX_H
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define WF_MBOX_SLOTS 16u  /* at most this many slots per ordered pair */
#define WF_MBOX_INBOX 128u /* slots of one receiver's inbox, shared out among its senders */
#define WF_MBOX_INLINE 1024u /* payload bytes of a slot: larger messages take the engine's path */
#define WF_MBOX_LINE 128u

/* A slot's result: matched and copied; a dtype or count mismatch; matched
 * but the receiver could not read the sender's memory (addr). READING: the
 * receiver's mark while it reads (matched, not done: no other receive takes
 * it). */
enum { WF_MBOX_OK = 0, WF_MBOX_MISMATCH = 1, WF_MBOX_UNREAD = 2, WF_MBOX_READING = 3 };

typedef struct wf_mbox_slot {
  alignas(64) _Atomic uint64_t seq; /* producer: k + 1 once message k is in */
  _Atomic uint64_t done;            /* consumer: k + 1 once message k is matched */
  uint64_t key, count;              /* producer: the send's key and element count */
  uint64_t rcount;                  /* consumer: its element count (the result) */
  uint64_t addr;                    /* producer: 0, the bytes are in data; else where they are in its memory */
  uint32_t group_id, bytes;         /* producer (bytes: those in data) */
  uint8_t dtype, status, rdtype;    /* producer's dtype; consumer's WF_MBOX_* and dtype */
  uint8_t data[] __attribute__((aligned(64)));
} wf_mbox_slot;

#define WF_MBOX_SLOT_BYTES (64u + WF_MBOX_INLINE)

#define WF_RMBOX_SLOTS 16u       /* remote frame slots per ordered pair, at most */
#define WF_RMBOX_INBOX 64u       /* remote frame slots of one receiver, shared out among its senders */
#define WF_RMBOX_SLOT_BYTES 2048u /* a 64-byte header and the frame's payload */
#define WF_RMBOX_PAYLOAD (WF_RMBOX_SLOT_BYTES - 64u)
#define WF_RMBOX_HDR_LINES 3u    /* the remote part's bells and state line, before the control lines */
/* The remote part of an inbox block: where it starts, its bytes (bells,
 * WF_RMBOX_INBOX control lines, slots; page-rounded). */
#define WF_RMBOX_OFF ((WF_MBOX_LINE + WF_MBOX_INBOX * WF_MBOX_SLOT_BYTES + 4095u) / 4096u * 4096u)
#define WF_RMBOX_BYTES                                                                                    \
  (((WF_RMBOX_HDR_LINES + WF_RMBOX_INBOX) * WF_MBOX_LINE + WF_RMBOX_INBOX * WF_RMBOX_SLOT_BYTES + 4095u) / 4096u * \
   4096u)
/* One receiver's inbox: bell line and slots, then the remote part. */
#define WF_MBOX_BLOCK (WF_RMBOX_OFF + WF_RMBOX_BYTES)

typedef struct wf_mbox_bell {
  _Atomic uint32_t word;     /* futex and event count: bumped on every event for this rank */
  _Atomic uint32_t sleepers; /* threads of this rank asleep or about to sleep on word */
  char pad[WF_MBOX_LINE - 8];
} wf_mbox_bell;

/* Bytes of the region for nlocal local ranks: nlocal * WF_MBOX_BLOCK (0
 * below 2). */
size_t wf_mbox_region_bytes(int nlocal);

/* Slots of one ordered pair's ring: min(WF_MBOX_SLOTS, WF_MBOX_INBOX /
 * (nlocal - 1)); 0 (no fast path) when there are too many local ranks. */
static inline unsigned wf_mbox_pair_slots(int nlocal) {
  unsigned s = nlocal > 1 ? WF_MBOX_INBOX / (unsigned)(nlocal - 1) : 0;
  return s < WF_MBOX_SLOTS ? s : WF_MBOX_SLOTS;
}

/* Slot of message k in ring (from -> to) of the region (ps: the pair's
 * slots, wf_mbox_pair_slots(nlocal)). */
static inline wf_mbox_slot *wf_mbox_slot_at(uint8_t *region, unsigned ps, int from, int to, uint64_t k) {
  size_t ring = (size_t)(from < to ? from : from - 1);
  return (wf_mbox_slot *)(region + (size_t)to * WF_MBOX_BLOCK + WF_MBOX_LINE +
                          (ring * ps + (size_t)(k % ps)) * WF_MBOX_SLOT_BYTES);
}

static inline wf_mbox_bell *wf_mbox_bell_at(uint8_t *region, int li) {
  return (wf_mbox_bell *)(region + (size_t)li * WF_MBOX_BLOCK);
}

/* An event for b's rank (a message for it, a result of its send, a
 * completion): bumps the word, so that waiters spinning on it look again
 * (they take no lock until it moves), and wakes the sleeping ones (no
 * system call when none sleeps). seq_cst with wf_mbox_sleep: a sleeper
 * either sees the word move or is counted before the waker looks. */
void wf_mbox_ring(wf_mbox_bell *b);
static inline uint32_t wf_mbox_word(wf_mbox_bell *b) { return atomic_load(&b->word); }
/* Sleeps at most ns unless the word is no longer `seen` (counted as a
 * sleeper meanwhile). */
void wf_mbox_sleep(wf_mbox_bell *b, uint32_t seen, int64_t ns);

/* ---- remote-execution frame rings (the remote part of each inbox); bells:
 * which 0 WORK, 1 DONE (engine/rmbox.h) */
typedef struct wf_rmbox_ctl { /* ring (i->j)'s line in j's inbox: written by j only */
  alignas(64) _Atomic uint64_t tail;  /* frames of the ring j has taken */
  _Atomic uint64_t engine_seen;       /* i's frames j has taken from the engine's path */
  char pad[WF_MBOX_LINE - 16];
} wf_rmbox_ctl;

typedef struct wf_rmbox_state { /* j's own line: written by j only */
  alignas(64) _Atomic uint32_t busy; /* j's worker runs a function (and drains nothing meanwhile) */
  char pad[WF_MBOX_LINE - 4];
} wf_rmbox_state;

typedef struct wf_rmbox_slot {
  alignas(64) _Atomic uint64_t seq; /* k + 1 once frame k is in */
  uint32_t len;                     /* payload bytes */
  uint8_t type;                     /* the frame's message type */
  uint8_t data[] __attribute__((aligned(64)));
} wf_rmbox_slot;

/* Slots of one ordered pair's remote ring: min(WF_RMBOX_SLOTS,
 * WF_RMBOX_INBOX / (nlocal - 1)); 0 (no such ring) beyond WF_RMBOX_INBOX + 1
 * local ranks. */
static inline unsigned wf_rmbox_pair_slots(int nlocal) {
  unsigned s = nlocal > 1 ? WF_RMBOX_INBOX / (unsigned)(nlocal - 1) : 0;
  return s < WF_RMBOX_SLOTS ? s : WF_RMBOX_SLOTS;
}

static inline wf_mbox_bell *wf_rmbox_bell_at(uint8_t *region, int li, int which) {
  return (wf_mbox_bell *)(region + (size_t)li * WF_MBOX_BLOCK + WF_RMBOX_OFF + (size_t)which * WF_MBOX_LINE);
}

static inline wf_rmbox_state *wf_rmbox_state_at(uint8_t *region, int li) {
  return (wf_rmbox_state *)(region + (size_t)li * WF_MBOX_BLOCK + WF_RMBOX_OFF + 2u * WF_MBOX_LINE);
}

static inline wf_rmbox_ctl *wf_rmbox_ctl_at(uint8_t *region, int from, int to) {
  size_t ring = (size_t)(from < to ? from : from - 1);
  return (wf_rmbox_ctl *)(region + (size_t)to * WF_MBOX_BLOCK + WF_RMBOX_OFF +
                          (WF_RMBOX_HDR_LINES + ring) * WF_MBOX_LINE);
}

static inline wf_rmbox_slot *wf_rmbox_slot_at(uint8_t *region, unsigned ps, int from, int to, uint64_t k) {
  size_t ring = (size_t)(from < to ? from : from - 1);
  return (wf_rmbox_slot *)(region + (size_t)to * WF_MBOX_BLOCK + WF_RMBOX_OFF +
                           (WF_RMBOX_HDR_LINES + WF_RMBOX_INBOX) * WF_MBOX_LINE +
                           (ring * ps + (size_t)(k % ps)) * WF_RMBOX_SLOT_BYTES);
}

#endif

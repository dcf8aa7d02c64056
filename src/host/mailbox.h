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
 * (i->j) at index (i < j ? i : i - 1). */
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
/* One receiver's inbox: bell line and slots, page-rounded. */
#define WF_MBOX_BLOCK ((WF_MBOX_LINE + WF_MBOX_INBOX * WF_MBOX_SLOT_BYTES + 4095u) / 4096u * 4096u)

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

#endif

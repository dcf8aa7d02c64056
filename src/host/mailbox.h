/* mailbox.h - the point-to-point mailboxes in the host's shared segment: one
 * ring of WF_MBOX_SLOTS slots per ordered pair of local ranks, each slot a
 * 64-byte header and WF_MBOX_INLINE bytes (a larger message: its address in
 * the sender, read across processes by the receiver), written by the sender's threads
 * and read by the receiver's (engine/p2p_fast.c decides what goes in), and
 * one futex bell per local rank.
 *
 * Slot k % WF_MBOX_SLOTS of ring (i->j) carries message k (k = 0, 1, ...):
 *  - the producer (i) fills it only when message k - WF_MBOX_SLOTS was
 *    reaped (its result read), then stores seq = k + 1 (release);
 *  - the consumer (j), in any order among the published ones, writes the
 *    result (status, its dtype and count) and stores done = k + 1 (release);
 *  - the producer reaps in order: done == k + 1 (acquire).
 * A slot is thus owned by one side at a time; nothing but seq and done is
 * read concurrently. Region: nlocal bells of WF_MBOX_LINE bytes, then
 * nlocal * (nlocal - 1) rings, ring (i->j) at index i * (nlocal - 1) +
 * (j < i ? j : j - 1). */
#ifndef WF_HOST_MAILBOX_H
#define WF_HOST_MAILBOX_H
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define WF_MBOX_SLOTS 16u
#define WF_MBOX_INLINE 1024u /* payload bytes of a slot: larger messages take the engine's path */
#define WF_MBOX_LINE 128u

/* A slot's result: matched and copied; a dtype or count mismatch; matched
 * but the receiver could not read the sender's memory (addr). */
enum { WF_MBOX_OK = 0, WF_MBOX_MISMATCH = 1, WF_MBOX_UNREAD = 2 };

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

typedef struct wf_mbox_bell {
  _Atomic uint32_t word;     /* futex and event count: bumped on every event for this rank */
  _Atomic uint32_t sleepers; /* threads of this rank asleep or about to sleep on word */
  char pad[WF_MBOX_LINE - 8];
} wf_mbox_bell;

/* Bytes of the region for nlocal local ranks: nlocal * WF_MBOX_LINE +
 * nlocal * (nlocal - 1) * WF_MBOX_SLOTS * WF_MBOX_SLOT_BYTES. */
size_t wf_mbox_region_bytes(int nlocal);

/* Slot of message k in ring (from -> to) of the region. */
static inline wf_mbox_slot *wf_mbox_slot_at(uint8_t *region, int nlocal, int from, int to, uint64_t k) {
  size_t ring = (size_t)from * (size_t)(nlocal - 1) + (size_t)(to < from ? to : to - 1);
  return (wf_mbox_slot *)(region + (size_t)nlocal * WF_MBOX_LINE +
                          (ring * WF_MBOX_SLOTS + (size_t)(k % WF_MBOX_SLOTS)) * WF_MBOX_SLOT_BYTES);
}

static inline wf_mbox_bell *wf_mbox_bell_at(uint8_t *region, int li) {
  return (wf_mbox_bell *)(region + (size_t)li * WF_MBOX_LINE);
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

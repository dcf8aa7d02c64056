/* test_host_layout.c - the host segment's layout (host/segment.h,
 * host/mailbox.h) as a function of the number of local ranks n, without
 * making a segment: it grows linearly (size(n) = a * n + b for n = 2..64,
 * the transport's inboxes and the mailboxes alike), stays under its cap
 * beyond, and every ring and mailbox slot (point-to-point and remote) lies
 * inside its receiver's inbox, apart from every other one. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "host/mailbox.h"
#include "host/segment.h"
#include "unit_check.h"

#define MIB ((size_t)1 << 20)

/* size(n) - size(n - 1) is the same for every n in [2, 64]. */
static void check_linear(size_t board, size_t stage) {
  wf_shm_layout l2, l;
  CHECK(wf_host_plan(2, 0, 0, board, stage, &l2), "no layout for 2 ranks");
  size_t prev = l2.size, a = 0;
  for (int n = 3; n <= 64; n++) {
    if (!wf_host_plan(n, 0, 0, board, stage, &l)) {
      CHECK(0, "no layout for %d ranks", n);
      return;
    }
    size_t d = l.size - prev;
    if (n == 3) a = d;
    CHECK(d == a, "not linear: size(%d) - size(%d) = %zu bytes, size(3) - size(2) = %zu", n, n - 1, d, a);
    prev = l.size;
  }
  printf("segment size (board %zu, stage %zu bytes): %zu * n + %zu bytes (n = 2..64)\n", board, stage, a,
         l2.size - 2 * a);
}

/* Every ring into every receiver is inside that receiver's inbox, after its
 * bell, 128-aligned, holds its slots, and overlaps no other ring. */
static void check_rings(int n, const wf_shm_layout *l) {
  uint8_t *base = (uint8_t *)(uintptr_t)4096; /* addresses only, never dereferenced */
  CHECK(l->nslots >= 2 && l->nslots <= l->cfg_nslots && l->slot_bytes >= 64 && l->slot_bytes % 64 == 0 &&
            l->slot_bytes <= l->cfg_slot_bytes,
        "n=%d: %zu slots of %zu bytes", n, l->nslots, l->slot_bytes);
  CHECK(sizeof(wf_shm_ring) + l->nslots * l->stride <= l->ring_bytes, "n=%d: the slots overflow the ring", n);
  CHECK(l->inbox_bytes % 4096 == 0 && l->rings_off % 4096 == 0, "n=%d: inboxes not page-aligned", n);
  for (int to = 0; to < n; to++) {
    uint8_t *inbox = base + l->rings_off + (size_t)to * l->inbox_bytes;
    CHECK((uint8_t *)wf_shm_bell_at(base, l, to) == inbox, "n=%d: bell %d not at its inbox", n, to);
    uint8_t *prev_end = inbox + sizeof(wf_shm_bell);
    for (int from = 0; from < n; from++) {
      if (from == to) continue;
      uint8_t *r = (uint8_t *)wf_shm_ring_at(base, l, from, to);
      CHECK(r >= prev_end && (size_t)(r - base) % WF_SHM_LINE == 0, "n=%d: ring %d->%d overlaps or misaligned", n,
            from, to);
      CHECK(r + l->ring_bytes <= inbox + l->inbox_bytes, "n=%d: ring %d->%d past its inbox", n, from, to);
      prev_end = r + l->ring_bytes;
    }
  }
  CHECK(l->rings_off + (size_t)n * l->inbox_bytes <= l->board_off && l->board_off <= l->stage_off &&
            l->stage_off + (size_t)n * l->stage_bytes <= l->mbox_off && l->mbox_off + l->mbox_bytes == l->size,
        "n=%d: regions overlap", n);
}

/* Ring (from -> to)'s slots over two laps (offs[k]: message k's slot,
 * k < 2 * ps): each inside [lo, end) on a slot boundary; the first lap's
 * slots used by no other ring (used: per slot index of to's area, marked
 * here); message k + ps in message k's slot. 0 (and a failure) if not. */
static int check_laps(int n, const char *what, int from, int to, const size_t *offs, unsigned ps, size_t lo,
                      size_t end, size_t slot_bytes, uint8_t *used) {
  for (uint64_t k = 0; k < 2 * ps; k++) {
    size_t off = offs[k];
    if (off < lo || off + slot_bytes > end || (off - lo) % slot_bytes) {
      CHECK(0, "n=%d: %s %llu of %d->%d outside %d's inbox", n, what, (unsigned long long)k, from, to, to);
      return 0;
    }
    size_t idx = (off - lo) / slot_bytes;
    if (k < ps) {
      CHECK(!used[idx], "n=%d: %s %llu of %d->%d shared", n, what, (unsigned long long)k, from, to);
      used[idx] = 1;
    } else {
      CHECK(off == offs[k - ps], "n=%d: message %llu of %d->%d not in the %s of message %llu", n,
            (unsigned long long)k, from, to, what, (unsigned long long)(k - ps));
    }
  }
  return 1;
}

/* Mailbox slots: pair slots as documented, every slot of ring (i->j) in j's
 * block, after its bell and before its remote part, apart from every other
 * slot. */
static void check_mbox(int n) {
  unsigned ps = wf_mbox_pair_slots(n);
  unsigned want = (unsigned)(WF_MBOX_INBOX / (unsigned)(n - 1));
  CHECK(ps == (want < WF_MBOX_SLOTS ? want : WF_MBOX_SLOTS), "n=%d: %u slots per pair", n, ps);
  CHECK(wf_mbox_region_bytes(n) == (size_t)n * WF_MBOX_BLOCK, "n=%d: mailbox region %zu bytes", n,
        wf_mbox_region_bytes(n));
  if (!ps) return;
  uint8_t *base = (uint8_t *)(uintptr_t)4096; /* addresses only */
  static uint8_t used[200 * WF_MBOX_INBOX]; /* per (to, slot index in its inbox) */
  memset(used, 0, sizeof used);
  for (int to = 0; to < n; to++)
    for (int from = 0; from < n; from++) {
      if (from == to) continue;
      size_t offs[2 * WF_MBOX_SLOTS];
      for (uint64_t k = 0; k < 2 * ps; k++) offs[k] = (size_t)((uint8_t *)wf_mbox_slot_at(base, ps, from, to, k) - base);
      size_t lo = (size_t)to * WF_MBOX_BLOCK + WF_MBOX_LINE, end = (size_t)to * WF_MBOX_BLOCK + WF_RMBOX_OFF;
      if (!check_laps(n, "slot", from, to, offs, ps, lo, end, WF_MBOX_SLOT_BYTES, used + (size_t)to * WF_MBOX_INBOX))
        return;
    }
}

/* Remote rings (the remote part of each mailbox inbox): pair slots as
 * documented; bells, state line, control lines and slots of ring (i->j) inside j's
 * remote part, after its point-to-point slots, each slot apart from every
 * other and from every control line. */
static void check_rmbox(int n) {
  unsigned ps = wf_rmbox_pair_slots(n);
  unsigned want = (unsigned)(WF_RMBOX_INBOX / (unsigned)(n - 1));
  CHECK(ps == (want < WF_RMBOX_SLOTS ? want : WF_RMBOX_SLOTS), "n=%d: %u remote slots per pair", n, ps);
  CHECK(WF_RMBOX_OFF >= WF_MBOX_LINE + WF_MBOX_INBOX * WF_MBOX_SLOT_BYTES && WF_RMBOX_OFF % 4096 == 0,
        "the remote part starts at %u", WF_RMBOX_OFF);
  if (!ps) return;
  uint8_t *base = (uint8_t *)(uintptr_t)4096;
  static uint8_t used[200 * WF_RMBOX_INBOX];
  memset(used, 0, sizeof used);
  for (int to = 0; to < n; to++) {
    size_t part = (size_t)to * WF_MBOX_BLOCK + WF_RMBOX_OFF, end = (size_t)(to + 1) * WF_MBOX_BLOCK;
    size_t lo = part + (WF_RMBOX_HDR_LINES + WF_RMBOX_INBOX) * WF_MBOX_LINE; /* the first slot */
    for (int b = 0; b < 2; b++)
      CHECK((size_t)((uint8_t *)wf_rmbox_bell_at(base, to, b) - base) == part + (size_t)b * WF_MBOX_LINE,
            "n=%d: bell %d of %d", n, b, to);
    CHECK((size_t)((uint8_t *)wf_rmbox_state_at(base, to) - base) == part + 2 * WF_MBOX_LINE, "n=%d: state of %d", n,
          to);
    for (int from = 0; from < n; from++) {
      if (from == to) continue;
      size_t c = (size_t)((uint8_t *)wf_rmbox_ctl_at(base, from, to) - base);
      CHECK(c >= part + WF_RMBOX_HDR_LINES * WF_MBOX_LINE && c + WF_MBOX_LINE <= lo, "n=%d: control line of %d->%d",
            n, from, to);
      size_t offs[2 * WF_RMBOX_SLOTS];
      for (uint64_t k = 0; k < 2 * ps; k++) offs[k] = (size_t)((uint8_t *)wf_rmbox_slot_at(base, ps, from, to, k) - base);
      if (!check_laps(n, "remote slot", from, to, offs, ps, lo, end, WF_RMBOX_SLOT_BYTES,
                      used + (size_t)to * WF_RMBOX_INBOX))
        return;
    }
  }
}

int main(void) {
  check_linear(0, 0);
  check_linear(1 * MIB, 4 * MIB);
  wf_shm_layout l;
  size_t last_slots = 16;
  for (int n = 2; n <= 64; n++) {
    if (!wf_host_plan(n, 0, 0, 0, 0, &l)) {
      CHECK(0, "no layout for %d ranks", n);
      continue;
    }
    if (n <= 3) /* the configured geometry in full */
      CHECK(l.nslots == 16 && l.slot_bytes == 65536, "n=%d: %zu slots of %zu bytes", n, l.nslots, l.slot_bytes);
    CHECK(l.nslots * l.slot_bytes <= last_slots * 65536, "n=%d: a pair got more than with n - 1", n);
    last_slots = l.nslots * l.slot_bytes / 65536 + 1;
    check_rings(n, &l);
    if (n == 4 || n == 8 || n == 16 || n == 64)
      printf("n=%d: a pair's ring %zu x %zu bytes, inbox %zu KiB per rank, segment %zu KiB\n", n, l.nslots,
             l.slot_bytes, l.inbox_bytes >> 10, l.size >> 10);
  }
  /* another geometry, smaller slots forced at many ranks */
  for (int n = 2; n <= 64; n++) {
    CHECK(wf_host_plan(n, 4096, 4, 0, 0, &l), "no layout for %d ranks of 4 KiB x 4", n);
    check_rings(n, &l);
  }
  /* the cap: beyond 2 MiB per rank the inboxes shrink, together at most
   * WF_SHM_RINGS_CAP, until a ring cannot hold two 64-byte slots */
  CHECK(wf_host_plan(200, 0, 0, 0, 0, &l) && (size_t)200 * l.inbox_bytes <= WF_SHM_RINGS_CAP,
        "200 ranks: inboxes of %zu bytes", l.inbox_bytes);
  check_rings(200, &l);
  CHECK(!wf_host_plan(8000, 0, 0, 0, 0, &l), "8000 ranks: rings of %zu bytes accepted", l.ring_bytes);
  /* both sizes given: honoured, no cap */
  CHECK(wf_host_plan(2, 1u << 30, 4, 0, 0, &l) && l.slot_bytes == (1u << 30) && l.nslots == 4,
        "configured 1 GiB x 4: %zu x %zu", l.nslots, l.slot_bytes);
  CHECK(!wf_host_plan(1, 0, 0, 0, 0, &l), "a layout for one rank");
  for (int n = 2; n <= 200; n++) check_mbox(n), check_rmbox(n);
  CHECK(wf_mbox_pair_slots(WF_MBOX_INBOX + 2) == 0, "a mailbox slot per pair beyond %u ranks", WF_MBOX_INBOX + 1);
  return unit_result("test_host_layout");
}

/* mailbox.c - the point-to-point mailboxes' size and their futex bells
 * (mailbox.h); the rings themselves are inline there. */
#include "host/mailbox.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Static_assert(offsetof(wf_mbox_slot, data) == 64, "a slot's header is 64 bytes");
_Static_assert(offsetof(wf_rmbox_slot, data) == 64 && sizeof(wf_rmbox_ctl) == WF_MBOX_LINE &&
                   sizeof(wf_rmbox_state) == WF_MBOX_LINE,
               "a remote slot's header is 64 bytes, a control line 128");
_Static_assert(WF_MBOX_BLOCK % 4096 == 0 && WF_MBOX_LINE % 64 == 0, "inboxes are page-aligned, slots 64-aligned");

size_t wf_mbox_region_bytes(int nlocal) {
  if (nlocal < 2) return 0;
  return (size_t)nlocal * WF_MBOX_BLOCK;
}

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts) {
  return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

void wf_mbox_ring(wf_mbox_bell *b) {
  atomic_fetch_add(&b->word, 1);
  if (atomic_load(&b->sleepers)) futex(&b->word, FUTEX_WAKE, INT_MAX, NULL);
}

void wf_mbox_sleep(wf_mbox_bell *b, uint32_t seen, int64_t ns) {
  atomic_fetch_add(&b->sleepers, 1);
  if (ns > 0 && atomic_load(&b->word) == seen) {
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    futex(&b->word, FUTEX_WAIT, seen, &ts); /* EAGAIN: it moved already */
  }
  atomic_fetch_sub(&b->sleepers, 1);
}

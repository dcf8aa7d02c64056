/* p2p_impl.h - point-to-point state shared by the engine's path (p2p.c) and
 * the caller-thread fast path over the host's mailboxes (p2p_fast.c). Not
 * for other files. Everything here is under p->mu: the engine thread and
 * callers' threads both match receives. Lock order: p->mu, then w->mu
 * (completion). */
#ifndef WF_ENGINE_P2P_IMPL_H
#define WF_ENGINE_P2P_IMPL_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/p2p.h"
#include "host/mailbox.h"

typedef struct op {
  struct op *next;
  weft_request *r;
  int peer;        /* world rank; a receive from any source: -1 until matched */
  uint64_t id;     /* send: its number; receive: the matched send's */
  uint64_t count, bytes;
  int eager;       /* send: went inline */
  int pending;     /* transport transfers not complete (the transport decrements it) */
  int big;         /* receive: counted in big_rx (larger than the mailbox's read limit) */
  int rli;         /* receive claimed for a read (on reads): the sender's local index, */
  uint64_t rk;     /* and its message's number */
} op;

typedef struct ann { /* a P2P_SEND not matched yet */
  struct ann *next;
  int peer;
  uint64_t id, key, count;
  uint32_t group_id;
  uint8_t dtype, eager;
  uint8_t *data;   /* inline bytes (malloc'd) or NULL */
} ann;

typedef struct wf_mbox_tx { /* this rank's ring to one local peer (producer side) */
  uint64_t head, reap;      /* messages written / reaped (results read) */
  weft_request *reqs[WF_MBOX_SLOTS];
} wf_mbox_tx;

struct wf_p2p {
  pthread_mutex_t mu;
  int size;
  uint64_t *next_id;   /* per peer: the last message number sent to it */
  uint64_t *credit;    /* per peer: inline bytes sent to it, not yet acknowledged */
  uint8_t *gone;       /* per peer: its BYE was handled (everything it sent is here) */
  _Atomic int *slow_out; /* per peer: sends on the engine's path not complete (no mailbox while > 0) */
  _Atomic int queued_recvs; /* receives in the engine's queue, not yet posted (later ones queue behind) */
  op *sends;           /* waiting for their P2P_REPLY */
  op *posted, *posted_tail; /* receives not matched yet, post order */
  op *moving;          /* transfers in the transports */
  ann *anns, *anns_tail;
  weft_status failed;  /* the world's failure, once the engine handled it: no more posts */
  char failed_msg[512];
  int asked;           /* a caller left a match to the engine (an announcement, a callback) */

  /* the mailboxes (p2p_fast.c); mbox NULL: no fast path */
  uint8_t *mbox;
  int nlocal, li;      /* local ranks; this rank's local index */
  unsigned mslots;     /* slots of each pair's ring (host/mailbox.h: wf_mbox_pair_slots) */
  int *li_of;          /* size entries: world rank -> local index, or -1 */
  int *rank_of;        /* nlocal entries: local index -> world rank */
  uint64_t *rx_tail;   /* per local index: the oldest message from it not matched */
  uint64_t *rx_lim;    /* per local index: messages below it were published when this matching pass began */
  wf_mbox_tx *tx;      /* per local index */
  int ntx;             /* fast sends not reaped */
  int oversub;         /* more local ranks than cores: waiters yield at once */
  uint64_t n_inline, n_read; /* messages received through the mailboxes: copied out, read across processes */
  uint64_t n_read_big;       /* of n_read: beyond the read limit (while this rank received large ones too) */
  op *reads, *reads_tail; /* receives matched with a message to read across processes, not started */
  int reading;         /* reads running outside p->mu (their slots stay valid until it is 0) */
  int big_rx;          /* receives posted here above the read limit, not complete (p2p_fast.c) */
};

/* p2p.c, p->mu held. */
void wf_p2p_finish(weft_world *w, op *o, weft_status st, const char *msg);
/* Matches posted receives with what arrived, in post order, the mailboxes'
 * messages first per sender (a mailbox message precedes every announcement
 * from its sender not matched yet). engine: this is the engine thread
 * outside any callback, which alone may match announcements (it sends the
 * reply) and complete requests with a callback; a caller stops at the
 * first such receive and wakes the engine. */
void wf_p2p_match_all(weft_world *w, int engine);

/* p2p_fast.c, p->mu held. */
/* Starts a matching pass: fixes which mailbox messages it may see, so that
 * a receive posted later never takes a message published after an earlier
 * receive that accepts it looked (senders publish concurrently). */
void wf_p2p_fast_snapshot(wf_p2p *p);
/* The earliest unmatched mailbox message o accepts: 1, *li and *k. */
int wf_p2p_fast_find(wf_p2p *p, const op *o, int *li, uint64_t *k);
/* o (off the posted list) meets message k from local index li. */
void wf_p2p_fast_match(weft_world *w, op *o, int li, uint64_t k);
/* Completes the fast sends whose results are in, to local index li (-1:
 * all). */
void wf_p2p_fast_reap(weft_world *w, int li);
/* Fails the fast sends not reaped to local index li (-1: all). */
void wf_p2p_fast_fail(weft_world *w, int li, weft_status st, const char *msg);
/* The earliest deadline of a fast send. */
int64_t wf_p2p_fast_deadline(wf_p2p *p, weft_request **which);
/* Wakes this rank's waiters (a request they wait for completed elsewhere). */
void wf_p2p_fast_ring_self(wf_p2p *p);
/* Fails the receives claimed for a read and not started (p->reads). */
void wf_p2p_fast_fail_reads(weft_world *w, weft_status st, const char *msg);

/* p2p_fast.c, p->mu NOT held: runs the claimed reads (p->reads), each
 * outside the lock, and completes them. Any thread. */
void wf_p2p_fast_do_reads(weft_world *w);

#endif

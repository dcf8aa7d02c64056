/* rmbox.c - remote execution's frames between ranks of one host through the
 * host segment's remote rings (engine/rmbox.h for the order argument,
 * host/mailbox.h for the layout).
 *
 * Sender (any thread, under its per-peer lock): a frame that fits a slot
 * goes into the next slot of ring (me -> peer) when the ring has room and
 * the peer has taken every frame this rank sent it on the engine's path;
 * then the peer's bell rings (WORK for a call frame, DONE for a reply).
 * Anything else goes to the engine (wf_ext_send) and is counted, and so
 * does a call frame while the peer's worker runs a function and nothing of
 * the peer sleeps on its WORK bell (the engine then acts on it at once). A
 * full ring never blocks a sender.
 *
 * Receiver (whichever thread drains first: a caller waiting, the idle
 * worker, the service thread, the engine thread before a local peer's frame
 * from a socket): takes the published slots of each ring in order, hands
 * each to the remote core (which copies it) and frees the slot. */
#include "engine/rmbox.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/ext.h"
#include "host/mailbox.h"
#include "host/segment.h"
#include "util/err.h"
#include "util/log.h"

typedef struct wf_rmbox_tx { /* this rank's ring to one local peer */
  pthread_mutex_t mu;        /* the choice between the ways, and the counts below */
  uint64_t head;             /* frames put in the ring */
  uint64_t slow;             /* frames sent on the engine's path */
} wf_rmbox_tx;

struct wf_rmbox {
  uint8_t *region;
  int nlocal, li;
  unsigned ps;
  int send_on;               /* WEFT_REMOTE_MAILBOX */
  int *li_of;                /* world rank -> local index, -1 */
  int *rank_of;              /* local index -> world rank */
  wf_rmbox_tx *tx;           /* per local index */
  pthread_mutex_t drain_mu;  /* one receiver at a time */
  uint64_t *rx_tail;         /* per local index (drain_mu) */
  _Atomic uint64_t n_ring_in, n_ring_out, n_engine_in, n_engine_out;
};

_Static_assert(WF_RMBOX_BELL_WORK == 0 && WF_RMBOX_BELL_DONE == 1, "the bells' order in host/mailbox.h");

weft_status wf_rmbox_attach(weft_world *w) {
  uint8_t *region = w->host ? wf_host_mbox(w->host) : NULL;
  int n = w->host ? wf_host_nlocal(w->host) : 0;
  if (!region || !wf_rmbox_pair_slots(n)) return WEFT_OK;
  wf_rmbox *m = calloc(1, sizeof *m);
  if (!m) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  m->li_of = malloc(sizeof *m->li_of * (size_t)w->size);
  m->rank_of = malloc(sizeof *m->rank_of * (size_t)n);
  m->tx = calloc((size_t)n, sizeof *m->tx);
  m->rx_tail = calloc((size_t)n, sizeof *m->rx_tail);
  if (!m->li_of || !m->rank_of || !m->tx || !m->rx_tail) {
    free(m->li_of), free(m->rank_of), free(m->tx), free(m->rx_tail), free(m);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  }
  for (int r = 0; r < w->size; r++) {
    m->li_of[r] = wf_host_index_of(w->host, r);
    if (m->li_of[r] >= 0) m->rank_of[m->li_of[r]] = r;
  }
  for (int i = 0; i < n; i++) pthread_mutex_init(&m->tx[i].mu, NULL);
  pthread_mutex_init(&m->drain_mu, NULL);
  m->region = region;
  m->nlocal = n;
  m->li = wf_host_local_index(w->host);
  m->ps = wf_rmbox_pair_slots(n);
  m->send_on = w->set.remote_mailbox != 0;
  w->rmbox = m;
  return WEFT_OK;
}

void wf_rmbox_detach(weft_world *w) {
  wf_rmbox *m = w->rmbox;
  if (!m) return;
  /* tests read this line to see which way the frames went */
  WF_INFO(WF_SUB_ENGINE,
          "remote mailboxes: %llu frames received through the mailboxes, %llu from this host's ranks through the "
          "engine; %llu sent through the mailboxes, %llu to this host's ranks through the engine",
          (unsigned long long)m->n_ring_in, (unsigned long long)m->n_engine_in, (unsigned long long)m->n_ring_out,
          (unsigned long long)m->n_engine_out);
  w->rmbox = NULL;
  for (int i = 0; i < m->nlocal; i++) pthread_mutex_destroy(&m->tx[i].mu);
  pthread_mutex_destroy(&m->drain_mu);
  free(m->li_of), free(m->rank_of), free(m->tx), free(m->rx_tail), free(m);
}

static int local_peer(const wf_rmbox *m, int peer) { return m->li_of[peer] >= 0 && m->li_of[peer] != m->li; }

/* A call frame for local index li that would wait in its ring: its worker
 * runs a function and no thread of it sleeps on its WORK bell (the service
 * thread sleeps on it only once it saw the worker busy), so only the
 * service thread's next tick would take it; the engine's path has it acted
 * on at once. Replies need no such care: a caller that waits drains its
 * ring itself. (Relaxed: a hint; a stale one costs at most a tick.) */
static int callee_busy(const wf_rmbox *m, int li, uint8_t type) {
  if (type == WF_MSG_REMOTE_REPLY) return 0;
  return atomic_load_explicit(&wf_rmbox_state_at(m->region, li)->busy, memory_order_relaxed) &&
         !atomic_load_explicit(&wf_rmbox_bell_at(m->region, li, WF_RMBOX_BELL_WORK)->sleepers, memory_order_relaxed);
}

weft_status wf_rmbox_send(weft_world *w, int peer, wf_buf *frame) {
  wf_rmbox *m = w->rmbox;
  if (!m || !local_peer(m, peer)) return wf_ext_send(w, peer, frame);
  int li = m->li_of[peer];
  wf_rmbox_tx *t = &m->tx[li];
  wf_rmbox_ctl *ctl = wf_rmbox_ctl_at(m->region, m->li, li);
  size_t n = frame->len >= WF_FRAME_HDR_SIZE ? frame->len - WF_FRAME_HDR_SIZE : 0;
  uint8_t type = frame->len >= WF_FRAME_HDR_SIZE ? frame->data[5] : 0;
  pthread_mutex_lock(&t->mu);
  /* acquire (both): the peer took those frames (and freed those slots) before it said so */
  if (m->send_on && !frame->oom && frame->len >= WF_FRAME_HDR_SIZE && n <= WF_RMBOX_PAYLOAD &&
      !atomic_load_explicit(&w->gone[peer], memory_order_relaxed) && !callee_busy(m, li, type) &&
      atomic_load_explicit(&ctl->engine_seen, memory_order_acquire) == t->slow &&
      t->head - atomic_load_explicit(&ctl->tail, memory_order_acquire) < m->ps) {
    wf_rmbox_slot *s = wf_rmbox_slot_at(m->region, m->ps, m->li, li, t->head);
    memcpy(s->data, frame->data + WF_FRAME_HDR_SIZE, n);
    s->len = (uint32_t)n;
    s->type = type;
    atomic_store_explicit(&s->seq, t->head + 1, memory_order_release); /* the bytes before the frame is seen */
    t->head++;
    pthread_mutex_unlock(&t->mu);
    wf_buf_free(frame);
    atomic_fetch_add_explicit(&m->n_ring_out, 1, memory_order_relaxed);
    wf_mbox_ring(wf_rmbox_bell_at(m->region, li, type == WF_MSG_REMOTE_REPLY ? WF_RMBOX_BELL_DONE
                                                                           : WF_RMBOX_BELL_WORK));
    return WEFT_OK;
  }
  /* under the lock: a later frame of any thread sees this one counted */
  weft_status st = wf_ext_send(w, peer, frame);
  if (st == WEFT_OK) {
    t->slow++;
    atomic_fetch_add_explicit(&m->n_engine_out, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&t->mu);
  return st;
}

int wf_rmbox_drain(weft_world *w, int from, int block, int may_fail, wf_rmbox_deliver_fn fn, void *ctx) {
  wf_rmbox *m = w->rmbox;
  if (!m) return 0;
  if (block) pthread_mutex_lock(&m->drain_mu);
  else if (pthread_mutex_trylock(&m->drain_mu)) return -1;
  int got = 0, bad = -1;
  char err[256] = "";
  int lo = 0, hi = m->nlocal;
  if (from >= 0) {
    if (!local_peer(m, from)) hi = 0;
    else lo = m->li_of[from], hi = lo + 1;
  }
  for (int i = lo; i < hi; i++) {
    if (i == m->li) continue;
    wf_rmbox_ctl *ctl = wf_rmbox_ctl_at(m->region, i, m->li);
    uint64_t tail = m->rx_tail[i];
    int peer = m->rank_of[i];
    for (;;) {
      wf_rmbox_slot *s = wf_rmbox_slot_at(m->region, m->ps, i, m->li, tail);
      /* acquire: pairs with the sender's release of seq (the bytes) */
      if (atomic_load_explicit(&s->seq, memory_order_acquire) != tail + 1) break;
      if (atomic_load_explicit(&w->gone[peer], memory_order_acquire) == 2) {
        /* it died: its frames go with it (its jobs were dropped, its objects go after the grace) */
      } else if (s->len > WF_RMBOX_PAYLOAD) {
        if (bad < 0) bad = peer, snprintf(err, sizeof err, "a frame of %u bytes in a slot of %u", s->len,
                                          WF_RMBOX_PAYLOAD);
      } else {
        char e[256];
        if (fn(ctx, peer, s->type, s->data, s->len, e, sizeof e) != WEFT_OK && bad < 0) {
          bad = peer;
          snprintf(err, sizeof err, "%s", e);
        }
      }
      tail++;
      /* release: the slot's bytes were read (copied) before the sender may reuse it */
      atomic_store_explicit(&ctl->tail, tail, memory_order_release);
      got++;
    }
    m->rx_tail[i] = tail;
  }
  pthread_mutex_unlock(&m->drain_mu);
  if (got) atomic_fetch_add_explicit(&m->n_ring_in, (uint64_t)got, memory_order_relaxed);
  if (bad >= 0) {
    if (may_fail)
      wf_world_fail(w, WEFT_ERR_PROTOCOL, "bad message from rank %d (%s) in its remote mailbox: %s", bad,
                    w->peers[bad].host, err);
    else WF_WARN(WF_SUB_ENGINE, "dropped a bad message from rank %d in its remote mailbox: %s", bad, err);
  }
  return got;
}

void wf_rmbox_engine_seen(weft_world *w, int peer) {
  wf_rmbox *m = w->rmbox;
  if (!m || !local_peer(m, peer)) return;
  atomic_fetch_add_explicit(&m->n_engine_in, 1, memory_order_relaxed);
  /* release: what the frame did comes before the sender may use the ring again */
  atomic_fetch_add_explicit(&wf_rmbox_ctl_at(m->region, m->li_of[peer], m->li)->engine_seen, 1,
                            memory_order_release);
}

uint32_t wf_rmbox_bell(weft_world *w, int which) {
  return wf_mbox_word(wf_rmbox_bell_at(w->rmbox->region, w->rmbox->li, which));
}

void wf_rmbox_sleep(weft_world *w, int which, uint32_t seen, int64_t ns) {
  wf_mbox_sleep(wf_rmbox_bell_at(w->rmbox->region, w->rmbox->li, which), seen, ns);
}

void wf_rmbox_busy(weft_world *w, int on) {
  atomic_store_explicit(&wf_rmbox_state_at(w->rmbox->region, w->rmbox->li)->busy, on ? 1u : 0u, memory_order_relaxed);
}

void wf_rmbox_ring(weft_world *w, int which) { wf_mbox_ring(wf_rmbox_bell_at(w->rmbox->region, w->rmbox->li, which)); }

/* world.c - a world's state: made before the engine starts (wf_world_new),
 * freed after it stopped (wf_world_free). */
#include <pthread.h>
#include <stdlib.h>

#include <sys/random.h>
#include <unistd.h>

#include "engine/devstage.h"
#include "engine/p2p.h"
#include "util/time.h"
#include "engine/submit.h"
#include "util/log.h"

weft_world *wf_world_new(int rank, int size, const wf_settings *set, double timeout_seconds, wf_mpi_comm *mpic) {
  weft_world *w = calloc(1, sizeof *w);
  int *ranks = malloc(sizeof(int) * (size_t)size);
  struct wf_dstage_world *ds = wf_devstage_world_new();
  wf_p2p *p2p = wf_p2p_new(size);
  if (!w || !ranks || !ds || !p2p) {
    wf_p2p_free(p2p);
    wf_devstage_world_free(ds);
    free(w);
    free(ranks);
    wf_mpi_comm_close(mpic);
    return NULL;
  }
  w->dstage = ds;
  w->p2p = p2p;
  while (!w->incarnation) /* a restarted rank is not mistaken for its former self */
    if (getrandom(&w->incarnation, sizeof w->incarnation, 0) != (ssize_t)sizeof w->incarnation)
      w->incarnation = (uint64_t)wf_now_ns() ^ ((uint64_t)getpid() << 32);
  w->mux.mpi_comm = mpic; /* [mpi] freed by wf_world_free */
  w->magic = WF_WORLD_MAGIC;
  w->rank = rank;
  w->size = size;
  w->epfd = w->evfd = -1;
  w->timed_next = INT64_MAX;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->done_cv, NULL);
  wf_strmap_init(&w->inflight);
  wf_strmap_init(&w->group_counts);
  wf_strmap_init(&w->instances);
  wf_tl_init(&w->tl, rank);
  w->set = *set;
  w->timeout_seconds = timeout_seconds > 0 ? timeout_seconds : set->timeout_seconds;
  if (!(w->timeout_seconds > 0)) w->timeout_seconds = 300;
  w->hb_interval = set->heartbeat_interval;
  w->hb_timeout = set->heartbeat_timeout;
  if (!(w->hb_interval > 0)) w->hb_interval = 0.5;
  if (!(w->hb_timeout > w->hb_interval)) w->hb_timeout = 10 * w->hb_interval;
  wf_log_set_rank(rank);
  weft_group *g = &w->world_group;
  g->magic = WF_GROUP_MAGIC;
  g->id = 0;
  g->world = w;
  g->size = size;
  g->rank = rank;
  g->ranks = ranks;
  for (int i = 0; i < size; i++) g->ranks[i] = i;
  w->remote_group = *g; /* the same ranks (owned by world_group); never registered with the engine */
  w->remote_group.id = WF_REMOTE_GROUP_ID;
  return w;
}

void wf_world_free(weft_world *w) {
  if (!w) return;
  wf_engine_stop(w);
  wf_mux_release_mpi(&w->mux); /* [mpi] after the engine: the transport, then the communicator */
  wf_tl_destroy(&w->tl);
  /* every request is complete now; those whose caller has not seen them
   * yet give their names up, so that their handles no longer need the world */
  pthread_mutex_lock(&w->mu);
  for (size_t i = 0; i < w->inflight.cap; i++) {
    wf_strmap_entry *e = &w->inflight.slots[i];
    if (e->key && !e->tomb) atomic_store_explicit(&((weft_request *)e->val)->name_held, 0, memory_order_relaxed);
  }
  pthread_mutex_unlock(&w->mu);
  wf_devstage_world_free(w->dstage); /* its streams, if the engine never stopped them */
  wf_p2p_free(w->p2p);
  wf_cancel_free(w);
  wf_inst_free(w);
  wf_steps_free(w);
  for (wf_keyed *k = w->keyed, *next; k; k = next) { /* their groups went with the engine */
    next = k->next;
    free(k);
  }
  wf_strmap_free(&w->inflight);
  wf_strmap_free(&w->group_counts);
  free(w->peers);
  free(w->world_group.ranks);
  pthread_cond_destroy(&w->done_cv);
  pthread_mutex_destroy(&w->mu);
  w->magic = 0;
  free(w);
}


/* groups.c - the engine's per-group state: every group this rank belongs to
 * (the world, and process sets created at run time) negotiates and executes
 * independently: its own coordinator (its first member), tensor table,
 * response sequence and executor. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/err.h"
#include "util/log.h"
#include "util/settings.h"

int wf_group_index(const weft_group *g, int r) {
  for (int i = 0; i < g->size; i++)
    if (g->ranks[i] == r) return i;
  return -1;
}

wf_gstate *wf_gs_find(weft_world *w, uint32_t id) {
  for (int i = 0; i < w->ngs; i++)
    if (w->gs[i]->id == id) return w->gs[i];
  return NULL;
}

/* Rank 0 of a group tells the members that wait for a stalled tensor, so
 * the culprit is visible from any member's log (the coordinator has logged
 * it already). submitted[] is indexed by group rank. */
static void on_stall(void *ctx, const char *report, const uint8_t *submitted) {
  wf_gstate *gs = ctx;
  weft_world *w = gs->world;
  for (int i = 0; i < gs->group->size; i++) {
    int p = gs->group->ranks[i];
    if (p == w->rank || !submitted[i] || w->departed[p] || !wf_tcp_alive(w->tcp, p)) continue;
    wf_buf b = {0};
    wf_encode_stall(&b, (uint32_t)w->rank, report);
    wf_engine_send_frame(w, p, &b);
    wf_buf_free(&b);
  }
}

/* Fills gs->topo from the world's peer table: hosts are the bootstrap's
 * host groups (cross ranks), renumbered in order of first group rank. */
static int topo_fill(weft_world *w, wf_gstate *gs) {
  weft_group *g = gs->group;
  int n = g->size;
  gs->topo_arrays = malloc(sizeof(int) * (size_t)n * 2 + sizeof(int) * (size_t)w->size);
  if (!gs->topo_arrays) return -1;
  int *host_of = gs->topo_arrays, *pid_of = host_of + n, *map = pid_of + n;
  for (int i = 0; i < w->size; i++) map[i] = -1;
  int nh = 0, cma = w->cma_ok; /* agreed by the host's ranks at init (host/cma_agree.c) */
  for (int i = 0; i < n; i++) {
    const wf_peer_info *p = &w->peers[g->ranks[i]];
    int c = p->cross_rank >= 0 && p->cross_rank < w->size ? p->cross_rank : 0;
    if (map[c] < 0) map[c] = nh++;
    host_of[i] = map[c];
    pid_of[i] = (int)p->pid;
  }
  gs->topo = (wf_topo){.nhosts = nh, .host_of = host_of, .pid_of = pid_of, .cma = cma, .rings = w->shm != NULL};
  /* .stage: engine/local.c */
  return 0;
}

weft_status wf_gs_add(weft_world *w, weft_group *g) {
  if (wf_gs_find(w, g->id)) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "group id %u is already in use", g->id);
  wf_gstate **ngs = realloc(w->gs, sizeof *ngs * (size_t)(w->ngs + 1));
  if (!ngs) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory registering group %u", g->id);
  w->gs = ngs;
  wf_gstate *gs = calloc(1, sizeof *gs);
  if (!gs) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory registering group %u", g->id);
  gs->world = w;
  gs->group = g;
  gs->id = g->id;
  gs->coord_rank = g->ranks[0];
  if (topo_fill(w, gs)) {
    free(gs);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory registering group %u", g->id);
  }
  wf_strmap_init(&gs->table);
  if (gs->coord_rank == w->rank) {
    if (wf_coord_create_with(g->size, g->ranks, w->timeout_seconds, &w->set, &gs->coord)) {
      free(gs->topo_arrays);
      free(gs);
      return wf_err(WEFT_ERR_NO_MEMORY, "out of memory creating the coordinator of group %u", g->id);
    }
    wf_coord_set_stall_handler(gs->coord, on_stall, gs);
  }
  w->gs[w->ngs++] = gs;
  WF_INFO(WF_SUB_ENGINE, "group %u registered (%d members, coordinator rank %d)", g->id, g->size, gs->coord_rank);
  return WEFT_OK;
}

void wf_gs_remove(weft_world *w, wf_gstate *gs) {
  for (int i = 0; i < w->ngs; i++)
    if (w->gs[i] == gs) {
      memmove(w->gs + i, w->gs + i + 1, sizeof *w->gs * (size_t)(w->ngs - i - 1));
      w->ngs--;
      break;
    }
  wf_coord_destroy(gs->coord);
  wf_strmap_free(&gs->table);
  for (size_t i = gs->resps_pos; i < gs->nresps; i++) wf_response_msg_free(&gs->resps[i]);
  free(gs->resps);
  free(gs->fusion_buf);
  free(gs->topo_arrays);
  if (gs->group != &w->world_group) {
    free(gs->group->ranks);
    gs->group->magic = 0;
    free(gs->group);
  }
  free(gs);
}

void wf_gs_queue_responses(wf_gstate *gs, wf_response_msg *resps, uint32_t n) {
  if (gs->nresps + n > gs->resps_cap) {
    if (gs->resps_pos) { /* compact first */
      memmove(gs->resps, gs->resps + gs->resps_pos, (gs->nresps - gs->resps_pos) * sizeof *gs->resps);
      gs->nresps -= gs->resps_pos;
      gs->resps_pos = 0;
    }
    size_t ncap = gs->resps_cap ? gs->resps_cap : 16;
    while (ncap < gs->nresps + n) ncap *= 2;
    wf_response_msg *nr = realloc(gs->resps, ncap * sizeof *nr);
    if (!nr) {
      for (uint32_t i = 0; i < n; i++) wf_response_msg_free(&resps[i]);
      wf_world_fail(gs->world, WEFT_ERR_NO_MEMORY, "out of memory queueing responses");
      return;
    }
    gs->resps = nr;
    gs->resps_cap = ncap;
  }
  memcpy(gs->resps + gs->nresps, resps, n * sizeof *resps);
  gs->nresps += n;
}

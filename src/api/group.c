/* group.c - process sets: groups of ranks created and destroyed at run
 * time by their members. A group's id is derived from its sorted member list
 * and how many groups with that list this rank has created, so every member
 * computes the same id without talking; creation then runs a barrier in the
 * new group (which also proves every member agrees). Each group negotiates
 * and executes independently (engine/groups.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/submit.h"
#include "util/err.h"

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static uint32_t group_id(const char *key, intptr_t k) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a over the member list and k */
  for (const char *s = key; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  for (int i = 0; i < 8; i++) h = (h ^ (uint8_t)(k >> (8 * i))) * 1099511628211ull;
  uint32_t id = (uint32_t)(h ^ (h >> 24) ^ (h >> 48)) & 0xffffffu; /* 24 bits: see exec.c's data tags */
  return id && id != WF_P2P_TAG_GROUP ? id : 1; /* that one tags point-to-point data */
}

/* Runs a barrier named name in g and waits for it. */
static weft_status group_barrier(weft_group *g, const char *name) {
  weft_request *r;
  WF_CHECK(weft_barrier(g, name, NULL, &r));
  weft_status st = weft_wait(r, -1);
  if (st == WEFT_IN_PROGRESS) st = wf_err(WEFT_ERR_TIMEOUT, "%s: not every member arrived in time", name);
  else if (st != WEFT_OK) wf_err(st, "%s: %s", name, weft_request_error(r));
  weft_request_free(r);
  return st;
}

weft_status weft_group_create(weft_world *w, const int *ranks, int n, weft_group **out) {
  wf_err_clear();
  if (!out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_group_create: out is NULL");
  *out = NULL;
  if (!w || w->magic != WF_WORLD_MAGIC) return wf_err(WEFT_ERR_MISUSE, "weft_group_create: not a live world handle");
  if (!ranks || n < 1 || n > w->size)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_group_create: need 1..%d ranks, got %d%s", w->size, n,
                  ranks ? "" : " (ranks is NULL)");
  weft_group *g = calloc(1, sizeof *g);
  int *sorted = malloc(sizeof(int) * (size_t)n);
  char *key = malloc((size_t)n * 12 + 1);
  if (!g || !sorted || !key) {
    free(g);
    free(sorted);
    free(key);
    return wf_err(WEFT_ERR_NO_MEMORY, "weft_group_create: out of memory");
  }
  memcpy(sorted, ranks, sizeof(int) * (size_t)n);
  qsort(sorted, (size_t)n, sizeof(int), cmp_int);
  weft_status st = WEFT_OK;
  size_t k = 0;
  for (int i = 0; i < n && st == WEFT_OK; i++) {
    if (sorted[i] < 0 || sorted[i] >= w->size)
      st = wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_group_create: rank %d is not in the world (size %d)", sorted[i],
                  w->size);
    else if (i && sorted[i] == sorted[i - 1])
      st = wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_group_create: rank %d is listed twice", sorted[i]);
    k += (size_t)sprintf(key + k, "%d,", sorted[i]);
  }
  g->magic = WF_GROUP_MAGIC;
  g->world = w;
  g->size = n;
  g->ranks = sorted;
  g->rank = wf_group_index(g, w->rank);
  if (st == WEFT_OK && g->rank < 0)
    st = wf_err(WEFT_ERR_INVALID_ARGUMENT,
                "weft_group_create: this rank (%d) is not a member: only the members of a group create it", w->rank);
  if (st != WEFT_OK) {
    free(key);
    free(sorted);
    free(g);
    return st;
  }
  st = wf_group_register(w, g, key, group_id);
  free(key);
  if (st != WEFT_OK) {
    free(sorted);
    free(g);
    return st;
  }
  /* every member must arrive: a rank that lists other members than we do
   * gets another id, so this barrier would never complete for it */
  st = group_barrier(g, "weft.group.create");
  if (st != WEFT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", wf_err_msg());
    wf_group_unregister(w, g);
    return wf_err(st, "weft_group_create: %s", msg);
  }
  *out = g;
  return WEFT_OK;
}

weft_status weft_group_destroy(weft_group *g) {
  wf_err_clear();
  if (!g || g->magic != WF_GROUP_MAGIC || !g->world || g->world->magic != WF_WORLD_MAGIC)
    return wf_err(WEFT_ERR_MISUSE, "weft_group_destroy: not a live group handle");
  weft_world *w = g->world;
  if (g == &w->world_group) return wf_err(WEFT_ERR_MISUSE, "weft_group_destroy: the world group cannot be destroyed");
  weft_status st = group_barrier(g, "weft.group.destroy");
  wf_group_unregister(w, g);
  return st;
}

int weft_group_rank(const weft_group *g) { return g && g->magic == WF_GROUP_MAGIC ? g->rank : -1; }
int weft_group_size(const weft_group *g) { return g && g->magic == WF_GROUP_MAGIC ? g->size : -1; }

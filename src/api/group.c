/* group.c - process sets: groups of ranks created and destroyed at run
 * time by their members (weft_group_create), and keyed groups resolved at
 * first use (weft_group_resolve). Both go through the group leader (world
 * rank 0, negotiate/resolve.h) first, which answers when every member has
 * asked, or names the ranks that disagree. A listed group's id is derived
 * from its sorted member list and how many groups with that list this rank
 * has created, so every member computes the same id; creation then runs a
 * barrier in the new group. A keyed group's id comes from the leader, and
 * this rank keeps it (later resolves of the key are local). Each group
 * negotiates and executes independently (engine/groups.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/submit.h"
#include "util/err.h"
#include "util/time.h"

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
  /* the leader matches the members' lists: a rank that lists others fails
   * every creator of both lists at once, naming them, not by a timeout */
  uint32_t *list = malloc(sizeof(uint32_t) * (size_t)n);
  if (!list) {
    st = wf_err(WEFT_ERR_NO_MEMORY, "weft_group_create: out of memory");
  } else {
    for (int i = 0; i < n; i++) list[i] = (uint32_t)sorted[i];
    wf_group_msg join = {.kind = WF_GROUP_LISTED, .size = n, .device = WEFT_DEVICE_CPU, .nranks = (uint32_t)n,
                         .ranks = list}, reply;
    st = wf_resolve_wait(w, &join, &reply);
    if (st != WEFT_OK) {
      char msg[1600];
      snprintf(msg, sizeof msg, "%s", wf_err_msg());
      st = wf_err(st, "weft_group_create: %s", msg);
    }
    wf_group_msg_free(&reply);
    free(list);
  }
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
  if (g->keyed)
    return wf_err(WEFT_ERR_MISUSE, "weft_group_destroy: a keyed group (weft_group_resolve) lives as long as the world");
  weft_status st = group_barrier(g, "weft.group.destroy");
  wf_group_unregister(w, g);
  return st;
}

/* ------------------------------------------------------------ keyed groups */
static const char *device_name(int d) {
  return d == WEFT_DEVICE_CPU ? "cpu" : d == WEFT_DEVICE_KIND_CUDA ? "cuda" : d == WEFT_DEVICE_KIND_SIM ? "sim" : "?";
}

/* The world's entry for key (under mu), or NULL. */
static wf_keyed *keyed_find(weft_world *w, int key) {
  for (wf_keyed *k = w->keyed; k; k = k->next)
    if (k->key == key) return k;
  return NULL;
}

/* Waits (under mu) for another thread's resolution of k; 0 if it did not
 * finish by deadline. */
static int keyed_wait(weft_world *w, wf_keyed *k, int64_t deadline) {
  while (k->state == WF_KEYED_RESOLVING)
    if (!wf_world_wait_once(w, deadline)) return 0;
  return 1;
}

/* The leader's answer made a group (members ascending, id), registered. */
static weft_status keyed_group(weft_world *w, const wf_group_msg *r, weft_group **out) {
  *out = NULL;
  weft_group *g = calloc(1, sizeof *g);
  int *ranks = malloc(sizeof(int) * (r->nranks ? r->nranks : 1));
  if (!g || !ranks) {
    free(g);
    free(ranks);
    return wf_err(WEFT_ERR_NO_MEMORY, "weft_group_resolve: out of memory");
  }
  for (uint32_t i = 0; i < r->nranks; i++) ranks[i] = (int)r->ranks[i];
  g->magic = WF_GROUP_MAGIC;
  g->world = w;
  g->size = (int)r->nranks;
  g->ranks = ranks;
  g->keyed = 1;
  g->rank = wf_group_index(g, w->rank);
  if (g->rank < 0 || r->nranks != (uint32_t)r->size) {
    free(ranks);
    free(g);
    return wf_err(WEFT_ERR_PROTOCOL, "weft_group_resolve: the leader's answer for group %d leaves this rank (%d) out",
                  r->key, w->rank);
  }
  weft_status st = wf_group_register_id(w, g, r->id);
  if (st != WEFT_OK) {
    free(ranks);
    free(g);
    return st;
  }
  *out = g;
  return WEFT_OK;
}

weft_status weft_group_resolve(weft_world *w, int group_key, int group_size, int device_type, weft_group **out) {
  wf_err_clear();
  if (!out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_group_resolve: out is NULL");
  *out = NULL;
  if (!w || w->magic != WF_WORLD_MAGIC) return wf_err(WEFT_ERR_MISUSE, "weft_group_resolve: not a live world handle");
  if (group_size < 1 || group_size > w->size)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_group_resolve: group %d: size %d is out of range 1..%d (the world)",
                  group_key, group_size, w->size);
  if (device_type == WEFT_DEVICE_KIND_AUTO) device_type = WEFT_DEVICE_KIND_CUDA;
  if (device_type != WEFT_DEVICE_CPU && device_type != WEFT_DEVICE_KIND_CUDA && device_type != WEFT_DEVICE_KIND_SIM)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT,
                  "weft_group_resolve: group %d: device type %d is not WEFT_DEVICE_CPU or a WEFT_DEVICE_KIND_*",
                  group_key, device_type);
  int64_t deadline = wf_deadline_after(2 * w->timeout_seconds + w->hb_timeout + 5.0);
  pthread_mutex_lock(&w->mu);
  wf_keyed *k = keyed_find(w, group_key);
  if (k && !keyed_wait(w, k, deadline)) {
    pthread_mutex_unlock(&w->mu);
    return wf_err(WEFT_ERR_TIMEOUT, "weft_group_resolve: group %d: another thread's resolution did not finish",
                  group_key);
  }
  if (k) { /* resolved here before: local, no message */
    weft_status st = WEFT_OK;
    if (k->state == WF_KEYED_FAILED)
      st = wf_err(k->st, "weft_group_resolve: %s", k->msg);
    else if (k->size != group_size || k->device != device_type)
      st = wf_err(WEFT_ERR_MISMATCH, "weft_group_resolve: group %d was resolved here with size %d and device type "
                  "%s; this call gives size %d and device type %s", group_key, k->size, device_name(k->device),
                  group_size, device_name(device_type));
    else
      *out = k->group;
    pthread_mutex_unlock(&w->mu);
    return st;
  }
  k = calloc(1, sizeof *k);
  if (!k) {
    pthread_mutex_unlock(&w->mu);
    return wf_err(WEFT_ERR_NO_MEMORY, "weft_group_resolve: out of memory");
  }
  *k = (wf_keyed){.next = w->keyed, .key = group_key, .size = group_size, .device = device_type,
                  .state = WF_KEYED_RESOLVING};
  w->keyed = k;
  pthread_mutex_unlock(&w->mu);

  wf_group_msg join = {.kind = WF_GROUP_KEYED, .key = group_key, .size = group_size, .device = device_type}, reply;
  weft_group *g = NULL;
  weft_status st = wf_resolve_wait(w, &join, &reply);
  if (st == WEFT_OK) st = keyed_group(w, &reply, &g);
  char msg[sizeof k->msg];
  snprintf(msg, sizeof msg, "%s", st == WEFT_OK ? "" : wf_err_msg());
  wf_group_msg_free(&reply);
  pthread_mutex_lock(&w->mu);
  k->state = st == WEFT_OK ? WF_KEYED_DONE : WF_KEYED_FAILED;
  k->group = g;
  k->st = st;
  snprintf(k->msg, sizeof k->msg, "%s", msg);
  if (w->waiters) pthread_cond_broadcast(&w->done_cv);
  pthread_mutex_unlock(&w->mu);
  if (st != WEFT_OK) return wf_err(st, "weft_group_resolve: %s", msg);
  *out = g;
  return WEFT_OK;
}

int weft_group_rank(const weft_group *g) { return g && g->magic == WF_GROUP_MAGIC ? g->rank : -1; }
int weft_group_size(const weft_group *g) { return g && g->magic == WF_GROUP_MAGIC ? g->size : -1; }

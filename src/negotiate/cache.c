/* cache.c - the response cache (protocol in cache.h): a fixed number of
 * slots (ids), a name index and a least-recently-assigned list, identical
 * on every member of a group because it changes only in response order;
 * plus the member side's record of the references it sent. */
#include "negotiate/cache.h"

#include <stdlib.h>
#include <string.h>

#include "util/params.h"

#define NIL UINT32_MAX

typedef struct slot {
  char *name;        /* NULL: free (or its name could not be stored) */
  uint64_t epoch;    /* 0: never assigned */
  void *payload;
  uint32_t prev, next; /* assignment order: head = newest */
} slot;

struct wf_cache {
  uint32_t cap, used;
  uint64_t epoch;    /* assignments so far */
  slot *slots;
  uint32_t head, tail;
  wf_strmap byname;  /* name -> slot index + 1 */
  void (*free_payload)(void *);
};

uint32_t wf_cache_capacity_param(void) {
  int64_t v = wf_param_int("WEFT_CACHE_CAPACITY");
  if (v < 0) return 0;
  return v > WF_CACHE_MAX_IDS ? WF_CACHE_MAX_IDS : (uint32_t)v;
}

wf_cache *wf_cache_create(uint32_t capacity, void (*free_payload)(void *)) {
  if (!capacity) return NULL;
  if (capacity > WF_CACHE_MAX_IDS) capacity = WF_CACHE_MAX_IDS;
  wf_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->slots = calloc(capacity, sizeof *c->slots);
  if (!c->slots) {
    free(c);
    return NULL;
  }
  c->cap = capacity;
  c->head = c->tail = NIL;
  c->free_payload = free_payload;
  wf_strmap_init(&c->byname);
  return c;
}

void wf_cache_destroy(wf_cache *c) {
  if (!c) return;
  for (uint32_t i = 0; i < c->used; i++) {
    free(c->slots[i].name);
    if (c->slots[i].payload && c->free_payload) c->free_payload(c->slots[i].payload);
  }
  free(c->slots);
  wf_strmap_free(&c->byname);
  free(c);
}

int wf_cache_assigns(const wf_response_msg *r) {
  return r->type == WF_RESP_OK && (r->coll == WF_COLL_ALLREDUCE || r->coll == WF_COLL_ALLGATHER ||
                                   r->coll == WF_COLL_BROADCAST || r->coll == WF_COLL_ALLTOALL ||
                                   r->coll == WF_COLL_REDUCESCATTER);
}

static void unlink_slot(wf_cache *c, uint32_t i) {
  slot *s = &c->slots[i];
  if (s->prev != NIL) c->slots[s->prev].next = s->next;
  else c->head = s->next;
  if (s->next != NIL) c->slots[s->next].prev = s->prev;
  else c->tail = s->prev;
  s->prev = s->next = NIL;
}

static void push_front(wf_cache *c, uint32_t i) {
  slot *s = &c->slots[i];
  s->prev = NIL;
  s->next = c->head;
  if (c->head != NIL) c->slots[c->head].prev = i;
  c->head = i;
  if (c->tail == NIL) c->tail = i;
}

uint32_t wf_cache_assign(wf_cache *c, const char *name, void *payload, uint64_t *epoch) {
  uint32_t id;
  void *v = wf_strmap_get(&c->byname, name);
  if (v) {
    id = (uint32_t)((uintptr_t)v - 1);
    unlink_slot(c, id);
  } else {
    if (c->used < c->cap) {
      id = c->used++;
    } else { /* evict the least recently assigned */
      id = c->tail;
      unlink_slot(c, id);
      if (c->slots[id].name) wf_strmap_del(&c->byname, c->slots[id].name);
      free(c->slots[id].name);
    }
    slot *s = &c->slots[id];
    s->name = strdup(name);
    if (s->name && wf_strmap_put(&c->byname, name, (void *)(uintptr_t)(id + 1))) {
      free(s->name);
      /* no memory to index it: never found by name here, so this rank's ids
       * may now differ from other ranks'; epochs do not (one per assignment,
       * in response order everywhere), and the coordinator accepts only an
       * exact (id, epoch), so a divergent id costs a RESEND, never a wrong tensor */
      s->name = NULL;
    }
  }
  slot *s = &c->slots[id];
  if (s->payload && c->free_payload) c->free_payload(s->payload);
  s->payload = payload;
  s->epoch = ++c->epoch;
  push_front(c, id);
  *epoch = s->epoch;
  return id;
}

void *wf_cache_by_name(const wf_cache *c, const char *name, uint32_t *id, uint64_t *epoch) {
  void *v = wf_strmap_get(&c->byname, name);
  if (!v) return NULL;
  uint32_t i = (uint32_t)((uintptr_t)v - 1);
  *id = i;
  *epoch = c->slots[i].epoch;
  return c->slots[i].payload;
}

void *wf_cache_by_id(const wf_cache *c, uint32_t id, uint64_t epoch, const char **name) {
  if (id >= c->used || c->slots[id].epoch != epoch || !c->slots[id].name) return NULL;
  if (name) *name = c->slots[id].name;
  return c->slots[id].payload;
}

int wf_req_same(const wf_request_msg *a, const wf_request_msg *b) {
  if (a->coll != b->coll || a->dtype != b->dtype || a->reduce_op != b->reduce_op || a->ndim != b->ndim ||
      a->root != b->root || a->device != b->device || a->priority != b->priority || a->nsplits != b->nsplits)
    return 0;
  /* bit patterns: -0.0 and 0.0 scale to different results */
  if (memcmp(&a->prescale, &b->prescale, sizeof a->prescale) || memcmp(&a->postscale, &b->postscale, sizeof a->postscale))
    return 0;
  if (a->ndim > WEFT_MAX_DIMS || memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim)) return 0;
  if (a->nsplits && (!a->splits || !b->splits || memcmp(a->splits, b->splits, sizeof(int64_t) * a->nsplits)))
    return 0;
  return !strcmp(a->name, b->name);
}

wf_request_msg *wf_req_dup(const wf_request_msg *m) {
  wf_request_msg *d = malloc(sizeof *d);
  if (!d) return NULL;
  *d = *m;
  d->splits = NULL;
  if (m->nsplits) {
    d->splits = malloc(sizeof(int64_t) * m->nsplits);
    if (!d->splits) {
      free(d);
      return NULL;
    }
    memcpy(d->splits, m->splits, sizeof(int64_t) * m->nsplits);
  }
  return d;
}

void wf_req_free(void *p) {
  wf_request_msg *m = p;
  if (!m) return;
  free(m->splits);
  free(m);
}

/* ------------------------------------------------------------------ member side */
wf_mcache *wf_mcache_create(void) {
  uint32_t cap = wf_cache_capacity_param();
  if (!cap) return NULL;
  wf_mcache *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->c = wf_cache_create(cap, wf_req_free);
  if (!m->c) {
    free(m);
    return NULL;
  }
  wf_strmap_init(&m->sent);
  return m;
}

static void forget_sent(wf_mcache *m, const char *name) { free(wf_strmap_del(&m->sent, name)); }

void wf_mcache_destroy(wf_mcache *m) {
  if (!m) return;
  for (size_t i = 0; i < m->sent.cap; i++)
    if (m->sent.slots[i].key && !m->sent.slots[i].tomb) free(m->sent.slots[i].val);
  wf_strmap_free(&m->sent);
  wf_cache_destroy(m->c);
  free(m);
}

int wf_mcache_lookup(wf_mcache *m, uint32_t group_id, const wf_request_msg *q, wf_cache_ref *ref) {
  uint32_t id;
  uint64_t epoch;
  const wf_request_msg *mine = wf_cache_by_name(m->c, q->name, &id, &epoch);
  if (!mine || !wf_req_same(mine, q)) {
    m->misses++;
    return 0;
  }
  wf_cache_ref *rec = malloc(sizeof *rec);
  if (!rec) return 0;
  *rec = (wf_cache_ref){group_id, id, epoch};
  forget_sent(m, q->name); /* (none expected: one request per name in flight) */
  if (wf_strmap_put(&m->sent, q->name, rec)) {
    free(rec);
    return 0; /* cannot remember it: send it in full */
  }
  *ref = *rec;
  m->hits++;
  return 1;
}

void wf_mcache_response(wf_mcache *m, const wf_response_msg *r,
                        const wf_request_msg *(*own)(void *ctx, const char *name), void *ctx) {
  int assigns = wf_cache_assigns(r);
  for (uint32_t i = 0; i < r->nnames; i++) {
    forget_sent(m, r->names[i]);
    if (!assigns) continue;
    const wf_request_msg *q = own(ctx, r->names[i]);
    wf_request_msg *d = q ? wf_req_dup(q) : NULL; /* NULL (no memory): a miss next time, still consistent */
    uint64_t epoch;
    wf_cache_assign(m->c, r->names[i], d, &epoch);
  }
}

int wf_mcache_resend(wf_mcache *m, const wf_cache_ref *ref, char *name) {
  for (size_t i = 0; i < m->sent.cap; i++) {
    wf_strmap_entry *e = &m->sent.slots[i];
    if (!e->key || e->tomb) continue;
    const wf_cache_ref *s = e->val;
    if (s->group_id == ref->group_id && s->id == ref->id && s->epoch == ref->epoch) {
      strncpy(name, e->key, WF_NAME_MAX);
      name[WF_NAME_MAX] = '\0';
      forget_sent(m, name);
      m->resends++;
      return 1;
    }
  }
  return 0;
}

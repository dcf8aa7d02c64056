/* cache.c - the response cache (protocol in cache.h): a fixed number of
 * slots (ids), a name index and a least-recently-assigned list, identical
 * on every member of a group because it changes only in response order;
 * plus the member side's record of the references it sent (in the slot,
 * so a hit costs one name lookup when sent and one when answered). */
#include "negotiate/cache.h"

#include <stdlib.h>
#include <string.h>

#include "util/settings.h"

#define NIL UINT32_MAX

typedef struct slot {
  char *name;        /* NULL: free (or its name could not be stored); the index's key */
  uint64_t epoch;    /* 0: never assigned */
  uint64_t sent;     /* member: this epoch was named in a CACHED not yet answered (0: none) */
  void *payload;
  uint32_t prev, next; /* assignment order: head = newest */
} slot;

struct wf_cache {
  uint32_t cap, used;
  uint64_t epoch;    /* assignments so far */
  slot *slots;
  uint32_t head, tail;
  wf_strmap byname;  /* name -> slot index + 1 (key borrowed from the slot) */
  wf_strmap aside;   /* member: name -> wf_cache_ref*, sent for a slot since reassigned */
  void (*free_payload)(void *);
};

uint32_t wf_cache_capacity(const wf_settings *s) {
  int64_t v = (s ? s : wf_settings_default())->cache_capacity;
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
  wf_strmap_init(&c->aside);
  return c;
}

void wf_cache_destroy(wf_cache *c) {
  if (!c) return;
  wf_strmap_free(&c->byname); /* borrowed keys: before the names go */
  for (uint32_t i = 0; i < c->used; i++) {
    free(c->slots[i].name);
    if (c->slots[i].payload && c->free_payload) c->free_payload(c->slots[i].payload);
  }
  for (size_t i = 0; i < c->aside.cap; i++)
    if (c->aside.slots[i].key && !c->aside.slots[i].tomb) free(c->aside.slots[i].val);
  wf_strmap_free(&c->aside);
  free(c->slots);
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

/* name's slot index, or NIL. */
static uint32_t find(const wf_cache *c, const char *name) {
  void *v = wf_strmap_get(&c->byname, name);
  return v ? (uint32_t)((uintptr_t)v - 1) : NIL;
}

/* The assignment for name, whose slot is id (NIL: not cached): see
 * wf_cache_assign. */
static uint32_t assign_at(wf_cache *c, uint32_t id, const char *name, void *payload, uint64_t *epoch, int *kept) {
  if (id != NIL) {
    unlink_slot(c, id);
  } else {
    if (c->used < c->cap) {
      id = c->used++;
    } else { /* evict the least recently assigned */
      id = c->tail;
      unlink_slot(c, id);
      slot *old = &c->slots[id];
      if (old->name) wf_strmap_del(&c->byname, old->name);
      if (old->sent && old->name) {
        /* a member's reference still pending: keep it for a RESEND, by name */
        wf_cache_ref *rec = malloc(sizeof *rec);
        if (rec) *rec = (wf_cache_ref){0, id, old->sent};
        if (rec && wf_strmap_put(&c->aside, old->name, rec)) free(rec);
        /* no memory: a RESEND for it finds nothing and the tensor times out
         * at the coordinator, naming this rank */
      }
      old->sent = 0;
      free(old->name);
      old->name = NULL;
    }
    slot *s = &c->slots[id];
    s->name = strdup(name);
    if (s->name && wf_strmap_insert(&c->byname, s->name, (void *)(uintptr_t)(id + 1), 1)) {
      free(s->name);
      /* no memory to index it: never found by name here, so this rank's ids
       * may now differ from other ranks'; epochs do not (one per assignment,
       * in response order everywhere), and the coordinator accepts only an
       * exact (id, epoch), so a divergent id costs a RESEND, never a wrong tensor */
      s->name = NULL;
    }
  }
  slot *s = &c->slots[id];
  if (kept) *kept = payload && s->payload == payload; /* (an evicted slot may have held it too) */
  if (s->payload && s->payload != payload && c->free_payload) c->free_payload(s->payload);
  s->payload = payload;
  s->epoch = ++c->epoch;
  push_front(c, id);
  *epoch = s->epoch;
  return id;
}

uint32_t wf_cache_assign(wf_cache *c, const char *name, void *payload, uint64_t *epoch) {
  return assign_at(c, find(c, name), name, payload, epoch, NULL);
}

uint32_t wf_cache_assign_hint(wf_cache *c, uint32_t hint, const char *name, void *payload, uint64_t *epoch,
                              int *kept) {
  int ok = hint < c->used && c->slots[hint].name && !strcmp(c->slots[hint].name, name);
  return assign_at(c, ok ? hint : find(c, name), name, payload, epoch, kept);
}

void *wf_cache_by_id(const wf_cache *c, uint32_t id, uint64_t epoch, const char **name) {
  if (id >= c->used || c->slots[id].epoch != epoch || !c->slots[id].name) return NULL;
  if (name) *name = c->slots[id].name;
  return c->slots[id].payload;
}

int wf_req_same(const wf_request_msg *a, const wf_request_msg *b) {
  if (a->coll != b->coll || a->dtype != b->dtype || a->reduce_op != b->reduce_op || a->ndim != b->ndim ||
      a->root != b->root || a->device != b->device || a->priority != b->priority || a->nsplits != b->nsplits ||
      a->unit != b->unit)
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
wf_mcache *wf_mcache_create(uint32_t cap) {
  if (!cap) return NULL;
  wf_mcache *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->c = wf_cache_create(cap, wf_req_free);
  if (!m->c) {
    free(m);
    return NULL;
  }
  return m;
}

void wf_mcache_destroy(wf_mcache *m) {
  if (!m) return;
  wf_cache_destroy(m->c);
  free(m);
}

int wf_mcache_lookup(wf_mcache *m, uint32_t group_id, const wf_request_msg *q, wf_cache_ref *ref) {
  wf_cache *c = m->c;
  uint32_t id = find(c, q->name);
  slot *s = id != NIL ? &c->slots[id] : NULL;
  if (!s || !s->payload || !wf_req_same(s->payload, q)) {
    m->misses++;
    return 0;
  }
  s->sent = s->epoch; /* remembered in the slot until the response (or a RESEND) */
  *ref = (wf_cache_ref){group_id, id, s->epoch};
  m->hits++;
  return 1;
}

void wf_mcache_response(wf_mcache *m, const wf_response_msg *r, int rank,
                        const wf_request_msg *(*own)(void *ctx, const char *name), void *ctx) {
  wf_cache *c = m->c;
  if (r->type == WF_RESP_ERROR)
    for (uint32_t i = 0; i < r->nsizes; i++)
      if (r->sizes[i] == rank) return; /* not about this rank's request (exec.c skips it too) */
  int assigns = wf_cache_assigns(r);
  for (uint32_t i = 0; i < r->nnames; i++) {
    const char *name = r->names[i];
    uint32_t id = find(c, name);
    int hit = 0; /* sent as a hit: the slot's description is this rank's request */
    if (id != NIL) {
      hit = c->slots[id].sent != 0;
      c->slots[id].sent = 0;
    } else if (c->aside.len) {
      free(wf_strmap_del(&c->aside, name));
    }
    if (!assigns) continue;
    void *keep = id != NIL ? c->slots[id].payload : NULL, *pay = keep;
    if (!hit) {
      const wf_request_msg *q = own(ctx, name);
      if (!q) pay = NULL;
      else if (!keep || !wf_req_same(keep, q)) pay = wf_req_dup(q); /* NULL (no memory): a miss next time */
    }
    uint64_t epoch;
    assign_at(c, id, name, pay, &epoch, NULL);
  }
}

int wf_mcache_resend(wf_mcache *m, const wf_cache_ref *ref, char *name) {
  wf_cache *c = m->c;
  const char *found = NULL;
  if (ref->id < c->used && c->slots[ref->id].sent == ref->epoch && c->slots[ref->id].name) {
    c->slots[ref->id].sent = 0;
    found = c->slots[ref->id].name;
  } else {
    for (size_t i = 0; i < c->aside.cap && !found; i++) {
      wf_strmap_entry *e = &c->aside.slots[i];
      if (!e->key || e->tomb) continue;
      const wf_cache_ref *s = e->val;
      if (s->id == ref->id && s->epoch == ref->epoch) found = e->key;
    }
    if (!found) return 0;
  }
  strncpy(name, found, WF_NAME_MAX);
  name[WF_NAME_MAX] = '\0';
  if (c->aside.len) free(wf_strmap_del(&c->aside, name));
  m->resends++;
  return 1;
}

/* coord.c - the coordinator's message table: name -> every rank's request.
 * A tensor becomes ready when the last rank's request arrives; it is then
 * validated (validate.c) and turned into an OK or ERROR response with the
 * next sequence number. Entries that wait too long for some rank become
 * ERROR responses naming the missing ranks.
 *
 * Cost per tensor is what bounds fusion's gain (many small tensors per
 * step), so the table recycles its entries and request blocks, keys them by
 * the entry's own copy of the name, and scans for timeouts only when the
 * earliest deadline is due. With the response cache on, a member's CACHED
 * reference is not copied, and when every rank's request equals what the
 * name's last negotiation stored, validation is skipped and the stored
 * response reused. Ready responses leave through coord_take.c, which may
 * hold them while a burst of fusable requests is still arriving (HOLD_* in
 * coord_impl.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/coord_impl.h"
#include "util/log.h"
#include "util/settings.h"
#include "util/strmap.h"
#include "util/time.h"

/* ------------------------------------------------------------------ blocks and entries */
static rblock *block_get(wf_coord *c) {
  rblock *b = c->free_blocks;
  if (b) {
    c->free_blocks = b->next_free;
    c->nfree_blocks--;
  } else {
    size_t n = (size_t)c->size;
    b = malloc(sizeof *b + n * sizeof(wf_request_msg) + 2 * n);
    if (!b) return NULL;
    b->owner = c;
    b->have = (uint8_t *)(b->reqs + n);
    b->via = b->have + n;
  }
  b->next_free = NULL;
  b->refs = 1;
  b->known = 0;
  b->nsizes = 0;
  b->sizes = NULL;
  memset(b->have, 0, 2 * (size_t)c->size);
  return b;
}

void wf_cd_block_unpin(rblock *b) {
  if (!b || --b->refs > 0) return;
  wf_coord *c = b->owner;
  for (int r = 0; r < c->size; r++)
    if (b->have[r] && !b->via[r]) free(b->reqs[r].splits);
  free(b->sizes);
  if (c->nfree_blocks < FREE_MAX) {
    b->next_free = c->free_blocks;
    c->free_blocks = b;
    c->nfree_blocks++;
  } else {
    free(b);
  }
}

/* The cache's free_payload: its slot lets go of the block. */
static void block_release(void *p) {
  wf_cd_block_unpin(p);
}

/* Rank r's request in e (present). */
static const wf_request_msg *req_of(const entry *e, int r) {
  return e->b->via[r] ? &e->hit->reqs[r] : &e->b->reqs[r];
}

/* The collective of e's first present request. */
uint8_t wf_cd_entry_coll(const wf_coord *c, const entry *e) {
  for (int r = 0; r < c->size; r++)
    if (e->b->have[r]) return req_of(e, r)->coll;
  return 0;
}

uint32_t wf_cd_entry_unit(const wf_coord *c, const entry *e) {
  for (int r = 0; r < c->size; r++)
    if (e->b->have[r]) return req_of(e, r)->unit;
  return 0;
}

/* A request left fusable entry e waiting for other ranks. */
static void note_add(wf_coord *c, const entry *e) {
  if (c->add_e[0] != e) {
    c->add_e[1] = c->add_e[0];
    c->add_ns[1] = c->add_ns[0];
    c->add_e[0] = e;
  }
  c->add_ns[0] = wf_cd_now(c);
}

/* e leaves the table: its requests no longer show a burst arriving (a lone
 * tensor's own first request must not hold its response). */
static void forget_add(wf_coord *c, const entry *e) {
  if (c->add_e[1] == e) {
    c->add_e[1] = NULL;
    c->add_ns[1] = 0;
  } else if (c->add_e[0] == e) {
    c->add_e[0] = c->add_e[1];
    c->add_ns[0] = c->add_ns[1];
    c->add_e[1] = NULL;
    c->add_ns[1] = 0;
  }
}

static void entry_free(wf_coord *c, entry *e) {
  if (!e) return;
  forget_add(c, e);
  if (fusable_coll(e->coll)) c->npending_fusable--;
  wf_cd_block_unpin(e->b);
  wf_cd_block_unpin(e->hit);
  if (c->nfree_entries < FREE_MAX) {
    e->next_free = c->free_entries;
    c->free_entries = e;
    c->nfree_entries++;
  } else {
    free(e);
  }
}

/* Removes e from the table and frees it. */
void wf_cd_entry_drop(wf_coord *c, entry *e) {
  wf_strmap_del(&c->table, e->name); /* the key is e->name: not read after */
  entry_free(c, e);
}

weft_status wf_coord_create(int size, const int *ranks, double timeout_seconds, wf_coord **out) {
  return wf_coord_create_with(size, ranks, timeout_seconds, NULL, out);
}

weft_status wf_coord_create_with(int size, const int *ranks, double timeout_seconds, const wf_settings *set,
                                 wf_coord **out) {
  if (!set) set = wf_settings_default();
  wf_coord *c = calloc(1, sizeof *c);
  if (!c) return WEFT_ERR_NO_MEMORY;
  c->size = size;
  c->ranks = ranks;
  c->timeout = timeout_seconds;
  /* WEFT_STALL_CHECK_DISABLE turns the whole inspector off, reports and
   * shutdown, as HOROVOD_STALL_CHECK_DISABLE does */
  int stall_off = set->stall_check_disable != 0;
  c->stall_check = stall_off ? 0 : set->stall_check_seconds;
  c->stall_shutdown = stall_off ? 0 : set->stall_shutdown_seconds;
  c->next_check = INT64_MAX;
  c->hold_until = INT64_MAX;
  c->hold = set->cycle_time_us <= 0 && set->cycle_time_ms <= 0;
  int64_t pm = set->fusion_pack_max_bytes;
  c->pack_max = pm > 0 ? (uint64_t)pm : 0;
  /* a stall shutdown shortens the negotiation deadline */
  if (c->stall_shutdown > 0 && c->stall_shutdown < c->timeout) c->timeout = c->stall_shutdown;
  c->departed = calloc((size_t)size, 1);
  c->joined = calloc((size_t)size, 1);
  c->scratch = calloc((size_t)size, sizeof *c->scratch);
  if (!c->departed || !c->joined || !c->scratch) {
    free(c->departed);
    free(c->joined);
    free(c->scratch);
    free(c);
    return WEFT_ERR_NO_MEMORY;
  }
  wf_strmap_init(&c->table);
  wf_strmap_init(&c->cancelled);
  wf_strmap_init(&c->units);
  c->units_sweep_at = INT64_MAX;
  /* the coordinator keeps every member's request per entry: at most 64 MiB
   * of them (a smaller cache than the members' only costs RESENDs) */
  uint32_t cap = wf_cache_capacity(set);
  size_t fit = ((size_t)64 << 20) / ((size_t)size * sizeof(wf_request_msg));
  if (cap > fit) cap = fit > 0 ? (uint32_t)fit : 1;
  c->cache = wf_cache_create(cap, block_release);
  *out = c;
  return WEFT_OK;
}

void wf_coord_destroy(wf_coord *c) {
  if (!c) return;
  for (size_t i = 0; i < c->table.cap; i++) {
    wf_strmap_entry *s = &c->table.slots[i];
    if (s->key && !s->tomb) entry_free(c, s->val);
  }
  wf_strmap_free(&c->table);
  wf_cd_cancelled_free(c);
  for (size_t i = 0; i < c->nready; i++) wf_cd_ready_free(&c->ready[i]);
  wf_cd_units_free(c);
  wf_cache_destroy(c->cache); /* its blocks go to the free list */
  while (c->free_entries) {
    entry *e = c->free_entries;
    c->free_entries = e->next_free;
    free(e);
  }
  while (c->free_blocks) {
    rblock *b = c->free_blocks;
    c->free_blocks = b->next_free;
    free(b);
  }
  free(c->ready);
  free(c->scratch);
  free(c->departed);
  free(c->joined);
  free(c);
}

/* ------------------------------------------------------------------ responses */
void wf_cd_ready_free(ready *q) {
  wf_response_msg_free(&q->resp);
  free(q->name);
  wf_cd_block_unpin(q->pay);
}

/* Appends q to the ready responses (names and seq set at take time); takes
 * q's arrays, name and pin (freed, loudly, when out of memory). */
void wf_cd_push(wf_coord *c, ready *q) {
  if (c->nready == c->cap) {
    size_t ncap = c->cap ? c->cap * 2 : 64;
    ready *n = realloc(c->ready, ncap * sizeof *n);
    if (n) {
      c->ready = n;
      c->cap = ncap;
    }
  }
  if (c->nready == c->cap) {
    WF_WARN(WF_SUB_COORD, "out of memory queueing the response for '%s'", q->name);
    wf_cd_ready_free(q);
    return;
  }
  if (!c->nready) c->first_ready_ns = wf_cd_now(c);
  if (q->fusable) c->nready_fusable++;
  c->ready[c->nready++] = *q;
}

/* A response for name: takes resp's arrays and the pin on pay. m may be
 * NULL (errors, joins: never fused, priority 0). unit: the grouped op's
 * tensor count (coord_unit.c holds its responses until all are in). */
static void emit(wf_coord *c, wf_response_msg *resp, const char *name, const meta *m, rblock *pay, uint32_t slot,
                 uint32_t unit) {
  ready q;
  memset(&q, 0, sizeof q);
  const meta none = {0, 0, 0, 0, 1.0, 1.0, 0, 0};
  q.resp = *resp;
  q.resp.names = NULL;
  q.resp.nnames = 0;
  q.name = strdup(name);
  q.m = m ? *m : none;
  q.pay = pay;
  q.slot = slot;
  q.fusable = m && resp->type == WF_RESP_OK && fusable_coll(resp->coll);
  if (!q.name) {
    WF_WARN(WF_SUB_COORD, "out of memory queueing the response for '%s'", name);
    wf_cd_ready_free(&q);
    return;
  }
  if (!wf_cd_unit_take(c, &q, unit)) wf_cd_push(c, &q);
}

/* An ERROR response for coll with status st and message msg. */
static wf_response_msg error_resp(uint8_t coll, weft_status st, const char *msg) {
  wf_response_msg resp;
  memset(&resp, 0, sizeof resp);
  resp.type = WF_RESP_ERROR;
  resp.coll = coll;
  resp.status = st;
  resp.error = strdup(msg);
  return resp;
}

void wf_cd_emit_error(wf_coord *c, uint8_t coll, const char *name, weft_status st, const char *msg, uint32_t unit) {
  wf_response_msg resp = error_resp(coll, st, msg);
  emit(c, &resp, name, NULL, NULL, UINT32_MAX, unit);
}

void wf_cd_fail_alone(wf_coord *c, uint8_t coll, const char *name, weft_status st, const char *msg, uint32_t unit) {
  wf_cd_unit_break(c, name, unit);
  wf_cd_emit_error(c, coll, name, st, msg, 0);
}

void wf_cd_emit_error_without(wf_coord *c, uint8_t coll, const char *name, weft_status st, const char *msg,
                              const uint8_t *without) {
  wf_response_msg resp = error_resp(coll, st, msg);
  if ((resp.sizes = malloc(sizeof(int64_t) * (size_t)c->size)))
    for (int r = 0; r < c->size; r++)
      if (without[r]) resp.sizes[resp.nsizes++] = r;
  if (!resp.nsizes) {
    free(resp.sizes);
    resp.sizes = NULL;
  }
  emit(c, &resp, name, NULL, NULL, UINT32_MAX, 0);
}

void wf_cd_fail_missing(wf_coord *c, const entry *e, weft_status st, const char *msg) {
  uint32_t unit = wf_cd_entry_unit(c, e);
  wf_cd_unit_break(c, e->name, unit);
  wf_response_msg resp = error_resp(wf_cd_entry_coll(c, e), st, msg);
  /* the ranks it was decided without (joined ones stand in for theirs):
   * a request of theirs still on its way is not answered by it */
  if ((resp.sizes = malloc(sizeof(int64_t) * (size_t)c->size)))
    for (int r = 0; r < c->size; r++)
      if (!e->b->have[r] && !c->joined[r]) resp.sizes[resp.nsizes++] = r;
  if (!resp.nsizes) {
    free(resp.sizes);
    resp.sizes = NULL;
  }
  emit(c, &resp, e->name, NULL, NULL, UINT32_MAX, 0);
}

/* Is every request of e the one stored at the name's last negotiation
 * (the hit block), with the same ranks joined? References are by
 * construction; requests that came in full are compared. */
static int as_before(const wf_coord *c, const entry *e) {
  const rblock *h = e->hit;
  if (!h || !h->known || memcmp(e->b->have, h->have, (size_t)c->size)) return 0;
  if (e->nhits == e->count) return 1;
  for (int r = 0; r < c->size; r++)
    if (e->b->have[r] && !e->b->via[r] && !wf_req_same(&e->b->reqs[r], &h->reqs[r])) return 0;
  return 1;
}

/* Deep-copies the hit block's requests that e only referred to into e's
 * own block (it becomes the name's new payload). 0, or -1 out of memory. */
static int materialize(wf_coord *c, entry *e) {
  for (int r = 0; r < c->size; r++) {
    if (!e->b->via[r]) continue;
    wf_request_msg *d = &e->b->reqs[r];
    *d = e->hit->reqs[r];
    d->splits = NULL;
    e->b->via[r] = 0;
    if (d->nsplits) {
      d->splits = malloc(sizeof(int64_t) * d->nsplits);
      if (!d->splits) {
        e->b->have[r] = 0; /* nothing owned to free */
        return -1;
      }
      memcpy(d->splits, e->hit->reqs[r].splits, sizeof(int64_t) * d->nsplits);
    }
  }
  return 0;
}

/* Validates the entry (ranks that joined stand in with the first request
 * present: they take part with the operation's identity) and emits its
 * response; frees the entry. */
static void finish(wf_coord *c, entry *e) {
  const char *name = e->name;
  const wf_request_msg **reqs = c->scratch, *q = NULL;
  for (int r = 0; r < c->size && !q; r++)
    if (e->b->have[r]) q = req_of(e, r);
  if (as_before(c, e)) {
    /* every request is the one negotiated last time: so is the response */
    rblock *h = e->hit;
    wf_response_msg resp;
    memset(&resp, 0, sizeof resp);
    resp.type = WF_RESP_OK;
    resp.coll = q->coll;
    if (h->nsizes && (resp.sizes = malloc(sizeof(int64_t) * h->nsizes))) {
      memcpy(resp.sizes, h->sizes, sizeof(int64_t) * h->nsizes);
      resp.nsizes = h->nsizes;
    }
    if (h->nsizes && !resp.sizes) {
      wf_cd_fail_alone(c, q->coll, name, WEFT_ERR_NO_MEMORY, "out of memory at the coordinator", q->unit);
    } else {
      e->hit = NULL; /* its pin goes to the response */
      emit(c, &resp, name, &h->m, h, e->slot, q->unit);
    }
    wf_cd_entry_drop(c, e);
    return;
  }
  wf_response_msg resp;
  memset(&resp, 0, sizeof resp);
  char err[WF_ERRMSG_MAX];
  for (int r = 0; r < c->size; r++) reqs[r] = e->b->have[r] ? req_of(e, r) : q;
  weft_status st = wf_validate(reqs, c->size, c->ranks, &resp, err, sizeof err);
  if (st != WEFT_OK) {
    free(resp.sizes);
    WF_INFO(WF_SUB_COORD, "%s", err);
    wf_cd_emit_error(c, q->coll, name, st, err, q->unit);
    wf_cd_entry_drop(c, e);
    return;
  }
  resp.type = WF_RESP_OK;
  resp.coll = q->coll;
  meta m = {q->priority, weft_dtype_size(q->dtype), q->dtype, q->reduce_op, q->prescale, q->postscale, 1,
            q->device >= 0};
  for (int d = 0; d < q->ndim; d++) m.elems *= q->shape[d];
  m.bytes *= (uint64_t)m.elems;
  if (q->coll == WF_COLL_ALLGATHER && q->ndim >= 1) { /* fusion holds every rank's rows */
    uint64_t rows = 0, row = weft_dtype_size(q->dtype);
    for (int d = 1; d < q->ndim; d++) row *= (uint64_t)q->shape[d];
    for (uint32_t r = 0; r < resp.nsizes; r++) rows += (uint64_t)resp.sizes[r];
    m.bytes = rows * row;
  }
  for (int r = 0; r < c->size; r++)
    if (e->b->have[r] && reqs[r]->priority > m.priority) m.priority = reqs[r]->priority;
  rblock *pay = NULL;
  if (c->cache && wf_cache_assigns(&resp) && materialize(c, e) == 0) {
    /* the requests become the name's payload, with the response they give */
    pay = e->b;
    e->b = NULL;
    pay->m = m;
    pay->known = 1;
    if (resp.nsizes && (pay->sizes = malloc(sizeof(int64_t) * resp.nsizes))) {
      memcpy(pay->sizes, resp.sizes, sizeof(int64_t) * resp.nsizes);
      pay->nsizes = resp.nsizes;
    }
    if (resp.nsizes && !pay->sizes) pay->known = 0;
  }
  emit(c, &resp, name, &m, pay, e->slot, q->unit);
  wf_cd_entry_drop(c, e); /* e->b is NULL if it became the payload */
}

/* Completes the entry if every rank has submitted it or joined. Returns 1
 * if the entry is gone. */
static int try_complete(wf_coord *c, entry *e) {
  if (e->count == c->size) {
    finish(c, e);
    return 1;
  }
  int waiting = 0;
  for (int r = 0; r < c->size; r++) waiting += !e->b->have[r] && !c->joined[r];
  if (waiting || !c->njoined) return 0;
  uint8_t coll = wf_cd_entry_coll(c, e);
  if (coll == WF_COLL_ALLREDUCE || coll == WF_COLL_BARRIER) {
    finish(c, e);
    return 1;
  }
  char list[512], msg[WF_ERRMSG_MAX];
  size_t k = 0;
  for (int r = 0; r < c->size && k < sizeof list; r++)
    if (c->joined[r] && !e->b->have[r]) k += (size_t)snprintf(list + k, sizeof list - k, k ? ", %d" : "%d", WR(c, r));
  snprintf(msg, sizeof msg,
           "tensor '%s': %s is not possible while rank(s) %s have joined (weft_join): only allreduce and barrier can "
           "complete without them",
           e->name, wf_coll_name(coll), list);
  wf_cd_emit_error(c, coll, e->name, WEFT_ERR_INVALID_ARGUMENT, msg, wf_cd_entry_unit(c, e));
  wf_cd_entry_drop(c, e);
  return 1;
}

/* rank called weft_join: it takes part in the others' allreduces with the
 * identity. When every rank has joined, the join completes everywhere with
 * the rank that joined last. */
static void add_join(wf_coord *c, int rank, const wf_request_msg *m) {
  if (c->joined[rank]) {
    char msg[256];
    snprintf(msg, sizeof msg, "rank %d joined twice", WR(c, rank));
    wf_cd_emit_error(c, WF_COLL_JOIN, m->name, WEFT_ERR_PROTOCOL, msg, 0);
    return;
  }
  c->joined[rank] = 1;
  c->njoined++;
  c->last_joined = rank;
  snprintf(c->join_name, sizeof c->join_name, "%s", m->name);
  if (c->njoined == c->size) {
    /* what grouped ops hold goes out first, and the take orders the JOIN
     * after it: those responses may count on the joined ranks standing in */
    wf_cd_units_flush(c);
    wf_response_msg resp;
    memset(&resp, 0, sizeof resp);
    resp.type = WF_RESP_OK;
    resp.coll = WF_COLL_JOIN;
    resp.sizes = malloc(sizeof(int64_t));
    if (resp.sizes) {
      resp.sizes[0] = c->last_joined; /* a group rank, like every rank the API returns for a group */
      resp.nsizes = 1;
    }
    emit(c, &resp, c->join_name, NULL, NULL, UINT32_MAX, 0);
    memset(c->joined, 0, (size_t)c->size);
    c->njoined = 0;
    return;
  }
  /* entries that only waited for this rank can now complete (or fail);
   * completing one only tombstones its slot, so the scan stays valid */
  for (size_t i = 0; i < c->table.cap; i++) {
    wf_strmap_entry *s = &c->table.slots[i];
    if (s->key && !s->tomb) try_complete(c, s->val);
  }
}

static void fail_departed(wf_coord *c, entry *e, int gone) {
  char msg[512];
  snprintf(msg, sizeof msg, "tensor '%s': rank %d has shut down (weft_finalize) without submitting it", e->name,
           WR(c, gone));
  wf_cd_fail_missing(c, e, WEFT_ERR_PEER_LOST, msg);
  wf_cd_entry_drop(c, e);
}

/* name's entry, created if new (NULL: out of memory, reported). hit: the
 * name's cached block when a reference named it (slot: its slot). */
static entry *entry_for(wf_coord *c, const char *name, uint8_t coll, rblock *hit, uint32_t slot) {
  entry *e = c->free_entries; /* the candidate holds the key: one probe finds or inserts */
  if (e) {
    c->free_entries = e->next_free;
    c->nfree_entries--;
  } else if (!(e = malloc(sizeof *e))) {
    wf_cd_emit_error(c, coll, name, WEFT_ERR_NO_MEMORY, "out of memory at the coordinator", 0);
    return NULL;
  }
  size_t len = strlen(name); /* 1..WF_NAME_MAX: checked by the API and the decoder */
  if (len >= sizeof e->name) len = sizeof e->name - 1;
  memcpy(e->name, name, len);
  e->name[len] = '\0';
  void *found = NULL;
  int rc = wf_strmap_get_or_insert(&c->table, e->name, e, 1, &found);
  if (rc != 0) {
    e->next_free = c->free_entries; /* not in use: back to the list */
    c->free_entries = e;
    c->nfree_entries++;
    if (rc < 0) {
      wf_cd_emit_error(c, coll, name, WEFT_ERR_NO_MEMORY, "out of memory at the coordinator", 0);
      return NULL;
    }
    e = found;
  } else {
    e->b = block_get(c);
    if (!e->b) {
      wf_strmap_del(&c->table, e->name);
      free(e);
      wf_cd_emit_error(c, coll, name, WEFT_ERR_NO_MEMORY, "out of memory at the coordinator", 0);
      return NULL;
    }
    e->hit = NULL;
    e->count = e->nhits = 0;
    e->coll = coll;
    e->slot = UINT32_MAX;
    if (fusable_coll(coll)) c->npending_fusable++;
    e->first_ns = wf_cd_now(c);
    e->deadline = e->first_ns + (int64_t)(c->timeout * 1e9);
    e->next_warn = c->stall_check > 0 ? e->first_ns + (int64_t)(c->stall_check * 1e9) : INT64_MAX;
    if (e->deadline < c->next_check) c->next_check = e->deadline;
    if (e->next_warn < c->next_check) c->next_check = e->next_warn;
  }
  if (hit && !e->hit && hit->known) { /* what this name negotiated last time, to compare with */
    e->hit = hit;
    e->slot = slot;
    hit->refs++;
  }
  return e;
}

/* Records rank's request in e: m (copied), or the hit block's own if src
 * (where m is) is e->hit. */
static void add_to(wf_coord *c, entry *e, int rank, const wf_request_msg *m, const rblock *src) {
  if (e->b->have[rank]) {
    char msg[512];
    snprintf(msg, sizeof msg, "tensor '%s': rank %d submitted it twice while it was in flight", e->name, WR(c, rank));
    wf_cd_fail_alone(c, m->coll, e->name, WEFT_ERR_PROTOCOL, msg, m->unit);
    wf_cd_entry_drop(c, e);
    return;
  }
  if (src && src == e->hit) {
    e->b->via[rank] = 1; /* the stored request: refer to it */
    e->nhits++;
  } else {
    wf_request_msg *d = &e->b->reqs[rank];
    *d = *m;
    d->splits = NULL;
    if (m->nsplits) {
      d->splits = malloc(sizeof(int64_t) * m->nsplits);
      if (!d->splits) {
        wf_cd_fail_alone(c, m->coll, e->name, WEFT_ERR_NO_MEMORY, "out of memory at the coordinator",
                         m->unit);
        wf_cd_entry_drop(c, e);
        return;
      }
      memcpy(d->splits, m->splits, sizeof(int64_t) * m->nsplits);
    }
  }
  e->b->have[rank] = 1;
  e->count++;
  if (try_complete(c, e)) return;
  if (fusable_coll(e->coll)) note_add(c, e);
  for (int r = 0; r < c->size; r++)
    if (c->departed[r] && !e->b->have[r]) {
      fail_departed(c, e, r);
      return;
    }
}

void wf_coord_add(wf_coord *c, int rank, const wf_request_msg *m) {
  if (m->coll == WF_COLL_JOIN) {
    add_join(c, rank, m);
    return;
  }
  if (wf_cd_cancelled_take(c, rank, m->name, m->coll)) return;
  entry *e = entry_for(c, m->name, m->coll, NULL, UINT32_MAX);
  if (e) add_to(c, e, rank, m, NULL);
}

int wf_coord_add_cached(wf_coord *c, int rank, uint32_t id, uint64_t epoch, const char **name) {
  const char *n = NULL;
  rblock *h = c->cache && rank >= 0 && rank < c->size ? wf_cache_by_id(c->cache, id, epoch, &n) : NULL;
  if (!h || !h->have[rank]) return 0;
  *name = n;
  if (wf_cd_cancelled_take(c, rank, n, h->reqs[rank].coll)) return 1;
  entry *e = entry_for(c, n, h->reqs[rank].coll, h, id);
  /* normally e->hit == h; an entry made before h was assigned compares */
  if (e) add_to(c, e, rank, &h->reqs[rank], h);
  return 1;
}

void wf_coord_rank_departed(wf_coord *c, int rank) {
  c->departed[rank] = 1;
  for (size_t i = 0; i < c->table.cap; i++) {
    wf_strmap_entry *s = &c->table.slots[i];
    if (!s->key || s->tomb || ((entry *)s->val)->b->have[rank]) continue;
    fail_departed(c, s->val, rank);
  }
}


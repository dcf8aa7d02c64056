/* resolve.c - the group leader's table (resolve.h): keyed groups by key,
 * groups by members by their list; the rules and messages are resolve.h's.
 * A world has few groups, so entries live in one array scanned linearly. */
#include "negotiate/resolve.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GATHER, DONE, FAILED };

typedef struct entry {
  uint8_t kind;
  int32_t key, size, device;
  uint32_t *list;    /* LISTED: the members (size entries) */
  int *joined;       /* ascending world ranks that have joined */
  int njoined;
  int state;
  int64_t deadline;
  uint32_t id;       /* KEYED, DONE */
  weft_status fst;   /* KEYED, FAILED: the final answer */
  char *fmsg;
} entry;

struct wf_resolver {
  int world_size;
  int64_t timeout_ns;
  double timeout_s;
  entry **v;
  size_t n, cap;
};

wf_resolver *wf_resolver_create(int world_size, double timeout_seconds) {
  wf_resolver *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->world_size = world_size;
  r->timeout_s = timeout_seconds;
  r->timeout_ns = (int64_t)(timeout_seconds * 1e9);
  return r;
}

static void entry_free(entry *e) {
  if (!e) return;
  free(e->list);
  free(e->joined);
  free(e->fmsg);
  free(e);
}

void wf_resolver_destroy(wf_resolver *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) entry_free(r->v[i]);
  free(r->v);
  free(r);
}

static void drop(wf_resolver *r, entry *e) {
  for (size_t i = 0; i < r->n; i++)
    if (r->v[i] == e) {
      r->v[i] = r->v[--r->n];
      break;
    }
  entry_free(e);
}

/* ------------------------------------------------------------ replies */
void wf_resolve_replies_clear(wf_resolve_replies *out) {
  for (size_t i = 0; i < out->n; i++) wf_group_msg_free(&out->v[i].msg);
  out->n = 0;
}

void wf_resolve_replies_free(wf_resolve_replies *out) {
  wf_resolve_replies_clear(out);
  free(out->v);
  memset(out, 0, sizeof *out);
}

/* Appends a reply about e to rank to: OK (st 0, with the members or the
 * list) or the error msg. -1: out of memory. */
static int reply(wf_resolve_replies *out, int to, const entry *e, weft_status st, const char *msg) {
  if (out->n == out->cap) {
    size_t cap = out->cap ? out->cap * 2 : 8;
    wf_resolve_reply *v = realloc(out->v, cap * sizeof *v);
    if (!v) return -1;
    out->v = v;
    out->cap = cap;
  }
  wf_group_msg m = {.kind = e->kind, .key = e->key, .size = e->size, .device = e->device, .status = st};
  int keyed = e->kind == WF_GROUP_KEYED;
  if (!keyed || st == WEFT_OK) {
    m.nranks = (uint32_t)e->size;
    m.ranks = malloc(sizeof(uint32_t) * m.nranks);
    if (!m.ranks) return -1;
    for (uint32_t i = 0; i < m.nranks; i++) m.ranks[i] = keyed ? (uint32_t)e->joined[i] : e->list[i];
  }
  if (keyed && st == WEFT_OK) m.id = e->id;
  if (st != WEFT_OK && !(m.error = strdup(msg))) {
    free(m.ranks);
    return -1;
  }
  out->v[out->n++] = (wf_resolve_reply){to, m};
  return 0;
}

/* Replies to every rank that joined e (and extra, if >= 0). */
static int reply_all(wf_resolve_replies *out, const entry *e, int extra, weft_status st, const char *msg) {
  for (int i = 0; i < e->njoined; i++)
    if (reply(out, e->joined[i], e, st, msg)) return -1;
  return extra >= 0 ? reply(out, extra, e, st, msg) : 0;
}

/* ------------------------------------------------------------ text */
/* "0, 2, 5" (at most 32 ranks, then ", ..."). */
static void ranks_text(char *out, size_t len, const int *ranks, const uint32_t *uranks, int n) {
  size_t o = 0;
  out[0] = '\0';
  for (int i = 0; i < n && o + 16 < len; i++) {
    if (i == 32) {
      snprintf(out + o, len - o, ", ...");
      return;
    }
    int w = snprintf(out + o, len - o, "%s%d", i ? ", " : "", ranks ? ranks[i] : (int)uranks[i]);
    if (w > 0) o += (size_t)w;
  }
}

static const char *device_name(int32_t d) {
  return d == WEFT_DEVICE_CPU ? "cpu" : d == WEFT_DEVICE_KIND_CUDA ? "cuda" : d == WEFT_DEVICE_KIND_SIM ? "sim" : "?";
}

/* e's own name in messages: "group 7" or "the group of ranks 0, 1, 2". */
static void entry_name(char *out, size_t len, const entry *e) {
  if (e->kind == WF_GROUP_KEYED) {
    snprintf(out, len, "group %d", e->key);
  } else {
    char l[256];
    ranks_text(l, sizeof l, NULL, e->list, e->size);
    snprintf(out, len, "the group of ranks %s", l);
  }
}

static int has(const int *v, int n, int x) {
  for (int i = 0; i < n; i++)
    if (v[i] == x) return 1;
  return 0;
}

static int in_list(const entry *e, int x) {
  for (int i = 0; i < e->size; i++)
    if (e->list[i] == (uint32_t)x) return 1;
  return 0;
}

/* Adds rank to e->joined, keeping it ascending. -1: out of memory. */
static int add_rank(entry *e, int rank) {
  int *j = realloc(e->joined, sizeof(int) * (size_t)(e->njoined + 1));
  if (!j) return -1;
  e->joined = j;
  int i = e->njoined++;
  while (i > 0 && j[i - 1] > rank) {
    j[i] = j[i - 1];
    i--;
  }
  j[i] = rank;
  return 0;
}

static entry *new_entry(wf_resolver *r, const wf_group_msg *m, int64_t now) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 8;
    entry **v = realloc(r->v, cap * sizeof *v);
    if (!v) return NULL;
    r->v = v;
    r->cap = cap;
  }
  entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->kind = m->kind;
  e->key = m->key;
  e->size = m->size;
  e->device = m->device;
  e->state = GATHER;
  e->deadline = now + r->timeout_ns;
  if (m->kind == WF_GROUP_LISTED) {
    e->list = malloc(sizeof(uint32_t) * (size_t)m->size);
    if (!e->list) {
      free(e);
      return NULL;
    }
    memcpy(e->list, m->ranks, sizeof(uint32_t) * (size_t)m->size);
  }
  r->v[r->n++] = e;
  return e;
}

/* A keyed group's id: a hash of its key in the 24 bits data tags carry,
 * moved on past the ids of the leader's other keyed groups. */
static uint32_t key_id(const wf_resolver *r, int32_t key) {
  uint64_t h = 1469598103934665603ull;
  const char *salt = "weft.key:";
  for (const char *s = salt; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  for (int i = 0; i < 4; i++) h = (h ^ (uint8_t)((uint32_t)key >> (8 * i))) * 1099511628211ull;
  uint32_t id = (uint32_t)(h ^ (h >> 24) ^ (h >> 48)) & 0xffffffu;
  for (;;) {
    if (!id) id = 1;
    int taken = 0;
    for (size_t i = 0; i < r->n && !taken; i++)
      taken = r->v[i]->kind == WF_GROUP_KEYED && r->v[i]->state == DONE && r->v[i]->id == id;
    if (!taken) return id;
    id = (id + 1) & 0xffffffu;
  }
}

/* Makes e FAILED (keyed: kept, the final answer) with st/msg and tells its
 * joiners and extra. */
static int fail_keyed(entry *e, int extra, weft_status st, const char *msg, wf_resolve_replies *out) {
  if (reply_all(out, e, extra, st, msg)) return -1;
  e->state = FAILED;
  e->fst = st;
  free(e->fmsg);
  e->fmsg = strdup(msg);
  return e->fmsg ? 0 : -1;
}

/* ------------------------------------------------------------ keyed */
static int join_keyed(wf_resolver *r, int rank, const wf_group_msg *m, int64_t now, wf_resolve_replies *out) {
  entry *e = NULL;
  for (size_t i = 0; i < r->n && !e; i++)
    if (r->v[i]->kind == WF_GROUP_KEYED && r->v[i]->key == m->key) e = r->v[i];
  if (!e && !(e = new_entry(r, m, now))) return -1;
  char msg[1024], have[256];
  ranks_text(have, sizeof have, e->joined, NULL, e->njoined);
  if (e->state == FAILED) return reply(out, rank, e, e->fst, e->fmsg);
  int member = has(e->joined, e->njoined, rank);
  if (e->state == DONE) {
    if (!member) {
      snprintf(msg, sizeof msg, "group %d is complete: its %d members are ranks %s; rank %d cannot join it", e->key,
               e->size, have, rank);
      return reply(out, rank, e, WEFT_ERR_MISMATCH, msg);
    }
    if (m->size == e->size && m->device == e->device) return reply(out, rank, e, WEFT_OK, NULL);
    snprintf(msg, sizeof msg, "group %d: rank %d resolves it again with size %d and device type %s; it has size %d "
             "and device type %s (ranks %s)", e->key, rank, m->size, device_name(m->device), e->size,
             device_name(e->device), have);
    return reply(out, rank, e, WEFT_ERR_MISMATCH, msg);
  }
  if (member) {
    snprintf(msg, sizeof msg, "group %d: rank %d joined twice (joined: ranks %s)", e->key, rank, have);
    return reply(out, rank, e, WEFT_ERR_MISMATCH, msg);
  }
  int first = e->njoined ? e->joined[0] : rank;
  if (m->size != e->size) {
    snprintf(msg, sizeof msg, "group %d: rank %d gives group size %d, rank %d gave %d (joined: ranks %s)", e->key, rank,
             m->size, first, e->size, have);
    return fail_keyed(e, rank, WEFT_ERR_MISMATCH, msg, out);
  }
  if (m->device != e->device) {
    snprintf(msg, sizeof msg, "group %d: rank %d gives device type %s, rank %d gave %s (joined: ranks %s)", e->key,
             rank, device_name(m->device), first, device_name(e->device), have);
    return fail_keyed(e, rank, WEFT_ERR_MISMATCH, msg, out);
  }
  if (add_rank(e, rank)) return -1;
  if (e->njoined < e->size) return 0;
  e->id = key_id(r, e->key);
  e->state = DONE;
  return reply_all(out, e, -1, WEFT_OK, NULL);
}

/* ------------------------------------------------------------ listed */
/* The listed entry still gathering that rank has joined, other than not. */
static entry *waiting_in(const wf_resolver *r, int rank, const entry *not) {
  for (size_t i = 0; i < r->n; i++) {
    entry *f = r->v[i];
    if (f != not && f->kind == WF_GROUP_LISTED && f->state == GATHER && has(f->joined, f->njoined, rank)) return f;
  }
  return NULL;
}

static int same_list(const entry *f, const wf_group_msg *m) {
  return f->kind == WF_GROUP_LISTED && f->size == m->size &&
         !memcmp(f->list, m->ranks, sizeof(uint32_t) * (size_t)m->size);
}

/* A failed list stays (FAILED) until each member had the answer once, or
 * until its deadline: a member whose JOIN was still on its way when the
 * list failed gets the same answer instead of starting over alone. */
static int fail_listed(wf_resolver *r, entry *e, const char *msg, int64_t now, wf_resolve_replies *out) {
  if (reply_all(out, e, -1, WEFT_ERR_MISMATCH, msg)) return -1;
  e->state = FAILED;
  e->fst = WEFT_ERR_MISMATCH;
  e->deadline = now + r->timeout_ns;
  free(e->fmsg);
  return (e->fmsg = strdup(msg)) ? 0 : -1;
}

static int join_listed(wf_resolver *r, int rank, const wf_group_msg *m, int64_t now, wf_resolve_replies *out) {
  for (size_t i = 0; i < r->n; i++) {
    entry *f = r->v[i];
    if (f->state != FAILED || !same_list(f, m) || has(f->joined, f->njoined, rank)) continue;
    if (reply(out, rank, f, f->fst, f->fmsg) || add_rank(f, rank)) return -1;
    if (f->njoined == f->size) drop(r, f);
    return 0;
  }
  entry *e = NULL;
  for (size_t i = 0; i < r->n && !e; i++)
    if (r->v[i]->state == GATHER && same_list(r->v[i], m)) e = r->v[i];
  if (!e && !(e = new_entry(r, m, now))) return -1;
  char name[300], msg[1536];
  entry_name(name, sizeof name, e);
  if (has(e->joined, e->njoined, rank)) {
    snprintf(msg, sizeof msg, "rank %d is already creating %s (one creation of a member list at a time)", rank, name);
    return reply(out, rank, e, WEFT_ERR_INVALID_ARGUMENT, msg);
  }
  if (add_rank(e, rank)) return -1;
  /* rank now waits in e; a rank q waiting in another list f that names rank,
   * while e names q: neither can ever arrive */
  for (size_t i = 0; i < r->n; i++) {
    entry *f = r->v[i];
    if (f == e || f->kind != WF_GROUP_LISTED || f->state != GATHER || !in_list(f, rank) ||
        has(f->joined, f->njoined, rank))
      continue;
    for (int k = 0; k < f->njoined; k++) {
      int q = f->joined[k];
      if (!in_list(e, q) || has(e->joined, e->njoined, q)) continue;
      char l1[256], l2[256], j1[256], j2[256];
      ranks_text(l1, sizeof l1, NULL, e->list, e->size);
      ranks_text(l2, sizeof l2, NULL, f->list, f->size);
      ranks_text(j1, sizeof j1, e->joined, NULL, e->njoined);
      ranks_text(j2, sizeof j2, f->joined, NULL, f->njoined);
      snprintf(msg, sizeof msg, "ranks disagree on the members: rank %d lists ranks %s (so do "
               "ranks %s), rank %d lists ranks %s (so do ranks %s); each waits for the other", rank, l1, j1, q, l2,
               j2);
      return fail_listed(r, e, msg, now, out) || fail_listed(r, f, msg, now, out) ? -1 : 0;
    }
  }
  if (e->njoined < e->size) return 0;
  if (reply_all(out, e, -1, WEFT_OK, NULL)) return -1;
  drop(r, e);
  return 0;
}

weft_status wf_resolver_join(wf_resolver *r, int rank, const wf_group_msg *m, int64_t now, wf_resolve_replies *out) {
  int rc = m->kind == WF_GROUP_KEYED ? join_keyed(r, rank, m, now, out) : join_listed(r, rank, m, now, out);
  return rc ? WEFT_ERR_NO_MEMORY : WEFT_OK;
}

weft_status wf_resolver_tick(wf_resolver *r, int64_t now, wf_resolve_replies *out) {
  for (size_t i = 0; i < r->n;) {
    entry *e = r->v[i];
    if (e->kind == WF_GROUP_LISTED && e->state == FAILED && e->deadline <= now) {
      drop(r, e); /* the members that never came have had their time */
      continue;
    }
    if (e->state != GATHER || e->deadline > now) {
      i++;
      continue;
    }
    char name[300], have[256], msg[1024];
    entry_name(name, sizeof name, e);
    ranks_text(have, sizeof have, e->joined, NULL, e->njoined);
    int o = snprintf(msg, sizeof msg, "%s: waiting for %d members, have rank%s %s (deadline %g s)", name, e->size,
                     e->njoined == 1 ? "" : "s", have, r->timeout_s);
    if (e->kind == WF_GROUP_KEYED) {
      if (fail_keyed(e, -1, WEFT_ERR_TIMEOUT, msg, out)) return WEFT_ERR_NO_MEMORY;
      i++;
      continue;
    }
    /* the missing members that wait in another list */
    for (int k = 0; k < e->size && o > 0 && (size_t)o < sizeof msg; k++) {
      int q = (int)e->list[k];
      entry *f = has(e->joined, e->njoined, q) ? NULL : waiting_in(r, q, e);
      if (!f) continue;
      char other[300];
      entry_name(other, sizeof other, f);
      o += snprintf(msg + o, sizeof msg - (size_t)o, "; rank %d is creating %s instead", q, other);
    }
    if (reply_all(out, e, -1, WEFT_ERR_TIMEOUT, msg)) return WEFT_ERR_NO_MEMORY;
    drop(r, e); /* the last entry moved to i: look at it next */
  }
  return WEFT_OK;
}

int64_t wf_resolver_next_deadline(const wf_resolver *r) {
  int64_t d = INT64_MAX;
  for (size_t i = 0; r && i < r->n; i++)
    if ((r->v[i]->state == GATHER || (r->v[i]->kind == WF_GROUP_LISTED && r->v[i]->state == FAILED)) &&
        r->v[i]->deadline < d)
      d = r->v[i]->deadline;
  return d;
}

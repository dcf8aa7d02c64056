/* coord_cancel.c - withdrawing a request still negotiating (coord.h's
 * wf_coord_withdraw): the name fails with WEFT_ERR_CANCELLED (or TIMEOUT:
 * the request's own deadline) for the ranks that submitted it, and stays owed to the others, each of which gets the
 * same answer when its request comes, once (then the name is free again
 * for it), until the coordinator's timeout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/coord_impl.h"

typedef struct owed {
  uint8_t *rank;   /* per group rank: 1 while its request has not come */
  int64_t until;   /* forgotten after this */
  weft_status st;  /* CANCELLED or TIMEOUT */
  char msg[WF_ERRMSG_MAX];
} owed;

static void owed_drop(wf_coord *c, const char *name, owed *o) {
  wf_strmap_del(&c->cancelled, name);
  free(o->rank);
  free(o);
}

int wf_coord_withdraw(wf_coord *c, int rank, const char *name, int timeout, double seconds) {
  if (rank < 0 || rank >= c->size || !name) return 0;
  entry *e = wf_strmap_get(&c->table, name);
  if (!e || !e->b->have[rank] || wf_cd_entry_unit(c, e)) return 0;
  char msg[WF_ERRMSG_MAX];
  weft_status st = timeout ? WEFT_ERR_TIMEOUT : WEFT_ERR_CANCELLED;
  if (timeout) {
    int o = snprintf(msg, sizeof msg, "tensor '%s': timed out after %g s (the timeout of rank %d's request) waiting for "
                     "rank(s) ", name, seconds, WR(c, rank));
    for (int r = 0, first = 1; r < c->size && o > 0 && (size_t)o < sizeof msg - 16; r++)
      if (!e->b->have[r] && !c->joined[r]) {
        o += snprintf(msg + o, sizeof msg - (size_t)o, "%s%d", first ? "" : ", ", WR(c, r));
        first = 0;
      }
    if (o > 0 && (size_t)o < sizeof msg - 16) snprintf(msg + o, sizeof msg - (size_t)o, " to submit it");
  } else {
    snprintf(msg, sizeof msg, "tensor '%s': cancelled by rank %d", name, WR(c, rank));
  }
  /* the ranks whose request has not come are owed the answer */
  owed *o = calloc(1, sizeof *o);
  int nowed = 0;
  if (o && (o->rank = calloc((size_t)c->size, 1))) {
    for (int r = 0; r < c->size; r++)
      if (!e->b->have[r] && !c->joined[r] && !c->departed[r]) o->rank[r] = 1, nowed++;
    o->until = wf_cd_now(c) + (int64_t)(c->timeout * 1e9);
    o->st = st;
    memcpy(o->msg, msg, sizeof msg);
  }
  wf_cd_fail_missing(c, e, st, msg); /* lists the ranks without a request */
  wf_cd_entry_drop(c, e);
  owed *old = wf_strmap_get(&c->cancelled, name);
  if (old) owed_drop(c, name, old);
  if (o && o->rank && nowed && wf_strmap_put(&c->cancelled, name, o) == 0) return 1; /* kept */
  if (o) free(o->rank);
  free(o);
  return 1;
}

int wf_cd_cancelled_take(wf_coord *c, int rank, const char *name, uint8_t coll) {
  if (!c->cancelled.len) return 0;
  owed *o = wf_strmap_get(&c->cancelled, name);
  if (!o) return 0;
  if (wf_cd_now(c) > o->until) {
    owed_drop(c, name, o);
    return 0;
  }
  if (!o->rank[rank]) return 0; /* this rank had the answer: its request is a new one */
  uint8_t *without = malloc((size_t)c->size);
  if (without) {
    for (int r = 0; r < c->size; r++) without[r] = r != rank;
    wf_cd_emit_error_without(c, coll, name, o->st, o->msg, without);
    free(without);
  }
  o->rank[rank] = 0;
  int left = 0;
  for (int r = 0; r < c->size; r++) left |= o->rank[r];
  if (!left) owed_drop(c, name, o);
  return 1;
}

void wf_cd_cancelled_free(wf_coord *c) {
  for (size_t i = 0; i < c->cancelled.cap; i++) {
    wf_strmap_entry *s = &c->cancelled.slots[i];
    if (!s->key || s->tomb) continue;
    owed *o = s->val;
    free(o->rank);
    free(o);
  }
  wf_strmap_free(&c->cancelled);
}

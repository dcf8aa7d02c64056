/* coord_unit.c - grouped ops negotiate as one unit: the coordinator holds
 * the ready responses of a grouped op's tensors until every tensor of it is
 * resolved, then publishes them together, in the op's order (consecutive,
 * so fusion merges the compatible ones), never some before the rest have
 * arrived.
 *
 * A grouped op of n tensors named "op" submits "op.0" .. "op.<n-1>", each
 * request carrying unit = n (validation makes every rank agree on it). A
 * unit is keyed "<n>/<op>": ranks that disagree on n (a mismatch error on
 * the tensors they share) never mix two units. A tensor is resolved when
 * its response is emitted: OK responses wait in the unit; errors (mismatch,
 * timeout, a departed rank) go out at once, and count. The unit is
 * published when n tensors are resolved. A unit holding nothing (errors
 * only: its other tensors may never come, when ranks disagreed on n) is
 * dropped once it has been idle for the coordinator's timeout; one holding
 * responses is resolved by its pending tensors' own timeouts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/coord_impl.h"
#include "util/log.h"
#include "util/time.h"

typedef struct unit {
  uint32_t n, resolved, nheld;
  int64_t touched_ns;
  ready *held; /* n slots; held[i].name == NULL: nothing held for tensor i */
  char key[];  /* "<n>/<op name>" */
} unit;

/* Tensor i of a grouped op of n: name is "<op>.<i>", i < n, in decimal
 * without leading zeros. *oplen gets the length of <op>. */
static int child_index(const char *name, uint32_t n, uint32_t *i, size_t *oplen) {
  const char *dot = strrchr(name, '.');
  if (!dot || !dot[1] || (dot[1] == '0' && dot[2])) return 0;
  uint64_t v = 0;
  for (const char *p = dot + 1; *p; p++) {
    if (*p < '0' || *p > '9' || (v = v * 10 + (uint64_t)(*p - '0')) >= n) return 0;
  }
  *i = (uint32_t)v;
  *oplen = (size_t)(dot - name);
  return 1;
}

static void unit_free(unit *u) {
  for (uint32_t i = 0; i < u->n; i++)
    if (u->held[i].name) {
      wf_response_msg_free(&u->held[i].resp);
      free(u->held[i].name);
      wf_cd_block_unpin(u->held[i].pay);
    }
  free(u->held);
  free(u);
}

static unit *unit_get(wf_coord *c, uint32_t n, const char *op, size_t oplen) {
  char key[WF_NAME_MAX + 16];
  snprintf(key, sizeof key, "%u/%.*s", n, (int)oplen, op);
  unit *u = wf_strmap_get(&c->units, key);
  if (u) return u;
  size_t klen = strlen(key);
  u = calloc(1, sizeof *u + klen + 1);
  if (!u || !(u->held = calloc(n, sizeof *u->held))) {
    free(u);
    return NULL;
  }
  u->n = n;
  memcpy(u->key, key, klen + 1);
  if (wf_strmap_insert(&c->units, u->key, u, 1) != 0) {
    free(u->held);
    free(u);
    return NULL;
  }
  return u;
}

int wf_cd_unit_take(wf_coord *c, ready *q, uint32_t n) {
  uint32_t i;
  size_t oplen;
  if (n < 2 || !child_index(q->name, n, &i, &oplen)) return 0;
  unit *u = unit_get(c, n, q->name, oplen);
  if (!u) {
    WF_WARN(WF_SUB_COORD, "out of memory holding '%s' for its grouped op: published alone", q->name);
    return 0;
  }
  int hold = q->resp.type == WF_RESP_OK && !u->held[i].name;
  if (hold) {
    u->held[i] = *q;
    u->nheld++;
  } else {
    wf_cd_push(c, q); /* an error goes out at once (and a duplicate, which cannot happen, too) */
  }
  u->touched_ns = wf_now_ns();
  if (++u->resolved < u->n) return 1;
  wf_strmap_del_val(&c->units, u->key, u);
  for (uint32_t k = 0; k < u->n; k++)
    if (u->held[k].name) {
      wf_cd_push(c, &u->held[k]);
      u->held[k].name = NULL;
    }
  WF_DEBUG(WF_SUB_COORD, "grouped op '%.*s': its %u tensors published together", (int)oplen, q->name, u->n);
  unit_free(u);
  return 1;
}

void wf_cd_units_sweep(wf_coord *c, int64_t now) {
  for (size_t s = 0; s < c->units.cap; s++) {
    wf_strmap_entry *e = &c->units.slots[s];
    if (!e->key || e->tomb) continue;
    unit *u = e->val;
    if (u->nheld || now - u->touched_ns < (int64_t)(c->timeout * 1e9)) continue;
    wf_strmap_del_val(&c->units, u->key, u);
    unit_free(u);
  }
}

void wf_cd_units_free(wf_coord *c) {
  for (size_t s = 0; s < c->units.cap; s++) {
    wf_strmap_entry *e = &c->units.slots[s];
    if (e->key && !e->tomb) unit_free(e->val);
  }
  wf_strmap_free(&c->units);
}

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
 * its negotiation completes: an OK response waits in the unit; an error
 * found when every rank had sent it (a mismatch) goes out at once and
 * counts. The unit is published when its n tensors are resolved. A tensor
 * that fails without every rank (a timeout, a departed rank) breaks its
 * op: the unit is published as it is, and that tensor is not counted, so
 * no partial unit is left for the next op of the name. A tensor resolved a
 * second time means the unit is left over all the same: it is published as
 * it is and a new one starts. A unit idle for the
 * coordinator's timeout (its other tensors are not coming: ranks disagreed
 * on n) is published as it is too: nothing is held forever. When every
 * rank has joined, no tensor can come: every unit is published as it is,
 * before the join's response. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/coord_impl.h"
#include "util/log.h"
#include "util/time.h"

typedef struct held {
  uint32_t i; /* the tensor's index in its op */
  ready q;
} held;

typedef struct unit {
  uint32_t n, resolved, nheld, cap;
  int64_t touched_ns;
  uint8_t *done; /* n bits: tensor i resolved */
  held *held;    /* the OK responses held, in arrival order (sorted at publish) */
  char key[];    /* "<n>/<op name>" */
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

static int by_index(const void *a, const void *b) {
  uint32_t x = ((const held *)a)->i, y = ((const held *)b)->i;
  return x < y ? -1 : x > y;
}

/* Removes u from the table and publishes what it holds, in the op's order. */
static void publish(wf_coord *c, unit *u) {
  wf_strmap_del_val(&c->units, u->key, u);
  if (u->nheld) qsort(u->held, u->nheld, sizeof *u->held, by_index);
  for (uint32_t k = 0; k < u->nheld; k++) wf_cd_push(c, &u->held[k].q);
  free(u->held);
  free(u->done);
  free(u);
}

static unit *unit_new(const char *key) {
  size_t klen = strlen(key);
  unit *u = calloc(1, sizeof *u + klen + 1);
  if (!u) return NULL;
  memcpy(u->key, key, klen + 1);
  return u;
}

/* name's unit: 0 if name is no tensor of a grouped op of n; else *i, op
 * and key set, *u the unit (NULL: none yet). */
static int unit_of(wf_coord *c, const char *name, uint32_t n, uint32_t *i, char op[WF_NAME_MAX + 1],
                   char key[WF_NAME_MAX + 16], unit **u) {
  size_t oplen;
  if (n < 2 || !child_index(name, n, i, &oplen)) return 0;
  snprintf(op, WF_NAME_MAX + 1, "%.*s", (int)oplen, name);
  snprintf(key, WF_NAME_MAX + 16, "%u/%s", n, op);
  *u = wf_strmap_get(&c->units, key);
  return 1;
}

int wf_cd_unit_take(wf_coord *c, ready *q, uint32_t n) {
  uint32_t i;
  char key[WF_NAME_MAX + 16], op[WF_NAME_MAX + 1];
  unit *u;
  if (!unit_of(c, q->name, n, &i, op, key, &u)) return 0;
  if (u && (u->done[i / 8] >> (i % 8) & 1)) {
    /* tensor i again: this unit is left from an earlier op of this name
     * (a failed one: its tensors were resolved by errors, some twice, or
     * under another count). Out with what it holds; a new unit starts. */
    WF_DEBUG(WF_SUB_COORD, "grouped op '%s': %u of %u tensors resolved when '%s' came again: a new unit", op,
             u->resolved, u->n, q->name);
    publish(c, u);
    u = NULL;
  }
  if (!u) {
    if (!(u = unit_new(key)) || !(u->done = calloc((n + 7) / 8, 1)) ||
        wf_strmap_insert(&c->units, u->key, u, 1) != 0) {
      if (u) free(u->done);
      free(u);
      WF_WARN(WF_SUB_COORD, "out of memory holding '%s' for its grouped op: published alone", q->name);
      return 0;
    }
    u->n = n;
  }
  u->touched_ns = wf_cd_now(c);
  int64_t idle_at = u->touched_ns + (int64_t)(c->timeout * 1e9);
  if (idle_at < c->units_sweep_at) c->units_sweep_at = idle_at;
  if (q->resp.type == WF_RESP_OK) {
    if (u->nheld == u->cap) {
      uint32_t ncap = u->cap ? 2 * u->cap : 8;
      held *h = realloc(u->held, ncap * sizeof *h);
      if (!h) {
        WF_WARN(WF_SUB_COORD, "out of memory holding '%s' for its grouped op: published alone", q->name);
        wf_cd_push(c, q);
        goto resolved;
      }
      u->held = h;
      u->cap = ncap;
    }
    u->held[u->nheld].i = i;
    u->held[u->nheld++].q = *q;
  } else {
    wf_cd_push(c, q); /* an error goes out at once */
  }
resolved:
  u->done[i / 8] |= (uint8_t)(1u << (i % 8));
  if (++u->resolved < u->n) return 1;
  WF_DEBUG(WF_SUB_COORD, "grouped op '%s': its %u tensors published together", op, u->n);
  publish(c, u);
  return 1;
}

void wf_cd_unit_break(wf_coord *c, const char *name, uint32_t n) {
  uint32_t i;
  char key[WF_NAME_MAX + 16], op[WF_NAME_MAX + 1];
  unit *u;
  if (!unit_of(c, name, n, &i, op, key, &u) || !u) return;
  WF_DEBUG(WF_SUB_COORD, "grouped op '%s': '%s' failed before the unit was complete; the %u ready go out now", op,
           name, u->nheld);
  publish(c, u);
}

int64_t wf_cd_units_next(const wf_coord *c) {
  return c->units.len ? c->units_sweep_at : INT64_MAX;
}

void wf_cd_units_sweep(wf_coord *c, int64_t now) {
  if (!c->units.len || now < c->units_sweep_at) return;
  int64_t idle = (int64_t)(c->timeout * 1e9), next = INT64_MAX;
  for (size_t s = 0; s < c->units.cap; s++) {
    wf_strmap_entry *e = &c->units.slots[s];
    if (!e->key || e->tomb) continue;
    unit *u = e->val;
    if (now - u->touched_ns < idle) {
      if (u->touched_ns + idle < next) next = u->touched_ns + idle;
      continue;
    }
    /* idle for the timeout: its other tensors are not coming (ranks
     * disagreed, or a resolution was lost to memory); what it holds goes
     * out rather than never */
    if (u->nheld)
      WF_WARN(WF_SUB_COORD, "grouped op '%s': %u of %u tensors resolved in %g s; the %u ready go out without the rest",
              u->key, u->resolved, u->n, c->timeout, u->nheld);
    publish(c, u);
  }
  c->units_sweep_at = next;
}

void wf_cd_units_flush(wf_coord *c) {
  for (size_t s = 0; s < c->units.cap; s++) { /* publish only tombstones the unit's slot: the scan stays valid */
    wf_strmap_entry *e = &c->units.slots[s];
    if (!e->key || e->tomb) continue;
    unit *u = e->val;
    WF_DEBUG(WF_SUB_COORD, "grouped op '%s': every rank joined with %u of %u tensors resolved; the %u ready go out",
             u->key, u->resolved, u->n, u->nheld);
    publish(c, u);
  }
}

void wf_cd_units_free(wf_coord *c) {
  for (size_t s = 0; s < c->units.cap; s++) {
    wf_strmap_entry *e = &c->units.slots[s];
    if (!e->key || e->tomb) continue;
    unit *u = e->val;
    for (uint32_t k = 0; k < u->nheld; k++) wf_cd_ready_free(&u->held[k].q);
    free(u->held);
    free(u->done);
    free(u);
  }
  wf_strmap_free(&c->units);
}

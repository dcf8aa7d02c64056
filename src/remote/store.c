/* store.c - the callee's object store: contexts, each holding objects
 * named by {owner rank, local id}. An object is a placeholder (PENDING)
 * until produced, then READY (a host tensor) or FAILED (why). Objects are
 * reference counted so that a running function's inputs and outputs
 * survive a delete, a close or a collection that unlists them. Lists are
 * linear: a context holds the objects of one caller's session. mu held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/remote_impl.h"

void wf_oid_str(wf_remote_oid id, char *buf, size_t len) {
  snprintf(buf, len, "{%d, %llu}", (int)id.owner, (unsigned long long)id.local);
}

wf_rctx *wf_rctx_find(wf_remote *r, uint64_t id) {
  for (wf_rctx *c = r->ctxs; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

wf_robj *wf_robj_find(wf_rctx *c, wf_remote_oid id) {
  for (wf_robj *o = c->objs; o; o = o->next)
    if (o->id.owner == id.owner && o->id.local == id.local) return o;
  return NULL;
}

wf_robj *wf_robj_add(wf_rctx *c, wf_remote_oid id) {
  wf_robj *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->id = id;
  o->state = WF_OBJ_PENDING;
  o->refs = 1;
  o->listed = 1;
  o->next = c->objs;
  c->objs = o;
  return o;
}

void wf_robj_unref(wf_robj *o) {
  if (--o->refs > 0) return;
  free(o->data);
  free(o->error);
  free(o);
}

void wf_robj_unlist(wf_rctx *c, wf_robj *o) {
  for (wf_robj **pp = &c->objs; *pp; pp = &(*pp)->next)
    if (*pp == o) {
      *pp = o->next;
      o->next = NULL;
      o->listed = 0;
      if (o->state == WF_OBJ_PENDING) { /* a job waiting on it fails rather than waits forever */
        o->state = WF_OBJ_FAILED;
        free(o->error);
        o->error = strdup("it was deleted before it was produced");
      }
      wf_robj_unref(o);
      return;
    }
}

void wf_rctx_drop(wf_remote *r, wf_rctx *c, int collected) {
  for (wf_rctx **pp = &r->ctxs; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  while (c->objs) wf_robj_unlist(c, c->objs);
  if (collected) {
    r->collected_ids[r->ncollected++ % 64] = c->id;
    r->ncollected_total++;
  }
  free(c);
  wf_serve_recheck(r);
}

int64_t wf_remote_free_owned(wf_remote *r, int owner) {
  int64_t n = 0;
  wf_rctx *c = r->ctxs;
  while (c) {
    wf_rctx *next = c->next;
    wf_robj *o = c->objs;
    while (o) {
      wf_robj *on = o->next;
      if (o->id.owner == owner) {
        wf_robj_unlist(c, o);
        n++;
      }
      o = on;
    }
    if (c->creator == owner) {
      for (wf_robj *x = c->objs; x; x = x->next) n++;
      wf_rctx_drop(r, c, 0);
    }
    c = next;
  }
  wf_serve_recheck(r);
  return n;
}

void wf_remote_collect_idle(wf_remote *r, int64_t now) {
  wf_rctx *c = r->ctxs;
  while (c) {
    wf_rctx *next = c->next;
    if (c->idle > 0 && now - c->last_used > (int64_t)(c->idle * 1e9)) wf_rctx_drop(r, c, 1);
    c = next;
  }
}

/* inbox.c - the engine thread's side of the control stream: frames from
 * the transport callbacks are decoded into the world's inbox (on_ctrl), then
 * acted on in arrival order, aborts first (wf_engine_process_inbox):
 * requests go to the coordinator of their group (or wait, bounded, for a
 * group not created here yet), responses to the group's queue and response
 * cache, cache hits are resolved or sent back for a RESEND, a relayed
 * failure or abort fails the world, and a BYE ends what needs the departed
 * peer. Engine thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/ext.h"
#include "engine/p2p.h"
#include "negotiate/cache.h"
#include "util/err.h"
#include "util/log.h"

static void inbox_push(weft_world *w, wf_inbox *m) {
  m->next = NULL;
  if (w->in_tail) w->in_tail->next = m;
  else w->in_head = m;
  w->in_tail = m;
}

void wf_inbox_free(wf_inbox *m) {
  wf_requests_msg_free(&m->reqs);
  wf_responses_msg_free(&m->resps);
  wf_cache_refs_msg_free(&m->refs);
  free(m->p2p_data);
  wf_group_msg_free(&m->group);
  wf_step_msg_free(&m->step);
  free(m);
}

void wf_engine_on_ctrl(void *ctx, int peer, const wf_frame_hdr *h, const uint8_t *p, size_t n) {
  weft_world *w = ctx;
  char err[256];
  if (h->type == WF_MSG_HEARTBEAT) return;
  if (wf_ext_is_type(h->type)) { /* remote execution's: handed over as they come */
    wf_ext_on_frame(w, peer, h->type, p, n);
    return;
  }
  wf_inbox *m = calloc(1, sizeof *m);
  if (!m) {
    wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory receiving a message from rank %d", peer);
    return;
  }
  m->peer = peer;
  m->type = h->type;
  weft_status st = WEFT_OK;
  /* REQUESTS and RESPONSES start with their entry count: cap it before the
   * decoder allocates a struct per entry (far larger than an entry's bytes) */
  if ((h->type == WF_MSG_REQUESTS || h->type == WF_MSG_RESPONSES) && n >= 4 &&
      ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24) > WF_MAX_BATCH) {
    free(m);
    wf_world_fail(w, WEFT_ERR_PROTOCOL, "bad message from rank %d (%s): more than %d entries in one frame", peer,
                  w->peers[peer].host, WF_MAX_BATCH);
    wf_tcp_close(w->tcp, peer);
    return;
  }
  switch (h->type) {
    case WF_MSG_REQUESTS: /* whose coordinator it reaches is checked per group */
      st = wf_decode_requests(p, n, &m->reqs, err, sizeof err);
      break;
    case WF_MSG_RESPONSES:
      st = wf_decode_responses(p, n, &m->resps, err, sizeof err);
      break;
    case WF_MSG_ABORT:
    case WF_MSG_STALL:
      st = wf_decode_abort(p, n, m->reason, sizeof m->reason, err, sizeof err);
      break;
    case WF_MSG_CACHED: /* capped at 4096 entries by the decoder */
    case WF_MSG_RESEND:
      st = wf_decode_cache_refs(p, n, h->type == WF_MSG_CACHED ? "CACHED" : "RESEND", &m->refs, err, sizeof err);
      break;
    case WF_MSG_BYE:
      w->departed[peer] = 1; /* now: its EOF may follow in the same read */
      wf_ext_peer_gone(w, peer, 1);
      break;
    case WF_MSG_P2P_SEND:
      st = wf_decode_p2p_send(p, n, &m->p2p_send, err, sizeof err);
      if (st == WEFT_OK && m->p2p_send.data) { /* the payload is only valid during this call */
        size_t b = (size_t)(n - 40);
        if (!(m->p2p_data = malloc(b))) {
          st = WEFT_ERR_NO_MEMORY;
          snprintf(err, sizeof err, "out of memory (%zu bytes)", b);
        } else {
          memcpy(m->p2p_data, m->p2p_send.data, b);
          m->p2p_send.data = m->p2p_data;
        }
      }
      break;
    case WF_MSG_P2P_REPLY:
      st = wf_decode_p2p_reply(p, n, &m->p2p_reply, err, sizeof err);
      break;
    case WF_MSG_GROUP_JOIN:
      st = wf_decode_group_join(p, n, &m->group, err, sizeof err);
      break;
    case WF_MSG_GROUP_REPLY:
      st = wf_decode_group_reply(p, n, &m->group, err, sizeof err);
      break;
    case WF_MSG_CANCEL:
      st = wf_decode_cancel(p, n, &m->cancel, err, sizeof err);
      break;
    case WF_MSG_STEP_REQ:
      st = wf_decode_step_req(p, n, &m->step, err, sizeof err);
      break;
    case WF_MSG_STEP_REPLY:
      st = wf_decode_step_reply(p, n, &m->step, err, sizeof err);
      break;
    default:
      st = WEFT_ERR_PROTOCOL;
      snprintf(err, sizeof err, "unexpected message type %u", h->type);
  }
  if (st != WEFT_OK) {
    free(m);
    wf_world_fail(w, st, "bad message from rank %d (%s): %s", peer, w->peers[peer].host, err);
    wf_tcp_close(w->tcp, peer);
    return;
  }
  inbox_push(w, m);
}

void wf_engine_on_error(void *ctx, int peer, weft_status st, const char *msg) {
  weft_world *w = ctx;
  if (w->departed[peer]) {
    /* it said goodbye: closing is expected, but a transfer with it still
     * waiting now never completes (a receive posted after its BYE was
     * handled, sends dropped with the socket) */
    wf_exec_peer_departed(w, peer); /* (point-to-point: at its BYE, in order after what it sent) */
    return;
  }
  wf_ext_peer_gone(w, peer, 2);
  wf_world_fail(w, st, "%s (rank %d on host %s)", msg, peer, w->peers[peer].host);
}

static const wf_request_msg *own_request(void *ctx, const char *name) {
  weft_request *r = wf_strmap_get(&((wf_gstate *)ctx)->table, name);
  return r ? &r->msg : NULL;
}

/* A peer said goodbye after its last operation: everything it sent us is
 * already here (same stream). Work that still needs it fails: coordinators
 * fail tensors it never submitted; an executor still waiting for its data
 * fails; a group whose coordinator left cannot run tensors with no response
 * queued. */
static void peer_departed(weft_world *w, int peer) {
  wf_exec_peer_departed(w, peer);
  wf_p2p_peer_departed(w, peer);
  wf_resolve_peer_departed(w, peer);
  wf_steps_peer_departed(w, peer);
  for (int gi = 0; gi < w->ngs; gi++) {
    wf_gstate *gs = w->gs[gi];
    int gr = wf_group_index(gs->group, peer);
    if (gr < 0) continue;
    if (gs->coord) wf_coord_rank_departed(gs->coord, gr);
    if (peer != gs->coord_rank) continue;
    /* Without its coordinator the group negotiates nothing more: requests
     * with a response already queued still run; the others fail now, and
     * new ones at submission. */
    gs->coord_gone = 1;
    for (size_t i = 0; i < gs->table.cap; i++) {
      wf_strmap_entry *e = &gs->table.slots[i];
      if (!e->key || e->tomb) continue;
      int queued = 0;
      for (size_t k = gs->resps_pos; k < gs->nresps && !queued; k++)
        for (uint32_t j = 0; j < gs->resps[k].nnames && !queued; j++) queued = !strcmp(gs->resps[k].names[j], e->key);
      if (queued) continue;
      weft_request *r = e->val;
      char msg[1024];
      snprintf(msg, sizeof msg,
               "tensor '%s': the coordinator of its group (rank %d on %s) has shut down (weft_finalize) before it "
               "could be negotiated",
               e->key, peer, w->peers[peer].host);
      wf_strmap_del(&gs->table, e->key);
      wf_tl_end(&w->tl, r->msg.name, msg);
      wf_request_complete(w, r, WEFT_ERR_PEER_LOST, msg);
    }
  }
}

/* Coordinator: a member's cache hits. Each resolves to the request it
 * stands for, or (the member had not yet seen the responses that evicted
 * it) goes back in a RESEND. */
static void on_cached(weft_world *w, int peer, const wf_cache_refs_msg *m) {
  wf_cache_ref *stale = NULL;
  uint32_t nstale = 0;
  for (uint32_t i = 0; i < m->count; i++) {
    const wf_cache_ref *ref = &m->refs[i];
    wf_gstate *gs = wf_gs_find(w, ref->group_id);
    int gr = gs ? wf_group_index(gs->group, peer) : -1;
    if (!gs || !gs->coord || gr < 0) {
      wf_world_fail(w, WEFT_ERR_PROTOCOL, "rank %d sent a cached request for group %u to a rank that does not "
                    "coordinate it", peer, ref->group_id);
      wf_tcp_close(w->tcp, peer);
      break;
    }
    const char *name;
    if (!wf_coord_add_cached(gs->coord, gr, ref->id, ref->epoch, &name)) {
      if (!stale && !(stale = malloc(sizeof *stale * m->count))) {
        wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory answering rank %d's cached requests", peer);
        break;
      }
      stale[nstale++] = *ref;
      continue;
    }
    if (wf_tl_on(&w->tl)) {
      char what[32];
      snprintf(what, sizeof what, "rank %d ready", peer);
      wf_tl_mark(&w->tl, name, what);
    }
  }
  if (nstale) {
    WF_DEBUG(WF_SUB_COORD, "response cache: %u of rank %d's cached requests name evicted entries: resend", nstale,
             peer);
    wf_engine_send_refs(w, peer, WF_MSG_RESEND, stale, nstale);
  }
  free(stale);
}

/* Member: the coordinator could not resolve these cache hits: send those
 * requests in full. */
static void on_resend(weft_world *w, int peer, const wf_cache_refs_msg *m) {
  wf_request_msg *full = malloc(sizeof *full * m->count);
  uint32_t n = 0;
  if (!full) {
    wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory resending requests to rank %d", peer);
    return;
  }
  for (uint32_t i = 0; i < m->count; i++) {
    wf_gstate *gs = wf_gs_find(w, m->refs[i].group_id);
    if (!gs || gs->coord_rank != peer) {
      wf_world_fail(w, WEFT_ERR_PROTOCOL, "rank %d sent RESEND for group %u, which it does not coordinate", peer,
                    m->refs[i].group_id);
      wf_tcp_close(w->tcp, peer);
      break;
    }
    char name[WF_NAME_MAX + 1];
    if (!gs->mcache || !wf_mcache_resend(gs->mcache, &m->refs[i], name)) continue; /* nothing pending under it */
    weft_request *r = wf_strmap_get(&gs->table, name);
    if (r) full[n++] = r->msg; /* shallow: the encoder only reads */
  }
  if (n) wf_engine_send_requests(w, peer, full, n);
  free(full);
}

void wf_engine_process_inbox(weft_world *w) {
  /* an abort wins over whatever else arrived in the same pass (a BYE would
   * otherwise fail pending work with a less useful reason first) */
  for (wf_inbox **pp = &w->in_head; *pp;) {
    wf_inbox *m = *pp;
    if (m->type != WF_MSG_ABORT || m == w->in_head) {
      pp = &m->next;
      continue;
    }
    *pp = m->next;
    if (w->in_tail == m) {
      w->in_tail = w->in_head;
      while (w->in_tail->next) w->in_tail = w->in_tail->next;
    }
    m->next = w->in_head;
    w->in_head = m;
  }
  while (w->in_head) {
    wf_inbox *m = w->in_head;
    w->in_head = m->next;
    if (!w->in_head) w->in_tail = NULL;
    m->next = NULL;
    if (wf_world_failed(w)) { /* the first failure decides every pending request: drop the rest */
      wf_inbox_free(m);
      continue;
    }
    switch (m->type) {
      case WF_MSG_REQUESTS: {
        uint32_t kept = 0;
        for (uint32_t i = 0; i < m->reqs.count; i++) {
          wf_request_msg *q = &m->reqs.reqs[i];
          wf_gstate *gs = wf_gs_find(w, q->group_id);
          if (!gs) { /* not registered here yet: keep it for later */
            m->reqs.reqs[kept++] = *q;
            continue;
          }
          int gr = wf_group_index(gs->group, m->peer);
          if (!gs->coord || gr < 0) {
            wf_world_fail(w, WEFT_ERR_PROTOCOL, "rank %d sent a request for '%s' in group %u to a rank that does not "
                          "coordinate it", m->peer, q->name, q->group_id);
            wf_tcp_close(w->tcp, m->peer);
            free(q->splits);
            continue;
          }
          if (wf_tl_on(&w->tl)) {
            char what[32];
            snprintf(what, sizeof what, "rank %d ready", m->peer);
            wf_tl_mark(&w->tl, q->name, what);
          }
          wf_coord_add(gs->coord, gr, q);
          free(q->splits);
        }
        if (kept) {
          /* bounded: a peer cannot make this rank hold unlimited requests
           * for groups it never creates */
          w->norphans += kept;
          if (w->norphans > WF_MAX_ORPHANS) {
            wf_world_fail(w, WEFT_ERR_PROTOCOL,
                          "rank %d sent requests for group %u, which this rank has not created; more than %d such "
                          "requests are held back (a group created on some ranks only?)",
                          m->peer, m->reqs.reqs[0].group_id, WF_MAX_ORPHANS);
            wf_tcp_close(w->tcp, m->peer);
            m->reqs.count = kept;
            wf_requests_msg_free(&m->reqs);
            break;
          }
          m->reqs.count = kept;
          m->next = w->orphans;
          w->orphans = m;
          continue; /* keep m */
        }
        free(m->reqs.reqs);
        break;
      }
      case WF_MSG_RESPONSES:
        for (uint32_t i = 0; i < m->resps.count; i++) {
          wf_response_msg *q = &m->resps.resps[i];
          wf_gstate *gs = wf_gs_find(w, q->group_id);
          if (!gs || gs->coord_rank != m->peer) {
            wf_world_fail(w, WEFT_ERR_PROTOCOL, "rank %d sent a response for group %u, which it does not coordinate",
                          m->peer, q->group_id);
            wf_tcp_close(w->tcp, m->peer);
            wf_response_msg_free(q);
            continue;
          }
          if (gs->mcache) wf_mcache_response(gs->mcache, q, gs->group->rank, own_request, gs); /* in response order */
          wf_gs_queue_responses(gs, q, 1);
        }
        free(m->resps.resps);
        break;
      case WF_MSG_CACHED:
        on_cached(w, m->peer, &m->refs);
        wf_cache_refs_msg_free(&m->refs);
        break;
      case WF_MSG_RESEND:
        on_resend(w, m->peer, &m->refs);
        wf_cache_refs_msg_free(&m->refs);
        break;
      case WF_MSG_ABORT: {
        pthread_mutex_lock(&w->mu);
        int first = w->fail_status == WEFT_OK;
        pthread_mutex_unlock(&w->mu);
        int relayed_st = 0, off = 0;
        if (sscanf(m->reason, "status %d: %n", &relayed_st, &off) == 1 && off > 0 && relayed_st < 0) {
          /* a peer's failure, passed on: same status, same cause */
          wf_world_fail(w, (weft_status)relayed_st, "%s (reported by rank %d on %s)", m->reason + off, m->peer,
                        w->peers[m->peer].host);
          /* not marked relayed: fail_all passes it on once (the sender may
           * have been cut off before it told every peer) */
          break;
        }
        wf_world_fail(w, WEFT_ERR_ABORTED, "aborted by rank %d (%s): %s", m->peer, w->peers[m->peer].host,
                      m->reason);
        /* pass it on before anything else this rank sends (its BYE, say), so
         * every peer learns the abort, not just that this rank left */
        if (first) {
          char relay[600];
          snprintf(relay, sizeof relay, "%s (from rank %d)", m->reason, m->peer);
          wf_engine_send_abort(w, relay);
        }
        break;
      }
      case WF_MSG_BYE:
        peer_departed(w, m->peer);
        break;
      case WF_MSG_P2P_SEND:
        wf_p2p_on_send(w, m->peer, &m->p2p_send);
        break;
      case WF_MSG_P2P_REPLY:
        wf_p2p_on_reply(w, m->peer, &m->p2p_reply);
        break;
      case WF_MSG_STALL:
        WF_WARN(WF_SUB_COORD, "this rank waits: %s (reported by rank %d)", m->reason, m->peer);
        break;
      case WF_MSG_GROUP_JOIN:
        wf_resolve_on_join(w, m->peer, &m->group);
        wf_group_msg_free(&m->group);
        break;
      case WF_MSG_GROUP_REPLY:
        wf_resolve_on_reply(w, m->peer, &m->group);
        wf_group_msg_free(&m->group);
        break;
      case WF_MSG_CANCEL:
        wf_cancel_on_msg(w, m->peer, &m->cancel);
        break;
      case WF_MSG_STEP_REQ:
        wf_steps_on_req(w, m->peer, &m->step);
        break;
      case WF_MSG_STEP_REPLY:
        wf_steps_on_reply(w, m->peer, &m->step);
        wf_step_msg_free(&m->step);
        break;
    }
    free(m->p2p_data);
    free(m);
  }
}

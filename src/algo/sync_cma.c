/* sync_cma.c - shared pieces of the cross-memory attach algorithms: the
 * schedule scratch holding the address and token messages, and the peer
 * operands built from received addresses (see cma.h). */
#include "algo/cma.h"

#include "util/err.h"

int wf_cma_usable(const wf_coll_args *a) {
  return a->topo && a->topo->cma && a->topo->nhosts == 1 && a->topo->pid_of && a->size >= 1;
}

weft_status wf_cma_setup(const wf_coll_args *a, wf_sched *s, size_t tmp_bytes, wf_cma_sync *y, const char *what) {
  size_t p = (size_t)a->size, slots = (3 * p + 1) * sizeof(uint64_t);
  slots = (slots + 63) / 64 * 64; /* tmp stays 64-byte aligned */
  char *base = wf_sched_scratch(s, slots + tmp_bytes);
  if (!base) return wf_err(WEFT_ERR_NO_MEMORY, "%s: no memory for %zu bytes of scratch", what, slots + tmp_bytes);
  uint64_t *u = (uint64_t *)(void *)base;
  y->mine = u;
  y->addr = u + p;
  y->tokr = u + 2 * p;
  y->tok = u + 3 * p;
  for (size_t i = 0; i <= 3 * p; i++) u[i] = 0;
  y->tmp = tmp_bytes ? base + slots : NULL;
  return WEFT_OK;
}

void wf_cma_send_addr(wf_sched *s, const wf_cma_sync *y, int j, const void *p) {
  y->mine[j] = (uint64_t)(uintptr_t)p;
  wf_sched_send(s, j, &y->mine[j], sizeof(uint64_t));
}

void wf_cma_recv_addr(wf_sched *s, const wf_cma_sync *y, int j) {
  wf_sched_recv(s, j, &y->addr[j], sizeof(uint64_t));
}

wf_mem wf_cma_peer(const wf_coll_args *a, const wf_cma_sync *y, int j, size_t off) {
  return wf_mem_peer(j, a->topo->pid_of[j], &y->addr[j], off);
}

void wf_cma_send_tok(wf_sched *s, const wf_cma_sync *y, int j) { wf_sched_send(s, j, y->tok, sizeof(uint64_t)); }

void wf_cma_recv_tok(wf_sched *s, const wf_cma_sync *y, int j) {
  wf_sched_recv(s, j, &y->tokr[j], sizeof(uint64_t));
}

size_t wf_cma_chunk(size_t es, size_t n) {
  size_t c = WF_CMA_CHUNK_BYTES / es;
  if (c > n) c = n;
  return c ? c : 1;
}

weft_status wf_cma_finish(wf_sched *s, const wf_cma_sync *y, int rank, int size, const char *what) {
  wf_sched_end_round(s);
  for (int d = 1; d < size; d++) {
    int j = (rank + d) % size;
    wf_cma_send_tok(s, y, j);
    wf_cma_recv_tok(s, y, j);
  }
  wf_sched_end_round(s);
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "%s cma: no memory for the schedule", what) : WEFT_OK;
}

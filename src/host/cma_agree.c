/* cma_agree.c - at init, the ranks of each host agree whether they may read
 * each other's memory (cross-memory attach, process_vm_readv), so that every
 * rank of a group makes the same algorithm choice (algo.h: wf_topo.cma).
 *
 * Over the authenticated bootstrap sockets, before the engine owns them,
 * every rank sends each same-host peer a fixed 24-byte record: the address
 * and value of a random per-process cookie. Each rank reads every peer's
 * cookie through process_vm_readv: this proves both the permission and that
 * the pid names that very process (not another one with the same number in
 * another pid namespace). Then each sends each same-host peer its verdict
 * (its WEFT_CMA setting AND the reads' success) and all take the AND, so a
 * rank that cannot, or is told not to (WEFT_CMA=0), turns it off for the
 * whole host. Records are tiny and fixed-size: all writes fit the socket
 * buffers, so writing all then reading all cannot deadlock. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>

#include "bootstrap/sockutil.h"
#include "engine/engine.h"
#include "util/err.h"
#include "util/log.h"
#include "util/settings.h"
#include "util/time.h"

#define CMA_MAGIC 0x434d4131u /* "CMA1" */

typedef struct cma_rec {
  uint32_t magic, kind; /* kind 0: cookie; 1: verdict */
  uint64_t a, b;        /* cookie: address, value; verdict: ok, 0 */
} cma_rec;

static uint64_t g_cookie;

static int local_peer(const weft_world *w, int i) {
  return i != w->rank && w->peers[i].cross_rank == w->peers[w->rank].cross_rank;
}

/* Sends rec to every same-host peer, then reads one record of the same kind
 * from each into got[i]. */
static weft_status swap(weft_world *w, const int *fds, const cma_rec *rec, cma_rec *got, int64_t dl) {
  char err[256] = "";
  for (int i = 0; i < w->size; i++) {
    if (!local_peer(w, i)) continue;
    weft_status st = wf_sock_write_all(fds[i], rec, sizeof *rec, dl, NULL, err, sizeof err);
    if (st != WEFT_OK)
      return wf_err(st, "rank %d: agreeing on cross-memory attach with rank %d (%s): %s", w->rank, i,
                    w->peers[i].host, err);
  }
  for (int i = 0; i < w->size; i++) {
    if (!local_peer(w, i)) continue;
    weft_status st = wf_sock_read_all(fds[i], &got[i], sizeof got[i], dl, NULL, err, sizeof err);
    if (st == WEFT_OK && (got[i].magic != CMA_MAGIC || got[i].kind != rec->kind)) {
      snprintf(err, sizeof err, "unexpected record (magic %08x, kind %u)", got[i].magic, got[i].kind);
      st = WEFT_ERR_PROTOCOL;
    }
    if (st != WEFT_OK)
      return wf_err(st, "rank %d: agreeing on cross-memory attach with rank %d (%s): %s", w->rank, i,
                    w->peers[i].host, err);
  }
  return WEFT_OK;
}

weft_status wf_cma_agree(weft_world *w, const int *fds) {
  w->cma_ok = 0;
  int nlocal = 0;
  for (int i = 0; i < w->size; i++) nlocal += local_peer(w, i);
  if (!nlocal) return WEFT_OK; /* nobody to read from: no CMA algorithm claims */
  while (!g_cookie)
    if (getrandom(&g_cookie, sizeof g_cookie, 0) != (ssize_t)sizeof g_cookie)
      g_cookie = (uint64_t)wf_now_ns() | 1;
  cma_rec *got = calloc((size_t)w->size, sizeof *got);
  if (!got) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory agreeing on cross-memory attach");
  int64_t dl = wf_deadline_after(w->set.init_timeout_seconds);
  cma_rec mine = {CMA_MAGIC, 0, (uint64_t)(uintptr_t)&g_cookie, g_cookie};
  weft_status st = swap(w, fds, &mine, got, dl);
  int ok = w->set.cma != 0 && strcmp(w->set.transport, "mpi") != 0;
  for (int i = 0; st == WEFT_OK && ok && i < w->size; i++) {
    if (!local_peer(w, i)) continue;
    uint64_t v = 0;
    struct iovec l = {&v, sizeof v}, r = {(void *)(uintptr_t)got[i].a, sizeof v};
    ssize_t n = process_vm_readv((pid_t)w->peers[i].pid, &l, 1, &r, 1, 0);
    if (n != (ssize_t)sizeof v || v != got[i].b) {
      WF_INFO(WF_SUB_INIT, "no cross-memory attach to rank %d (pid %u): %s", i, w->peers[i].pid,
              n < 0 ? strerror(errno) : "the pid is another process (pid namespaces?)");
      ok = 0;
    }
  }
  cma_rec verdict = {CMA_MAGIC, 1, (uint64_t)ok, 0};
  if (st == WEFT_OK) st = swap(w, fds, &verdict, got, dl);
  for (int i = 0; st == WEFT_OK && i < w->size; i++)
    if (local_peer(w, i) && !got[i].a) ok = 0;
  free(got);
  if (st != WEFT_OK) return st;
  w->cma_ok = ok;
  WF_INFO(WF_SUB_INIT, "cross-memory attach among this host's %d ranks: %s", nlocal + 1, ok ? "yes" : "no");
  return WEFT_OK;
}

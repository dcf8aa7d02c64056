/* sched_cma.c - runs the cross-memory attach (CMA) steps of a schedule:
 * reads of a same-host peer's memory with process_vm_readv (one copy, by
 * the kernel, with no help from the peer), and the fused fold that reduces
 * a slice chunk by chunk out of several processes' buffers while the chunk
 * is in cache. The peers' addresses were received into slots by earlier
 * rounds of the schedule; a step reads its slot when it runs. Failures name
 * the peer, its pid and errno, and point at WEFT_CMA=0. */
#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "algo/sched.h"
#include "reduce/reduce.h"
#include "util/err.h"
#include "util/time.h"

weft_status wf_cma_read(int pid, uint64_t addr, void *local, size_t bytes, int rank, const char *what) {
  char *l = local;
  size_t done = 0;
  while (done < bytes) {
    struct iovec lv = {l + done, bytes - done};
    struct iovec rv = {(void *)(uintptr_t)(addr + done), bytes - done};
    ssize_t n = process_vm_readv((pid_t)pid, &lv, 1, &rv, 1, 0);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    int e = n < 0 ? errno : EIO;
    if (e == EINTR) continue;
    return wf_err(e == ESRCH ? WEFT_ERR_PEER_LOST : WEFT_ERR_SYSTEM,
                  "%scross-memory read of %zu bytes from rank %d (pid %d, address 0x%llx) failed: %s; WEFT_CMA=0 "
                  "moves the data without cross-memory reads",
                  what, bytes - done, rank, pid, (unsigned long long)(addr + done), strerror(e));
  }
  return WEFT_OK;
}

/* Reads bytes of operand m (a peer's), extra bytes past its address, into
 * local. */
static weft_status xfer(const wf_mem *m, size_t extra, void *local, size_t bytes) {
  return wf_cma_read(m->pid, *m->base + (uint64_t)m->off + (uint64_t)extra, local, bytes, m->peer, "");
}

/* Operand m's bytes at offset off: a pointer into local memory, or the
 * peer's bytes read into tmp. */
static weft_status operand(const wf_mem *m, size_t off, size_t bytes, char *tmp, const char **p) {
  if (m->peer < 0) {
    *p = (const char *)m->local + m->off + off;
    return WEFT_OK;
  }
  *p = tmp;
  return xfer(m, off, tmp, bytes);
}

/* dst = src[0] op src[1] op ... (left fold), chunk by chunk from element
 * *done on. The accumulator is dst itself when src[0] is dst, else tmp A
 * until the last source, whose fold writes dst; remote sources are read
 * into tmp B. The operand order is that of REDUCE steps (acc op x). A chunk
 * is complete in dst when the fold stops early, so it resumes at a chunk. */
static weft_status fold(const wf_sched *s, const wf_step *st, size_t *done, int64_t until_ns) {
  size_t es = weft_dtype_size(s->dtype);
  const wf_mem *src = s->mems + st->mem0;
  char *dst = st->dst, *ta = st->tmp, *tb = ta ? ta + st->chunk * es : NULL;
  for (size_t c = *done; c < st->count; c += st->chunk) {
    if (c > *done && until_ns && wf_now_ns() >= until_ns) {
      *done = c;
      return WEFT_IN_PROGRESS;
    }
    size_t m = st->count - c < st->chunk ? st->count - c : st->chunk;
    size_t off = c * es, bytes = m * es;
    char *d = dst + off;
    if (st->nsrc == 1) { /* a copy */
      if (src[0].peer < 0) {
        const char *from = (const char *)src[0].local + src[0].off + off;
        if (from != d) memmove(d, from, bytes);
      } else {
        WF_CHECK(xfer(&src[0], off, d, bytes));
      }
    } else {
      const char *x;
      WF_CHECK(operand(&src[0], off, bytes, ta, &x));
      for (uint32_t i = 1; i < st->nsrc; i++) {
        const char *y;
        WF_CHECK(operand(&src[i], off, bytes, tb, &y));
        char *out = (i + 1 == st->nsrc || x == d) ? d : ta;
        wf_reduce3(s->dtype, s->op, out, x, y, m);
        x = out;
      }
    }
  }
  return WEFT_OK;
}

/* Reads of up to this many bytes between looks at the clock. */
#define WF_READ_PIECE ((size_t)1 << 20)

weft_status wf_sched_run_cma(const wf_sched *s, const wf_step *st, size_t *done, int64_t until_ns) {
  switch (st->kind) {
    case WF_STEP_CMA_READ:
      while (*done < st->bytes) {
        size_t m = st->bytes - *done < WF_READ_PIECE ? st->bytes - *done : WF_READ_PIECE;
        WF_CHECK(xfer(&s->mems[st->mem0], *done, (char *)st->dst + *done, m));
        *done += m;
        if (*done < st->bytes && until_ns && wf_now_ns() >= until_ns) return WEFT_IN_PROGRESS;
      }
      return WEFT_OK;
    case WF_STEP_CMA_FOLD:
      return fold(s, st, done, until_ns);
    default:
      return wf_err(WEFT_ERR_INTERNAL, "schedule step of kind %d is not a cross-memory step", st->kind);
  }
}

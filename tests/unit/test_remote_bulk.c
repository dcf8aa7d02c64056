/* test_remote_bulk.c - remote execution's bulk data path (src/remote/bulk.c)
 * over an in-process link: two ranks' cores in one process, frames handed
 * to the receiver's deliver, bulk transfers matched by (sender, receiver,
 * key) here and copied. Covers: put, an execute input and a fetch above the
 * threshold (and at it, and below it: inline) against references computed
 * here; a call the callee rejects (its staged input is dropped, nothing is
 * sent); a fetch cancelled before its reply (the caller answers with
 * BULK_DROP, the callee lets the object go); and that no transfer is left
 * posted or unmatched. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remote/remote.h"
#include "unit_check.h"

#define N 2
#define BULK_MIN 1024
static wf_remote *g_r[N];
static int g_rank_of[N] = {0, 1};
static atomic_int g_lose_cancels; /* CANCEL frames vanish on the way */

static weft_status link_send(void *ctx, int peer, wf_buf *frame) {
  int src = *(int *)ctx;
  char err[256];
  if (atomic_load(&g_lose_cancels) && frame->data[5] == WF_MSG_REMOTE_CALL &&
      frame->data[WF_FRAME_HDR_SIZE + 8] == WF_ROP_CANCEL) { /* (op follows the u64 call_id) */
    wf_buf_free(frame);
    return WEFT_OK;
  }
  weft_status st = wf_remote_deliver(g_r[peer], src, frame->data[5], frame->data + WF_FRAME_HDR_SIZE,
                                     frame->len - WF_FRAME_HDR_SIZE, err, sizeof err);
  CHECK(st == WEFT_OK, "deliver: %s", err);
  wf_buf_free(frame);
  return st;
}

static int link_lost(void *ctx, int peer, char *msg, size_t len) {
  (void)ctx, (void)peer, (void)msg, (void)len;
  return 0;
}

/* ---- the bulk matcher: a posted transfer waits here for its other side */
typedef struct posted {
  struct posted *next;
  int src, dst; /* the data's sender and receiver */
  uint64_t key;
  void *data;
  size_t n;
  wf_rbulk *tok;
} posted;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static posted *g_posted;
static atomic_int g_sends, g_recvs;

static weft_status link_bulk(void *ctx, int peer, int send, uint64_t key, void *data, size_t n, wf_rbulk *tok) {
  int me = *(int *)ctx;
  posted *p = calloc(1, sizeof *p);
  if (!p) return WEFT_ERR_NO_MEMORY;
  *p = (posted){NULL, send ? me : peer, send ? peer : me, key, data, n, tok};
  atomic_fetch_add(send ? &g_sends : &g_recvs, 1);
  pthread_mutex_lock(&g_mu);
  posted **pp = &g_posted;
  while (*pp && !((*pp)->src == p->src && (*pp)->dst == p->dst && (*pp)->key == key)) pp = &(*pp)->next;
  posted *o = *pp;
  if (!o) {
    p->next = g_posted;
    g_posted = p;
    pthread_mutex_unlock(&g_mu);
    return WEFT_OK;
  }
  *pp = o->next;
  pthread_mutex_unlock(&g_mu);
  CHECK(o->n == n, "bulk key %llu: %zu bytes one side, %zu the other", (unsigned long long)key, o->n, n);
  if (o->n == n && n) memcpy(send ? o->data : data, send ? data : o->data, n);
  wf_remote_bulk_done(o->tok, WEFT_OK, NULL);
  wf_remote_bulk_done(tok, WEFT_OK, NULL);
  free(o);
  free(p);
  return WEFT_OK;
}

static int posted_left(void) {
  int n = 0;
  pthread_mutex_lock(&g_mu);
  for (posted *p = g_posted; p; p = p->next) n++;
  pthread_mutex_unlock(&g_mu);
  return n;
}

/* ---- helpers */
static weft_status fn_add(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in;
  float *o;
  weft_status st = weft_remote_result_alloc(out, 0, WEFT_DTYPE_FLOAT32, in[0].ndim, in[0].shape, (void **)&o);
  if (st != WEFT_OK) return st;
  for (int64_t i = 0; i < in[0].shape[0]; i++) o[i] = ((const float *)in[0].data)[i] + ((const float *)in[1].data)[i];
  return WEFT_OK;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static weft_remote_id new_id(void) {
  weft_remote_id id;
  CHECK(wf_remote_id_new(g_r[0], &id) == WEFT_OK, "id");
  return id;
}

static weft_status finish(weft_remote_call *c, char *err, size_t len) {
  weft_status st = weft_remote_wait(c, 10);
  snprintf(err, len, "%s", weft_remote_call_error(c));
  return st;
}

/* Every transfer ended and nothing waits for BULK_GO, on both ranks (polled: replies land on other threads). */
static void quiet(const char *what) {
  int s = 0, h = 0, m = 0;
  for (int k = 0; k < 200; k++) {
    int any = 0;
    for (int i = 0; i < N; i++) {
      wf_remote_bulk_counts(g_r[i], &s, &h, &m);
      any |= s || h || m;
    }
    if (!any && !posted_left()) return;
    sleep_s(0.01);
  }
  for (int i = 0; i < N; i++) {
    wf_remote_bulk_counts(g_r[i], &s, &h, &m);
    CHECK(!s && !h && !m, "%s: rank %d: %d staged, %d held, %d moving", what, i, s, h, m);
  }
  CHECK(!posted_left(), "%s: %d transfers posted without their other side", what, posted_left());
}

/* put p, add(x inline, p) -> z, fetch z: n floats. */
static void test_sizes(uint64_t ctx) {
  const size_t sizes[] = {0, 10, BULK_MIN / 4 - 1, BULK_MIN / 4, BULK_MIN / 4 + 1, 30000};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    int bulk = n * 4 >= BULK_MIN;
    float *x = malloc(n * 4 + 4), *p = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) x[i] = (float)(i % 1000), p[i] = (float)k - (float)(i % 7);
    int64_t sh[1] = {(int64_t)n};
    weft_tensor tx = {.dtype = WEFT_DTYPE_FLOAT32, .ndim = 1, .shape = sh, .data = x, .device = WEFT_DEVICE_CPU};
    weft_tensor tp = tx;
    tp.data = p;
    weft_remote_id ip = new_id(), iz = new_id();
    weft_remote_input in[2] = {{.tensor = &tx}, {.id = ip}};
    weft_remote_call *cp, *ce, *cf;
    char err[1024];
    int s0 = atomic_load(&g_sends);
    CHECK(wf_remote_put(g_r[0], 1, ctx, &tp, ip, NULL, &cp) == WEFT_OK, "put");
    CHECK(wf_remote_execute(g_r[0], 1, ctx, "add", 2, in, 1, &iz, 0, NULL, &ce) == WEFT_OK, "execute");
    memset(x, 0xff, n * 4); /* copied at the call */
    CHECK(wf_remote_fetch(g_r[0], 1, ctx, iz, NULL, &cf) == WEFT_OK, "fetch");
    CHECK(finish(cp, err, sizeof err) == WEFT_OK, "%zu floats: put: %s", n, err);
    CHECK(finish(ce, err, sizeof err) == WEFT_OK, "%zu floats: execute: %s", n, err);
    CHECK(finish(cf, err, sizeof err) == WEFT_OK, "%zu floats: fetch: %s", n, err);
    weft_tensor out;
    if (weft_remote_call_output(cf, &out) == WEFT_OK) {
      CHECK(out.ndim == 1 && out.shape[0] == (int64_t)n, "%zu floats: fetched shape", n);
      int bad = 0;
      for (size_t i = 0; i < n && out.shape[0] == (int64_t)n; i++)
        bad += ((float *)out.data)[i] != (float)(i % 1000) + (float)k - (float)(i % 7);
      CHECK(!bad, "%zu floats: %d elements differ from the reference", n, bad);
    }
    weft_remote_call_free(cp), weft_remote_call_free(ce), weft_remote_call_free(cf);
    /* rank 0 sent the put and the input, rank 1 the fetched tensor: all apart, or none */
    CHECK(atomic_load(&g_sends) - s0 == (bulk ? 3 : 0), "%zu floats (%zu bytes): %d bulk sends, want %d", n, n * 4,
          atomic_load(&g_sends) - s0, bulk ? 3 : 0);
    quiet("sizes");
    weft_remote_id ids[2] = {ip, iz};
    CHECK(wf_remote_delete(g_r[0], 1, ctx, 2, ids, NULL, &cp) == WEFT_OK, "delete");
    CHECK(finish(cp, err, sizeof err) == WEFT_OK, "delete: %s", err);
    weft_remote_call_free(cp);
    free(x), free(p);
  }
}

/* The callee rejects the call: it never asks for the input, which rank 0 drops. */
static void test_rejected(uint64_t ctx) {
  float x[1000] = {0};
  int64_t sh[1] = {1000};
  weft_tensor tx = {.dtype = WEFT_DTYPE_FLOAT32, .ndim = 1, .shape = sh, .data = x, .device = WEFT_DEVICE_CPU};
  weft_remote_input in[1] = {{.tensor = &tx}};
  weft_remote_id o = new_id();
  weft_remote_call *c;
  char err[1024];
  int s0 = atomic_load(&g_sends), r0 = atomic_load(&g_recvs);
  CHECK(wf_remote_execute(g_r[0], 1, ctx, "nosuch", 1, in, 1, &o, 0, NULL, &c) == WEFT_OK, "execute");
  CHECK(finish(c, err, sizeof err) == WEFT_ERR_NOT_FOUND && strstr(err, "can't find program: nosuch"),
        "rejected: %s", err);
  weft_remote_call_free(c);
  quiet("rejected");
  CHECK(atomic_load(&g_sends) == s0 && atomic_load(&g_recvs) == r0, "rejected: %d sends, %d receives posted",
        atomic_load(&g_sends) - s0, atomic_load(&g_recvs) - r0);
}

/* A fetch cancelled before its (bulk) reply, the CANCEL lost: the callee
 * answers; the caller, which no longer knows the call, sends BULK_DROP and
 * the callee's hold on the object goes. */
static void test_fetch_cancelled(uint64_t ctx) {
  float x[1000];
  for (int i = 0; i < 1000; i++) x[i] = (float)i;
  int64_t sh[1] = {1000};
  weft_tensor tx = {.dtype = WEFT_DTYPE_FLOAT32, .ndim = 1, .shape = sh, .data = x, .device = WEFT_DEVICE_CPU};
  weft_remote_id q = new_id();
  weft_remote_call *cf, *cp;
  char err[1024];
  CHECK(wf_remote_fetch(g_r[0], 1, ctx, q, NULL, &cf) == WEFT_OK, "fetch"); /* waits: q is not there yet */
  sleep_s(0.05);
  atomic_store(&g_lose_cancels, 1);
  CHECK(weft_remote_cancel(cf) == WEFT_OK, "cancel");
  atomic_store(&g_lose_cancels, 0);
  int r0 = atomic_load(&g_recvs);
  /* the put makes q: the fetch job answers with the metadata */
  CHECK(wf_remote_put(g_r[0], 1, ctx, &tx, q, NULL, &cp) == WEFT_OK, "put");
  CHECK(finish(cp, err, sizeof err) == WEFT_OK, "put: %s", err);
  CHECK(weft_remote_test(cf) == WEFT_ERR_CANCELLED, "the cancelled fetch");
  weft_remote_call_free(cf), weft_remote_call_free(cp);
  quiet("fetch cancelled");
  CHECK(atomic_load(&g_recvs) - r0 == 1, "fetch cancelled: %d receives posted, want 1 (the put's)",
        atomic_load(&g_recvs) - r0);
  /* the same with the cancel certain to come after the reply: the fetch is freed once its reply is on its way */
  weft_remote_options o = WEFT_REMOTE_OPTIONS_INIT;
  r0 = atomic_load(&g_recvs);
  CHECK(wf_remote_fetch(g_r[0], 1, ctx, q, &o, &cf) == WEFT_OK, "fetch");
  CHECK(weft_remote_wait(cf, 10) == WEFT_OK, "fetch: %s", weft_remote_call_error(cf));
  weft_remote_call_free(cf);
  CHECK(atomic_load(&g_recvs) - r0 == 1, "the fetch posted %d receives", atomic_load(&g_recvs) - r0);
  quiet("fetch");
}

int main(void) {
  for (int i = 0; i < N; i++) {
    wf_remote_link link = {.ctx = &g_rank_of[i], .max_payload = 1 << 20, .send = link_send, .peer_lost = link_lost,
                           .bulk = link_bulk, .bulk_min = BULK_MIN};
    CHECK(wf_remote_new(i, N, &link, 30, 0.4, &g_r[i]) == WEFT_OK, "new");
  }
  CHECK(wf_remote_register(g_r[1], "add", 2, 1, fn_add, NULL) == WEFT_OK, "register");
  uint64_t ctx = 0;
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_CTX_CREATE, 0, 0, &ctx) == WEFT_OK, "context: %s", weft_last_error());
  test_sizes(ctx);
  test_rejected(ctx);
  test_fetch_cancelled(ctx);
  for (int i = 0; i < N; i++) wf_remote_free(g_r[i]);
  return unit_result("test_remote_bulk");
}

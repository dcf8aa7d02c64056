/* mp_p2p.c - point-to-point transfers (weft_send / weft_recv) between the
 * ranks of a world (2 to 4), checked against the senders' deterministic
 * payloads:
 *  - a ring shift (rank r sends to r+1) of every dtype at sizes 0, 1, 7,
 *    1000 and one large message (--large-mib, default 40: beyond the 32 MiB
 *    per-peer cap on early data), in both orders: sends submitted before the
 *    receives are posted (a synchronising allgather between), and receives
 *    posted first;
 *  - a burst of inline-sized sends (beyond the eager credit in total) before
 *    any receive is posted: every one arrives, in order;
 *  - two keys received in the opposite order of their sends;
 *  - WEFT_ANY_SOURCE: rank 0 receives one message from every other rank
 *    and weft_request_source names each sender;
 *  - a process set {0, last}: group ranks, not world ranks;
 *  - mismatches (element count; dtype with equal bytes): both sides fail
 *    with WEFT_ERR_MISMATCH naming both ranks and both values, and the
 *    world stays healthy (a later transfer under the same key works);
 *  - argument errors at submission (self, out of range, NULL, device).
 * With --abort, instead: rank 1 aborts while rank 0 waits in a recv from it
 * and a send to it: both fail with WEFT_ERR_ABORTED naming the reason.
 * With --timeout, instead (run with a short WEFT_TIMEOUT_SECONDS): rank 0's
 * recv that no one matches fails with WEFT_ERR_TIMEOUT naming the peer and
 * the key. With --bye, instead: rank 1 finalizes while rank 0 waits in a
 * recv from it and a send to it: both fail (WEFT_ERR_PEER_LOST, "shut down"). */
#include "mp_harness.c"
#include "mp_p2p_util.c"

static size_t g_large_mib = 40;
static int g_burst = 1800; /* --burst: 64 KiB messages in the burst case */

/* Ring shift of n elements of dtype t; send_first: sends go out, then an
 * allgather, then the receives are posted (else the reverse). */
static void ring_case(weft_dtype t, size_t n, int send_first, uint64_t seed) {
  mp_case("ring %s x %zu (%s first)", weft_dtype_name(t), n, send_first ? "send" : "recv");
  int to = (mp_rank + 1) % mp_size, from = (mp_rank + mp_size - 1) % mp_size;
  size_t es = mp_esize(t);
  void *out = mp_alloc(n * es), *in = mp_alloc(n * es);
  mp_fill(t, out, 0, n, mp_rank, 0, seed);
  memset(in, 0xee, n * es);
  int64_t s1[1], s2[1];
  weft_tensor to_send = tens(t, s1, n, out), to_recv = tens(t, s2, n, in);
  weft_request *sr = NULL, *rr = NULL;
  char sync[64];
  snprintf(sync, sizeof sync, "p2p.sync.%llu", (unsigned long long)seed);
  uint64_t key = seed;
  if (send_first) {
    isend(mp_group, &to_send, to, key, &sr, "send");
    if (!mp_same_everywhere(sync, 1)) mp_fatal("sync failed");
    irecv(mp_group, &to_recv, from, key, &rr, "recv");
  } else {
    irecv(mp_group, &to_recv, from, key, &rr, "recv");
    if (!mp_same_everywhere(sync, 1)) mp_fatal("sync failed");
    isend(mp_group, &to_send, to, key, &sr, "send");
  }
  if (mp_wait_ok(rr, "recv") && n) mp_check_fill(t, in, 0, n, from, 0, seed, "received");
  int src = -1;
  if (weft_request_source(rr, &src) != WEFT_OK || src != from) mp_fail("weft_request_source gave %d, want %d", src, from);
  mp_wait_ok(sr, "send");
  weft_request_free(sr);
  weft_request_free(rr);
  free(out);
  free(in);
  mp_case_end();
}

/* Resident memory of this process (bytes), from /proc/self/statm. */
static size_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, res = 0;
  if (!f || fscanf(f, "%lu %lu", &size, &res) != 2) res = 0;
  if (f) fclose(f);
  return (size_t)res * 4096;
}

/* COUNT inline-sized messages from every rank to the next before the
 * receives are posted: a rank holds at most the 32 MiB eager credit of what
 * it receives, plus at most as much of its own frames not yet read by its
 * neighbour (its resident memory grows by less than 80 MiB for the default
 * 112 MiB sent; without the credit, by all of it); later ones wait for
 * their receive; all arrive in order. */
static void burst_case(void) {
  enum { ELEMS = 16384 }; /* 1800 x 64 KiB (the default): 112 MiB, over three times the 32 MiB credit */
  const int COUNT = g_burst;
  mp_case("burst of %d x 64 KiB sends before any recv: at most the credit buffered", COUNT);
  int to = (mp_rank + 1) % mp_size, from = (mp_rank + mp_size - 1) % mp_size;
  float *out = mp_alloc((size_t)COUNT * ELEMS * 4), *in = mp_alloc((size_t)COUNT * ELEMS * 4);
  int64_t *shapes = mp_alloc(sizeof(int64_t) * 2 * COUNT);
  weft_request **sr = mp_alloc(sizeof *sr * COUNT), **rr = mp_alloc(sizeof *rr * COUNT);
  mp_fill(WEFT_DTYPE_FLOAT32, out, 0, (size_t)COUNT * ELEMS, mp_rank, 0, 77);
  memset(in, 0, (size_t)COUNT * ELEMS * 4); /* resident before the baseline */
  size_t rss0 = rss_bytes();
  for (int i = 0; i < COUNT; i++) {
    weft_tensor t = tens(WEFT_DTYPE_FLOAT32, &shapes[2 * i], ELEMS, out + (size_t)i * ELEMS);
    isend(mp_group, &t, to, 5, &sr[i], "burst send");
  }
  if (!mp_same_everywhere("p2p.burst", 1)) mp_fatal("sync failed");
  mp_sleep_ms(300); /* what the credit lets through has arrived */
  size_t grew = rss_bytes() - rss0;
#if defined(__has_feature) /* clang names its sanitizers so; GCC by the macros below */
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MP_P2P_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(MP_P2P_SANITIZED)
  rss0 = 0; /* sanitizers keep freed memory (quarantine) and shadow what is touched: resident memory says nothing */
#endif
  if (rss0 && grew > ((size_t)80 << 20))
    mp_fail("resident memory grew by %zu MiB with the receives not posted (the credit is 32 MiB)", grew >> 20);
  mp_say("INFO rank %d: early data held: resident memory +%zu MiB", mp_rank, grew >> 20);
  for (int i = 0; i < COUNT; i++) {
    weft_tensor t = tens(WEFT_DTYPE_FLOAT32, &shapes[2 * i + 1], ELEMS, in + (size_t)i * ELEMS);
    irecv(mp_group, &t, from, 5, &rr[i], "burst recv");
  }
  for (int i = 0; i < COUNT; i++) {
    mp_wait_ok(rr[i], "burst recv");
    mp_wait_ok(sr[i], "burst send");
    weft_request_free(rr[i]);
    weft_request_free(sr[i]);
  }
  mp_check_fill(WEFT_DTYPE_FLOAT32, in, 0, (size_t)COUNT * ELEMS, from, 0, 77, "burst");
  free(out), free(in), free(shapes), free(sr), free(rr);
  mp_case_end();
}

/* Keys 11 and 12 sent in that order; received 12 first. */
static void keys_case(void) {
  mp_case("two keys received in the opposite order");
  int to = (mp_rank + 1) % mp_size, from = (mp_rank + mp_size - 1) % mp_size;
  int64_t a[4] = {mp_rank * 10 + 1, 0, 0, 0}, b[4] = {mp_rank * 10 + 2, 0, 0, 0}, ra[4] = {0}, rb[4] = {0};
  int64_t s[4][1];
  weft_tensor ta = tens(WEFT_DTYPE_INT64, s[0], 4, a), tb = tens(WEFT_DTYPE_INT64, s[1], 4, b);
  weft_tensor tra = tens(WEFT_DTYPE_INT64, s[2], 4, ra), trb = tens(WEFT_DTYPE_INT64, s[3], 4, rb);
  weft_request *r[4];
  isend(mp_group, &ta, to, 11, &r[0], "send 11");
  isend(mp_group, &tb, to, 12, &r[1], "send 12");
  irecv(mp_group, &trb, from, 12, &r[2], "recv 12");
  mp_wait_ok(r[2], "recv 12");
  irecv(mp_group, &tra, from, 11, &r[3], "recv 11");
  for (int i = 0; i < 4; i++) {
    if (i != 2) mp_wait_ok(r[i], "keys");
    weft_request_free(r[i]);
  }
  if (ra[0] != from * 10 + 1 || rb[0] != from * 10 + 2)
    mp_fail("key 11 carried %lld, key 12 %lld; want %d and %d", (long long)ra[0], (long long)rb[0], from * 10 + 1,
            from * 10 + 2);
  mp_case_end();
}

static void any_source_case(void) {
  mp_case("WEFT_ANY_SOURCE at rank 0");
  int64_t s[1];
  if (mp_rank == 0) {
    int seen[64] = {0};
    for (int i = 1; i < mp_size; i++) {
      int32_t v = -1;
      weft_tensor t = tens(WEFT_DTYPE_INT32, s, 1, &v);
      weft_request *r;
      irecv(mp_group, &t, WEFT_ANY_SOURCE, 21, &r, "any recv");
      int src = -1;
      if (mp_wait_ok(r, "any recv") && weft_request_source(r, &src) == WEFT_OK) {
        if (src < 1 || src >= mp_size || v != 1000 + src || seen[src]++)
          mp_fail("message %d: source %d carried %d", i, src, (int)v);
      } else {
        mp_fail("weft_request_source: %s", weft_last_error());
      }
      weft_request_free(r);
    }
  } else {
    int32_t v = 1000 + mp_rank;
    weft_tensor t = tens(WEFT_DTYPE_INT32, s, 1, &v);
    weft_request *r;
    isend(mp_group, &t, 0, 21, &r, "send to 0");
    mp_wait_ok(r, "send to 0");
    weft_request_free(r);
  }
  mp_case_end();
}

static void group_case(void) {
  mp_case("process set {0, %d}", mp_size - 1);
  int ranks[2] = {0, mp_size - 1};
  if (mp_rank != 0 && mp_rank != mp_size - 1) {
    mp_case_end();
    return;
  }
  weft_group *g = NULL;
  weft_status st = weft_group_create(mp_world, ranks, 2, &g);
  if (st != WEFT_OK) mp_fatal("weft_group_create: %s", weft_last_error());
  double v = mp_rank == 0 ? 3.25 : 0, got = 0;
  int64_t s[1];
  weft_tensor t = tens(WEFT_DTYPE_FLOAT64, s, 1, mp_rank == 0 ? &v : &got);
  weft_request *r;
  if (mp_rank == 0) isend(g, &t, 1, 31, &r, "group send");
  else irecv(g, &t, 0, 31, &r, "group recv");
  mp_wait_ok(r, "group transfer");
  if (mp_rank != 0 && got != 3.25) mp_fail("received %g, want 3.25", got);
  int src = -1;
  if (mp_rank != 0 && (weft_request_source(r, &src) != WEFT_OK || src != 0)) mp_fail("source %d, want 0", src);
  weft_request_free(r);
  if (weft_group_destroy(g) != WEFT_OK) mp_fail("weft_group_destroy: %s", weft_last_error());
  mp_case_end();
}

static void argument_case(void) {
  mp_case("argument errors");
  int32_t v = 0;
  int64_t s[1];
  weft_tensor t = tens(WEFT_DTYPE_INT32, s, 1, &v);
  weft_request *r = NULL;
  struct {
    weft_status st;
    weft_status want;
    const char *what;
  } c[6];
  c[0].st = weft_send(mp_group, &t, mp_rank, 1, NULL, &r), c[0].want = WEFT_ERR_INVALID_ARGUMENT, c[0].what = "itself";
  c[1].st = weft_send(mp_group, &t, mp_size, 1, NULL, &r), c[1].want = WEFT_ERR_INVALID_ARGUMENT, c[1].what = "not a rank";
  c[2].st = weft_recv(mp_group, &t, -1, 1, NULL, &r), c[2].want = WEFT_ERR_INVALID_ARGUMENT, c[2].what = "not a rank";
  c[3].st = weft_send(mp_group, NULL, (mp_rank + 1) % mp_size, 1, NULL, &r), c[3].want = WEFT_ERR_INVALID_ARGUMENT,
  c[3].what = "NULL";
  weft_tensor d = t;
  d.device = 0;
  d.device_kind = WEFT_DEVICE_KIND_SIM;
  c[4].st = weft_send(mp_group, &d, (mp_rank + 1) % mp_size, 1, NULL, &r), c[4].want = WEFT_ERR_NOT_SUPPORTED,
  c[4].what = "host memory only";
  c[5].st = weft_send(NULL, &t, 0, 1, NULL, &r), c[5].want = WEFT_ERR_MISUSE, c[5].what = "group";
  for (int i = 0; i < 6; i++)
    if (c[i].st != c[i].want) mp_fail("case %d: %s, want %s", i, weft_status_string(c[i].st), weft_status_string(c[i].want));
  if (r) mp_fail("a refused submission returned a request");
  mp_case_end();
}

static int abort_mode(void) {
  mp_case("abort fails pending send and recv");
  int64_t s[2][1];
  int32_t v = 0, u = 0;
  weft_tensor t = tens(WEFT_DTYPE_INT32, s[0], 1, &v), t2 = tens(WEFT_DTYPE_INT32, s[1], 1, &u);
  if (mp_rank == 1) {
    if (!mp_same_everywhere("p2p.abort.ready", 1)) mp_fatal("sync failed");
    mp_sleep_ms(200);
    weft_abort(mp_world, "p2p test abort");
  } else if (mp_rank == 0) {
    weft_request *r, *q;
    irecv(mp_group, &t, 1, 7, &r, "recv");
    isend(mp_group, &t2, 1, 8, &q, "send");
    if (!mp_same_everywhere("p2p.abort.ready", 1)) mp_fatal("sync failed");
    weft_request *both[2] = {r, q};
    for (int i = 0; i < 2; i++) {
      weft_status st = weft_wait(both[i], 20.0);
      const char *msg = weft_request_error(both[i]);
      if (st != WEFT_ERR_ABORTED || !mp_contains(msg, "p2p test abort") || !mp_contains(msg, "rank 1"))
        mp_fail("%s: %s \"%s\", want ABORTED by rank 1 with the reason", i ? "send" : "recv", weft_status_string(st),
                msg);
      weft_request_free(both[i]);
    }
  } else {
    if (!mp_same_everywhere("p2p.abort.ready", 1)) mp_fatal("sync failed");
  }
  mp_case_end();
  weft_finalize(mp_world);
  mp_world = NULL;
  int n = atomic_load(&mp_failures);
  mp_say("%s rank %d: %d failure(s)", n ? "FAILED" : "DONE", mp_rank, n);
  return n ? 1 : 0;
}

static int timeout_mode(void) {
  mp_case("an unmatched recv times out naming the peer and key");
  if (mp_rank == 0) {
    int32_t v = 0;
    int64_t s[1];
    weft_tensor t = tens(WEFT_DTYPE_INT32, s, 1, &v);
    weft_request *r;
    irecv(mp_group, &t, 1, 99, &r, "recv");
    weft_status st = weft_wait(r, 30.0);
    const char *msg = weft_request_error(r);
    if (st != WEFT_ERR_TIMEOUT || !mp_contains(msg, "rank 1") || !mp_contains(msg, "key 99"))
      mp_fail("%s \"%s\", want TIMEOUT naming rank 1 and key 99", weft_status_string(st), msg);
    weft_request_free(r);
  } else {
    mp_sleep_ms(8000); /* stays (silent) past rank 0's deadline: its BYE would fail the recv first */
  }
  mp_case_end();
  weft_finalize(mp_world);
  mp_world = NULL;
  int n = atomic_load(&mp_failures);
  mp_say("%s rank %d: %d failure(s)", n ? "FAILED" : "DONE", mp_rank, n);
  return n ? 1 : 0;
}

/* Rank 1 finalizes while rank 0 waits in a recv from it and a send to it:
 * both fail with WEFT_ERR_PEER_LOST saying rank 1 shut down. */
static int bye_mode(void) {
  mp_case("a peer's finalize fails pending transfers with it");
  if (!mp_same_everywhere("p2p.bye.ready", 1)) mp_fatal("sync failed");
  if (mp_rank == 0) {
    int32_t v[3] = {0};
    int64_t s[3][1];
    weft_tensor t[3];
    weft_request *r[3];
    for (int i = 0; i < 3; i++) t[i] = tens(WEFT_DTYPE_INT32, s[i], 1, &v[i]);
    irecv(mp_group, &t[0], 1, 5, &r[0], "recv"); /* pending when rank 1 leaves */
    mp_sleep_ms(500);                            /* and these after its BYE was handled */
    isend(mp_group, &t[1], 1, 6, &r[1], "send");
    irecv(mp_group, &t[2], 1, 7, &r[2], "recv");
    static const char *what[3] = {"pending recv", "later send", "later recv"};
    for (int i = 0; i < 3; i++) {
      weft_status st = weft_wait(r[i], 10.0);
      const char *msg = weft_request_error(r[i]);
      if (st != WEFT_ERR_PEER_LOST || !mp_contains(msg, "rank 1") || !mp_contains(msg, "shut down"))
        mp_fail("%s: %s \"%s\", want PEER_LOST: rank 1 shut down", what[i], weft_status_string(st), msg);
      weft_request_free(r[i]);
    }
  }
  mp_case_end();
  return mp_teardown();
}

int main(int argc, char **argv) {
  int mode = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--large-mib") && i + 1 < argc) g_large_mib = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--burst") && i + 1 < argc) g_burst = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--abort")) mode = 1;
    else if (!strcmp(argv[i], "--timeout")) mode = 2;
    else if (!strcmp(argv[i], "--bye")) mode = 3;
  }
  mp_setup();
  if (mp_size < 2) {
    mp_case("p2p");
    mp_fail("needs at least 2 ranks");
    return mp_teardown();
  }
  if (mode == 1) return abort_mode();
  if (mode == 2) return timeout_mode();
  if (mode == 3) return bye_mode();
  argument_case();
  uint64_t seed = 1000;
  static const size_t sizes[] = {0, 1, 7, 1000};
  for (int t = 0; t < WEFT_DTYPE_COUNT_; t++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      for (int order = 0; order < 2; order++) ring_case((weft_dtype)t, sizes[i], order, seed++);
  size_t large = g_large_mib * 1024 * 1024 / 4 + 3; /* not a multiple of any chunk */
  ring_case(WEFT_DTYPE_FLOAT32, large, 1, seed++);
  ring_case(WEFT_DTYPE_FLOAT32, large, 0, seed++);
  burst_case();
  keys_case();
  any_source_case();
  group_case();
  mismatch_case("", WEFT_DTYPE_FLOAT32, 4, WEFT_DTYPE_FLOAT32, 5, 90);
  mismatch_case("", WEFT_DTYPE_FLOAT32, 4, WEFT_DTYPE_INT32, 4, 91);
  mismatch_case("", WEFT_DTYPE_INT8, 0, WEFT_DTYPE_INT8, 1, 92);
  return mp_teardown();
}

/* mp_p2p_fast.c - weft_send / weft_recv between ranks of one host through
 * the mailboxes (engine/p2p_fast.c: in the callers' threads, messages up to
 * 1 KiB copied, larger ones read across processes, or with WEFT_CMA=0 on
 * the engine's path) next to the engine's path, checked against the
 * senders' deterministic payloads, 2 to 4 ranks:
 *  - order across the two paths: under one key and pair, a sequence of
 *    large and small messages (small after large and large after small),
 *    sends submitted before the receives are posted and the reverse; each
 *    receive expects its own element count, so an overtaking message fails
 *    as a mismatch, and the payloads say which message arrived;
 *  - WEFT_ANY_SOURCE: rank 0 receives five int32 messages from every other
 *    rank, the second sent with a callback (the engine's path, and so the
 *    next ones until it completes); per sender they arrive in order, and
 *    weft_request_source names each;
 *  - a mismatch on the mailbox (count; dtype with equal bytes): both sides
 *    fail naming both ranks and values, the same key works afterwards;
 *  - a full mailbox: 200 small sends under key A and then one under key B
 *    to the next rank before it posts anything; it receives key B first (its
 *    message went the engine's way behind the full ring), then all of A in
 *    order: no deadlock, no loss;
 *  - all to all: every rank sends 5 small messages to every other rank under
 *    two keys, receives by source and by any source; all arrive, in order;
 *  - large messages both ways (a ring shift of 1 MiB messages, beyond the
 *    mailbox's read limit, 256 KiB): each rank posts its receive before it
 *    sends, so its send is read across processes by the next rank
 *    (p2p_paths.sh counts exactly K_BIG such reads per rank); then one 1 MiB
 *    message one way, with no large receive posted on the sender: the
 *    engine's path (not counted);
 *  - a large send whose buffer is unmapped before the receiver reads it
 *    (a caller's bug): both sides fail, naming each other; the key works
 *    again after (not with WEFT_CMA=0: the engine's path reads the buffer
 *    on the sender's side, which would fault).
 * With --kill, instead (3 ranks): rank 2 SIGKILLs itself while rank 1's
 * small send to it sits unmatched in its mailbox (and its own small send to
 * rank 0 in rank 0's): rank 1's send fails naming rank 2, and so do rank 0's
 * and rank 1's later receives from it. */
#include <sys/mman.h>

#include "mp_harness.c"
#include "mp_p2p_util.c"

/* float32 element counts: 20000 (80 KB) are read across processes from the
 * mailbox (with WEFT_CMA=0: take the engine's path); the rest (at most 256
 * = 1 KiB) are copied through it. Small after large, large after small,
 * runs of each. */
static const size_t k_seq[] = {2, 256, 20000, 1, 20000, 20000, 3, 257, 2, 20000, 1};
#define NSEQ (sizeof k_seq / sizeof k_seq[0])

static void order_case(int send_first, uint64_t seed) {
  mp_case("order under one key across mailbox and engine path (%s first)", send_first ? "sends" : "recvs");
  int to = (mp_rank + 1) % mp_size, from = (mp_rank + mp_size - 1) % mp_size;
  float *out[NSEQ], *in[NSEQ];
  int64_t s[2 * NSEQ];
  weft_request *sr[NSEQ], *rr[NSEQ];
  weft_tensor ts[NSEQ], tr[NSEQ];
  for (size_t i = 0; i < NSEQ; i++) {
    out[i] = mp_alloc(k_seq[i] * 4);
    in[i] = mp_alloc(k_seq[i] * 4);
    mp_fill(WEFT_DTYPE_FLOAT32, out[i], 0, k_seq[i], mp_rank, 0, seed + i);
    memset(in[i], 0xee, k_seq[i] * 4);
    ts[i] = tens(WEFT_DTYPE_FLOAT32, &s[2 * i], k_seq[i], out[i]);
    tr[i] = tens(WEFT_DTYPE_FLOAT32, &s[2 * i + 1], k_seq[i], in[i]);
  }
  char sync[64];
  snprintf(sync, sizeof sync, "fast.order.%llu", (unsigned long long)seed);
  for (int pass = 0; pass < 2; pass++) {
    if (pass == (send_first ? 0 : 1))
      for (size_t i = 0; i < NSEQ; i++) isend(mp_group, &ts[i], to, seed, &sr[i], "send");
    else
      for (size_t i = 0; i < NSEQ; i++) irecv(mp_group, &tr[i], from, seed, &rr[i], "recv");
    if (pass == 0 && !mp_same_everywhere(sync, 1)) mp_fatal("sync failed");
  }
  for (size_t i = 0; i < NSEQ; i++) {
    char what[64];
    snprintf(what, sizeof what, "message %zu (%zu elements)", i, k_seq[i]);
    if (mp_wait_ok(rr[i], what)) mp_check_fill(WEFT_DTYPE_FLOAT32, in[i], 0, k_seq[i], from, 0, seed + i, what);
    mp_wait_ok(sr[i], what);
    weft_request_free(sr[i]);
    weft_request_free(rr[i]);
    free(out[i]);
    free(in[i]);
  }
  mp_case_end();
}

/* Large messages: see the header. */
enum { K_BIG = 3, BIG_N = 1 << 18 }; /* float32: 1 MiB */

static void big_case(void) {
  mp_case("1 MiB messages both ways (ring shift), then one way");
  int to = (mp_rank + 1) % mp_size, from = (mp_rank + mp_size - 1) % mp_size;
  float *out = mp_alloc(BIG_N * 4), *in = mp_alloc(BIG_N * 4);
  int64_t s[2];
  weft_tensor ts = tens(WEFT_DTYPE_FLOAT32, &s[0], BIG_N, out), tr = tens(WEFT_DTYPE_FLOAT32, &s[1], BIG_N, in);
  for (int it = 0; it < K_BIG; it++) {
    weft_request *sr = NULL, *rr = NULL;
    mp_fill(WEFT_DTYPE_FLOAT32, out, 0, BIG_N, mp_rank, 0, 7000 + (uint64_t)it);
    memset(in, 0xee, BIG_N * 4);
    irecv(mp_group, &tr, from, 77, &rr, "big recv");
    isend(mp_group, &ts, to, 77, &sr, "big send");
    char what[64];
    snprintf(what, sizeof what, "big message %d", it);
    mp_wait_ok(sr, what); /* the send first: it completes only once the next rank read it */
    if (mp_wait_ok(rr, what)) mp_check_fill(WEFT_DTYPE_FLOAT32, in, 0, BIG_N, from, 0, 7000 + (uint64_t)it, what);
    weft_request_free(sr);
    weft_request_free(rr);
  }
  if (!mp_same_everywhere("fast.big.ring", 1)) mp_fatal("sync failed");
  weft_request *r = NULL;
  if (mp_rank == 0) {
    mp_fill(WEFT_DTYPE_FLOAT32, out, 0, BIG_N, 0, 0, 7100);
    isend(mp_group, &ts, 1, 78, &r, "one-way send");
    mp_wait_ok(r, "one-way send");
    weft_request_free(r);
  } else if (mp_rank == 1) {
    irecv(mp_group, &tr, 0, 78, &r, "one-way recv");
    if (mp_wait_ok(r, "one-way recv")) mp_check_fill(WEFT_DTYPE_FLOAT32, in, 0, BIG_N, 0, 0, 7100, "one-way recv");
    weft_request_free(r);
  }
  free(out);
  free(in);
  mp_case_end();
}

static void count_done(weft_request *r, weft_status st, void *arg) {
  (void)r;
  if (st == WEFT_OK) atomic_fetch_add((atomic_int *)arg, 1);
}

/* Rank 0 receives from any source: every other rank sends NMSG int32
 * values 100*rank + j, message 1 with a callback (so it, and those behind
 * it until it completes, take the engine's path; the others the mailbox). */
static void any_source_case(void) {
  enum { NMSG = 5 };
  mp_case("WEFT_ANY_SOURCE over the mailboxes and the engine path");
  int64_t s[NMSG];
  if (mp_rank == 0) {
    int next[64] = {0};
    int total = (mp_size - 1) * NMSG;
    for (int i = 0; i < total; i++) {
      int32_t v = -1;
      weft_tensor t = tens(WEFT_DTYPE_INT32, s, 1, &v);
      weft_request *r;
      irecv(mp_group, &t, WEFT_ANY_SOURCE, 61, &r, "any recv");
      int src = -1;
      if (mp_wait_ok(r, "any recv") && weft_request_source(r, &src) == WEFT_OK) {
        if (src < 1 || src >= mp_size || v != 100 * src + next[src])
          mp_fail("message %d: source %d carried %d, want %d", i, src, (int)v,
                  src >= 1 && src < mp_size ? 100 * src + next[src] : -1);
        else next[src]++;
      } else {
        mp_fail("any recv: weft_request_source: %s", weft_last_error());
      }
      weft_request_free(r);
    }
  } else {
    weft_request *r[NMSG];
    int32_t v[NMSG];
    atomic_int called = 0;
    weft_op_options cb = WEFT_OP_OPTIONS_INIT;
    cb.callback = count_done;
    cb.user_data = &called;
    for (int j = 0; j < NMSG; j++) {
      v[j] = 100 * mp_rank + j;
      weft_tensor t = tens(WEFT_DTYPE_INT32, &s[j], 1, &v[j]);
      mp_submitted(weft_send(mp_group, &t, 0, 61, j == 1 ? &cb : NULL, &r[j]), &r[j], "send to 0");
    }
    for (int j = 0; j < NMSG; j++) {
      mp_wait_ok(r[j], "send to 0");
      weft_request_free(r[j]);
    }
    /* bounded: 20 s (16 ranks on 2 cores may take seconds to run the engine) */
    for (int i = 0; i < 4000 && atomic_load(&called) != 1; i++) mp_sleep_ms(5);
    if (atomic_load(&called) != 1) mp_fail("the send's callback ran %d times", atomic_load(&called));
  }
  mp_case_end();
}

/* More small sends than a mailbox holds, before the receiver posts
 * anything, then one under another key, received first. */
static void full_case(void) {
  enum { N = 200 };
  mp_case("full mailbox: %d small sends before any recv, another key received first", N);
  int to = (mp_rank + 1) % mp_size, from = (mp_rank + mp_size - 1) % mp_size;
  int64_t out[N], in[N], s[2 * N + 2], xb = 7000 + mp_rank, rb = -1;
  weft_request *sr[N + 1], *rr[N + 1];
  for (int i = 0; i < N; i++) {
    out[i] = (int64_t)mp_rank * 100000 + i;
    in[i] = -1;
    weft_tensor t = tens(WEFT_DTYPE_INT64, &s[i], 1, &out[i]);
    isend(mp_group, &t, to, 71, &sr[i], "send A");
  }
  weft_tensor tb = tens(WEFT_DTYPE_INT64, &s[2 * N], 1, &xb);
  isend(mp_group, &tb, to, 72, &sr[N], "send B");
  if (!mp_same_everywhere("fast.full", 1)) mp_fatal("sync failed");
  weft_tensor trb = tens(WEFT_DTYPE_INT64, &s[2 * N + 1], 1, &rb);
  irecv(mp_group, &trb, from, 72, &rr[N], "recv B");
  if (mp_wait_ok(rr[N], "recv B") && rb != 7000 + from) mp_fail("key B carried %lld, want %d", (long long)rb, 7000 + from);
  for (int i = 0; i < N; i++) {
    weft_tensor t = tens(WEFT_DTYPE_INT64, &s[N + i], 1, &in[i]);
    irecv(mp_group, &t, from, 71, &rr[i], "recv A");
  }
  for (int i = 0; i <= N; i++) {
    if (i < N && mp_wait_ok(rr[i], "recv A") && in[i] != (int64_t)from * 100000 + i)
      mp_fail("message %d under key A carried %lld, want %lld", i, (long long)in[i], (long long)from * 100000 + i);
    mp_wait_ok(sr[i], "send");
    weft_request_free(sr[i]);
    weft_request_free(rr[i]);
  }
  mp_case_end();
}

/* Every rank sends M small messages to every other rank, alternating keys
 * 81 and 82; receives key 81 by source, key 82 from any source. */
static void all_to_all_case(void) {
  enum { M = 5, MAXR = 16 };
  mp_case("all to all: %d small messages per pair", M);
  if (mp_size > MAXR) mp_fatal("at most %d ranks", MAXR);
  int32_t out[MAXR][M], in81[MAXR][M], in82[MAXR * M];
  int64_t s[2 * MAXR * M];
  weft_request *sr[MAXR * M], *rr[MAXR * M];
  int ns = 0, nr = 0;
  /* receives first for half the keys (posted), sends, then the rest */
  for (int p = 0; p < mp_size; p++) {
    if (p == mp_rank) continue;
    for (int j = 0; j < M; j += 2) {
      in81[p][j / 2] = -1;
      weft_tensor t = tens(WEFT_DTYPE_INT32, &s[nr], 1, &in81[p][j / 2]);
      irecv(mp_group, &t, p, 81, &rr[nr++], "recv 81");
    }
  }
  for (int j = 0; j < M; j++)
    for (int q = 1; q < mp_size; q++) {
      int p = (mp_rank + q) % mp_size;
      out[p][j] = 1000 * mp_rank + 10 * p + j;
      weft_tensor t = tens(WEFT_DTYPE_INT32, &s[MAXR * M + ns], 1, &out[p][j]);
      isend(mp_group, &t, p, j % 2 ? 82 : 81, &sr[ns++], "send");
    }
  int n82 = 0;
  for (int i = 0; i < (mp_size - 1) * (M / 2); i++) {
    in82[i] = -1;
    weft_tensor t = tens(WEFT_DTYPE_INT32, &s[nr], 1, &in82[i]);
    irecv(mp_group, &t, WEFT_ANY_SOURCE, 82, &rr[nr++], "recv 82");
    n82++;
  }
  for (int i = 0; i < nr; i++) mp_wait_ok(rr[i], "recv");
  for (int i = 0; i < ns; i++) mp_wait_ok(sr[i], "send");
  int k = 0;
  for (int p = 0; p < mp_size; p++) {
    if (p == mp_rank) continue;
    for (int j = 0; j < M; j += 2, k++)
      if (in81[p][j / 2] != 1000 * p + 10 * mp_rank + j)
        mp_fail("key 81 message %d from rank %d carried %d, want %d", j / 2, p, (int)in81[p][j / 2],
                1000 * p + 10 * mp_rank + j);
  }
  int last[MAXR];
  for (int p = 0; p < MAXR; p++) last[p] = -1;
  for (int i = 0; i < n82; i++) { /* from any source: per source in order */
    int v = in82[i], p = v / 1000, j = v % 10;
    int src = -1;
    weft_request_source(rr[k + i], &src);
    if (p < 0 || p >= mp_size || p == mp_rank || src != p || v != 1000 * p + 10 * mp_rank + j || j % 2 != 1 ||
        j <= last[p])
      mp_fail("key 82 receive %d: %d from rank %d (source %d); all: %d %d %d %d %d %d", i, v, p, src, in82[0], in82[1],
              in82[2], n82 > 3 ? in82[3] : -1, n82 > 4 ? in82[4] : -1, n82 > 5 ? in82[5] : -1);
    else last[p] = j;
  }
  for (int i = 0; i < nr; i++) weft_request_free(rr[i]);
  for (int i = 0; i < ns; i++) weft_request_free(sr[i]);
  mp_case_end();
}

/* --kill: see the header. */
static void expect_lost(weft_request *r, weft_status submitted, double t0, const char *what) {
  if (submitted != WEFT_OK) { /* the world had failed already: refused at once */
    if (!mp_contains(weft_last_error(), "rank 2")) mp_fail("%s: refused with \"%s\", not naming rank 2", what, weft_last_error());
    return;
  }
  weft_status st = weft_wait(r, 12.0);
  mp_expect_lost(st, weft_request_error(r), t0, 12.0, "rank 2", what);
  weft_request_free(r);
}

static int kill_rank(void) {
  mp_setup();
  if (mp_size != 3) mp_fatal("--kill runs on 3 ranks");
  int32_t v = 5 + mp_rank, u = 0;
  int64_t s[2];
  weft_tensor t = tens(WEFT_DTYPE_INT32, &s[0], 1, &v), tr = tens(WEFT_DTYPE_INT32, &s[1], 1, &u);
  weft_request *r = NULL, *q = NULL;
  mp_case("small sends left unmatched in the mailboxes");
  if (mp_rank == 2) isend(mp_group, &t, 0, 91, &r, "send to 0"); /* sits in rank 0's mailbox */
  if (mp_rank == 1) isend(mp_group, &t, 2, 92, &r, "send to 2"); /* sits in rank 2's mailbox */
  if (!mp_same_everywhere("fast.kill.sent", 1)) mp_fatal("sync failed");
  mp_case_end();
  if (mp_rank == 2) {
    mp_sleep_ms(100);
    mp_die_by_sigkill();
  }
  mp_case("survivor: transfers with the dead rank 2 fail naming it");
  double t0 = mp_now();
  if (mp_rank == 1) expect_lost(r, WEFT_OK, t0, "send sitting in its mailbox");
  weft_status st = weft_recv(mp_group, &tr, 2, 93, NULL, &q);
  expect_lost(q, st, t0, "recv from it");
  mp_case_end();
  mp_case("survivor: finalize within 2 s");
  mp_finalize_within(2.0);
  mp_case_end();
  return mp_exit_status();
}

/* A send whose buffer is unmapped before the receiver reads it (a caller's
 * bug: the buffer is the library's until the send completes): rank 0's
 * receive fails naming rank 1 and the cross-memory read, rank 1's send
 * fails saying its buffer could not be read; the key then works again. */
static void unread_case(void) {
  mp_case("a 64 KiB send whose buffer is gone before it is read fails on both sides");
  enum { N = 16384 };
  size_t bytes = N * sizeof(int32_t);
  int64_t s[2];
  weft_request *r = NULL;
  if (mp_rank == 1) {
    int32_t *b = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) mp_fatal("mmap: %s", strerror(errno));
    for (int i = 0; i < N; i++) b[i] = i;
    weft_tensor t = tens(WEFT_DTYPE_INT32, &s[0], N, b);
    isend(mp_group, &t, 0, 95, &r, "send");
    munmap(b, bytes);
  }
  if (!mp_same_everywhere("fast.unread.sent", 1)) mp_fatal("sync failed");
  int32_t *in = mp_alloc(bytes);
  weft_tensor ti = tens(WEFT_DTYPE_INT32, &s[1], N, in);
  if (mp_rank == 0) {
    irecv(mp_group, &ti, 1, 95, &r, "recv");
    weft_status st = mp_wait(r, "recv");
    const char *m = weft_request_error(r);
    if (st != WEFT_ERR_SYSTEM || !mp_contains(m, "rank 1") || !mp_contains(m, "cross-memory read"))
      mp_fail("recv: %s (%s), expected WEFT_ERR_SYSTEM naming rank 1 and the cross-memory read",
              weft_status_string(st), m ? m : "");
    weft_request_free(r);
  } else if (mp_rank == 1) {
    weft_status st = mp_wait(r, "send");
    const char *m = weft_request_error(r);
    if (st != WEFT_ERR_SYSTEM || !mp_contains(m, "rank 0") || !mp_contains(m, "could not read"))
      mp_fail("send: %s (%s), expected WEFT_ERR_SYSTEM naming rank 0 and the failed read", weft_status_string(st),
              m ? m : "");
    weft_request_free(r);
  }
  /* the key again, with a live buffer */
  for (int i = 0; i < N; i++) in[i] = mp_rank == 1 ? 3 * i : -1;
  if (mp_rank == 1) {
    weft_tensor t = tens(WEFT_DTYPE_INT32, &s[0], N, in);
    isend(mp_group, &t, 0, 95, &r, "send again");
    if (mp_wait(r, "send again") != WEFT_OK) mp_fail("send again: %s", weft_request_error(r));
    weft_request_free(r);
  } else if (mp_rank == 0) {
    irecv(mp_group, &ti, 1, 95, &r, "recv again");
    if (mp_wait(r, "recv again") != WEFT_OK) mp_fail("recv again: %s", weft_request_error(r));
    weft_request_free(r);
    for (int i = 0; i < N; i++)
      if (in[i] != 3 * i) {
        mp_fail("recv again: element %d is %d, expected %d", i, in[i], 3 * i);
        break;
      }
  }
  free(in);
  mp_case_end();
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && !strcmp(argv[1], "--kill")) return mp_supervised(kill_rank);
  mp_setup();
  if (mp_size < 2) {
    mp_case("p2p fast");
    mp_fail("needs at least 2 ranks");
    return mp_teardown();
  }
  order_case(1, 4000);
  order_case(0, 4100);
  any_source_case();
  mismatch_case("mailbox ", WEFT_DTYPE_FLOAT32, 2, WEFT_DTYPE_FLOAT32, 3, 51);
  mismatch_case("mailbox ", WEFT_DTYPE_FLOAT32, 4, WEFT_DTYPE_INT32, 4, 52);
  full_case();
  all_to_all_case();
  big_case();
  if (getenv("WEFT_CMA") == NULL || strcmp(getenv("WEFT_CMA"), "0") != 0) unread_case(); /* (engine path: copied at send) */
  return mp_teardown();
}

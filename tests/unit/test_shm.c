/* test_shm.c - the shared-memory transport (transport/shm.h) with real
 * processes (harness: test_shm_common.h). Covered: no file left in /dev/shm,
 * all sizes around the slot size and 10 MiB between all pairs with receives
 * posted before and after the data, two hosts in one world, backpressure,
 * cancel_data, incomplete(), protocol errors, blocking waits (CPU time,
 * wake-up latency, interrupt), and informational latency / bandwidth
 * numbers. Setups that fail and ranks killed during setup or transfer:
 * test_shm_faults.c. */
#include "test_shm_common.h"

/* ------------------------------------------------------------------ scenarios */

/* Setup alone: no file after create on any rank, is_local, and destroy. */
static void sc_setup(ctx *c) {
  mk_or_die(c, 0, 0, WF_SHM_COPY_AUTO);
  CHECK(shm_files(c->job) == 0, "a segment file exists after wf_shm_create returned");
  for (int r = 0; r < c->n; r++)
    CHECK(wf_shm_is_local(c->s, r) == (r != c->rank), "is_local(%d) on rank %d", r, c->rank);
  CHECK(!wf_shm_is_local(c->s, -1) && !wf_shm_is_local(c->s, c->n), "is_local out of range");
  barrier(c); /* nobody unmaps before everyone checked */
  unmk(c);
}

/* Two simulated hosts in a world of 4: {0,2} and {1,3}, one segment each. */
static void sc_two_hosts(ctx *c) {
  c->nlocal = 2;
  c->local[0] = c->rank % 2;
  c->local[1] = c->rank % 2 + 2;
  mk_or_die(c, 4096, 4, WF_SHM_COPY_AUTO);
  int other = (c->rank + 2) % 4, pending = 0;
  for (int r = 0; r < 4; r++) CHECK(wf_shm_is_local(c->s, r) == (r == other), "is_local(%d) on rank %d", r, c->rank);
  uint8_t sb[5000], rb[5000];
  fill(sb, sizeof sb, tag_of(c->rank, other, 1, 0));
  CHECK(c->t->ops->send(c->t, (c->rank + 1) % 4, 1, 0, sb, 1, &pending) == WEFT_ERR_INVALID_ARGUMENT,
        "send to a rank on another host");
  CHECK(c->t->ops->send(c->t, other, 1, 0, sb, sizeof sb, &pending) == WEFT_OK, "send");
  CHECK(c->t->ops->recv(c->t, other, 1, 0, rb, sizeof rb, &pending) == WEFT_OK, "recv");
  CHECK(drive(c, &pending, 10), "transfer did not complete");
  CHECK(verify(rb, sizeof rb, tag_of(other, c->rank, 1, 0)) < 0, "wrong data");
  unmk(c);
}

typedef struct msg_arg {
  size_t slot, nslots; /* 0: defaults (64 KiB slots) */
  int order;           /* 0 receives first, 1 sends first (receives posted after data arrived), 2 interleaved */
} msg_arg;

#define NSIZES 7
/* Sizes 0, 1, 7, slot-1, slot, slot+1 and 10 MiB (BIG_MSG) between all pairs. */
static void sc_messages(ctx *c) {
  const msg_arg *a = c->arg;
  mk_or_die(c, a->slot, a->nslots, WF_SHM_COPY_AUTO);
  size_t slot = a->slot ? a->slot : 65536;
  size_t sizes[NSIZES] = {0, 1, 7, slot - 1, slot, slot + 1, BIG_MSG};
  uint8_t *sb[MAXN][NSIZES] = {{0}}, *rb[MAXN][NSIZES] = {{0}};
  const uint64_t seq = 42;
  for (int p = 0; p < c->n; p++) {
    if (p == c->rank) continue;
    for (int k = 0; k < NSIZES; k++) {
      sb[p][k] = malloc(sizes[k] + 1);
      rb[p][k] = malloc(sizes[k] + 16);
      fill(sb[p][k], sizes[k], tag_of(c->rank, p, seq, (uint32_t)k));
      memset(rb[p][k], 0xab, sizes[k] + 16);
    }
  }
  int pending = 0;
#define SEND(p, k) CHECK(c->t->ops->send(c->t, p, seq, (uint32_t)(k), sb[p][k], sizes[k], &pending) == WEFT_OK, "send")
#define RECV(p, k) CHECK(c->t->ops->recv(c->t, p, seq, (uint32_t)(k), rb[p][k], sizes[k], &pending) == WEFT_OK, "recv")
  if (a->order == 0) {
    for (int p = 0; p < c->n; p++)
      for (int k = 0; p != c->rank && k < NSIZES; k++) RECV(p, k);
    for (int p = 0; p < c->n; p++)
      if (p != c->rank) CHECK(c->t->ops->incomplete(c->t, p) == 1, "no incomplete receive from %d", p);
    barrier(c);
    for (int p = 0; p < c->n; p++)
      for (int k = 0; p != c->rank && k < NSIZES; k++) SEND(p, k);
  } else if (a->order == 1) {
    for (int p = 0; p < c->n; p++)
      for (int k = 0; p != c->rank && k < NSIZES; k++) SEND(p, k);
    drive_for(c, 0.03); /* fill the rings: nobody has posted a receive */
    for (int p = 0; p < c->n; p++) /* at least the 10 MiB one waits for its receiver */
      if (p != c->rank) CHECK(c->t->ops->incomplete(c->t, p) == 1, "all sends to %d completed without receives", p);
    barrier(c);
    for (int p = 0; p < c->n; p++)
      for (int k = 0; p != c->rank && k < NSIZES; k++) RECV(p, k);
  } else {
    for (int k = 0; k < NSIZES; k++)
      for (int i = 1; i < c->n; i++) {
        int to = (c->rank + i) % c->n, from = (c->rank - i + c->n) % c->n;
        if ((c->rank + k) % 2) {
          SEND(to, k);
          RECV(from, k);
        } else {
          RECV(from, k);
          SEND(to, k);
        }
      }
  }
  CHECK(drive(c, &pending, 20), "%d transfers did not complete", pending);
  for (int p = 0; p < c->n; p++) {
    if (p == c->rank) continue;
    CHECK(!c->t->ops->incomplete(c->t, p), "incomplete(%d) after completion", p);
    for (int k = 0; k < NSIZES; k++) {
      long bad = verify(rb[p][k], sizes[k], tag_of(p, c->rank, seq, (uint32_t)k));
      CHECK(bad < 0, "message %d (%zu bytes) from rank %d: wrong byte at %ld", k, sizes[k], p, bad);
      for (int g = 0; g < 16; g++) CHECK(rb[p][k][sizes[k] + g] == 0xab, "receive buffer overrun");
      free(sb[p][k]);
      free(rb[p][k]);
    }
  }
  barrier(c);
  unmk(c);
#undef SEND
#undef RECV
}

/* 64 MiB to a receiver that posts 100 ms late: the send waits in the ring. */
static void sc_backpressure(ctx *c) {
  mk_or_die(c, 0, 0, WF_SHM_COPY_AUTO);
  size_t len = 64 * MIB;
  uint8_t *b = malloc(len);
  int pending = 0;
  if (c->rank == 0) {
    fill(b, len, tag_of(0, 1, 1, 0));
    CHECK(c->t->ops->send(c->t, 1, 1, 0, b, len, &pending) == WEFT_OK, "send");
    drive_for(c, 0.1);
    CHECK(pending == 1 && c->t->ops->incomplete(c->t, 1), "the send completed without a receiver");
    signal_peer(c, 1);
    CHECK(drive(c, &pending, 20), "send did not complete");
  } else {
    await_peer(c, 0);
    CHECK(c->t->ops->recv(c->t, 0, 1, 0, b, len, &pending) == WEFT_OK, "recv");
    CHECK(drive(c, &pending, 20), "receive did not complete");
    long bad = verify(b, len, tag_of(0, 1, 1, 0));
    CHECK(bad < 0, "wrong byte at %ld", bad);
  }
  free(b);
  barrier(c);
  unmk(c);
}

/* cancel_data on the sender with a send half in the ring, then on the
 * receiver with a receive half filled; the next collective still works. */
static void sc_cancel(ctx *c) {
  mk_or_die(c, 4096, 4, WF_SHM_COPY_AUTO);
  size_t big = 8 * MIB, small = 1000;
  uint8_t sm[1000];
  int pending = 0;
  /* 1: sender cancels; the receiver never posted seq 5. */
  if (c->rank == 0) {
    uint8_t *b = malloc(big);
    fill(b, big, 1);
    CHECK(c->t->ops->send(c->t, 1, 5, 0, b, big, &pending) == WEFT_OK, "send");
    drive_for(c, 0.02);
    CHECK(pending == 1 && c->t->ops->incomplete(c->t, 1) == 1, "send not pending");
    c->t->ops->cancel_data(c->t);
    CHECK(c->t->ops->incomplete(c->t, 1) == 0, "incomplete after cancel_data");
    free(b); /* ASan: the transport must not touch it any more */
    drive_for(c, 0.01);
    pending = 0;
    signal_peer(c, 1);
    fill(sm, small, tag_of(0, 1, 6, 0));
    CHECK(c->t->ops->send(c->t, 1, 6, 0, sm, small, &pending) == WEFT_OK, "send");
    CHECK(drive(c, &pending, 10), "send after cancel did not complete");
  } else {
    await_peer(c, 0);
    memset(sm, 0, small);
    CHECK(c->t->ops->recv(c->t, 0, 6, 0, sm, small, &pending) == WEFT_OK, "recv");
    CHECK(drive(c, &pending, 10), "receive after the sender cancelled did not complete");
    CHECK(verify(sm, small, tag_of(0, 1, 6, 0)) < 0, "wrong data after the sender cancelled");
  }
  barrier(c);
  /* 2: receiver cancels a half-filled receive of seq 7; seq 8 follows. */
  pending = 0;
  if (c->rank == 0) {
    uint8_t *b = malloc(big);
    fill(b, big, tag_of(0, 1, 7, 0));
    fill(sm, small, tag_of(0, 1, 8, 0));
    CHECK(c->t->ops->send(c->t, 1, 7, 0, b, big, &pending) == WEFT_OK, "send");
    CHECK(c->t->ops->send(c->t, 1, 8, 0, sm, small, &pending) == WEFT_OK, "send");
    signal_peer(c, 1); /* the ring is full; no progress until the receiver cancelled */
    await_peer(c, 1);
    CHECK(drive(c, &pending, 10), "sends did not complete after the receiver cancelled");
    free(b);
  } else {
    uint8_t *b = calloc(1, big);
    await_peer(c, 0);
    CHECK(c->t->ops->recv(c->t, 0, 7, 0, b, big, &pending) == WEFT_OK, "recv");
    CHECK(pending == 1 && c->t->ops->incomplete(c->t, 0) == 1, "receive not pending");
    CHECK(verify(b, 4096, tag_of(0, 1, 7, 0)) < 0, "first slot not received");
    c->t->ops->cancel_data(c->t);
    CHECK(c->t->ops->incomplete(c->t, 0) == 0, "incomplete after cancel_data");
    free(b);
    pending = 0;
    signal_peer(c, 0);
    memset(sm, 0, small);
    CHECK(c->t->ops->recv(c->t, 0, 8, 0, sm, small, &pending) == WEFT_OK, "recv");
    CHECK(drive(c, &pending, 10), "receive after cancel did not complete");
    CHECK(verify(sm, small, tag_of(0, 1, 8, 0)) < 0, "wrong data after the receiver cancelled");
  }
  barrier(c);
  unmk(c);
}

/* A length mismatch is a protocol error: on_error fires, the pair is dead. */
static void sc_protocol(ctx *c) {
  mk_or_die(c, 4096, 4, WF_SHM_COPY_AUTO);
  uint8_t b[200];
  int pending = 0;
  if (c->rank == 0) {
    CHECK(c->t->ops->send(c->t, 1, 1, 0, b, 100, &pending) == WEFT_OK, "send");
    CHECK(pending == 0, "a 100-byte send did not complete at once");
  } else {
    CHECK(c->t->ops->recv(c->t, 0, 1, 0, b, 200, &pending) == WEFT_OK, "recv");
    drive_for(c, 0.05);
    CHECK(g_rep->errors_seen == 1, "on_error called %d times", g_rep->errors_seen);
    CHECK(c->t->ops->recv(c->t, 0, 2, 0, b, 10, &pending) == WEFT_ERR_PROTOCOL, "recv on a broken pair");
    c->t->ops->cancel_data(c->t);
  }
  barrier(c);
  unmk(c);
}

static void *interrupter(void *arg) {
  usleep(30000);
  wf_shm_interrupt(arg);
  return NULL;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* wf_shm_wait: sleeps without burning CPU, wakes promptly on data, returns
 * at once when there is work or an interrupt. */
static void sc_wait(ctx *c) {
  mk_or_die(c, 4096, 4, WF_SHM_COPY_AUTO);
  enum { ITERS = 20 };
  int pending = 0;
  if (c->rank == 1) {
    double w0 = now_s(), c0 = cpu_s();
    int calls = 0;
    while (now_s() - w0 < 0.3) {
      wf_shm_wait(c->s, 100000000);
      calls++;
    }
    double wall = now_s() - w0, cpu = cpu_s() - c0;
    g_rep->cpu_frac = cpu / wall;
    CHECK(cpu < 0.25 * wall, "idle wait burned %.3f s of CPU in %.3f s", cpu, wall);
    CHECK(calls <= 10, "an idle 100 ms wait returned early: %d calls in %.3f s", calls, wall);
    double lat[ITERS];
    for (int i = 0; i < ITERS; i++) {
      int64_t t0 = 0, t1 = 0;
      CHECK(c->t->ops->recv(c->t, 0, 100 + (uint64_t)i, 0, &t0, sizeof t0, &pending) == WEFT_OK, "recv");
      signal_peer(c, 0);
      double end = now_s() + 5;
      while (pending > 0 && now_s() < end) {
        wf_shm_wait(c->s, 2000000000);
        t1 = wf_now_ns();
        wf_shm_progress(c->s);
      }
      CHECK(pending == 0, "no data after 5 s");
      lat[i] = (double)(t1 - t0) / 1e3;
      /* a missed wake-up would show as the 2 s timeout */
      CHECK(t0 > 0 && lat[i] < 500000, "woke %.0f us after the send", lat[i]);
    }
    qsort(lat, ITERS, sizeof lat[0], cmp_d);
    g_rep->wake_med_us = lat[ITERS / 2];
    g_rep->wake_max_us = lat[ITERS - 1];
    /* Work already there: data at the head of a ring with a receive posted. */
    uint8_t *b = malloc(MIB);
    CHECK(c->t->ops->recv(c->t, 0, 200, 0, b, MIB, &pending) == WEFT_OK, "recv");
    signal_peer(c, 0);
    await_peer(c, 0); /* it filled the ring and stopped */
    double t = now_s();
    wf_shm_wait(c->s, 2000000000); /* nobody would wake it: blocking shows as 2 s */
    CHECK(now_s() - t < 0.5, "wait with data ready took %.3f s", now_s() - t);
    signal_peer(c, 0);
    CHECK(drive(c, &pending, 10), "1 MiB did not arrive");
    CHECK(verify(b, MIB, tag_of(0, 1, 200, 0)) < 0, "wrong data");
    free(b);
    /* Interrupts: pending one, then from another thread 30 ms later. */
    wf_shm_interrupt(c->s);
    t = now_s();
    wf_shm_wait(c->s, 2000000000);
    CHECK(now_s() - t < 0.5, "wait after interrupt took %.3f s", now_s() - t);
    pthread_t th;
    pthread_create(&th, NULL, interrupter, c->s);
    t = now_s();
    wf_shm_wait(c->s, 2000000000);
    double took = now_s() - t;
    pthread_join(th, NULL);
    CHECK(took > 0.02 && took < 1.0, "interrupted wait took %.3f s", took);
  } else {
    for (int i = 0; i < ITERS; i++) {
      await_peer(c, 1);
      usleep(20000); /* let it fall asleep */
      int64_t t0 = wf_now_ns();
      CHECK(c->t->ops->send(c->t, 1, 100 + (uint64_t)i, 0, &t0, sizeof t0, &pending) == WEFT_OK, "send");
      CHECK(pending == 0, "8-byte send did not complete at once");
    }
    uint8_t *b = malloc(MIB);
    fill(b, MIB, tag_of(0, 1, 200, 0));
    await_peer(c, 1);
    CHECK(c->t->ops->send(c->t, 1, 200, 0, b, MIB, &pending) == WEFT_OK, "send");
    signal_peer(c, 1);
    await_peer(c, 1);
    CHECK(drive(c, &pending, 10), "1 MiB send did not complete");
    free(b);
  }
  barrier(c);
  unmk(c);
}

/* Ping-pong latency and 64 MiB one-way bandwidth (printed, not asserted). */
static void sc_perf(ctx *c) {
  const int *mode = c->arg;
  mk_or_die(c, 0, 0, *mode);
  enum { ITERS = 10000 };
  static double rt[ITERS];
  int pending = 0;
  uint64_t x = 0, y = 0;
  barrier(c);
  for (int i = 0; i < ITERS; i++) {
    int64_t t = wf_now_ns();
    if (c->rank == 0) {
      c->t->ops->send(c->t, 1, (uint64_t)i, 0, &x, 8, &pending);
      c->t->ops->recv(c->t, 1, (uint64_t)i, 0, &y, 8, &pending);
    } else {
      c->t->ops->recv(c->t, 0, (uint64_t)i, 0, &y, 8, &pending);
      c->t->ops->send(c->t, 0, (uint64_t)i, 0, &x, 8, &pending);
    }
    if (!drive(c, &pending, 10)) break;
    rt[i] = (double)(wf_now_ns() - t) / 1e3;
  }
  CHECK(pending == 0, "ping-pong stalled");
  if (c->rank == 0) {
    qsort(rt, ITERS, sizeof rt[0], cmp_d);
    g_rep->pingpong_us = rt[ITERS / 2] / 2; /* median: preemption on a shared machine only adds a tail */
  }
  size_t len = 64 * MIB;
  uint8_t *b = malloc(len);
  memset(b, c->rank + 1, len); /* fault the pages in before timing */
  double best = 1e9;
  for (int rep = 0; rep < PERF_REPS; rep++) {
    if (c->rank == 1) {
      c->t->ops->recv(c->t, 0, 1000000 + (uint64_t)rep, 0, b, len, &pending);
      double t = now_s();
      signal_peer(c, 0);
      CHECK(drive(c, &pending, 20), "bandwidth receive stalled");
      double d = now_s() - t;
      if (d < best) best = d;
      CHECK(b[0] == 1 && b[len - 1] == 1, "bandwidth data wrong");
    } else {
      await_peer(c, 1);
      c->t->ops->send(c->t, 1, 1000000 + (uint64_t)rep, 0, b, len, &pending);
      CHECK(drive(c, &pending, 20), "bandwidth send stalled");
    }
  }
  if (c->rank == 1) g_rep->bw_gbs = (double)len / best / 1e9;
  free(b);
  barrier(c);
  unmk(c);
}

/* ------------------------------------------------------------------ main */

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  g_rep = mmap(NULL, sizeof *g_rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_rep == MAP_FAILED) return 2;
  double t_start = now_s();

  /* One local rank: nothing to set up, nothing is local. */
  int lone = 0, fds1[1] = {-1};
  (void)lone;
  (void)fds1;
  wf_shm_cfg one = {.rank = 0, .size = 1};
  wf_shm *s1 = NULL;
  CHECK(wf_shm_create(NULL, &one, &s1) == WEFT_OK && s1 && !wf_shm_is_local(s1, 0), "single local rank");
  wf_shm_destroy(s1);
  int bad_ranks[2] = {1, 0}, fds2[2] = {-1, 5};
  wf_host_cfg bad = {.rank = 0, .size = 2, .local_ranks = bad_ranks, .nlocal = 2, .fds = fds2};
  wf_host *h1 = NULL;
  CHECK(wf_host_create(&bad, &h1) == WEFT_ERR_INVALID_ARGUMENT && !h1, "unsorted local ranks accepted");
  int lone_ranks[1] = {0};
  wf_host_cfg alone = {.rank = 0, .size = 1, .local_ranks = lone_ranks, .nlocal = 1, .fds = fds1};
  CHECK(wf_host_create(&alone, &h1) == WEFT_ERR_INVALID_ARGUMENT && !h1, "a segment for one local rank accepted");

  for (int n = 2; n <= MAXN; n++) {
    char what[64];
    snprintf(what, sizeof what, "setup n=%d", n);
    run(n, sc_setup, NULL, what);
  }
  run(4, sc_two_hosts, NULL, "two hosts");
  printf("setup: ok so far (%d failures)\n", g_failures);

  const msg_arg geo[] = {{4096, 4, 0}, {4096, 4, 1}, {4096, 4, 2}, {65536, 16, 0}, {65536, 16, 1}, {8192, 2, 2}};
  for (int n = 2; n <= MAXN; n++)
    for (size_t g = 0; g < sizeof geo / sizeof geo[0]; g++) {
      if (SANITIZED && g >= 3 && n != MAXN) continue;
      char what[96];
      snprintf(what, sizeof what, "messages n=%d slot=%zu x %zu order=%d", n, geo[g].slot, geo[g].nslots,
               geo[g].order);
      run(n, sc_messages, &geo[g], what);
    }
  msg_arg defaults = {0, 0, 2};
  run(3, sc_messages, &defaults, "messages n=3 default geometry");
  printf("messages: done (%d failures)\n", g_failures);

  run(2, sc_backpressure, NULL, "backpressure");
  run(2, sc_cancel, NULL, "cancel");
  run(2, sc_protocol, NULL, "protocol error");
  printf("protocol error: reported through on_error (the WARN line above is expected)\n");
  run(2, sc_wait, NULL, "wait");
  printf("wait: idle CPU %.1f%% of wall time; wake-up latency median %.0f us, max %.0f us\n", 100 * g_rep->cpu_frac,
         g_rep->wake_med_us, g_rep->wake_max_us);

  int modes[2] = {WF_SHM_COPY_MEMCPY, WF_SHM_COPY_NT};
  for (int m = 0; m < 2; m++) {
    run(2, sc_perf, &modes[m], "perf");
    printf("perf (%s copies into receive buffers, 64 KiB x 16 slots): 8-byte ping-pong one-way latency %.2f us "
           "(median), 64 MiB one-way %.2f GB/s (best of %d)\n",
           m ? "non-temporal" : "plain", g_rep->pingpong_us, g_rep->bw_gbs, PERF_REPS);
  }

  printf("%s: %d failure(s) in %.1f s\n", g_failures ? "FAILED" : "PASSED", g_failures, now_s() - t_start);
  return g_failures ? 1 : 0;
}

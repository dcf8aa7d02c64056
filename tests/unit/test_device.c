/* test_device.c - the device layer (src/device/): the cpu identity, the
 * simulated accelerator (scrambled memory, ordered streams with delays,
 * real events, bad pointers and handles answered, never a crash) and the
 * CUDA backend's loading (here, without CUDA: a clear error naming what was
 * tried; with a GPU: a round trip).
 *
 * Mutation check (by hand, once): build with -DTEST_DEVICE_MUTATE_NO_WAIT
 * and the copy on a second stream no longer waits for the producer's
 * event; test_stream_order must then fail (it sees the stale values). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"
#include "device/sim.h"
#include "unit_check.h"
#include "util/err.h"
#include "util/time.h"

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Polls ev until complete or seconds pass: WEFT_OK, WEFT_IN_PROGRESS
 * (timed out) or the query's error. */
static weft_status poll_event(wf_device *d, wf_dev_event *ev, double seconds) {
  int64_t end = wf_deadline_after(seconds);
  for (;;) {
    weft_status st = d->ops->event_query(d, ev);
    if (st != WEFT_IN_PROGRESS || wf_now_ns() > end) return st;
    sleep_us(100);
  }
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 8));
}

/* Round trip host -> device -> host on one stream, ordered by an event. */
static void round_trip(wf_device *d, wf_dev_stream *s, size_t n, size_t off, unsigned seed) {
  unsigned char *in = NULL, *out = NULL, *dev = NULL;
  wf_dev_event *ev = NULL;
  CHECK(d->ops->host_alloc(d, n + 1, (void **)&in) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->host_alloc(d, n + 1, (void **)&out) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->mem_alloc(d, n + off, (void **)&dev) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->event_create(d, &ev) == WEFT_OK, "%s", wf_err_msg());
  if (!in || !out || !dev || !ev) return;
  fill(in, n, seed);
  memset(out, 0xee, n + 1);
  CHECK(d->ops->copy(d, dev + off, in, n, WF_COPY_H2D, s) == WEFT_OK, "h2d %zu: %s", n, wf_err_msg());
  CHECK(d->ops->copy(d, out, dev + off, n, WF_COPY_D2H, s) == WEFT_OK, "d2h %zu: %s", n, wf_err_msg());
  CHECK(d->ops->event_record(d, ev, s) == WEFT_OK, "%s", wf_err_msg());
  CHECK(poll_event(d, ev, 30) == WEFT_OK, "%s: event of a %zu-byte round trip", d->ops->name, n);
  CHECK(!memcmp(in, out, n), "%s: %zu bytes at offset %zu came back different", d->ops->name, n, off);
  CHECK(out[n] == 0xee, "%s: the copy wrote past %zu bytes", d->ops->name, n);
  d->ops->event_destroy(d, ev);
  d->ops->mem_free(d, dev);
  d->ops->host_free(d, out);
  d->ops->host_free(d, in);
}

static void test_registry(void) {
  wf_device *a = NULL, *b = NULL;
  wf_device_kind k;
  CHECK(wf_device_get(WF_DEVICE_CPU, &a) == WEFT_OK && a, "%s", wf_err_msg());
  CHECK(wf_device_get(WF_DEVICE_CPU, &b) == WEFT_OK && a == b, "the cpu device is made once");
  CHECK(wf_device_get(WF_DEVICE_SIM, &b) == WEFT_OK && b && b->kind == WF_DEVICE_SIM, "%s", wf_err_msg());
  CHECK(wf_device_kind_parse("SIM", &k) == WEFT_OK && k == WF_DEVICE_SIM, "parse");
  CHECK(wf_device_kind_parse("tpu", &k) == WEFT_ERR_INVALID_ARGUMENT && strstr(wf_err_msg(), "tpu"), "parse tpu");
  CHECK(!strcmp(wf_device_kind_name(WF_DEVICE_CUDA), "cuda") && !wf_device_kind_name((wf_device_kind)7), "names");
  CHECK(wf_device_get((wf_device_kind)9, &a) == WEFT_ERR_INVALID_ARGUMENT && !a, "bad kind");
}

static void test_cpu(void) {
  wf_device *d = NULL;
  CHECK(wf_device_get(WF_DEVICE_CPU, &d) == WEFT_OK, "%s", wf_err_msg());
  if (!d) return;
  static const size_t sizes[] = {0, 1, 7, 4096, 1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) round_trip(d, NULL, sizes[i], i % 3, (unsigned)i);
  wf_dev_stream *s = NULL;
  wf_dev_event *ev = NULL;
  CHECK(d->ops->stream_create(d, &s) == WEFT_OK && s, "cpu stream");
  CHECK(d->ops->event_create(d, &ev) == WEFT_OK && ev, "cpu event");
  CHECK(d->ops->event_query(d, ev) == WEFT_OK, "a cpu event is always complete");
  round_trip(d, s, 333, 1, 9);
  wf_dev_ptr p;
  int x;
  CHECK(d->ops->pointer(d, &x, &p) == WEFT_OK && p.type == WF_MEM_HOST, "cpu pointer");
  CHECK(wf_device_check_ptr(d, &x, 4, "probe") == WEFT_ERR_INVALID_ARGUMENT, "cpu has no device memory");
  CHECK(d->ops->set_device(d, 1) == WEFT_ERR_INVALID_ARGUMENT, "cpu has one device");
  d->ops->event_destroy(d, ev);
  d->ops->stream_destroy(d, s);
}

static wf_device *new_sim(unsigned min_us, unsigned max_us) {
  wf_device *d = NULL;
  CHECK(wf_dev_sim_create(&d) == WEFT_OK && d, "%s", wf_err_msg());
  if (d) CHECK(wf_sim_set_delay(d, min_us, max_us) == WEFT_OK, "%s", wf_err_msg());
  return d;
}

/* Every object made was freed, no work is left; then the sim goes. */
static void end_sim(wf_device *d, const char *test) {
  wf_sim_stats st;
  CHECK(wf_sim_stats_get(d, &st) == WEFT_OK, "stats");
  CHECK(st.outstanding == 0 && st.allocations == 0 && st.pinned == 0 && st.streams == 0 && st.events == 0,
        "%s left: %ld ops, %ld allocations, %ld pinned, %ld streams, %ld events", test, st.outstanding,
        st.allocations, st.pinned, st.streams, st.events);
  d->ops->destroy(d);
}

static void test_sim_round_trip(void) {
  wf_device *d = new_sim(0, 300);
  if (!d) return;
  wf_dev_stream *s = NULL;
  CHECK(d->ops->stream_create(d, &s) == WEFT_OK, "%s", wf_err_msg());
  static const size_t sizes[] = {0, 1, 3, 8, 13, 4097, (1 << 20) + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    round_trip(d, s, sizes[i], i % 8, (unsigned)i);
    round_trip(d, NULL, sizes[i], (i + 3) % 8, (unsigned)i + 50); /* the default stream */
  }
  /* device to device, across allocations, then back */
  unsigned char in[1000], out[1000], *a = NULL, *b = NULL;
  fill(in, sizeof in, 77);
  CHECK(d->ops->mem_alloc(d, 1003, (void **)&a) == WEFT_OK && d->ops->mem_alloc(d, 1000, (void **)&b) == WEFT_OK,
        "alloc");
  CHECK(wf_sim_write(d, a + 3, in, sizeof in) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->copy(d, b, a + 3, sizeof in, WF_COPY_D2D, s) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->copy(d, out, b, sizeof in, WF_COPY_D2H, s) == WEFT_OK, "%s", wf_err_msg());
  wf_dev_event *ev = NULL;
  CHECK(d->ops->event_create(d, &ev) == WEFT_OK && d->ops->event_record(d, ev, s) == WEFT_OK, "event");
  CHECK(poll_event(d, ev, 30) == WEFT_OK, "d2d event");
  CHECK(!memcmp(in, out, sizeof in), "d2d round trip differs");
  d->ops->event_destroy(d, ev);
  d->ops->mem_free(d, a);
  d->ops->mem_free(d, b);
  CHECK(d->ops->stream_destroy(d, s) == WEFT_OK, "%s", wf_err_msg());
  end_sim(d, "round trip");
}

/* The sim's memory read or written as host memory gives wrong bytes. */
static void test_sim_scrambled(void) {
  wf_device *d = new_sim(0, 0);
  if (!d) return;
  enum { N = 4099 };
  unsigned char in[N], out[N], *dev = NULL;
  fill(in, N, 5);
  CHECK(d->ops->mem_alloc(d, N, (void **)&dev) == WEFT_OK, "%s", wf_err_msg());
  if (!dev) return;
  CHECK(wf_sim_write(d, dev, in, N) == WEFT_OK, "%s", wf_err_msg());
  size_t same = 0;
  for (size_t i = 0; i < N; i++) same += dev[i] == in[i]; /* what collective code reading it directly sees */
  CHECK(same == 0, "%zu of %d bytes of sim device memory read directly equal the values stored", same, N);
  CHECK(wf_sim_read(d, out, dev, N) == WEFT_OK && !memcmp(in, out, N), "the sim's own read gives them back");
  memcpy(dev, in, N); /* a direct write, as a host collective writing its result there would */
  CHECK(wf_sim_read(d, out, dev, N) == WEFT_OK, "%s", wf_err_msg());
  same = 0;
  for (size_t i = 0; i < N; i++) same += out[i] == in[i];
  CHECK(same == 0, "%zu of %d bytes written directly read back right through the sim", same, N);
  /* floats: a direct read is not the value */
  float f = 1.5f, g;
  CHECK(wf_sim_write(d, dev + 8, &f, sizeof f) == WEFT_OK, "write float");
  memcpy(&g, dev + 8, sizeof g);
  CHECK(g != f, "a float read directly from sim memory is still %g", (double)g);
  d->ops->mem_free(d, dev);
  end_sim(d, "scrambled");
}

/* A kernel that sleeps, then writes its values through the sim's path. */
typedef struct {
  wf_device *d;
  unsigned char *dev;
  const unsigned char *values;
  size_t n;
  long sleep_us;
} kernel_arg;

static void slow_kernel(void *p) {
  kernel_arg *k = p;
  sleep_us(k->sleep_us);
  CHECK(wf_sim_write(k->d, k->dev, k->values, k->n) == WEFT_OK, "kernel write: %s", wf_err_msg());
}

/* Stream order: a producer stream's kernel, an event after it; the same
 * stream's copy sees the kernel's values, another stream's copy made to
 * wait on the event sees them too, and one that does not wait sees stale
 * data (the race the sim makes reliable: the kernel takes 100 ms more than
 * the streams' 20 ms delay). */
static void test_stream_order(void) {
  wf_device *d = new_sim(20000, 20000);
  if (!d) return;
  enum { N = 1024 };
  unsigned char old[N], val[N], h_same[N], h_wait[N], h_race[N], *dev = NULL;
  fill(old, N, 1);
  fill(val, N, 2);
  wf_dev_stream *a = NULL, *b = NULL, *c = NULL;
  wf_dev_event *ev = NULL, *ev_a = NULL, *ev_b = NULL, *ev_c = NULL;
  CHECK(d->ops->stream_create(d, &a) == WEFT_OK && d->ops->stream_create(d, &b) == WEFT_OK &&
            d->ops->stream_create(d, &c) == WEFT_OK,
        "streams: %s", wf_err_msg());
  CHECK(d->ops->event_create(d, &ev) == WEFT_OK && d->ops->event_create(d, &ev_a) == WEFT_OK &&
            d->ops->event_create(d, &ev_b) == WEFT_OK && d->ops->event_create(d, &ev_c) == WEFT_OK,
        "events: %s", wf_err_msg());
  CHECK(d->ops->mem_alloc(d, N, (void **)&dev) == WEFT_OK, "%s", wf_err_msg());
  if (!dev || !ev_c || !c) return;
  CHECK(wf_sim_write(d, dev, old, N) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->event_query(d, ev) == WEFT_OK, "an event never recorded is complete");
  kernel_arg k = {d, dev, val, N, 100000};
  CHECK(wf_sim_launch(d, a, slow_kernel, &k) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->event_record(d, ev, a) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->event_query(d, ev) == WEFT_IN_PROGRESS, "the event is complete before the kernel ran");
  CHECK(d->ops->copy(d, h_same, dev, N, WF_COPY_D2H, a) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->event_record(d, ev_a, a) == WEFT_OK, "%s", wf_err_msg());
#ifndef TEST_DEVICE_MUTATE_NO_WAIT
  CHECK(d->ops->stream_wait_event(d, b, ev) == WEFT_OK, "%s", wf_err_msg());
#endif
  CHECK(d->ops->copy(d, h_wait, dev, N, WF_COPY_D2H, b) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->event_record(d, ev_b, b) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->copy(d, h_race, dev, N, WF_COPY_D2H, c) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->event_record(d, ev_c, c) == WEFT_OK, "%s", wf_err_msg());
  wf_sim_stats st;
  CHECK(wf_sim_stats_get(d, &st) == WEFT_OK && st.outstanding >= 5, "outstanding %ld", st.outstanding);
  CHECK(poll_event(d, ev, 30) == WEFT_OK, "producer event");
  unsigned char now[N];
  CHECK(wf_sim_read(d, now, dev, N) == WEFT_OK && !memcmp(now, val, N), "the kernel ran when its event completed");
  CHECK(poll_event(d, ev_a, 30) == WEFT_OK && poll_event(d, ev_b, 30) == WEFT_OK &&
            poll_event(d, ev_c, 30) == WEFT_OK,
        "copy events");
  CHECK(!memcmp(h_same, val, N), "the copy after the kernel on its stream missed its values");
  CHECK(!memcmp(h_wait, val, N), "the copy on a stream waiting for the kernel's event missed its values");
  CHECK(!memcmp(h_race, old, N), "the copy on a stream not waiting did not see the stale data: the race is gone");
  CHECK(wf_sim_stats_get(d, &st) == WEFT_OK && st.outstanding == 0, "outstanding %ld at the end", st.outstanding);
  d->ops->event_destroy(d, ev);
  d->ops->event_destroy(d, ev_a);
  d->ops->event_destroy(d, ev_b);
  d->ops->event_destroy(d, ev_c);
  d->ops->stream_destroy(d, a);
  d->ops->stream_destroy(d, b);
  d->ops->stream_destroy(d, c);
  d->ops->mem_free(d, dev);
  end_sim(d, "stream order");
}

/* Events across threads: producers record on their own streams, the main
 * thread polls; a consumer thread's stream waits for the main thread's
 * event. */
enum { NTHREADS = 4, SLICE = 777 };
typedef struct {
  wf_device *d;
  unsigned char *dev;
  int t;
  wf_dev_event *ev;
  wf_dev_stream *s;
  unsigned char host[SLICE];
} prod_arg;

static void *producer(void *p) {
  prod_arg *a = p;
  wf_device *d = a->d;
  fill(a->host, SLICE, (unsigned)a->t + 10);
  CHECK(d->ops->stream_create(d, &a->s) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->copy(d, a->dev + (size_t)a->t * SLICE, a->host, SLICE, WF_COPY_H2D, a->s) == WEFT_OK, "%s",
        wf_err_msg());
  CHECK(d->ops->event_record(d, a->ev, a->s) == WEFT_OK, "%s", wf_err_msg());
  return NULL;
}

typedef struct {
  wf_device *d;
  wf_dev_event *ev;
  int seen;
} watcher_arg;

static void *watcher(void *p) { /* polls an event another thread records */
  watcher_arg *w = p;
  w->seen = poll_event(w->d, w->ev, 30) == WEFT_OK;
  return NULL;
}

static void test_events_threads(void) {
  wf_device *d = new_sim(0, 2000);
  if (!d) return;
  unsigned char *dev = NULL;
  CHECK(d->ops->mem_alloc(d, (size_t)NTHREADS * SLICE, (void **)&dev) == WEFT_OK, "%s", wf_err_msg());
  prod_arg args[NTHREADS];
  pthread_t th[NTHREADS], wth[NTHREADS];
  watcher_arg wa[NTHREADS];
  memset(args, 0, sizeof args);
  for (int t = 0; t < NTHREADS; t++) {
    args[t].d = d;
    args[t].dev = dev;
    args[t].t = t;
    CHECK(d->ops->event_create(d, &args[t].ev) == WEFT_OK, "%s", wf_err_msg());
  }
  /* the watchers may poll before the record: a fresh event is complete, so
   * they poll a recorded one only after the producers ran (joined below) */
  for (int t = 0; t < NTHREADS; t++) pthread_create(&th[t], NULL, producer, &args[t]);
  for (int t = 0; t < NTHREADS; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < NTHREADS; t++) {
    wa[t] = (watcher_arg){d, args[t].ev, 0};
    pthread_create(&wth[t], NULL, watcher, &wa[t]);
  }
  /* the consumer: a stream of its own waits for every producer's event */
  wf_dev_stream *cs = NULL;
  wf_dev_event *done = NULL;
  unsigned char *out = malloc((size_t)NTHREADS * SLICE);
  CHECK(d->ops->stream_create(d, &cs) == WEFT_OK && d->ops->event_create(d, &done) == WEFT_OK, "consumer");
  for (int t = 0; t < NTHREADS; t++) CHECK(d->ops->stream_wait_event(d, cs, args[t].ev) == WEFT_OK, "wait");
  CHECK(d->ops->copy(d, out, dev, (size_t)NTHREADS * SLICE, WF_COPY_D2H, cs) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->event_record(d, done, cs) == WEFT_OK, "%s", wf_err_msg());
  CHECK(poll_event(d, done, 30) == WEFT_OK, "consumer event");
  for (int t = 0; t < NTHREADS; t++) {
    pthread_join(wth[t], NULL);
    CHECK(wa[t].seen, "thread %d never saw its event complete", t);
    CHECK(out && !memcmp(out + (size_t)t * SLICE, args[t].host, SLICE), "slice %d of the consumer's copy", t);
  }
  free(out);
  for (int t = 0; t < NTHREADS; t++) {
    d->ops->event_destroy(d, args[t].ev);
    d->ops->stream_destroy(d, args[t].s);
  }
  d->ops->event_destroy(d, done);
  d->ops->stream_destroy(d, cs);
  d->ops->mem_free(d, dev);
  end_sim(d, "events across threads");
}

static void test_pinned_and_pointers(void) {
  wf_device *d = new_sim(0, 100);
  if (!d) return;
  unsigned char *pin = NULL, *dev0 = NULL, *dev1 = NULL;
  int stack_var = 0;
  char *heap = malloc(64);
  wf_dev_ptr p;
  CHECK(d->ops->host_alloc(d, 4096, (void **)&pin) == WEFT_OK && pin, "%s", wf_err_msg());
  if (!pin) return;
  memset(pin, 7, 4096); /* ordinary host memory */
  CHECK(pin[4095] == 7, "pinned memory is host memory");
  CHECK(d->ops->pointer(d, pin + 100, &p) == WEFT_OK && p.type == WF_MEM_PINNED && p.device == 0, "pinned: %d",
        (int)p.type);
  CHECK(d->ops->mem_alloc(d, 100, (void **)&dev0) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->set_device(d, 1) == WEFT_OK, "%s", wf_err_msg());
  int cur = -1;
  CHECK(d->ops->get_device(d, &cur) == WEFT_OK && cur == 1, "current device %d", cur);
  CHECK(d->ops->mem_alloc(d, 100, (void **)&dev1) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->set_device(d, 2) == WEFT_ERR_INVALID_ARGUMENT && strstr(wf_err_msg(), "no device 2"), "device 2");
  CHECK(d->ops->set_device(d, 0) == WEFT_OK, "back to 0");
  CHECK(d->ops->pointer(d, dev0 + 99, &p) == WEFT_OK && p.type == WF_MEM_DEVICE && p.device == 0, "dev0");
  CHECK(d->ops->pointer(d, dev1, &p) == WEFT_OK && p.type == WF_MEM_DEVICE && p.device == 1, "dev1 on device 1");
  CHECK(d->ops->pointer(d, &stack_var, &p) == WEFT_OK && p.type == WF_MEM_HOST && p.device == -1, "stack");
  CHECK(d->ops->pointer(d, heap, &p) == WEFT_OK && p.type == WF_MEM_HOST, "heap");
  static const uintptr_t garbage[] = {0x10, 0xdeadbeef, UINTPTR_MAX - 7};
  for (size_t i = 0; i < 3; i++) {
    CHECK(d->ops->pointer(d, (void *)garbage[i], &p) == WEFT_OK && p.type == WF_MEM_HOST, "garbage %zx",
          (size_t)garbage[i]);
    weft_status st = wf_device_check_ptr(d, (void *)garbage[i], 16, "tensor 'grad'");
    CHECK(st == WEFT_ERR_INVALID_ARGUMENT && strstr(wf_err_msg(), "is not sim device memory") &&
              strstr(wf_err_msg(), "tensor 'grad'"),
          "garbage check: %s", wf_err_msg());
  }
  CHECK(wf_device_check_ptr(d, dev0, 100, "x") == WEFT_OK, "%s", wf_err_msg());
  CHECK(wf_device_check_ptr(d, dev0, 101, "x") == WEFT_ERR_INVALID_ARGUMENT && strstr(wf_err_msg(), "runs past"),
        "overrun: %s", wf_err_msg());
  CHECK(wf_device_check_ptr(d, NULL, 1, "x") == WEFT_ERR_INVALID_ARGUMENT, "NULL");
  CHECK(wf_device_check_ptr(d, pin, 1, "x") == WEFT_ERR_INVALID_ARGUMENT && strstr(wf_err_msg(), "pinned"),
        "pinned is not device memory: %s", wf_err_msg());
  /* copies with the wrong memory fail at once, naming it */
  CHECK(d->ops->copy(d, heap, pin, 8, WF_COPY_H2D, NULL) == WEFT_ERR_INVALID_ARGUMENT &&
            strstr(wf_err_msg(), "not inside one sim device allocation"),
        "h2d into host memory: %s", wf_err_msg());
  CHECK(d->ops->copy(d, pin, dev0 + 90, 20, WF_COPY_D2H, NULL) == WEFT_ERR_INVALID_ARGUMENT, "d2h overrun");
  CHECK(d->ops->copy(d, dev0, dev1, 8, WF_COPY_H2D, NULL) == WEFT_ERR_INVALID_ARGUMENT &&
            strstr(wf_err_msg(), "is sim device memory, not host"),
        "h2d from device memory: %s", wf_err_msg());
  /* foreign handles are refused without being touched */
  wf_dev_event *bogus_ev = (wf_dev_event *)heap;
  CHECK(d->ops->event_query(d, bogus_ev) == WEFT_ERR_MISUSE, "foreign event");
  CHECK(d->ops->event_record(d, bogus_ev, NULL) == WEFT_ERR_MISUSE, "foreign event record");
  CHECK(d->ops->copy(d, dev0, pin, 8, WF_COPY_H2D, (wf_dev_stream *)heap) == WEFT_ERR_MISUSE, "foreign stream");
  CHECK(d->ops->stream_destroy(d, (wf_dev_stream *)0x10) == WEFT_ERR_MISUSE, "foreign stream destroy");
  CHECK(d->ops->host_free(d, heap) == WEFT_ERR_INVALID_ARGUMENT, "freeing malloc'd memory as pinned");
  CHECK(d->ops->mem_free(d, pin) == WEFT_ERR_INVALID_ARGUMENT, "freeing pinned memory as device memory");
  CHECK(d->ops->mem_free(d, dev0 + 1) == WEFT_ERR_INVALID_ARGUMENT, "freeing inside an allocation");
  CHECK(wf_sim_launch(NULL, NULL, slow_kernel, NULL) == WEFT_ERR_MISUSE, "not a sim");
  wf_device_info info;
  CHECK(d->ops->info(d, &info) == WEFT_OK && info.count == 2 && strstr(info.names[1], "1"), "info");
  wf_sim_stats st;
  CHECK(wf_sim_stats_get(d, &st) == WEFT_OK && st.pinned == 1 && st.allocations == 2, "stats %ld %ld", st.pinned,
        st.allocations);
  free(heap);
  CHECK(d->ops->host_free(d, pin) == WEFT_OK, "%s", wf_err_msg());
  d->ops->mem_free(d, dev0);
  d->ops->mem_free(d, dev1);
  end_sim(d, "pinned and pointers");
}

/* Freed while a queued copy still reads it: the copy still sees the data,
 * the memory goes when the copy is done. A stream destroyed with work
 * queued finishes it without its delays, promptly. */
static void test_lifetimes(void) {
  wf_device *d = new_sim(300000, 300000);
  if (!d) return;
  enum { N = 512 };
  unsigned char in[N], out[N], *dev = NULL;
  fill(in, N, 3);
  wf_dev_stream *s = NULL;
  wf_dev_event *ev = NULL;
  CHECK(d->ops->stream_create(d, &s) == WEFT_OK && d->ops->event_create(d, &ev) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->mem_alloc(d, N, (void **)&dev) == WEFT_OK, "%s", wf_err_msg());
  if (!dev || !s) return;
  CHECK(wf_sim_write(d, dev, in, N) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->copy(d, out, dev, N, WF_COPY_D2H, s) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->event_record(d, ev, s) == WEFT_OK, "%s", wf_err_msg());
  CHECK(d->ops->mem_free(d, dev) == WEFT_OK, "free while in use: %s", wf_err_msg());
  CHECK(d->ops->event_destroy(d, ev) == WEFT_OK, "destroy a pending event");
  CHECK(d->ops->event_query(d, ev) == WEFT_ERR_MISUSE, "a destroyed event is refused");
  for (int i = 0; i < 10; i++) CHECK(d->ops->copy(d, out, in, 0, WF_COPY_D2H, s) == WEFT_OK, "queue");
  int64_t t0 = wf_now_ns();
  CHECK(d->ops->stream_destroy(d, s) == WEFT_OK, "%s", wf_err_msg());
  double secs = (double)(wf_now_ns() - t0) / 1e9;
  CHECK(secs < 2.0, "destroying a stream with 12 queued operations (0.3 s delay each) took %.2f s", secs);
  CHECK(!memcmp(in, out, N), "the queued copy of freed memory still completed");
  end_sim(d, "lifetimes");
}

/* CUDA: here it cannot load; the error says what was tried. With a GPU, a
 * round trip. */
static void test_cuda(void) {
  wf_device *d = NULL;
  weft_status st = wf_device_get(WF_DEVICE_CUDA, &d);
  if (st == WEFT_OK) {
    wf_device_info info;
    CHECK(d->ops->info(d, &info) == WEFT_OK, "%s", wf_err_msg());
    printf("test_device: CUDA %d (driver %d) from %s, %d device(s), the first %s: round trip\n",
           info.runtime_version, info.driver_version, info.library, info.count, info.names[0]);
    round_trip(d, NULL, 1 << 20, 0, 1);
    wf_dev_stream *s = NULL;
    CHECK(d->ops->stream_create(d, &s) == WEFT_OK, "%s", wf_err_msg());
    round_trip(d, s, 4097, 3, 2);
    d->ops->stream_destroy(d, s);
    int x;
    wf_dev_ptr p;
    CHECK(d->ops->pointer(d, &x, &p) == WEFT_OK && p.type == WF_MEM_HOST, "cuda: a stack pointer");
    CHECK(wf_device_check_ptr(d, (void *)0x10, 4, "garbage") == WEFT_ERR_INVALID_ARGUMENT, "cuda: garbage");
    return;
  }
  char first[1024];
  snprintf(first, sizeof first, "%s", wf_err_msg());
  printf("test_device: CUDA cannot run here (the GPU round trip is skipped): %s\n", first);
  CHECK(st == WEFT_ERR_NOT_SUPPORTED && !d, "cuda: %s", weft_status_string(st));
  /* no library: every name tried, with dlopen's reason; or one loaded
   * without a usable device: the runtime's reason and the library */
  CHECK((strstr(first, "could be loaded") && strstr(first, "libcudart.so.12") && strstr(first, "libcudart.so.11.0")) ||
            (strstr(first, "cudaGetDeviceCount failed") && strstr(first, "libcudart")) || strstr(first, "no device"),
        "the message names the libraries tried or the runtime's reason: %s", first);
  wf_err_clear();
  CHECK(wf_device_get(WF_DEVICE_CUDA, &d) == WEFT_ERR_NOT_SUPPORTED && !strcmp(wf_err_msg(), first),
        "a second try repeats the reason: %s", wf_err_msg());
  /* the "cannot load" path, wherever this runs */
  static const char *const missing[] = {"/nonexistent/libcudart-weft-test.so", "libcudart-weft-missing.so.99"};
  CHECK(wf_dev_cuda_create_from(missing, 2, &d) == WEFT_ERR_NOT_SUPPORTED && !d &&
            strstr(wf_err_msg(), "none of /nonexistent/libcudart-weft-test.so, libcudart-weft-missing.so.99") &&
            strstr(wf_err_msg(), "No such file"),
        "no library: %s", wf_err_msg());
  static const char *const not_cuda[] = {"libm.so.6"}; /* loads, but is no CUDA runtime */
  CHECK(wf_dev_cuda_create_from(not_cuda, 1, &d) == WEFT_ERR_NOT_SUPPORTED && !d &&
            strstr(wf_err_msg(), "libm.so.6 was loaded but has no cudaMallocHost"),
        "a library without the runtime's functions: %s", wf_err_msg());
  /* WEFT_CUDA_LIBRARY is tried (named when nothing at all loads) */
  setenv("WEFT_CUDA_LIBRARY", "/nonexistent/libcudart-weft-param.so", 1);
  st = wf_dev_cuda_create(&d);
  CHECK(st == WEFT_ERR_NOT_SUPPORTED && !d, "cuda with WEFT_CUDA_LIBRARY: %s", weft_status_string(st));
  if (strstr(wf_err_msg(), "could be loaded"))
    CHECK(strstr(wf_err_msg(), "/nonexistent/libcudart-weft-param.so"), "the parameter's path: %s", wf_err_msg());
  unsetenv("WEFT_CUDA_LIBRARY");
}

int main(void) {
  test_registry();
  test_cpu();
  test_sim_round_trip();
  test_sim_scrambled();
  test_stream_order();
  test_events_threads();
  test_pinned_and_pointers();
  test_lifetimes();
  test_cuda();
  wf_device_shutdown();
  return unit_result("test_device");
}

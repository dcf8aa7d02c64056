/* dev_sim.c - a simulated accelerator that fails the way a GPU fails, for
 * tests on machines without one (the contract is in device/sim.h).
 *
 * Memory: a device allocation is host memory holding every byte XORed with
 * a nonzero key derived from the byte's address (salted per sim), so only
 * the sim's copies (and wf_sim_read/write) see the right values. An
 * allocation freed while queued copies still use it lives on until they
 * finish (as CUDA's cudaFree waits for the device).
 *
 * Streams: one worker thread each, running its queue in order; before
 * each operation it sleeps the delay drawn when the operation was queued.
 * Events: a ticket per record; an event is complete when its latest
 * record's ticket is done. Waiting for an event (a stream's WAIT) blocks
 * only the waiting stream's worker.
 *
 * Locking: one mutex per sim guards every list, queue and event; workers
 * drop it while they sleep and copy. Each worker sleeps on its stream's
 * condition variable for work; event completion broadcasts the sim's
 * ev_cv, which WAITs sleep on (in slices, so a closing stream notices).
 * Handles from callers are looked up in the sim's lists by address before
 * they are used, so a foreign or stale pointer is WEFT_ERR_MISUSE, never a
 * dereference. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"
#include "device/sim.h"
#include "device/sim_impl.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

static _Thread_local int tl_device; /* the current sim device of this thread (all sims) */

/* ------------------------------------------------------------ helpers */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The key of the 8-byte-aligned word holding address a: no byte is zero,
 * so every scrambled byte differs from the value it stores. */
static uint64_t key_word(uint64_t salt, uintptr_t a) {
  return mix64((uint64_t)(a >> 3) ^ salt) | 0x0101010101010101ull;
}
static unsigned char key_byte(uint64_t salt, uintptr_t a) {
  uint64_t k = key_word(salt, a);
  unsigned char kb[8];
  memcpy(kb, &k, 8); /* the byte at memory offset a & 7 of the word: any endianness */
  return kb[a & 7];
}

/* dst[i] = src[i] ^ key(dev + i): scrambles into device memory at dev, or
 * unscrambles out of it (the same operation). */
static void xor_copy(unsigned char *dst, const unsigned char *src, size_t len, uintptr_t dev, uint64_t salt) {
  size_t i = 0;
  for (; i < len && ((dev + i) & 7); i++) dst[i] = src[i] ^ key_byte(salt, dev + i);
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, src + i, 8);
    w ^= key_word(salt, dev + i);
    memcpy(dst + i, &w, 8);
  }
  for (; i < len; i++) dst[i] = src[i] ^ key_byte(salt, dev + i);
}

/* The copy itself (a worker, or wf_sim_read/write on the caller). */
void wf_sim_copy_bytes(wf_sim *s, void *dst, const void *src, size_t len, wf_copy_dir dir) {
  if (dir == WF_COPY_H2D) {
    xor_copy(dst, src, len, (uintptr_t)dst, s->salt);
  } else if (dir == WF_COPY_D2H) {
    xor_copy(dst, src, len, (uintptr_t)src, s->salt);
  } else { /* through a bounce buffer: unscramble, scramble at the new address */
    unsigned char buf[4096];
    for (size_t off = 0; off < len; off += sizeof buf) {
      size_t n = len - off < sizeof buf ? len - off : sizeof buf;
      xor_copy(buf, (const unsigned char *)src + off, n, (uintptr_t)src + off, s->salt);
      xor_copy((unsigned char *)dst + off, buf, n, (uintptr_t)dst + off, s->salt);
    }
  }
}

static uint64_t rng_next(uint64_t *x) { /* xorshift64* */
  *x ^= *x >> 12;
  *x ^= *x << 25;
  *x ^= *x >> 27;
  return *x * 2685821657736338717ull;
}

/* Every condition variable here waits on CLOCK_MONOTONIC (cond_init). */
static void cond_init(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
}

static struct timespec abs_after(int64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t t = (int64_t)ts.tv_nsec + ns;
  ts.tv_sec += (time_t)(t / WF_NS_PER_SEC);
  ts.tv_nsec = (long)(t % WF_NS_PER_SEC);
  return ts;
}

static int grow(void **arr, size_t *cap, size_t n) {
  if (n < *cap) return 0;
  size_t nc = *cap ? *cap * 2 : 16;
  void *p = realloc(*arr, nc * sizeof(void *));
  if (!p) return -1;
  *arr = p;
  *cap = nc;
  return 0;
}

/* The live allocation holding [p, p + len) (len 0: holding p), or NULL.
 * Under s->mu. Never dereferences p. */
static sim_alloc *find_alloc(wf_sim *s, const void *p, size_t len) {
  uintptr_t a = (uintptr_t)p;
  for (size_t i = 0; i < s->nallocs; i++) {
    sim_alloc *x = s->allocs[i];
    uintptr_t b = (uintptr_t)x->base;
    if (!x->freed && a >= b && a - b < x->len && (len == 0 || len <= x->len - (a - b))) return x;
  }
  return NULL;
}

/* 1 if [p, p + len) overlaps any live device allocation. Under s->mu. */
static int overlaps_device(wf_sim *s, const void *p, size_t len) {
  uintptr_t a = (uintptr_t)p;
  for (size_t i = 0; i < s->nallocs; i++) {
    sim_alloc *x = s->allocs[i];
    uintptr_t b = (uintptr_t)x->base;
    if (!x->pinned && !x->freed && a < b + x->len && b < a + len) return 1;
  }
  return 0;
}

static void alloc_remove(wf_sim *s, sim_alloc *x) {
  for (size_t i = 0; i < s->nallocs; i++)
    if (s->allocs[i] == x) {
      s->allocs[i] = s->allocs[--s->nallocs];
      break;
    }
  free(x->base);
  free(x);
}

void wf_sim_alloc_unref(wf_sim *s, sim_alloc *x) {
  if (x && --x->refs == 0 && x->freed) alloc_remove(s, x);
}

static int event_live(wf_sim *s, const sim_event *e) { /* a live handle? Under s->mu */
  for (size_t i = 0; i < s->nevents; i++)
    if (s->events[i] == e) return !e->destroyed;
  return 0;
}

static void event_unref(wf_sim *s, sim_event *e) {
  if (--e->refs > 0 || !e->destroyed) return;
  for (size_t i = 0; i < s->nevents; i++)
    if (s->events[i] == e) {
      s->events[i] = s->events[--s->nevents];
      break;
    }
  free(e);
}

/* ------------------------------------------------------------ streams */

/* Sleeps us microseconds in slices, cut short when the stream closes. */
static void op_delay(sim_stream *st, unsigned us) {
  wf_sim *s = st->sim;
  int64_t end = wf_now_ns() + (int64_t)us * 1000;
  pthread_mutex_lock(&s->mu);
  while (!st->closing) {
    int64_t left = end - wf_now_ns();
    if (left <= 0) break;
    struct timespec ts = abs_after(left < SIM_WAIT_SLICE_NS ? left : SIM_WAIT_SLICE_NS);
    pthread_cond_timedwait(&st->cv, &s->mu, &ts);
  }
  pthread_mutex_unlock(&s->mu);
}

/* A WAIT: until ev's ticket is done, or (closing) SIM_CLOSE_WAIT_NS. */
static void op_wait(sim_stream *st, sim_op *op) {
  wf_sim *s = st->sim;
  int64_t give_up = 0;
  pthread_mutex_lock(&s->mu);
  while (op->ev->done < op->ticket) {
    if (st->closing) {
      if (!give_up) give_up = wf_now_ns() + SIM_CLOSE_WAIT_NS;
      if (wf_now_ns() >= give_up) {
        WF_WARN(WF_SUB_ALL, "sim device: a destroyed stream stops waiting for an event that never completed");
        break;
      }
    }
    struct timespec ts = abs_after(SIM_WAIT_SLICE_NS);
    pthread_cond_timedwait(&s->ev_cv, &s->mu, &ts);
  }
  pthread_mutex_unlock(&s->mu);
}

static void *stream_main(void *arg) {
  sim_stream *st = arg;
  wf_sim *s = st->sim;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (!st->head) {
      if (st->closing) break;
      struct timespec ts = abs_after(SIM_IDLE_SLICE_NS);
      pthread_cond_timedwait(&st->cv, &s->mu, &ts);
      continue;
    }
    sim_op *op = st->head; /* stays queued (counted) until done */
    pthread_mutex_unlock(&s->mu);
    if (op->delay_us) op_delay(st, op->delay_us);
    if (op->kind == OP_COPY) wf_sim_copy_bytes(s, op->dst, op->src, op->len, op->dir);
    else if (op->kind == OP_KERNEL) op->fn(op->arg);
    else if (op->kind == OP_WAIT) op_wait(st, op);
    pthread_mutex_lock(&s->mu);
    if (op->kind == OP_RECORD && op->ev->done < op->ticket) op->ev->done = op->ticket;
    if (op->ev) event_unref(s, op->ev);
    wf_sim_alloc_unref(s, op->a_dst);
    wf_sim_alloc_unref(s, op->a_src);
    st->head = op->next;
    if (!st->head) st->tail = NULL;
    s->outstanding--;
    pthread_cond_broadcast(&s->ev_cv);
    free(op);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Makes a stream (under s->mu). */
static weft_status stream_new(wf_sim *s, int is_default, sim_stream **out) {
  if (grow((void **)&s->streams, &s->cap_streams, s->nstreams) != 0)
    return wf_err(WEFT_ERR_NO_MEMORY, "sim device: out of memory");
  sim_stream *st = calloc(1, sizeof *st);
  if (!st) return wf_err(WEFT_ERR_NO_MEMORY, "sim device: out of memory");
  st->sim = s;
  st->is_default = is_default;
  st->rng = mix64(s->seed + ++s->streams_made) | 1;
  cond_init(&st->cv);
  int rc = pthread_create(&st->thread, NULL, stream_main, st);
  if (rc != 0) {
    pthread_cond_destroy(&st->cv);
    free(st);
    return wf_err(WEFT_ERR_SYSTEM, "sim device: cannot start a stream thread: %s", strerror(rc));
  }
  s->streams[s->nstreams++] = st;
  *out = st;
  return WEFT_OK;
}

/* The stream behind a caller's handle (NULL: the default), under s->mu. */
weft_status wf_sim_stream_of(wf_sim *s, wf_dev_stream *h, sim_stream **out) {
  if (!h) {
    if (!s->def) WF_CHECK(stream_new(s, 1, &s->def));
    *out = s->def;
    return WEFT_OK;
  }
  for (size_t i = 0; i < s->nstreams; i++)
    if ((void *)s->streams[i] == (void *)h && !s->streams[i]->closing) {
      *out = s->streams[i];
      return WEFT_OK;
    }
  return wf_err(WEFT_ERR_MISUSE, "sim device: %p is not a live stream of this sim", (void *)h);
}

/* Queues op on st (under s->mu), drawing its delay. */
void wf_sim_enqueue(wf_sim *s, sim_stream *st, sim_op *op) {
  unsigned span = s->delay_max - s->delay_min;
  op->delay_us = s->delay_min + (span ? (unsigned)(rng_next(&st->rng) % ((uint64_t)span + 1)) : 0);
  if (st->tail) st->tail->next = op;
  else st->head = op;
  st->tail = op;
  s->outstanding++;
  pthread_cond_signal(&st->cv);
}

/* Closes st and joins its worker (it finishes its queue, without delays).
 * Called without s->mu; st is already out of s->streams. */
static void stream_close(wf_sim *s, sim_stream *st) {
  pthread_mutex_lock(&s->mu);
  st->closing = 1;
  pthread_cond_broadcast(&st->cv);
  pthread_cond_broadcast(&s->ev_cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(st->thread, NULL);
  pthread_cond_destroy(&st->cv);
  free(st);
}

static void stream_unlist(wf_sim *s, sim_stream *st) {
  for (size_t i = 0; i < s->nstreams; i++)
    if (s->streams[i] == st) {
      s->streams[i] = s->streams[--s->nstreams];
      break;
    }
}

static weft_status sim_stream_create(wf_device *d, wf_dev_stream **out) {
  wf_sim *s = (wf_sim *)d;
  sim_stream *st = NULL;
  pthread_mutex_lock(&s->mu);
  weft_status rc = stream_new(s, 0, &st);
  pthread_mutex_unlock(&s->mu);
  *out = (wf_dev_stream *)st;
  return rc;
}

static weft_status sim_stream_destroy(wf_device *d, wf_dev_stream *h) {
  wf_sim *s = (wf_sim *)d;
  if (!h) return WEFT_OK; /* the default stream lives as long as the sim */
  sim_stream *st = NULL;
  pthread_mutex_lock(&s->mu);
  weft_status rc = wf_sim_stream_of(s, h, &st);
  if (rc == WEFT_OK) stream_unlist(s, st);
  pthread_mutex_unlock(&s->mu);
  if (rc == WEFT_OK) stream_close(s, st);
  return rc;
}

/* ------------------------------------------------------------ memory */

static weft_status sim_alloc_any(wf_sim *s, size_t len, int pinned, void **out) {
  *out = NULL;
  sim_alloc *x = calloc(1, sizeof *x);
  void *p = NULL;
  if (!x || posix_memalign(&p, SIM_ALIGN, len ? len : 1) != 0) {
    free(x);
    return wf_err(WEFT_ERR_NO_MEMORY, "sim device: cannot allocate %zu bytes of %s memory", len,
                  pinned ? "pinned host" : "device");
  }
  if (!pinned) memset(p, 0xa5, len ? len : 1); /* uninitialised device memory: garbage, not zeros */
  x->base = p;
  x->len = len ? len : 1;
  x->pinned = pinned;
  x->device = tl_device;
  pthread_mutex_lock(&s->mu);
  weft_status rc = WEFT_OK;
  if (tl_device >= s->count)
    rc = wf_err(WEFT_ERR_INVALID_ARGUMENT, "sim device: current device %d >= count %d", tl_device, s->count);
  else if (grow((void **)&s->allocs, &s->cap_allocs, s->nallocs) != 0)
    rc = wf_err(WEFT_ERR_NO_MEMORY, "sim device: out of memory");
  else
    s->allocs[s->nallocs++] = x;
  if (rc == WEFT_OK && pinned) s->host_allocs++;
  pthread_mutex_unlock(&s->mu);
  if (rc != WEFT_OK) {
    free(p);
    free(x);
    return rc;
  }
  *out = p;
  return WEFT_OK;
}

static weft_status sim_free_any(wf_sim *s, void *p, int pinned) {
  if (!p) return WEFT_OK;
  weft_status rc = WEFT_OK;
  pthread_mutex_lock(&s->mu);
  sim_alloc *x = find_alloc(s, p, 0);
  if (!x || x->base != (char *)p || x->pinned != pinned)
    rc = wf_err(WEFT_ERR_INVALID_ARGUMENT, "sim device: %p is not the start of a live %s allocation of this sim", p,
                pinned ? "pinned host" : "device");
  else if (x->refs > 0)
    x->freed = 1; /* the last queued copy using it frees it */
  else
    alloc_remove(s, x);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static weft_status sim_host_alloc(wf_device *d, size_t len, void **out) {
  return sim_alloc_any((wf_sim *)d, len, 1, out);
}
static weft_status sim_host_free(wf_device *d, void *p) { return sim_free_any((wf_sim *)d, p, 1); }
static weft_status sim_mem_alloc(wf_device *d, size_t len, void **out) {
  return sim_alloc_any((wf_sim *)d, len, 0, out);
}
static weft_status sim_mem_free(wf_device *d, void *p) { return sim_free_any((wf_sim *)d, p, 0); }

static const char *dir_name(wf_copy_dir dir) {
  return dir == WF_COPY_H2D ? "h2d" : dir == WF_COPY_D2H ? "d2h" : dir == WF_COPY_D2D ? "d2d" : "?";
}

/* Checks one side of a copy (under s->mu): device sides must lie in one
 * allocation (returned, to hold), host sides must not touch device memory. */
weft_status wf_sim_check_side(wf_sim *s, const void *p, size_t len, int device, const char *side, wf_copy_dir dir,
                              sim_alloc **held) {
  *held = NULL;
  if (!p) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "sim device: copy %s: NULL %s", dir_name(dir), side);
  if (device) {
    sim_alloc *x = find_alloc(s, p, len);
    if (!x || x->pinned)
      return wf_err(WEFT_ERR_INVALID_ARGUMENT,
                    "sim device: copy %s: %s %p + %zu bytes is not inside one sim device allocation", dir_name(dir),
                    side, p, len);
    *held = x;
  } else if (overlaps_device(s, p, len)) {
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "sim device: copy %s: %s %p + %zu bytes is sim device memory, not host",
                  dir_name(dir), side, p, len);
  }
  return WEFT_OK;
}

static weft_status sim_copy(wf_device *d, void *dst, const void *src, size_t len, wf_copy_dir dir,
                            wf_dev_stream *h) {
  wf_sim *s = (wf_sim *)d;
  if (dir != WF_COPY_H2D && dir != WF_COPY_D2H && dir != WF_COPY_D2D)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "sim device: bad copy direction %d", (int)dir);
  sim_op *op = calloc(1, sizeof *op);
  if (!op) return wf_err(WEFT_ERR_NO_MEMORY, "sim device: out of memory");
  op->kind = OP_COPY;
  op->dst = dst;
  op->src = src;
  op->len = len;
  op->dir = dir;
  sim_stream *st = NULL;
  weft_status rc;
  pthread_mutex_lock(&s->mu);
  if ((rc = wf_sim_stream_of(s, h, &st)) == WEFT_OK && len &&
      (rc = wf_sim_check_side(s, dst, len, dir != WF_COPY_D2H, "destination", dir, &op->a_dst)) == WEFT_OK)
    rc = wf_sim_check_side(s, src, len, dir != WF_COPY_H2D, "source", dir, &op->a_src);
  if (rc == WEFT_OK) {
    if (op->a_dst) op->a_dst->refs++;
    if (op->a_src) op->a_src->refs++;
    wf_sim_enqueue(s, st, op); /* a 0-byte copy still takes its place in the stream */
  }
  pthread_mutex_unlock(&s->mu);
  if (rc != WEFT_OK) free(op);
  return rc;
}

/* ------------------------------------------------------------ events */

static weft_status sim_event_create(wf_device *d, wf_dev_event **out) {
  wf_sim *s = (wf_sim *)d;
  *out = NULL;
  sim_event *e = calloc(1, sizeof *e);
  if (!e) return wf_err(WEFT_ERR_NO_MEMORY, "sim device: out of memory");
  pthread_mutex_lock(&s->mu);
  int bad = grow((void **)&s->events, &s->cap_events, s->nevents);
  if (!bad) s->events[s->nevents++] = e;
  pthread_mutex_unlock(&s->mu);
  if (bad) {
    free(e);
    return wf_err(WEFT_ERR_NO_MEMORY, "sim device: out of memory");
  }
  *out = (wf_dev_event *)e;
  return WEFT_OK;
}

static weft_status bad_event(const void *h) {
  return wf_err(WEFT_ERR_MISUSE, "sim device: %p is not a live event of this sim", h);
}

static weft_status sim_event_destroy(wf_device *d, wf_dev_event *h) {
  wf_sim *s = (wf_sim *)d;
  sim_event *e = (sim_event *)h;
  weft_status rc = WEFT_OK;
  pthread_mutex_lock(&s->mu);
  if (!event_live(s, e)) {
    rc = bad_event(h);
  } else {
    e->destroyed = 1;
    e->refs++; /* so that unref frees it now if nothing queued holds it */
    event_unref(s, e);
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* Queues a RECORD or WAIT of e on the stream h. */
static weft_status event_op(wf_sim *s, wf_dev_stream *h, wf_dev_event *eh, op_kind kind) {
  sim_event *e = (sim_event *)eh;
  sim_op *op = calloc(1, sizeof *op);
  if (!op) return wf_err(WEFT_ERR_NO_MEMORY, "sim device: out of memory");
  sim_stream *st = NULL;
  weft_status rc = WEFT_OK;
  pthread_mutex_lock(&s->mu);
  if (!event_live(s, e)) rc = bad_event(eh);
  else rc = wf_sim_stream_of(s, h, &st);
  if (rc == WEFT_OK && kind == OP_WAIT && e->done >= e->recorded) {
    free(op); /* nothing to wait for */
    op = NULL;
  } else if (rc == WEFT_OK) {
    op->kind = kind;
    op->ev = e;
    op->ticket = kind == OP_RECORD ? ++e->recorded : e->recorded;
    e->refs++;
    wf_sim_enqueue(s, st, op);
    op = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  free(op);
  return rc;
}

static weft_status sim_event_record(wf_device *d, wf_dev_event *ev, wf_dev_stream *h) {
  return event_op((wf_sim *)d, h, ev, OP_RECORD);
}

static weft_status sim_stream_wait_event(wf_device *d, wf_dev_stream *h, wf_dev_event *ev) {
  return event_op((wf_sim *)d, h, ev, OP_WAIT);
}

static weft_status sim_event_query(wf_device *d, wf_dev_event *h) {
  wf_sim *s = (wf_sim *)d;
  sim_event *e = (sim_event *)h;
  weft_status rc;
  pthread_mutex_lock(&s->mu); /* acquires the worker's copies along with done */
  if (!event_live(s, e)) rc = bad_event(h);
  else rc = e->done >= e->recorded ? WEFT_OK : WEFT_IN_PROGRESS;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* ------------------------------------------------------------ the rest */

static weft_status sim_pointer(wf_device *d, const void *p, wf_dev_ptr *out) {
  wf_sim *s = (wf_sim *)d;
  pthread_mutex_lock(&s->mu);
  sim_alloc *x = p ? find_alloc(s, p, 0) : NULL;
  out->type = !x ? WF_MEM_HOST : x->pinned ? WF_MEM_PINNED : WF_MEM_DEVICE;
  out->device = x ? x->device : -1;
  pthread_mutex_unlock(&s->mu);
  return WEFT_OK;
}

static weft_status sim_get_device(wf_device *d, int *index) {
  (void)d;
  *index = tl_device;
  return WEFT_OK;
}

static weft_status sim_set_device(wf_device *d, int index) {
  wf_sim *s = (wf_sim *)d;
  pthread_mutex_lock(&s->mu);
  int count = s->count;
  pthread_mutex_unlock(&s->mu);
  if (index < 0 || index >= count)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "sim device: no device %d (%d simulated)", index, count);
  tl_device = index;
  return WEFT_OK;
}

static weft_status sim_info(wf_device *d, wf_device_info *out) {
  wf_sim *s = (wf_sim *)d;
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&s->mu);
  out->count = s->count;
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < out->count && i < WF_DEVICE_INFO_NAMES; i++)
    snprintf(out->names[i], sizeof out->names[i], "weft sim device %d", i);
  return WEFT_OK;
}

static void sim_destroy(wf_device *d) {
  wf_sim *s = (wf_sim *)d;
  /* join every worker first: they hold allocations and events */
  for (;;) {
    pthread_mutex_lock(&s->mu);
    sim_stream *st = s->nstreams ? s->streams[s->nstreams - 1] : NULL;
    if (st) stream_unlist(s, st);
    pthread_mutex_unlock(&s->mu);
    if (!st) break;
    stream_close(s, st);
  }
  for (size_t i = 0; i < s->nallocs; i++) {
    free(s->allocs[i]->base);
    free(s->allocs[i]);
  }
  for (size_t i = 0; i < s->nevents; i++) free(s->events[i]);
  free(s->allocs);
  free(s->streams);
  free(s->events);
  pthread_cond_destroy(&s->ev_cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

const wf_device_ops wf_sim_ops = {
    .name = "sim",
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .copy = sim_copy,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .stream_wait_event = sim_stream_wait_event,
    .pointer = sim_pointer,
    .get_device = sim_get_device,
    .set_device = sim_set_device,
    .info = sim_info,
    .destroy = sim_destroy,
};

weft_status wf_dev_sim_create(wf_device **out) {
  *out = NULL;
  wf_sim *s = calloc(1, sizeof *s);
  if (!s) return wf_err(WEFT_ERR_NO_MEMORY, "sim device: out of memory");
  s->base.ops = &wf_sim_ops;
  s->base.kind = WF_DEVICE_SIM;
  pthread_mutex_init(&s->mu, NULL);
  cond_init(&s->ev_cv);
  s->salt = mix64((uint64_t)(uintptr_t)s ^ (uint64_t)wf_now_ns());
  s->seed = 0x5eed5eedull;
  s->delay_min = 0;
  s->delay_max = 2000;
  s->count = 2;
  *out = &s->base;
  return WEFT_OK;
}


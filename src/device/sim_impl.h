/* sim_impl.h - the simulated accelerator's internals, shared by its
 * backend (dev_sim.c) and its test API (dev_sim_api.c). Nothing else
 * includes this. Locking: see dev_sim.c. */
#ifndef WF_DEVICE_SIM_IMPL_H
#define WF_DEVICE_SIM_IMPL_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "device/sim.h"
#include "util/time.h"

#define SIM_MAX_DELAY_US 10000000u
#define SIM_ALIGN 256                /* as cudaMalloc */
#define SIM_CLOSE_WAIT_NS (5 * WF_NS_PER_SEC) /* a closing stream's WAIT gives up after this */
#define SIM_IDLE_SLICE_NS (WF_NS_PER_SEC / 2) /* an idle worker's wake-up period */
#define SIM_WAIT_SLICE_NS (10 * 1000 * 1000)

typedef struct sim_alloc {
  char *base;
  size_t len;
  int device;
  int pinned; /* a host_alloc buffer (not scrambled) */
  int freed;  /* mem_free'd while queued work still held it */
  int refs;   /* queued operations using it */
} sim_alloc;

typedef struct sim_event {
  unsigned long long recorded; /* ticket of the latest record (0: never) */
  unsigned long long done;     /* highest ticket completed */
  int destroyed;               /* the handle is gone; freed when refs drop to 0 */
  int refs;                    /* queued RECORD/WAIT operations */
} sim_event;

typedef enum { OP_COPY, OP_KERNEL, OP_RECORD, OP_WAIT } op_kind;

typedef struct sim_op {
  struct sim_op *next;
  op_kind kind;
  unsigned delay_us;
  /* OP_COPY */
  void *dst;
  const void *src;
  size_t len;
  wf_copy_dir dir;
  sim_alloc *a_dst, *a_src; /* held device allocations (refs) */
  /* OP_KERNEL */
  wf_sim_kernel fn;
  void *arg;
  /* OP_RECORD, OP_WAIT */
  sim_event *ev;
  unsigned long long ticket;
} sim_op;

typedef struct sim_stream {
  struct wf_sim *sim;
  pthread_t thread;
  pthread_cond_t cv; /* work queued or closing */
  sim_op *head, *tail;
  int closing;       /* under sim->mu */
  int is_default;
  uint64_t rng;
} sim_stream;

typedef struct wf_sim {
  wf_device base; /* first: a wf_device * is a wf_sim * */
  pthread_mutex_t mu;
  pthread_cond_t ev_cv; /* an event's done ticket or an op count changed */
  uint64_t salt;
  uint64_t seed;
  unsigned delay_min, delay_max;
  int count;
  long outstanding;
  long host_allocs;            /* host_alloc calls that succeeded, ever */
  unsigned long long streams_made;
  sim_alloc **allocs;
  size_t nallocs, cap_allocs;
  sim_stream **streams;
  size_t nstreams, cap_streams;
  sim_stream *def; /* the NULL stream, made on first use */
  sim_event **events;
  size_t nevents, cap_events;
} wf_sim;

extern const wf_device_ops wf_sim_ops;

/* d as a sim, or NULL. */
static inline wf_sim *wf_sim_of(wf_device *d) { return d && d->ops == &wf_sim_ops ? (wf_sim *)d : NULL; }

/* The copy itself, scrambling into or out of device memory (no checks). */
void wf_sim_copy_bytes(wf_sim *s, void *dst, const void *src, size_t len, wf_copy_dir dir);
/* Under s->mu: the stream behind a caller's handle (NULL: the default). */
weft_status wf_sim_stream_of(wf_sim *s, wf_dev_stream *h, sim_stream **out);
/* Under s->mu: queues op on st, drawing its delay. */
void wf_sim_enqueue(wf_sim *s, sim_stream *st, sim_op *op);
/* Under s->mu: checks one side of a copy; a device side must lie in one
 * allocation (*held, for the caller to take a reference on). */
weft_status wf_sim_check_side(wf_sim *s, const void *p, size_t len, int device, const char *side, wf_copy_dir dir,
                              sim_alloc **held);
/* Under s->mu: drops a reference taken on x (NULL: nothing). */
void wf_sim_alloc_unref(wf_sim *s, sim_alloc *x);

#endif

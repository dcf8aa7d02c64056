/* timeline.h - a Chrome-trace JSON timeline (chrome://tracing, Perfetto):
 * one lane per tensor with NEGOTIATE_<OP> and <OP> phases (byte sizes, the
 * algorithm), on rank 0 a mark when each rank's request arrives (so the last
 * rank is visible), optional CYCLE_START marks of the engine loop, and
 * start_time_since_epoch_in_micros in otherData. Events come from the engine
 * thread; start/stop from any thread (an internal mutex orders them). */
#ifndef WF_TIMELINE_H
#define WF_TIMELINE_H
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "util/strmap.h"
#include "weft.h"

typedef struct wf_timeline {
  pthread_mutex_t mu;
  FILE *f;            /* NULL: off */
  int rank;
  int mark_cycles;
  int first;          /* no event written yet */
  int64_t t0;         /* wf_now_ns() at start */
  wf_strmap lanes;    /* tensor name -> lane number (1-based, as a pointer-sized int) */
  int nlanes;
} wf_timeline;

void wf_tl_init(wf_timeline *tl, int rank);
/* Opens path ("%r" becomes the rank) and writes the header. */
weft_status wf_tl_start(wf_timeline *tl, const char *path, int mark_cycles);
/* Writes the closing brackets and closes the file. Idempotent. */
weft_status wf_tl_stop(wf_timeline *tl);
void wf_tl_destroy(wf_timeline *tl);

/* Events (cheap no-ops when off). phase: "NEGOTIATE_ALLREDUCE", ... */
void wf_tl_begin(wf_timeline *tl, const char *tensor, const char *phase, uint64_t bytes, const char *algo);
void wf_tl_end(wf_timeline *tl, const char *tensor, const char *error);
void wf_tl_mark(wf_timeline *tl, const char *tensor, const char *what);
void wf_tl_cycle(wf_timeline *tl);
/* 1 while a timeline is being written. */
int wf_tl_on(wf_timeline *tl);

#endif

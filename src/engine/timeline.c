/* timeline.c - writes the Chrome-trace JSON timeline (see timeline.h). */
#include "engine/timeline.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/time.h"

void wf_tl_init(wf_timeline *tl, int rank) {
  memset(tl, 0, sizeof *tl);
  pthread_mutex_init(&tl->mu, NULL);
  wf_strmap_init(&tl->lanes);
  tl->rank = rank;
}

int wf_tl_on(wf_timeline *tl) {
  /* a racy peek is fine: an event lost at the very start or end of a
   * timeline is harmless, and every write re-checks under the mutex */
  return __atomic_load_n(&tl->f, __ATOMIC_RELAXED) != NULL;
}

static void put_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void sep(wf_timeline *tl) {
  if (!tl->first) fputs(",\n", tl->f);
  tl->first = 0;
}

static double now_us(const wf_timeline *tl) { return (wf_now_ns() - tl->t0) / 1e3; }

weft_status wf_tl_start(wf_timeline *tl, const char *path, int mark_cycles) {
  if (!path || !*path) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "timeline: empty path");
  char p[4096];
  size_t k = 0;
  for (const char *s = path; *s && k + 16 < sizeof p; s++) {
    if (s[0] == '%' && s[1] == 'r') {
      k += (size_t)snprintf(p + k, sizeof p - k, "%d", tl->rank);
      s++;
    } else {
      p[k++] = *s;
    }
  }
  p[k] = '\0';
  pthread_mutex_lock(&tl->mu);
  if (tl->f) {
    pthread_mutex_unlock(&tl->mu);
    return wf_err(WEFT_ERR_MISUSE, "timeline: already writing one; stop it first");
  }
  FILE *f = fopen(p, "w");
  if (!f) {
    int e = errno;
    pthread_mutex_unlock(&tl->mu);
    return wf_err(WEFT_ERR_SYSTEM, "timeline: cannot open '%s': %s", p, strerror(e));
  }
  tl->t0 = wf_now_ns();
  tl->mark_cycles = mark_cycles;
  tl->first = 1;
  fprintf(f, "{\"otherData\": {\"start_time_since_epoch_in_micros\": %lld, \"rank\": %d, \"library\": \"weft %s\"},\n"
             "\"displayTimeUnit\": \"ms\",\n\"traceEvents\": [\n",
          (long long)wf_epoch_us(), tl->rank, weft_version());
  __atomic_store_n(&tl->f, f, __ATOMIC_RELAXED);
  sep(tl);
  fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"weft rank %d\"}}", tl->rank,
          tl->rank);
  pthread_mutex_unlock(&tl->mu);
  return WEFT_OK;
}

weft_status wf_tl_stop(wf_timeline *tl) {
  pthread_mutex_lock(&tl->mu);
  weft_status st = WEFT_OK;
  if (tl->f) {
    fputs("\n]}\n", tl->f);
    if (fclose(tl->f)) st = wf_err(WEFT_ERR_SYSTEM, "timeline: closing the file: %s", strerror(errno));
    __atomic_store_n(&tl->f, NULL, __ATOMIC_RELAXED);
    wf_strmap_free(&tl->lanes);
    wf_strmap_init(&tl->lanes);
    tl->nlanes = 0;
  }
  pthread_mutex_unlock(&tl->mu);
  return st;
}

void wf_tl_destroy(wf_timeline *tl) {
  wf_tl_stop(tl);
  wf_strmap_free(&tl->lanes);
  pthread_mutex_destroy(&tl->mu);
}

/* The lane of a tensor, announced with a thread_name event the first time. */
static int lane(wf_timeline *tl, const char *tensor) {
  intptr_t l = (intptr_t)wf_strmap_get(&tl->lanes, tensor);
  if (l) return (int)l;
  l = ++tl->nlanes;
  if (wf_strmap_put(&tl->lanes, tensor, (void *)l)) return 0;
  sep(tl);
  fprintf(tl->f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ", tl->rank,
          (int)l);
  put_json_str(tl->f, tensor);
  fputs("}}", tl->f);
  return (int)l;
}

void wf_tl_begin(wf_timeline *tl, const char *tensor, const char *phase, uint64_t bytes, const char *algo) {
  if (!wf_tl_on(tl)) return;
  pthread_mutex_lock(&tl->mu);
  if (tl->f) {
    int l = lane(tl, tensor);
    sep(tl);
    fprintf(tl->f, "{\"name\": \"%s\", \"ph\": \"B\", \"ts\": %.3f, \"pid\": %d, \"tid\": %d, \"args\": {\"bytes\": %llu",
            phase, now_us(tl), tl->rank, l, (unsigned long long)bytes);
    if (algo) fprintf(tl->f, ", \"algorithm\": \"%s\"", algo);
    fputs("}}", tl->f);
  }
  pthread_mutex_unlock(&tl->mu);
}

void wf_tl_end(wf_timeline *tl, const char *tensor, const char *error) {
  if (!wf_tl_on(tl)) return;
  pthread_mutex_lock(&tl->mu);
  if (tl->f) {
    int l = lane(tl, tensor);
    sep(tl);
    fprintf(tl->f, "{\"ph\": \"E\", \"ts\": %.3f, \"pid\": %d, \"tid\": %d", now_us(tl), tl->rank, l);
    if (error) {
      fputs(", \"args\": {\"error\": ", tl->f);
      put_json_str(tl->f, error);
      fputc('}', tl->f);
    }
    fputc('}', tl->f);
  }
  pthread_mutex_unlock(&tl->mu);
}

void wf_tl_mark(wf_timeline *tl, const char *tensor, const char *what) {
  if (!wf_tl_on(tl)) return;
  pthread_mutex_lock(&tl->mu);
  if (tl->f) {
    int l = lane(tl, tensor);
    sep(tl);
    fputs("{\"name\": ", tl->f);
    put_json_str(tl->f, what);
    fprintf(tl->f, ", \"ph\": \"i\", \"s\": \"t\", \"ts\": %.3f, \"pid\": %d, \"tid\": %d}", now_us(tl), tl->rank, l);
  }
  pthread_mutex_unlock(&tl->mu);
}

void wf_tl_cycle(wf_timeline *tl) {
  if (!wf_tl_on(tl)) return;
  pthread_mutex_lock(&tl->mu);
  if (tl->f && tl->mark_cycles) {
    sep(tl);
    fprintf(tl->f, "{\"name\": \"CYCLE_START\", \"ph\": \"i\", \"s\": \"p\", \"ts\": %.3f, \"pid\": %d, \"tid\": 0}",
            now_us(tl), tl->rank);
  }
  pthread_mutex_unlock(&tl->mu);
}

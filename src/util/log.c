/* log.c - leveled, subsystem-gated logging to stderr, one line per call. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_level = WF_LOG_WARN;
static int g_subsys = WF_SUB_ALL;
/* relaxed: the rank is only a label in log lines */
static _Atomic int g_rank = -1;

static void log_init(void) {
  const char *lv = getenv("WEFT_LOG_LEVEL");
  if (!lv) lv = getenv("HOROVOD_LOG_LEVEL");
  if (lv) {
    if (!strcasecmp(lv, "none") || !strcasecmp(lv, "fatal") || !strcasecmp(lv, "error")) g_level = WF_LOG_NONE;
    else if (!strcasecmp(lv, "warn") || !strcasecmp(lv, "warning")) g_level = WF_LOG_WARN;
    else if (!strcasecmp(lv, "info")) g_level = WF_LOG_INFO;
    else if (!strcasecmp(lv, "debug")) g_level = WF_LOG_DEBUG;
    else if (!strcasecmp(lv, "trace")) g_level = WF_LOG_TRACE;
  }
  const char *ss = getenv("WEFT_LOG_SUBSYS");
  if (ss && *ss && strcasecmp(ss, "all")) {
    static const struct { const char *n; int v; } names[] = {
        {"init", WF_SUB_INIT}, {"engine", WF_SUB_ENGINE}, {"coord", WF_SUB_COORD}, {"tcp", WF_SUB_TCP},
        {"shm", WF_SUB_SHM},   {"algo", WF_SUB_ALGO},     {"boot", WF_SUB_BOOT},   {"api", WF_SUB_API}};
    g_subsys = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
      if (strcasestr(ss, names[i].n)) g_subsys |= names[i].v;
  }
}

int wf_log_enabled(int level, int subsys) {
  pthread_once(&g_once, log_init);
  return level <= g_level && (subsys & g_subsys);
}

void wf_log_set_rank(int rank) { atomic_store_explicit(&g_rank, rank, memory_order_relaxed); }

void wf_log_write(int level, int subsys, const char *file, int line, const char *fmt, ...) {
  pthread_once(&g_once, log_init);
  if (level > g_level) return;
  if (level > WF_LOG_WARN && !(subsys & g_subsys)) return;
  char buf[2048];
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  static const char *lvn[] = {"", "WARN", "INFO", "DEBUG", "TRACE"};
  int rank = atomic_load_explicit(&g_rank, memory_order_relaxed);
  int n;
  if (rank >= 0)
    n = snprintf(buf, sizeof buf, "[weft r%d %s %s:%d] ", rank, lvn[level], base, line);
  else
    n = snprintf(buf, sizeof buf, "[weft %s %s:%d] ", lvn[level], base, line);
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (m < 0) return;
  size_t len = strlen(buf);
  buf[len++] = '\n';
  /* one write() so lines from several threads/processes do not interleave */
  ssize_t w = write(STDERR_FILENO, buf, len);
  (void)w;
}

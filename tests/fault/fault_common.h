/* fault_common.h - helpers shared by the fault-matrix test programs
 * (tests/fault, see docs in fault_test.sh and reference/reliability.md).
 *
 * Not a test itself: each program includes it, so every test stays one
 * executable built from one source file plus this header. It provides:
 *  - a monotonic clock in seconds that every process on the machine shares
 *    (CLOCK_MONOTONIC), so one process can time an event another caused;
 *  - the verdict file: a rank cut short by weftrun's stop (or a rank whose
 *    output is lost) still leaves its findings in $FAULT_DIR/verdict.<rank>:
 *    "PASS ...", "FAIL ...", "MEASURE item=.. what=.. bound=.. measured=.."
 *    lines, which the driver script (fault_test.sh) checks and tabulates;
 *  - small files in $FAULT_DIR for rendezvous between processes outside weft
 *    (a kill time, a pid, "go");
 *  - leak probes: open fds, threads, child processes, new /dev/shm entries;
 *  - message checks: case-insensitive substring, "rank N" naming.
 * Everything is static so programs only pay for what they use. */
#ifndef FAULT_COMMON_H
#define FAULT_COMMON_H

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FX_FN static __attribute__((unused))
#define FX_PRINTF(a, b) __attribute__((format(printf, a, b)))

static FILE *fx_verdict; /* $FAULT_DIR/verdict.<who>, or NULL */
static int fx_failures;
static char fx_who[64] = "?";

FX_FN double fx_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

FX_FN void fx_sleep(double s) {
  if (s <= 0) return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* $FAULT_DIR/<name> into buf; the directory defaults to "." */
FX_FN void fx_path(char *buf, size_t n, const char *name) {
  const char *d = getenv("FAULT_DIR");
  snprintf(buf, n, "%s/%s", d && *d ? d : ".", name);
}

/* Opens the verdict file for this process (who: "0", "1", "fake" ...). */
FX_FN void fx_open_verdict(const char *who) {
  snprintf(fx_who, sizeof fx_who, "%s", who);
  char p[4096], name[96];
  snprintf(name, sizeof name, "verdict.%s", who);
  fx_path(p, sizeof p, name);
  if (fx_verdict) fclose(fx_verdict);
  fx_verdict = fopen(p, "a");
  if (fx_verdict) setvbuf(fx_verdict, NULL, _IOLBF, 0);
}

/* One line to stdout and to the verdict file, each written whole. */
FX_FN FX_PRINTF(2, 3) void fx_line(const char *kind, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("%s [%s] %s\n", kind, fx_who, msg);
  fflush(stdout);
  if (fx_verdict) {
    fprintf(fx_verdict, "%s [%s] %s\n", kind, fx_who, msg);
    fflush(fx_verdict);
  }
}

#define fx_pass(...) fx_line("PASS", __VA_ARGS__)
#define fx_info(...) fx_line("INFO", __VA_ARGS__)

/* Records a failure; returns 0 so checks read `if (bad) return fx_fail(..)`. */
FX_FN FX_PRINTF(1, 2) int fx_fail(const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fx_failures++;
  fx_line("FAIL", "%s", msg);
  return 0;
}

/* A measured detection time against its bound, for the closing table.
 * Fails the test when measured > bound (or nothing was measured: < 0). */
FX_FN int fx_measure(const char *item, const char *what, double bound, double measured) {
  fx_line("MEASURE", "item=%s what=%s bound=%.3f measured=%.3f", item, what, bound, measured);
  if (measured < 0) return fx_fail("%s: nothing was measured (the event never happened)", what);
  if (measured > bound) return fx_fail("%s: took %.3f s, bound %.3f s", what, measured, bound);
  return 1;
}

/* Writes a small file atomically (write a temp, rename), so a reader never
 * sees half of it. */
FX_FN FX_PRINTF(2, 3) int fx_put(const char *name, const char *fmt, ...) {
  char p[4096], tmp[4200];
  fx_path(p, sizeof p, name);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", p, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  if (fclose(f) != 0) return -1;
  return rename(tmp, p);
}

/* Reads a small file into buf; 0 on success. */
FX_FN int fx_get(const char *name, char *buf, size_t n) {
  char p[4096];
  fx_path(p, sizeof p, name);
  FILE *f = fopen(p, "r");
  if (!f) return -1;
  size_t k = fread(buf, 1, n - 1, f);
  buf[k] = '\0';
  fclose(f);
  return 0;
}

/* Waits up to `timeout` s for the file to exist; 0 when it does. */
FX_FN int fx_wait_file(const char *name, double timeout) {
  char p[4096];
  fx_path(p, sizeof p, name);
  double end = fx_now() + timeout;
  while (access(p, F_OK) != 0) {
    if (fx_now() > end) return -1;
    fx_sleep(0.005);
  }
  return 0;
}

/* A number (time stamp, pid) from a file, waiting up to `timeout` s for it;
 * -1 if it never came. */
FX_FN double fx_get_num(const char *name, double timeout) {
  char buf[128];
  if (fx_wait_file(name, timeout) != 0 || fx_get(name, buf, sizeof buf) != 0) return -1;
  return strtod(buf, NULL);
}

/* ------------------------------------------------------------ leak probes */

/* Entries of a /proc directory, "." and ".." excluded; -1 on error. */
FX_FN int fx_count_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

/* Open fds of this process (the directory's own fd not counted). */
FX_FN int fx_count_fds(void) {
  int n = fx_count_dir("/proc/self/fd");
  return n < 0 ? n : n - 1;
}

static void *fx_nothing(void *arg) { return arg; }

/* Threads of this process. The first pthread_create of a process may start
 * a sanitizer runtime's own helper thread (TSan does), which must not count
 * as a leak: fx_threads_settle() makes and joins a throwaway thread first,
 * so that helper exists before the baseline is taken. */
FX_FN int fx_count_threads(void) { return fx_count_dir("/proc/self/task"); }
FX_FN void fx_threads_settle(void) {
  int before = fx_count_threads();
  pthread_t t;
  if (pthread_create(&t, NULL, fx_nothing, NULL) == 0) pthread_join(t, NULL);
  /* the joined thread may stay listed for a moment: wait for it to leave
   * (a sanitizer's helper thread stays: then this gives up after 0.5 s) */
  for (int i = 0; i < 50 && fx_count_threads() > before; i++) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}
/* Threads after a finalize that joined its threads: a joined thread's task
 * can stay listed in /proc for a moment after pthread_join returns, so look
 * again for up to half a second before reporting more than want. */
FX_FN int fx_count_threads_after(int want) {
  int n = fx_count_threads();
  for (int i = 0; i < 50 && n > want; i++) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    n = fx_count_threads();
  }
  return n;
}

/* Processes whose parent is this process (live or zombie). */
FX_FN int fx_count_children(void) {
  DIR *d = opendir("/proc");
  if (!d) return -1;
  int n = 0;
  pid_t me = getpid();
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    char p[300], buf[1024];
    snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(p, "r");
    if (!f) continue;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses */
    char *rp = strrchr(buf, ')');
    int ppid = -1;
    char state;
    if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == me) n++;
  }
  closedir(d);
  return n;
}

/* /dev/shm entries of this job: "weft-<WEFT_JOB_ID>-..." (the shared-memory
 * transport's naming), or any "weft" entry when no job id is set. Other
 * jobs' entries are ignored: the machine is shared, and another test may
 * create segments meanwhile. A snapshot is one string "/name1/name2/"
 * (readdir order; compared by membership). */
FX_FN void fx_shm_snapshot(char *buf, size_t n) {
  buf[0] = '\0';
  char mine[128] = "weft";
  const char *job = getenv("WEFT_JOB_ID");
  if (job && *job) snprintf(mine, sizeof mine, "weft-%s-", job);
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  size_t k = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcasestr(e->d_name, mine)) continue;
    int w = snprintf(buf + k, n - k, "/%s/", e->d_name);
    if (w < 0 || (size_t)w >= n - k) break;
    k += (size_t)w - 1; /* entries share the separating '/' */
  }
  closedir(d);
}

/* First weft /dev/shm entry present now but not in `before`, into out;
 * 0 if there is none. */
FX_FN int fx_shm_new(const char *before, char *out, size_t n) {
  char now[16384];
  fx_shm_snapshot(now, sizeof now);
  for (char *s = now; *s == '/' && s[1];) {
    char *end = strchr(s + 1, '/');
    if (!end) break;
    char ent[512];
    snprintf(ent, sizeof ent, "%.*s", (int)(end - s + 1), s);
    if (!strstr(before, ent)) {
      snprintf(out, n, "%.*s", (int)(end - s - 1), s + 1);
      return 1;
    }
    s = end;
  }
  return 0;
}

/* ------------------------------------------------------------ messages */

FX_FN int fx_has(const char *hay, const char *needle) {
  return hay && needle && strcasestr(hay, needle) != NULL;
}

/* 1 if msg names rank r: "rank r", "ranks r", "rank(s) r" (r not followed
 * by another digit), also in lists like "rank(s) 0, 1". */
FX_FN int fx_names_rank(const char *msg, int r) {
  if (!msg) return 0;
  char num[16];
  int nl = snprintf(num, sizeof num, "%d", r);
  for (const char *p = msg; (p = strcasestr(p, "rank")); p += 4) {
    const char *q = p + 4;
    if (*q == 's')
      q++;
    else if (!strncmp(q, "(s)", 3))
      q += 3;
    if (*q != ' ') continue;
    /* the number list after it: digits, commas, spaces */
    for (q++; *q && (isdigit((unsigned char)*q) || *q == ',' || *q == ' ');) {
      if (!strncmp(q, num, (size_t)nl) && !isdigit((unsigned char)q[nl]) && (q == p || !isdigit((unsigned char)q[-1])))
        return 1;
      q++;
    }
  }
  return 0;
}

#endif /* FAULT_COMMON_H */

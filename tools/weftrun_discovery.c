/* weftrun_discovery.c - the hosts of an elastic job that grows
 * (--host-discovery-script): running the script (once at the start, then
 * every DISCOVERY_SECONDS, never two at once, killed past SCRIPT_SECONDS),
 * reading its output as horovodrun does (one "HOST" or "HOST:SLOTS" a
 * line; HOST alone gets --slots-per-host), keeping the host table
 * (o->hosts: a host keeps its index for good; one missing from the latest
 * output has 0 slots) and the cool-down of hosts where a worker failed
 * (--blacklist-cooldown-range). weftrun_elastic.c decides where workers
 * start. A run that fails (exit status, bad line, timeout) is reported and
 * changes nothing. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/time.h"
#include "weftrun.h"

#define DISCOVERY_SECONDS 1.0 /* between two runs (horovodrun: 1 s) */
#define SCRIPT_SECONDS 30.0   /* one run, at most */
#define OUT_MAX 16384         /* its output, at most */
#define HOSTS_MAX 4096

struct wf_run_disc {
  const char *script;
  pid_t pid;                 /* the running script, 0: none */
  int fd;                    /* its stdout, -1: none */
  char out[OUT_MAX];
  size_t len;
  int too_long;
  int64_t kill_at;           /* while running */
  int64_t next_at;           /* the next run, while none runs */
  int64_t *cool_until;       /* per host: when it takes workers again (INT64_MAX: never; 0: now) */
  int *fails;                /* per host: workers failed there */
  int cap;                   /* of both */
  int reported;              /* the last run's failure was reported (say it once until one works) */
};

void wf_run_disc_usage(FILE *f) {
  fputs("  --host-discovery-script SCRIPT\n"
        "                           elastic growth (implies elastic mode; not with -H/--hostfile):\n"
        "                           SCRIPT (sh -c) prints the hosts that may run workers, one\n"
        "                           HOST or HOST:SLOTS a line, as horovodrun reads it; weftrun runs\n"
        "                           it at the start and every second, and starts workers on free\n"
        "                           slots up to --max-np; the running ones learn of them when they\n"
        "                           ask (weft_elastic_hosts_updated; weft.torch.elastic's commit)\n"
        "                           and re-form a larger world. A host listing fewer slots than\n"
        "                           it runs (or missing: 0) gives up its highest worker ids, never\n"
        "                           below --min-np: the members learn it when they ask, re-form\n"
        "                           without them, and weftrun stops them (no failure)\n"
        "  --slots-per-host N       slots of a discovered HOST printed without :SLOTS (default 1)\n"
        "  --blacklist-cooldown-range MIN MAX\n"
        "                           a host where a worker failed takes no new workers for MIN\n"
        "                           seconds, doubled at each further failure, at most MAX\n"
        "                           (default: never again, as horovodrun)\n",
        f);
}

static double parse_secs(const char *opt, const char *v) {
  char *end;
  errno = 0;
  double r = strtod(v, &end);
  if (errno || end == v || *end || !(r >= 0) || r > 86400)
    wf_run_usage_error("%s wants seconds from 0 to 86400, not '%s'", opt, v);
  return r;
}

int wf_run_disc_option(struct wf_run_opts *o, int argc, char **argv, int *i) {
  const char *v;
  if ((v = wf_run_opt_value(argc, argv, i, "--host-discovery-script"))) {
    if (!v[strspn(v, " \t")]) wf_run_usage_error("--host-discovery-script wants a command");
    o->discovery = v;
  } else if ((v = wf_run_opt_value(argc, argv, i, "--slots-per-host"))) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < 1 || n > HOSTS_MAX)
      wf_run_usage_error("--slots-per-host wants a number from 1 to %d, not '%s'", HOSTS_MAX, v);
    o->slots_per_host = (int)n;
  } else if ((v = wf_run_opt_value(argc, argv, i, "--blacklist-cooldown-range"))) {
    if (*i + 1 >= argc) wf_run_usage_error("--blacklist-cooldown-range wants two values, MIN MAX (seconds)");
    o->cooldown_min = parse_secs("--blacklist-cooldown-range", v);
    o->cooldown_max = parse_secs("--blacklist-cooldown-range", argv[++*i]);
    if (o->cooldown_min <= 0 || o->cooldown_max < o->cooldown_min)
      wf_run_usage_error("--blacklist-cooldown-range wants 0 < MIN <= MAX, not %g %g", o->cooldown_min,
                         o->cooldown_max);
  } else {
    return 0;
  }
  return 1;
}

/* ------------------------------------------------------------ the script */

static void start(struct wf_run_disc *d) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    fprintf(stderr, "weftrun: elastic: cannot run the host discovery script: pipe: %s\n", strerror(errno));
    d->next_at = wf_deadline_after(DISCOVERY_SECONDS);
    return;
  }
  pid_t parent = getpid(), pid = fork();
  if (pid == 0) {
    (void)setpgid(0, 0);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(126);
    sigset_t none;
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    int nul = open("/dev/null", O_RDONLY);
    if (dup2(p[1], 1) < 0 || (nul >= 0 && dup2(nul, 0) < 0)) _exit(126);
    execl("/bin/sh", "sh", "-c", d->script, (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  if (pid < 0) {
    close(p[0]);
    fprintf(stderr, "weftrun: elastic: cannot run the host discovery script: fork: %s\n", strerror(errno));
    d->next_at = wf_deadline_after(DISCOVERY_SECONDS);
    return;
  }
  (void)setpgid(pid, pid);
  (void)fcntl(p[0], F_SETFL, O_NONBLOCK);
  d->pid = pid;
  d->fd = p[0];
  d->len = 0;
  d->too_long = 0;
  d->kill_at = wf_deadline_after(SCRIPT_SECONDS);
  d->next_at = WF_NO_DEADLINE;
}

static void fail(struct wf_run_disc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct wf_run_disc *d, const char *fmt, ...) {
  if (d->reported) return; /* once, until a run works again */
  d->reported = 1;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "weftrun: elastic: host discovery: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "; the hosts stay as they were\n");
}

static int grow_table(struct wf_run_disc *d, int n) {
  if (n <= d->cap) return 0;
  int cap = d->cap ? d->cap : 8;
  while (cap < n) cap *= 2;
  int64_t *c = realloc(d->cool_until, (size_t)cap * sizeof *c);
  if (c) d->cool_until = c;
  int *f = realloc(d->fails, (size_t)cap * sizeof *f);
  if (f) d->fails = f;
  if (!c || !f) return -1;
  for (int h = d->cap; h < cap; h++) d->cool_until[h] = 0, d->fails[h] = 0;
  d->cap = cap;
  return 0;
}

/* The host named n bytes at s, appended if new; -1 if out of room. */
static int host_index(struct wf_run_disc *d, struct wf_run_opts *o, const char *s, size_t n) {
  for (int h = 0; h < o->nhosts; h++)
    if (strlen(o->hosts[h].name) == n && !memcmp(o->hosts[h].name, s, n)) return h;
  if (o->nhosts >= HOSTS_MAX || grow_table(d, o->nhosts + 1) != 0) return -1;
  struct wf_run_host *nh = realloc(o->hosts, sizeof *nh * (size_t)(o->nhosts + 1));
  char *name = strndup(s, n);
  if (nh) o->hosts = nh;
  if (!nh || !name) {
    free(name);
    return -1;
  }
  const char *at = strchr(name, '@');
  o->hosts[o->nhosts] = (struct wf_run_host){.name = name, .addr = at ? at + 1 : name, .index = -1};
  o->hosts[o->nhosts].local = wf_run_host_is_local(o->hosts[o->nhosts].addr);
  return o->nhosts++;
}

/* The finished run's output (status: its wait status) into o->hosts. */
static void apply(struct wf_run_disc *d, struct wf_run_opts *o, int status) {
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (WIFEXITED(status)) fail(d, "the script '%s' exited with status %d", d->script, WEXITSTATUS(status));
    else fail(d, "the script '%s' was killed by signal %d", d->script, WTERMSIG(status));
    return;
  }
  if (d->too_long) {
    fail(d, "the script '%s' printed more than %d bytes", d->script, OUT_MAX - 1);
    return;
  }
  d->out[d->len] = '\0';
  int slots[HOSTS_MAX];
  int idx[HOSTS_MAX], n = 0;
  for (char *line = d->out, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    line += strspn(line, " \t\r");
    size_t len = strcspn(line, " \t\r");
    if (line[len + strspn(line + len, " \t\r")]) {
      fail(d, "the script printed '%s', not HOST or HOST:SLOTS", line);
      return;
    }
    if (!len) continue;
    char *colon = memchr(line, ':', len);
    size_t hn = colon ? (size_t)(colon - line) : len;
    long sl = o->slots_per_host;
    if (colon) {
      char *end;
      errno = 0;
      sl = strtol(colon + 1, &end, 10);
      if (errno || end == colon + 1 || end != line + len || sl < 0 || sl > HOSTS_MAX) {
        fail(d, "the script printed '%s': bad slot count (0..%d)", line, HOSTS_MAX);
        return;
      }
    }
    if (!wf_run_host_ok(line, hn)) {
      fail(d, "the script printed '%s': not [USER@]HOST (names of letters, digits, '.', '-', '_')", line);
      return;
    }
    int h = host_index(d, o, line, hn);
    if (h < 0 || n == HOSTS_MAX) {
      fail(d, "out of memory or more than %d hosts", HOSTS_MAX);
      return;
    }
    idx[n] = h, slots[n++] = (int)sl; /* a host printed twice: the last line wins */
  }
  d->reported = 0;
  for (int h = 0; h < o->nhosts; h++) o->hosts[h].slots = 0;
  for (int k = 0; k < n; k++) o->hosts[idx[k]].slots = slots[k];
}

int wf_run_disc_fd(const struct wf_run_disc *d) { return d ? d->fd : -1; }

void wf_run_disc_read(struct wf_run_disc *d, struct wf_run_opts *o) {
  if (!d || d->fd < 0) return;
  for (;;) {
    char tmp[4096];
    ssize_t n = read(d->fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) break; /* EOF (or an error: the same) */
    size_t room = OUT_MAX - 1 - d->len, take = (size_t)n < room ? (size_t)n : room;
    memcpy(d->out + d->len, tmp, take);
    d->len += take;
    if (take < (size_t)n) d->too_long = 1;
  }
  /* EOF: the script ended (or closed its stdout; then it is waited for,
   * SCRIPT_SECONDS at most by the kill below) */
  if (d->pid > 0) {
    int status = 126 << 8; /* cannot happen: only weftrun waits for it */
    pid_t p = waitpid(d->pid, &status, WNOHANG);
    if (p == 0) {
      close(d->fd);
      d->fd = -1; /* the tick waits for it */
      return;
    }
    if (d->fd >= 0) close(d->fd);
    d->fd = -1;
    d->pid = 0;
    d->next_at = wf_deadline_after(DISCOVERY_SECONDS);
    apply(d, o, status);
  }
}

void wf_run_disc_tick(struct wf_run_disc *d, struct wf_run_opts *o) {
  if (!d) return;
  int64_t now = wf_now_ns();
  if (d->pid > 0 && d->fd < 0) { /* stdout closed, not reaped yet */
    int status;
    if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
      d->pid = 0;
      d->next_at = wf_deadline_after(DISCOVERY_SECONDS);
      apply(d, o, status);
      return;
    }
  }
  if (d->pid > 0 && now >= d->kill_at) {
    (void)kill(-d->pid, SIGKILL);
    fail(d, "the script '%s' ran longer than %g s; killed", d->script, SCRIPT_SECONDS);
    if (d->fd >= 0) close(d->fd);
    d->fd = -1;
    while (waitpid(d->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    d->pid = 0;
    d->next_at = wf_deadline_after(DISCOVERY_SECONDS);
    return;
  }
  if (d->pid == 0 && now >= d->next_at) start(d);
}

int64_t wf_run_disc_deadline(const struct wf_run_disc *d) {
  if (!d) return WF_NO_DEADLINE;
  if (d->pid > 0) return d->fd < 0 ? wf_deadline_after(0.05) : d->kill_at;
  return d->next_at;
}

void wf_run_disc_failed(struct wf_run_disc *d, const struct wf_run_opts *o, int h) {
  if (!d || h < 0 || h >= d->cap) return;
  int n = ++d->fails[h];
  if (o->cooldown_min <= 0) {
    d->cool_until[h] = WF_NO_DEADLINE;
    fprintf(stderr, "weftrun: elastic: host %s gets no new workers (a worker failed there; "
            "--blacklist-cooldown-range would let it back)\n", o->hosts[h].name);
    return;
  }
  double s = o->cooldown_min;
  for (int k = 1; k < n && s < o->cooldown_max; k++) s *= 2;
  if (s > o->cooldown_max) s = o->cooldown_max;
  d->cool_until[h] = wf_deadline_after(s);
  fprintf(stderr, "weftrun: elastic: host %s cools down for %g s (failure %d there) before new workers start on it\n",
          o->hosts[h].name, s, n);
}

int wf_run_disc_usable(const struct wf_run_disc *d, int h) {
  return d && h >= 0 && h < d->cap && wf_now_ns() >= d->cool_until[h];
}

struct wf_run_disc *wf_run_disc_first(struct wf_run_opts *o) {
  struct wf_run_disc *d = calloc(1, sizeof *d);
  if (!d || grow_table(d, 8) != 0) {
    fputs("weftrun: out of memory\n", stderr);
    wf_run_disc_free(d);
    return NULL;
  }
  d->script = o->discovery;
  d->fd = -1;
  int64_t give_up = wf_deadline_after(o->elastic_timeout);
  for (;;) {
    start(d);
    while (d->pid > 0) {
      struct pollfd pf = {d->fd, POLLIN, 0};
      if (d->fd >= 0) (void)poll(&pf, 1, wf_ms_until(d->kill_at));
      else (void)poll(NULL, 0, 50);
      wf_run_disc_read(d, o);
      wf_run_disc_tick(d, o);
    }
    long total = 0;
    for (int h = 0; h < o->nhosts; h++) total += o->hosts[h].slots;
    if (total >= o->min_np) {
      if (o->np > total) o->np = (int)total;
      return d;
    }
    if (wf_now_ns() >= give_up) {
      fprintf(stderr, "weftrun: elastic: host discovery found %ld slot%s, fewer than --min-np %d, within "
              "--elastic-timeout %g s; not starting the job\n", total, total == 1 ? "" : "s", o->min_np,
              o->elastic_timeout);
      wf_run_disc_free(d);
      return NULL;
    }
    (void)poll(NULL, 0, (int)(DISCOVERY_SECONDS * 1000));
  }
}

void wf_run_disc_free(struct wf_run_disc *d) {
  if (!d) return;
  if (d->pid > 0) {
    (void)kill(-d->pid, SIGKILL);
    while (waitpid(d->pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  if (d->fd >= 0) close(d->fd);
  free(d->cool_until);
  free(d->fails);
  free(d);
}

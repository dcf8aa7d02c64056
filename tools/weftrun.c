/* weftrun.c - weft's local launcher: `weftrun -np N [options] [--] cmd args...`
 * starts N ranks of cmd on this machine, gives each its WEFT_* (and matching
 * HOROVOD_*) environment, relays their output and stops the whole job when one
 * rank fails or weftrun is signalled. This file parses the command line and
 * prepares the job; weftrun_job.c runs it, weftrun_relay.c relays output.
 * weftrun does not use the weft library itself (no weft_init). */
#include "weftrun.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/time.h"
#include "weft.h"

#define NP_MAX 4096

extern char **environ;

/* Set by weftrun for every rank; -x cannot override them. */
static const char *const g_reserved[] = {
    "WEFT_RANK",          "WEFT_SIZE",          "WEFT_LOCAL_RANK",   "WEFT_LOCAL_SIZE",   "WEFT_CROSS_RANK",
    "WEFT_CROSS_SIZE",    "WEFT_ADDR",          "WEFT_SECRET",       "WEFT_JOB_ID",       "HOROVOD_RANK",
    "HOROVOD_SIZE",       "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE"};
#define NRESERVED (sizeof g_reserved / sizeof g_reserved[0])

static void usage(FILE *f) {
  fprintf(f,
          "Usage: weftrun -np N [options] [--] command [args...]\n"
          "Starts N ranks of a weft job on this machine and supervises them.\n"
          "\n"
          "Options:\n"
          "  -np N, -n N              number of ranks (1..%d); required\n"
          "  -x NAME=VALUE, --env NAME=VALUE\n"
          "                           extra environment for every rank (repeatable)\n"
          "  --output-filename DIR    write rank i's stdout and stderr to DIR/rank.<i>/stdout\n"
          "                           and DIR/rank.<i>/stderr instead of relaying them\n"
          "  --tag-output             prefix each relayed line with \"[rank] \" (default)\n"
          "  --no-tag-output          relay lines without the prefix\n"
          "  --timeout SECONDS        stop the whole job after SECONDS and exit 124\n"
          "  --grace SECONDS          time between SIGTERM and SIGKILL when stopping (default 3)\n"
          "  -v, --verbose            report the job's setup and every rank's exit\n"
          "  -h, --help               show this help\n"
          "  --version                show the version\n"
          "\n"
          "Each rank gets WEFT_RANK, WEFT_SIZE, WEFT_LOCAL_RANK, WEFT_LOCAL_SIZE, WEFT_CROSS_RANK,\n"
          "WEFT_CROSS_SIZE, WEFT_ADDR (rank 0 listens there), WEFT_SECRET, WEFT_JOB_ID, and the\n"
          "same values as HOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE.\n"
          "Ranks read stdin from /dev/null.\n"
          "\n"
          "When a rank exits non-zero or dies by a signal, the others get a second to report and\n"
          "exit on their own, then SIGTERM, then SIGKILL\n"
          "after the grace time, and weftrun exits with that rank's status (128+signal if it\n"
          "was killed). SIGINT, SIGTERM and SIGHUP to weftrun are forwarded to the ranks\n"
          "(a second one kills them at once) and weftrun exits 128+signal.\n",
          NP_MAX);
}

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("weftrun: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nTry 'weftrun --help' for more information.\n", stderr);
  exit(WF_RUN_EXIT_USAGE);
}

/* If argv[*i] is option `name` ("name value" or "name=value"), returns its
 * value (advancing *i past it); otherwise NULL. */
static const char *opt_value(int argc, char **argv, int *i, const char *name) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return NULL;
  if (a[n] == '=') return a + n + 1;
  if (a[n] != '\0') return NULL;
  if (*i + 1 >= argc) usage_error("option %s needs a value", name);
  *i += 1;
  return argv[*i];
}

static int parse_np(const char *s) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < 1 || v > NP_MAX)
    usage_error("-np wants a number of ranks from 1 to %d, not '%s'", NP_MAX, s);
  return (int)v;
}

static double parse_seconds(const char *opt, const char *s, int zero_ok) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  /* a year is far beyond any job; the cap keeps deadline arithmetic finite */
  if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0 || (v == 0 && !zero_ok) || v > 365.0 * 86400)
    usage_error("%s wants a number of seconds%s, not '%s'", opt, zero_ok ? "" : " above 0", s);
  return v;
}

/* Environment names as POSIX shells accept them. */
static int env_name_ok(const char *s, size_t n) {
  if (n == 0 || (s[0] >= '0' && s[0] <= '9')) return 0;
  for (size_t k = 0; k < n; k++)
    if (!(s[k] == '_' || (s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z') || (s[k] >= '0' && s[k] <= '9')))
      return 0;
  return 1;
}

static int is_reserved(const char *name, size_t n) {
  for (size_t k = 0; k < NRESERVED; k++)
    if (strlen(g_reserved[k]) == n && memcmp(g_reserved[k], name, n) == 0) return 1;
  return 0;
}

/* Adds one -x argument. "NAME" alone exports weftrun's own value, which the
 * ranks inherit anyway, so it only needs checking. */
static void add_env(struct wf_run_opts *o, const char *arg) {
  const char *eq = strchr(arg, '=');
  size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
  if (!env_name_ok(arg, n)) usage_error("-x wants NAME=VALUE with a valid variable name, not '%s'", arg);
  if (is_reserved(arg, n)) {
    fprintf(stderr, "weftrun: ignoring -x %.*s: weftrun sets it for every rank\n", (int)n, arg);
    return;
  }
  if (!eq) return;
  o->env[o->nenv++] = (char *)arg;
}

static void parse_args(int argc, char **argv, struct wf_run_opts *o) {
  memset(o, 0, sizeof *o);
  o->tag = 1;
  o->grace = 3;
  o->env = calloc((size_t)argc + 1, sizeof *o->env); /* -x entries <= argc */
  if (!o->env) {
    fputs("weftrun: out of memory\n", stderr);
    exit(WF_RUN_EXIT_SETUP);
  }
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i], *v;
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-' || a[1] == '\0') break; /* the command */
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--version")) {
      printf("weftrun (weft) %d.%d.%d\n", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH);
      exit(0);
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      o->verbose = 1;
    } else if (!strcmp(a, "--tag-output")) {
      o->tag = 1;
    } else if (!strcmp(a, "--no-tag-output")) {
      o->tag = 0;
    } else if ((v = opt_value(argc, argv, &i, "-np")) || (v = opt_value(argc, argv, &i, "-n")) ||
               (v = opt_value(argc, argv, &i, "--np"))) {
      o->np = parse_np(v);
    } else if ((v = opt_value(argc, argv, &i, "-x")) || (v = opt_value(argc, argv, &i, "--env"))) {
      add_env(o, v);
    } else if ((v = opt_value(argc, argv, &i, "--output-filename"))) {
      if (!*v) usage_error("--output-filename wants a directory");
      o->outdir = v;
    } else if ((v = opt_value(argc, argv, &i, "--timeout"))) {
      o->timeout = parse_seconds("--timeout", v, 0);
    } else if ((v = opt_value(argc, argv, &i, "--grace"))) {
      o->grace = parse_seconds("--grace", v, 1);
    } else {
      usage_error("unknown option '%s'", a);
    }
  }
  if (o->np == 0) usage_error("missing -np N (the number of ranks)");
  if (i >= argc) usage_error("missing the command to run");
  o->cmd = argv + i;
}

/* --------------------------------------------------------------- job setup */

static int env_is(const char *entry, const char *name, size_t n) {
  return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

char **wf_run_build_env(const struct wf_run_job *j, int rank, struct wf_run_env_store *store) {
  const struct wf_run_opts *o = j->o;
  size_t nenv = 0;
  while (environ && environ[nenv]) nenv++;
  char **envp = calloc(nenv + (size_t)o->nenv + NRESERVED + 1, sizeof *envp);
  if (!envp) return NULL;
  size_t k = 0;
  for (size_t e = 0; e < nenv; e++) {
    const char *eq = strchr(environ[e], '=');
    if (!eq) continue;
    size_t n = (size_t)(eq - environ[e]);
    int drop = is_reserved(environ[e], n);
    for (int x = 0; x < o->nenv && !drop; x++) drop = env_is(o->env[x], environ[e], n);
    if (!drop) envp[k++] = environ[e];
  }
  for (int x = 0; x < o->nenv; x++) {
    size_t n = (size_t)(strchr(o->env[x], '=') - o->env[x]);
    int later = 0; /* the last -x of a name wins */
    for (int y = x + 1; y < o->nenv && !later; y++) later = env_is(o->env[y], o->env[x], n);
    if (!later) envp[k++] = o->env[x];
  }
  const char *pre[2] = {"WEFT", "HOROVOD"};
  int s = 0;
  for (int p = 0; p < 2; p++) {
    snprintf(store->s[s++], sizeof store->s[0], "%s_RANK=%d", pre[p], rank);
    snprintf(store->s[s++], sizeof store->s[0], "%s_SIZE=%d", pre[p], o->np);
    snprintf(store->s[s++], sizeof store->s[0], "%s_LOCAL_RANK=%d", pre[p], rank);
    snprintf(store->s[s++], sizeof store->s[0], "%s_LOCAL_SIZE=%d", pre[p], o->np);
    snprintf(store->s[s++], sizeof store->s[0], "%s_CROSS_RANK=0", pre[p]);
    snprintf(store->s[s++], sizeof store->s[0], "%s_CROSS_SIZE=1", pre[p]);
  }
  snprintf(store->s[s++], sizeof store->s[0], "WEFT_ADDR=%s", j->addr);
  snprintf(store->s[s++], sizeof store->s[0], "WEFT_SECRET=%s", j->secret);
  snprintf(store->s[s++], sizeof store->s[0], "WEFT_JOB_ID=%s", j->job_id);
  for (int t = 0; t < s; t++) envp[k++] = store->s[t];
  envp[k] = NULL;
  return envp;
}

static int random_hex(char *out, size_t nbytes) {
  unsigned char b[64];
  size_t got = 0;
  while (got < nbytes) {
    ssize_t n = getrandom(b + got, nbytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    got += (size_t)n;
  }
  for (size_t k = 0; k < nbytes; k++) snprintf(out + 2 * k, 3, "%02x", b[k]);
  return 0;
}

/* A port that is free now: rank 0 will listen there. Another process could
 * take it in between; rank 0 then fails to listen and the job stops. */
static int free_port_addr(char *out, size_t outsz) {
  int rc = -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) goto out;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) goto out;
  if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) goto out;
  snprintf(out, outsz, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
  rc = 0;
out:
  if (fd >= 0) close(fd);
  return rc;
}

static int mkdir_p(const char *dir) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char c = *p;
    *p = '\0';
    if (mkdir(path, 0777) != 0 && errno != EEXIST) return -1;
    *p = c;
    if (c == '\0') break;
  }
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* Signals arrive through a signalfd, read by the main loop: nothing runs in a
 * handler. */
static int setup_signals(struct wf_run_job *j) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, NULL); /* a closed stdout is noticed by write() */
  /* An ignored signal is discarded, not queued to the signalfd. A launcher
   * must see its children exit and be stoppable, so SIGCHLD/SIGINT/SIGTERM
   * go back to default (blocked below, so "default" never acts); SIGHUP stays
   * ignored if it was, as under nohup. */
  sa.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) return -1;
  j->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  return j->sigfd < 0 ? -1 : 0;
}

/* Pipes and files must never land on 0/1/2, or a rank's dup2 onto them would
 * be a no-op that keeps them close-on-exec. */
static void ensure_std_fds(void) {
  for (int fd = 0; fd < 3; fd++) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (n >= 0 && n != fd) close(n); /* cannot happen: lowest free fd is fd */
  }
}

int main(int argc, char **argv) {
  ensure_std_fds();
  struct wf_run_opts o;
  parse_args(argc, argv, &o);

  struct wf_run_job j;
  memset(&j, 0, sizeof j);
  j.o = &o;
  j.exit_code = -1;
  j.timeout_at = o.timeout > 0 ? wf_deadline_after(o.timeout) : WF_NO_DEADLINE;
  j.term_at = WF_NO_DEADLINE;
  j.devnull = -1;
  j.sigfd = -1;
  j.exitfd = epoll_create1(EPOLL_CLOEXEC); /* -1: ranks are reaped in index order */
  int rc = WF_RUN_EXIT_SETUP;
  const char *what = NULL;

  if (setup_signals(&j) != 0) {
    what = "cannot set up signal handling";
    goto out;
  }
  /* two pipes per rank stay open in weftrun; ranks get the old limit back */
  rlim_t want = (rlim_t)o.np * 2 + 64;
  if (getrlimit(RLIMIT_NOFILE, &j.nofile) == 0 && j.nofile.rlim_cur != RLIM_INFINITY && j.nofile.rlim_cur < want) {
    struct rlimit r = j.nofile;
    r.rlim_cur = (r.rlim_max == RLIM_INFINITY || r.rlim_max > want) ? want : r.rlim_max;
    j.nofile_raised = r.rlim_cur > j.nofile.rlim_cur && setrlimit(RLIMIT_NOFILE, &r) == 0;
  }
  if (random_hex(j.secret, 32) != 0 || random_hex(j.job_id, 8) != 0) {
    what = "cannot get random bytes (getrandom)";
    goto out;
  }
  if (free_port_addr(j.addr, sizeof j.addr) != 0) {
    what = "cannot find a free port on 127.0.0.1";
    goto out;
  }
  if (o.outdir && mkdir_p(o.outdir) != 0) {
    fprintf(stderr, "weftrun: cannot create directory '%s': %s\n", o.outdir, strerror(errno));
    goto out;
  }
  j.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  j.ranks = calloc((size_t)o.np, sizeof *j.ranks);
  if (j.devnull < 0 || !j.ranks) {
    what = "cannot open /dev/null or allocate the rank table";
    goto out;
  }
  for (int i = 0; i < o.np; i++) j.ranks[i].pidfd = -1;
  for (int i = 0; i < o.np; i++) { /* ranks never started have nothing to relay */
    wf_run_stream_init(&j.ranks[i].out, -1, 1, NULL);
    wf_run_stream_init(&j.ranks[i].err, -1, 2, NULL);
  }
  if (o.verbose)
    fprintf(stderr, "weftrun: job %s: starting %d rank%s of '%s'; rank 0 listens on %s\n", j.job_id, o.np,
            o.np == 1 ? "" : "s", o.cmd[0], j.addr);

  for (int i = 0; i < o.np; i++) {
    if (wf_run_spawn(&j, i) != 0) {
      j.exit_code = WF_RUN_EXIT_SETUP;
      wf_run_stop(&j, SIGTERM);
      break;
    }
    if (o.verbose) fprintf(stderr, "weftrun: rank %d is pid %d\n", i, (int)j.ranks[i].pid);
    if (j.ranks[i].exec_errno) break; /* its exit stops the job; start no more */
  }
  rc = wf_run_supervise(&j);

out:
  if (what) fprintf(stderr, "weftrun: %s: %s\n", what, strerror(errno));
  if (j.sigfd >= 0) close(j.sigfd);
  if (j.exitfd >= 0) close(j.exitfd);
  if (j.devnull >= 0) close(j.devnull);
  free(j.ranks);
  free(o.env);
  return rc;
}

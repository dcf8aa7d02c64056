/* weftrun_job.c - starting weftrun's ranks and supervising them until the
 * job ends.
 *
 * Every rank is its own process group, so a signal to the group also reaches
 * what the rank started. A remote rank's process is the remote shell (--rsh)
 * running "sh -s", whose stdin gets the rank's script (weftrun.c) and then
 * stays open: when it closes, the remote side kills the rank.
 * One poll() loop waits on a signalfd (SIGCHLD and the
 * stop signals: no work in signal handlers), on the ranks' output pipes and
 * on the status channel. A failure, a signal or --timeout decides the exit
 * code and starts the stop: SIGTERM (or the signal weftrun got), SIGKILL
 * after --grace. The job is over when every rank is reaped and its output
 * relayed.
 *
 * Which failure is reported: when a rank fails because a peer was lost (or
 * aborted, or reported the failure), its weft library writes one status line
 * naming that peer before it exits (src/bootstrap/launcher_link.c), through a pipe
 * (local ranks) or its stderr (remote ranks). After the first abnormal exit
 * weftrun follows those "caused by" links to the root rank and waits (at most
 * CAUSE_WAIT_SECONDS) for the root to end: the root's status is the job's,
 * however the kernel ordered the exits. */
#include "weftrun.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/time.h"

/* The child passes a failed exec's errno to weftrun through this fd; it is
 * close-on-exec, so EOF tells weftrun the exec worked. */
#define CHILD_STATUS_FD 3
/* After the last rank exits, how long processes it left behind may keep its
 * output open before they are killed, and then before weftrun gives up. */
#define LINGER_SECONDS 1.0
/* after a rank fails, how long the others may take to report and exit on
 * their own before they get SIGTERM */
#define SETTLE_SECONDS 1.0
/* after the first failure, how long weftrun waits for the rank that caused
 * it (per the status lines) to end, before it reports the first failure */
#define CAUSE_WAIT_SECONDS 3.0

static const char *sig_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

static void append(char *buf, size_t cap, size_t *len, const char *s) {
  size_t n = strlen(s);
  if (n > cap - 1 - *len) n = cap - 1 - *len;
  memcpy(buf + *len, s, n);
  *len += n;
}

/* In the forked child: make the rank's process, then exec. Only plain system
 * calls here, no stdio or malloc. */
static void __attribute__((noreturn))
child(const struct wf_run_job *j, int out_w, int err_w, int status_w, pid_t parent, char **envp, int in_r,
      char **rsh, int rank0) {
  (void)setpgid(0, 0);
  /* Die with weftrun even if it is SIGKILLed. If weftrun died before prctl,
   * our parent is already someone else and nobody would stop us. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(WF_RUN_EXIT_SETUP);
  /* weftrun ignores SIGPIPE and blocks the stop signals; ranks start clean */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; s++) (void)sigaction(s, &sa, NULL); /* KILL, STOP and libc's own refuse: fine */
  if (j->nofile_raised) (void)setrlimit(RLIMIT_NOFILE, &j->nofile);
  if (dup2(in_r >= 0 ? in_r : j->devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
    _exit(WF_RUN_EXIT_SETUP);
  if (status_w != CHILD_STATUS_FD && dup3(status_w, CHILD_STATUS_FD, O_CLOEXEC) < 0) _exit(WF_RUN_EXIT_SETUP);
  /* the status channel (link_w is at fd >= 10: nothing above clobbered it) */
  int last = CHILD_STATUS_FD;
  if (!rsh && j->link_w >= 0) {
    if (dup2(j->link_w, WF_RUN_LINK_FD) < 0) _exit(WF_RUN_EXIT_SETUP);
    last = WF_RUN_LINK_FD;
  }
  if (!rsh && rank0 && j->listen_fd >= 0) { /* at fd >= 10 too: nothing above clobbered it */
    if (dup2(j->listen_fd, WF_RUN_LISTEN_FD) < 0) _exit(WF_RUN_EXIT_SETUP);
    last = WF_RUN_LISTEN_FD;
  }
  if (close_range((unsigned)last + 1, ~0U, 0) != 0)
    for (int fd = last + 1; fd < 65536; fd++) (void)close(fd);
  sigset_t none;
  sigemptyset(&none);
  (void)sigprocmask(SIG_SETMASK, &none, NULL);

  if (rsh) execvp(rsh[0], rsh); /* the remote shell: weftrun's own environment */
  else execvpe(j->o->cmd[0], j->o->cmd, envp);

  int e = errno;
  char msg[512];
  size_t len = 0;
  append(msg, sizeof msg, &len, "weftrun: cannot execute '");
  append(msg, sizeof msg, &len, rsh ? rsh[0] : j->o->cmd[0]);
  append(msg, sizeof msg, &len, "': ");
  append(msg, sizeof msg, &len, strerror(e));
  append(msg, sizeof msg, &len, "\n");
  ssize_t w = write(2, msg, len);
  w = write(CHILD_STATUS_FD, &e, sizeof e);
  (void)w;
  _exit(e == ENOENT ? 127 : 126); /* as shells do: not found / not executable */
}

void wf_run_feed_script(struct wf_run_rank *r) {
  while (r->script && r->script_done < r->script_len) {
    ssize_t w = write(r->stdin_w, r->script + r->script_done, r->script_len - r->script_done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return; /* the pipe is full: later */
    if (w <= 0) break; /* the shell is gone already (EPIPE): its exit reports it */
    r->script_done += (size_t)w;
  }
  free(r->script);
  r->script = NULL;
}

/* --output-filename: DIR/rank.<i>/stdout and stderr, truncated; i
 * zero-padded to width digits, as horovodrun (rank.07 of 12). */
static int open_outputs(const char *dir, int width, int i, int *out_fd, int *err_fd) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/rank.%0*d", dir, width, i);
  if (mkdir(path, 0777) != 0 && errno != EEXIST) return -1;
  snprintf(path, sizeof path, "%s/rank.%0*d/stdout", dir, width, i);
  *out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (*out_fd < 0) return -1;
  snprintf(path, sizeof path, "%s/rank.%0*d/stderr", dir, width, i);
  *err_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  return *err_fd < 0 ? -1 : 0;
}

static void on_link(void *ctx, int rank, const char *line, size_t n) { wf_run_link_line(ctx, rank, line, n); }

int wf_run_spawn(struct wf_run_job *j, int i) {
  const struct wf_run_opts *o = j->o;
  struct wf_run_rank *r = &j->ranks[i];
  int out[2] = {-1, -1}, err[2] = {-1, -1}, st[2] = {-1, -1}, in[2] = {-1, -1};
  int file_out = -1, file_err = -1;
  struct wf_run_env_store store;
  char **envp = NULL, **rsh = NULL, *script = NULL;
  const char *what;
  int rc = -1, e = 0;

  wf_run_stream_init(&r->out, -1, 1, NULL);
  wf_run_stream_init(&r->err, -1, 2, NULL);
  what = "cannot create its output files";
  if (o->outdir && open_outputs(o->outdir, o->outdir_width, i, &file_out, &file_err) != 0) goto out;
  what = "cannot create pipes";
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) goto out;
  if (pipe2(st, O_CLOEXEC) != 0) goto out;
  if (r->remote && pipe2(in, O_CLOEXEC) != 0) goto out;
  what = "out of memory";
  if (r->remote) {
    const char *host = o->hosts[r->host].name;
    rsh = wf_run_rsh_argv(j, host);
    script = wf_run_remote_script(j, i);
    if (!script) { /* message printed */
      errno = E2BIG;
      goto out;
    }
    if (!rsh) goto out;
  } else {
    envp = wf_run_build_env(j, i, &store);
    if (!envp) goto out;
  }
  what = "cannot fork";
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) goto out;
  if (pid == 0) child(j, out[1], err[1], st[1], parent, envp, in[0], rsh, i == 0);

  /* the child does this too; whichever runs first wins the race with exec */
  (void)setpgid(pid, pid);
  r->pid = pid;
  r->running = 1;
  /* a pidfd in the exit set: epoll lists ranks in the order they ended, even
   * when several end before weftrun looks (held open until exit: it is not
   * inherited by later ranks, being close-on-exec) */
  if (j->exitfd >= 0) {
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd >= 0) {
      (void)fcntl(pfd, F_SETFD, FD_CLOEXEC);
      struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.u32 = (uint32_t)i}; /* reported once */
      if (epoll_ctl(j->exitfd, EPOLL_CTL_ADD, pfd, &ev) != 0) close(pfd);
      else r->pidfd = pfd;
    }
  }
  close(st[1]);
  st[1] = -1;
  ssize_t n;
  do n = read(st[0], &e, sizeof e);
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof e) r->exec_errno = e;
  if (script) {
    /* The write end stays open after the script: its closing tells the
     * remote side to stop. Non-blocking: the remote shell reads only once it
     * is connected, so what does not fit the pipe now (as when a user over
     * pipe-user-pages-soft gets 4 KiB pipes) is written from the poll loop,
     * where signals and deadlines still count. */
    r->stdin_w = in[1];
    in[1] = -1;
    r->script = script;
    script = NULL;
    r->script_len = strlen(r->script);
    r->script_done = 0;
    (void)fcntl(r->stdin_w, F_SETFL, O_NONBLOCK);
    int psz = fcntl(r->stdin_w, F_GETPIPE_SZ);
    const char *test_sz = getenv("WEFTRUN_TEST_PIPE_BYTES"); /* tests: the small pipe of a user over the limit */
    if (test_sz && atoi(test_sz) > 0) (void)fcntl(r->stdin_w, F_SETPIPE_SZ, atoi(test_sz));
    else if (psz >= 0 && (size_t)psz < r->script_len) (void)fcntl(r->stdin_w, F_SETPIPE_SZ, (int)r->script_len);
    wf_run_feed_script(r);
  }

  char prefix[32];
  snprintf(prefix, sizeof prefix, "[%d] ", i);
  if (out[0] >= 0) {
    (void)fcntl(out[0], F_SETFL, O_NONBLOCK);
    (void)fcntl(err[0], F_SETFL, O_NONBLOCK);
    wf_run_stream_init(&r->out, out[0], 1, o->tag ? prefix : NULL);
    wf_run_stream_init(&r->err, err[0], 2, o->tag ? prefix : NULL);
    r->out.copy_fd = file_out; /* -1 without --output-filename */
    r->err.copy_fd = file_err;
    out[0] = err[0] = file_out = file_err = -1; /* the streams own them now */
    if (r->remote) {
      char key[48];
      wf_run_link_key(j, key, sizeof key);
      wf_run_stream_link(&r->err, key, on_link, j, i);
    }
  }
  rc = 0;
out:
  e = errno;
  if (rc != 0) fprintf(stderr, "weftrun: rank %d: %s: %s\n", i, what, strerror(e));
  int fds[10] = {out[0], out[1], err[0], err[1], st[0], st[1], in[0], in[1], file_out, file_err};
  for (int k = 0; k < 10; k++)
    if (fds[k] >= 0) close(fds[k]);
  free(envp);
  free(rsh);
  free(script);
  return rc;
}

static int running_count(const struct wf_run_job *j) {
  int n = 0;
  for (int i = 0; i < j->nranks; i++) n += j->ranks[i].running;
  return n;
}

/* Signals every rank that may still have processes: not reaped yet, or its
 * output still held open (by what it started). A reaped rank's pid stays
 * reserved while its process group has members, so -pid is still its group. */
static void signal_ranks(struct wf_run_job *j, int sig) {
  j->signalled = 1;
  for (int i = 0; i < j->nranks; i++) {
    struct wf_run_rank *r = &j->ranks[i];
    if (r->pid <= 0 || !(r->running || r->out.fd >= 0 || r->err.fd >= 0)) continue;
    if (kill(-r->pid, sig) != 0 && r->running) (void)kill(r->pid, sig);
  }
}

void wf_run_stop(struct wf_run_job *j, int sig) {
  if (!j->stopping) {
    j->stopping = 1;
    j->kill_at = wf_deadline_after(j->o->grace);
  }
  signal_ranks(j, sig);
}

static const char *plural(int n) { return n == 1 ? "" : "s"; }

const char *wf_run_host_of(const struct wf_run_job *j, int rank) {
  int h = j->ranks[rank].host;
  return h >= 0 ? j->o->hosts[h].name : "";
}

void wf_run_link_key(const struct wf_run_job *j, char *out, size_t outsz) {
  snprintf(out, outsz, "weft-link %s ", j->job_id);
}

/* "rank=R cause=C status=S": rank (-1: trust R) failed because of C. */
void wf_run_link_line(struct wf_run_job *j, int rank, const char *line, size_t n) {
  char buf[128];
  if (n >= sizeof buf) return;
  memcpy(buf, line, n);
  buf[n] = '\0';
  int r, c = -1, st;
  char cause[16];
  if (sscanf(buf, "rank=%d cause=%15s status=%d", &r, cause, &st) != 3) return;
  if (rank >= 0) r = rank;
  if (r < 0 || r >= j->nranks) return;
  if (strcmp(cause, "self") != 0) {
    char *end;
    long v = strtol(cause, &end, 10);
    if (*end || v < 0 || v >= j->nranks || v == r) return;
    c = (int)v;
  }
  if (j->ranks[r].cause == -2) j->ranks[r].cause = c; /* the first failure of its world */
  if (j->o->verbose)
    fprintf(stderr, "weftrun: rank %d reports its failure (status %d) %s%s\n", r, st, c < 0 ? "as its own" : "came from rank ",
            c < 0 ? "" : cause);
}

/* Reads the local ranks' status lines that are in the pipe now. */
static void read_links(struct wf_run_job *j) {
  if (j->link_r < 0) return;
  for (;;) {
    ssize_t n = read(j->link_r, j->link_buf + j->link_len, sizeof j->link_buf - j->link_len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return; /* EAGAIN (weftrun holds the write end: no EOF) */
    j->link_len += (size_t)n;
    char key[48];
    wf_run_link_key(j, key, sizeof key);
    size_t kl = strlen(key), start = 0;
    char *nl;
    while ((nl = memchr(j->link_buf + start, '\n', j->link_len - start)) != NULL) {
      size_t len = (size_t)(nl - (j->link_buf + start));
      if (len >= kl && !memcmp(j->link_buf + start, key, kl))
        wf_run_link_line(j, -1, j->link_buf + start + kl, len - kl);
      start += len + 1;
    }
    memmove(j->link_buf, j->link_buf + start, j->link_len - start);
    j->link_len -= start;
    if (j->link_len == sizeof j->link_buf) j->link_len = 0; /* garbage: drop */
  }
}

static void describe(const struct wf_run_job *j, int i, char *how, size_t cap) {
  const struct wf_run_rank *r = &j->ranks[i];
  int status = r->wstatus;
  if (r->exec_errno)
    snprintf(how, cap, "could not execute '%s' (%s) and exited with status %d", r->remote ? "the remote shell"
             : j->o->cmd[0], strerror(r->exec_errno), r->code);
  else if (WIFEXITED(status))
    snprintf(how, cap, "exited with status %d", r->code);
  else
    snprintf(how, cap, "was killed by signal %d (%s)%s", WTERMSIG(status), strsignal(WTERMSIG(status)),
             WCOREDUMP(status) ? ", core dumped" : "");
}

/* "rank 3 (pid 42)" or "rank 3 (pid 42 on host h2)" */
static void who(const struct wf_run_job *j, int i, char *out, size_t cap) {
  const char *h = wf_run_host_of(j, i);
  snprintf(out, cap, "rank %d (pid %d%s%s)", i, (int)j->ranks[i].pid, *h ? " on host " : "", h);
}

/* The rank at the end of the "caused by" links from rank i; i itself if
 * the links go round in a circle (a partition: each side blames the other). */
static int root_of(const struct wf_run_job *j, int i) {
  int r = i;
  for (int steps = 0; steps <= j->nranks; steps++) {
    if (j->ranks[r].cause < 0) return r;
    r = j->ranks[r].cause;
  }
  return i;
}

/* After the first failure: settles which rank's status is the job's, once
 * the root cause has ended (or force: the wait is over, or nothing more can
 * come). A root that weftrun itself had to stop is not the cause. */
static void try_decide(struct wf_run_job *j, int force) {
  if (j->pending < 0) return;
  int first = j->pending, root = root_of(j, first);
  const struct wf_run_rank *rr = &j->ranks[root];
  if (root != first && rr->code < 0 && !force) return; /* the cause is still ending: wait for it */
  int blame = root != first && rr->code > 0 && !rr->stopped ? root : first;
  j->pending = -1;
  j->decide_at = WF_NO_DEADLINE;
  j->exit_code = j->ranks[blame].code;
  char how[512], w[400], note[600] = "";
  describe(j, blame, how, sizeof how);
  who(j, blame, w, sizeof w);
  int c = j->ranks[first].cause;
  if (blame != first) {
    char w1[400];
    who(j, first, w1, sizeof w1);
    snprintf(note, sizeof note, " (%s exited first, with status %d, because of it)", w1, j->ranks[first].code);
  } else if (c >= 0) {
    const char *h = wf_run_host_of(j, c);
    snprintf(note, sizeof note, " because it lost rank %d%s%s%s", c, *h ? " on host " : "", h,
             j->ranks[c].code < 0 ? ", which was still running" : "");
  }
  int others = running_count(j);
  if (others == 1)
    fprintf(stderr, "weftrun: %s %s%s; stopping the other rank\n", w, how, note);
  else if (others > 1)
    fprintf(stderr, "weftrun: %s %s%s; stopping the other %d ranks\n", w, how, note, others);
  else
    fprintf(stderr, "weftrun: %s %s%s\n", w, how, note);
}

/* Rank i was reaped with wait status `status`. */
static void reaped(struct wf_run_job *j, int i, int status) {
  struct wf_run_rank *r = &j->ranks[i];
  r->running = 0;
  r->wstatus = status;
  r->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (r->stdin_w >= 0) close(r->stdin_w);
  r->stdin_w = -1;
  free(r->script);
  r->script = NULL;
  /* its last lines (and status line) first, then what weftrun has to say about it */
  wf_run_stream_pump(&r->out, 64);
  wf_run_stream_pump(&r->err, 64);
  read_links(j);

  r->stopped = j->signalled;
  if (j->el && wf_run_el_on_exit(j, i)) return; /* elastic: a lost worker, not the job's failure */
  int first = r->code != 0 && j->exit_code < 0 && j->pending < 0;
  if (!first) {
    if (j->o->verbose) {
      char how[512], w[400];
      describe(j, i, how, sizeof how);
      who(j, i, w, sizeof w);
      fprintf(stderr, "weftrun: %s %s\n", w, how);
    }
    try_decide(j, 0);
    return;
  }
  j->pending = i;
  j->decide_at = wf_deadline_after(CAUSE_WAIT_SECONDS);
  /* The survivors' engines notice the loss within milliseconds and say who
   * died and what they were doing: give them a moment to report and exit on
   * their own before SIGTERM (then SIGKILL after the grace). */
  j->stopping = 1;
  j->term_at = wf_deadline_after(SETTLE_SECONDS);
  j->kill_at = wf_deadline_after(SETTLE_SECONDS + j->o->grace);
  try_decide(j, 0);
}

/* Reaps every rank that has ended. Several may end between two looks (a
 * rank dies, the others fail because of it and exit at once): the one that
 * died of a signal is then the likely first cause, so it is reported first
 * and its status becomes weftrun's. */
static int reap_one(struct wf_run_job *j, int i) {
  struct wf_run_rank *r = &j->ranks[i];
  if (!r->running) return 0;
  int st;
  pid_t p;
  do p = waitpid(r->pid, &st, WNOHANG);
  while (p < 0 && errno == EINTR);
  if (p == r->pid) {
    if (r->pidfd >= 0) close(r->pidfd); /* leaves the exit set */
    r->pidfd = -1;
    reaped(j, i, st);
    return 1;
  }
  if (p < 0) { /* cannot happen: only weftrun waits for its children */
    fprintf(stderr, "weftrun: lost track of rank %d (pid %d): %s\n", i, (int)r->pid, strerror(errno));
    r->running = 0;
  }
  return 0;
}

/* Reaps every rank that has ended, in the order they ended (several may end
 * between two looks: a rank dies, the others fail because of it), so the
 * first failure is the one reported and returned. */
static void reap(struct wf_run_job *j) {
  int np = j->nranks;
  if (j->exitfd >= 0) { /* number the ranks as the exit set saw them end */
    struct epoll_event ev[64];
    int n;
    /* every entry is one-shot: this ends once each is reported */
    while ((n = epoll_wait(j->exitfd, ev, 64, 0)) > 0)
      for (int k = 0; k < n; k++) {
        struct wf_run_rank *r = &j->ranks[ev[k].data.u32];
        if (!r->exit_seq) r->exit_seq = ++j->exit_count;
      }
  }
  for (;;) { /* the earliest-numbered rank that can be reaped, then the next */
    int best = -1;
    for (int i = 0; i < np; i++) {
      struct wf_run_rank *r = &j->ranks[i];
      if (r->running && r->exit_seq && (best < 0 || r->exit_seq < j->ranks[best].exit_seq)) best = i;
    }
    if (best < 0 || !reap_one(j, best)) break;
  }
  for (int i = 0; i < np; i++) reap_one(j, i); /* the rest (not seen by the set): index order */
}

/* SIGINT/SIGTERM/SIGHUP to weftrun. A second one kills the ranks at once,
 * unless it comes within DUPLICATE_NS of the first: that is the same request
 * delivered twice (timeout(1) signals both its child and its process group). */
#define DUPLICATE_NS (200 * 1000 * 1000LL)
static void on_stop_signal(struct wf_run_job *j, int sig) {
  int n = running_count(j);
  int64_t now = wf_now_ns();
  if (!j->stopping) {
    if (j->exit_code < 0 && j->pending < 0) j->exit_code = 128 + sig;
    j->signal_at = now;
    fprintf(stderr, "weftrun: got %s; passing it to %d rank%s (SIGKILL after %g s)\n", sig_name(sig), n, plural(n),
            j->o->grace);
    wf_run_stop(j, sig);
  } else if (!j->killed && (j->signal_at == 0 || now - j->signal_at >= DUPLICATE_NS)) {
    fprintf(stderr, "weftrun: got %s while stopping; killing the %d remaining rank%s now\n", sig_name(sig), n,
            plural(n));
    signal_ranks(j, SIGKILL);
    j->killed = 1;
  }
}

static void on_signals(struct wf_run_job *j) {
  struct signalfd_siginfo si;
  int child = 0;
  for (;;) {
    ssize_t n = read(j->sigfd, &si, sizeof si);
    if (n < 0 && errno == EINTR) continue;
    if (n != (ssize_t)sizeof si) break; /* EAGAIN: all read */
    if (si.ssi_signo == SIGCHLD)
      child = 1; /* SIGCHLDs merge: reap() checks every rank */
    else
      on_stop_signal(j, (int)si.ssi_signo);
  }
  if (child) reap(j);
}

/* Time-driven steps: --timeout, SIGKILL after the grace, and processes that a
 * finished rank left holding its output. */
static void on_deadlines(struct wf_run_job *j, int64_t *linger_at, int64_t *abandon_at) {
  int64_t now = wf_now_ns();
  int running = running_count(j);
  if (j->pending >= 0 && (now >= j->decide_at || running == 0)) try_decide(j, 1);
  if (!j->stopping && running > 0 && now >= j->timeout_at) {
    if (j->exit_code < 0 && j->pending < 0) j->exit_code = WF_RUN_EXIT_TIMEOUT;
    fprintf(stderr, "weftrun: timeout: the job ran longer than %g s; stopping %d rank%s\n", j->o->timeout, running,
            plural(running));
    wf_run_stop(j, SIGTERM);
  }
  if (j->term_at != WF_NO_DEADLINE && now >= j->term_at) {
    j->term_at = WF_NO_DEADLINE;
    signal_ranks(j, SIGTERM);
  }
  if (j->stopping && !j->killed && now >= j->kill_at) {
    if (running > 0)
      fprintf(stderr, "weftrun: %d rank%s did not stop within %g s; killing %s\n", running, plural(running),
              j->o->grace, running == 1 ? "it" : "them");
    signal_ranks(j, SIGKILL);
    j->killed = 1;
  }
  if (running > 0) return;
  if (*linger_at == WF_NO_DEADLINE) {
    *linger_at = wf_deadline_after(LINGER_SECONDS);
    return;
  }
  for (int i = 0; i < j->nranks; i++) {
    struct wf_run_rank *r = &j->ranks[i];
    if (r->out.fd < 0 && r->err.fd < 0) continue;
    if (*abandon_at == WF_NO_DEADLINE && now >= *linger_at) {
      fprintf(stderr, "weftrun: rank %d has exited, but processes it started still hold its output open; killing them\n",
              i);
      (void)kill(-r->pid, SIGKILL);
    } else if (*abandon_at != WF_NO_DEADLINE && now >= *abandon_at) {
      fprintf(stderr, "weftrun: giving up on the rest of rank %d's output\n", i);
      wf_run_stream_close(&r->out);
      wf_run_stream_close(&r->err);
    }
  }
  if (*abandon_at == WF_NO_DEADLINE && now >= *linger_at) *abandon_at = wf_deadline_after(LINGER_SECONDS);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

int wf_run_supervise(struct wf_run_job *j) {
  /* the signalfd, each rank's stdout, stderr and script pipe, the status channel */
  /* ... and in elastic mode the driver's listener, connections and discovery script (weftrun_elastic.c);
   * for every rank that may ever run (elastic growth adds ranks: cap_ranks) */
  size_t cap = 2 + 3 * (size_t)j->cap_ranks + (j->el ? 2 * (size_t)j->o->max_np + 19 : 0);
  struct pollfd *pf = calloc(cap, sizeof *pf);
  struct wf_run_stream **ps = calloc(cap, sizeof *ps);
  int *pin = calloc(cap, sizeof *pin); /* rank whose script pipe pf[k] is, else -1 */
  int *el_slot = calloc(cap, sizeof *el_slot);
  int64_t linger_at = WF_NO_DEADLINE, abandon_at = WF_NO_DEADLINE;
  if (!pf || !ps || !pin || !el_slot) {
    fputs("weftrun: out of memory; killing the job\n", stderr);
    if (j->exit_code < 0) j->exit_code = WF_RUN_EXIT_SETUP;
    signal_ranks(j, SIGKILL);
    goto out;
  }
  for (;;) {
    wf_run_el_tick(j);
    on_deadlines(j, &linger_at, &abandon_at);
    int n = 0, running = running_count(j);
    pin[n] = -1;
    pf[n++] = (struct pollfd){.fd = j->sigfd, .events = POLLIN};
    int link_at = -1;
    if (j->link_r >= 0) {
      link_at = n;
      pin[n] = -1;
      pf[n++] = (struct pollfd){.fd = j->link_r, .events = POLLIN};
    }
    int fixed = n;
    for (int i = 0; i < j->nranks; i++) {
      struct wf_run_rank *r = &j->ranks[i];
      struct wf_run_stream *s[2] = {&r->out, &r->err};
      for (int k = 0; k < 2; k++) {
        if (s[k]->fd < 0) continue;
        ps[n] = s[k];
        pin[n] = -1;
        pf[n++] = (struct pollfd){.fd = s[k]->fd, .events = POLLIN};
      }
      if (r->script && r->stdin_w >= 0) {
        ps[n] = NULL;
        pin[n] = i;
        pf[n++] = (struct pollfd){.fd = r->stdin_w, .events = POLLOUT};
      }
    }
    if (running == 0 && n == fixed) break;
    int el_at = n;
    n += wf_run_el_fill(j, pf + n, el_slot, (int)cap - n);

    int64_t next = WF_NO_DEADLINE;
    if (!j->stopping && running > 0) next = j->timeout_at;
    if (j->stopping && !j->killed) next = j->kill_at;
    next = min64(next, j->term_at);
    next = min64(next, j->decide_at);
    next = min64(next, wf_run_el_deadline(j));
    if (running == 0) next = min64(next, abandon_at != WF_NO_DEADLINE ? abandon_at : linger_at);
    int pr = poll(pf, (nfds_t)n, next == WF_NO_DEADLINE ? -1 : wf_ms_until(next));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) {
      fprintf(stderr, "weftrun: poll failed: %s; killing the job\n", strerror(errno));
      if (j->exit_code < 0) j->exit_code = WF_RUN_EXIT_SETUP;
      signal_ranks(j, SIGKILL);
      break;
    }
    /* status lines before exits: a rank writes its line before it ends */
    if (link_at >= 0 && pf[link_at].revents) read_links(j);
    if (pf[0].revents) on_signals(j);
    /* a few reads per stream per round, so one chatty rank cannot starve the
     * others or the signals */
    for (int k = fixed; k < el_at; k++) {
      if (!pf[k].revents) continue;
      if (pin[k] >= 0) wf_run_feed_script(&j->ranks[pin[k]]); /* POLLOUT, or POLLERR: the shell is gone */
      else wf_run_stream_pump(ps[k], 4);
    }
    wf_run_el_handle(j, pf + el_at, el_slot, n - el_at);
  }
out:
  /* normally nobody is left; after a failure above, do not leave zombies */
  for (int i = 0; i < j->nranks; i++) {
    struct wf_run_rank *r = &j->ranks[i];
    if (r->running) (void)waitpid(r->pid, NULL, 0);
    if (r->stdin_w >= 0) close(r->stdin_w);
    r->stdin_w = -1;
    free(r->script);
    r->script = NULL;
    wf_run_stream_close(&r->out);
    wf_run_stream_close(&r->err);
  }
  free(pf);
  free(ps);
  free(pin);
  free(el_slot);
  try_decide(j, 1);
  return j->exit_code < 0 ? 0 : j->exit_code;
}

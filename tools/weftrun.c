/* weftrun.c - weft's launcher: `weftrun -np N [-H host:slots,...] [options]
 * [--] cmd args...` starts N ranks of cmd on this machine or on several hosts
 * (through a remote shell), gives each its WEFT_* (and matching HOROVOD_*)
 * environment, relays their output and stops the whole job when one rank
 * fails or weftrun is signalled. This file parses the command line and
 * prepares the job (placement, environment, rendezvous address);
 * weftrun_hvd.c takes horovodrun's flags and --config-file;
 * weftrun_remote.c builds the remote ranks' start script and remote shell
 * command; weftrun_job.c runs the job, weftrun_relay.c relays output.
 * weftrun does not use the weft library itself (no weft_init). */
#include "weftrun.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
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

#include "bootstrap/iface.h"
#include "util/err.h"
#include "util/time.h"
#include "weft.h"

#define NP_MAX 4096
#define HOST_NAME_MAX_LEN 253
/* accept-new: a host missing from known_hosts is recorded on the first
 * connection; a host whose key changed is still refused */
#define DEFAULT_RSH "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new {host}"

extern char **environ;

/* Set by weftrun for every rank; -x cannot override them. */
static const char *const g_reserved[] = {
    "WEFT_RANK",          "WEFT_SIZE",          "WEFT_LOCAL_RANK",   "WEFT_LOCAL_SIZE",   "WEFT_CROSS_RANK",
    "WEFT_CROSS_SIZE",    "WEFT_ADDR",          "WEFT_SECRET",       "WEFT_JOB_ID",       "HOROVOD_RANK",
    "HOROVOD_SIZE",       "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE",
    "WEFT_LAUNCHER_FD",   "WEFT_LAUNCHER_TAG",  "WEFT_ELASTIC_ADDR", "WEFT_ELASTIC_ID",   "WEFT_ELASTIC_TIMEOUT",
    "WEFT_ELASTIC_GROWTH"};
#define NRESERVED (sizeof g_reserved / sizeof g_reserved[0])

static void usage(FILE *f) {
  fprintf(f,
          "Usage: weftrun -np N [-H [USER@]HOST[:SLOTS],...] [options] [--] command [args...]\n"
          "Starts N ranks of a weft job, on this machine or on several hosts, and supervises them.\n"
          "\n"
          "Options:\n"
          "  -np N, -n N              number of ranks (1..%d); required\n"
          "  -H, --host [USER@]HOST[:SLOTS],...\n"
          "                           hosts to run on, SLOTS ranks each (default 1); ranks fill\n"
          "                           them in order; USER@ goes to the remote shell only.\n"
          "                           Without -H every rank runs here.\n"
          "  --hostfile FILE          hosts from FILE, one a line: HOST, HOST:SLOTS or\n"
          "                           HOST slots=SLOTS ('#' starts a comment)\n"
          "  --rsh TEMPLATE           how to start ranks on another host (default\n"
          "                           '" DEFAULT_RSH "');\n"
          "                           words split at blanks,\n"
          "                           {host} replaced (or the host appended); weftrun adds\n"
          "                           'sh -s' and writes the rank's start script to its stdin.\n"
          "                           Hosts named localhost, 127.x or this machine's name\n"
          "                           start directly. Example: --rsh 'ip netns exec {host}'\n"
          "  --network-interfaces IF[,IF...], --network-interface IF[,IF...]\n"
          "                           ranks bind and advertise one interface's IPv4 address\n"
          "                           (WEFT_IFACE): weft uses one interface per rank, so each\n"
          "                           host takes the first of the list that exists there\n"
          "                           (/sys/class/net/IF), else the first (which then fails)\n"
          "  -x NAME=VALUE, --env NAME=VALUE\n"
          "                           extra environment for every rank (repeatable); -x NAME\n"
          "                           passes weftrun's own value (to remote hosts too)\n"
          "  --output-filename DIR    also write rank i's stdout and stderr to DIR/rank.<i>/stdout\n"
          "                           and DIR/rank.<i>/stderr (as horovodrun: <i> zero-padded to\n"
          "                           the digits of N-1, rank.07 for -np 12; untagged, exactly\n"
          "                           as the rank wrote them); the console still gets them\n"
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
          "same values as HOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE;\n"
          "with -H also WEFT_HOSTNAME (the host as given, without USER@). Ranks read stdin from\n"
          "/dev/null. Every rank gets PYTHONUNBUFFERED=1 unless it is set (in the environment or\n"
          "by -x), so Python output comes as it is written. Local ranks inherit weftrun's\n"
          "environment. Remote ranks get it too, as horovodrun forwards it, less what belongs\n"
          "to this machine or session: HOSTNAME, HOST, PWD, OLDPWD, SHLVL, _, HOME, USER, LOGNAME,\n"
          "MAIL, SHELL, DISPLAY, XAUTHORITY, TMUX, TMUX_PANE, STY, WINDOW,\n"
          "DBUS_SESSION_BUS_ADDRESS, XDG_RUNTIME_DIR, XDG_SESSION_*, SSH_*, BASH_FUNC_*,\n"
          "*_VISIBLE_DEVICES (CUDA_VISIBLE_DEVICES ...), WEFT_LISTEN_FD, WEFT_BIND_ADDR and\n"
          "names a shell cannot export; -x NAME forwards one of those all the same.\n"
          "\n"
          "When a rank exits non-zero or dies by a signal, the others get a second to report and\n"
          "exit on their own, then SIGTERM, then SIGKILL after the grace time, and weftrun\n"
          "exits with the status of the rank that caused the failure (128+signal if it was\n"
          "killed): ranks that fail because a peer was lost say so to weftrun, so the peer,\n"
          "not the first rank to exit, is reported. SIGINT, SIGTERM and SIGHUP to weftrun are forwarded to the ranks\n"
          "(a second one kills them at once) and weftrun exits 128+signal.\n",
          NP_MAX);
  wf_run_hvd_usage(f);
  wf_run_el_usage(f);
  wf_run_disc_usage(f);
}

void wf_run_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("weftrun: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nTry 'weftrun --help' for more information.\n", stderr);
  exit(WF_RUN_EXIT_USAGE);
}

const char *wf_run_opt_value(int argc, char **argv, int *i, const char *name) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return NULL;
  if (a[n] == '=') return a + n + 1;
  if (a[n] != '\0') return NULL;
  if (*i + 1 >= argc) wf_run_usage_error("option %s needs a value", name);
  *i += 1;
  return argv[*i];
}

static int parse_np(const char *s) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < 1 || v > NP_MAX)
    wf_run_usage_error("-np wants a number of ranks from 1 to %d, not '%s'", NP_MAX, s);
  return (int)v;
}

static double parse_seconds(const char *opt, const char *s, int zero_ok) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  /* a year is far beyond any job; the cap keeps deadline arithmetic finite */
  if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0 || (v == 0 && !zero_ok) || v > 365.0 * 86400)
    wf_run_usage_error("%s wants a number of seconds%s, not '%s'", opt, zero_ok ? "" : " above 0", s);
  return v;
}

int wf_run_env_name_ok(const char *s, size_t n) {
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
  if (!wf_run_env_name_ok(arg, n)) wf_run_usage_error("-x wants NAME=VALUE with a valid variable name, not '%s'", arg);
  if (is_reserved(arg, n)) {
    fprintf(stderr, "weftrun: ignoring -x %.*s: weftrun sets it for every rank\n", (int)n, arg);
    return;
  }
  if (!eq) {
    o->fwd[o->nfwd++] = (char *)arg;
    return;
  }
  o->env[o->nenv++] = (char *)arg;
}

/* ------------------------------------------------------------------- hosts */

/* A host (or interface, or user) name: letters, digits, '.', '-', '_'. */
static int host_name_ok(const char *s, size_t n) {
  if (n == 0 || n > HOST_NAME_MAX_LEN || s[0] == '-') return 0;
  for (size_t k = 0; k < n; k++)
    if (!(s[k] == '.' || s[k] == '-' || s[k] == '_' || (s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z') ||
          (s[k] >= '0' && s[k] <= '9')))
      return 0;
  return 1;
}

/* [USER@]HOST: both parts names as above. */
static int user_host_ok(const char *s, size_t n) {
  const char *at = memchr(s, '@', n);
  if (!at) return host_name_ok(s, n);
  size_t un = (size_t)(at - s);
  return host_name_ok(s, un) && host_name_ok(at + 1, n - un - 1);
}

int wf_run_host_ok(const char *s, size_t n) { return user_host_ok(s, n); }

/* The host part of [USER@]HOST. */
static const char *host_part(const char *s) {
  const char *at = strchr(s, '@');
  return at ? at + 1 : s;
}

/* Adds "HOST" or "HOST:SLOTS" (n bytes of s); slots_dflt when none given.
 * where: for messages ("-H" or "FILE:LINE"). */
static void add_host(struct wf_run_opts *o, const char *s, size_t n, int slots, const char *where) {
  const char *colon = memchr(s, ':', n);
  size_t hn = colon ? (size_t)(colon - s) : n;
  if (colon) {
    char num[16];
    size_t ln = n - hn - 1;
    if (ln == 0 || ln >= sizeof num) wf_run_usage_error("%s: bad slot count in '%.*s'", where, (int)n, s);
    memcpy(num, colon + 1, ln);
    num[ln] = '\0';
    char *end;
    errno = 0;
    long v = strtol(num, &end, 10);
    if (errno || *end || v < 1 || v > NP_MAX)
      wf_run_usage_error("%s: the slot count in '%.*s' must be a number from 1 to %d", where, (int)n, s, NP_MAX);
    slots = (int)v;
  }
  if (!user_host_ok(s, hn))
    wf_run_usage_error("%s: '%.*s' is not [USER@]HOST (names of letters, digits, '.', '-', '_')", where, (int)hn, s);
  struct wf_run_host *nh = realloc(o->hosts, sizeof *nh * (size_t)(o->nhosts + 1));
  char *name = strndup(s, hn);
  if (!nh || !name) {
    fputs("weftrun: out of memory\n", stderr);
    exit(WF_RUN_EXIT_SETUP);
  }
  o->hosts = nh;
  /* one machine, one entry: its ranks' placement (local rank, size) is per host */
  for (int h = 0; h < o->nhosts; h++)
    if (!strcmp(o->hosts[h].addr, host_part(name)))
      wf_run_usage_error("%s: host '%s' is listed twice (give it more slots instead)", where, host_part(name));
  o->hosts[o->nhosts++] = (struct wf_run_host){.name = name, .addr = host_part(name), .slots = slots};
}

static void add_host_list(struct wf_run_opts *o, const char *list) {
  for (const char *p = list;;) {
    size_t n = strcspn(p, ",");
    if (n == 0) wf_run_usage_error("-H wants HOST[:SLOTS],... not '%s'", list);
    add_host(o, p, n, 1, "-H");
    if (p[n] == '\0') break;
    p += n + 1;
  }
}

static void read_hostfile(struct wf_run_opts *o, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) wf_run_usage_error("cannot open host file '%s': %s", path, strerror(errno));
  char line[1024], where[PATH_MAX + 32];
  for (int ln = 1; fgets(line, sizeof line, f); ln++) {
    snprintf(where, sizeof where, "%s:%d", path, ln);
    line[strcspn(line, "#\r\n")] = '\0';
    char *tok[3] = {NULL, NULL, NULL}, *save = NULL;
    int nt = 0;
    for (char *t = strtok_r(line, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
      if (nt == 2) wf_run_usage_error("%s: expected HOST, HOST:SLOTS or HOST slots=N", where);
      tok[nt++] = t;
    }
    if (nt == 0) continue;
    int slots = 1;
    if (nt == 2) {
      char *end;
      long v = strncmp(tok[1], "slots=", 6) == 0 ? strtol(tok[1] + 6, &end, 10) : -1;
      if (v < 1 || v > NP_MAX || *end)
        wf_run_usage_error("%s: expected slots=N (1..%d), not '%s'", where, NP_MAX, tok[1]);
      if (strchr(tok[0], ':')) wf_run_usage_error("%s: give the slots once", where);
      slots = (int)v;
    }
    add_host(o, tok[0], strlen(tok[0]), slots, where);
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) wf_run_usage_error("cannot read host file '%s'", path);
}

/* localhost, 127.x, this machine's name (full or up to the first dot). */
int wf_run_host_is_local(const char *h) {
  if (!strcmp(h, "localhost") || !strncmp(h, "127.", 4)) return 1;
  char me[HOST_NAME_MAX_LEN + 2] = "";
  if (gethostname(me, sizeof me - 1) != 0 || !me[0]) return 0;
  if (!strcmp(h, me)) return 1;
  size_t shortlen = strcspn(me, ".");
  return strlen(h) == shortlen && !strncmp(h, me, shortlen);
}

/* Ranks fill the hosts in order. */
static void place(struct wf_run_opts *o) {
  long total = 0;
  for (int h = 0; h < o->nhosts; h++) total += o->hosts[h].slots;
  if (total < o->np)
    wf_run_usage_error("-np %d but the hosts have %ld slot%s in all", o->np, total, total == 1 ? "" : "s");
  int left = o->np;
  for (int h = 0; h < o->nhosts; h++) {
    struct wf_run_host *x = &o->hosts[h];
    x->nranks = left < x->slots ? left : x->slots;
    left -= x->nranks;
    x->local = wf_run_host_is_local(x->addr);
    x->index = x->nranks > 0 ? o->nused++ : -1;
  }
}

/* The local ranks' interface: the first of --network-interfaces that this
 * machine has, else the first (whose absence the ranks then report). */
static void pick_iface(struct wf_run_opts *o) {
  snprintf(o->iface_buf, sizeof o->iface_buf, "%.*s", (int)strcspn(o->ifaces, ","), o->ifaces);
  for (const char *p = o->ifaces; *p;) {
    size_t n = strcspn(p, ",");
    char name[IF_NAMESIZE];
    snprintf(name, sizeof name, "%.*s", (int)n, p);
    if (if_nametoindex(name) != 0) {
      snprintf(o->iface_buf, sizeof o->iface_buf, "%s", name);
      break;
    }
    p += n + (p[n] == ',');
  }
  o->iface = o->iface_buf;
}

static void parse_args(int argc, char **argv, struct wf_run_opts *o) {
  memset(o, 0, sizeof *o);
  o->tag = 1;
  o->reset_limit = -1; /* none */
  o->grace = 3;
  o->env = calloc((size_t)argc + WF_RUN_HVD_NENV + 1, sizeof *o->env); /* -x entries <= argc */
  o->fwd = calloc((size_t)argc + 1, sizeof *o->fwd);
  o->rsh = DEFAULT_RSH;
  if (!o->env || !o->fwd) {
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
    } else if ((v = wf_run_opt_value(argc, argv, &i, "-np")) || (v = wf_run_opt_value(argc, argv, &i, "-n")) ||
               (v = wf_run_opt_value(argc, argv, &i, "--np"))) {
      o->np = parse_np(v);
    } else if ((v = wf_run_opt_value(argc, argv, &i, "-x")) || (v = wf_run_opt_value(argc, argv, &i, "--env"))) {
      add_env(o, v);
    } else if ((v = wf_run_opt_value(argc, argv, &i, "-H")) || (v = wf_run_opt_value(argc, argv, &i, "--host")) ||
               (v = wf_run_opt_value(argc, argv, &i, "--hosts"))) {
      add_host_list(o, v);
    } else if ((v = wf_run_opt_value(argc, argv, &i, "--hostfile"))) {
      read_hostfile(o, v);
    } else if ((v = wf_run_opt_value(argc, argv, &i, "--rsh"))) {
      if (!v[strspn(v, " \t")]) wf_run_usage_error("--rsh wants a command template");
      o->rsh = v;
    } else if ((v = wf_run_opt_value(argc, argv, &i, "--network-interfaces")) ||
               (v = wf_run_opt_value(argc, argv, &i, "--network-interface"))) {
      /* they may exist only on the other hosts: checked there */
      for (const char *p = v;; p++) {
        size_t n = strcspn(p, ",");
        if (n >= IF_NAMESIZE || !host_name_ok(p, n))
          wf_run_usage_error("%s wants interface names (such as eth0,ib0), not '%s'",
                             strncmp(a, "--network-interfaces", 20) ? "--network-interface" : "--network-interfaces",
                             v);
        p += n;
        if (!*p) break;
      }
      o->ifaces = v;
    } else if ((v = wf_run_opt_value(argc, argv, &i, "--output-filename"))) {
      if (!*v) wf_run_usage_error("--output-filename wants a directory");
      o->outdir = v;
    } else if ((v = wf_run_opt_value(argc, argv, &i, "--timeout"))) {
      o->timeout = parse_seconds("--timeout", v, 0);
    } else if ((v = wf_run_opt_value(argc, argv, &i, "--grace"))) {
      o->grace = parse_seconds("--grace", v, 1);
    } else if (!wf_run_el_option(o, argc, argv, &i) && !wf_run_hvd_option(o, argc, argv, &i)) {
      wf_run_usage_error("unknown option '%s'", a);
    }
  }
  wf_run_el_finish(o); /* -np defaults to --min-np */
  if (o->np == 0) wf_run_usage_error("missing -np N (the number of ranks)");
  if (i >= argc) wf_run_usage_error("missing the command to run");
  o->cmd = argv + i;
  wf_run_hvd_finish(o);
  if (o->nhosts > 0 && !o->discovery) place(o); /* with discovery: once the script has told the hosts */
  for (int n = o->np - 1; n >= 10; n /= 10) o->outdir_width++;
  o->outdir_width++;
  if (o->ifaces) pick_iface(o);
}

/* --------------------------------------------------------------- job setup */

static int env_is(const char *entry, const char *name, size_t n) {
  return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* The variables weftrun sets for rank (they win over inherited and -x ones). */
void wf_run_set_vars(const struct wf_run_job *j, int rank, struct wf_run_env_store *st) {
  const struct wf_run_opts *o = j->o;
  const struct wf_run_rank *r = &j->ranks[rank];
  const struct wf_run_host *h = r->host >= 0 ? &o->hosts[r->host] : NULL;
  int cross = h ? h->index : 0, ncross = h ? o->nused : 1;
  const char *pre[2] = {"WEFT", "HOROVOD"};
  size_t cap = sizeof st->s[0];
  st->n = 0;
  if (o->elastic) { /* rank, size and rank 0's address come from the driver, per world */
    wf_run_el_set_vars(j, rank, st);
    return;
  }
  for (int p = 0; p < 2; p++) {
    snprintf(st->s[st->n++], cap, "%s_RANK=%d", pre[p], rank);
    snprintf(st->s[st->n++], cap, "%s_SIZE=%d", pre[p], o->np);
    snprintf(st->s[st->n++], cap, "%s_LOCAL_RANK=%d", pre[p], r->local_rank);
    snprintf(st->s[st->n++], cap, "%s_LOCAL_SIZE=%d", pre[p], r->local_size);
    snprintf(st->s[st->n++], cap, "%s_CROSS_RANK=%d", pre[p], cross);
    snprintf(st->s[st->n++], cap, "%s_CROSS_SIZE=%d", pre[p], ncross);
  }
  snprintf(st->s[st->n++], cap, "WEFT_ADDR=%s", j->addr);
  if (rank == 0 && !r->remote && j->listen_fd >= 0) snprintf(st->s[st->n++], cap, "WEFT_LISTEN_FD=%d", WF_RUN_LISTEN_FD);
  snprintf(st->s[st->n++], cap, "WEFT_SECRET=%s", j->secret);
  snprintf(st->s[st->n++], cap, "WEFT_JOB_ID=%s", j->job_id);
  /* the status channel: a pipe locally; stderr (relayed by weftrun) remotely */
  if (r->remote || j->link_w >= 0) {
    snprintf(st->s[st->n++], cap, "WEFT_LAUNCHER_FD=%d", r->remote ? 2 : WF_RUN_LINK_FD);
    snprintf(st->s[st->n++], cap, "WEFT_LAUNCHER_TAG=%s", j->job_id);
  }
  if (h) snprintf(st->s[st->n++], cap, "WEFT_HOSTNAME=%s", h->addr);
  /* a remote rank given several interfaces picks one in its start script */
  if (o->ifaces && (!r->remote || !strchr(o->ifaces, ',')))
    snprintf(st->s[st->n++], cap, "WEFT_IFACE=%s", r->remote ? o->ifaces : o->iface);
}

/* entry ("NAME=...") names one of the variables in st */
int wf_run_env_is_set(const struct wf_run_env_store *st, const char *entry, size_t n) {
  for (int k = 0; k < st->n; k++)
    if (env_is(st->s[k], entry, n)) return 1;
  return 0;
}

int wf_run_user_sets(const struct wf_run_opts *o, const char *name) {
  if (getenv(name)) return 1;
  for (int x = 0; x < o->nenv; x++)
    if (env_is(o->env[x], name, strlen(name))) return 1;
  return 0;
}

char **wf_run_build_env(const struct wf_run_job *j, int rank, struct wf_run_env_store *store) {
  const struct wf_run_opts *o = j->o;
  wf_run_set_vars(j, rank, store);
  size_t nenv = 0;
  while (environ && environ[nenv]) nenv++;
  char **envp = calloc(nenv + (size_t)o->nenv + WF_RUN_NSET + 2, sizeof *envp);
  if (!envp) return NULL;
  size_t k = 0;
  for (size_t e = 0; e < nenv; e++) {
    const char *eq = strchr(environ[e], '=');
    if (!eq) continue;
    size_t n = (size_t)(eq - environ[e]);
    int drop = is_reserved(environ[e], n) || wf_run_env_is_set(store, environ[e], n);
    for (int x = 0; x < o->nenv && !drop; x++) drop = env_is(o->env[x], environ[e], n);
    if (!drop) envp[k++] = environ[e];
  }
  for (int x = 0; x < o->nenv; x++) {
    size_t n = (size_t)(strchr(o->env[x], '=') - o->env[x]);
    int later = wf_run_env_is_set(store, o->env[x], n); /* the last -x of a name wins; weftrun's own win over all */
    for (int y = x + 1; y < o->nenv && !later; y++) later = env_is(o->env[y], o->env[x], n);
    if (!later) envp[k++] = o->env[x];
  }
  if (!wf_run_user_sets(o, "PYTHONUNBUFFERED")) envp[k++] = "PYTHONUNBUFFERED=1";
  for (int t = 0; t < store->n; t++) envp[k++] = store->s[t];
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

/* A listening socket on a free port of ip (INADDR_ANY if NULL), at an fd
 * >= 10, close-on-exec: rank 0 inherits it (WEFT_LISTEN_FD), so no other
 * process can take the port between weftrun's choice and rank 0's start. */
static int rank0_listener(const char *ip, unsigned *port, int *lfd) {
  int rc = -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) goto out;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  if (ip && inet_pton(AF_INET, ip, &sa.sin_addr) != 1) {
    errno = EINVAL;
    goto out;
  }
  socklen_t len = sizeof sa;
  /* as rank 0's own listeners: its accepted connections' TIME_WAIT must not
   * keep a later weft_init (same port) from binding */
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) goto out;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) goto out;
  if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) goto out;
  if (listen(fd, 128) != 0) goto out;
  *lfd = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (*lfd < 0) goto out;
  *port = ntohs(sa.sin_port);
  rc = 0;
out:
  if (fd >= 0) close(fd);
  return rc;
}

/* This machine's IPv4 address for ranks on other hosts: what its name
 * resolves to, unless that is loopback (Debian maps the name to 127.0.1.1),
 * then the first address of an interface that is up and not loopback. */
static int reachable_ipv4(char *ip, size_t cap) {
  char me[HOST_NAME_MAX_LEN + 2] = "";
  struct in_addr a;
  if (gethostname(me, sizeof me - 1) == 0 && me[0]) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(me, NULL, &hints, &res) == 0) {
      for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        a = ((const struct sockaddr_in *)ai->ai_addr)->sin_addr;
        if ((ntohl(a.s_addr) >> 24) != 127 && inet_ntop(AF_INET, &a, ip, (socklen_t)cap)) {
          freeaddrinfo(res);
          return 0;
        }
      }
      freeaddrinfo(res);
    }
  }
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) return -1;
  int rc = -1;
  for (struct ifaddrs *f = ifs; f && rc != 0; f = f->ifa_next) {
    if (!f->ifa_addr || f->ifa_addr->sa_family != AF_INET || !(f->ifa_flags & IFF_UP) || (f->ifa_flags & IFF_LOOPBACK))
      continue;
    a = ((const struct sockaddr_in *)f->ifa_addr)->sin_addr;
    if ((ntohl(a.s_addr) >> 24) != 127 && inet_ntop(AF_INET, &a, ip, (socklen_t)cap)) rc = 0;
  }
  freeifaddrs(ifs);
  return rc;
}

/* WEFT_ADDR. All ranks here: loopback (or --network-interfaces' address)
 * and a port free now. Rank 0 here, others elsewhere: --network-interfaces'
 * address, else this machine's (reachable_ipv4). Rank 0 on another host:
 * its name as given (without USER@), and a random port in a high range
 * (weftrun cannot look there; if rank 0 cannot listen on it, rank 0 fails
 * and says so, and the job stops). */
static int choose_addr(struct wf_run_job *j) {
  const struct wf_run_opts *o = j->o;
  int all_local = 1;
  for (int h = 0; h < o->nhosts; h++)
    if (o->hosts[h].nranks > 0 && !o->hosts[h].local) all_local = 0;
  const struct wf_run_host *h0 = o->nhosts ? &o->hosts[j->ranks[0].host] : NULL;
  char ip[64] = "127.0.0.1";
  unsigned port = 0;
  if (o->elastic) { /* the driver's service; every world's rank 0 opens its own port */
    if (o->iface && wf_iface_ipv4(o->iface, ip, sizeof ip) != WEFT_OK) {
      fprintf(stderr, "weftrun: --network-interfaces: %s\n", wf_err_msg());
      return -1;
    }
    if (!all_local && !o->iface && reachable_ipv4(ip, sizeof ip) != 0) {
      fprintf(stderr, "weftrun: elastic mode with ranks elsewhere, but this machine has no IPv4 address other "
              "than loopback for them to reach weftrun; name the interface with --network-interfaces\n");
      return -1;
    }
    return wf_run_el_start(j, ip);
  }
  if (!h0 || h0->local) {
    if (o->iface && wf_iface_ipv4(o->iface, ip, sizeof ip) != WEFT_OK) {
      fprintf(stderr, "weftrun: --network-interfaces: %s\n", wf_err_msg());
      return -1;
    }
    if (!all_local && !o->iface && reachable_ipv4(ip, sizeof ip) != 0) {
      fprintf(stderr, "weftrun: rank 0 runs here and other ranks elsewhere, but this machine has no IPv4 address "
              "other than loopback for them to reach it; name the interface with --network-interfaces\n");
      return -1;
    }
    /* binding the address also proves it is this machine's */
    if (rank0_listener(ip, &port, &j->listen_fd) != 0) {
      fprintf(stderr, "weftrun: cannot find a free port for rank 0 on %s: %s%s\n", ip, strerror(errno),
              all_local || o->iface ? "" : " (use --network-interfaces)");
      return -1;
    }
    snprintf(j->addr, sizeof j->addr, "%s:%u", ip, port);
    return 0;
  }
  uint16_t r;
  if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = (uint16_t)getpid();
  snprintf(j->addr, sizeof j->addr, "%s:%u", h0->addr, 20000u + (unsigned)r % 40000u);
  return 0;
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
  j.link_r = j.link_w = -1;
  j.listen_fd = -1;
  j.pending = -1;
  j.decide_at = WF_NO_DEADLINE;
  j.exitfd = epoll_create1(EPOLL_CLOEXEC); /* -1: ranks are reaped in index order */
  int rc = WF_RUN_EXIT_SETUP;
  const char *what = NULL;

  if (setup_signals(&j) != 0) {
    what = "cannot set up signal handling";
    goto out;
  }
  /* two pipes per rank (three for remote ones) stay open in weftrun; ranks get the old limit back */
  rlim_t most = (rlim_t)(o.elastic ? o.max_np : o.np); /* ranks running at once */
  rlim_t want = most * 3 + 64 + (o.elastic ? most * 2 + 19 : 0); /* + the driver's connections */
  if (getrlimit(RLIMIT_NOFILE, &j.nofile) == 0 && j.nofile.rlim_cur != RLIM_INFINITY && j.nofile.rlim_cur < want) {
    struct rlimit r = j.nofile;
    r.rlim_cur = (r.rlim_max == RLIM_INFINITY || r.rlim_max > want) ? want : r.rlim_max;
    j.nofile_raised = r.rlim_cur > j.nofile.rlim_cur && setrlimit(RLIMIT_NOFILE, &r) == 0;
  }
  if (random_hex(j.secret, 32) != 0 || random_hex(j.job_id, 8) != 0) {
    what = "cannot get random bytes (getrandom)";
    goto out;
  }
  if (o.discovery) { /* its hosts and slots; then the placement */
    j.disc = wf_run_disc_first(&o);
    if (!j.disc) goto out; /* message printed */
    place(&o);
  }
  j.mo = &o;
  j.nranks = o.np;
  j.cap_ranks = o.discovery ? WF_RUN_MAX_WORKERS : o.np; /* workers started later (growth) get the next ids */
  j.ranks = calloc((size_t)j.cap_ranks, sizeof *j.ranks);
  if (!j.ranks) {
    what = "cannot allocate the rank table";
    goto out;
  }
  for (int i = 0, h = 0, on_h = 0; i < o.np; i++) { /* placement: ranks fill the hosts in order */
    struct wf_run_rank *r = &j.ranks[i];
    r->pidfd = r->stdin_w = -1;
    r->cause = -2;
    r->code = -1;
    r->host = -1;
    r->local_rank = i;
    r->local_size = o.np;
    if (o.nhosts == 0) continue;
    while (on_h == o.hosts[h].nranks) h++, on_h = 0;
    r->host = h;
    r->local_rank = on_h++;
    r->local_size = o.hosts[h].nranks;
    r->remote = !o.hosts[h].local;
  }
  if (choose_addr(&j) != 0) goto out;
  /* the local ranks' status channel; at a high fd so that the child's dup2
   * onto WF_RUN_LINK_FD cannot clobber it */
  int lp[2];
  if (pipe2(lp, O_CLOEXEC | O_NONBLOCK) == 0) {
    j.link_r = fcntl(lp[0], F_DUPFD_CLOEXEC, 10);
    j.link_w = fcntl(lp[1], F_DUPFD_CLOEXEC, 10);
    close(lp[0]);
    close(lp[1]);
    if (j.link_r < 0 || j.link_w < 0) {
      if (j.link_r >= 0) close(j.link_r);
      if (j.link_w >= 0) close(j.link_w);
      j.link_r = j.link_w = -1;
    }
  }
  if (o.outdir && mkdir_p(o.outdir) != 0) {
    fprintf(stderr, "weftrun: cannot create directory '%s': %s\n", o.outdir, strerror(errno));
    goto out;
  }
  j.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (j.devnull < 0) {
    what = "cannot open /dev/null";
    goto out;
  }
  for (int i = 0; i < o.np; i++) { /* ranks never started have nothing to relay */
    wf_run_stream_init(&j.ranks[i].out, -1, 1, NULL);
    wf_run_stream_init(&j.ranks[i].err, -1, 2, NULL);
  }
  if (o.verbose)
    fprintf(stderr, "weftrun: job %s: starting %d rank%s of '%s' on %d host%s; %s %s\n", j.job_id,
            o.np, o.np == 1 ? "" : "s", o.cmd[0], o.nhosts ? o.nused : 1, (o.nhosts ? o.nused : 1) == 1 ? "" : "s",
            o.elastic ? "the elastic driver listens on" : "rank 0 listens on", o.elastic ? j.el_addr : j.addr);

  for (int i = 0; i < o.np; i++) {
    if (wf_run_spawn(&j, i) != 0) {
      j.exit_code = WF_RUN_EXIT_SETUP;
      wf_run_stop(&j, SIGTERM);
      break;
    }
    if (o.verbose)
      fprintf(stderr, "weftrun: rank %d is pid %d%s%s%s\n", i, (int)j.ranks[i].pid, o.nhosts ? " on " : "",
              wf_run_host_of(&j, i), j.ranks[i].remote ? " (through the remote shell)" : "");
    if (j.ranks[i].exec_errno) break; /* its exit stops the job; start no more */
  }
  if (j.listen_fd >= 0) { /* rank 0 has its copy (or never started) */
    close(j.listen_fd);
    j.listen_fd = -1;
  }
  rc = wf_run_supervise(&j);

out:
  if (what) fprintf(stderr, "weftrun: %s: %s\n", what, strerror(errno));
  if (j.sigfd >= 0) close(j.sigfd);
  if (j.exitfd >= 0) close(j.exitfd);
  if (j.devnull >= 0) close(j.devnull);
  if (j.link_r >= 0) close(j.link_r);
  if (j.link_w >= 0) close(j.link_w);
  if (j.listen_fd >= 0) close(j.listen_fd);
  wf_run_el_free(&j);
  wf_run_disc_free(j.disc);
  free(j.ranks);
  wf_run_hvd_free(&o);
  free(o.env);
  free(o.fwd);
  for (int h = 0; h < o.nhosts; h++) free(o.hosts[h].name);
  free(o.hosts);
  return rc;
}

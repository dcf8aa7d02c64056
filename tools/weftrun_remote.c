/* weftrun_remote.c - how weftrun starts ranks on other hosts: the start
 * script a remote rank's shell ("sh -s") reads on stdin (its environment,
 * working directory, the command and a watchdog that kills the rank when
 * weftrun goes away), and the remote shell's argv from the --rsh template
 * ({host} expanded, else the host appended; ssh's -p and -i after its
 * first word). weftrun_job.c runs them.
 *
 * The environment is weftrun's own, as horovodrun forwards it, less what
 * describes this machine or this login session rather than the job
 * (deny_env); then -x; then PYTHONUNBUFFERED=1 unless set; then the WEFT_*
 * and HOROVOD_* variables weftrun sets. Later exports win. */
#include "weftrun.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the remote script goes through a pipe (written as the remote shell reads
 * it); the environment it exports must fit the remote exec's limits (2 MiB
 * of arguments and environment on Linux by default, 128 KiB a string) */
#define SCRIPT_MAX (256 * 1024)

/* A growing string; bad once out of memory or over SCRIPT_MAX. */
struct sbuf {
  char *p;
  size_t len, cap;
  int bad; /* out of memory or over SCRIPT_MAX */
};

static void sb_put(struct sbuf *b, const char *s, size_t n) {
  if (b->bad) return;
  if (b->len + n + 1 > SCRIPT_MAX) {
    b->bad = 1;
    return;
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->bad = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}
static void sb_str(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* s as one shell word: in single quotes, each ' written as '\'' */
static void sb_quoted(struct sbuf *b, const char *s, size_t n) {
  sb_put(b, "'", 1);
  for (size_t k = 0; k < n; k++) {
    if (s[k] == '\'') sb_str(b, "'\\''");
    else sb_put(b, &s[k], 1);
  }
  sb_put(b, "'", 1);
}

/* NAME='value'; export NAME */
static void sb_export(struct sbuf *b, const char *name, size_t n, const char *value) {
  sb_put(b, name, n);
  sb_put(b, "=", 1);
  sb_quoted(b, value, strlen(value));
  sb_str(b, "; export ");
  sb_put(b, name, n);
  sb_put(b, "\n", 1);
}

extern char **environ;

/* Not forwarded to remote ranks (weftrun's usage lists them): this
 * machine's or this session's, not the job's. "X*": a prefix, "*X": a
 * suffix. horovodrun leaves out BASH_FUNC_*, OLDPWD and *CUDA_VISIBLE_DEVICES. */
static const char *const g_deny[] = {
    "HOSTNAME", "HOST",  "PWD",        "OLDPWD",   "SHLVL",      "_",         "HOME",   "USER", "LOGNAME",
    "MAIL",     "SHELL", "DISPLAY",    "XAUTHORITY", "TMUX",     "TMUX_PANE", "STY",    "WINDOW",
    "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "XDG_SESSION_*", "SSH_*", "BASH_FUNC_*",
    "*_VISIBLE_DEVICES", "WEFT_LISTEN_FD", "WEFT_BIND_ADDR"};

static int deny_env(const char *name, size_t n) {
  for (size_t k = 0; k < sizeof g_deny / sizeof g_deny[0]; k++) {
    const char *d = g_deny[k];
    size_t dn = strlen(d);
    if (d[dn - 1] == '*') {
      if (n >= dn - 1 && !memcmp(name, d, dn - 1)) return 1;
    } else if (d[0] == '*') {
      if (n >= dn - 1 && !memcmp(name + n - (dn - 1), d + 1, dn - 1)) return 1;
    } else if (n == dn && !memcmp(name, d, n)) {
      return 1;
    }
  }
  return !wf_run_env_name_ok(name, n);
}

/* sh picks the rank's interface: the first of the list its host has */
static void sb_pick_iface(struct sbuf *b, const char *list) {
  size_t first = strcspn(list, ",");
  sb_str(b, "WEFT_IFACE=");
  sb_quoted(b, list, first);
  sb_str(b, "\nfor i in");
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ",");
    sb_put(b, " ", 1);
    sb_quoted(b, p, n);
    p += n + (p[n] == ',');
  }
  sb_str(b, "; do if [ -e \"/sys/class/net/$i\" ]; then WEFT_IFACE=$i; break; fi; done\nexport WEFT_IFACE\n");
}

char *wf_run_remote_script(const struct wf_run_job *j, int rank) {
  const struct wf_run_opts *o = j->o;
  struct sbuf b = {0};
  struct wf_run_env_store st;
  wf_run_set_vars(j, rank, &st);
  for (char **e = environ; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    size_t n = (size_t)(eq - *e);
    if (!deny_env(*e, n) && !wf_run_env_is_set(&st, *e, n)) sb_export(&b, *e, n, eq + 1);
  }
  for (int x = 0; x < o->nenv; x++) {
    size_t n = (size_t)(strchr(o->env[x], '=') - o->env[x]);
    if (!wf_run_env_is_set(&st, o->env[x], n)) sb_export(&b, o->env[x], n, o->env[x] + n + 1);
  }
  for (int x = 0; x < o->nfwd; x++) {
    const char *v = getenv(o->fwd[x]);
    if (v && !wf_run_env_is_set(&st, o->fwd[x], strlen(o->fwd[x]))) sb_export(&b, o->fwd[x], strlen(o->fwd[x]), v);
  }
  if (!wf_run_user_sets(o, "PYTHONUNBUFFERED")) sb_str(&b, "PYTHONUNBUFFERED=1; export PYTHONUNBUFFERED\n");
  if (o->ifaces && strchr(o->ifaces, ',')) sb_pick_iface(&b, o->ifaces);
  for (int t = 0; t < st.n; t++) {
    size_t n = (size_t)(strchr(st.s[t], '=') - st.s[t]);
    sb_export(&b, st.s[t], n, st.s[t] + n + 1);
  }
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd)) {
    sb_str(&b, "cd ");
    sb_quoted(&b, cwd, strlen(cwd));
    sb_str(&b, " 2>/dev/null\n");
  }
  /* The command runs in the background so that the shell can watch its
   * stdin: when weftrun (or the connection to it) goes away, stdin closes
   * and the rank is killed. A signal to the shell is passed on; the
   * shell ends as the rank did (the same exit code, or the same signal). */
  sb_str(&b, "exec 3<&0\n");
  for (char **a = o->cmd; *a; a++) {
    sb_quoted(&b, *a, strlen(*a));
    sb_put(&b, " ", 1);
  }
  sb_str(&b, "</dev/null 3<&- &\n"
             "p=$!\n"
             "trap 'kill -TERM $p 2>/dev/null' TERM\n"
             "trap 'kill -INT $p 2>/dev/null' INT\n"
             "trap 'kill -HUP $p 2>/dev/null' HUP\n"
             "(read -r _ <&3; kill -KILL $p 2>/dev/null) &\n"
             "w=$!\n"
             "exec 3<&-\n"
             "while :; do wait $p; s=$?; kill -0 $p 2>/dev/null || break; done\n"
             "kill $w 2>/dev/null\n"
             "if [ $s -gt 128 ] && [ $s -lt 193 ]; then trap - TERM INT HUP; kill -$((s - 128)) $$; fi\n"
             "exit $s\n");
  if (b.bad) {
    fprintf(stderr, "weftrun: rank %d: the command and its environment are too long to start on host %s (at most "
            "%d bytes)\n", rank, o->hosts[j->ranks[rank].host].name, SCRIPT_MAX);
    free(b.p);
    return NULL;
  }
  return b.p;
}

char **wf_run_rsh_argv(const struct wf_run_job *j, const char *host) {
  const char *t = j->o->rsh;
  const struct wf_run_hvd *hv = &j->o->hvd;
  size_t words = 0, bytes = 0, hl = strlen(host);
  int has_host = strstr(t, "{host}") != NULL;
  for (const char *p = t; *p; p++) bytes += !strncmp(p, "{host}", 6) ? hl + 1 : 2;
  words = strlen(t) + 8; /* the template's words, -p PORT -i FILE, the host, "sh" "-s", NULL */
  bytes += hl + 16;
  char **argv = malloc(words * sizeof *argv + bytes);
  if (!argv) return NULL;
  char *out = (char *)(argv + words);
  size_t n = 0;
  for (const char *p = t;;) {
    p += strspn(p, " \t");
    if (!*p) break;
    size_t wl = strcspn(p, " \t");
    argv[n++] = out;
    for (size_t k = 0; k < wl;) {
      if (wl - k >= 6 && !strncmp(p + k, "{host}", 6)) {
        memcpy(out, host, hl);
        out += hl;
        k += 6;
      } else {
        *out++ = p[k++];
      }
    }
    *out++ = '\0';
    p += wl;
    if (n > 1) continue;
    /* ssh's options right after "ssh" (weftrun_hvd.c checked that it is ssh) */
    if (hv->ssh_port) {
      argv[n++] = "-p";
      argv[n++] = (char *)hv->ssh_port;
    }
    if (hv->ssh_identity) {
      argv[n++] = "-i";
      argv[n++] = (char *)hv->ssh_identity;
    }
  }
  if (!has_host) {
    argv[n++] = out;
    memcpy(out, host, hl + 1);
    out += hl + 1;
  }
  argv[n++] = "sh";
  argv[n++] = "-s";
  argv[n] = NULL;
  return argv;
}

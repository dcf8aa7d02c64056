/* weftrun_remote.c - how weftrun starts ranks on other hosts: the start
 * script a remote rank's shell ("sh -s") reads on stdin (its environment,
 * working directory, the command and a watchdog that kills the rank when
 * weftrun goes away), and the remote shell's argv from the --rsh template
 * ({host} expanded, else the host appended). weftrun_job.c runs them. */
#include "weftrun.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the remote script goes through a pipe (enlarged to fit it, if the kernel
 * lets weftrun) while the remote shell connects; the environment it
 * exports must also fit the remote exec's limits */
#define SCRIPT_MAX 60000

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

char *wf_run_remote_script(const struct wf_run_job *j, int rank) {
  const struct wf_run_opts *o = j->o;
  struct sbuf b = {0};
  struct wf_run_env_store st;
  wf_run_set_vars(j, rank, &st);
  for (int x = 0; x < o->nenv; x++) {
    size_t n = (size_t)(strchr(o->env[x], '=') - o->env[x]);
    if (!wf_run_env_is_set(&st, o->env[x], n)) sb_export(&b, o->env[x], n, o->env[x] + n + 1);
  }
  for (int x = 0; x < o->nfwd; x++) {
    const char *v = getenv(o->fwd[x]);
    if (v && !wf_run_env_is_set(&st, o->fwd[x], strlen(o->fwd[x]))) sb_export(&b, o->fwd[x], strlen(o->fwd[x]), v);
  }
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
  size_t words = 0, bytes = 0, hl = strlen(host);
  int has_host = strstr(t, "{host}") != NULL;
  for (const char *p = t; *p; p++) bytes += !strncmp(p, "{host}", 6) ? hl + 1 : 2;
  words = strlen(t) + 4;
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

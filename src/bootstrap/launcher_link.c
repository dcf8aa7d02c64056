/* launcher_link.c - the rank's side of weftrun's status channel: one line
 * on the world's first failure naming the rank that caused it (see
 * launcher_link.h). */
#include "bootstrap/launcher_link.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"

/* The number after the first "<key>" in msg that is a rank of the world
 * other than self, or -1. */
static int rank_after(const char *msg, const char *key, int self, int size) {
  size_t klen = strlen(key);
  for (const char *p = strstr(msg, key); p; p = strstr(p + 1, key)) {
    char *end;
    errno = 0;
    long r = strtol(p + klen, &end, 10);
    if (!errno && end != p + klen && r >= 0 && r < size && r != self) return (int)r;
  }
  return -1;
}

int wf_launcher_link_cause(weft_status st, const char *msg, int self, int size) {
  if (!msg) return -1;
  int r;
  /* a peer aborted the job: the aborting rank is the cause */
  if ((r = rank_after(msg, "aborted by rank ", self, size)) >= 0) return r;
  /* a lost peer (directly, or relayed by another rank): the message names it first */
  if (st == WEFT_ERR_PEER_LOST) return rank_after(msg, "rank ", self, size);
  /* any other failure another rank relayed: that rank saw it first */
  return rank_after(msg, "(reported by rank ", self, size);
}

/* The channel as weft_init found it; fd -1: none. Written once (under
 * g_once, before any thread of weft's runs), then only read. */
static struct {
  int fd;
  dev_t dev;  /* what fd referred to then: it must still, when written to */
  ino_t ino;
  char tag[65];
} g_link = {.fd = -1};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void link_init_once(void) {
  int saved = errno;
  const char *fv = getenv("WEFT_LAUNCHER_FD"), *tv = getenv("WEFT_LAUNCHER_TAG");
  char fds[32] = "", tag[sizeof g_link.tag] = "";
  int fd_ok = fv && *fv && strlen(fv) < sizeof fds, tag_ok = tv && *tv && strlen(tv) < sizeof tag;
  if (fd_ok) snprintf(fds, sizeof fds, "%s", fv);
  if (tag_ok) snprintf(tag, sizeof tag, "%s", tv);
  /* this process's own children are not weftrun's ranks */
  (void)unsetenv("WEFT_LAUNCHER_FD");
  (void)unsetenv("WEFT_LAUNCHER_TAG");
  if (!fd_ok && !tag_ok) goto out;
  for (const char *p = tag; tag_ok && *p; p++) tag_ok = *p > ' ' && *p < 127; /* one word on the line */
  char *end;
  errno = 0;
  long fd = fd_ok ? strtol(fds, &end, 10) : -1;
  struct stat st;
  if (!fd_ok || !tag_ok || errno || *end || fd < 0 || fd > INT_MAX) {
    WF_WARN(WF_SUB_INIT, "ignoring WEFT_LAUNCHER_FD=%s WEFT_LAUNCHER_TAG=%s: not a descriptor and a tag", fv ? fds : "",
            tv ? tag : "");
  } else if (fstat((int)fd, &st) != 0) {
    /* inherited the variables, not the descriptor: not a rank of weftrun's */
    WF_INFO(WF_SUB_INIT, "WEFT_LAUNCHER_FD=%ld is not open here: no status line for the launcher", fd);
  } else if (fd != 2 && !S_ISFIFO(st.st_mode)) {
    WF_INFO(WF_SUB_INIT, "WEFT_LAUNCHER_FD=%ld is not a pipe here: no status line for the launcher", fd);
  } else {
    if (fd != 2) (void)fcntl((int)fd, F_SETFD, FD_CLOEXEC); /* as the variables: not for our children */
    g_link.fd = (int)fd;
    g_link.dev = st.st_dev;
    g_link.ino = st.st_ino;
    snprintf(g_link.tag, sizeof g_link.tag, "%s", tag);
  }
out:
  errno = saved;
}

void wf_launcher_link_init(void) { (void)pthread_once(&g_once, link_init_once); }

void wf_launcher_link_report(int rank, int size, weft_status st, const char *msg) {
  wf_launcher_link_init(); /* done already by weft_init: only reads here */
  if (g_link.fd < 0) return;
  int saved = errno;
  struct stat fst;
  /* the application may have closed the channel and opened something else there */
  if (fstat(g_link.fd, &fst) != 0 || fst.st_dev != g_link.dev || fst.st_ino != g_link.ino) {
    errno = saved;
    return;
  }
  int cause = wf_launcher_link_cause(st, msg, rank, size);
  char line[160], who[16];
  if (cause >= 0) snprintf(who, sizeof who, "%d", cause);
  else snprintf(who, sizeof who, "self");
  int n = snprintf(line, sizeof line, "weft-link %s rank=%d cause=%s status=%d\n", g_link.tag, rank, who, (int)st);
  if (n > 0 && (size_t)n < sizeof line) {
    ssize_t wr;
    do wr = write(g_link.fd, line, (size_t)n);
    while (wr < 0 && errno == EINTR);
    (void)wr; /* best effort: a full or closed channel only costs weftrun its certainty */
  }
  errno = saved;
}

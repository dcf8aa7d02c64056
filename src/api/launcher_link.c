/* launcher_link.c - the rank's side of weftrun's status channel: one line
 * on the world's first failure naming the rank that caused it (see
 * launcher_link.h). */
#include "api/launcher_link.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"

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

void wf_launcher_link_report(const struct weft_world *w, weft_status st, const char *msg) {
  int saved = errno;
  const char *fds = getenv("WEFT_LAUNCHER_FD"), *tag = getenv("WEFT_LAUNCHER_TAG");
  if (!fds || !*fds || !tag || !*tag || strlen(tag) > 64) return;
  char *end;
  errno = 0;
  long fd = strtol(fds, &end, 10);
  if (errno || *end || fd < 0 || fd > 1024 || fcntl((int)fd, F_GETFD) < 0) {
    errno = saved;
    return;
  }
  int cause = wf_launcher_link_cause(st, msg, w->rank, w->size);
  char line[160], who[16];
  if (cause >= 0) snprintf(who, sizeof who, "%d", cause);
  else snprintf(who, sizeof who, "self");
  int n = snprintf(line, sizeof line, "weft-link %s rank=%d cause=%s status=%d\n", tag, w->rank, who, (int)st);
  if (n > 0 && (size_t)n < sizeof line) {
    ssize_t wr;
    do wr = write((int)fd, line, (size_t)n);
    while (wr < 0 && errno == EINTR);
    (void)wr; /* best effort: a full or closed channel only costs weftrun its certainty */
  }
  errno = saved;
}

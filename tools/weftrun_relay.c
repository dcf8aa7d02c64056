/* weftrun_relay.c - weftrun's output relay: copies each rank's stdout/stderr
 * to weftrun's stdout/stderr in whole lines, optionally prefixed "[rank] ".
 * See weftrun_relay.h for the contract. */
#include "weftrun_relay.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Lines are staged so that a read full of short lines costs one write(), not
 * two per line. The stage is flushed at the end of every pump, so a rank's
 * lines are out before any message weftrun prints about that rank. */
#define STAGE_SIZE (128 * 1024)
static char g_stage[STAGE_SIZE];
static size_t g_stage_len;
static int g_stage_fd = -1;
/* A sink whose reader went away (EPIPE) is not written again: the ranks'
 * output is discarded rather than the job being stopped for it. */
static int g_sink_dead[3];

static void write_all(int fd, const char *p, size_t n) {
  if (fd < 0 || (fd <= 2 && g_sink_dead[fd])) return;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        /* someone made our stdout non-blocking: wait until it drains */
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        (void)poll(&pf, 1, 1000);
        continue;
      }
      if (fd <= 2) g_sink_dead[fd] = 1;
      return;
    }
    p += w;
    n -= (size_t)w;
  }
}

static void stage_flush(void) {
  if (g_stage_len > 0) write_all(g_stage_fd, g_stage, g_stage_len);
  g_stage_len = 0;
}

static void stage_put(int fd, const char *p, size_t n) {
  if (fd != g_stage_fd) {
    stage_flush();
    g_stage_fd = fd;
  }
  if (n > STAGE_SIZE - g_stage_len) stage_flush();
  if (n > STAGE_SIZE) {
    write_all(fd, p, n);
    return;
  }
  memcpy(g_stage + g_stage_len, p, n);
  g_stage_len += n;
}

/* One line (or piece of one). cut: the line does not end in a newline here; in
 * tagged mode it gets one, so the next prefix starts a line of its own. */
static void emit(const struct wf_run_stream *s, const char *p, size_t n, int cut) {
  write_all(s->copy_fd, p, n);
  if (s->prefix_len > 0) stage_put(s->out_fd, s->prefix, s->prefix_len);
  stage_put(s->out_fd, p, n);
  if (cut && s->prefix_len > 0) stage_put(s->out_fd, "\n", 1);
}

/* A complete line (newline included): relayed, or a status line taken out. */
static void line(const struct wf_run_stream *s, const char *p, size_t n) {
  const char *k = s->link_key_len ? memmem(p, n, s->link_key, s->link_key_len) : NULL;
  if (!k) {
    emit(s, p, n, 0);
    return;
  }
  if (k > p) emit(s, p, (size_t)(k - p), 1); /* the rank's partial line before it */
  size_t rest = n - (size_t)(k - p) - s->link_key_len;
  const char *q = k + s->link_key_len;
  if (rest > 0 && q[rest - 1] == '\n') rest--;
  s->on_link(s->link_ctx, s->link_rank, q, rest);
}

/* Emits the complete lines in buf[0, len + n) (the first len bytes were
 * pending already) and keeps the partial tail. */
static void take(struct wf_run_stream *s, size_t n) {
  size_t end = s->len + n, start = 0, scan = s->len;
  const char *nl;
  while (scan < end && (nl = memchr(s->buf + scan, '\n', end - scan)) != NULL) {
    size_t stop = (size_t)(nl - s->buf) + 1;
    line(s, s->buf + start, stop - start);
    start = scan = stop;
  }
  s->len = end - start;
  if (start > 0 && s->len > 0) memmove(s->buf, s->buf + start, s->len);
  if (s->len == WF_RUN_LINE_MAX) {
    emit(s, s->buf, s->len, 1);
    s->len = 0;
  }
}

void wf_run_stream_init(struct wf_run_stream *s, int fd, int out_fd, const char *prefix) {
  memset(s, 0, sizeof *s);
  s->fd = fd;
  s->out_fd = out_fd;
  s->copy_fd = -1;
  snprintf(s->prefix, sizeof s->prefix, "%s", prefix ? prefix : "");
  s->prefix_len = strlen(s->prefix);
}

void wf_run_stream_link(struct wf_run_stream *s, const char *key, wf_run_link_fn *fn, void *ctx, int rank) {
  snprintf(s->link_key, sizeof s->link_key, "%s", key);
  s->link_key_len = strlen(s->link_key);
  s->on_link = fn;
  s->link_ctx = ctx;
  s->link_rank = rank;
}

int wf_run_stream_pump(struct wf_run_stream *s, int max_reads) {
  if (s->fd < 0) return 0;
  if (!s->buf) s->buf = malloc(WF_RUN_LINE_MAX);
  int open = 1;
  for (int i = 0; open && (max_reads <= 0 || i < max_reads); i++) {
    char small[4096];
    ssize_t n;
    if (s->buf)
      n = read(s->fd, s->buf + s->len, WF_RUN_LINE_MAX - s->len);
    else
      n = read(s->fd, small, sizeof small);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      open = 0; /* EOF, or an error that will not go away */
    } else if (s->buf) {
      take(s, (size_t)n);
    } else {
      emit(s, small, (size_t)n, small[n - 1] != '\n'); /* no memory: pass through */
    }
  }
  stage_flush();
  if (!open) wf_run_stream_close(s);
  return open;
}

void wf_run_stream_close(struct wf_run_stream *s) {
  if (s->buf && s->len > 0) emit(s, s->buf, s->len, 1);
  s->len = 0;
  stage_flush();
  free(s->buf);
  s->buf = NULL;
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  if (s->copy_fd >= 0) close(s->copy_fd);
  s->copy_fd = -1;
  s->out_fd = -1;
}

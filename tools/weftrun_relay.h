/* weftrun_relay.h - weftrun's output relay: the lines a rank writes to its
 * stdout/stderr pipe, copied to weftrun's own stdout/stderr.
 *
 * Output is relayed in whole lines so that the lines of different ranks never
 * mix mid-line. With a prefix ("[3] "), every line gets it; a partial last
 * line (at EOF) or a line longer than WF_RUN_LINE_MAX is emitted with the
 * prefix and a newline added. Without a prefix the bytes are copied exactly.
 * A stream may also copy the rank's bytes, exactly and without the prefix,
 * to a file (--output-filename).
 * Single-threaded: only weftrun's main loop uses these. */
#ifndef WF_TOOLS_WEFTRUN_RELAY_H
#define WF_TOOLS_WEFTRUN_RELAY_H

#include <stddef.h>

/* A line longer than this (without a newline) is emitted in pieces. */
#define WF_RUN_LINE_MAX (64 * 1024)

/* A status line found in a relayed stream (remote ranks write theirs to
 * stderr): line points just past the key, n bytes, no newline. */
typedef void wf_run_link_fn(void *ctx, int rank, const char *line, size_t n);

struct wf_run_stream {
  int fd;            /* read end of the rank's pipe (non-blocking); -1 when closed */
  int out_fd;        /* where lines go: 1 or 2 */
  int copy_fd;       /* a file that gets the same bytes untagged, or -1; closed with the stream */
  /* lines containing link_key are taken out of the output and passed to
   * on_link (with everything before the key relayed as a line of its own) */
  char link_key[48];
  size_t link_key_len;
  wf_run_link_fn *on_link;
  void *link_ctx;
  int link_rank;
  char prefix[32];   /* "" for no tagging */
  size_t prefix_len;
  char *buf;         /* WF_RUN_LINE_MAX bytes (NULL until the first read): the partial line */
  size_t len;
};

/* Prepares s to relay fd to out_fd (copy_fd -1); fd may be -1 (nothing to
 * relay). The line buffer is allocated on the first read. */
void wf_run_stream_init(struct wf_run_stream *s, int fd, int out_fd, const char *prefix);

/* Makes s hand the lines containing key (at most 47 bytes) to fn. */
void wf_run_stream_link(struct wf_run_stream *s, const char *key, wf_run_link_fn *fn, void *ctx, int rank);

/* Reads what fd has now (never blocks) and emits the complete lines. Reads at
 * most max_reads times (0 = until the pipe is empty). Returns 1 while the pipe
 * stays open, 0 once it reached EOF (or failed) and was closed. Out of memory
 * for the line buffer: the data is passed through unbuffered. */
int wf_run_stream_pump(struct wf_run_stream *s, int max_reads);

/* Emits the pending partial line, closes fd and frees the buffer. Safe to call
 * twice. */
void wf_run_stream_close(struct wf_run_stream *s);

#endif

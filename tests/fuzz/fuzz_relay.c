/* fuzz_relay.c - libFuzzer target for weftrun's relay protocol: what a
 * rank (a remote one over its remote shell, so anything a remote host
 * sends) writes to its stdout/stderr pipe, relayed by weftrun in whole
 * lines (tools/weftrun_relay.c), with the status lines that carry the
 * rank's failure cause ("weft-link <job id> rank=R cause=C status=S") taken
 * out of the stream and parsed (wf_run_link_line, tools/weftrun_job.c).
 *
 * The input sets up one stream (the first byte: "[rank] " tags or none,
 * the status-line key on or off, how many reads a pump may do, the job's
 * rank count; the second: the stream's rank) and then is a sequence of
 * chunks, each written to the rank's pipe (non-blocking, the relay pumped
 * whenever the pipe is full, and after each chunk):
 *   literal bytes; a run of one byte (up to 1 KiB, or 64 KiB - 64 to
 *   192 KiB: lines past the relay's 64 KiB limit); a valid status line (rank, cause, status from the input,
 *   maybe with text before it, without its newline, or corrupted once);
 *   the key or a prefix of it (keys split across reads); a bare pump.
 * At the end the pipe closes and the relay is pumped to EOF (and closed a
 * second time, which must be harmless). Mode bit 4 also hands every line to
 * wf_run_link_line as the local ranks' status pipe does (rank -1: the line
 * names the rank).
 *
 * Properties checked (a violation aborts, so libFuzzer keeps the input):
 *  - the relayed output is exactly what the header's contract says, byte
 *    for byte, computed by an independent model of the stream (lines with
 *    the prefix; a line longer than WF_RUN_LINE_MAX in pieces of that size,
 *    each tagged and ended; a partial last line ended at EOF; status lines
 *    taken out, the text before the key relayed as a line of its own;
 *    without a prefix, the bytes exactly), whatever the read boundaries;
 *  - the status lines handed on are exactly the model's (the text after the
 *    key, without the newline, with the stream's rank);
 *  - the job's record of a rank's cause only ever goes from unknown (-2) to
 *    its own (-1) or another rank of the job, never to itself, and never
 *    changes after that; a well-formed line sets exactly what it says.
 * Crashes, leaks, out-of-bounds accesses and UB are the sanitizers' to report. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "util/time.h"
#include "../../tools/weftrun.h"

#define MAX_FILL (256 << 10) /* run bytes per input: keeps an execution short */
#define JOB_ID "0123456789abcdef"

/* ------------------------------------------------------------ what weftrun_job.c needs and the relay never calls */
char **wf_run_build_env(const struct wf_run_job *j, int rank, struct wf_run_env_store *store) {
  (void)j, (void)rank, (void)store;
  fz_fail("wf_run_build_env called");
}
char *wf_run_remote_script(const struct wf_run_job *j, int rank) {
  (void)j, (void)rank;
  fz_fail("wf_run_remote_script called");
}
char **wf_run_rsh_argv(const struct wf_run_job *j, const char *host) {
  (void)j, (void)host;
  fz_fail("wf_run_rsh_argv called");
}
/* elastic mode (weftrun_elastic.c): never on here (j->el is NULL), so as the driver does without it */
void wf_run_el_tick(struct wf_run_job *j) {
  if (j->el) fz_fail("an elastic job in the relay target");
}
int wf_run_el_fill(struct wf_run_job *j, struct pollfd *pf, int *slot, int max) {
  (void)pf, (void)slot, (void)max;
  if (j->el) fz_fail("an elastic job in the relay target");
  return 0;
}
void wf_run_el_handle(struct wf_run_job *j, const struct pollfd *pf, const int *slot, int n) {
  (void)pf, (void)slot;
  if (j->el || n) fz_fail("an elastic job in the relay target");
}
int64_t wf_run_el_deadline(const struct wf_run_job *j) {
  if (j->el) fz_fail("an elastic job in the relay target");
  return WF_NO_DEADLINE;
}
int wf_run_el_on_exit(struct wf_run_job *j, int i) {
  (void)i;
  if (j->el) fz_fail("an elastic job in the relay target");
  return 0;
}

/* ------------------------------------------------------------ a growable byte string */
typedef struct bytes {
  uint8_t *p;
  size_t n, cap;
} bytes;

static void bput(bytes *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n) cap *= 2;
    uint8_t *q = realloc(b->p, cap);
    if (!q) fz_fail("out of memory");
    b->p = q, b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
}

/* ------------------------------------------------------------ the model */
static struct {
  int tagged, linked;
  char prefix[32], key[48];
  size_t klen;
  int rank;
  bytes line;   /* the partial line */
  bytes out;    /* what must come out */
  bytes links;  /* the status lines that must be handed on: u32 length, bytes */
} M;

static void m_emit(const uint8_t *p, size_t n, int cut) {
  if (M.tagged) bput(&M.out, M.prefix, strlen(M.prefix));
  bput(&M.out, p, n);
  if (cut && M.tagged) bput(&M.out, "\n", 1);
}

static void m_link(const uint8_t *p, size_t n) {
  uint32_t len = (uint32_t)n;
  bput(&M.links, &len, sizeof len);
  bput(&M.links, p, n);
}

/* A complete line (its newline included). */
static void m_line(const uint8_t *p, size_t n) {
  const uint8_t *k = M.linked ? memmem(p, n, M.key, M.klen) : NULL;
  if (!k) {
    m_emit(p, n, 0);
    return;
  }
  if (k > p) m_emit(p, (size_t)(k - p), 1);
  size_t rest = n - (size_t)(k - p) - M.klen;
  if (rest && k[M.klen + rest - 1] == '\n') rest--;
  m_link(k + M.klen, rest);
}

/* Byte by byte: a newline ends a line; WF_RUN_LINE_MAX bytes without one
 * are a piece (taken a span at a time). */
static void m_feed(const uint8_t *p, size_t n) {
  while (n > 0) {
    size_t room = WF_RUN_LINE_MAX - M.line.n, span = n < room ? n : room;
    const uint8_t *nl = memchr(p, '\n', span);
    if (nl) span = (size_t)(nl - p) + 1;
    bput(&M.line, p, span);
    p += span, n -= span;
    if (nl) {
      m_line(M.line.p, M.line.n);
      M.line.n = 0;
    } else if (M.line.n == WF_RUN_LINE_MAX) {
      m_emit(M.line.p, M.line.n, 1);
      M.line.n = 0;
    }
  }
}

static void m_eof(void) {
  if (M.line.n) m_emit(M.line.p, M.line.n, 1);
  M.line.n = 0;
}

/* ------------------------------------------------------------ the job and the relay */
static struct wf_run_opts g_opts;
static struct wf_run_job g_job;
static struct wf_run_rank g_ranks[8];
static int g_causes[8];
static bytes g_got_links;
static int g_local; /* also parse each line as the local status pipe does */

/* A rank's recorded cause may only go from -2 to -1 or another rank. */
static void check_causes(void) {
  for (int r = 0; r < g_opts.np; r++) {
    int was = g_causes[r], now = g_ranks[r].cause;
    if (now == was) continue;
    if (was != -2) fz_fail("rank %d's cause changed from %d to %d", r, was, now);
    if (now != -1 && (now < 0 || now >= g_opts.np || now == r))
      fz_fail("rank %d's cause set to %d (np %d)", r, now, g_opts.np);
    g_causes[r] = now;
  }
  for (int r = g_opts.np; r < 8; r++)
    if (g_ranks[r].cause != -2) fz_fail("rank %d, outside the job of %d, got a cause", r, g_opts.np);
}

static void on_link(void *ctx, int rank, const char *line, size_t n) {
  if (ctx != &g_job) fz_fail("status line with the wrong context");
  if (rank != M.rank) fz_fail("status line for rank %d from rank %d's stream", rank, M.rank);
  if (n > WF_RUN_LINE_MAX) fz_fail("status line of %zu bytes", n);
  uint32_t len = (uint32_t)n;
  bput(&g_got_links, &len, sizeof len);
  bput(&g_got_links, line, n);
  wf_run_link_line(&g_job, rank, line, n);
  check_causes();
}

/* The local status pipe (weftrun_job.c's read_links) hands each line after
 * the key to wf_run_link_line with rank -1: the same for every line here. */
static void local_lines(const uint8_t *p, size_t n) {
  const uint8_t *end = p + n, *nl;
  for (; p < end && (nl = memchr(p, '\n', (size_t)(end - p))) != NULL; p = nl + 1) {
    size_t len = (size_t)(nl - p);
    if (len < M.klen || memcmp(p, M.key, M.klen) != 0) continue;
    wf_run_link_line(&g_job, -1, (const char *)p + M.klen, len - M.klen);
    check_causes();
  }
}

static int g_wfd, g_outfd;
static struct wf_run_stream g_s;
static int g_max_reads;

/* Writes p[0..n) to the rank's pipe, pumping whenever it is full. */
static void rank_writes(const uint8_t *p, size_t n) {
  m_feed(p, n);
  while (n > 0) {
    ssize_t w = write(g_wfd, p, n);
    if (w < 0 && errno == EAGAIN) {
      if (wf_run_stream_pump(&g_s, 0) != 1) fz_fail("the relay closed an open pipe");
      continue;
    }
    if (w <= 0) fz_fail("write to the rank's pipe: %s", strerror(errno));
    p += w, n -= (size_t)w;
  }
}

/* A status line as a rank writes it (src/bootstrap/launcher_link.c). */
static size_t status_line(fz_in *in, char *out, size_t cap) {
  int r = (int)(fz_take(in, 1) % 10) - 1;
  unsigned c = (unsigned)fz_take(in, 1);
  int st = -(int)(fz_take(in, 1) % 20);
  char cause[16];
  if (c < 96) snprintf(cause, sizeof cause, "self");
  else if (c < 240) snprintf(cause, sizeof cause, "%d", (int)(c % 10));
  else snprintf(cause, sizeof cause, "%d", (int)(int32_t)fz_take(in, 4));
  return (size_t)snprintf(out, cap, "%srank=%d cause=%s status=%d\n", M.key, r, cause, st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in = {data, size, 0};
  unsigned f = (unsigned)fz_take(&in, 1);
  M.tagged = f & 1;
  M.linked = (f >> 1) & 1;
  g_max_reads = (int)((f >> 2) & 3);
  g_local = (f >> 4) & 1;
  memset(&g_opts, 0, sizeof g_opts);
  g_opts.np = 1 + (int)((f >> 5) & 7);
  memset(&g_job, 0, sizeof g_job);
  g_job.o = &g_opts;
  g_job.ranks = g_ranks;
  g_job.nranks = g_job.cap_ranks = g_opts.np;
  memcpy(g_job.job_id, JOB_ID, sizeof JOB_ID);
  for (int r = 0; r < 8; r++) g_ranks[r].cause = g_causes[r] = -2;
  M.rank = (int)(fz_take(&in, 1) % (unsigned)g_opts.np);
  snprintf(M.prefix, sizeof M.prefix, "[%d] ", M.rank);
  wf_run_link_key(&g_job, M.key, sizeof M.key);
  M.klen = strlen(M.key);
  M.line.n = M.out.n = M.links.n = g_got_links.n = 0;

  int pfd[2];
  if (pipe2(pfd, O_NONBLOCK | O_CLOEXEC) != 0) fz_fail("pipe2: %s", strerror(errno));
  g_wfd = pfd[1];
  if (ftruncate(g_outfd, 0) != 0 || lseek(g_outfd, 0, SEEK_SET) != 0) fz_fail("resetting the output");
  wf_run_stream_init(&g_s, pfd[0], g_outfd, M.tagged ? M.prefix : NULL);
  if (M.linked) wf_run_stream_link(&g_s, M.key, on_link, &g_job, M.rank);

  size_t filled = 0;
  bytes all = {0}; /* everything the rank wrote (the local parser's view) */
  while (in.off < in.n) {
    unsigned kind = (unsigned)fz_take(&in, 1) % 8;
    uint8_t buf[512];
    size_t n = 0;
    if (kind <= 3) { /* literal bytes */
      n = fz_take_bytes(&in, buf, (size_t)fz_take(&in, 1));
      rank_writes(buf, n);
      bput(&all, buf, n);
    } else if (kind == 4) { /* a run of one byte: long lines */
      size_t count = (size_t)fz_take(&in, 2);
      count = count & 0x8000 ? WF_RUN_LINE_MAX - 64 + (count & 0x7fff) * 4 : count % 1024; /* long, or not */
      uint8_t b = (uint8_t)fz_take(&in, 1);
      if (filled + count > MAX_FILL) count = MAX_FILL - filled;
      filled += count;
      uint8_t run[4096];
      memset(run, b, sizeof run);
      for (size_t k = 0; k < count; k += sizeof run) {
        size_t m = count - k < sizeof run ? count - k : sizeof run;
        rank_writes(run, m);
        bput(&all, run, m);
      }
    } else if (kind == 5) { /* a status line, maybe mangled */
      unsigned how = (unsigned)fz_take(&in, 1);
      if (how & 1) n = fz_take_bytes(&in, buf, fz_take(&in, 1) % 32); /* text before it */
      n += status_line(&in, (char *)buf + n, sizeof buf - n);
      if (how & 2) n--; /* no newline (yet) */
      if (how & 4) n = fz_corrupt(&in, buf, n);
      rank_writes(buf, n);
      bput(&all, buf, n);
    } else if (kind == 6) { /* a bare pump */
      if (wf_run_stream_pump(&g_s, g_max_reads) != 1) fz_fail("the relay closed an open pipe");
      continue;
    } else { /* the key, or a prefix of it */
      n = 1 + fz_take(&in, 1) % M.klen;
      rank_writes((const uint8_t *)M.key, n);
      bput(&all, M.key, n);
    }
    if (wf_run_stream_pump(&g_s, g_max_reads) != 1) fz_fail("the relay closed an open pipe");
  }
  close(g_wfd);
  m_eof();
  int open = 1;
  for (int i = 0; open && i < 10000; i++) open = wf_run_stream_pump(&g_s, g_max_reads);
  if (open) fz_fail("the relay did not see EOF");
  if (g_s.fd != -1 || g_s.buf) fz_fail("the relay did not close at EOF");
  wf_run_stream_close(&g_s); /* again: harmless */
  if (wf_run_stream_pump(&g_s, 0) != 0) fz_fail("a closed stream pumps");

  /* the relayed bytes */
  off_t end = lseek(g_outfd, 0, SEEK_END);
  if (end < 0) fz_fail("lseek");
  if ((size_t)end != M.out.n) fz_fail("relayed %lld bytes, the contract says %zu", (long long)end, M.out.n);
  uint8_t *got = malloc(M.out.n + 1);
  if (!got || pread(g_outfd, got, M.out.n, 0) != (ssize_t)M.out.n) fz_fail("reading the output back");
  if (M.out.n && memcmp(got, M.out.p, M.out.n) != 0) {
    size_t at = 0;
    while (got[at] == M.out.p[at]) at++;
    fz_fail("relayed output differs from the contract at byte %zu of %zu", at, M.out.n);
  }
  free(got);
  if (g_got_links.n != M.links.n || (M.links.n && memcmp(g_got_links.p, M.links.p, M.links.n) != 0))
    fz_fail("status lines handed on differ from the contract (%zu bytes, expected %zu)", g_got_links.n, M.links.n);

  if (getenv("FZ_RELAY_DEBUG")) { /* what an input does */
    fprintf(stderr, "relayed %zu bytes, %zu bytes of status lines; causes:", M.out.n, M.links.n);
    for (int r = 0; r < g_opts.np; r++) fprintf(stderr, " %d", g_ranks[r].cause);
    fprintf(stderr, "\n--- output (first 600 bytes)\n%.*s\n---\n", (int)(M.out.n < 600 ? M.out.n : 600), (const char *)M.out.p);
  }
  if (g_local && all.n) local_lines(all.p, all.n);
  /* a well-formed line from the stream's own rank sets what it says, the
   * first time: look at the first status line handed on */
  if (M.links.n >= 4) {
    uint32_t len;
    memcpy(&len, M.links.p, 4);
    char line[128];
    int r, st, c = -3;
    char cause[16], tail;
    if (len < sizeof line) {
      memcpy(line, M.links.p + 4, len);
      line[len] = '\0';
      /* canonical: what status_line() writes, nothing more */
      if (sscanf(line, "rank=%d cause=%15[a-z0-9-] status=%d%c", &r, cause, &st, &tail) == 3) {
        char again[128];
        snprintf(again, sizeof again, "rank=%d cause=%s status=%d", r, cause, st);
        if (!strcmp(again, line)) {
          if (!strcmp(cause, "self")) c = -1;
          else if (cause[0] >= '0' && cause[0] <= '9' && strlen(cause) < 4) c = atoi(cause);
          if (c == -1 || (c >= 0 && c < g_opts.np && c != M.rank)) {
            if (!g_local && g_ranks[M.rank].cause != c)
              fz_fail("'%s' from rank %d left its cause at %d", line, M.rank, g_ranks[M.rank].cause);
          }
        }
      }
    }
  }
  free(all.p);
  return 0;
}

/* ------------------------------------------------------------ seeds */
typedef struct sb {
  uint8_t b[600];
  size_t n;
} sb;
static void put(sb *s, int v) { s->b[s->n++] = (uint8_t)v; }
static void put_str(sb *s, const char *t) {
  size_t n = strlen(t);
  put(s, 0), put(s, (int)n);
  memcpy(s->b + s->n, t, n);
  s->n += n;
}

static void fz_write_seeds(void) {
  static const int flags[] = {0x03 | 0x20, 0x02 | 0x40, 0x01, 0x13 | 0x60, 0x07 | 0x20};
  for (int i = 0; i < 5; i++) {
    sb s = {{0}, 0};
    char name[32];
    put(&s, flags[i]), put(&s, i);
    put_str(&s, "hello from a rank\nsecond line\npartial");
    put(&s, 5), put(&s, 0), put(&s, 1), put(&s, 0x40 + i), put(&s, 3); /* status line: rank 0, cause 3 */
    put(&s, 5), put(&s, 1), put(&s, 5), put(&s, 'x'), put(&s, 'y'), put(&s, ' '), put(&s, 'z'), put(&s, ':');
    put(&s, 2), put(&s, 10), put(&s, 4);                       /* text before it, cause self */
    put(&s, 7), put(&s, 5), put_str(&s, "ink 0123456789abcdef rank=1 cause=self status=-3\n"); /* key split */
    put(&s, 4), put(&s, 0x80), put(&s, 0x20), put(&s, 'a'); /* a line of 64 KiB + 64 */
    put(&s, 6);
    put_str(&s, "last words");
    snprintf(name, sizeof name, "stream-%d", i);
    fz_seed(name, s.b[0], s.b + 1, s.n - 1);
    LLVMFuzzerTestOneInput(s.b, s.n);
  }
  for (uint64_t i = 1; i <= 4; i++) {
    uint8_t b[300];
    char name[32];
    fz_fill(b, sizeof b, i * 6151);
    snprintf(name, sizeof name, "random-%d", (int)i);
    fz_seed(name, (uint8_t)(i * 37), b, sizeof b);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  g_outfd = memfd_create("fuzz-relay-out", MFD_CLOEXEC);
  if (g_outfd < 0) fz_fail("memfd_create: %s", strerror(errno));
  fz_seed_init("fuzz_relay");
  return 0;
}

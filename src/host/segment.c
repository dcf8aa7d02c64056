/* segment.c - creates and maps the host's shared segment (segment.h): the
 * lowest local rank creates it in /dev/shm, every other local rank maps it,
 * and it is unlinked as soon as all have, so a crash leaks nothing.
 *
 * The name travels over the bootstrap sockets before the file exists: if the
 * creator dies after creating it, the peers (who see its socket close) unlink
 * it. The pages are reserved with posix_fallocate, so a full /dev/shm fails
 * setup cleanly instead of SIGBUSing a rank on its first touch of a slot. */
#include "host/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap/sockutil.h"
#include "host/mailbox.h"
#include "host/numa.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

#define SEG_MAGIC 0x316d687374666577ULL /* "weftshm1" */
#define SEG_VERSION 9 /* 9: the NUMA layout after the ranks */
#define PAGE 4096u
#define DEF_SLOT_BYTES (64u << 10)
#define DEF_NSLOTS 16u

/* Records exchanged over the bootstrap sockets, all of this one size, strictly
 * paired: creator -> each peer NAME, READY; peer -> creator ACK (only after a
 * successful READY); creator -> peer VERDICT (only after its ACK). Both ends
 * are on one host: native byte order. */
enum { MSG_NAME = 1, MSG_READY = 2, MSG_ACK = 3, MSG_VERDICT = 4 };
#define MSG_MAGIC 0x4d485357u /* "WSHM" */

typedef struct setup_msg {
  uint32_t magic, kind;
  int32_t status;
  uint32_t pad;
  uint64_t size;
  char text[232]; /* NAME: the segment name; errors: what failed */
} setup_msg;

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Fills l from the geometry (inbox_bytes: one receiver's inbox, a page
 * multiple); 0 if the sizes overflow or a ring would get less than two
 * 64-byte slots. Every mapper recomputes it from the header's fields. */
static int make_layout(int nlocal, size_t slot_bytes, size_t nslots, size_t inbox_bytes, size_t board_bytes,
                       size_t stage_bytes, wf_shm_layout *l) {
  size_t n = (size_t)nlocal, inboxes, stages, end;
  if (nlocal < 2 || slot_bytes > SIZE_MAX / 4 || nslots > SIZE_MAX / 4 || inbox_bytes % PAGE ||
      inbox_bytes < WF_SHM_LINE)
    return 0;
  l->cfg_slot_bytes = round_up(slot_bytes, 64);
  l->cfg_nslots = nslots;
  l->inbox_bytes = inbox_bytes;
  /* each sender's share of the inbox (after the bell), 128-aligned: its ring */
  l->ring_bytes = (inbox_bytes - WF_SHM_LINE) / (n - 1) / WF_SHM_LINE * WF_SHM_LINE;
  if (l->ring_bytes < sizeof(wf_shm_ring) + 2 * (WF_SHM_SLOT_HDR + 64)) return 0;
  size_t avail = l->ring_bytes - sizeof(wf_shm_ring), fit = avail / (WF_SHM_SLOT_HDR + l->cfg_slot_bytes);
  if (fit >= 2) { /* the configured slots, as many as fit */
    l->slot_bytes = l->cfg_slot_bytes;
    l->nslots = fit < nslots ? fit : nslots;
  } else { /* two smaller slots */
    l->nslots = 2;
    l->slot_bytes = (avail / 2 - WF_SHM_SLOT_HDR) / 64 * 64;
  }
  l->stride = WF_SHM_SLOT_HDR + l->slot_bytes;
  l->rings_off = round_up(sizeof(wf_shm_seg_hdr) + sizeof(int32_t) * 2 * n, PAGE); /* ranks, NUMA nodes */
  if (__builtin_mul_overflow(inbox_bytes, n, &inboxes) || __builtin_add_overflow(inboxes, l->rings_off, &end))
    return 0;
  if (board_bytes > SIZE_MAX / 4 || stage_bytes > SIZE_MAX / 4) return 0;
  l->board_bytes = round_up(board_bytes, PAGE);
  l->stage_bytes = round_up(stage_bytes, PAGE);
  l->board_off = end;
  l->stage_off = end + l->board_bytes;
  if (__builtin_mul_overflow(l->stage_bytes, n, &stages) || __builtin_add_overflow(l->stage_off, stages, &l->mbox_off))
    return 0;
  l->mbox_bytes = wf_mbox_region_bytes(nlocal); /* a page multiple */
  if (__builtin_add_overflow(l->mbox_off, l->mbox_bytes, &l->size)) return 0;
  return 1;
}

int wf_host_plan(int nlocal, size_t slot_bytes, size_t nslots, size_t board_bytes, size_t stage_bytes,
                 wf_shm_layout *l) {
  size_t slot = slot_bytes ? slot_bytes : DEF_SLOT_BYTES;
  size_t k = nslots ? (nslots < 2 ? 2 : nslots) : DEF_NSLOTS, full, inbox;
  if (nlocal < 2 || slot > UINT32_MAX - 64) return 0;
  slot = round_up(slot, 64);
  /* twice a full ring: up to 3 local ranks every pair has the configured
   * geometry; unless both sizes were given, capped so that all inboxes
   * together stay within WF_SHM_RINGS_CAP */
  if (__builtin_mul_overflow(WF_SHM_SLOT_HDR + slot, k, &full) || full > SIZE_MAX / 8) return 0;
  inbox = round_up(WF_SHM_LINE + 2 * (sizeof(wf_shm_ring) + full), PAGE);
  if ((!slot_bytes || !nslots) && inbox > WF_SHM_RINGS_CAP / (size_t)nlocal)
    inbox = WF_SHM_RINGS_CAP / (size_t)nlocal / PAGE * PAGE;
  return make_layout(nlocal, slot, k, inbox, board_bytes, stage_bytes, l);
}

static void sanitize(char *dst, size_t cap, const char *src) {
  size_t k = 0;
  for (; src && *src && k + 1 < cap; src++) {
    char c = *src;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
             c == '.';
    dst[k++] = ok ? c : '_';
  }
  dst[k] = '\0';
}

/* "/weft-<job>-<host>-<random>": the job id lets an operator (and the tests)
 * recognize a leak, the random suffix makes O_EXCL collisions impossible. */
static void seg_name(const char *job_id, char *name, size_t cap) {
  char job[48], host[48], hn[256] = "";
  gethostname(hn, sizeof hn - 1);
  sanitize(job, sizeof job, job_id && *job_id ? job_id : "nojob");
  sanitize(host, sizeof host, hn[0] ? hn : "host");
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
    r = (uint64_t)wf_now_ns() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
  snprintf(name, cap, "/weft-%s-%s-%016llx", job, host, (unsigned long long)r);
}

static weft_status msg_put(int fd, uint32_t kind, weft_status st, uint64_t size, const char *text, int64_t deadline,
                           char *err, size_t errlen) {
  setup_msg m = {.magic = MSG_MAGIC, .kind = kind, .status = st, .size = size};
  /* A bounded copy, not snprintf: text is never NULL (callers pass ""), and
   * testing it here would let GCC 13 thread a "NULL" path into the callers'
   * later snprintf(err, ...) calls (-Wformat-truncation: null destination). */
  size_t k = strnlen(text, sizeof m.text - 1);
  memcpy(m.text, text, k);
  m.text[k] = '\0';
  return wf_sock_write_all(fd, &m, sizeof m, deadline, NULL, err, errlen);
}

static weft_status msg_get(int fd, uint32_t kind, setup_msg *m, int64_t deadline, char *err, size_t errlen) {
  weft_status st = wf_sock_read_all(fd, m, sizeof *m, deadline, NULL, err, errlen);
  if (st != WEFT_OK) return st;
  if (m->magic != MSG_MAGIC || m->kind != kind) {
    snprintf(err, errlen, "unexpected setup message (kind %u, expected %u)", m->kind, kind);
    return WEFT_ERR_PROTOCOL;
  }
  m->text[sizeof m->text - 1] = '\0';
  return WEFT_OK;
}

/* A failure status from a peer's record (anything else is a protocol error). */
static weft_status remote_status(int32_t st) {
  return st < 0 && st >= WEFT_ERR_INTERNAL ? (weft_status)st : WEFT_ERR_PROTOCOL;
}

/* Creator: makes the file, reserves its pages and initializes the header. */
static weft_status seg_make(const char *name, const wf_host_cfg *cfg, const wf_shm_layout *l, uint8_t **map,
                            int *created, char *err, size_t errlen) {
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "shm_open(/dev/shm%s): %s", name, strerror(errno));
    return WEFT_ERR_SYSTEM;
  }
  *created = 1;
  weft_status st = WEFT_ERR_SYSTEM;
  int rc;
  if (ftruncate(fd, (off_t)l->size)) {
    snprintf(err, errlen, "ftruncate(/dev/shm%s, %zu): %s", name, l->size, strerror(errno));
    goto out;
  }
  void *m = mmap(NULL, l->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    snprintf(err, errlen, "mmap of %zu bytes: %s", l->size, strerror(errno));
    goto out;
  }
  /* Each rank's parts on its node (host/numa.h): the policy is the file's,
   * so the pages reserved below are allocated there. A hint: a failure is
   * only reported. */
  if (cfg->numa_nodes) {
    wf_numa_range *r = malloc(sizeof *r * 3 * (size_t)cfg->nlocal);
    int nr = r ? wf_numa_ranges(l, cfg->nlocal, cfg->numa_nodes, r) : 0;
    if (nr > 0 && wf_numa_bind(m, r, nr, wf_numa_machine(NULL, WF_NUMA_MAX_NODES)) < 0)
      WF_WARN(WF_SUB_SHM, "placing the shared segment on NUMA nodes failed (mbind: %s); it stays where it is",
              strerror(errno));
    free(r);
  }
  /* Reserve every page now: a full /dev/shm must fail here, not SIGBUS a
   * rank later when it first touches a slot. */
  while ((rc = posix_fallocate(fd, 0, (off_t)l->size)) == EINTR) {
  }
  if (rc) {
    munmap(m, l->size);
    snprintf(err, errlen, "cannot reserve %zu MiB in /dev/shm (posix_fallocate: %s)", l->size >> 20, strerror(rc));
    goto out;
  }
  wf_shm_seg_hdr *h = m; /* the pages are zero: rings empty, doorbells idle */
  h->version = SEG_VERSION;
  h->nlocal = (uint32_t)cfg->nlocal;
  h->slot_bytes = l->cfg_slot_bytes;
  h->nslots = l->cfg_nslots;
  h->inbox_bytes = l->inbox_bytes;
  h->board_bytes = l->board_bytes;
  h->board_param = cfg->board_param;
  h->stage_bytes = l->stage_bytes;
  h->size = l->size;
  for (int i = 0; i < cfg->nlocal; i++) {
    h->ranks[i] = cfg->local_ranks[i];
    h->ranks[cfg->nlocal + i] = cfg->numa_nodes ? cfg->numa_nodes[i] : -1;
  }
  h->magic = SEG_MAGIC; /* peers map only after READY, sent after this */
  *map = m;
  st = WEFT_OK;
out:
  close(fd);
  return st;
}

/* Peer: maps the creator's segment and checks it is the one we expect. */
static weft_status seg_attach(const char *name, size_t size, const wf_host_cfg *cfg, wf_shm_layout *l, uint8_t **map,
                              char *err, size_t errlen) {
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "shm_open(/dev/shm%s): %s", name, strerror(errno));
    return WEFT_ERR_SYSTEM;
  }
  struct stat sb;
  weft_status st = WEFT_ERR_SYSTEM;
  if (fstat(fd, &sb) || (size_t)sb.st_size != size || size < PAGE) {
    snprintf(err, errlen, "/dev/shm%.160s has the wrong size", name);
    goto out;
  }
  void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (m == MAP_FAILED) {
    snprintf(err, errlen, "mmap of %zu bytes: %s", size, strerror(errno));
    goto out;
  }
  const wf_shm_seg_hdr *h = m;
  int ok = h->magic == SEG_MAGIC && h->version == SEG_VERSION && h->nlocal == (uint32_t)cfg->nlocal &&
           h->size == size && h->nslots >= 2 && h->slot_bytes >= 64 && h->slot_bytes <= UINT32_MAX &&
           make_layout(cfg->nlocal, h->slot_bytes, h->nslots, h->inbox_bytes, h->board_bytes, h->stage_bytes, l) &&
           l->size == size;
  for (int i = 0; ok && i < cfg->nlocal; i++) ok = h->ranks[i] == cfg->local_ranks[i];
  if (!ok) {
    munmap(m, size);
    snprintf(err, errlen, "the segment's header does not match this rank's view of the host's ranks");
    st = WEFT_ERR_PROTOCOL;
    goto out;
  }
  *map = m;
  st = WEFT_OK;
out:
  close(fd);
  return st;
}

/* Creator side of the exchange (see setup_msg). Every live peer gets the
 * records it waits for, also on failure, so none is left hanging. */
static weft_status setup_creator(const wf_host_cfg *cfg, weft_status local, wf_shm_layout *l, uint8_t **map, int64_t dl,
                                 char *err, size_t errlen) {
  char name[200], e[256] = "";
  seg_name(cfg->job_id, name, sizeof name);
  int created = 0, n = cfg->nlocal;
  char *state = local == WEFT_OK ? calloc((size_t)n, 1) : NULL; /* per peer: 0 dead, 1 NAME, 2 READY ok, 3 ACK */
  if (!state) {
    /* Declining: every peer still gets NAME and a failed READY, so all
     * local ranks fail alike and nothing is left unread. */
    if (local == WEFT_OK) local = WEFT_ERR_NO_MEMORY, snprintf(err, errlen, "out of memory");
    for (int i = 1; i < n; i++)
      if (msg_put(cfg->fds[cfg->local_ranks[i]], MSG_NAME, WEFT_OK, 0, name, dl, e, sizeof e) == WEFT_OK)
        msg_put(cfg->fds[cfg->local_ranks[i]], MSG_READY, local, 0, err, dl, e, sizeof e);
    return local;
  }
  weft_status st = WEFT_OK;
  /* The name goes out before the file exists: if we die after creating it,
   * the peers (who see our socket close) unlink it. */
  for (int i = 1; i < n; i++) {
    int fd = cfg->fds[cfg->local_ranks[i]];
    weft_status r = msg_put(fd, MSG_NAME, WEFT_OK, 0, name, dl, e, sizeof e);
    if (r == WEFT_OK) state[i] = 1;
    else if (st == WEFT_OK) st = r, snprintf(err, errlen, "sending to rank %d: %s", cfg->local_ranks[i], e);
  }
  if (st == WEFT_OK &&
      !wf_host_plan(cfg->nlocal, cfg->slot_bytes, cfg->nslots, cfg->board_bytes, cfg->stage_bytes, l)) {
    st = WEFT_ERR_INVALID_ARGUMENT;
    snprintf(err, errlen, "ring geometry too large, or too many local ranks (%d) for the rings", cfg->nlocal);
  }
  if (st == WEFT_OK) st = seg_make(name, cfg, l, map, &created, err, errlen);
  for (int i = 1; i < n; i++) {
    if (!state[i]) continue;
    weft_status r = msg_put(cfg->fds[cfg->local_ranks[i]], MSG_READY, st, l->size, st ? err : "", dl, e, sizeof e);
    if (r != WEFT_OK) {
      state[i] = 0;
      if (st == WEFT_OK) st = r, snprintf(err, errlen, "sending to rank %d: %s", cfg->local_ranks[i], e);
    } else if (state[i] == 1 && st == WEFT_OK) {
      state[i] = 2;
    }
  }
  for (int i = 1; i < n; i++) {
    if (state[i] != 2) continue;
    setup_msg m;
    weft_status r = msg_get(cfg->fds[cfg->local_ranks[i]], MSG_ACK, &m, dl, e, sizeof e);
    if (r == WEFT_OK) state[i] = 3;
    if (st != WEFT_OK) continue;
    if (r != WEFT_OK)
      st = r, snprintf(err, errlen, "waiting for rank %d to map the segment: %s", cfg->local_ranks[i], e);
    else if (m.status != WEFT_OK)
      st = remote_status(m.status),
      snprintf(err, errlen, "rank %d could not map the segment: %s", cfg->local_ranks[i], m.text);
  }
  /* Everyone who will ever map it has: the name can go. */
  if (created && shm_unlink(name) && st == WEFT_OK) {
    st = WEFT_ERR_SYSTEM;
    snprintf(err, errlen, "shm_unlink(/dev/shm%s): %s", name, strerror(errno));
  }
  for (int i = 1; i < n; i++)
    if (state[i] == 3) {
      weft_status r = msg_put(cfg->fds[cfg->local_ranks[i]], MSG_VERDICT, st, 0, st ? err : "", dl, e, sizeof e);
      if (r != WEFT_OK && st == WEFT_OK)
        st = r, snprintf(err, errlen, "sending to rank %d: %s", cfg->local_ranks[i], e);
    }
  free(state);
  if (st != WEFT_OK && *map) {
    munmap(*map, l->size);
    *map = NULL;
  }
  return st;
}

/* Peer side: NAME, READY, map, ACK, VERDICT (declining: ACK the failure). */
static weft_status setup_peer(const wf_host_cfg *cfg, weft_status local, wf_shm_layout *l, uint8_t **map, int64_t dl,
                              char *err, size_t errlen) {
  int creator = cfg->local_ranks[0], fd = cfg->fds[creator];
  char name[sizeof ((setup_msg *)0)->text], e[256] = "";
  setup_msg m;
  weft_status st = msg_get(fd, MSG_NAME, &m, dl, e, sizeof e);
  if (st != WEFT_OK) {
    snprintf(err, errlen, "waiting for rank %d to name the segment: %s", creator, e);
    return st;
  }
  snprintf(name, sizeof name, "%s", m.text);
  st = msg_get(fd, MSG_READY, &m, dl, e, sizeof e);
  if (st != WEFT_OK) {
    shm_unlink(name); /* the creator may have died holding it */
    snprintf(err, errlen, "waiting for rank %d to create the segment: %s", creator, e);
    return st;
  }
  if (m.status != WEFT_OK) {
    snprintf(err, errlen, "rank %d could not create the segment: %s", creator, m.text);
    return remote_status(m.status);
  }
  char why[256] = "";
  weft_status mine = local;
  if (mine != WEFT_OK) snprintf(why, sizeof why, "%.*s", (int)sizeof why - 1, err); /* cut to fit */
  else mine = seg_attach(name, m.size, cfg, l, map, why, sizeof why);
  st = msg_put(fd, MSG_ACK, mine, 0, mine ? why : "", dl, e, sizeof e);
  if (st == WEFT_OK) st = msg_get(fd, MSG_VERDICT, &m, dl, e, sizeof e);
  if (st != WEFT_OK) {
    shm_unlink(name); /* the creator may have died before unlinking */
    snprintf(err, errlen, "setting up the segment with rank %d: %s", creator, e);
  } else if (mine != WEFT_OK) {
    st = mine;
    snprintf(err, errlen, "%s", why);
  } else if (m.status != WEFT_OK) {
    st = remote_status(m.status);
    snprintf(err, errlen, "%s", m.text);
  }
  if (st != WEFT_OK && *map) {
    munmap(*map, l->size);
    *map = NULL;
  }
  return st;
}

struct wf_host {
  int nlocal, me;
  int size;
  int *lidx; /* world rank -> local index, -1 if not local */
  int *numa; /* the header's NUMA layout (nlocal entries) */
  int has_numa; /* it names some rank's node */
  uint8_t *map;
  wf_shm_layout l;
};

static weft_status check_cfg(const wf_host_cfg *c) {
  if (!c || c->size < 1 || c->rank < 0 || c->rank >= c->size || !c->local_ranks || c->nlocal < 2 ||
      c->nlocal > c->size || !c->fds)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "shared memory: bad configuration");
  int found = 0;
  for (int i = 0; i < c->nlocal; i++) {
    int r = c->local_ranks[i];
    if (r < 0 || r >= c->size || (i > 0 && r <= c->local_ranks[i - 1]))
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "shared memory: local ranks must be ascending world ranks");
    if (r == c->rank) found = 1;
    else if (c->fds[r] < 0 && (i == 0 || c->rank == c->local_ranks[0]))
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "shared memory: no connection to local rank %d", r);
  }
  if (!found) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "shared memory: rank %d is not among the local ranks", c->rank);
  return WEFT_OK;
}

weft_status wf_host_create(const wf_host_cfg *cfg, wf_host **out) {
  *out = NULL;
  WF_CHECK(check_cfg(cfg));
  weft_status st = WEFT_OK;
  char err[512] = "";
  wf_host *h = calloc(1, sizeof *h);
  if (!h || !(h->lidx = malloc(sizeof(int) * (size_t)cfg->size)) ||
      !(h->numa = malloc(sizeof(int) * (size_t)cfg->nlocal))) {
    st = WEFT_ERR_NO_MEMORY; /* the others must still learn that this rank declines */
    snprintf(err, sizeof err, "out of memory");
  }
  int64_t dl = wf_deadline_after(cfg->timeout_seconds);
  wf_shm_layout l = {0};
  uint8_t *map = NULL;
  st = cfg->rank == cfg->local_ranks[0] ? setup_creator(cfg, st, &l, &map, dl, err, sizeof err)
                                        : setup_peer(cfg, st, &l, &map, dl, err, sizeof err);
  if (st != WEFT_OK) {
    if (h) free(h->lidx), free(h->numa);
    free(h);
    return wf_err(st, "shared-memory setup failed on rank %d: %s (set WEFT_TRANSPORT=tcp to run without it)",
                  cfg->rank, err);
  }
  h->nlocal = cfg->nlocal;
  h->size = cfg->size;
  h->map = map;
  h->l = l;
  for (int r = 0; r < cfg->size; r++) h->lidx[r] = -1;
  for (int i = 0; i < cfg->nlocal; i++) {
    h->lidx[cfg->local_ranks[i]] = i;
    if (cfg->local_ranks[i] == cfg->rank) h->me = i;
  }
  /* the creator's layout, the same for every local rank: kept when it
   * names some rank's node (an entry out of range counts as unknown) */
  const int32_t *nodes = ((const wf_shm_seg_hdr *)map)->ranks + cfg->nlocal;
  int known = 0;
  for (int i = 0; i < cfg->nlocal; i++) known |= nodes[i] >= 0 && nodes[i] < WF_NUMA_MAX_NODES;
  for (int i = 0; i < cfg->nlocal; i++) h->numa[i] = nodes[i] >= 0 && nodes[i] < WF_NUMA_MAX_NODES ? nodes[i] : -1;
  h->has_numa = known;
  *out = h;
  return WEFT_OK;
}

void wf_host_destroy(wf_host *h) {
  if (!h) return;
  if (h->map) munmap(h->map, h->l.size);
  free(h->lidx);
  free(h->numa);
  free(h);
}

int wf_host_nlocal(const wf_host *h) { return h->nlocal; }
int wf_host_local_index(const wf_host *h) { return h->me; }
int wf_host_index_of(const wf_host *h, int world_rank) {
  return h && world_rank >= 0 && world_rank < h->size ? h->lidx[world_rank] : -1;
}
uint8_t *wf_host_map(const wf_host *h) { return h->map; }
const wf_shm_layout *wf_host_layout(const wf_host *h) { return &h->l; }

void *wf_host_board(const wf_host *h, size_t *bytes, uint64_t *param) {
  *bytes = h ? h->l.board_bytes : 0;
  *param = *bytes ? ((const wf_shm_seg_hdr *)h->map)->board_param : 0;
  return *bytes ? h->map + h->l.board_off : NULL;
}

const int *wf_host_numa(const wf_host *h) { return h && h->has_numa ? h->numa : NULL; }

void *wf_host_mbox(const wf_host *h) { return h && h->l.mbox_bytes ? h->map + h->l.mbox_off : NULL; }

void *wf_host_stage(const wf_host *h, int li, size_t *bytes) {
  *bytes = h && li >= 0 && li < h->nlocal ? h->l.stage_bytes : 0;
  return *bytes ? h->map + h->l.stage_off + h->l.stage_bytes * (size_t)li : NULL;
}

/* mp_locality.c - weft_peer_locality (weft.h): where every rank of the world
 * runs, as the rendezvous learned it, checked on every rank against
 * references the test computes itself:
 *  - host names: MP_HIER_HOSTS (hier_hosts.sh: one fake host per rank),
 *    else this machine's name (WEFT_HOSTNAME or gethostname) for everyone;
 *    host_index and host_count from that list (hosts numbered by their
 *    lowest rank), local_rank and local_size likewise (rank order within a
 *    host);
 *  - pid: each rank's getpid(), gathered with an allgather;
 *  - incarnation: nonzero, distinct between ranks, and what the rank itself
 *    reports, on every rank (gathered);
 *  - device_kinds: only known kinds, SIM always, and what the rank itself
 *    reports (gathered);
 *  - this rank's entry agrees with weft_local_rank/size, weft_cross_rank/size;
 *  - errors: NULL or foreign world (MISUSE), rank -1 and size, NULL out, a
 *    struct_size below the host field (INVALID_ARGUMENT, naming the rank or
 *    the size); an older caller's smaller struct gets the fields that fit and
 *    nothing past them. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mp_harness.c"

#define MAXR 64

/* The reference host name of rank r. */
static void host_of(int r, char *out, size_t len) {
  const char *list = getenv("MP_HIER_HOSTS");
  if (list && *list) {
    const char *p = list;
    for (int i = 0; i < r && p; i++) {
      p = strchr(p, ',');
      if (p) p++;
    }
    size_t n = p ? strcspn(p, ",") : 0;
    snprintf(out, len, "%.*s", (int)n, p ? p : "");
    return;
  }
  const char *hn = getenv("WEFT_HOSTNAME");
  if (hn && *hn) snprintf(out, len, "%s", hn);
  else if (gethostname(out, len - 1)) snprintf(out, len, "localhost");
  out[len - 1] = '\0';
}

/* Allgathers one int64 per rank into all[0..size). */
static int gather64(const char *name, int64_t mine, int64_t *all) {
  int64_t one[1] = {1};
  weft_tensor in = {WEFT_DTYPE_INT64, 1, one, &mine, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  weft_status st = weft_allgather(mp_group, name, &in, NULL, &req);
  mp_submitted(st, &req, name);
  if (!mp_wait_ok(req, name)) return 0;
  weft_tensor out;
  st = weft_request_output(req, &out);
  if (st != WEFT_OK || out.ndim != 1 || out.shape[0] != mp_size) {
    mp_fail("%s: output %s", name, weft_status_string(st));
    weft_request_free(req);
    return 0;
  }
  memcpy(all, out.data, sizeof(int64_t) * (size_t)mp_size);
  weft_request_free(req);
  return 1;
}

static void check_entries(void) {
  mp_case("locality of every rank");
  char hosts[MAXR][WEFT_HOST_NAME_MAX + 1];
  int hidx[MAXR], lrank[MAXR], lsize[MAXR], nh = 0;
  for (int r = 0; r < mp_size; r++) {
    host_of(r, hosts[r], sizeof hosts[r]);
    hidx[r] = -1;
    for (int q = 0; q < r; q++)
      if (!strcmp(hosts[q], hosts[r])) {
        hidx[r] = hidx[q];
        break;
      }
    if (hidx[r] < 0) hidx[r] = nh++;
    lrank[r] = 0;
    for (int q = 0; q < r; q++) lrank[r] += hidx[q] == hidx[r];
  }
  for (int r = 0; r < mp_size; r++) {
    lsize[r] = 0;
    for (int q = 0; q < mp_size; q++) lsize[r] += hidx[q] == hidx[r];
  }
  weft_locality self = WEFT_LOCALITY_INIT;
  weft_status st = weft_peer_locality(mp_world, mp_rank, &self);
  if (st != WEFT_OK) mp_fatal("weft_peer_locality(self): %s: %s", weft_status_string(st), weft_last_error());
  int64_t pids[MAXR], incs[MAXR], kinds[MAXR];
  if (!gather64("loc.pid", (int64_t)getpid(), pids) || !gather64("loc.inc", (int64_t)self.incarnation, incs) ||
      !gather64("loc.kinds", (int64_t)self.device_kinds, kinds))
    return;
  for (int r = 0; r < mp_size; r++) {
    weft_locality l = WEFT_LOCALITY_INIT;
    st = weft_peer_locality(mp_world, r, &l);
    if (st != WEFT_OK) {
      mp_fail("rank %d: %s: %s", r, weft_status_string(st), weft_last_error());
      continue;
    }
    if (strcmp(l.host, hosts[r])) mp_fail("rank %d: host '%s', want '%s'", r, l.host, hosts[r]);
    if (l.host_index != hidx[r] || l.host_count != nh)
      mp_fail("rank %d: host %d of %d, want %d of %d", r, l.host_index, l.host_count, hidx[r], nh);
    if (l.local_rank != lrank[r] || l.local_size != lsize[r])
      mp_fail("rank %d: local rank %d of %d, want %d of %d", r, l.local_rank, l.local_size, lrank[r], lsize[r]);
    if (l.pid != pids[r]) mp_fail("rank %d: pid %lld, want %lld", r, (long long)l.pid, (long long)pids[r]);
    if (!l.incarnation || (int64_t)l.incarnation != incs[r])
      mp_fail("rank %d: incarnation %llx, it says %llx", r, (unsigned long long)l.incarnation,
              (unsigned long long)incs[r]);
    for (int q = 0; q < r; q++)
      if (incs[q] == incs[r]) mp_fail("ranks %d and %d share the incarnation %llx", q, r, (unsigned long long)incs[r]);
    unsigned known = (1u << WEFT_DEVICE_KIND_CUDA) | (1u << WEFT_DEVICE_KIND_SIM);
    if ((int64_t)l.device_kinds != kinds[r] || (l.device_kinds & ~known) ||
        !(l.device_kinds & (1u << WEFT_DEVICE_KIND_SIM)))
      mp_fail("rank %d: device kinds 0x%x, it says 0x%llx", r, l.device_kinds, (long long)kinds[r]);
  }
  if (self.local_rank != weft_local_rank(mp_world) || self.local_size != weft_local_size(mp_world) ||
      self.host_index != weft_cross_rank(mp_world) || self.host_count != weft_cross_size(mp_world))
    mp_fail("self: local %d/%d cross %d/%d; weft_local_rank etc. say %d/%d %d/%d", self.local_rank, self.local_size,
            self.host_index, self.host_count, weft_local_rank(mp_world), weft_local_size(mp_world),
            weft_cross_rank(mp_world), weft_cross_size(mp_world));
  mp_case_end();
}

static void check_errors(void) {
  mp_case("locality errors");
  weft_locality l = WEFT_LOCALITY_INIT;
  weft_status st = weft_peer_locality(NULL, 0, &l);
  if (st != WEFT_ERR_MISUSE) mp_fail("NULL world: %s", weft_status_string(st));
  int junk[64] = {0};
  st = weft_peer_locality((const weft_world *)junk, 0, &l);
  if (st != WEFT_ERR_MISUSE) mp_fail("foreign world: %s", weft_status_string(st));
  st = weft_peer_locality(mp_world, -1, &l);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !strstr(weft_last_error(), "rank -1"))
    mp_fail("rank -1: %s: %s", weft_status_string(st), weft_last_error());
  st = weft_peer_locality(mp_world, mp_size, &l);
  char want[64];
  snprintf(want, sizeof want, "rank %d is not in the world (size %d)", mp_size, mp_size);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !strstr(weft_last_error(), want))
    mp_fail("rank %d: %s: %s", mp_size, weft_status_string(st), weft_last_error());
  st = weft_peer_locality(mp_world, 0, NULL);
  if (st != WEFT_ERR_INVALID_ARGUMENT) mp_fail("NULL out: %s", weft_status_string(st));
  l.struct_size = sizeof(size_t);
  st = weft_peer_locality(mp_world, 0, &l);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !strstr(weft_last_error(), "struct_size"))
    mp_fail("struct_size %zu: %s: %s", l.struct_size, weft_status_string(st), weft_last_error());
  /* an older caller's struct, ending before device_kinds: filled up to it */
  weft_locality old = WEFT_LOCALITY_INIT;
  old.struct_size = offsetof(weft_locality, device_kinds);
  old.device_kinds = 0xdead;
  st = weft_peer_locality(mp_world, mp_rank, &old);
  if (st != WEFT_OK || old.device_kinds != 0xdead || !old.incarnation || old.pid != (int64_t)getpid())
    mp_fail("a smaller struct: %s, device_kinds 0x%x, pid %lld", weft_status_string(st), old.device_kinds,
            (long long)old.pid);
  mp_case_end();
}

int main(void) {
  mp_setup();
  if (mp_size > MAXR) mp_fatal("at most %d ranks", MAXR);
  check_entries();
  check_errors();
  return mp_teardown();
}

/* test_shm_faults.c - the shared-memory transport (transport/shm.h) when
 * things go wrong, with real processes (harness: test_shm_common.h): ranks
 * that disagree about which ranks share the host, a rank that never joins,
 * a rank SIGKILLed during setup or in the middle of a transfer, and a
 * segment larger than /dev/shm. Every failure is clean: an error naming the
 * cause (and WEFT_TRANSPORT=tcp as the way out), no hang, and no file left
 * in /dev/shm. */
#include "test_shm_common.h"

/* ------------------------------------------------------------------ scenarios */

/* Rank 2 disagrees about which ranks share the host: everyone fails. */
static void sc_mismatch(ctx *c) {
  c->world = 4;
  if (c->rank == 2) c->local[1] = 2, c->local[2] = 3;
  weft_status st = mk(c, 4096, 4, WF_SHM_COPY_AUTO, 10);
  CHECK(st == WEFT_ERR_PROTOCOL, "got %s: %s", weft_status_string(st), wf_err_msg());
  if (c->rank == 0) CHECK(strstr(wf_err_msg(), "rank 2 could not map") != NULL, "message: %s", wf_err_msg());
  if (st == WEFT_OK) unmk(c);
  barrier(c); /* the sockets are clean: TCP could take over */
}

/* A local rank that never joins: the others time out, nothing leaks. */
static void sc_timeout(ctx *c) {
  if (c->rank == 1) {
    usleep(600000);
    return;
  }
  double t = now_s();
  weft_status st = mk(c, 4096, 4, WF_SHM_COPY_AUTO, 0.2);
  CHECK(st == WEFT_ERR_TIMEOUT, "got %s: %s", weft_status_string(st), wf_err_msg());
  CHECK(now_s() - t < 1.5, "timed out after %.3f s", now_s() - t);
  CHECK(strstr(wf_err_msg(), "WEFT_TRANSPORT=tcp") != NULL, "message: %s", wf_err_msg());
  CHECK(shm_files(c->job) == 0, "segment file left after a timeout");
}

/* Setup with a large segment (so it takes a while) while the parent
 * SIGKILLs one rank: survivors fail or succeed cleanly, nothing leaks. */
static void sc_setup_killed(ctx *c) {
  weft_status st = mk(c, MIB, 16, WF_SHM_COPY_AUTO, 5);
  g_rep->outcome[c->rank] = st == WEFT_OK ? 1 : 2;
  if (st == WEFT_OK) {
    CHECK(shm_files(c->job) == 0, "a segment file exists after wf_shm_create returned");
    unmk(c);
  } else {
    CHECK(strstr(wf_err_msg(), "WEFT_TRANSPORT=tcp") != NULL, "message without the hint: %s", wf_err_msg());
  }
}

/* The receiver dies in the middle of a 64 MiB transfer: the sender neither
 * hangs nor crashes; its send stays pending until cancel_data. */
static void sc_transfer_killed(ctx *c) {
  mk_or_die(c, 0, 0, WF_SHM_COPY_AUTO);
  size_t len = 64 * MIB;
  uint8_t *b = malloc(len);
  int pending = 0;
  if (c->rank == 1) {
    await_peer(c, 0); /* the ring is full and the sender waits */
    CHECK(c->t->ops->recv(c->t, 0, 1, 0, b, len, &pending) == WEFT_OK, "recv");
    CHECK(pending == 1 && verify(b, 65536, tag_of(0, 1, 1, 0)) < 0, "no partial transfer before the kill");
    raise(SIGKILL);
  }
  fill(b, len, tag_of(0, 1, 1, 0));
  CHECK(c->t->ops->send(c->t, 1, 1, 0, b, len, &pending) == WEFT_OK, "send");
  signal_peer(c, 1);
  char x;
  while (read(c->fds[1], &x, 1) > 0) { /* the engine would see the TCP connection close */
  }
  drive_for(c, 0.1);
  CHECK(pending == 1 && c->t->ops->incomplete(c->t, 1), "send to a dead rank completed");
  double t = now_s();
  wf_shm_wait(c->s, 50000000);
  CHECK(now_s() - t < 1.0, "wait with a dead peer took %.3f s", now_s() - t);
  c->t->ops->cancel_data(c->t);
  CHECK(!c->t->ops->incomplete(c->t, 1), "incomplete after cancel_data");
  free(b);
  wf_shm_progress(c->s);
  unmk(c);
}

/* A segment larger than /dev/shm: a clean error naming /dev/shm. */
static void sc_full(ctx *c) {
  const size_t *nslots = c->arg;
  weft_status st = mk(c, 1u << 30, *nslots, WF_SHM_COPY_AUTO, 10);
  CHECK(st != WEFT_OK, "a segment larger than /dev/shm was created");
  if (c->rank == 0) CHECK(strstr(wf_err_msg(), "/dev/shm") != NULL, "message: %s", wf_err_msg());
  CHECK(strstr(wf_err_msg(), "WEFT_TRANSPORT=tcp") != NULL, "message: %s", wf_err_msg());
  if (st == WEFT_OK) unmk(c);
  barrier(c); /* the sockets are clean: TCP could take over */
}

/* ------------------------------------------------------------------ main */

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  g_rep = mmap(NULL, sizeof *g_rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_rep == MAP_FAILED) return 2;
  double t_start = now_s();

  run(3, sc_mismatch, NULL, "local ranks mismatch");
  run(2, sc_timeout, NULL, "setup timeout");
  int ok = 0, failed = 0;
  const double delays[] = {0, 0.001, 0.005, 0.02, 0.06, 0.15, 0.4};
  for (int victim = 0; victim < 2; victim++)
    for (size_t d = 0; d < sizeof delays / sizeof delays[0]; d++) {
      char what[96];
      snprintf(what, sizeof what, "setup with rank %d killed after %.1f ms", victim, delays[d] * 1e3);
      run_ex(3, sc_setup_killed, NULL, victim, delays[d], what);
      int survivor = victim == 0 ? 1 : 0;
      if (g_rep->outcome[survivor] == 1) ok++;
      if (g_rep->outcome[survivor] == 2) failed++;
    }
  printf("setup with a rank killed: %d setups completed, %d failed cleanly, no file left\n", ok, failed);
  run_ex(2, sc_transfer_killed, NULL, 1, -1, "receiver killed during a transfer");

  struct statvfs vfs;
  if (statvfs("/dev/shm", &vfs) == 0 && vfs.f_blocks > 0) {
    size_t nslots = (size_t)((double)vfs.f_blocks * (double)vfs.f_frsize / (double)(1u << 30)) + 2;
    run(2, sc_full, &nslots, "segment larger than /dev/shm");
  } else {
    printf("segment larger than /dev/shm: skipped (no size limit)\n");
  }

  printf("%s: %d failure(s) in %.1f s\n", g_failures ? "FAILED" : "PASSED", g_failures, now_s() - t_start);
  return g_failures ? 1 : 0;
}

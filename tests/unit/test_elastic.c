/* test_elastic.c - the elastic driver protocol (bootstrap/elastic.h): the
 * codec (round trips, and every malformed field refused), the generation's
 * secret against an independent HMAC-SHA256 (and a handshake keyed by one
 * generation refusing a peer of another), and a worker's question
 * (wf_el_join) against a driver connection (wf_el_conn) over loopback TCP:
 * rank 0 opens a listener and reports its address before a second worker
 * gets it; a refusal carries the driver's status and message; a worker
 * with a wrong secret fails with WEFT_ERR_AUTH and the driver drops it.
 * The host-update question (CHECK/UPDATE, wf_el_check): its codec, and the
 * driver's answer reaching the worker with the worker's generation. */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/elastic.h"
#include "unit_check.h"
#include "util/err.h"
#include "util/time.h"

static void test_codec(void) {
  char err[256];
  uint8_t a[WF_EL_ASK_SIZE], p[WF_EL_PLACE_SIZE], q[WF_EL_PORT_SIZE];
  uint32_t id;
  uint64_t gen;
  wf_el_encode_ask(a, 7, 41);
  CHECK(wf_el_decode_ask(a, &id, &gen, err, sizeof err) == WEFT_OK && id == 7 && gen == 41, "ask: %s", err);
  a[5] = 2;
  CHECK(wf_el_decode_ask(a, &id, &gen, err, sizeof err) == WEFT_ERR_PROTOCOL, "ask of the wrong kind accepted");
  wf_el_encode_ask(a, WF_EL_IDS, 1);
  CHECK(wf_el_decode_ask(a, &id, &gen, err, sizeof err) == WEFT_ERR_PROTOCOL, "id out of range accepted");

  wf_el_place in = {.generation = 3, .rank = 1, .size = 4}, out;
  snprintf(in.addr, sizeof in.addr, "10.0.0.1:4242");
  wf_el_encode_place(p, &in);
  CHECK(wf_el_decode_place(p, &out, err, sizeof err) == WEFT_OK && out.generation == 3 && out.rank == 1 &&
            out.size == 4 && !strcmp(out.addr, "10.0.0.1:4242"),
        "place: %s", err);
  in.rank = 4; /* rank >= size */
  wf_el_encode_place(p, &in);
  CHECK(wf_el_decode_place(p, &out, err, sizeof err) == WEFT_ERR_PROTOCOL, "rank 4 of 4 accepted");
  in.rank = 0;
  in.generation = 0;
  wf_el_encode_place(p, &in);
  CHECK(wf_el_decode_place(p, &out, err, sizeof err) == WEFT_ERR_PROTOCOL, "generation 0 accepted");
  in = (wf_el_place){.status = WEFT_ERR_ABORTED};
  snprintf(in.msg, sizeof in.msg, "too few");
  wf_el_encode_place(p, &in);
  CHECK(wf_el_decode_place(p, &out, err, sizeof err) == WEFT_OK && out.status == WEFT_ERR_ABORTED &&
            !strcmp(out.msg, "too few"),
        "refusal: %s", err);
  memset(p + 32, 'x', WF_EL_ADDR_MAX); /* no NUL in addr */
  CHECK(wf_el_decode_place(p, &out, err, sizeof err) == WEFT_ERR_PROTOCOL, "addr without a NUL accepted");
  p[8] = 1, p[9] = p[10] = p[11] = 0; /* a positive status */
  memset(p + 32, 0, WF_EL_ADDR_MAX);
  CHECK(wf_el_decode_place(p, &out, err, sizeof err) == WEFT_ERR_PROTOCOL, "status 1 accepted");

  char addr[WF_EL_ADDR_MAX];
  wf_el_encode_port(q, 5, 9, "127.0.0.1:555");
  CHECK(wf_el_decode_port(q, &id, &gen, addr, err, sizeof err) == WEFT_OK && id == 5 && gen == 9 &&
            !strcmp(addr, "127.0.0.1:555"),
        "port: %s", err);
  q[0] ^= 1;
  CHECK(wf_el_decode_port(q, &id, &gen, addr, err, sizeof err) == WEFT_ERR_PROTOCOL, "bad magic accepted");

  uint8_t c[WF_EL_CHECK_SIZE];
  wf_el_encode_check(c, 9, 3);
  CHECK(wf_el_decode_check(c, &id, &gen, err, sizeof err) == WEFT_OK && id == 9 && gen == 3, "check: %s", err);
  CHECK(wf_el_decode_ask(c, &id, &gen, err, sizeof err) == WEFT_ERR_PROTOCOL, "a CHECK taken for an ASK");
  c[12] = 1;
  CHECK(wf_el_decode_check(c, &id, &gen, err, sizeof err) == WEFT_ERR_PROTOCOL, "check: reserved field accepted");
  wf_el_encode_check(c, WF_EL_IDS, 3);
  CHECK(wf_el_decode_check(c, &id, &gen, err, sizeof err) == WEFT_ERR_PROTOCOL, "check: id out of range accepted");
  int32_t status;
  uint32_t upd;
  wf_el_encode_update(c, 0, WF_EL_UPD_ADDED | WF_EL_UPD_REMOVED, 12);
  CHECK(wf_el_decode_update(c, &status, &upd, &gen, err, sizeof err) == WEFT_OK && status == 0 && upd == 3 &&
            gen == 12,
        "update: %s", err);
  wf_el_encode_update(c, WEFT_ERR_SHUTDOWN, 0, 2);
  CHECK(wf_el_decode_update(c, &status, &upd, &gen, err, sizeof err) == WEFT_OK && status == WEFT_ERR_SHUTDOWN,
        "update refusal: %s", err);
  wf_el_encode_update(c, 0, 4, 12);
  CHECK(wf_el_decode_update(c, &status, &upd, &gen, err, sizeof err) == WEFT_ERR_PROTOCOL, "update bit 4 accepted");
  wf_el_encode_update(c, 1, 0, 12);
  CHECK(wf_el_decode_update(c, &status, &upd, &gen, err, sizeof err) == WEFT_ERR_PROTOCOL, "update status 1 accepted");
  wf_el_encode_check(c, 1, 1);
  CHECK(wf_el_decode_update(c, &status, &upd, &gen, err, sizeof err) == WEFT_ERR_PROTOCOL, "a CHECK taken for UPDATE");
}

/* ---- the generation's secret */
typedef struct acc_arg {
  int fd;
  wf_auth_params p;
  weft_status st;
} acc_arg;

static void *acceptor(void *x) {
  acc_arg *a = x;
  uint32_t peer;
  char err[256];
  a->st = wf_auth_accept(a->fd, &a->p, wf_deadline_after(5), &peer, err, sizeof err);
  close(a->fd); /* as the rendezvous does: a refused peer sees the connection close */
  return NULL;
}

static void test_gen_secret(void) {
  const char *secret = "s3cret";
  uint8_t g1[32], g2[32], want[32];
  CHECK(wf_el_gen_secret((const uint8_t *)secret, strlen(secret), 1, g1) == WEFT_OK, "gen 1");
  CHECK(wf_el_gen_secret((const uint8_t *)secret, strlen(secret), 2, g2) == WEFT_OK, "gen 2");
  uint8_t msg[23 + 8];
  memcpy(msg, "weft-elastic-generation", 23);
  for (int i = 0; i < 8; i++) msg[23 + i] = (uint8_t)(i == 0 ? 1 : 0); /* u64 1, little-endian */
  unsigned len = 0;
  HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, sizeof msg, want, &len);
  CHECK(len == 32 && !memcmp(g1, want, 32), "generation 1's secret differs from HMAC-SHA256(secret, label|1)");
  CHECK(memcmp(g1, g2, 32) != 0, "generations 1 and 2 have the same secret");

  /* a rank of generation 1 dialing a world of generation 2: refused */
  for (int same = 0; same < 2; same++) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    acc_arg a = {sv[0], {g2, 32, "job", 0, 3}, WEFT_OK};
    pthread_t th;
    pthread_create(&th, NULL, acceptor, &a);
    wf_auth_params c = {same ? g2 : g1, 32, "job", 1, 3};
    char err[256];
    weft_status st = wf_auth_connect(sv[1], &c, 0, wf_deadline_after(5), err, sizeof err);
    close(sv[1]);
    pthread_join(th, NULL);
    if (same) CHECK(st == WEFT_OK && a.st == WEFT_OK, "same generation refused: %s", err);
    else CHECK(st == WEFT_ERR_AUTH && a.st == WEFT_ERR_AUTH, "another generation's rank got in (%d, %d)", st, a.st);
  }
}

/* ---- a driver serving one question */
typedef struct drv {
  int lfd;
  wf_auth_params ap;
  wf_el_place answer;          /* what to answer (rank 0: its bind hint) */
  weft_status st;              /* how the connection ended */
  char port_addr[WF_EL_ADDR_MAX];
  uint32_t id;
  uint32_t update;             /* a CHECK's answer */
  uint64_t check_gen;          /* the generation a CHECK named */
  char err[512];
} drv;

static void *serve(void *x) {
  drv *d = x;
  int64_t deadline = wf_deadline_after(10);
  struct pollfd pf = {d->lfd, POLLIN, 0};
  d->st = WEFT_ERR_TIMEOUT;
  if (poll(&pf, 1, 10000) != 1) return NULL;
  int fd;
  struct sockaddr_in peer;
  if (wf_sock_accept(d->lfd, &fd, &peer, d->err, sizeof d->err) != WEFT_OK) return NULL;
  wf_el_conn c;
  if ((d->st = wf_el_conn_init(&c, fd, "test", &d->ap, 5, d->err, sizeof d->err)) != WEFT_OK) return NULL;
  while (wf_now_ns() < deadline) {
    pf = (struct pollfd){c.fd, c.events, 0};
    poll(&pf, 1, 100);
    weft_status st = wf_el_conn_step(&c, d->err, sizeof d->err);
    if (st == WEFT_IN_PROGRESS) continue;
    if (st != WEFT_OK) {
      d->st = st;
      break;
    }
    if (c.phase == WF_EL_C_CHECK) {
      d->id = c.id;
      d->check_gen = c.last_gen;
      d->st = wf_el_conn_update(&c, 0, d->update, 7, d->err, sizeof d->err);
      break;
    }
    if (c.phase == WF_EL_C_HELD) {
      d->id = c.id;
      if ((st = wf_el_conn_answer(&c, &d->answer, 5, d->err, sizeof d->err)) != WEFT_OK || c.phase == WF_EL_C_DONE) {
        d->st = st;
        break;
      }
    } else if (c.phase == WF_EL_C_DONE) {
      snprintf(d->port_addr, sizeof d->port_addr, "%s", c.port_addr);
      d->st = WEFT_OK;
      break;
    }
  }
  wf_el_conn_close(&c);
  return NULL;
}

static weft_status ask(drv *d, const char *driver, const char *secret, uint32_t id, wf_el_place *pl, int *lfd) {
  pthread_t th;
  pthread_create(&th, NULL, serve, d);
  wf_el_join_cfg jc = {.driver = driver, .id = id, .secret = (const uint8_t *)secret, .secret_len = strlen(secret),
                       .job_id = "job", .timeout_seconds = 5, .handshake_timeout = 2};
  weft_status st = wf_el_join(&jc, pl, lfd);
  pthread_join(th, NULL);
  return st;
}

static void test_join(void) {
  const char *secret = "driver-secret";
  char job[WF_EL_JOB_MAX], err[256], driver[WF_ADDR_STR_MAX];
  wf_el_job_id("job", job, sizeof job);
  struct sockaddr_in a, bound;
  wf_sock_parse_addr("127.0.0.1", 0, &a, err, sizeof err);
  drv d = {.ap = {(const uint8_t *)secret, strlen(secret), job, WF_EL_DRIVER, WF_EL_IDS}};
  CHECK(wf_sock_listen(&a, &d.lfd, &bound, err, sizeof err) == WEFT_OK, "listen: %s", err);
  wf_sock_addr_str(&bound, driver, sizeof driver);

  /* rank 0 of 2: told where to bind, reports its listener */
  d.answer = (wf_el_place){.generation = 4, .rank = 0, .size = 2};
  snprintf(d.answer.addr, sizeof d.answer.addr, "127.0.0.1:0");
  wf_el_place pl;
  int lfd = -1;
  weft_status st = ask(&d, driver, secret, 3, &pl, &lfd);
  CHECK(st == WEFT_OK && d.st == WEFT_OK && d.id == 3, "rank 0's question: %s / driver: %s", weft_last_error(),
        d.err);
  CHECK(pl.rank == 0 && pl.size == 2 && pl.generation == 4 && lfd >= 0, "rank 0's place");
  CHECK(!strcmp(d.port_addr, pl.addr) && strcmp(pl.addr, "127.0.0.1:0") != 0,
        "the driver got '%s', rank 0 listens on '%s'", d.port_addr, pl.addr);
  struct sockaddr_in la;
  socklen_t ll = sizeof la;
  char mine[WF_ADDR_STR_MAX] = "";
  if (lfd >= 0 && getsockname(lfd, (struct sockaddr *)&la, &ll) == 0) wf_sock_addr_str(&la, mine, sizeof mine);
  CHECK(!strcmp(mine, d.port_addr), "reported %s, the listener is %s", d.port_addr, mine);
  if (lfd >= 0) close(lfd);

  /* rank 1 gets rank 0's address */
  d.answer = (wf_el_place){.generation = 4, .rank = 1, .size = 2};
  snprintf(d.answer.addr, sizeof d.answer.addr, "%s", mine);
  st = ask(&d, driver, secret, 5, &pl, &lfd);
  CHECK(st == WEFT_OK && pl.rank == 1 && !strcmp(pl.addr, mine) && lfd < 0, "rank 1's place: %s", weft_last_error());

  /* a refusal */
  d.answer = (wf_el_place){.status = WEFT_ERR_SHUTDOWN};
  snprintf(d.answer.msg, sizeof d.answer.msg, "the job is ending");
  st = ask(&d, driver, secret, 1, &pl, &lfd);
  CHECK(st == WEFT_ERR_SHUTDOWN && strstr(weft_last_error(), "the job is ending"), "refusal: %d %s", st,
        weft_last_error());

  /* host updates: the driver's bits reach the worker; it named its generation */
  for (uint32_t u = 0; u <= WF_EL_UPD_ADDED; u += WF_EL_UPD_ADDED) {
    pthread_t th;
    d.update = u;
    d.check_gen = 0;
    pthread_create(&th, NULL, serve, &d);
    wf_el_join_cfg jc = {.driver = driver, .id = 6, .secret = (const uint8_t *)secret, .secret_len = strlen(secret),
                         .job_id = "job", .timeout_seconds = 5, .handshake_timeout = 2};
    uint32_t got = 99;
    st = wf_el_check(&jc, 5, &got);
    pthread_join(th, NULL);
    CHECK(st == WEFT_OK && d.st == WEFT_OK && got == u && d.id == 6 && d.check_gen == 5,
          "check (update %u): got %u, worker %s, driver %s (id %u, generation %llu)", u, got, weft_last_error(), d.err,
          d.id, (unsigned long long)d.check_gen);
  }

  /* a wrong secret: refused in the handshake, never held */
  st = ask(&d, driver, "not-the-secret", 1, &pl, &lfd);
  CHECK(st == WEFT_ERR_AUTH && d.st == WEFT_ERR_AUTH, "wrong secret: worker %d (%s), driver %d (%s)", st,
        weft_last_error(), d.st, d.err);
  close(d.lfd);
}

int main(void) {
  test_codec();
  test_gen_secret();
  test_join();
  return unit_result("test_elastic");
}

/* mpi_boot.c - MPI initialisation, the job's duplicated communicator and
 * the rendezvous hand-off by broadcast (see mpi_boot.h). Compiled only when
 * weft is built with MPI (WEFT_HAVE_MPI). */
#include "bootstrap/mpi_boot.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/sockutil.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

#define SECRET_BYTES 32      /* generated secret */
#define PACKET_SECRET 4096   /* the largest secret weft accepts (auth.c) */
#define HOST_MAX 256

struct wf_mpi_comm {
  MPI_Comm comm;
  int provided; /* MPI's thread level */
};

/* Whether weft called MPI_Init_thread (then it finalises at exit), and how
 * many duplicated communicators are alive (MPI_Finalize must wait for them).
 * The mutex orders weft_init calls of several threads around MPI_Init. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_ours;
static atomic_int g_live; /* relaxed: only read at exit, after the last free */

static void finalize_at_exit(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  if (atomic_load_explicit(&g_live, memory_order_relaxed) > 0) {
    WF_WARN(WF_SUB_INIT, "the process exits with a weft world still using MPI: MPI_Finalize skipped (call "
                         "weft_finalize before exiting)");
    return;
  }
  MPI_Finalize();
}

static void mpi_msg(int rc, char *out, size_t outlen) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
  snprintf(out, outlen, "%s", s);
}

int wf_mpi_built(void) { return 1; }

MPI_Comm wf_mpi_comm_handle(const wf_mpi_comm *c) { return c->comm; }

int wf_mpi_comm_multiple(const wf_mpi_comm *c) { return c && c->provided >= MPI_THREAD_MULTIPLE; }

/* Tests r until it completes or the deadline passes (then r stays active:
 * a collective request cannot be cancelled; the job is failing anyway). */
static weft_status wait_req(MPI_Request *r, int64_t deadline, double timeout, const char *what) {
  struct timespec nap = {0, 100 * 1000};
  for (int spins = 0;; spins++) {
    int flag = 0, rc = MPI_Test(r, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char m[MPI_MAX_ERROR_STRING];
      mpi_msg(rc, m, sizeof m);
      return wf_err(WEFT_ERR_SYSTEM, "weft_init: %s over MPI failed: %s", what, m);
    }
    if (flag) return WEFT_OK;
    if (wf_now_ns() > deadline)
      return wf_err(WEFT_ERR_TIMEOUT,
                    "weft_init: %s over MPI did not complete within %g s (WEFT_INIT_TIMEOUT_SECONDS): does every "
                    "rank of the MPI job call weft_init?", what, timeout);
    if (spins > 64) nanosleep(&nap, NULL);
  }
}

weft_status wf_mpi_comm_open(double timeout, wf_mpi_comm **out, int *rank, int *size) {
  *out = NULL;
  *rank = *size = -1;
  if (!(timeout > 0)) timeout = 60;
  int64_t deadline = wf_deadline_after(timeout);
  char m[MPI_MAX_ERROR_STRING];
  int inited = 0, fin = 0, provided = MPI_THREAD_SINGLE, rc;
  pthread_mutex_lock(&g_mu);
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (fin) {
    pthread_mutex_unlock(&g_mu);
    return wf_err(WEFT_ERR_MISUSE, "weft_init: started by an MPI launcher, but MPI was already finalized in this "
                                   "process (call weft_init before MPI_Finalize, or set WEFT_ADDR)");
  }
  if (!inited) {
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      pthread_mutex_unlock(&g_mu);
      mpi_msg(rc, m, sizeof m);
      return wf_err(WEFT_ERR_SYSTEM, "weft_init: MPI_Init_thread failed: %s", m);
    }
    if (!g_ours) atexit(finalize_at_exit);
    g_ours = 1;
    WF_INFO(WF_SUB_INIT, "MPI initialised by weft (thread level %d)", provided);
  } else {
    MPI_Query_thread(&provided);
    int is_main = 0;
    MPI_Is_thread_main(&is_main);
    if (provided < MPI_THREAD_SERIALIZED && !is_main) {
      pthread_mutex_unlock(&g_mu);
      return wf_err(WEFT_ERR_MISUSE,
                    "weft_init: the application initialised MPI with thread level %s, which allows MPI calls from "
                    "its main thread only, and weft_init was called from another thread (initialise MPI with "
                    "MPI_THREAD_MULTIPLE, or call weft_init from the main thread)",
                    provided == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE" : "MPI_THREAD_FUNNELED");
    }
  }
  pthread_mutex_unlock(&g_mu);

  wf_mpi_comm *c = calloc(1, sizeof *c);
  if (!c) return wf_err(WEFT_ERR_NO_MEMORY, "weft_init: out of memory");
  c->provided = provided;
  MPI_Request req;
  rc = MPI_Comm_idup(MPI_COMM_WORLD, &c->comm, &req);
  if (rc != MPI_SUCCESS) {
    free(c);
    mpi_msg(rc, m, sizeof m);
    return wf_err(WEFT_ERR_SYSTEM, "weft_init: MPI_Comm_idup(MPI_COMM_WORLD) failed: %s", m);
  }
  weft_status st = wait_req(&req, deadline, timeout, "duplicating MPI_COMM_WORLD");
  if (st != WEFT_OK) {
    free(c); /* the duplicate never completed: nothing to free in MPI */
    return st;
  }
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->comm, rank);
  MPI_Comm_size(c->comm, size);
  atomic_fetch_add_explicit(&g_live, 1, memory_order_relaxed);
  *out = c;
  return WEFT_OK;
}

void wf_mpi_comm_close(wf_mpi_comm *c) {
  if (!c) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Comm_free(&c->comm);
  atomic_fetch_sub_explicit(&g_live, 1, memory_order_relaxed);
  free(c);
}

/* This host's first non-loopback IPv4 address of an interface that is up. */
static int first_ipv4(struct in_addr *out) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs)) return 0;
  int found = 0;
  for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
        (i->ifa_flags & IFF_LOOPBACK))
      continue;
    *out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
    found = 1;
  }
  freeifaddrs(ifs);
  return found;
}

/* What rank 0 broadcasts. */
typedef struct packet {
  int32_t status;                /* WEFT_OK or why rank 0 could not listen */
  uint32_t slen;
  char addr[64];
  char err[384];
  uint8_t secret[PACKET_SECRET];
} packet;

/* Rank 0: opens the listener and fills p (status set on failure). */
static void rank0_listen(packet *p, int all_local, const char *bind_addr, const uint8_t *secret, size_t slen,
                         int *lfd) {
  char err[256];
  struct sockaddr_in la, bound;
  memset(&la, 0, sizeof la);
  la.sin_family = AF_INET;
  if (bind_addr && *bind_addr) {
    weft_status st = wf_sock_parse_addr(bind_addr, 0, &la, err, sizeof err);
    if (st != WEFT_OK) {
      p->status = st;
      snprintf(p->err, sizeof p->err, "rank 0: bad bind address (WEFT_BIND_ADDR): %s", err);
      return;
    }
  } else {
    la.sin_addr.s_addr = htonl(all_local ? INADDR_LOOPBACK : INADDR_ANY);
  }
  weft_status st = wf_sock_listen(&la, lfd, &bound, err, sizeof err);
  if (st != WEFT_OK) {
    p->status = st;
    snprintf(p->err, sizeof p->err, "rank 0: cannot open the rendezvous listener: %s", err);
    return;
  }
  if (bound.sin_addr.s_addr == htonl(INADDR_ANY) && !first_ipv4(&bound.sin_addr)) {
    close(*lfd);
    *lfd = -1;
    p->status = WEFT_ERR_SYSTEM;
    snprintf(p->err, sizeof p->err, "rank 0: ranks run on several hosts, but this host has no non-loopback IPv4 "
                                    "address to announce (set WEFT_BIND_ADDR)");
    return;
  }
  wf_sock_addr_str(&bound, p->addr, sizeof p->addr);
  if (slen) {
    memcpy(p->secret, secret, slen);
    p->slen = (uint32_t)slen;
  } else if (RAND_bytes(p->secret, SECRET_BYTES) == 1) {
    p->slen = SECRET_BYTES;
  } else {
    close(*lfd);
    *lfd = -1;
    p->status = WEFT_ERR_SYSTEM;
    snprintf(p->err, sizeof p->err, "rank 0: RAND_bytes could not generate a job secret");
    return;
  }
  p->status = WEFT_OK;
}

weft_status wf_mpi_boot_exchange(wf_mpi_comm *c, const char *bind_addr, const char *host, double timeout,
                                 char *addr, size_t addrlen, uint8_t *secret, size_t cap, size_t *slen, int *lfd) {
  *lfd = -1;
  if (!c || *slen > cap || *slen > PACKET_SECRET)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_init: bad MPI bootstrap arguments");
  if (!(timeout > 0)) timeout = 60;
  int64_t deadline = wf_deadline_after(timeout);
  int rank = 0;
  MPI_Comm_rank(c->comm, &rank);
  char m[MPI_MAX_ERROR_STRING];
  MPI_Request req;
  int rc;
  /* 1. does every rank run on rank 0's host? then loopback will do */
  char me[HOST_MAX] = {0}, host0[HOST_MAX] = {0};
  if (host && *host) snprintf(me, sizeof me, "%s", host);
  else if (gethostname(me, sizeof me - 1)) snprintf(me, sizeof me, "localhost");
  memcpy(host0, me, sizeof host0);
  if ((rc = MPI_Ibcast(host0, HOST_MAX, MPI_CHAR, 0, c->comm, &req)) != MPI_SUCCESS) goto mpi_fail;
  WF_CHECK(wait_req(&req, deadline, timeout, "broadcasting rank 0's host name"));
  int same = !strncmp(me, host0, HOST_MAX);
  if ((rc = MPI_Iallreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_LAND, c->comm, &req)) != MPI_SUCCESS) goto mpi_fail;
  WF_CHECK(wait_req(&req, deadline, timeout, "comparing host names"));
  /* 2. rank 0 listens and chooses the secret; everybody learns both */
  packet *p = calloc(1, sizeof *p);
  if (!p) return wf_err(WEFT_ERR_NO_MEMORY, "weft_init: out of memory");
  if (rank == 0) rank0_listen(p, same, bind_addr, secret, *slen, lfd);
  weft_status st = WEFT_OK;
  if ((rc = MPI_Ibcast(p, (int)sizeof *p, MPI_BYTE, 0, c->comm, &req)) != MPI_SUCCESS) {
    mpi_msg(rc, m, sizeof m);
    st = wf_err(WEFT_ERR_SYSTEM, "weft_init: MPI_Ibcast failed: %s", m);
  } else {
    st = wait_req(&req, deadline, timeout, "broadcasting the rendezvous address");
  }
  if (st == WEFT_OK && p->status != WEFT_OK)
    st = wf_err(p->status < 0 ? (weft_status)p->status : WEFT_ERR_INTERNAL, "weft_init: %s", p->err);
  if (st == WEFT_OK && (p->slen > cap || p->slen > PACKET_SECRET))
    st = wf_err(WEFT_ERR_PROTOCOL, "weft_init: rank 0 sent a %u-byte secret (at most %zu)", p->slen, cap);
  if (st == WEFT_OK) {
    snprintf(addr, addrlen, "%s", p->addr);
    memcpy(secret, p->secret, p->slen);
    *slen = p->slen;
    WF_INFO(WF_SUB_BOOT, "rank %d: MPI bootstrap: rank 0's rendezvous at %s%s", rank, p->addr,
            same ? " (all ranks on one host)" : "");
  } else if (*lfd >= 0) {
    close(*lfd);
    *lfd = -1;
  }
  OPENSSL_cleanse(p, sizeof *p); /* the secret */
  free(p);
  return st;
mpi_fail:
  mpi_msg(rc, m, sizeof m);
  return wf_err(WEFT_ERR_SYSTEM, "weft_init: MPI bootstrap collective failed: %s", m);
}

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

/* Requests that timed out are still active in MPI, and so are the buffers
 * they point to: their heap blocks go on this list and are never freed (the
 * list keeps them reachable; MPI may complete them at any time). With any
 * on it, the exit handler skips MPI_Finalize, which would wait for them. */
typedef struct abandoned {
  struct abandoned *next;
} abandoned;
static abandoned *g_abandoned; /* under g_mu */

struct wf_mpi_comm {
  abandoned link; /* first: abandon() may take the block (a timed-out duplication) */
  MPI_Comm comm;
  int provided; /* MPI's thread level */
};

/* Whether weft called MPI_Init_thread (then it finalises at exit), and how
 * many duplicated communicators are alive (MPI_Finalize must wait for them).
 * The mutex orders weft_init calls of several threads around MPI_Init. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_ours;
static atomic_int g_peer_lost; /* a world lost a rank: MPI_Finalize would wait for it */
static atomic_int g_live; /* relaxed: only read at exit, after the last free */

static int any_abandoned(void);

static void finalize_at_exit(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  if (any_abandoned()) {
    WF_WARN(WF_SUB_INIT, "the process exits with a weft MPI bootstrap collective that timed out still pending: "
                         "MPI_Finalize skipped (it would wait for the ranks that never joined)");
    return;
  }
  if (atomic_load(&g_peer_lost)) {
    /* Open MPI's finalize waits (a PMIx fence) for every process of the job,
     * the dead one included: seen hanging until mpirun's timeout */
    WF_WARN(WF_SUB_INIT, "a rank of this job failed: MPI_Finalize skipped (it would wait for that rank)");
    return;
  }
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

/* Leaks the block a heads for good. */
static void abandon(abandoned *a) {
  pthread_mutex_lock(&g_mu);
  a->next = g_abandoned;
  g_abandoned = a;
  pthread_mutex_unlock(&g_mu);
}

void wf_mpi_peer_lost(void) { atomic_store(&g_peer_lost, 1); }

static int any_abandoned(void) {
  pthread_mutex_lock(&g_mu);
  int any = g_abandoned != NULL;
  pthread_mutex_unlock(&g_mu);
  return any;
}

/* This process's rank in MPI_COMM_WORLD and its host, for error messages. */
static void whoami(int *rank, char *host, size_t hostlen) {
  *rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  if (gethostname(host, hostlen - 1)) snprintf(host, hostlen, "?");
  host[hostlen - 1] = '\0';
}

/* Tests r until it completes or the deadline passes. Then r stays active
 * (a collective request cannot be cancelled): the caller must abandon() the
 * block holding r and its buffers instead of freeing it. */
static weft_status wait_req(MPI_Request *r, int64_t deadline, double timeout, const char *what) {
  struct timespec nap = {0, 100 * 1000};
  for (int spins = 0;; spins++) {
    int flag = 0, rc = MPI_Test(r, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char m[MPI_MAX_ERROR_STRING], host[HOST_MAX];
      int rank;
      mpi_msg(rc, m, sizeof m);
      whoami(&rank, host, sizeof host);
      return wf_err(WEFT_ERR_SYSTEM, "weft_init: %s over MPI failed on MPI rank %d (host %s): %s", what, rank,
                    host, m);
    }
    if (flag) return WEFT_OK;
    if (wf_now_ns() > deadline) {
      char host[HOST_MAX];
      int rank;
      whoami(&rank, host, sizeof host);
      return wf_err(WEFT_ERR_TIMEOUT,
                    "weft_init: MPI rank %d (host %s): %s over MPI did not complete within %g s "
                    "(WEFT_INIT_TIMEOUT_SECONDS): does every rank of the MPI job call weft_init?",
                    rank, host, what, timeout);
    }
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
    abandon(&c->link); /* the request may still be active: MPI writes c->comm if it ever completes */
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

/* One exchange's MPI request and every buffer its collectives use, in one
 * heap block: abandoned as a whole (never freed) when a collective times
 * out, since MPI may still write into it. */
typedef struct xchg {
  abandoned link; /* first: see abandon() */
  MPI_Request req;
  char host0[HOST_MAX];
  int same;
  packet p;
} xchg;

/* Runs the collective just started on x->req (rc: its start's code) to
 * completion. On failure x may be in MPI's hands: the caller abandons it. */
static weft_status run_coll(xchg *x, int rc, int64_t deadline, double timeout, const char *what) {
  if (rc != MPI_SUCCESS) {
    char m[MPI_MAX_ERROR_STRING], host[HOST_MAX];
    int rank;
    mpi_msg(rc, m, sizeof m);
    whoami(&rank, host, sizeof host);
    x->req = MPI_REQUEST_NULL; /* never started */
    return wf_err(WEFT_ERR_SYSTEM, "weft_init: MPI rank %d (host %s): starting %s over MPI failed: %s", rank, host,
                  what, m);
  }
  return wait_req(&x->req, deadline, timeout, what);
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
  xchg *x = calloc(1, sizeof *x);
  if (!x) return wf_err(WEFT_ERR_NO_MEMORY, "weft_init: out of memory");
  packet *p = &x->p;
  /* 1. does every rank run on rank 0's host? then loopback will do */
  char me[HOST_MAX] = {0};
  if (host && *host) snprintf(me, sizeof me, "%s", host);
  else if (gethostname(me, sizeof me - 1)) snprintf(me, sizeof me, "localhost");
  memcpy(x->host0, me, sizeof x->host0);
  weft_status st = run_coll(x, MPI_Ibcast(x->host0, HOST_MAX, MPI_CHAR, 0, c->comm, &x->req), deadline, timeout,
                            "broadcasting rank 0's host name");
  if (st == WEFT_OK) {
    x->same = !strncmp(me, x->host0, HOST_MAX);
    st = run_coll(x, MPI_Iallreduce(MPI_IN_PLACE, &x->same, 1, MPI_INT, MPI_LAND, c->comm, &x->req), deadline,
                  timeout, "comparing host names");
  }
  /* 2. rank 0 listens and chooses the secret; everybody learns both */
  if (st == WEFT_OK) {
    if (rank == 0) rank0_listen(p, x->same, bind_addr, secret, *slen, lfd);
    st = run_coll(x, MPI_Ibcast(p, (int)sizeof *p, MPI_BYTE, 0, c->comm, &x->req), deadline, timeout,
                  "broadcasting the rendezvous address");
  }
  int in_mpi = st != WEFT_OK && x->req != MPI_REQUEST_NULL; /* a collective may still use x */
  if (st == WEFT_OK && p->status != WEFT_OK)
    st = wf_err(p->status < 0 ? (weft_status)p->status : WEFT_ERR_INTERNAL, "weft_init: %s", p->err);
  if (st == WEFT_OK && (p->slen > cap || p->slen > PACKET_SECRET))
    st = wf_err(WEFT_ERR_PROTOCOL, "weft_init: rank 0 sent a %u-byte secret (at most %zu)", p->slen, cap);
  if (st == WEFT_OK) {
    snprintf(addr, addrlen, "%s", p->addr);
    memcpy(secret, p->secret, p->slen);
    *slen = p->slen;
    WF_INFO(WF_SUB_BOOT, "rank %d: MPI bootstrap: rank 0's rendezvous at %s%s", rank, p->addr,
            x->same ? " (all ranks on one host)" : "");
  } else if (*lfd >= 0) {
    close(*lfd);
    *lfd = -1;
  }
  if (in_mpi) {
    abandon(&x->link); /* MPI may still read or write it: never freed (the secret stays in it) */
  } else {
    OPENSSL_cleanse(p, sizeof *p); /* the secret */
    free(x);
  }
  return st;
}

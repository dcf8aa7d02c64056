/* world.c - weft_init / weft_finalize, the configuration (explicit fields,
 * then the environment, then defaults), ranks and sizes, abort. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/launcher_link.h"
#include "bootstrap/auth.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/mpi_boot.h"
#include "bootstrap/iface.h"
#include "engine/engine.h"
#include "util/err.h"
#include "util/log.h"
#include "util/params.h"
#include "util/settings.h"

/* weftrun hands rank 0 its rendezvous listener (WEFT_LISTEN_FD), so the port
 * it chose cannot be taken in between. Used once (a later weft_init binds
 * again), and only if it really is a listening TCP socket on WEFT_ADDR's port. */
static void inherited_listener(const char *addr, int *have, int *fd) {
  const char *v = getenv("WEFT_LISTEN_FD");
  if (!v || !*v) return;
  char *end;
  long n = strtol(v, &end, 10);
  unsetenv("WEFT_LISTEN_FD");
  const char *colon = addr ? strrchr(addr, ':') : NULL;
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  int acc = 0;
  socklen_t alen = sizeof acc;
  if (*end || n < 3 || n > 65535 || !colon ||
      getsockopt((int)n, SOL_SOCKET, SO_ACCEPTCONN, &acc, &alen) != 0 || !acc ||
      getsockname((int)n, (struct sockaddr *)&sa, &len) != 0 || sa.sin_family != AF_INET ||
      ntohs(sa.sin_port) != (unsigned)atoi(colon + 1)) {
    WF_WARN(WF_SUB_INIT, "WEFT_LISTEN_FD=%s is not a listener on %s: ignored", v, addr ? addr : "(no WEFT_ADDR)");
    return;
  }
  int fl = fcntl((int)n, F_GETFL);
  if (fl < 0 || fcntl((int)n, F_SETFL, fl | O_NONBLOCK) != 0 || fcntl((int)n, F_SETFD, FD_CLOEXEC) != 0) return;
  *have = 1;
  *fd = (int)n;
}

/* First set integer among env names (NULL-terminated list), or dflt. */
static int env_int(const char *const *names, int dflt, const char **which) {
  for (; *names; names++) {
    const char *v = getenv(*names);
    if (v && *v) {
      char *end;
      errno = 0;
      long x = strtol(v, &end, 10);
      if (!errno && *end == '\0' && x >= -1 && x <= WF_MAX_RANKS) {
        if (which) *which = *names;
        return (int)x;
      }
      WF_WARN(WF_SUB_INIT, "ignoring %s=%s: not a rank number", *names, v);
    }
  }
  return dflt;
}

static const char *const RANK_VARS[] = {"WEFT_RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                         "PMI_RANK", NULL};
static const char *const SIZE_VARS[] = {"WEFT_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
static const char *const LRANK_VARS[] = {"WEFT_LOCAL_RANK", "HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "MPI_LOCALRANKID", NULL};
static const char *const LSIZE_VARS[] = {"WEFT_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "MPI_LOCALNRANKS", NULL};
static const char *const CRANK_VARS[] = {"WEFT_CROSS_RANK", "HOROVOD_CROSS_RANK", NULL};
static const char *const CSIZE_VARS[] = {"WEFT_CROSS_SIZE", "HOROVOD_CROSS_SIZE", NULL};

static void world_free(weft_world *w) {
  if (!w) return;
  wf_engine_stop(w);
  wf_mux_release_mpi(&w->mux); /* [mpi] after the engine: the transport, then the communicator */
  wf_tl_destroy(&w->tl);
  /* every request is complete now; those whose caller has not seen them
   * yet give their names up, so that their handles no longer need the world */
  pthread_mutex_lock(&w->mu);
  for (size_t i = 0; i < w->inflight.cap; i++) {
    wf_strmap_entry *e = &w->inflight.slots[i];
    if (e->key && !e->tomb) atomic_store_explicit(&((weft_request *)e->val)->name_held, 0, memory_order_relaxed);
  }
  pthread_mutex_unlock(&w->mu);
  wf_strmap_free(&w->inflight);
  wf_strmap_free(&w->group_counts);
  free(w->peers);
  free(w->world_group.ranks);
  pthread_cond_destroy(&w->done_cv);
  pthread_mutex_destroy(&w->mu);
  w->magic = 0;
  free(w);
}

/* WEFT_ALGO_<COLL> names an algorithm of its collective (or is empty). */
static weft_status check_algorithms(const wf_settings *s, char *err, size_t errlen) {
  for (int c = 0; c < WF_SET_ALGO_COLLS; c++) {
    if (!s->algo[c][0] || wf_algo_find((wf_coll)c, s->algo[c])) continue;
    char names[256] = "";
    wf_algo_names((wf_coll)c, names, sizeof names);
    static const char *const upper[WF_SET_ALGO_COLLS] = {"ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL",
                                                          "REDUCESCATTER"};
    snprintf(err, errlen, "WEFT_ALGO_%s=%s: %s has no algorithm of that name (it has: %s)", upper[c], s->algo[c],
             wf_coll_name((wf_coll)c), names);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  return WEFT_OK;
}

weft_status weft_init(const weft_config *cfg, weft_world **out) {
  wf_err_clear();
  wf_launcher_link_init(); /* WEFT_LAUNCHER_FD/TAG: read and unset once, before weft starts threads */
  if (!out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_init: out is NULL");
  *out = NULL;
  if (cfg && cfg->struct_size < offsetof(weft_config, timeout_seconds) + sizeof(double))
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_init: cfg->struct_size %zu is too small (use WEFT_CONFIG_INIT)",
                  cfg->struct_size);
  /* every setting, once: the engine, algorithms and transports read these */
  wf_settings set;
  char serr[512];
  weft_status sst = wf_settings_resolve(&set, serr, sizeof serr);
  if (sst == WEFT_OK) sst = check_algorithms(&set, serr, sizeof serr);
  if (sst != WEFT_OK) return wf_err(sst, "weft_init: %s", serr);
  const char *rank_src = NULL, *size_src = NULL;
  int rank = cfg && cfg->rank >= 0 ? cfg->rank : env_int(RANK_VARS, -1, &rank_src);
  int size = cfg && cfg->size >= 0 ? cfg->size : env_int(SIZE_VARS, -1, &size_src);
  /* [mpi] started by mpirun/srun without WEFT_ADDR: MPI gives rank, size,
   * and (below) rank 0's rendezvous address and the job secret */
  wf_mpi_comm *mpic = NULL;
  const char *mpivar = *(cfg && cfg->addr ? cfg->addr : wf_param_str("WEFT_ADDR")) ? NULL : wf_mpi_launcher_var();
  /* a launcher's single process (srun -n1, mpirun -np 1) is a world of one
   * without MPI; a build without MPI keeps that and names what is missing */
  if (mpivar && size != 1 && !wf_mpi_built())
    return wf_err(WEFT_ERR_NOT_SUPPORTED,
                  "weft_init: started by an MPI launcher (%s is set) as rank %d of %d%s, but weft was built "
                  "without MPI, so it cannot bootstrap from MPI: set WEFT_ADDR (and WEFT_RANK/WEFT_SIZE), launch "
                  "with weftrun, or rebuild weft with -DWEFT_WITH_MPI=ON",
                  mpivar, rank, size, size < 0 ? " (size unknown)" : "");
  if (mpivar && size != 1) {
    int mrank = -1, msize = -1;
    weft_status mst = wf_mpi_comm_open(set.init_timeout_seconds, &mpic, &mrank, &msize);
    if (mst != WEFT_OK) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", wf_err_msg());
      return wf_err(mst, "weft_init: started by an MPI launcher (%s is set) without WEFT_ADDR: %s", mpivar, msg);
    }
    if ((rank >= 0 && rank != mrank) || (size >= 0 && size != msize)) {
      wf_mpi_comm_close(mpic);
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_init: rank %d of %d (from %s, %s) disagrees with MPI's rank %d "
                    "of %d", rank, size, rank_src ? rank_src : "config", size_src ? size_src : "config", mrank, msize);
    }
    rank = mrank, size = msize;
  }
  if (rank < 0 && size < 0) rank = 0, size = 1; /* not launched: a world of one */
  if ((size < 1 || size > WF_MAX_RANKS || rank < 0 || rank >= size) && mpic) wf_mpi_comm_close(mpic);
  if (size < 1 || size > WF_MAX_RANKS)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_init: world size %d (from %s) is out of range 1..%d", size,
                  size_src ? size_src : "config", WF_MAX_RANKS);
  if (rank < 0 || rank >= size)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_init: rank %d (from %s) is out of range for world size %d", rank,
                  rank_src ? rank_src : "config", size);
  const char *addr = cfg && cfg->addr ? cfg->addr : wf_param_str("WEFT_ADDR");
  if (size > 1 && !*addr && !mpic)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT,
                  "weft_init: WEFT_ADDR is not set: launch with weftrun, or set WEFT_ADDR=host:port of rank 0's "
                  "rendezvous on every rank");

  weft_world *w = calloc(1, sizeof *w);
  if (!w) {
    wf_mpi_comm_close(mpic);
    return wf_err(WEFT_ERR_NO_MEMORY, "weft_init: out of memory");
  }
  w->mux.mpi_comm = mpic; /* [mpi] freed by world_free */
  w->magic = WF_WORLD_MAGIC;
  w->rank = rank;
  w->size = size;
  w->epfd = w->evfd = -1;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->done_cv, NULL);
  wf_strmap_init(&w->inflight);
  wf_strmap_init(&w->group_counts);
  wf_tl_init(&w->tl, rank);
  w->set = set;
  w->timeout_seconds = cfg && cfg->timeout_seconds > 0 ? cfg->timeout_seconds : set.timeout_seconds;
  if (!(w->timeout_seconds > 0)) w->timeout_seconds = 300;
  w->hb_interval = set.heartbeat_interval;
  w->hb_timeout = set.heartbeat_timeout;
  if (!(w->hb_interval > 0)) w->hb_interval = 0.5;
  if (!(w->hb_timeout > w->hb_interval)) w->hb_timeout = 10 * w->hb_interval;
  wf_log_set_rank(rank);

  weft_group *g = &w->world_group;
  g->magic = WF_GROUP_MAGIC;
  g->id = 0;
  g->world = w;
  g->size = size;
  g->rank = rank;
  g->ranks = malloc(sizeof(int) * (size_t)size);
  int *fds = NULL;
  weft_status st = WEFT_OK;
  wf_boot_result br;
  memset(&br, 0, sizeof br);
  if (!g->ranks) {
    st = wf_err(WEFT_ERR_NO_MEMORY, "weft_init: out of memory");
    goto fail;
  }
  for (int i = 0; i < size; i++) g->ranks[i] = i;

  if (size > 1) {
    /* launcher: WEFT_IFACE names the interface to bind and advertise, unless WEFT_BIND_ADDR is set */
    char iface_addr[64] = "";
    const char *bind_addr = wf_param_str("WEFT_BIND_ADDR");
    if (!*bind_addr && *wf_param_str("WEFT_IFACE")) {
      if ((st = wf_iface_ipv4(wf_param_str("WEFT_IFACE"), iface_addr, sizeof iface_addr)) != WEFT_OK) goto fail;
      bind_addr = iface_addr;
    }
    uint8_t secret[4096];
    size_t slen = 0;
    if (cfg && cfg->secret) {
      slen = strlen(cfg->secret);
      if (slen > sizeof secret) slen = sizeof secret;
      memcpy(secret, cfg->secret, slen);
    } else if ((st = wf_auth_load_secret(secret, &slen)) != WEFT_OK) {
      goto fail;
    }
    wf_boot_cfg bc = {
        .rank = rank,
        .size = size,
        .addr = addr,
        .secret = secret,
        .secret_len = slen,
        .job_id = wf_param_str("WEFT_JOB_ID"),
        .hostname = *wf_param_str("WEFT_HOSTNAME") ? wf_param_str("WEFT_HOSTNAME") : NULL,
        .bind_addr = bind_addr, /* WEFT_BIND_ADDR or WEFT_IFACE's address (above) */
        .timeout_seconds = set.init_timeout_seconds,
        .handshake_timeout = set.handshake_timeout,
        .settings = &w->set,
    };
    if (!mpic && rank == 0) inherited_listener(bc.addr, &bc.have_listen_fd, &bc.listen_fd);
    char mpi_addr[64];
    if (mpic) { /* [mpi] rank 0 listens on a free port; address and secret come by broadcast */
      int lfd = -1;
      st = wf_mpi_boot_exchange(mpic, bc.bind_addr, bc.hostname, bc.timeout_seconds, mpi_addr, sizeof mpi_addr,
                                secret, sizeof secret, &slen, &lfd);
      if (st != WEFT_OK) {
        memset(secret, 0, sizeof secret);
        goto fail;
      }
      bc.addr = mpi_addr;
      bc.secret_len = slen;
      bc.have_listen_fd = lfd >= 0;
      bc.listen_fd = lfd;
    }
    st = wf_bootstrap(&bc, &br);
    memset(secret, 0, sizeof secret);
    if (st != WEFT_OK) goto fail;
    w->peers = br.peers;
    br.peers = NULL;
    fds = br.fds;
    br.fds = NULL;
    w->local_rank = br.local_rank;
    w->local_size = br.local_size;
    w->cross_rank = br.cross_rank;
    w->cross_size = br.cross_size;
  } else {
    w->peers = calloc(1, sizeof *w->peers);
    fds = malloc(sizeof(int));
    if (!w->peers || !fds) {
      st = wf_err(WEFT_ERR_NO_MEMORY, "weft_init: out of memory");
      goto fail;
    }
    fds[0] = -1;
    if (gethostname(w->peers[0].host, sizeof w->peers[0].host - 1)) snprintf(w->peers[0].host, 16, "localhost");
    w->local_rank = w->cross_rank = 0;
    w->local_size = w->cross_size = 1;
  }
  /* A launcher's explicit placement wins over what the rendezvous computed. */
  w->local_rank = env_int(LRANK_VARS, w->local_rank, NULL);
  w->local_size = env_int(LSIZE_VARS, w->local_size, NULL);
  w->cross_rank = env_int(CRANK_VARS, w->cross_rank, NULL);
  w->cross_size = env_int(CSIZE_VARS, w->cross_size, NULL);
  const char *tl_path = set.timeline;
  if (!strcmp(tl_path, "DYNAMIC")) tl_path = ""; /* Horovod's: started later, through the API */
  if (*tl_path && (rank == 0 || strstr(tl_path, "%r")) &&
      (st = wf_tl_start(&w->tl, tl_path, (int)set.timeline_mark_cycles)) != WEFT_OK)
    goto fail;
  if ((st = wf_engine_start(w, fds)) != WEFT_OK) goto fail;
  free(fds);
  WF_INFO(WF_SUB_INIT, "rank %d of %d up (local %d/%d, cross %d/%d)", rank, size, w->local_rank, w->local_size,
          w->cross_rank, w->cross_size);
  *out = w;
  return WEFT_OK;
fail:
  if (fds) {
    for (int i = 0; i < size; i++)
      if (fds[i] >= 0) close(fds[i]);
    free(fds);
  }
  wf_boot_result_free(&br);
  {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", wf_err_msg());
    world_free(w);
    wf_err(st, "%s", msg);
  }
  return st;
}

static int valid(const weft_world *w) { return w && w->magic == WF_WORLD_MAGIC; }

weft_status weft_finalize(weft_world *w) {
  if (!valid(w)) return wf_err(WEFT_ERR_MISUSE, "weft_finalize: not a live world handle");
  world_free(w);
  return WEFT_OK;
}

int weft_rank(const weft_world *w) { return valid(w) ? w->rank : -1; }
int weft_size(const weft_world *w) { return valid(w) ? w->size : -1; }
int weft_local_rank(const weft_world *w) { return valid(w) ? w->local_rank : -1; }
int weft_local_size(const weft_world *w) { return valid(w) ? w->local_size : -1; }
int weft_cross_rank(const weft_world *w) { return valid(w) ? w->cross_rank : -1; }
int weft_cross_size(const weft_world *w) { return valid(w) ? w->cross_size : -1; }

weft_group *weft_world_group(weft_world *w) { return valid(w) ? &w->world_group : NULL; }

weft_status weft_abort(weft_world *w, const char *reason) {
  if (!valid(w)) return wf_err(WEFT_ERR_MISUSE, "weft_abort: not a live world handle");
  if (!reason) reason = "(no reason given)";
  pthread_mutex_lock(&w->mu);
  int first = w->fail_status == WEFT_OK;
  if (first) {
    w->fail_status = WEFT_ERR_ABORTED;
    snprintf(w->fail_msg, sizeof w->fail_msg, "aborted: %s", reason);
    snprintf(w->abort_reason, sizeof w->abort_reason, "%s", reason);
    w->abort_send = 1;
  }
  pthread_mutex_unlock(&w->mu);
  wf_engine_wake(w);
  return WEFT_OK;
}

weft_status weft_timeline_start(weft_world *w, const char *path, int mark_cycles) {
  if (!valid(w)) return wf_err(WEFT_ERR_MISUSE, "weft_timeline_start: not a live world handle");
  if (!path) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_timeline_start: path is NULL");
  if (w->rank != 0 && !strstr(path, "%r")) return WEFT_OK; /* one file: rank 0's */
  return wf_tl_start(&w->tl, path, mark_cycles);
}

weft_status weft_timeline_stop(weft_world *w) {
  if (!valid(w)) return wf_err(WEFT_ERR_MISUSE, "weft_timeline_stop: not a live world handle");
  return wf_tl_stop(&w->tl);
}

weft_status weft_async_error(weft_world *w) {
  if (!valid(w)) return wf_err(WEFT_ERR_MISUSE, "weft_async_error: not a live world handle");
  pthread_mutex_lock(&w->mu);
  weft_status st = w->fail_status;
  if (st != WEFT_OK) wf_err(st, "%s", w->fail_msg);
  pthread_mutex_unlock(&w->mu);
  return st;
}

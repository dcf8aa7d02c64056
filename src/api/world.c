/* world.c - weft_init / weft_finalize: the configuration (explicit fields,
 * then the environment, then defaults), the rendezvous (bootstrap/), then
 * the engine (engine/world.c); ranks and sizes, abort. */
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
#include "bootstrap/elastic.h"
#include "bootstrap/mpi_boot.h"
#include "bootstrap/iface.h"
#include "engine/submit.h"
#include "util/err.h"
#include "util/log.h"
#include "util/params.h"
#include "util/settings.h"

/* weftrun hands rank 0 its rendezvous listener (WEFT_LISTEN_FD), so the port
 * it chose cannot be taken in between. It is taken once per process (and the
 * variable unset) and kept open for every later weft_init: the rank command
 * may be a wrapper (`sh -c 'prog | tee log'`) whose other processes hold the
 * same listening socket, so binding the port again would fail while they
 * live; each world's rendezvous gets a duplicate. Used only if it really is
 * a listening TCP socket on WEFT_ADDR's port. */
static pthread_mutex_t g_listen_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_listen_fd = -1;

static int listens_on(int fd, const char *addr) {
  const char *colon = addr ? strrchr(addr, ':') : NULL;
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  int acc = 0;
  socklen_t alen = sizeof acc;
  return colon && getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &alen) == 0 && acc &&
         getsockname(fd, (struct sockaddr *)&sa, &len) == 0 && sa.sin_family == AF_INET &&
         ntohs(sa.sin_port) == (unsigned)atoi(colon + 1);
}

static void inherited_listener(const char *addr, int *have, int *fd) {
  pthread_mutex_lock(&g_listen_mu);
  const char *v = getenv("WEFT_LISTEN_FD");
  if (g_listen_fd < 0 && v && *v) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 3 || n > 65535 || !listens_on((int)n, addr)) {
      WF_WARN(WF_SUB_INIT, "WEFT_LISTEN_FD=%s is not a listener on %s: ignored", v, addr ? addr : "(no WEFT_ADDR)");
    } else {
      int fl = fcntl((int)n, F_GETFL);
      if (fl >= 0 && fcntl((int)n, F_SETFL, fl | O_NONBLOCK) == 0 && fcntl((int)n, F_SETFD, FD_CLOEXEC) == 0)
        g_listen_fd = (int)n;
    }
    unsetenv("WEFT_LISTEN_FD");
  }
  if (g_listen_fd >= 0 && listens_on(g_listen_fd, addr)) {
    int d = fcntl(g_listen_fd, F_DUPFD_CLOEXEC, 3); /* the rendezvous closes its copy */
    if (d >= 0) {
      *have = 1;
      *fd = d;
    }
  }
  pthread_mutex_unlock(&g_listen_mu);
}

/* Elastic mode (WEFT_ELASTIC_ADDR, set by weftrun): the last generation this
 * process was placed in, told to the driver with the next question. */
static pthread_mutex_t g_el_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_el_last_gen;

typedef struct el_init {
  int on;
  wf_el_place place;
  int listen_fd;              /* rank 0 of a world of several: its rendezvous listener */
  uint8_t secret[32];         /* the generation's secret (elastic.h) */
} el_init;

/* Asks weftrun for this process's place in the next world (elastic.h). */
static weft_status elastic_place(const weft_config *cfg, const wf_settings *set, el_init *el) {
  if (cfg && (cfg->rank >= 0 || cfg->size >= 0))
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_init: cfg->rank/size (%d/%d) given in elastic mode "
                  "(WEFT_ELASTIC_ADDR is set): the driver (weftrun) decides every world's ranks", cfg->rank, cfg->size);
  const char *idv = wf_param_str("WEFT_ELASTIC_ID"), *tv = wf_param_str("WEFT_ELASTIC_TIMEOUT");
  char *end;
  errno = 0;
  unsigned long id = strtoul(idv, &end, 10);
  if (!*idv || *end || errno || id >= WF_EL_DRIVER)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_init: WEFT_ELASTIC_ID='%s' is not a worker id (0..%u); it is "
                  "set by weftrun in elastic mode", idv, WF_EL_DRIVER - 1);
  double wait = *tv ? strtod(tv, &end) : 0;
  if (*tv && (*end || !(wait >= 0) || wait > 86400))
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_init: WEFT_ELASTIC_TIMEOUT='%s' is not a number of seconds", tv);
  uint8_t secret[4096];
  size_t slen = 0;
  weft_status st = wf_auth_load_secret(secret, &slen);
  if (st != WEFT_OK) return st;
  char iface_addr[64] = "";
  const char *bind_addr = wf_param_str("WEFT_BIND_ADDR");
  if (!*bind_addr && *wf_param_str("WEFT_IFACE")) {
    if ((st = wf_iface_ipv4(wf_param_str("WEFT_IFACE"), iface_addr, sizeof iface_addr)) != WEFT_OK) return st;
    bind_addr = iface_addr;
  }
  pthread_mutex_lock(&g_el_mu);
  uint64_t last = g_el_last_gen;
  pthread_mutex_unlock(&g_el_mu);
  wf_el_join_cfg jc = {
      .driver = wf_param_str("WEFT_ELASTIC_ADDR"),
      .id = (uint32_t)id,
      .last_gen = last,
      .secret = secret,
      .secret_len = slen,
      .job_id = wf_param_str("WEFT_JOB_ID"),
      .bind_addr = bind_addr,
      .timeout_seconds = wait + set->init_timeout_seconds,
      .handshake_timeout = set->handshake_timeout,
  };
  st = wf_el_join(&jc, &el->place, &el->listen_fd);
  if (st == WEFT_OK) st = wf_el_gen_secret(secret, slen, el->place.generation, el->secret);
  memset(secret, 0, sizeof secret);
  if (st != WEFT_OK && el->listen_fd >= 0) close(el->listen_fd), el->listen_fd = -1;
  if (st != WEFT_OK) return st;
  el->on = 1;
  WF_INFO(WF_SUB_INIT, "elastic worker %lu: generation %llu, rank %u of %u (rank 0 at %s)", id,
          (unsigned long long)el->place.generation, el->place.rank, el->place.size, el->place.addr);
  return WEFT_OK;
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

/* WEFT_ALGO_<COLL> names an algorithm of its collective (or is empty);
 * else WEFT_ERR_NOT_FOUND, naming the ones it has. */
static weft_status check_algorithms(const wf_settings *s, char *err, size_t errlen) {
  for (int c = 0; c < WF_SET_ALGO_COLLS; c++) {
    if (!s->algo[c][0] || wf_algo_find((wf_coll)c, s->algo[c])) continue;
    char names[256] = "";
    wf_algo_names((wf_coll)c, names, sizeof names);
    static const char *const upper[WF_SET_ALGO_COLLS] = {"ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL",
                                                          "REDUCESCATTER"};
    snprintf(err, errlen, "WEFT_ALGO_%s=%s: %s has no algorithm of that name (it has: %s)", upper[c], s->algo[c],
             wf_coll_name((wf_coll)c), names);
    return WEFT_ERR_NOT_FOUND;
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
  el_init el = {.listen_fd = -1};
  if (*wf_param_str("WEFT_ELASTIC_ADDR") && !(cfg && cfg->addr) && (sst = elastic_place(cfg, &set, &el)) != WEFT_OK)
    return sst;
  int rank = el.on ? (int)el.place.rank : cfg && cfg->rank >= 0 ? cfg->rank : env_int(RANK_VARS, -1, &rank_src);
  int size = el.on ? (int)el.place.size : cfg && cfg->size >= 0 ? cfg->size : env_int(SIZE_VARS, -1, &size_src);
  if (el.on) rank_src = size_src = "the elastic driver";
  /* [mpi] started by mpirun/srun without WEFT_ADDR: MPI gives rank, size,
   * and (below) rank 0's rendezvous address and the job secret */
  wf_mpi_comm *mpic = NULL;
  const char *mpivar =
      el.on || *(cfg && cfg->addr ? cfg->addr : wf_param_str("WEFT_ADDR")) ? NULL : wf_mpi_launcher_var();
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
  const char *addr = el.on ? el.place.addr : cfg && cfg->addr ? cfg->addr : wf_param_str("WEFT_ADDR");
  if (size > 1 && !*addr && !mpic)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT,
                  "weft_init: WEFT_ADDR is not set: launch with weftrun, or set WEFT_ADDR=host:port of rank 0's "
                  "rendezvous on every rank");

  weft_world *w = wf_world_new(rank, size, &set, cfg && cfg->timeout_seconds > 0 ? cfg->timeout_seconds : 0, mpic);
  if (!w) {
    if (el.listen_fd >= 0) close(el.listen_fd);
    return wf_err(WEFT_ERR_NO_MEMORY, "weft_init: out of memory"); /* mpic closed */
  }
  w->generation = el.on ? el.place.generation : 0;
  int *fds = NULL;
  weft_status st = WEFT_OK;
  wf_boot_result br;
  memset(&br, 0, sizeof br);

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
    if (el.on) { /* the generation's secret: no process of another generation joins this world */
      memcpy(secret, el.secret, sizeof el.secret);
      slen = sizeof el.secret;
    } else if (cfg && cfg->secret) {
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
        .incarnation = w->incarnation,
        .device_kinds = wf_submit_device_kinds(),
    };
    if (el.on) { /* rank 0's listener, opened and reported to the driver in elastic_place (wf_bootstrap owns it) */
      bc.have_listen_fd = el.listen_fd >= 0;
      bc.listen_fd = el.listen_fd;
      el.listen_fd = -1;
    } else if (!mpic && rank == 0) {
      inherited_listener(bc.addr, &bc.have_listen_fd, &bc.listen_fd);
    }
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
    const char *hn = wf_param_str("WEFT_HOSTNAME"); /* as the rendezvous would report it */
    if (*hn) snprintf(w->peers[0].host, sizeof w->peers[0].host, "%s", hn);
    else if (gethostname(w->peers[0].host, sizeof w->peers[0].host - 1)) snprintf(w->peers[0].host, 16, "localhost");
    w->peers[0].pid = (uint32_t)getpid();
    w->peers[0].local_size = w->peers[0].cross_size = 1;
    w->peers[0].device_kinds = wf_submit_device_kinds();
    w->local_rank = w->cross_rank = 0;
    w->local_size = w->cross_size = 1;
  }
  /* A launcher's explicit placement wins over what the rendezvous computed
   * (not in elastic mode: the world changes, the environment does not). */
  if (!el.on) {
    w->local_rank = env_int(LRANK_VARS, w->local_rank, NULL);
    w->local_size = env_int(LSIZE_VARS, w->local_size, NULL);
    w->cross_rank = env_int(CRANK_VARS, w->cross_rank, NULL);
    w->cross_size = env_int(CSIZE_VARS, w->cross_size, NULL);
  }
  const char *tl_path = set.timeline;
  if (!strcmp(tl_path, "DYNAMIC")) tl_path = ""; /* Horovod's: started later, through the API */
  if (*tl_path && (rank == 0 || strstr(tl_path, "%r")) &&
      (st = wf_tl_start(&w->tl, tl_path, (int)set.timeline_mark_cycles)) != WEFT_OK)
    goto fail;
  if ((st = wf_engine_start(w, fds)) != WEFT_OK) goto fail;
  free(fds);
  memset(el.secret, 0, sizeof el.secret);
  if (el.on) {
    pthread_mutex_lock(&g_el_mu);
    if (el.place.generation > g_el_last_gen) g_el_last_gen = el.place.generation;
    pthread_mutex_unlock(&g_el_mu);
  }
  WF_INFO(WF_SUB_INIT, "rank %d of %d up (local %d/%d, cross %d/%d)", rank, size, w->local_rank, w->local_size,
          w->cross_rank, w->cross_size);
  *out = w;
  return WEFT_OK;
fail:
  memset(el.secret, 0, sizeof el.secret);
  if (el.listen_fd >= 0) close(el.listen_fd);
  if (el.on) { /* a failed rendezvous is a generation spent too: ask for a later one */
    pthread_mutex_lock(&g_el_mu);
    if (el.place.generation > g_el_last_gen) g_el_last_gen = el.place.generation;
    pthread_mutex_unlock(&g_el_mu);
  }
  if (fds) {
    for (int i = 0; i < size; i++)
      if (fds[i] >= 0) close(fds[i]);
    free(fds);
  }
  wf_boot_result_free(&br);
  {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", wf_err_msg());
    wf_world_free(w);
    wf_err(st, "%s", msg);
  }
  return st;
}

static int valid(const weft_world *w) { return w && w->magic == WF_WORLD_MAGIC; }

weft_status weft_finalize(weft_world *w) {
  if (!valid(w)) return wf_err(WEFT_ERR_MISUSE, "weft_finalize: not a live world handle");
  wf_world_free(w);
  return WEFT_OK;
}

int weft_rank(const weft_world *w) { return valid(w) ? w->rank : -1; }
uint64_t weft_generation(const weft_world *w) { return valid(w) ? w->generation : 0; }
int weft_size(const weft_world *w) { return valid(w) ? w->size : -1; }
int weft_local_rank(const weft_world *w) { return valid(w) ? w->local_rank : -1; }
int weft_local_size(const weft_world *w) { return valid(w) ? w->local_size : -1; }
int weft_cross_rank(const weft_world *w) { return valid(w) ? w->cross_rank : -1; }
int weft_cross_size(const weft_world *w) { return valid(w) ? w->cross_size : -1; }

weft_group *weft_world_group(weft_world *w) { return valid(w) ? &w->world_group : NULL; }

weft_status weft_abort(weft_world *w, const char *reason) {
  if (!valid(w)) return wf_err(WEFT_ERR_MISUSE, "weft_abort: not a live world handle");
  wf_world_abort(w, reason ? reason : "(no reason given)");
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

/* A process's incarnation: the random number its weft_init drew (HELLO and
 * the peer table carry it); where a rendezvous did not carry one (0), a
 * hash of its host and pid (FNV-1a, 64 bits; never 0). */
static uint64_t incarnation_of(const wf_peer_info *p) {
  if (p->incarnation) return p->incarnation;
  uint64_t h = 1469598103934665603ull;
  for (const char *s = p->host; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  for (int i = 0; i < 4; i++) h = (h ^ (uint8_t)(p->pid >> (8 * i))) * 1099511628211ull;
  return h ? h : 1;
}

weft_status weft_peer_locality(const weft_world *w, int rank, weft_locality *out) {
  wf_err_clear();
  if (!valid(w)) return wf_err(WEFT_ERR_MISUSE, "weft_peer_locality: not a live world handle");
  if (!out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_peer_locality: out is NULL");
  size_t have = out->struct_size;
  if (have < offsetof(weft_locality, host) + sizeof out->host)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT,
                  "weft_peer_locality: out->struct_size %zu is too small (use WEFT_LOCALITY_INIT)", have);
  if (rank < 0 || rank >= w->size)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_peer_locality: rank %d is not in the world (size %d)", rank,
                  w->size);
  /* the peer table is fixed before weft_init returns and never changes */
  const wf_peer_info *p = &w->peers[rank];
  weft_locality l = WEFT_LOCALITY_INIT;
  snprintf(l.host, sizeof l.host, "%s", p->host);
  l.host_index = p->cross_rank;
  l.host_count = p->cross_size;
  l.local_rank = p->local_rank;
  l.local_size = p->local_size;
  l.pid = (int64_t)p->pid;
  l.incarnation = incarnation_of(p);
  l.device_kinds = p->device_kinds;
  if (have > sizeof l) have = sizeof l;
  memcpy((char *)out + sizeof out->struct_size, (char *)&l + sizeof l.struct_size, have - sizeof l.struct_size);
  return WEFT_OK;
}

weft_status weft_async_error(weft_world *w) {
  if (!valid(w)) return wf_err(WEFT_ERR_MISUSE, "weft_async_error: not a live world handle");
  return wf_world_status(w);
}

/* weft_info.c - weft-info: what this build of weft is (version, optional
 * features) and every environment parameter it reads, from the one table in
 * src/util/params.h (ucc_info style), with the value currently set, if any.
 *
 * usage: weft-info [--params] [--json] | --topology
 *
 * --topology joins the job (weftrun -np N weft-info --topology; outside a
 * job, a world of one) and rank 0 prints the hosts with their ranks, the
 * transports within and across hosts, whether cross-memory attach works,
 * the per-host shared memory region by region with its formula in the
 * number of local ranks,
 * the algorithm the registry picks for each collective of the world group
 * at a few sizes (schedules are built, never run), and each collective's
 * selection table (src/algo/select.c) with the world's thresholds. The
 * other ranks print nothing.
 *
 * Each parameter's scope says who must agree on it: "agreed" settings must
 * be equal on every rank (weft_init refuses a job whose ranks differ),
 * "rank" settings may differ, "launch" ones are set per process by the
 * launcher.
 *
 * Optional features are compile-time: the build defines WEFT_HAVE_MPI when
 * it compiles MPI in, so this tool reports what was really built rather
 * than what the source tree contains. Shared memory is always built.
 * "algorithms" lists each collective's algorithms by name, as
 * weft_algorithm_name() numbers them: the names WEFT_ALGO_<COLL> takes. The
 * CUDA runtime is found at run time (src/device/dev_cuda.c, dlopen): the
 * "CUDA runtime" line and the JSON "cuda_runtime" object say whether it
 * loaded here, its versions and devices, or why not; the "cuda" feature
 * (device tensors in the engine) is not built yet. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/numa_plan.h"
#include "algo/shm_stage.h"
#include "device/device.h"
#include "engine/topo_info.h"
#include "host/mailbox.h"
#include "host/numa.h"
#include "host/segment.h"
#include "negotiate/board.h"
#include "util/params.h"
#include "weft.h"

#if defined(WEFT_WITH_MPI) || defined(WEFT_HAVE_MPI) /* WEFT_HAVE_MPI: CMake, -DWEFT_WITH_MPI */
#define HAVE_MPI 1
#else
#define HAVE_MPI 0
#endif
#ifdef WEFT_WITH_CUDA
#define HAVE_CUDA 1
#else
#define HAVE_CUDA 0
#endif
/* Transports in the build, in the order weft probes them: shared memory
 * (always built) between ranks of one host, then TCP. */
static const char *const k_transports[] = {
    "shm",
    "tcp",
#if HAVE_MPI
    "mpi",
#endif
};
#define N_TRANSPORTS (sizeof k_transports / sizeof k_transports[0])

static const char *type_name(wf_param_type t) {
  switch (t) {
  case WF_PARAM_INT: return "int";
  case WF_PARAM_DOUBLE: return "double";
  case WF_PARAM_STRING: return "string";
  case WF_PARAM_BOOL: return "bool";
  case WF_PARAM_PATH: return "path";
  }
  return "?";
}

/* The value the process would read (name first, then alias, as params.c
 * does); *from names the variable it came from. NULL if neither is set. */
static const char *current(const wf_param *p, const char **from) {
  const char *v = getenv(p->name);
  *from = p->name;
  if ((!v || !*v) && p->alias) {
    v = getenv(p->alias);
    *from = p->alias;
  }
  if (!v || !*v) return NULL;
  /* never echo the job secret: weft-info may run inside a job, into a log */
  size_t n = strlen(p->name);
  if (n >= 7 && !strcmp(p->name + n - 7, "_SECRET")) return "(hidden)";
  return v;
}

static void json_str(const char *s) {
  if (!s) {
    fputs("null", stdout);
    return;
  }
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

/* The CUDA runtime as this process finds it: *info filled and NULL, or
 * the reason it cannot be used. */
static const char *cuda_probe(wf_device_info *info) {
  static char why[1024];
  wf_device *d = NULL;
  memset(info, 0, sizeof *info);
  if (wf_device_get(WF_DEVICE_CUDA, &d) != WEFT_OK || d->ops->info(d, info) != WEFT_OK) {
    snprintf(why, sizeof why, "%s", weft_last_error());
    return why;
  }
  return NULL;
}

static void print_version(const char *label, int v) {
  printf("%s%d.%d", label, v / 1000, v % 1000 / 10);
}

/* Each collective's algorithms, from the public table (weft_algorithm_*). */
static void print_algorithms_json(void) {
  printf("\n  \"algorithms\": {");
  for (int c = 0; c < WEFT_COLLECTIVE_COUNT_; c++) {
    printf("%s\n    ", c ? "," : "");
    json_str(weft_collective_name((weft_collective)c));
    printf(": [");
    const char *n;
    for (int i = 0; (n = weft_algorithm_name((weft_collective)c, i)); i++) {
      if (i) printf(", ");
      json_str(n);
    }
    printf("]");
  }
  printf("\n  },");
}

static void print_algorithms_text(void) {
  printf("algorithms (WEFT_ALGO_<COLL>=name forces one; \"board\", the one-host fast path, is never forced):\n");
  for (int c = 0; c < WEFT_COLLECTIVE_COUNT_; c++) {
    printf("  %-14s", weft_collective_name((weft_collective)c));
    const char *n;
    for (int i = 0; (n = weft_algorithm_name((weft_collective)c, i)); i++) printf("%s%s", i ? ", " : "", n);
    printf("\n");
  }
  printf("\n");
}

static void print_json(int params_only) {
  printf("{");
  if (!params_only) {
    printf("\n  \"version\": ");
    json_str(weft_version());
    printf(",\n  \"features\": {\"mpi\": %s, \"cuda\": %s, \"transports\": [", HAVE_MPI ? "true" : "false",
           HAVE_CUDA ? "true" : "false");
    for (size_t i = 0; i < N_TRANSPORTS; i++) {
      if (i) printf(", ");
      json_str(k_transports[i]);
    }
    printf("]},");
    wf_device_info ci;
    const char *why = cuda_probe(&ci);
    printf("\n  \"cuda_runtime\": {\"available\": %s", why ? "false" : "true");
    if (why) {
      printf(", \"error\": ");
      json_str(why);
    } else {
      printf(", \"library\": ");
      json_str(ci.library);
      print_version(", \"runtime_version\": \"", ci.runtime_version);
      print_version("\", \"driver_version\": \"", ci.driver_version);
      printf("\", \"device_count\": %d, \"devices\": [", ci.count);
      for (int i = 0; i < ci.count && i < WF_DEVICE_INFO_NAMES; i++) {
        if (i) printf(", ");
        json_str(ci.names[i]);
      }
      printf("]");
    }
    printf("},");
    print_algorithms_json();
  }
  printf("\n  \"params\": [");
  const char *sep = "";
  for (const wf_param *p = wf_params_table(); p->name; p++) {
    const char *from, *v = current(p, &from);
    printf("%s\n    {\"name\": ", sep);
    json_str(p->name);
    printf(", \"alias\": ");
    json_str(p->alias);
    printf(", \"type\": ");
    json_str(type_name(p->type));
    printf(", \"default\": ");
    json_str(p->def);
    printf(", \"value\": ");
    json_str(v);
    printf(", \"set_by\": ");
    json_str(v ? from : NULL);
    printf(", \"scope\": ");
    json_str(wf_param_scope_name(p->scope));
    printf(", \"accepts\": ");
    json_str(p->accept);
    printf(", \"doc\": ");
    json_str(p->doc);
    printf("}");
    sep = ",";
  }
  printf("\n  ]\n}\n");
}

static void print_text(int params_only) {
  if (!params_only) {
    printf("weft %s\n", weft_version());
    printf("build features:\n");
    printf("  MPI:        %s\n", HAVE_MPI ? "yes" : "no");
    printf("  CUDA:       %s\n", HAVE_CUDA ? "yes" : "no");
    printf("  transports:");
    for (size_t i = 0; i < N_TRANSPORTS; i++) printf(" %s", k_transports[i]);
    wf_device_info ci;
    const char *why = cuda_probe(&ci);
    printf("\n  CUDA runtime: ");
    if (why) {
      printf("not available: %s", why);
    } else {
      printf("loaded %s", ci.library);
      print_version(", runtime ", ci.runtime_version);
      print_version(", driver ", ci.driver_version);
      printf(", %d device%s", ci.count, ci.count == 1 ? "" : "s");
      for (int i = 0; i < ci.count && i < WF_DEVICE_INFO_NAMES; i++) printf("%s%s", i ? ", " : ": ", ci.names[i]);
    }
    printf("\n\n");
    print_algorithms_text();
  }
  printf("parameters (environment; the alias is read when the name is unset). Scope: agreed = must be equal on\n"
         "every rank (weft_init refuses a job whose ranks differ), rank = may differ, launch = set by the launcher:\n");
  for (const wf_param *p = wf_params_table(); p->name; p++) {
    const char *from, *v = current(p, &from);
    printf("  %s", p->name);
    if (p->alias) printf(" (alias %s)", p->alias);
    printf("  %s, %s, default \"%s\"", wf_param_scope_name(p->scope), type_name(p->type), p->def);
    if (v) printf(", set to \"%s\"%s%s", v, from == p->alias ? " by " : "", from == p->alias ? from : "");
    printf("\n      %s\n", p->doc);
  }
}


/* ------------------------------------------------------------ --topology */
/* The registry's choice for coll over total bytes of float32 on the world
 * group (the world's settings: forced names from WEFT_ALGO_<COLL> and the
 * thresholds, as the executor reads them); "-" if nothing can run it. mem
 * holds total bytes (never touched). */
static const char *pick(const wf_topo_view *v, wf_coll coll, size_t total, char *mem, size_t *arr) {
  int p = v->size, r = v->rank;
  size_t n = total / 4, *counts = arr, *displs = arr + p;
  wf_coll_args a = {.coll = coll, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM, .elem_size = 4, .rank = r,
                    .size = p, .buf = mem, .count = n, .root = 0, .in = mem, .out = mem,
                    .segment_bytes = (size_t)v->set.ring_segment_bytes, .topo = &v->topo, .set = &v->set};
  const char *forced = (int)coll < WF_SET_ALGO_COLLS ? v->set.algo[coll] : "";
  /* total split evenly over the ranks (allgather, reducescatter), and each
   * rank's share over the ranks again (alltoall) */
  size_t share = n / (size_t)p, pair = share / (size_t)p, off = 0;
  for (int i = 0; i < p; i++) {
    counts[i] = coll == WF_COLL_ALLTOALL ? pair : share;
    displs[i] = off;
    off += counts[i];
  }
  if (coll == WF_COLL_ALLGATHER) a.in = mem + displs[r] * 4;
  if (coll == WF_COLL_REDUCESCATTER) a.out = mem;
  a.counts = a.send_counts = a.recv_counts = counts;
  a.displs = a.send_displs = a.recv_displs = displs;
  if (coll == WF_COLL_ALLTOALL) a.block_max = pair; /* as the engine passes it (exec.c) */
  wf_sched s;
  wf_sched_init(&s, a.dtype, a.op);
  const char *chosen = NULL;
  weft_status st = wf_algo_build(&a, forced, &s, &chosen);
  wf_sched_free(&s);
  return st == WEFT_OK && chosen ? chosen : "-";
}

/* The selection table of coll, one row a line. */
static void print_table(wf_coll coll, const char *name, const wf_settings *set) {
  char text[2048];
  wf_select_describe(coll, set, text, sizeof text);
  printf("  %s\n", name);
  for (char *row = text, *next; row; row = next) {
    next = strstr(row, "; ");
    if (next) {
      *next = '\0';
      next += 2;
    }
    printf("    %s\n", row);
  }
}

static void print_bytes(const char *what, size_t bytes, const char *detail) {
  int mib = bytes >= (4u << 20);
  printf("  %-16s %10.1f %s%s%s\n", what, mib ? (double)bytes / (1 << 20) : (double)bytes / 1024, mib ? "MiB" : "KiB",
         *detail ? "  " : "", detail);
}

/* The host segment of rank 0's host (host/segment.h), region by region, and
 * the formula it follows in the number of local ranks n. */
static void print_memory(const wf_topo_view *v) {
  int n = v->seg_nlocal;
  const wf_shm_layout *l = &v->seg;
  if (!n) {
    printf("per-host shared memory: none (%s)\n",
           v->nhosts == v->size ? "one rank per host" : "the transport within a host is not shm");
    return;
  }
  char d[256];
  printf("per-host shared memory (rank 0's host, n = %d local ranks):\n", n);
  print_bytes("header", l->rings_off, "geometry, the local ranks");
  snprintf(d, sizeof d, "n x %zu KiB: per receiver a doorbell and n-1 rings of %zu x %zu B (at most %zu x %zu B)",
           l->inbox_bytes >> 10, l->nslots, l->slot_bytes, l->cfg_nslots, l->cfg_slot_bytes);
  print_bytes("ring inboxes", l->inbox_bytes * (size_t)n, d);
  char bf[320];
  wf_board_formula(bf, sizeof bf);
  print_bytes("board", l->board_bytes, "one-host negotiation board:");
  printf("    %s\n", bf);
  snprintf(d, sizeof d, "n x %zu KiB (WEFT_SHM_STAGE_BYTES, at most 256 MiB together)", l->stage_bytes >> 10);
  print_bytes("stages", l->stage_bytes * (size_t)n, d);
  snprintf(d, sizeof d,
           "n x %u KiB: per receiver a bell and %u slots of %u B, %u per sender; remote calls: 2 bells and %u slots "
           "of %u B, %u per sender",
           WF_MBOX_BLOCK >> 10, WF_MBOX_INBOX, WF_MBOX_SLOT_BYTES, wf_mbox_pair_slots(n), WF_RMBOX_INBOX,
           WF_RMBOX_SLOT_BYTES, wf_rmbox_pair_slots(n));
  print_bytes("mailboxes", l->mbox_bytes, d);
  print_bytes("total", l->size, "");
  printf("  formula: %zu KiB + n x (%zu KiB ring inbox + %zu KiB stage + %u KiB mailbox inbox) + board;\n"
         "  the ring inboxes at most %zu MiB together (then smaller), a pair's ring the inbox / (n-1)\n",
         l->rings_off >> 10, l->inbox_bytes >> 10, l->stage_bytes >> 10, WF_MBOX_BLOCK >> 10,
         WF_SHM_RINGS_CAP >> 20);
}

/* Rank 0's host's NUMA layout (the segment's: detected or WEFT_NUMA_NODES),
 * its ranks grouped by node, and what the node-aware staged pattern does
 * with it (algo/numa_plan.h). */
static void print_numa(const wf_topo_view *v) {
  int n = v->seg_nlocal;
  if (!n) return;
  if (!v->seg_numa) {
    printf("NUMA layout (rank 0's host): none (one node, ranks not pinned to one node each, or WEFT_NUMA_NODES=off)\n");
    return;
  }
  int rank_of[WF_NUMA_PLAN_MAX * 16], order[WF_NUMA_PLAN_MAX * 16], h = v->host_of[0];
  if (n > WF_NUMA_PLAN_MAX * 16) return;
  for (int i = 0; i < v->size; i++)
    if (v->host_of[i] == h && v->local_rank[i] >= 0 && v->local_rank[i] < n) rank_of[v->local_rank[i]] = i;
  int groups = wf_numa_order(n, v->seg_numa, order);
  printf("NUMA layout (rank 0's host, %d group%s):", groups, groups == 1 ? "" : "s");
  for (int k = 0, prev = -2; k < n; k++) {
    int node = v->seg_numa[order[k]];
    if (node != prev && node < 0) printf("%s node unknown: ranks", k ? ";" : "");
    else if (node != prev) printf("%s node %d: ranks", k ? ";" : "", node);
    printf(" %d", rank_of[order[k]]);
    prev = node;
  }
  printf("\n  within-host order (ranks grouped by node):");
  for (int k = 0; k < n; k++) printf(" %d", rank_of[order[k]]);
  printf("\n");
  const wf_numa_plan *p = wf_stage_numa(v->topo.stage);
  if (!p) {
    printf("  node-aware staged pattern: off (%s)\n",
           !v->topo.stage ? "no staging: not every rank of the world is on this host, or WEFT_SHM_STAGE_BYTES=0"
                          : "one node, or some rank's node unknown");
    return;
  }
  printf("  node-aware staged pattern (numa; allreduce, broadcast, allgather: selection tables below):\n"
         "    allreduce folds in rank order, %s (nodes crossed per chunk, in 1/%d chunks: chain %d, flat %d)",
         p->chain ? "run by run" : "each slice by its own rank", n, wf_numa_cost_chain(p), wf_numa_cost_flat(p));
  if (p->chain) {
    printf("; runs:");
    for (int j = 0; j < p->nruns; j++) {
      printf(" [");
      for (int r = p->run_first[j]; r < p->run_first[j + 1]; r++) printf("%s%d", r > p->run_first[j] ? " " : "", r);
      printf("]");
    }
  }
  printf("\n    spread: one copy per node of each result slice, broadcast chunk or allgather piece, through one relay"
         " per node\n");
}

static int print_topology(void) {
  weft_world *w = NULL;
  weft_status st = weft_init(NULL, &w);
  if (st != WEFT_OK) {
    fprintf(stderr, "weft-info: weft_init: %s: %s\n", weft_status_string(st), weft_last_error());
    return 1;
  }
  int rc = 0;
  if (weft_rank(w) == 0) {
    wf_topo_view v;
    static const size_t sizes[] = {8, 64 << 10, 1 << 20, 64 << 20};
    static const char *const size_names[] = {"8 B", "64 KiB", "1 MiB", "64 MiB"};
    char *mem = malloc(sizes[3]); /* schedules point into it; never touched */
    size_t *arr = NULL;
    if ((st = wf_world_topo_view(w, &v)) != WEFT_OK) {
      fprintf(stderr, "weft-info: %s\n", weft_last_error());
      rc = 1;
    } else if (!mem || !(arr = malloc(sizeof(size_t) * 2 * (size_t)v.size))) {
      fprintf(stderr, "weft-info: out of memory\n");
      wf_topo_view_free(&v);
      rc = 1;
    } else {
      printf("weft %s topology: %d rank%s on %d host%s (rank 0's view)\n", weft_version(), v.size,
             v.size == 1 ? "" : "s", v.nhosts, v.nhosts == 1 ? "" : "s");
      for (int h = 0; h < v.nhosts; h++) {
        printf("  host %d %s: ranks", h, v.host_name[h]);
        for (int i = 0; i < v.size; i++)
          if (v.host_of[i] == h) printf(" %d", i);
        printf(" (local ranks");
        for (int i = 0; i < v.size; i++)
          if (v.host_of[i] == h) printf(" %d", v.local_rank[i]);
        printf(")\n");
      }
      int shared = v.nhosts < v.size; /* some host has two ranks */
      printf("transports: within a host %s, across hosts %s (WEFT_TRANSPORT=%s)\n",
             shared ? v.local_transport : "- (one rank per host)", v.nhosts > 1 ? v.cross_transport : "- (one host)",
             v.set.transport);
      printf("cross-memory attach (rank 0 to its host's ranks): %s\n", v.topo.cma ? "yes" : "no");
      print_memory(&v);
      print_numa(&v);
      printf("hierarchical algorithms: WEFT_HIERARCHICAL=%lld (-1: automatic, 0: never, 1: whenever on several hosts)\n",
             (long long)v.set.hierarchical);
      printf("algorithms chosen for the world group (float32; WEFT_ALGO_<COLL> applies):\n");
      printf("  %-14s", "collective");
      for (int k = 0; k < 4; k++) printf(" %10s", size_names[k]);
      printf("\n");
      static const wf_coll colls[] = {WF_COLL_ALLREDUCE, WF_COLL_ALLGATHER, WF_COLL_BROADCAST, WF_COLL_REDUCESCATTER,
                                      WF_COLL_ALLTOALL};
      static const char *const coll_names[] = {"allreduce", "allgather", "broadcast", "reducescatter", "alltoall"};
      for (int c = 0; c < 5; c++) {
        printf("  %-14s", coll_names[c]);
        for (int k = 0; k < 4; k++) printf(" %10s", pick(&v, colls[c], sizes[k], mem, arr));
        printf("\n");
      }
      printf("selection tables (after WEFT_ALGO_<COLL>: the first row that matches and whose algorithm can run\n"
             "the arguments; sizes are the buffer, allgather's output or reducescatter's input):\n");
      for (int c = 0; c < 5; c++) print_table(colls[c], coll_names[c], &v.set);
      wf_topo_view_free(&v);
    }
    free(arr);
    free(mem);
    if (fflush(stdout) != 0) rc = 1;
  }
  /* nobody leaves before rank 0 has printed */
  weft_request *req = NULL;
  st = weft_barrier(weft_world_group(w), "weft-info topology", NULL, &req);
  if (st == WEFT_OK) st = weft_wait(req, -1);
  if (st != WEFT_OK) {
    fprintf(stderr, "weft-info: barrier: %s: %s\n", weft_status_string(st), req ? weft_request_error(req) : "");
    rc = 1;
  }
  if (req) weft_request_free(req);
  weft_finalize(w);
  return rc;
}

int main(int argc, char **argv) {
  int json = 0, params_only = 0, topology = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--params")) {
      params_only = 1;
    } else if (!strcmp(argv[i], "--topology")) {
      topology = 1;
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: weft-info [--params] [--json] | --topology\n"
             "  prints weft's version, build features and every environment parameter\n"
             "  --params    only the parameters\n"
             "  --json      as one JSON object\n"
             "  --topology  join the job (weftrun -np N weft-info --topology) and print, on rank 0, the\n"
             "              hosts and their ranks, the transports and the algorithms the job would use\n");
      return 0;
    } else {
      fprintf(stderr, "weft-info: unknown argument '%s' (see --help)\n", argv[i]);
      return 2;
    }
  }
  if (topology) {
    if (json || params_only) {
      fprintf(stderr, "weft-info: --topology prints text only, without --params or --json\n");
      return 2;
    }
    return print_topology();
  }
  if (json)
    print_json(params_only);
  else
    print_text(params_only);
  return fflush(stdout) == 0 ? 0 : 1;
}

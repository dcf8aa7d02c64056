/* params.c - the table of every environment knob, and typed lookups. */
#include "util/params.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/settings.h"

/* F(field): where a setting resolves to; NOF: a LAUNCH knob (no field). */
#define F(field) offsetof(wf_settings, field)
#define NOF WF_PARAM_NO_FIELD

static const wf_param g_params[] = {
    {"WEFT_RANK", "HOROVOD_RANK", WF_PARAM_INT, "-1", "this process's rank (set by weftrun)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_SIZE", "HOROVOD_SIZE", WF_PARAM_INT, "-1", "number of ranks in the job (set by weftrun)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_LOCAL_RANK", "HOROVOD_LOCAL_RANK", WF_PARAM_INT, "-1", "rank among this host's ranks (-1: computed)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", WF_PARAM_INT, "-1", "ranks on this host (-1: computed)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_CROSS_RANK", "HOROVOD_CROSS_RANK", WF_PARAM_INT, "-1", "index of this host (-1: computed)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_CROSS_SIZE", "HOROVOD_CROSS_SIZE", WF_PARAM_INT, "-1", "number of hosts (-1: computed)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_ADDR", NULL, WF_PARAM_STRING, "", "host:port of rank 0's rendezvous store",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_SECRET", NULL, WF_PARAM_STRING, "", "job secret for the authenticated handshake (weftrun sets it)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_SECRET_FILE", NULL, WF_PARAM_STRING, "", "file holding the job secret",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_JOB_ID", NULL, WF_PARAM_STRING, "", "job identifier mixed into the handshake (weftrun sets it)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_HOSTNAME", "HOROVOD_HOSTNAME", WF_PARAM_STRING, "", "host name reported to peers (default: gethostname)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_LISTEN_FD", NULL, WF_PARAM_STRING, "", "set by weftrun for rank 0: an inherited socket already listening on WEFT_ADDR's port",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_BIND_ADDR", NULL, WF_PARAM_STRING, "", "address data listeners bind to (default: the one used to reach rank 0)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_LAUNCHER_FD", NULL, WF_PARAM_STRING, "", "set by weftrun: descriptor on which a failing rank names the rank that caused its failure",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_LAUNCHER_TAG", NULL, WF_PARAM_STRING, "", "set by weftrun: the job's tag on that descriptor's lines",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_IFACE", NULL, WF_PARAM_STRING, "", "network interface whose IPv4 address ranks bind and advertise (weftrun --network-interface); WEFT_BIND_ADDR wins",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_ELASTIC_ADDR", NULL, WF_PARAM_STRING, "", "set by weftrun in elastic mode: the driver's host:port, where weft_init asks for this process's place in the next world (WEFT_RANK, WEFT_SIZE and WEFT_ADDR are then not used)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_ELASTIC_ID", NULL, WF_PARAM_STRING, "", "set by weftrun in elastic mode: this process's stable worker id",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_ELASTIC_GROWTH", NULL, WF_PARAM_STRING, "", "set by weftrun in elastic mode with --host-discovery-script: 1 (workers may join a running job; weft.torch.elastic's commit() then asks for host updates)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_ELASTIC_TIMEOUT", NULL, WF_PARAM_STRING, "", "set by weftrun in elastic mode: its --elastic-timeout (seconds), added to weft_init's wait for a place",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_CUDA_LIBRARY", NULL, WF_PARAM_PATH, "",
     "the CUDA runtime (libcudart) to load when the process has none loaded yet; tried before the usual names "
     "(libcudart.so.13, .so.12, .so.11.0, .so)",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_TIMEOUT_SECONDS", NULL, WF_PARAM_DOUBLE, "300", "deadline of one operation, negotiation and data",
     WF_SCOPE_RANK, F(timeout_seconds), NULL},
    {"WEFT_INIT_TIMEOUT_SECONDS", "HOROVOD_START_TIMEOUT", WF_PARAM_DOUBLE, "60", "deadline of weft_init's rendezvous",
     WF_SCOPE_RANK, F(init_timeout_seconds), NULL},
    {"WEFT_HEARTBEAT_INTERVAL", NULL, WF_PARAM_DOUBLE, "0.5", "seconds between heartbeats on an idle connection",
     WF_SCOPE_AGREED, F(heartbeat_interval), NULL},
    {"WEFT_HEARTBEAT_TIMEOUT", NULL, WF_PARAM_DOUBLE, "10", "a peer silent this many seconds is declared unresponsive",
     WF_SCOPE_AGREED, F(heartbeat_timeout), NULL},
    {"WEFT_HANDSHAKE_TIMEOUT", NULL, WF_PARAM_DOUBLE, "5", "deadline for a connection's authentication handshake",
     WF_SCOPE_RANK, F(handshake_timeout), NULL},
    {"WEFT_MAX_MESSAGE_BYTES", NULL, WF_PARAM_INT, "67108864", "cap on a control message a peer may send",
     WF_SCOPE_AGREED, F(max_message_bytes), NULL},
    {"WEFT_TCP_CHUNK_BYTES", NULL, WF_PARAM_INT, "1048576", "data frame size on TCP (large sends are pipelined in these)",
     WF_SCOPE_AGREED, F(tcp_chunk_bytes), NULL},
    {"WEFT_TRANSPORT", NULL, WF_PARAM_STRING, "auto",
     "auto: shared memory between ranks on one host, TCP across hosts; shm or tcp forces one; mpi: all data over "
     "MPI point-to-point (a job started by mpirun/srun, weft built with MPI)",
     WF_SCOPE_AGREED, F(transport), "auto|shm|tcp|mpi"},
    {"WEFT_MPI_SPIN_US", NULL, WF_PARAM_INT, "200",
     "WEFT_TRANSPORT=mpi: the engine polls MPI without sleeping this long (plus 1 ns per pending byte) after a "
     "transfer was posted or completed, then every 1 ms",
     WF_SCOPE_RANK, F(mpi_spin_us), NULL},
    {"WEFT_REMOTE_MAILBOX", NULL, WF_PARAM_INT, "1",
     "1: remote-execution frames to ranks of this host go through the host segment's remote rings (the calling and "
     "waiting threads, no engine thread, no socket) when they fit a slot; 0: this rank sends them all on the engine's "
     "path (it still takes what others put in its rings)",
     WF_SCOPE_RANK, F(remote_mailbox), "0|1"},
    {"WEFT_SHM_SLOT_BYTES", NULL, WF_PARAM_INT, "0", "shared-memory ring slot size per rank pair, at most (0: 64 KiB; fewer, then smaller slots as a receiver's inbox is shared out)",
     WF_SCOPE_AGREED, F(shm_slot_bytes), NULL},
    {"WEFT_SHM_SLOTS", NULL, WF_PARAM_INT, "0", "shared-memory ring slots per rank pair, at most (0: 16; each receiver's inbox holds twice that, shared out among its senders)",
     WF_SCOPE_AGREED, F(shm_slots), NULL},
    {"WEFT_SHM_STAGE_BYTES", NULL, WF_PARAM_INT, "4194304",
     "staging region per local rank for the shm algorithms (every rank on one host; the host's first rank decides; "
     "at most 256 MiB for all; 0: none)",
     WF_SCOPE_AGREED, F(shm_stage_bytes), NULL},
    {"WEFT_NUMA_NODES", NULL, WF_PARAM_STRING, "",
     "NUMA node of each local rank, comma list (\"0,0,1,1\": a declared layout), or off; empty: from each rank's "
     "CPU affinity. The host segment's creator places each rank's inbox, staging region and mailbox on its node; on "
     "two or more nodes the world's large allreduces, broadcasts and allgathers on one host run node-aware (\"numa\")",
     WF_SCOPE_LAUNCH, NOF, NULL},
    {"WEFT_SHM_COPY", NULL, WF_PARAM_STRING, "auto",
     "copies out of the rings: auto (streaming stores for receives >= 4 MiB), memcpy, nt",
     WF_SCOPE_RANK, F(shm_copy), "auto|memcpy|nt"},
    {"WEFT_ALGO_ALLREDUCE", NULL, WF_PARAM_STRING, "",
     "force the allreduce algorithm: direct, rd, ring, hier, cma, shm, numa (\"\": chosen by the selection table; one that declines a call's "
     "arguments gives way to the automatic choice, with a warning)",
     WF_SCOPE_AGREED, F(algo[0]), NULL},
    {"WEFT_ALGO_ALLGATHER", NULL, WF_PARAM_STRING, "",
     "force the allgather algorithm: ring, hier, cma, shm, numa (\"\": chosen by the selection table; one that declines a call's "
     "arguments gives way to the automatic choice, with a warning)",
     WF_SCOPE_AGREED, F(algo[1]), NULL},
    {"WEFT_ALGO_BROADCAST", NULL, WF_PARAM_STRING, "",
     "force the broadcast algorithm: tree, chain, hier, cma, shm, numa (\"\": chosen by the selection table; one that declines a call's "
     "arguments gives way to the automatic choice, with a warning)",
     WF_SCOPE_AGREED, F(algo[2]), NULL},
    {"WEFT_ALGO_ALLTOALL", NULL, WF_PARAM_STRING, "",
     "force the alltoall algorithm: pairwise, cma, shm (\"\": chosen by the selection table; one that declines a call's "
     "arguments gives way to the automatic choice, with a warning)",
     WF_SCOPE_AGREED, F(algo[3]), NULL},
    {"WEFT_ALGO_REDUCESCATTER", NULL, WF_PARAM_STRING, "",
     "force the reducescatter algorithm: direct, ring, cma, shm (\"\": chosen by the selection table; one that declines a call's "
     "arguments gives way to the automatic choice, with a warning)",
     WF_SCOPE_AGREED, F(algo[4]), NULL},
    {"WEFT_HIERARCHICAL", NULL, WF_PARAM_INT, "-1", "the hier allreduce/allgather/broadcast (also WEFT_ALGO_<COLL>=hier): -1 when a group spans hosts and some host has several of its ranks, 1 whenever it spans hosts, 0 never",
     WF_SCOPE_AGREED, F(hierarchical), "-1|0|1"},
    {"WEFT_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE", WF_PARAM_INT, "-1",
     "the hier allreduce only: 1 whenever a group spans hosts, 0 never, -1 as WEFT_HIERARCHICAL",
     WF_SCOPE_AGREED, F(hierarchical_allreduce), "-1|0|1"},
    {"WEFT_HIERARCHICAL_ALLGATHER", "HOROVOD_HIERARCHICAL_ALLGATHER", WF_PARAM_INT, "-1",
     "the hier allgather only: 1 whenever a group spans hosts, 0 never, -1 as WEFT_HIERARCHICAL",
     WF_SCOPE_AGREED, F(hierarchical_allgather), "-1|0|1"},
    {"WEFT_FAST", NULL, WF_PARAM_INT, "1",
     "1: small allreduce/broadcast/barrier of one-host groups negotiate and run in shared memory; 0: never on this rank",
     WF_SCOPE_AGREED, F(fast), "0|1"},
    {"WEFT_FAST_BYTES", NULL, WF_PARAM_INT, "8192",
     "largest input of the one-host fast path, rounded up to 64 bytes (the host's first rank decides; 0: no board)",
     WF_SCOPE_AGREED, F(fast_bytes), NULL},
    {"WEFT_FAST_LARGE_BYTES", NULL, WF_PARAM_INT, "2097152",
     "largest input of the fast path's large slots (allgather, broadcast, alltoall, reducescatter, larger allreduce; rounded up to 4 KiB, at most max(32 MiB / local ranks, 2 MiB); as many slots (2 to 4) as 64 MiB holds, at least two, so at most max(64 MiB, local ranks x 4 MiB) in all; the host's first rank decides; 0: none)",
     WF_SCOPE_AGREED, F(fast_large_bytes), NULL},
    {"WEFT_FAST_ALLREDUCE_BYTES", NULL, WF_PARAM_INT, "262144",
     "largest fast-path allreduce that every rank folds whole (at least WEFT_FAST_BYTES); larger ones, up to WEFT_FAST_LARGE_BYTES, are split (WEFT_FAST_SPLIT_BYTES)",
     WF_SCOPE_AGREED, F(fast_allreduce_bytes), NULL},
    {"WEFT_FAST_SPLIT_BYTES", NULL, WF_PARAM_INT, "16384",
     "fast-path allreduce inputs from this size on (on 3 or more ranks, or where each rank folds its own slice: WEFT_FAST_SPLIT_OWN; else above WEFT_FAST_ALLREDUCE_BYTES) are folded slice by slice, each slice once (by its owner, or whichever rank takes it: WEFT_FAST_SPLIT_OWN), then copied out by every rank; 0: never (then WEFT_FAST_ALLREDUCE_BYTES is the largest)",
     WF_SCOPE_AGREED, F(fast_split_bytes), NULL},
    {"WEFT_FAST_SPLIT_OWN", NULL, WF_PARAM_INT, "1",
     "1: where the host's cores suffice, each rank folds its own slice of a split fast-path allreduce, from its own input (a quarter less copying; a rank stopped after arriving holds the others up until it runs again or is declared lost); 0: any rank folds any slice (the others fold a stopped rank's)",
     WF_SCOPE_AGREED, F(fast_split_own), "0|1"},
    {"WEFT_FAST_CMA_BYTES", NULL, WF_PARAM_INT, "0",
     "fast-path allgather/alltoall inputs from this size on stay in place and are read across processes (one copy instead of two, but a cross-process read is slower than memcpy: off by default, see bench/NOTES.md; needs WEFT_CMA, not with more ranks than cores); 0: never",
     WF_SCOPE_AGREED, F(fast_cma_bytes), NULL},
    {"WEFT_FAST_WAIT_SECONDS", NULL, WF_PARAM_DOUBLE, "0.2",
     "a fast-path op not submitted by every local rank within this long (at most a quarter of WEFT_TIMEOUT_SECONDS) is negotiated by the coordinator",
     WF_SCOPE_RANK, F(fast_wait_seconds), NULL},
    {"WEFT_CMA", NULL, WF_PARAM_INT, "1", "1: ranks on one host may read each other's buffers directly (process_vm_readv); 0: never",
     WF_SCOPE_AGREED, F(cma), "0|1"},
    {"WEFT_RING_SEGMENT_BYTES", NULL, WF_PARAM_INT, "1048576", "pipeline segment of the ring, chain and direct algorithms",
     WF_SCOPE_AGREED, F(ring_segment_bytes), NULL},
    {"WEFT_RING_SUBDIVS", NULL, WF_PARAM_INT, "1",
     "the ring allreduce and ring allgather run this many rings at once over rotated and (every second one) reversed "
     "rank orders, each on its own part of the data (TensorFlow's subdiv_offsets; see bench/results/ring-subdivs.md)",
     WF_SCOPE_AGREED, F(ring_subdivs), "1|2|3|4|5|6|7|8"},
    {"WEFT_DEVICE_CHUNK_BYTES", NULL, WF_PARAM_INT, "4194304",
     "device tensors (CUDA, sim) move through pinned host memory in chunks of this many bytes (at least 64; "
     "rounded down to whole elements); an allreduce or broadcast of device tensors runs its host collective chunk by "
     "chunk, overlapping the copies down and up",
     WF_SCOPE_AGREED, F(device_chunk_bytes), NULL},
    {"WEFT_SMALL_BROADCAST_BYTES", NULL, WF_PARAM_INT, "262144", "broadcast at most this size uses a binomial tree",
     WF_SCOPE_AGREED, F(small_broadcast_bytes), NULL},
    {"WEFT_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", WF_PARAM_INT, "134217728",
     "ready allreduces of the same dtype/op/scales are fused into one up to this many bytes (0: off)",
     WF_SCOPE_AGREED, F(fusion_threshold), NULL},
    {"WEFT_FUSION_PACK_MAX_BYTES", NULL, WF_PARAM_INT, "1048576",
     "a larger tensor runs alone where fusing means packing it (all but the world group's allreduces on one host, fused in place) (0: no limit)",
     WF_SCOPE_AGREED, F(fusion_pack_max_bytes), NULL},
    {"WEFT_DEVICE_POOL_BYTES", NULL, WF_PARAM_INT, "33554432",
     "pinned host memory per device kind for staging device tensors, allocated on first use and kept until finalize, "
     "in slots of WEFT_DEVICE_CHUNK_BYTES (at least one slot); a tensor larger than the pool streams through it",
     WF_SCOPE_RANK, F(device_pool_bytes), NULL},
    {"WEFT_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", WF_PARAM_INT, "1024", "response cache entries per group: tensors negotiated before are requested by id (0: off; at most 65536)",
     WF_SCOPE_RANK, F(cache_capacity), NULL},
    {"WEFT_CYCLE_TIME_US", NULL, WF_PARAM_INT, "0",
     "the coordinator holds ready responses this long to fuse more (0: respond at once)",
     WF_SCOPE_AGREED, F(cycle_time_us), NULL},
    {"WEFT_CYCLE_TIME_MS", "HOROVOD_CYCLE_TIME", WF_PARAM_DOUBLE, "0",
     "WEFT_CYCLE_TIME_US in milliseconds (Horovod's unit); used when WEFT_CYCLE_TIME_US is 0",
     WF_SCOPE_AGREED, F(cycle_time_ms), NULL},
    {"WEFT_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_DISABLE", WF_PARAM_INT, "0", "1: no stall inspector (neither reports nor the stall shutdown)",
     WF_SCOPE_RANK, F(stall_check_disable), "0|1"},
    {"WEFT_STALL_CHECK_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", WF_PARAM_DOUBLE, "60",
     "rank 0 (and every waiting rank) reports a tensor some ranks have not submitted after this long (0: off)",
     WF_SCOPE_RANK, F(stall_check_seconds), NULL},
    {"WEFT_STALL_SHUTDOWN_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", WF_PARAM_DOUBLE, "0",
     "a stalled tensor fails on every rank after this long (0: only WEFT_TIMEOUT_SECONDS)",
     WF_SCOPE_RANK, F(stall_shutdown_seconds), NULL},
    {"WEFT_TIMELINE", "HOROVOD_TIMELINE", WF_PARAM_PATH, "",
     "write a Chrome-trace timeline to this path (rank 0; \"%r\" in the path: every rank, %r = rank); DYNAMIC: none "
     "until weft_timeline_start",
     WF_SCOPE_RANK, F(timeline), NULL},
    {"WEFT_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", WF_PARAM_INT, "0",
     "1: mark every engine loop iteration in the timeline",
     WF_SCOPE_RANK, F(timeline_mark_cycles), "0|1"},
    {"WEFT_LOG_LEVEL", "HOROVOD_LOG_LEVEL", WF_PARAM_STRING, "warn",
     "none (also fatal, error: nothing), warn (also warning), info, debug, trace; case-insensitive",
     WF_SCOPE_RANK, F(log_level), "none|fatal|error|warn|warning|info|debug|trace"},
    {"WEFT_LOG_SUBSYS", NULL, WF_PARAM_STRING, "all", "all, or a comma list of init, engine, coord, tcp, shm, algo, boot, api",
     WF_SCOPE_RANK, F(log_subsys), NULL},
    {NULL, NULL, 0, NULL, NULL, 0, 0, NULL}};

#undef F
#undef NOF

const wf_param *wf_params_table(void) { return g_params; }

const wf_param *wf_param_find(const char *name) {
  for (const wf_param *p = g_params; p->name; p++)
    if (!strcmp(p->name, name)) return p;
  return NULL;
}

const char *wf_param_scope_name(wf_param_scope s) {
  return s == WF_SCOPE_AGREED ? "agreed" : s == WF_SCOPE_RANK ? "rank" : "launch";
}

/* A LAUNCH knob by name; anything else is an internal error (settings are
 * resolved once, settings.h), reported but still answered. */
static const wf_param *find(const char *name) {
  const wf_param *p = wf_param_find(name);
  if (!p) WF_WARN(WF_SUB_ALL, "internal: parameter %s is not in the table", name);
  else if (p->scope != WF_SCOPE_LAUNCH)
    WF_WARN(WF_SUB_ALL, "internal: %s is a setting, resolved once at init: read it from wf_settings", name);
  return p;
}

static const char *raw(const wf_param *p) {
  const char *v = getenv(p->name);
  if ((!v || !*v) && p->alias) v = getenv(p->alias);
  return (v && *v) ? v : NULL;
}

const char *wf_param_str(const char *name) {
  const wf_param *p = find(name);
  if (!p) return "";
  const char *v = raw(p);
  return v ? v : p->def;
}

int64_t wf_param_int(const char *name) {
  const wf_param *p = find(name);
  if (!p) return 0;
  const char *v = raw(p);
  if (v) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (!errno && end != v && *end == '\0') return x;
    WF_WARN(WF_SUB_ALL, "%s=%s is not an integer; using the default %s", p->name, v, p->def);
  }
  return strtoll(p->def, NULL, 0);
}

double wf_param_double(const char *name) {
  const wf_param *p = find(name);
  if (!p) return 0;
  const char *v = raw(p);
  if (v) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!errno && end != v && *end == '\0') return x;
    WF_WARN(WF_SUB_ALL, "%s=%s is not a number; using the default %s", p->name, v, p->def);
  }
  return strtod(p->def, NULL);
}

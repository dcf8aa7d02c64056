/* settings.h - every tuning knob resolved once, at init, into one struct.
 *
 * weft_init resolves the settings (environment over the defaults of the
 * parameter table, params.h) before anything else and hands the struct down:
 * the engine, the algorithms and the transports read fields, never the
 * environment. Each parameter has a scope (params.h):
 *   AGREED  changes the schedule or the wire: it must be equal on every rank.
 *           The agreed settings' canonical text ("NAME=value" lines, table
 *           order) and its SHA-256 travel in the rendezvous HELLO; rank 0
 *           refuses a job whose ranks differ, naming the setting, both values
 *           and both ranks, on every rank.
 *   RANK    may differ between ranks (logging, timeline, local timeouts).
 *   LAUNCH  per process, set by the launcher (rank, address, secret): read
 *           by weft_init directly, not part of this struct. */
#ifndef WF_UTIL_SETTINGS_H
#define WF_UTIL_SETTINGS_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define WF_SET_STR_MAX 128      /* a string setting's room, NUL included */
#define WF_SET_PATH_MAX 4096    /* a path setting's room (WF_PARAM_PATH), NUL included */
#define WF_SET_DIGEST_BYTES 32  /* SHA-256 */
#define WF_SET_ALGO_COLLS 5     /* WEFT_ALGO_<COLL>: wf_coll 0..4 (allreduce .. reducescatter) */

typedef struct wf_settings {
  /* ---- agreed */
  char transport[WF_SET_STR_MAX];        /* WEFT_TRANSPORT: auto, shm, tcp, mpi */
  int64_t cma;                           /* WEFT_CMA */
  int64_t shm_slot_bytes, shm_slots;     /* WEFT_SHM_SLOT_BYTES, WEFT_SHM_SLOTS */
  int64_t shm_stage_bytes;               /* WEFT_SHM_STAGE_BYTES */
  char algo[WF_SET_ALGO_COLLS][WF_SET_STR_MAX]; /* WEFT_ALGO_<COLL> ("" automatic), by wf_coll */
  int64_t hierarchical;                  /* WEFT_HIERARCHICAL */
  int64_t hierarchical_allreduce;        /* WEFT_HIERARCHICAL_ALLREDUCE */
  int64_t hierarchical_allgather;        /* WEFT_HIERARCHICAL_ALLGATHER */
  int64_t fast;                          /* WEFT_FAST */
  int64_t fast_bytes;                    /* WEFT_FAST_BYTES */
  int64_t fast_large_bytes;              /* WEFT_FAST_LARGE_BYTES */
  int64_t fast_allreduce_bytes;          /* WEFT_FAST_ALLREDUCE_BYTES */
  int64_t fast_split_bytes;              /* WEFT_FAST_SPLIT_BYTES */
  int64_t fast_split_own;                /* WEFT_FAST_SPLIT_OWN */
  int64_t fast_cma_bytes;                /* WEFT_FAST_CMA_BYTES */
  int64_t ring_segment_bytes;            /* WEFT_RING_SEGMENT_BYTES */
  int64_t ring_subdivs;                  /* WEFT_RING_SUBDIVS */
  int64_t small_broadcast_bytes;         /* WEFT_SMALL_BROADCAST_BYTES */
  int64_t fusion_threshold;              /* WEFT_FUSION_THRESHOLD */
  int64_t fusion_pack_max_bytes;         /* WEFT_FUSION_PACK_MAX_BYTES */
  int64_t cycle_time_us;                 /* WEFT_CYCLE_TIME_US */
  double cycle_time_ms;                  /* WEFT_CYCLE_TIME_MS */
  int64_t max_message_bytes;             /* WEFT_MAX_MESSAGE_BYTES */
  int64_t tcp_chunk_bytes;               /* WEFT_TCP_CHUNK_BYTES */
  int64_t device_chunk_bytes;            /* WEFT_DEVICE_CHUNK_BYTES */
  double heartbeat_interval;             /* WEFT_HEARTBEAT_INTERVAL */
  double heartbeat_timeout;              /* WEFT_HEARTBEAT_TIMEOUT */
  /* ---- per rank */
  double timeout_seconds;                /* WEFT_TIMEOUT_SECONDS */
  double init_timeout_seconds;           /* WEFT_INIT_TIMEOUT_SECONDS */
  double handshake_timeout;              /* WEFT_HANDSHAKE_TIMEOUT */
  char shm_copy[WF_SET_STR_MAX];         /* WEFT_SHM_COPY: auto, memcpy, nt */
  int64_t mpi_spin_us;                   /* WEFT_MPI_SPIN_US */
  int64_t remote_mailbox;                /* WEFT_REMOTE_MAILBOX */
  double fast_wait_seconds;              /* WEFT_FAST_WAIT_SECONDS */
  int64_t cache_capacity;                /* WEFT_CACHE_CAPACITY */
  int64_t device_pool_bytes;             /* WEFT_DEVICE_POOL_BYTES */
  int64_t stall_check_disable;           /* WEFT_STALL_CHECK_DISABLE */
  double stall_check_seconds;            /* WEFT_STALL_CHECK_SECONDS */
  double stall_shutdown_seconds;         /* WEFT_STALL_SHUTDOWN_SECONDS */
  char timeline[WF_SET_PATH_MAX];        /* WEFT_TIMELINE */
  int64_t timeline_mark_cycles;          /* WEFT_TIMELINE_MARK_CYCLES */
  char log_level[WF_SET_STR_MAX];        /* WEFT_LOG_LEVEL (util/log.c reads it itself, before init) */
  char log_subsys[WF_SET_STR_MAX];       /* WEFT_LOG_SUBSYS (likewise) */
} wf_settings;

/* The table's defaults, resolved once (no environment): what an algorithm
 * handed no settings (unit tests) uses. Never NULL. */
const wf_settings *wf_settings_default(void);

/* s = the environment (name, then alias) over the defaults. A value that
 * does not parse as its type, or a string outside its accepted values, is
 * WEFT_ERR_INVALID_ARGUMENT with a message naming the variable, its value
 * and what is accepted (in err). Warns once per process about WEFT_* names
 * in the environment that are no setting (a typo would otherwise be
 * silently ignored). */
weft_status wf_settings_resolve(wf_settings *s, char *err, size_t errlen);

/* The agreed settings as canonical text: "NAME=value\n" per agreed
 * parameter, in table order (integers in decimal, doubles "%.17g", strings
 * with control bytes as '?'). Returns the full length; writes at most
 * outlen - 1 bytes and a NUL (a longer text is cut at a line boundary). */
size_t wf_settings_text(const wf_settings *s, char *out, size_t outlen);

/* SHA-256 of the full canonical text. */
void wf_settings_digest(const wf_settings *s, uint8_t out[WF_SET_DIGEST_BYTES]);

/* Compares two ranks' canonical texts: 0 if every line is equal; else 1
 * with "NAME: rank A has X, rank B has Y" (every differing setting, "; "
 * between them, as many as fit) in out. A setting present in one text
 * only shows "(unset)" for the other. */
int wf_settings_diff(const char *text_a, int rank_a, const char *text_b, int rank_b, char *out, size_t outlen);

/* A setting's value as text (the canonical form), for weft-info. */
void wf_settings_value(const wf_settings *s, const char *name, char *out, size_t outlen);

#endif

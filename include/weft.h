/*
 * weft.h - the one public header of weft, a library for collective
 * communication in distributed deep-learning training.
 *
 * Processes ("ranks") submit named tensors asynchronously and in any order; a
 * background engine in each process negotiates with a coordinator (rank 0)
 * which tensors are ready on every rank, checks that all ranks agree (dtype,
 * shape, op, root, scales), and runs bandwidth-optimal collectives.
 *
 * Conventions (numbered rules; see docs/design.md for the why):
 *  1. Every function returns a weft_status: 0 = ok, > 0 = in progress,
 *     < 0 = error. weft_status_string() names it; weft_last_error() and
 *     weft_request_error() give a message naming what was wrong.
 *  2. Handles are opaque. Each carries a magic number: a freed, foreign or
 *     NULL handle returns WEFT_ERR_MISUSE instead of crashing (best effort:
 *     use after free is still undefined behaviour in C).
 *  3. Thread safety: every function may be called from any thread, unless
 *     its comment says otherwise. Completion callbacks run on the engine
 *     thread: they must not block and must not call weft_wait().
 *  4. Ownership: the caller owns tensor memory it passes in and must keep it
 *     valid and untouched until the request completes. Descriptors (shape
 *     arrays, names, splits, option structs) are copied at submission and may
 *     be reused as soon as the call returns. Library-owned outputs live until
 *     weft_request_free().
 *  5. Nothing waits forever: every blocking call takes or has a deadline
 *     (WEFT_TIMEOUT_SECONDS for an operation, WEFT_HEARTBEAT_TIMEOUT for a
 *     silent peer). A peer's death fails pending work with an error naming it.
 *  6. Structs passed in start with a size field set by their *_INIT macro;
 *     new fields are only ever appended.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

/* ------------------------------------------------------------------ status */
typedef enum weft_status {
  WEFT_OK = 0,
  WEFT_IN_PROGRESS = 1,            /* not complete yet (weft_test, weft_wait) */
  WEFT_ERR_INVALID_ARGUMENT = -1,  /* bad argument; nothing was submitted */
  WEFT_ERR_MISUSE = -2,            /* NULL/freed/foreign handle, wrong state */
  WEFT_ERR_NO_MEMORY = -3,
  WEFT_ERR_SYSTEM = -4,            /* an OS call failed (message has errno) */
  WEFT_ERR_TIMEOUT = -5,           /* a deadline passed */
  WEFT_ERR_PEER_LOST = -6,         /* a peer's connection dropped or it went silent */
  WEFT_ERR_MISMATCH = -7,          /* ranks disagreed on dtype/shape/op/root/... */
  WEFT_ERR_ABORTED = -8,           /* weft_abort() here or on a peer (sticky) */
  WEFT_ERR_NOT_SUPPORTED = -9,     /* feature not built, or algorithm declined */
  WEFT_ERR_PROTOCOL = -10,         /* malformed or unexpected message from a peer */
  WEFT_ERR_AUTH = -11,             /* authentication failed */
  WEFT_ERR_SHUTDOWN = -12,         /* the world was finalized with this in flight */
  WEFT_ERR_INTERNAL = -13,         /* a bug in weft: please report */
  WEFT_ERR_NOT_FOUND = -14,        /* no such name: an algorithm (WEFT_ALGO_<COLL>, weft_algorithm_lookup) */
  WEFT_ERR_CANCELLED = -15         /* weft_request_cancel() here or on a peer withdrew the operation */
} weft_status;

/* A static string naming the status ("WEFT_ERR_TIMEOUT" ...). Never NULL. */
WEFT_API const char *weft_status_string(weft_status s);

/* The message of the last error returned to the calling thread by any weft
 * call (thread-local; "" if none). Valid until the thread's next weft call. */
WEFT_API const char *weft_last_error(void);

/* ------------------------------------------------------------------ types */
typedef enum weft_dtype {
  WEFT_DTYPE_UINT8 = 0,
  WEFT_DTYPE_INT8 = 1,
  WEFT_DTYPE_UINT16 = 2,
  WEFT_DTYPE_INT16 = 3,
  WEFT_DTYPE_INT32 = 4,
  WEFT_DTYPE_INT64 = 5,
  WEFT_DTYPE_FLOAT16 = 6,
  WEFT_DTYPE_BFLOAT16 = 7,
  WEFT_DTYPE_FLOAT32 = 8,
  WEFT_DTYPE_FLOAT64 = 9,
  WEFT_DTYPE_BOOL = 10, /* one byte, 0 or 1 */
  WEFT_DTYPE_COUNT_ = 11
} weft_dtype;

/* Size in bytes of one element, or 0 for an unknown dtype. */
WEFT_API size_t weft_dtype_size(weft_dtype t);
/* "float32" ...; "unknown" for an unknown dtype. */
WEFT_API const char *weft_dtype_name(weft_dtype t);

typedef enum weft_reduce_op {
  WEFT_OP_SUM = 0,     /* bool: logical or */
  WEFT_OP_AVERAGE = 1, /* sum, then divide by the group size (integers: exact division,
                          truncating); not defined for bool (WEFT_ERR_INVALID_ARGUMENT) */
  WEFT_OP_MIN = 2,     /* bool: logical and */
  WEFT_OP_MAX = 3,     /* bool: logical or */
  WEFT_OP_PRODUCT = 4, /* bool: logical and */
  WEFT_OP_COUNT_ = 5
} weft_reduce_op;

/* "sum" ...; "unknown" for an unknown op. */
WEFT_API const char *weft_reduce_op_name(weft_reduce_op op);

#define WEFT_MAX_DIMS 16
#define WEFT_DEVICE_CPU (-1)

/* The kind of device a tensor with device >= 0 lives on. */
#define WEFT_DEVICE_KIND_AUTO 0 /* CUDA (the default: a zeroed field) */
#define WEFT_DEVICE_KIND_CUDA 1 /* CUDA, loaded at run time (no toolkit needed to build) */
#define WEFT_DEVICE_KIND_SIM 2  /* weft's simulated accelerator, for tests without a GPU */

/* A tensor descriptor: dense, row-major, contiguous.
 *
 * Device tensors (device >= 0): data is memory of that device (checked at
 * submission: WEFT_ERR_INVALID_ARGUMENT if it is not, WEFT_ERR_NOT_SUPPORTED
 * naming the tensor and the reason if the backend cannot be loaded). weft
 * reads the input only after the work queued on stream before the call
 * completes (an event recorded there; never a device-wide synchronize),
 * copies it into pinned host memory, runs the host collective, and copies
 * the result back into the device output; the request completes when the
 * result is on the device (or see weft_op_options.consumer_stream). Input
 * and output of one operation are on the same device; every rank must use
 * the same device kind for a named tensor (CPU on one rank and a device on
 * another is WEFT_ERR_MISMATCH naming both ranks). The caller must not
 * write the input, nor touch the output, until the request completes.
 * Fields after device are ignored for host tensors; a descriptor
 * initialised with {dtype, ndim, shape, data, device} gets AUTO and NULL. */
typedef struct weft_tensor {
  weft_dtype dtype;
  int ndim;              /* 0 .. WEFT_MAX_DIMS; 0 = a scalar (one element) */
  const int64_t *shape;  /* ndim entries, each >= 0; may be NULL when ndim == 0 */
  void *data;            /* may be NULL only when the tensor has 0 elements */
  int device;            /* WEFT_DEVICE_CPU (host memory), or the device index (>= 0) */
  int device_kind;       /* device >= 0: WEFT_DEVICE_KIND_* (AUTO: CUDA) */
  void *stream;          /* device >= 0: the producer's stream (a cudaStream_t); NULL: the default stream */
} weft_tensor;

/* ------------------------------------------------------------------ world */
typedef struct weft_world weft_world;
typedef struct weft_group weft_group;
typedef struct weft_request weft_request;

/* Configuration. Fields left at their WEFT_CONFIG_INIT value are filled from
 * the environment (WEFT_RANK, WEFT_SIZE, WEFT_ADDR, ...; HOROVOD_*, Open MPI's
 * OMPI_COMM_WORLD_* and PMI_* are accepted too), then from defaults. */
typedef struct weft_config {
  size_t struct_size;     /* sizeof(weft_config), set by WEFT_CONFIG_INIT */
  int rank;               /* -1: from the environment */
  int size;               /* -1: from the environment */
  const char *addr;       /* "host:port" of rank 0's rendezvous; NULL: env */
  const char *secret;     /* job secret (any bytes as text); NULL: env */
  double timeout_seconds; /* per-operation deadline; <= 0: env or default */
} weft_config;

#define WEFT_CONFIG_INIT {sizeof(weft_config), -1, -1, NULL, NULL, 0.0}

/* Join the job: rendezvous with every rank, authenticate, connect, start the
 * engine thread. Blocking (deadline: WEFT_INIT_TIMEOUT_SECONDS). cfg may be
 * NULL (all from the environment). On success *out is a new world handle; on
 * error *out is NULL and weft_last_error() says why. A process may hold
 * several worlds over time (init, finalize, init again). */
WEFT_API weft_status weft_init(const weft_config *cfg, weft_world **out);

/* Leave the job. Requests still in flight complete with WEFT_ERR_SHUTDOWN;
 * their handles stay valid until weft_request_free(). Peers are told (BYE):
 * their requests that still needed this rank fail with WEFT_ERR_PEER_LOST
 * naming it; work that does not need it goes on. Returns within about a
 * second even when peers are dead. Flushes data owed to peers first (bounded).
 * The world handle is invalid afterwards; finalizing NULL returns
 * WEFT_ERR_MISUSE. Must not be called from a completion callback, nor while
 * another thread is inside a weft call on this world (weft_wait included):
 * the world's memory is gone when it returns. */
WEFT_API weft_status weft_finalize(weft_world *world);

/* Ranks and sizes. Never fail on a valid world; return -1 on an invalid one.
 * local_*: among ranks on this host; cross_*: among hosts (this host's index
 * and the number of hosts). */
WEFT_API int weft_rank(const weft_world *world);
WEFT_API int weft_size(const weft_world *world);
WEFT_API int weft_local_rank(const weft_world *world);
WEFT_API int weft_local_size(const weft_world *world);
WEFT_API int weft_cross_rank(const weft_world *world);
WEFT_API int weft_cross_size(const weft_world *world);

/* The group of all ranks. Owned by the world; never free it. */
WEFT_API weft_group *weft_world_group(weft_world *world);

/* Process sets. Creates a group of the listed world ranks (any order, no
 * duplicates; this rank must be one of them). Collective over the members
 * only: each member calls it with the same list; it returns when all have
 * (matched by the list's lowest member, then a barrier in the new group;
 * deadline WEFT_TIMEOUT_SECONDS, after which every caller gets
 * WEFT_ERR_TIMEOUT naming the ranks that did arrive). Ranks that list
 * different members with the same lowest rank and so wait for each other
 * (rank 2 creating {0,1,2,3} while ranks 0 and 1 create {0,1,2}) all get
 * WEFT_ERR_MISMATCH at once, naming the ranks and both lists. A rank
 * creates one group at a time.
 * Operations on the group involve only its members, and each group
 * negotiates on its own, so a stalled group never blocks another. Blocking;
 * must not be called from a completion callback. */
WEFT_API weft_status weft_group_create(weft_world *world, const int *ranks, int n, weft_group **out);
/* Keyed groups (seed 004's group resolution): every member calls it with
 * the same group_key, group_size (1 .. weft_size()) and device_type
 * (WEFT_DEVICE_CPU, or the WEFT_DEVICE_KIND_* of the tensors it will use;
 * AUTO means CUDA); the group is the first group_size ranks to call it,
 * ordered by world rank. The first call of a key on a rank asks the group
 * leader (world rank 0, which must not have finalized: else
 * WEFT_ERR_PEER_LOST naming it) and returns when every member has; later calls of
 * that key on the rank return the same handle at once, without a message.
 * Errors reach every rank that called, with a message naming ranks and
 * values: WEFT_ERR_MISMATCH when ranks give different sizes or device types
 * ("group 7: rank 2 gives group size 4, rank 0 gave 3") or a rank calls a
 * group that is already complete without it; WEFT_ERR_TIMEOUT when members
 * are missing at the deadline (WEFT_TIMEOUT_SECONDS from the first call, the
 * leader's: "group 7: waiting for 4 members, have ranks 0, 2");
 * WEFT_ERR_INVALID_ARGUMENT for a size or device type out of range (local,
 * nothing sent). A key that failed stays failed in this world (later calls
 * get the same error). The group lives as long as the world (never destroy
 * it: WEFT_ERR_MISUSE); *out is owned by the world. Blocking; any thread
 * (two threads resolving one key get one group); must not be called from a
 * completion callback. */
WEFT_API weft_status weft_group_resolve(weft_world *world, int group_key, int group_size, int device_type,
                                        weft_group **out);

/* Step sequences (seed 004's StepSequenceInterface, as TensorFlow's
 * RpcCollectiveExecutorMgr): graphs that share collectives must run with
 * identical step ids; these give every member of a group the same step id
 * for a graph key (any number) until it is retired. The group's leader, its
 * first member (group rank 0), keeps each key's sequence: a key it has not
 * seen starts at a random id in 0 .. 2^57 - 1. Every rank caches its copy:
 * only a member's first weft_step_next of a key (and every
 * weft_step_refresh) asks the leader, one message each way; all other calls
 * are local and non-blocking.
 *  - weft_step_next: *step_id = the key's current step id (-1 on error).
 *  - weft_step_retire: the step step_id finished successfully here (call it
 *    before the next weft_step_next, not after a failed step, as in
 *    TensorFlow): the rank's copy advances by one (wrapping at 2^57). Local:
 *    each member retires for itself, and the leader's retirement advances
 *    the value that members fetching later get, so a member fetches a key
 *    before the leader retires its first step (for instance weft_step_next
 *    on every member, then a collective, then weft_step_retire).
 *    WEFT_ERR_NOT_FOUND: the key has no sequence on this rank yet;
 *    WEFT_ERR_INVALID_ARGUMENT: step_id is not the current id (nothing
 *    changes; TensorFlow instead drops the sequence).
 *  - weft_step_refresh: on the leader, the key starts again at a new random
 *    id; on a member, the rank's copy becomes the leader's current value.
 *    After a failed step: the leader refreshes, then (ordered after it, e.g.
 *    by a barrier) the members.
 * Blocking calls are bounded by WEFT_TIMEOUT_SECONDS plus
 * WEFT_HEARTBEAT_TIMEOUT: WEFT_ERR_TIMEOUT naming the leader; a leader that
 * died or finalized fails them with WEFT_ERR_PEER_LOST naming its rank; a
 * failed world with its failure. Any thread; must not be called from a
 * completion callback. WEFT_ERR_MISUSE for an invalid group,
 * WEFT_ERR_INVALID_ARGUMENT when this rank is not a member. */
WEFT_API weft_status weft_step_next(weft_group *group, int64_t graph_key, int64_t *step_id);
WEFT_API weft_status weft_step_retire(weft_group *group, int64_t graph_key, int64_t step_id);
WEFT_API weft_status weft_step_refresh(weft_group *group, int64_t graph_key);

/* Collective over the members (a barrier), then frees the group. No
 * operation may be in flight in it. The handle is invalid afterwards. */
WEFT_API weft_status weft_group_destroy(weft_group *group);
/* This rank's index in the group and the group's size (-1: invalid). */
WEFT_API int weft_group_rank(const weft_group *group);
WEFT_API int weft_group_size(const weft_group *group);

/* Stop the world: every pending and future request fails with
 * WEFT_ERR_ABORTED and "aborted: <reason>"; peers are told and fail too.
 * Sticky and idempotent. Non-blocking. */
WEFT_API weft_status weft_abort(weft_world *world, const char *reason);

/* WEFT_OK while the world is healthy; otherwise the status of the first
 * asynchronous failure (peer lost, abort, ...) and weft_last_error() its
 * message. Non-blocking. */
WEFT_API weft_status weft_async_error(weft_world *world);

/* ------------------------------------------------------------------ operations */
/* Completion callback: runs once on the engine thread when the request
 * completes (successfully or not). Must not block. The request stays valid
 * until weft_request_free(), which the callback may call. */
typedef void (*weft_done_fn)(weft_request *req, weft_status status, void *user_data);

/* Allocator for outputs whose size is known only after negotiation
 * (allgather, alltoall; reducescatter without an output tensor). Called
 * once per output with its byte size (may be 0); returns memory for it, or
 * NULL to fail the request with WEFT_ERR_NO_MEMORY. (Where the others need
 * this rank's part of the collective, which runs through the coordinator,
 * the world fails too, naming the tensor; in shared memory only this
 * request fails.) The memory then belongs to the caller.
 * Thread: the engine thread, or, for an operation of a one-host group that
 * completes in shared memory (design.md section 3), the thread that completes it:
 * the submitting thread, a thread in weft_wait()/weft_test() on the request,
 * or the engine thread. Never twice at once for one request; an allocator
 * shared by requests that may complete concurrently must be thread-safe.
 * Must not call weft functions on the request's world. */
typedef void *(*weft_alloc_fn)(size_t bytes, void *alloc_ctx);

/* Options common to every operation. Pass NULL for all defaults. */
typedef struct weft_op_options {
  size_t struct_size;     /* sizeof(weft_op_options), set by WEFT_OP_OPTIONS_INIT */
  double prescale;        /* allreduce/reducescatter: multiply inputs first (1.0) */
  double postscale;       /* allreduce/reducescatter: multiply the result (1.0) */
  int priority;           /* among operations ready at the coordinator, higher runs first (0); small ops of a
                             one-host group that complete in shared memory never queue (design.md section 3) */
  weft_done_fn callback;  /* NULL: none; poll or wait instead */
  void *user_data;        /* passed to callback */
  weft_alloc_fn alloc;    /* NULL: outputs are library-owned (device inputs: device memory weft allocates
                             with the backend and frees at weft_request_free); for a device input alloc must
                             return memory of the input's device */
  void *alloc_ctx;        /* passed to alloc */
  void *consumer_stream;  /* device tensors: NULL, the request completes when the result is on the device;
                             else (a cudaStream_t) it completes as soon as the copy up is queued and this
                             stream made to wait for it: work queued there afterwards sees the result */
  double timeout_seconds; /* > 0: this operation's own deadline, from its submission, instead of
                             WEFT_TIMEOUT_SECONDS: when it passes before every rank submitted the name, every
                             rank that did fails with WEFT_ERR_TIMEOUT naming the missing ranks (a rank
                             submitting it later too, once); the world stays healthy. 0: the world's */
  int timeout_aborts;     /* 1: that timeout fails the world instead (WEFT_ERR_TIMEOUT on every rank,
                             sticky; to recover, weft_finalize and weft_init on every rank), as TensorFlow's
                             collective timeout aborts its collective executor. Needs timeout_seconds > 0 */
  uint64_t instance_key;  /* != 0: the operation is instance instance_key (seed 004's instance_key) instead of
                             a name: pass name NULL (a name too is WEFT_ERR_INVALID_ARGUMENT). It is matched
                             across ranks, checked (collective, dtype, shape, op, root, ...) and held in flight
                             exactly as a name is, in a namespace of its own: no tensor name equals an
                             instance (names starting with byte 0x01 are reserved for it and rejected).
                             Errors say "instance 42: ...". Not for grouped ops or weft_join. 0: none */
  const uint64_t *depends_on; /* n_depends instance keys (each != 0, not this op's own; copied) that must
                             have completed on this rank before this operation starts here: it is not
                             submitted for agreement (nor to the one-host board: it always goes through the
                             coordinator) until the latest operation submitted on this rank, in any group,
                             with each key has completed. All completed with WEFT_OK: it starts. One failed:
                             it completes with that status, "instance 43: depends on instance 42, which
                             failed on rank 1: <its error>". One not submitted on this rank yet, or still
                             pending, when this operation's deadline passes (timeout_seconds, else the
                             world's, counted from its submission):
                             WEFT_ERR_TIMEOUT naming the instance waited for and whether it was ever
                             submitted (with timeout_aborts the world fails, as for any own timeout); the
                             other ranks' matching operations are not told (they wait for their own
                             deadlines). The world's failure fails it as any pending request. While it waits
                             weft_request_cancel is WEFT_ERR_NOT_SUPPORTED. Not for grouped ops or weft_join */
  int n_depends;          /* entries of depends_on, 0 .. WEFT_MAX_DEPENDS (0) */
} weft_op_options;

#define WEFT_MAX_DEPENDS 64

#define WEFT_OP_OPTIONS_INIT {sizeof(weft_op_options), 1.0, 1.0, 0, NULL, NULL, NULL, NULL, NULL, 0.0, 0, 0, NULL, 0}

/* Every operation below:
 *  - is non-blocking: it validates its arguments, copies the descriptors and
 *    enqueues; *req receives a new request handle (never NULL on success);
 *  - takes a name unique among this rank's requests in use in the group
 *    (1..255 bytes, copied; or NULL with opt->instance_key: the instance
 *    then stands for the name throughout); a name in use is
 *    WEFT_ERR_INVALID_ARGUMENT. A
 *    name is in use from its submission until the caller has seen the
 *    request complete: weft_wait() or weft_test() returned its final status,
 *    its callback returned, or weft_request_free(); a request freed while
 *    pending gives its name up when it completes. (Not when it merely
 *    completes: one that completed at once on one rank would free the name
 *    there sooner than elsewhere, and the ranks' checks would disagree.)
 *    The same name on every rank denotes the same collective;
 *  - fails locally (WEFT_ERR_INVALID_ARGUMENT, nothing enqueued, *req NULL)
 *    on misuse, with weft_last_error() naming the problem;
 *  - completes with WEFT_ERR_MISMATCH on every rank when ranks disagree
 *    (including a 0-d tensor passed to allgather, alltoall or reducescatter,
 *    which the coordinator reports so that every rank sees the same error).
 * The caller must keep every data buffer valid until completion. */

/* out = op over ranks of in (elementwise), times prescale/postscale.
 * in and out have the same dtype and shape on every rank; out->data may equal
 * in->data (in place). */
WEFT_API weft_status weft_allreduce(weft_group *g, const char *name, const weft_tensor *in,
                                    const weft_tensor *out, weft_reduce_op op,
                                    const weft_op_options *opt, weft_request **req);

/* n allreduces enqueued atomically, negotiated together (fused when they
 * fit the fusion buffer) and completed as one request: tensor i is named
 * "<name>.<i>" (name at most 248 bytes). ins[i]/outs[i] as for
 * weft_allreduce. The request completes when all have, with the first
 * error if any; opt->callback runs once, for the whole group. */
WEFT_API weft_status weft_grouped_allreduce(weft_group *g, const char *name, int n, const weft_tensor *ins,
                                            const weft_tensor *outs, weft_reduce_op op,
                                            const weft_op_options *opt, weft_request **req);

/* n allgathers enqueued atomically, negotiated together (fused when they fit
 * the fusion buffer) and completed as one request, like
 * weft_grouped_allreduce: tensor i is named "<name>.<i>" (name at most 248
 * bytes); ins[i] as for weft_allgather. Tensor i's output:
 * weft_request_output_at(req, i, ...). opt->alloc serves every output. */
WEFT_API weft_status weft_grouped_allgather(weft_group *g, const char *name, int n, const weft_tensor *ins,
                                            const weft_op_options *opt, weft_request **req);

/* n reducescatters, grouped the same way: ins[i]/outs[i] as for
 * weft_reducescatter (outs may be NULL: every output library-owned). Tensor
 * i's output: weft_request_output_at(req, i, ...). */
WEFT_API weft_status weft_grouped_reducescatter(weft_group *g, const char *name, int n, const weft_tensor *ins,
                                                const weft_tensor *outs, weft_reduce_op op,
                                                const weft_op_options *opt, weft_request **req);

/* Concatenation along dim 0 of every rank's in, in rank order. in->ndim >= 1;
 * dims 1.. agree across ranks; dim 0 may differ. The output is available
 * through weft_request_output() (library-owned or from opt->alloc). */
WEFT_API weft_status weft_allgather(weft_group *g, const char *name, const weft_tensor *in,
                                    const weft_op_options *opt, weft_request **req);

/* Copies root's tensor into every rank's tensor (in place; same dtype and
 * shape everywhere). root is a rank of the group. */
WEFT_API weft_status weft_broadcast(weft_group *g, const char *name, const weft_tensor *inout,
                                    int root, const weft_op_options *opt, weft_request **req);

/* Rank i sends rows [sum(splits[0..j)), +splits[j]) of in (dim 0) to rank j;
 * receives the rows every rank sends it, concatenated in rank order.
 * splits: group-size entries >= 0 summing to at most in->shape[0]; NULL means
 * even splits (dim 0 must divide by the group size). in->ndim >= 1; dims 1..
 * agree across ranks. Output and received splits via weft_request_output()
 * and weft_request_recv_splits(). */
WEFT_API weft_status weft_alltoall(weft_group *g, const char *name, const weft_tensor *in,
                                   const int64_t *splits, const weft_op_options *opt,
                                   weft_request **req);

/* Reduces in across ranks and leaves rank i with its slice of dim 0: the
 * first (dim0 % size) ranks get dim0/size + 1 rows, the others dim0/size.
 * in->ndim >= 1, same shape everywhere. out has the slice's shape; out->data
 * NULL means library-owned output (see weft_request_output()). */
WEFT_API weft_status weft_reducescatter(weft_group *g, const char *name, const weft_tensor *in,
                                        const weft_tensor *out, weft_reduce_op op,
                                        const weft_op_options *opt, weft_request **req);

/* Permutes tensors among the ranks (TensorFlow's CollectivePermute): rank
 * r sends in to group rank perm[r] and receives into out the in of the
 * rank q with perm[q] == r (a fixed point, perm[r] == r, copies in to out).
 * perm has n entries, n the group size, and must be a permutation of
 * 0..n-1 (each rank once): otherwise WEFT_ERR_INVALID_ARGUMENT at once,
 * locally, naming the entry out of range or the two entries that repeat
 * one rank. Every rank passes the same perm, dtype and shape: ranks that
 * differ get WEFT_ERR_MISMATCH on every rank, naming the two ranks and the
 * first index where their perms differ. in and out have the same dtype and
 * shape; out->data may equal in->data (in place), other overlaps are
 * refused. Host tensors only (WEFT_ERR_NOT_SUPPORTED for a device tensor).
 * opt: prescale/postscale do not apply. weft_request_output() gives out.
 * perm is copied. weft_request_algorithm() reports "direct" (each rank one
 * send and one receive, both in flight at once). */
WEFT_API weft_status weft_permute(weft_group *g, const char *name, const weft_tensor *in,
                                  const weft_tensor *out, const int *perm, int n,
                                  const weft_op_options *opt, weft_request **req);

/* Completes when every rank of the group has called it with this name.
 * name may be NULL: barriers are then matched by call order. */
WEFT_API weft_status weft_barrier(weft_group *g, const char *name, const weft_op_options *opt,
                                  weft_request **req);

/* This rank has no more data (uneven epochs): until every rank of the group
 * has joined, it takes part in the others' allreduces with the identity of
 * their op (zeros for sum/average, +inf for min, ...; average still divides
 * by the group size) and in their barriers; allgather, broadcast, alltoall
 * and reducescatter fail on every rank while a rank has joined. Completes
 * when every rank has joined; weft_request_last_joined() then gives the rank
 * that joined last. One join in flight per rank and group. Non-blocking. */
WEFT_API weft_status weft_join(weft_group *g, const weft_op_options *opt, weft_request **req);

/* ------------------------------------------------------------------ point-to-point */
/* weft_recv's src: a message from any member of the group. */
#define WEFT_ANY_SOURCE (-2)

/* Sends in to group rank dst of g (not this rank) under key (any number:
 * torch.distributed's tag). Non-blocking, as the collectives: *req receives
 * a request (weft_wait/weft_test/weft_request_free; opt: only callback and
 * user_data apply). Host tensors only (a device tensor is
 * WEFT_ERR_NOT_SUPPORTED). No name and no coordinator: the receiver matches
 * messages itself. The k-th send from rank a to rank b under (g, key) meets
 * the k-th weft_recv that b posts for (g, key) from a or from any source;
 * messages under different keys may be received in any order. Both sides
 * must agree on dtype and element count (shapes may differ): otherwise
 * both requests fail with WEFT_ERR_MISMATCH naming both sides' values. The
 * send completes once the receiver has matched it and in's buffer may be
 * reused. A peer that dies fails the world (WEFT_ERR_PEER_LOST naming it); a
 * peer that finalizes fails what is pending with it; weft_abort fails all.
 * An operation not complete by the world's timeout fails with
 * WEFT_ERR_TIMEOUT, and so does the world (the peer's state is unknown).
 * The group must not be destroyed while transfers in it are pending. */
WEFT_API weft_status weft_send(weft_group *g, const weft_tensor *in, int dst, uint64_t key,
                               const weft_op_options *opt, weft_request **req);
/* Receives into out (its buffer, dtype and element count) from group rank
 * src of g, or WEFT_ANY_SOURCE, under key; as weft_send. */
WEFT_API weft_status weft_recv(weft_group *g, const weft_tensor *out, int src, uint64_t key,
                               const weft_op_options *opt, weft_request **req);
/* A completed weft_recv: the group rank it received from (what
 * WEFT_ANY_SOURCE resolved to) and its status; WEFT_IN_PROGRESS while it
 * is pending; WEFT_ERR_INVALID_ARGUMENT for a request that is not a recv. */
WEFT_API weft_status weft_request_source(weft_request *req, int *src);

/* ------------------------------------------------------------------ requests */
/* Non-blocking: WEFT_IN_PROGRESS while pending, else the final status. */
WEFT_API weft_status weft_test(weft_request *req);

/* Blocks until the request completes or timeout_seconds pass (< 0: until the
 * operation's own deadline, which always exists). Returns the final status,
 * or WEFT_IN_PROGRESS if the wait timed out (the request keeps running).
 * Must not be called from a completion callback. */
WEFT_API weft_status weft_wait(weft_request *req, double timeout_seconds);

/* Withdraws an operation whose collective has not started: non-blocking,
 * any thread. WEFT_OK means the group's coordinator is asked: if no
 * response for the name was out yet, the request completes with
 * WEFT_ERR_CANCELLED ("tensor 'x': cancelled by rank R"), and so does every
 * other rank's matching request, now or when it is submitted (each once,
 * within WEFT_TIMEOUT_SECONDS); the world stays healthy and the name may be
 * used again. If every rank's request had already met, the request runs and
 * completes as usual (cancellation raced with the agreement). Errors:
 * WEFT_ERR_MISUSE for a complete or running request ("it cannot be
 * cancelled"), or an invalid handle; WEFT_ERR_NOT_SUPPORTED for a grouped
 * operation, a join, or an operation pending on the one-host board (design.md
 * section 3; WEFT_FAST=0 avoids the board). The handle stays the caller's. */
WEFT_API weft_status weft_request_cancel(weft_request *req);

/* The error message of a completed request ("" if none or still pending).
 * Owned by the request. */
WEFT_API const char *weft_request_error(weft_request *req);

/* The algorithm that ran a completed request: a static string (never NULL,
 * never freed). For an operation negotiated through the coordinator, the
 * registry's choice ("direct", "ring", "rd", "tree", "chain", "pairwise",
 * "hier", "cma", "shm", ...): with WEFT_ALGO_<COLL>=name set, name itself,
 * or the algorithm chosen instead when name declined (the library falls
 * back with one warning, so this is how to tell). "board" for an operation
 * completed on the one-host fast path (shared memory, no coordinator; see
 * design.md section 3 and WEFT_FAST). Fused tensors report the fused collective's
 * algorithm. A request that failed after its algorithm was chosen still
 * reports it. "" while the request is pending, for a join and a barrier
 * that went through the coordinator (nothing to run; a barrier completed on
 * the fast path is "board"), for a request that failed before an algorithm
 * was chosen (mismatch, timeout in negotiation, ...), and for an invalid
 * handle.
 * Grouped ops (weft_grouped_*): the algorithm of its tensors when they all
 * ran the same one, else "mixed". Non-blocking. */
WEFT_API const char *weft_request_algorithm(const weft_request *req);

/* The output tensor of a completed request: for allreduce/broadcast/
 * reducescatter the caller's tensor (or the library-owned reducescatter
 * output); for allgather/alltoall the gathered output. out->shape points
 * into the request (valid until free). If the output came from opt->alloc,
 * the caller owns out->data; otherwise the request does. For a device
 * input, out->data is device memory and out->device/device_kind say which
 * (out->stream is NULL). */
WEFT_API weft_status weft_request_output(weft_request *req, weft_tensor *out);

/* Grouped ops (weft_grouped_*): the output of tensor i (0..n-1) of a
 * completed group, as weft_request_output gives it for a single op; valid
 * until the group's request is freed. */
WEFT_API weft_status weft_request_output_at(weft_request *req, int i, weft_tensor *out);

/* Alltoall: the number of dim-0 rows received from each rank (group-size
 * entries, owned by the request). */
WEFT_API weft_status weft_request_recv_splits(weft_request *req, const int64_t **splits, int *n);

/* Join: the rank (in the group) that joined last. */
WEFT_API weft_status weft_request_last_joined(weft_request *req, int *rank);

/* Frees the handle (and library-owned outputs). A pending request is
 * detached: it completes in the background and is freed then; its buffers
 * must stay valid until that happens (or until weft_finalize returns). */
WEFT_API weft_status weft_request_free(weft_request *req);

/* ------------------------------------------------------------------ timeline */
/* Starts writing a Chrome-trace JSON timeline (chrome://tracing, Perfetto)
 * to path: one lane per tensor with NEGOTIATE_<OP> and <OP> phases (bytes,
 * algorithm), on rank 0 a mark when each rank became ready, CYCLE_START marks
 * if mark_cycles. Only rank 0 writes, unless path contains "%r" (replaced by
 * the rank: every rank writes its own). WEFT_TIMELINE=path does this at init.
 * WEFT_ERR_MISUSE if a timeline is already being written. Any thread. */
WEFT_API weft_status weft_timeline_start(weft_world *world, const char *path, int mark_cycles);
/* Finishes and closes the timeline (valid JSON from then on). Idempotent. */
WEFT_API weft_status weft_timeline_stop(weft_world *world);

/* ------------------------------------------------------------------ algorithms by name */
/* The collectives that have algorithms to choose from (a barrier and a join
 * move no data). */
typedef enum weft_collective {
  WEFT_COLLECTIVE_ALLREDUCE = 0,
  WEFT_COLLECTIVE_ALLGATHER = 1,
  WEFT_COLLECTIVE_BROADCAST = 2,
  WEFT_COLLECTIVE_ALLTOALL = 3,
  WEFT_COLLECTIVE_REDUCESCATTER = 4,
  WEFT_COLLECTIVE_COUNT_ = 5
} weft_collective;

/* "allreduce" ...; "unknown" for an unknown collective. */
WEFT_API const char *weft_collective_name(weft_collective c);

/* The algorithms of collective c are numbered 0 .. weft_algorithm_count(c) - 1,
 * in the registry's table order; numbers are stable within one build of the
 * library only, names across builds (store names, not numbers). These are
 * the names WEFT_ALGO_<COLL> takes and weft_request_algorithm() reports
 * ("board", the one-host fast path, is not among them: it is chosen at
 * submission, never forced; see WEFT_FAST). Whether a listed algorithm
 * runs a given call depends on where the group lives and the sizes: a forced
 * one that declines a call gives way to the automatic choice with one
 * warning, and weft_request_algorithm() names what ran. A WEFT_ALGO_<COLL>
 * naming no algorithm of its collective fails weft_init with
 * WEFT_ERR_NOT_FOUND, naming the setting and the names it takes.
 * All three: no world needed, any thread, non-blocking. */
/* The number of algorithms of c; -1 for an unknown collective. */
WEFT_API int weft_algorithm_count(weft_collective c);
/* The name of c's algorithm number index (a static string), or NULL when
 * index is out of range or c unknown. */
WEFT_API const char *weft_algorithm_name(weft_collective c, int index);
/* *index = the number of c's algorithm named name (exact match, as
 * WEFT_ALGO_<COLL> compares). WEFT_ERR_NOT_FOUND, with a message listing
 * c's names, when there is none (*index = -1); WEFT_ERR_INVALID_ARGUMENT for
 * an unknown c or a NULL name or index. */
WEFT_API weft_status weft_algorithm_lookup(weft_collective c, const char *name, int *index);

/* ------------------------------------------------------------------ locality */
/* Where a rank of the world runs, as the rendezvous at weft_init learned it
 * (seed 004's device locality; nothing is asked of the peer at call time).
 * Fill with WEFT_LOCALITY_INIT: weft writes only the fields that fit in
 * struct_size, so a caller built against an older header keeps working. */
#define WEFT_HOST_NAME_MAX 255
typedef struct weft_locality {
  size_t struct_size;   /* sizeof(weft_locality), set by WEFT_LOCALITY_INIT */
  char host[WEFT_HOST_NAME_MAX + 1]; /* its host name (WEFT_HOSTNAME, else gethostname) */
  int host_index;       /* its host among the world's hosts (as weft_cross_rank counts them:
                           hosts are (name, boot id) pairs) */
  int host_count;       /* the world's hosts (as weft_cross_size) */
  int local_rank;       /* its rank among its host's ranks (as the rendezvous computed it: a launcher's
                           WEFT_LOCAL_RANK may make weft_local_rank() say otherwise on that rank) */
  int local_size;       /* ranks on its host */
  int64_t pid;          /* its process id, on its host */
  uint64_t incarnation; /* identifies the process holding the rank in this world: two processes that
                           held the same rank (a restart) differ. Never 0 */
  unsigned device_kinds; /* bit (1u << WEFT_DEVICE_KIND_*) for each kind of device its process could
                           stage tensors from at weft_init without loading anything: SIM (built in)
                           always; CUDA when a CUDA runtime was loaded in the process */
} weft_locality;

#define WEFT_LOCALITY_INIT {sizeof(weft_locality), "", -1, -1, -1, -1, -1, 0, 0u}

/* Fills *out with where world rank rank (0 .. weft_size() - 1, this rank
 * included) runs. WEFT_ERR_MISUSE for an invalid world;
 * WEFT_ERR_INVALID_ARGUMENT for a rank out of range, a NULL out or a
 * struct_size below the first two fields. Non-blocking, any thread; the
 * answer never changes while the world lives (also after a failure). */
WEFT_API weft_status weft_peer_locality(const weft_world *world, int rank, weft_locality *out);

/* ------------------------------------------------------------------ remote execution */
/* Run registered functions on other ranks (tasks) on objects that stay where
 * they are (TFRT's RemoteExecute; design.md section "Remote execution").
 * A rank serves calls once it has called any weft_remote_* function (usually
 * weft_remote_register, before the job's first call reaches it); calls that
 * arrive earlier wait for that, within their deadline. Objects are dense
 * host tensors in the callee's store, named by ids the caller makes. Calls
 * travel over the world's authenticated connections; tensors of 64 KiB or
 * more (any size) on its point-to-point data path (shared memory or CMA on
 * one host, TCP across hosts), smaller ones inline. A callee that
 * finalized, or a failed world, fails calls with WEFT_ERR_SHUTDOWN; a dead callee with
 * WEFT_ERR_PEER_LOST naming it. What a dead caller owned on a callee is
 * freed there 2 s after its death is seen. Free every weft_remote_call
 * before weft_finalize (which fails pending ones with WEFT_ERR_SHUTDOWN and
 * waits at most 10 s for a function still running). */

/* An object id: the rank that made it and its number there (local 0 is no
 * id; ids are never reused within a world). */
typedef struct weft_remote_id {
  int32_t owner;
  uint64_t local;
} weft_remote_id;

typedef struct weft_remote_call weft_remote_call;     /* one operation in flight (opaque) */
typedef struct weft_remote_result weft_remote_result; /* a running function's outputs (opaque) */

/* A registered function. Runs on the callee's remote worker thread (never
 * its engine thread), one call at a time per rank. in: n_in host tensors,
 * read-only, valid during the call. Produces each output with
 * weft_remote_result_alloc; returns WEFT_OK, or an error status (with
 * weft_remote_result_fail's message) that fails the call and its outputs.
 * May not call weft functions on its world other than weft_remote_result_*. */
typedef weft_status (*weft_remote_fn)(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out);

/* Output i (0..n_out-1) of the running function: a tensor of dtype and shape
 * whose memory (*data, zeroed) the store owns. Twice for one i, or a bad
 * dtype/shape: WEFT_ERR_INVALID_ARGUMENT. */
WEFT_API weft_status weft_remote_result_alloc(weft_remote_result *out, int i, weft_dtype dtype, int ndim,
                                              const int64_t *shape, void **data);
/* The message the call fails with when the function returns an error (copied). */
WEFT_API weft_status weft_remote_result_fail(weft_remote_result *out, const char *message);

/* Registers fn under name (1..255 bytes, copied) taking n_in inputs and
 * producing n_out outputs (0..1024 each) on this rank. A name registered
 * already: WEFT_ERR_INVALID_ARGUMENT naming it. Any thread; non-blocking. */
WEFT_API weft_status weft_remote_register(weft_world *world, const char *name, int n_in, int n_out, weft_remote_fn fn,
                                          void *ctx);

/* A fresh id owned by this rank (never 0, never reused in this world). Any thread. */
WEFT_API weft_status weft_remote_id_new(weft_world *world, weft_remote_id *out);

/* Per-call options. Pass NULL for all defaults. */
typedef struct weft_remote_options {
  size_t struct_size;     /* sizeof(weft_remote_options), set by WEFT_REMOTE_OPTIONS_INIT */
  double timeout_seconds; /* > 0: this call's deadline from its start; 0: WEFT_TIMEOUT_SECONDS. Past it the
                             call fails with WEFT_ERR_TIMEOUT and the callee is told to drop it */
  int device;             /* execute: where the outputs live on the callee (WEFT_DEVICE_CPU; the store
                             holds host memory, so another device fails the call's device check) */
  weft_alloc_fn alloc;    /* fetch: memory for the tensor (called once, on the caller's remote service
                             thread); NULL: library-owned, freed with the call */
  void *alloc_ctx;
} weft_remote_options;
#define WEFT_REMOTE_OPTIONS_INIT {sizeof(weft_remote_options), 0.0, WEFT_DEVICE_CPU, NULL, NULL}

/* An execute input: an object id on the callee, or (tensor != NULL) a host
 * tensor sent inline, copied at the call. */
typedef struct weft_remote_input {
  weft_remote_id id;
  const weft_tensor *tensor;
} weft_remote_input;

/* Contexts: a caller's session on a callee (task); objects live in one.
 * Blocking, with the world's deadline; any thread. idle_seconds > 0: the
 * callee collects the context (and frees its objects) when nothing used it
 * (a call, weft_remote_keepalive) for that long; 0: never. Unknown or
 * closed context: WEFT_ERR_NOT_FOUND naming it and the task. */
WEFT_API weft_status weft_remote_context_create(weft_world *world, int task, double idle_seconds, uint64_t *ctx);
WEFT_API weft_status weft_remote_context_close(weft_world *world, int task, uint64_t ctx);
WEFT_API weft_status weft_remote_keepalive(weft_world *world, int task, uint64_t ctx);

/* Runs function name on task with n_in inputs, storing its n_out outputs
 * under outputs (ids from weft_remote_id_new); the last n_meta outputs'
 * dtype and shape come back with the completion (weft_remote_call_meta).
 * Non-blocking: *call receives the handle. Inputs may be outputs of calls
 * still running (chained calls): the callee waits for them. The callee
 * checks, in TFRT's order and before anything runs: the context ("context
 * 7 not found on rank 1"), the program ("can't find program: NAME"), the
 * result count, the argument count ("expected 2 arguments, got 3") and the
 * device; the first failing check fails the call (WEFT_ERR_NOT_FOUND or
 * WEFT_ERR_INVALID_ARGUMENT). A callee that dies fails the call with
 * WEFT_ERR_PEER_LOST naming it. Local misuse (bad task, n_meta > n_out, a
 * zero id): WEFT_ERR_INVALID_ARGUMENT, nothing sent, *call NULL. */
WEFT_API weft_status weft_remote_execute(weft_world *world, int task, uint64_t ctx, const char *name, int n_in,
                                         const weft_remote_input *inputs, int n_out, const weft_remote_id *outputs,
                                         int n_meta, const weft_remote_options *opt, weft_remote_call **call);
/* Stores a copy of tensor (host memory) on task under id. Non-blocking. */
WEFT_API weft_status weft_remote_put(weft_world *world, int task, uint64_t ctx, const weft_tensor *tensor,
                                     weft_remote_id id, const weft_remote_options *opt, weft_remote_call **call);
/* Brings object id back (waiting on the callee while it is being produced);
 * weft_remote_call_output gives it. Non-blocking. */
WEFT_API weft_status weft_remote_fetch(weft_world *world, int task, uint64_t ctx, weft_remote_id id,
                                       const weft_remote_options *opt, weft_remote_call **call);
/* Frees n objects on task. Known ones are freed even when others are not:
 * the call then fails with WEFT_ERR_NOT_FOUND naming every unknown id
 * ("unknown ids {0, 7}, {0, 9}"). Non-blocking. */
WEFT_API weft_status weft_remote_delete(weft_world *world, int task, uint64_t ctx, int n, const weft_remote_id *ids,
                                        const weft_remote_options *opt, weft_remote_call **call);

/* As weft_test / weft_wait for a remote call (timeout_seconds < 0: until the
 * call's own deadline). Any thread. */
WEFT_API weft_status weft_remote_test(weft_remote_call *call);
WEFT_API weft_status weft_remote_wait(weft_remote_call *call, double timeout_seconds);
/* Gives up on a pending call: it completes at once with WEFT_ERR_CANCELLED
 * and the callee drops it if it has not started it (one already running
 * finishes there, its outputs kept). WEFT_ERR_MISUSE for a complete call.
 * Non-blocking, any thread. */
WEFT_API weft_status weft_remote_cancel(weft_remote_call *call);
/* The error message of a completed call ("" if none or pending); owned by the call. */
WEFT_API const char *weft_remote_call_error(weft_remote_call *call);
/* Execute: dtype and shape of the i-th of the last n_meta outputs (i in
 * 0..n_meta-1; data NULL; shape owned by the call). */
WEFT_API weft_status weft_remote_call_meta(weft_remote_call *call, int i, weft_tensor *meta);
/* Fetch: the tensor (data from opt->alloc, then the caller's, or owned by the call). */
WEFT_API weft_status weft_remote_call_output(weft_remote_call *call, weft_tensor *out);
/* Frees the handle; a pending call is cancelled first. */
WEFT_API weft_status weft_remote_call_free(weft_remote_call *call);

/* What this rank's store holds (for monitoring and tests). */
typedef struct weft_remote_stats {
  int64_t objects;        /* objects (with placeholders) in this rank's contexts */
  int64_t contexts;       /* contexts open on this rank */
  int64_t calls_pending;  /* this rank's calls not complete */
  int64_t orphans_freed;  /* objects freed because their owner died */
  int64_t collected;      /* contexts collected for idleness */
} weft_remote_stats;
WEFT_API weft_status weft_remote_stats_get(weft_world *world, weft_remote_stats *out);

/* ------------------------------------------------------------------ info */
/* "0.1.0" */
WEFT_API const char *weft_version(void);

/* WEFT_OK if tensors of device_kind (WEFT_DEVICE_KIND_*; AUTO: CUDA) can be
 * used in this process: its backend loads and sees at least one device, and
 * *count (may be NULL) receives the number of devices. Else
 * WEFT_ERR_NOT_SUPPORTED with weft_last_error() saying why (CUDA: every
 * library tried and dlerror's reason, or the runtime's own text, e.g. the
 * driver is too old), the same answer every time in a process; an unknown
 * kind is WEFT_ERR_INVALID_ARGUMENT. Loads the backend on first use (CUDA:
 * dlopen); needs no world. Any thread. */
WEFT_API weft_status weft_device_available(int device_kind, int *count);

/* ------------------------------------------------------------------ elastic
 * Under `weftrun --min-np ...` (elastic mode; weftrun sets WEFT_ELASTIC_ADDR
 * and WEFT_ELASTIC_ID) a job outlives the loss of ranks: the processes stay,
 * the world is re-formed. weft_init then takes neither rank, size nor
 * address from the environment (nor cfg->rank/size: WEFT_ERR_INVALID_ARGUMENT):
 * it asks weftrun for this process's place in the job's next world and gets
 * the same generation as every other live process that asked (weftrun waits
 * until all its live processes have asked, or --elastic-timeout). Ranks
 * follow weftrun's process order (host order, then slot), so survivors keep
 * their relative order. A world's handshake is keyed by its generation: a
 * process of another generation can never join it.
 *
 * Recovery: when a world fails (a peer's death fails pending work naming
 * the rank, WEFT_ERR_PEER_LOST, as outside elastic mode), the caller
 * weft_finalize()s it (every request of the old world is complete or
 * completes with an error; its shared memory, sockets and threads are
 * released) and calls weft_init() again, getting a new handle, usually with
 * fewer ranks and new rank numbers. Nothing of the old world survives:
 * process sets (weft_group_create/resolve) must be created again, keyed
 * groups resolved again, timelines restarted; the training state is the
 * caller's (keep a commit, broadcast it from the new rank 0). weft_init
 * fails (the driver's message) when weftrun stops the job: fewer than
 * --min-np processes left, --reset-limit re-formations reached, or a
 * process already finished (exited 0: the job is ending). */

/* The world's generation in elastic mode (1 for the first world, larger for
 * each re-formation; every member of a world sees the same); 0 outside
 * elastic mode or for an invalid world. Non-blocking, any thread. */
WEFT_API uint64_t weft_generation(const weft_world *world);

/* Growth (weftrun --host-discovery-script): when discovery finds free
 * slots, weftrun starts new processes there (up to --max-np); their
 * weft_init waits for a place. The running members are not interrupted:
 * they ask, at a point of their choosing (a commit), with
 * weft_elastic_hosts_updated, and on an update re-form as after a failure
 * (weft_finalize, weft_init: the next generation takes the new processes
 * in; ranks follow weftrun's process order, where a process started later
 * comes after every earlier one, so rank 0 stays an old member), then broadcast the
 * training state from rank 0 (the newcomers have none). A member that does
 * not ask within --elastic-timeout of a newcomer's question is not left
 * out: the newcomers wait (their weft_init fails at its own deadline).
 *
 * Removal: when discovery lists fewer slots on a host than it runs
 * processes, weftrun removes its highest-numbered ones (never below
 * --min-np). The members learn it the same way (WEFT_HOSTS_REMOVED) and
 * re-form at the same point; the removed processes re-form too, and their
 * weft_init does not return: weftrun stops them (SIGTERM, SIGKILL after
 * --grace; should its refusal come first, weft_init fails with
 * WEFT_ERR_SHUTDOWN). Their exit is no failure of the job. The training
 * state of the others is current: no restore, no broadcast is needed.
 *
 * weft_elastic_hosts_updated asks weftrun (one authenticated TCP question,
 * at most about 10 s) whether the membership changed since this world's
 * generation; *update gets WEFT_HOSTS_* bits (0: no change). Not
 * collective: members that must agree to re-form together ask on one rank
 * and broadcast the answer (weft.torch.elastic does this at every
 * commit(), as Horovod's State.check_host_updates). Outside elastic mode
 * WEFT_OK with *update 0 (the world never changes). Errors: MISUSE (no live
 * world), INVALID_ARGUMENT (update NULL), the driver's refusal
 * (SHUTDOWN/ABORTED: the job is ending), PEER_LOST/TIMEOUT (weftrun
 * unreachable). Blocking; any thread. */
enum { WEFT_HOSTS_REMOVED = 1, WEFT_HOSTS_ADDED = 2 }; /* Horovod's HostUpdateResult bits */
WEFT_API weft_status weft_elastic_hosts_updated(const weft_world *world, int *update);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */

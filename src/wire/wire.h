/* wire.h - framed, versioned, bounds-checked encoding of every message that
 * crosses a connection (after the authentication handshake, see
 * bootstrap/auth.h).
 *
 * Frame = 24-byte header, then `length` payload bytes:
 *   u32 magic "WEFT" (0x54464557, little-endian), u8 version (1), u8 type,
 *   u16 flags (0), u32 src rank, u32 reserved (0), u64 length.
 * All integers little-endian; doubles as IEEE-754 bit patterns in a u64;
 * strings as u16 length + bytes (no NUL). The header is validated (magic,
 * version, known type, length <= the cap for its type) before any payload is
 * read or allocated. Decoders never read past the payload and reject
 * trailing bytes. */
#ifndef WF_WIRE_H
#define WF_WIRE_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define WF_WIRE_MAGIC 0x54464557u
#define WF_WIRE_VERSION 1      /* CACHED and RESEND (types 10, 11) were added without changing any layout */
#define WF_FRAME_HDR_SIZE 24
#define WF_NAME_MAX 255          /* bytes in a tensor name */
#define WF_ERRMSG_MAX 4096       /* bytes in an error message */
#define WF_HOST_MAX 255          /* bytes in a host name / address */
#define WF_SETTINGS_TEXT_MAX 3072 /* bytes of the agreed settings' text in a HELLO */
#define WF_SETTINGS_DIGEST 32    /* bytes of its digest (SHA-256) */
#define WF_MAX_RANKS 65536       /* ranks in a job */
#define WF_UNIT_MAX 65536        /* tensors in a grouped op */
#define WF_DATA_SUBHDR_SIZE 16   /* u64 seq, u32 index, u32 reserved */

typedef enum wf_msg_type {
  WF_MSG_HELLO = 1,      /* bootstrap: a rank registers with rank 0 */
  WF_MSG_PEERS = 2,      /* bootstrap: rank 0 sends everyone the peer table */
  WF_MSG_REQUESTS = 3,   /* rank -> coordinator: tensors ready here */
  WF_MSG_RESPONSES = 4,  /* coordinator -> ranks: what to run, in order */
  WF_MSG_DATA = 5,       /* collective payload: sub-header + bytes */
  WF_MSG_HEARTBEAT = 6,  /* empty payload */
  WF_MSG_ABORT = 7,      /* payload: a string, the reason */
  WF_MSG_BYE = 8,        /* orderly shutdown of the sender; empty payload */
  WF_MSG_STALL = 9,      /* coordinator -> waiting ranks: a stall report (a string, like ABORT) */
  WF_MSG_CACHED = 10,    /* rank -> coordinator: tensors ready here, named by response-cache id */
  WF_MSG_RESEND = 11,    /* coordinator -> rank: cache ids it could not resolve: send them in full */
  WF_MSG_P2P_SEND = 12,  /* sender -> receiver: a point-to-point message is ready (small ones inline) */
  WF_MSG_P2P_REPLY = 13, /* receiver -> sender: matched (clear to send / received) or mismatched */
  WF_MSG_GROUP_JOIN = 14,  /* rank -> group leader (rank 0): join a keyed group, or create one by members */
  WF_MSG_GROUP_REPLY = 15, /* group leader -> joiner: the group's members, or why not */
  WF_MSG_CANCEL = 16,    /* rank -> coordinator: withdraw this rank's request for a name (weft_request_cancel) */
  WF_MSG_STEP_REQ = 17,  /* rank -> group leader: the step sequence of a graph key (weft_step_next/refresh) */
  WF_MSG_STEP_REPLY = 18, /* group leader -> rank: its next step id for the key, or why not */
  WF_MSG_REMOTE_CALL = 19,  /* caller -> callee: a remote-execution operation (remote/; remotemsg.c) */
  WF_MSG_REMOTE_REPLY = 20, /* callee -> caller: its outcome, metadata, a fetched tensor */
  WF_MSG_TYPE_MAX_ = 21
} wf_msg_type;
#define WF_MSG_RESERVED_ 0 /* numbers below WF_MSG_TYPE_MAX_ not in use */

/* Collective kinds (requests and responses). */
typedef enum wf_coll {
  WF_COLL_ALLREDUCE = 0,
  WF_COLL_ALLGATHER = 1,
  WF_COLL_BROADCAST = 2,
  WF_COLL_ALLTOALL = 3,
  WF_COLL_REDUCESCATTER = 4,
  WF_COLL_BARRIER = 5,
  WF_COLL_JOIN = 6,      /* weft_join: this rank has no more data */
  WF_COLL_PERMUTE = 7,   /* weft_permute: rank r's tensor goes to rank perm[r] (perm in the splits) */
  WF_COLL_COUNT_ = 8
} wf_coll;

const char *wf_coll_name(wf_coll c); /* "allreduce", ...; "unknown" */

typedef struct wf_frame_hdr {
  uint8_t type;       /* wf_msg_type */
  uint16_t flags;
  uint32_t src;       /* sender's rank */
  uint64_t length;    /* payload bytes */
} wf_frame_hdr;

/* Writes the 24-byte header. */
void wf_frame_hdr_encode(uint8_t out[WF_FRAME_HDR_SIZE], const wf_frame_hdr *h);

/* Validates and decodes a header. max_ctrl caps the payload of control
 * messages (every type but DATA); max_data caps DATA payloads (sub-header
 * included). Returns WEFT_OK or WEFT_ERR_PROTOCOL with a message in err
 * (bad magic, wrong version, unknown type, length over its cap, nonzero
 * reserved field, empty DATA/HELLO/PEERS/REQUESTS/RESPONSES payload). */
weft_status wf_frame_hdr_decode(const uint8_t in[WF_FRAME_HDR_SIZE], uint64_t max_ctrl, uint64_t max_data,
                                wf_frame_hdr *h, char *err, size_t errlen);

/* ---- DATA sub-header: which collective (seq) and which message of the
 * (sender, receiver) pair within it (index, counting from 0). */
typedef struct wf_data_hdr {
  uint64_t seq;
  uint32_t index;
} wf_data_hdr;
void wf_data_hdr_encode(uint8_t out[WF_DATA_SUBHDR_SIZE], const wf_data_hdr *d);
weft_status wf_data_hdr_decode(const uint8_t in[WF_DATA_SUBHDR_SIZE], wf_data_hdr *d, char *err, size_t errlen);

/* ---- HELLO (bootstrap) */
typedef struct wf_hello_msg {
  uint32_t rank, size;
  uint32_t pid;
  char host[WF_HOST_MAX + 1];     /* host name (NUL-terminated) */
  char boot_id[64];               /* /proc/sys/kernel/random/boot_id or "" */
  char listen_addr[WF_HOST_MAX + 1]; /* "ip:port" where this rank accepts peers */
  uint8_t settings_digest[WF_SETTINGS_DIGEST]; /* SHA-256 of the agreed settings' canonical text (util/settings.h) */
  char settings[WF_SETTINGS_TEXT_MAX + 1];      /* that text, cut at a line end to fit ("" allowed) */
  uint64_t incarnation;           /* random per weft_init: a restarted rank differs (0: none) */
  uint32_t device_kinds;          /* bit 1 << WEFT_DEVICE_KIND_* per kind it has (WF_DEVICE_KINDS_MASK) */
} wf_hello_msg;

/* The device kinds a HELLO or PEERS entry may carry (weft_locality). */
#define WF_DEVICE_KINDS_MASK ((1u << WEFT_DEVICE_KIND_CUDA) | (1u << WEFT_DEVICE_KIND_SIM))

/* ---- PEERS (bootstrap): one entry per rank, in rank order. */
typedef struct wf_peer_info {
  char host[WF_HOST_MAX + 1];
  char listen_addr[WF_HOST_MAX + 1];
  uint32_t pid;
  int32_t local_rank, local_size, cross_rank, cross_size;
  uint64_t incarnation; /* the rank's random number for this weft_init (0: unknown) */
  uint32_t device_kinds; /* as HELLO's */
} wf_peer_info;
typedef struct wf_peers_msg {
  uint32_t size;
  wf_peer_info *peers; /* size entries; malloc'd by the decoder */
} wf_peers_msg;

/* ---- REQUEST: one tensor a rank is ready to run. */
/* A request's device on the wire: WEFT_DEVICE_CPU (-1) for host memory,
 * else kind * 65536 + index (kind WEFT_DEVICE_KIND_CUDA or _SIM, never
 * AUTO; index 0..65535), so that ranks compare kind and index at once. */
#define WF_DEVICE_CODE(kind, index) ((int32_t)(kind) * 65536 + (int32_t)(index))
#define WF_DEVICE_CODE_KIND(code) ((code) < 0 ? -1 : (int)((code) / 65536))
#define WF_DEVICE_CODE_INDEX(code) ((code) < 0 ? -1 : (int)((code) % 65536))

typedef struct wf_request_msg {
  uint32_t group_id;
  uint8_t coll;        /* wf_coll */
  uint8_t dtype;       /* weft_dtype */
  uint8_t reduce_op;   /* weft_reduce_op */
  uint8_t ndim;        /* 0..WEFT_MAX_DIMS */
  int32_t root;        /* broadcast root (group rank), else -1 */
  int32_t device;      /* WEFT_DEVICE_CPU, or a device: WF_DEVICE_CODE(kind, index) */
  int32_t priority;
  uint32_t unit;       /* part of a grouped op of this many tensors, named "<op name>.<i>": negotiated as one
                          unit (0: a tensor of its own); at most WF_UNIT_MAX */
  double prescale, postscale;
  int64_t shape[WEFT_MAX_DIMS];
  uint32_t nsplits;    /* alltoall, permute: group size, else 0 */
  int64_t *splits;     /* nsplits entries (permute: perm[r], the group rank r sends to); malloc'd by the decoder */
  char name[WF_NAME_MAX + 1]; /* NUL-terminated, 1..255 bytes */
} wf_request_msg;

typedef struct wf_requests_msg {
  uint32_t count;
  wf_request_msg *reqs; /* count entries; malloc'd by the decoder */
} wf_requests_msg;

/* ---- RESPONSE: run this (or fail it) now, in seq order. */
typedef enum wf_resp_type { WF_RESP_OK = 0, WF_RESP_ERROR = 1 } wf_resp_type;
typedef struct wf_response_msg {
  uint64_t seq;        /* global order within the group, from 0 */
  uint32_t group_id;
  uint8_t type;        /* wf_resp_type */
  uint8_t coll;        /* wf_coll */
  int32_t status;      /* ERROR: the weft_status to report (< 0) */
  uint32_t nnames;     /* tensors covered (fusion: > 1) */
  char **names;        /* nnames NUL-terminated strings; malloc'd */
  uint32_t nsizes;     /* allgather: dim-0 per rank (size entries);
                          alltoall: the size x size split matrix, row = sender;
                          allreduce: dtype, reduce op (| WF_AR_STAGED when a tensor is
                          on a device: the ranks run it chunk by chunk), then each
                          tensor's element count (what a joined rank needs to take part);
                          join: the rank that joined last */
  int64_t *sizes;      /* malloc'd */
  char *error;         /* ERROR: message (NUL-terminated, <= WF_ERRMSG_MAX); else NULL */
} wf_response_msg;

#define WF_AR_STAGED 256 /* in an allreduce response's sizes[1] */

typedef struct wf_responses_msg {
  uint32_t count;
  wf_response_msg *resps; /* count entries; malloc'd by the decoder */
} wf_responses_msg;

/* ---- CACHED / RESEND: compact references to the response cache
 * (negotiate/cache.h). (id, epoch) names one cache assignment of the group:
 * epochs count assignments from 1 and are never reused. */
#define WF_CACHE_MAX_IDS 65536   /* ids are < this (WEFT_CACHE_CAPACITY's maximum) */
typedef struct wf_cache_ref {
  uint32_t group_id;
  uint32_t id;         /* < WF_CACHE_MAX_IDS */
  uint64_t epoch;      /* >= 1 */
} wf_cache_ref;
typedef struct wf_cache_refs_msg {
  uint32_t count;
  wf_cache_ref *refs;  /* count entries; malloc'd by the decoder */
} wf_cache_refs_msg;

/* ---- P2P_SEND / P2P_REPLY: point-to-point transfers (engine/p2p.c),
 * matched by the receiver without the coordinator. */
#define WF_P2P_EAGER_MAX (64 * 1024) /* bytes a P2P_SEND may carry inline */
typedef struct wf_p2p_send_msg {
  uint64_t msg_id;      /* the sender's number of this message to this receiver, from 1 */
  uint64_t incarnation; /* the sender's (random per weft_init; never 0) */
  uint32_t group_id;
  uint64_t key;         /* the user's key (torch's tag) */
  uint8_t dtype;        /* weft_dtype */
  uint8_t eager;        /* 1: the count * dtype-size bytes follow inline (at most WF_P2P_EAGER_MAX) */
  uint64_t count;       /* elements */
  const uint8_t *data;  /* eager: the bytes (decoded: points into the payload, not owned) */
} wf_p2p_send_msg;
typedef enum wf_p2p_reply_status { WF_P2P_OK = 0, WF_P2P_MISMATCH = 1 } wf_p2p_reply_status;
typedef struct wf_p2p_reply_msg {
  uint64_t msg_id;      /* the P2P_SEND's */
  uint8_t status;       /* wf_p2p_reply_status */
  uint8_t dtype;        /* the receiver's dtype and element count (for the sender's mismatch message) */
  uint64_t count;
} wf_p2p_reply_msg;

/* Growable output buffer for encoders. */
typedef struct wf_buf {
  uint8_t *data;
  size_t len, cap;
  int oom; /* set when an allocation failed; later appends are dropped */
} wf_buf;
void wf_buf_free(wf_buf *b);

/* Encoders append one whole frame (header + payload) to out; src = sender's
 * rank. They return WEFT_OK, WEFT_ERR_NO_MEMORY, or WEFT_ERR_INVALID_ARGUMENT
 * when a field is out of range (name too long, ndim too big, ...). */
weft_status wf_encode_hello(wf_buf *out, uint32_t src, const wf_hello_msg *m);
weft_status wf_encode_peers(wf_buf *out, uint32_t src, const wf_peers_msg *m);
weft_status wf_encode_requests(wf_buf *out, uint32_t src, const wf_request_msg *reqs, uint32_t count);
weft_status wf_encode_responses(wf_buf *out, uint32_t src, const wf_response_msg *resps, uint32_t count);
weft_status wf_encode_simple(wf_buf *out, uint32_t src, wf_msg_type type); /* HEARTBEAT, BYE */
weft_status wf_encode_abort(wf_buf *out, uint32_t src, const char *reason);
weft_status wf_encode_stall(wf_buf *out, uint32_t src, const char *report);
/* ---- GROUP_JOIN / GROUP_REPLY (groupmsg.c): a group resolved through the
 * leader (negotiate/resolve.h). A keyed group (kind WF_GROUP_KEYED) is named
 * by key; a group by members (WF_GROUP_LISTED) by its sorted member list. */
#define WF_GROUP_KEYED 0
#define WF_GROUP_LISTED 1
typedef struct wf_group_msg {
  uint8_t kind;        /* WF_GROUP_KEYED or WF_GROUP_LISTED */
  int32_t key;         /* KEYED: the group key (any value); LISTED: 0 */
  int32_t size;        /* KEYED: the group size the joiner expects, 1..WF_MAX_RANKS; LISTED: nranks */
  int32_t device;      /* KEYED: WEFT_DEVICE_CPU (-1) or a WEFT_DEVICE_KIND_* other than AUTO; LISTED: -1 */
  int32_t status;      /* REPLY: WEFT_OK or an error status (< 0); JOIN: 0 */
  uint32_t id;         /* REPLY, KEYED, OK: the group's id (1..2^24-1); else 0 */
  uint32_t nranks;     /* JOIN LISTED: the members; REPLY: KEYED OK the members, LISTED the list answered */
  uint32_t *ranks;     /* nranks world ranks, ascending, distinct (malloc'd by the decoder) */
  char *error;         /* REPLY with an error: the message (<= WF_ERRMSG_MAX); else NULL (malloc'd) */
} wf_group_msg;
weft_status wf_encode_group_join(wf_buf *out, uint32_t src, const wf_group_msg *m);
weft_status wf_encode_group_reply(wf_buf *out, uint32_t src, const wf_group_msg *m);
weft_status wf_decode_group_join(const uint8_t *p, size_t n, wf_group_msg *m, char *err, size_t errlen);
weft_status wf_decode_group_reply(const uint8_t *p, size_t n, wf_group_msg *m, char *err, size_t errlen);
void wf_group_msg_free(wf_group_msg *m);

/* ---- CANCEL (cancelmsg.c): u32 group_id, str name (1..WF_NAME_MAX), u8
 * reason, f64 seconds (TIMEOUT: the request's own timeout, > 0; else 0). */
#define WF_CANCEL_ASKED 0   /* weft_request_cancel */
#define WF_CANCEL_TIMEOUT 1 /* the request's own deadline passed (weft_op_options.timeout_seconds) */
typedef struct wf_cancel_msg {
  uint32_t group_id;
  char name[WF_NAME_MAX + 1];
  uint8_t reason;
  double seconds;
} wf_cancel_msg;
weft_status wf_encode_cancel(wf_buf *out, uint32_t src, const wf_cancel_msg *m);
weft_status wf_decode_cancel(const uint8_t *p, size_t n, wf_cancel_msg *m, char *err, size_t errlen);

/* ---- STEP_REQ / STEP_REPLY (stepmsg.c): a group's step sequence, kept by
 * its leader (the group's first member; engine/steps.c). REQ: u32 group_id,
 * i64 graph_key. REPLY: the same, i32 status (WEFT_OK or an error < 0),
 * i64 step_id (OK: 0..WF_STEP_ID_MASK; else 0), str error (OK: empty; else
 * 1..WF_ERRMSG_MAX bytes). */
#define WF_STEP_ID_MASK ((1ull << 57) - 1) /* TensorFlow's kStepIdMask: the top 7 bits stay clear */
typedef struct wf_step_msg {
  uint32_t group_id;
  int64_t graph_key;
  int32_t status;      /* REPLY */
  int64_t step_id;     /* REPLY */
  char *error;         /* REPLY with an error (malloc'd by the decoder); else NULL */
} wf_step_msg;
weft_status wf_encode_step_req(wf_buf *out, uint32_t src, const wf_step_msg *m);
weft_status wf_encode_step_reply(wf_buf *out, uint32_t src, const wf_step_msg *m);
weft_status wf_decode_step_req(const uint8_t *p, size_t n, wf_step_msg *m, char *err, size_t errlen);
weft_status wf_decode_step_reply(const uint8_t *p, size_t n, wf_step_msg *m, char *err, size_t errlen);
void wf_step_msg_free(wf_step_msg *m);

/* type: WF_MSG_CACHED or WF_MSG_RESEND. */
weft_status wf_encode_cache_refs(wf_buf *out, uint32_t src, wf_msg_type type, const wf_cache_ref *refs,
                                 uint32_t count);

weft_status wf_encode_p2p_send(wf_buf *out, uint32_t src, const wf_p2p_send_msg *m);
weft_status wf_encode_p2p_reply(wf_buf *out, uint32_t src, const wf_p2p_reply_msg *m);

/* Decoders take a payload (without the frame header) and fill *m, allocating
 * arrays as documented above. On error they free what they allocated, leave
 * *m zeroed, and return WEFT_ERR_PROTOCOL (or WEFT_ERR_NO_MEMORY) with a
 * message in err. Every count is checked against the bytes left before
 * anything is allocated. */
weft_status wf_decode_hello(const uint8_t *p, size_t n, wf_hello_msg *m, char *err, size_t errlen);
weft_status wf_decode_peers(const uint8_t *p, size_t n, wf_peers_msg *m, char *err, size_t errlen);
weft_status wf_decode_requests(const uint8_t *p, size_t n, wf_requests_msg *m, char *err, size_t errlen);
weft_status wf_decode_responses(const uint8_t *p, size_t n, wf_responses_msg *m, char *err, size_t errlen);
/* CACHED and RESEND payloads (what names the message in errors: "CACHED"). */
weft_status wf_decode_cache_refs(const uint8_t *p, size_t n, const char *what, wf_cache_refs_msg *m, char *err,
                                 size_t errlen);
/* ABORT and STALL payloads (one string). */
weft_status wf_decode_abort(const uint8_t *p, size_t n, char *reason, size_t reason_len, char *err, size_t errlen);

/* P2P_SEND: m->data points into p (valid while p is). */
weft_status wf_decode_p2p_send(const uint8_t *p, size_t n, wf_p2p_send_msg *m, char *err, size_t errlen);
weft_status wf_decode_p2p_reply(const uint8_t *p, size_t n, wf_p2p_reply_msg *m, char *err, size_t errlen);

/* ---- REMOTE_CALL / REMOTE_REPLY (remotemsg.c): remote execution
 * (src/remote/). Tensors travel inline (dense, host memory), or, when
 * large, as metadata with their bytes on the point-to-point data path
 * (kind/has_tensor WF_RT_BULK; remote/bulk.c). */
#define WF_REMOTE_MAX_ARGS 1024  /* inputs, outputs, ids to delete or metadata in one message */
typedef enum wf_remote_op {
  WF_ROP_CTX_CREATE = 1, /* make a context on the callee (idle seconds) */
  WF_ROP_CTX_CLOSE = 2,  /* close it: its objects are freed */
  WF_ROP_KEEPALIVE = 3,  /* the context is in use */
  WF_ROP_EXECUTE = 4,    /* run a registered function */
  WF_ROP_PUT = 5,        /* store one inline tensor under an id */
  WF_ROP_FETCH = 6,      /* send an object's tensor back */
  WF_ROP_DELETE = 7,     /* free objects */
  WF_ROP_CANCEL = 8,     /* the caller gave up on call_id (cancelled or past its deadline); no reply */
  WF_ROP_BULK_GO = 9,    /* the data's receiver posted its receive: CALL: send fetch call_id's tensor; REPLY:
                            send call_id's bulk inputs. No reply */
  WF_ROP_BULK_DROP = 10, /* CALL: the caller no longer wants fetch call_id's tensor (no reply) */
  WF_ROP_COUNT_ = 11
} wf_remote_op;
typedef struct wf_remote_tensor {
  uint8_t dtype;        /* weft_dtype */
  uint8_t ndim;         /* 0..WEFT_MAX_DIMS */
  int32_t device;       /* WEFT_DEVICE_CPU or a device index (the callee checks it) */
  int64_t shape[WEFT_MAX_DIMS]; /* each >= 0 */
  uint64_t nbytes;      /* with data: elements x dtype size; metadata only: 0 */
  const uint8_t *data;  /* decoded: points into the payload (not owned) */
} wf_remote_tensor;
typedef struct wf_remote_oid {
  int32_t owner;        /* the rank that made the id (>= 0) */
  uint64_t local;       /* >= 1 */
} wf_remote_oid;
enum { WF_RT_NONE = 0, WF_RT_INLINE = 1, WF_RT_BULK = 2 }; /* an input's kind (0: an id), has_tensor */
typedef struct wf_remote_arg {
  uint8_t is_inline;    /* 0: id; WF_RT_INLINE: tensor with its bytes; WF_RT_BULK: tensor, bytes sent apart */
  wf_remote_oid id;
  wf_remote_tensor t;
} wf_remote_arg;
typedef struct wf_remote_msg {
  uint64_t call_id;     /* the caller's number of the call, >= 1 */
  uint8_t op;           /* wf_remote_op */
  uint64_t ctx;         /* the context (CTX_CREATE: 0; its REPLY: the new one) */
  /* CALL only */
  double timeout;       /* seconds the caller still waits (> 0), or 0: none */
  double idle;          /* CTX_CREATE: idle seconds before collection (>= 0; 0: never) */
  int32_t device;       /* EXECUTE: the outputs' device (WEFT_DEVICE_CPU, or an index) */
  char name[WF_NAME_MAX + 1]; /* EXECUTE: the function; else empty */
  uint32_t n_meta;      /* EXECUTE: the last n_meta outputs return metadata (<= n_out) */
  uint32_t n_in;        /* inputs (EXECUTE), the tensor (PUT), the id (FETCH), ids (DELETE) */
  wf_remote_arg *in;    /* malloc'd by the decoder */
  uint32_t n_out;       /* EXECUTE, PUT: output ids */
  wf_remote_oid *out;   /* malloc'd by the decoder */
  /* REPLY only */
  int32_t status;       /* weft_status (<= 0) */
  char *error;          /* status < 0: the message (<= WF_ERRMSG_MAX bytes; malloc'd by the decoder) */
  uint32_t n_metas;     /* EXECUTE: dtype and shape of the last outputs (nbytes 0) */
  wf_remote_tensor *metas; /* malloc'd by the decoder */
  uint8_t has_tensor;   /* FETCH: the tensor follows (WF_RT_INLINE), or its metadata (WF_RT_BULK) */
  wf_remote_tensor tensor;
} wf_remote_msg;
weft_status wf_encode_remote_call(wf_buf *out, uint32_t src, const wf_remote_msg *m);
weft_status wf_encode_remote_reply(wf_buf *out, uint32_t src, const wf_remote_msg *m);
weft_status wf_decode_remote_call(const uint8_t *p, size_t n, wf_remote_msg *m, char *err, size_t errlen);
weft_status wf_decode_remote_reply(const uint8_t *p, size_t n, wf_remote_msg *m, char *err, size_t errlen);
void wf_remote_msg_free(wf_remote_msg *m); /* frees in, out, error, metas (not the structs' data) */

void wf_peers_msg_free(wf_peers_msg *m);
void wf_request_msg_free(wf_request_msg *m);     /* frees splits */
void wf_requests_msg_free(wf_requests_msg *m);
void wf_response_msg_free(wf_response_msg *m);   /* frees names, sizes, error */
void wf_responses_msg_free(wf_responses_msg *m);
void wf_cache_refs_msg_free(wf_cache_refs_msg *m);

#endif

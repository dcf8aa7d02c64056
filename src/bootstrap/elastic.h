/* elastic.h - the elastic driver protocol: a rank asks weftrun (the driver,
 * WEFT_ELASTIC_ADDR) for its place in the job's next world.
 *
 * One TCP connection per question, authenticated first with the handshake
 * of auth.h (job secret; job id "<WEFT_JOB_ID>/elastic", so a world's
 * handshake is never a driver's; the worker's stable id as its rank, world
 * size WF_EL_IDS, the driver as rank WF_EL_DRIVER). Then, all messages
 * fixed-size, little-endian, header u32 magic "WFEL", u8 version 1, u8 kind,
 * u16 0:
 *   ASK   (24)  worker -> driver  kind 1, u32 id, u32 0, u64 last generation
 *   PLACE (256) driver -> worker  kind 2, i32 status, u32 0, u64 generation,
 *               u32 rank, u32 size, char addr[32], char msg[192]
 *   PORT  (56)  rank 0 -> driver  kind 3, u32 id, u32 0, u64 generation,
 *               char addr[32]
 *   CHECK (24)  worker -> driver  kind 4, u32 id, u32 0, u64 its generation
 *   UPDATE (24) driver -> worker  kind 5, i32 status, u32 update, u64 the
 *               driver's last generation
 * The driver answers every live asking worker of one generation together:
 * rank 0 first, with the address to bind (port 0); rank 0 opens its
 * rendezvous listener on a free port and reports it (PORT); then every
 * other rank gets rank 0's address. status != 0 (a weft_status): no place,
 * msg says why (the job is stopping, ...). Strings are NUL-padded and must
 * hold a NUL. A generation's world authenticates with
 * wf_el_gen_secret(secret, generation), so no process of another
 * generation can join it. CHECK (in place of ASK, same size) asks whether
 * the membership changed since the worker's generation (weftrun started
 * workers that wait to join: WF_EL_UPD_ADDED; Horovod's HostUpdateResult
 * bits); the driver answers UPDATE at once.
 *
 * The codec and the worker's side (wf_el_join) are here; the driver's
 * non-blocking connection (wf_el_conn) serves weftrun's poll loop. */
#ifndef WF_BOOT_ELASTIC_H
#define WF_BOOT_ELASTIC_H
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/auth.h"
#include "bootstrap/auth_nb.h"
#include "bootstrap/sockutil.h"
#include "weft.h"

#define WF_EL_IDS 65536u              /* worker ids are below this */
#define WF_EL_DRIVER (WF_EL_IDS - 1u) /* the driver's rank in the handshake */
#define WF_EL_ASK_SIZE 24
#define WF_EL_PLACE_SIZE 256
#define WF_EL_PORT_SIZE 56
#define WF_EL_CHECK_SIZE 24             /* CHECK and UPDATE */
#define WF_EL_UPD_REMOVED 1u
#define WF_EL_UPD_ADDED 2u
#define WF_EL_ADDR_MAX 32
#define WF_EL_MSG_MAX 192
#define WF_EL_JOB_MAX 96              /* "<job id>/elastic" */

typedef struct wf_el_place {
  int32_t status;                     /* 0, or why there is no place */
  uint64_t generation;
  uint32_t rank, size;
  char addr[WF_EL_ADDR_MAX];          /* rank 0: where to bind (port 0); others: rank 0's */
  char msg[WF_EL_MSG_MAX];
} wf_el_place;

/* Codec (pure; decoders check magic, version, kind, zero fields, NUL in
 * strings, rank < size <= WF_MAX_RANKS for an OK PLACE; err says what). */
void wf_el_encode_ask(uint8_t out[WF_EL_ASK_SIZE], uint32_t id, uint64_t last_gen);
weft_status wf_el_decode_ask(const uint8_t in[WF_EL_ASK_SIZE], uint32_t *id, uint64_t *last_gen, char *err,
                             size_t errlen);
void wf_el_encode_place(uint8_t out[WF_EL_PLACE_SIZE], const wf_el_place *p);
weft_status wf_el_decode_place(const uint8_t in[WF_EL_PLACE_SIZE], wf_el_place *p, char *err, size_t errlen);
void wf_el_encode_port(uint8_t out[WF_EL_PORT_SIZE], uint32_t id, uint64_t gen, const char *addr);
weft_status wf_el_decode_port(const uint8_t in[WF_EL_PORT_SIZE], uint32_t *id, uint64_t *gen, char *addr,
                              char *err, size_t errlen);

void wf_el_encode_check(uint8_t out[WF_EL_CHECK_SIZE], uint32_t id, uint64_t gen);
weft_status wf_el_decode_check(const uint8_t in[WF_EL_CHECK_SIZE], uint32_t *id, uint64_t *gen, char *err,
                               size_t errlen);
/* update: WF_EL_UPD_* bits (no others); status <= 0 */
void wf_el_encode_update(uint8_t out[WF_EL_CHECK_SIZE], int32_t status, uint32_t update, uint64_t gen);
weft_status wf_el_decode_update(const uint8_t in[WF_EL_CHECK_SIZE], int32_t *status, uint32_t *update,
                                uint64_t *gen, char *err, size_t errlen);

/* "<job_id>/elastic" into out (WF_EL_JOB_MAX bytes). */
void wf_el_job_id(const char *job_id, char *out, size_t outlen);

/* The secret of generation gen's world: HMAC-SHA256(secret, "weft-elastic-generation" | u64 gen). */
weft_status wf_el_gen_secret(const uint8_t *secret, size_t secret_len, uint64_t gen, uint8_t out[32]);

/* ------------------------------------------------------------- the worker */
typedef struct wf_el_join_cfg {
  const char *driver;        /* WEFT_ELASTIC_ADDR, "ip:port" */
  uint32_t id;               /* WEFT_ELASTIC_ID */
  uint64_t last_gen;         /* the last generation this process was placed in (0: none) */
  const uint8_t *secret;
  size_t secret_len;
  const char *job_id;
  const char *bind_addr;     /* rank 0 binds here when set (WEFT_BIND_ADDR / WEFT_IFACE), else where the driver says */
  double timeout_seconds;    /* the whole question, the wait for the others included */
  double handshake_timeout;
} wf_el_join_cfg;

/* Asks the driver; blocks until placed, refused or the deadline. On
 * success *place is filled, and rank 0 gets its rendezvous listener in
 * *listen_fd (else -1), already reported to the driver; place->addr is
 * then that listener's address. Errors name the driver's address; a
 * refusal returns the driver's status and message. */
weft_status wf_el_join(const wf_el_join_cfg *c, wf_el_place *place, int *listen_fd);

/* Asks the driver (CHECK) whether the membership changed since generation
 * gen (c->last_gen is not used); *update gets WF_EL_UPD_* bits. One
 * connection, at most c->timeout_seconds. A refusal returns the driver's
 * status. */
weft_status wf_el_check(const wf_el_join_cfg *c, uint64_t gen, uint32_t *update);

/* ------------------------------------------------------------- the driver */
enum { WF_EL_C_AUTH, WF_EL_C_ASK, WF_EL_C_HELD, WF_EL_C_PORT, WF_EL_C_DONE, WF_EL_C_CHECK };

typedef struct wf_el_conn {
  int fd;                    /* -1: free slot */
  int phase;                 /* WF_EL_C_* */
  int64_t deadline;          /* of the handshake and ASK; of PORT once answered; none while held */
  short events;              /* what to poll for */
  char peer[WF_ADDR_STR_MAX];
  wf_auth_acc acc;
  uint8_t in[WF_EL_PORT_SIZE > WF_EL_ASK_SIZE ? WF_EL_PORT_SIZE : WF_EL_ASK_SIZE];
  size_t off;
  uint32_t id;               /* after ASK: the authenticated worker id */
  uint64_t last_gen;
  uint64_t gen;              /* answered: the generation; PORT read: port_addr holds rank 0's address */
  char port_addr[WF_EL_ADDR_MAX];
} wf_el_conn;

/* A freshly accepted connection (fd: non-blocking; owned by c from now). */
weft_status wf_el_conn_init(wf_el_conn *c, int fd, const char *peer, const wf_auth_params *ap,
                            double handshake_timeout, char *err, size_t errlen);
/* Moves c on without blocking. WEFT_IN_PROGRESS: poll c->fd for c->events
 * (until c->deadline); WEFT_OK: it reached WF_EL_C_HELD (an ASK is in:
 * c->id), WF_EL_C_CHECK (a CHECK is in: c->id, c->last_gen: answer it with
 * wf_el_conn_update) or WF_EL_C_DONE (PORT is in: c->port_addr). An error: close it
 * (err says why; a held connection's error is its worker's EOF). */
weft_status wf_el_conn_step(wf_el_conn *c, char *err, size_t errlen);
/* Answers a held connection (at most wait_s seconds to write 256 bytes to
 * a fresh socket). An OK place for rank 0 moves it to WF_EL_C_PORT with
 * deadline port_s from now; otherwise to WF_EL_C_DONE. */
weft_status wf_el_conn_answer(wf_el_conn *c, const wf_el_place *p, double port_s, char *err, size_t errlen);
/* Answers a CHECK (UPDATE); c is then WF_EL_C_DONE. */
weft_status wf_el_conn_update(wf_el_conn *c, int32_t status, uint32_t update, uint64_t gen, char *err, size_t errlen);
void wf_el_conn_close(wf_el_conn *c);

#endif

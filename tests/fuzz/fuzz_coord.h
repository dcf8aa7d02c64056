/* fuzz_coord.h - the model of fuzz_coord's world, shared by the target's
 * files: fuzz_coord.c (the run: the input decoded into ranks and control
 * messages fed to the coordinator, the members, the seeds),
 * fuzz_coord_input.c (requests built from the input's bytes) and
 * fuzz_coord_check.c (the validation oracle and the checks of every
 * response). What each rank requested, what the cache assigned, joins and
 * departures, and each member's requests in flight and responses on their
 * way; see fuzz_coord.c for the input format and the properties checked. */
#ifndef WEFT_FUZZ_COORD_H
#define WEFT_FUZZ_COORD_H

#include <stdint.h>

/* fuzz_common.h declares fz_write_seeds, which only fuzz_coord.c (where
 * LLVMFuzzerInitialize writes the seeds) defines: not a missing definition
 * in the target's other files */
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wundefined-internal"
#include "fuzz_common.h"
#pragma clang diagnostic pop
#include "negotiate/cache.h"
#include "negotiate/coord.h"
#include "negotiate/coord_impl.h"
#include "wire/wire.h"


#define MAXN 6          /* ranks */
#define MAX_OPS 400
#define MAX_RECS 256    /* distinct names an input may use */
#define TIMEOUT_S 30.0
#define NS 1000000000LL

/* ------------------------------------------------------------ the model */
typedef struct rec {
  char name[WF_NAME_MAX + 1];
  int sub[MAXN];     /* requests accepted from each rank (full or CACHED) */
  int used[MAXN];    /* of those, how many OK responses must have used */
  int resp;          /* responses of any kind that named it */
  int join;          /* used as a JOIN's name */
  int assigned;      /* a cache assignment named it */
  uint32_t id;       /* its last assignment (mirror) */
  uint64_t epoch;
} rec;

typedef struct fz_model {
  int n;             /* ranks */
  int wranks[MAXN];
  int use_map;
  uint32_t cap;      /* cache capacity (0: off) */
  wf_coord *c;
  wf_cache *mirror;  /* the assignments as a member runs them */
  rec recs[MAX_RECS];
  int nrecs;
  uint64_t seq;      /* the next response's expected seq */
  uint64_t epoch;    /* assignments so far */
  int joined_ever[MAXN];
  int join_done[MAXN]; /* the OK JOIN of the rank's last join was published: it no longer stands in */
  int joined_now[MAXN], njoined, last_joined;
  int join_oks;      /* OK JOINs due (every rank joined) */
  int last_joined_at[2048]; /* the rank each due OK JOIN must name (ring; MAX_OPS x 3 joins at most) */
  int join_head;
  wf_request_msg tmpl[4]; /* request templates (ALL, ALLC) */
  int64_t tmpl_splits[4][MAXN];
  int ntmpl;
  int members;       /* the members keep response caches of their own */
  int departed[MAXN]; /* said BYE */
} fz_model;
extern fz_model S;

/* Members mode: each member (rank >= 1) runs its side of the response
 * cache as the engine does (wf_mcache_lookup before it sends, RESEND
 * handling, wf_mcache_response on each response, in order, when it gets
 * it: responses wait in its queue until a DELIVER, so its cache lags the
 * coordinator's as over a network), with a capacity of its own. */
#define MAX_PEND 16
#define QMAX 64
typedef struct pend {
  wf_request_msg q; /* a request in flight (q.splits: splits) */
  int64_t splits[MAXN + 8];
} pend;
typedef struct rcopy {
  uint8_t type, coll;
  uint8_t without; /* an ERROR decided without this member: not about its request in flight */
  uint32_t nnames;
  char **names;
} rcopy;
typedef struct member {
  wf_mcache *mc;
  pend pend[MAX_PEND];
  int npend;
  rcopy q[QMAX];
  int qhead, qlen;
  int joining; /* sent a join and has not had its response: weft_join blocks the rank until then */
} member;
extern member g_mem[MAXN];

/* the clock (TIME moves it), allocation failures (fuzz_coord.c) */
extern int64_t g_now;
extern int g_oom;         /* this run has allocation failures */
extern unsigned g_period; /* every period-th allocation fails; 0: none */
extern int g_debug;       /* FZ_COORD_DEBUG=1: print requests and responses */

/* the records of tensor names (fuzz_coord.c) */
rec *find_rec(const char *name);
rec *get_rec(const char *name);

/* requests built from the input (fuzz_coord_input.c) */
void take_name(fz_in *in, char *dst);
void build_request(fz_in *in, wf_request_msg *m, int64_t *splits);
void as_api(wf_request_msg *m, int64_t *splits);

/* the checks (fuzz_coord_check.c): every response taken, the deadline
 * after every op, the stall handler */
void check_response(const wf_response_msg *r);
void check_deadline(void);
void on_stall(void *ctx, const char *report, const uint8_t *submitted);

#endif

/* coord_impl.h - the coordinator's internals, shared by coord.c (the table:
 * requests in, validated responses out) and coord_take.c (fusion and
 * ordering of ready responses; stalls and timeouts). Not an interface. */
#ifndef WF_NEGOTIATE_COORD_IMPL_H
#define WF_NEGOTIATE_COORD_IMPL_H
#include <stdint.h>

#include "negotiate/coord.h"
#include "negotiate/cache.h"
#include "util/strmap.h"
#include "util/time.h"

#define FREE_MAX 4096 /* recycled entries and blocks kept */
/* Fusion hold (no WEFT_CYCLE_TIME_US): ready fusable responses wait while
 * requests for other tensors are still arriving (one within HOLD_GAP_NS
 * left a fusable entry waiting for other ranks, and that entry is still
 * pending: add_e/add_ns below), at most
 * HOLD_MAX_NS: a burst of tensors submitted together runs as one
 * collective, not as many pieces as the ranks' engines happened to drain
 * (a burst's first tensor, ready alone because each engine woke for it
 * before the rest came, waits for the rest too). When the burst's last
 * request completes every entry the hold ends at once; a lone tensor with
 * nothing else arriving goes at once. */
#define HOLD_GAP_NS 100000
#define HOLD_MAX_NS 1000000

static inline int fusable_coll(uint8_t coll) {
  return coll == WF_COLL_ALLREDUCE || coll == WF_COLL_ALLGATHER || coll == WF_COLL_REDUCESCATTER;
}

/* What fusion and ordering need to know about a ready response. */
typedef struct meta {
  int32_t priority;
  uint64_t bytes;
  uint8_t dtype, reduce_op;
  double prescale, postscale;
  int64_t elems;        /* allreduce: elements (its response's sizes are built at take) */
  uint8_t staged;       /* allreduce: a device tensor (its ranks run it through the device pipeline) */
} meta;

/* Every rank's request for one name: filled while the name negotiates,
 * then (OK, cache on) the response cache's payload, holding the response it
 * negotiated to. Same size for every name of a coordinator: recycled. */
typedef struct rblock {
  struct wf_coord *owner;
  struct rblock *next_free;
  int refs;             /* pins: each cache slot holding it, entries hitting it, a ready response */
  int known;            /* m, sizes: the OK response these requests negotiated to */
  meta m;
  uint32_t nsizes;
  int64_t *sizes;       /* allgather / alltoall sizes (malloc'd) */
  uint8_t *have;        /* per rank: reqs[r] holds its request (or, during negotiation, via[r]) */
  uint8_t *via;         /* per rank, during negotiation: equal to the entry's hit block's (not copied) */
  wf_request_msg reqs[]; /* size entries, then have and via */
} rblock;

typedef struct entry {
  rblock *b;            /* requests that arrived, as above */
  rblock *hit;          /* the name's last negotiation (pinned), or NULL */
  int count, nhits;     /* requests; those equal to hit's */
  uint8_t coll;         /* of the first request */
  uint32_t slot;        /* the cache slot a reference named (a hint), or UINT32_MAX */
  int64_t deadline;     /* negotiation fails after this (timeout / stall shutdown) */
  int64_t first_ns;     /* when the first rank's request arrived */
  int64_t next_warn;    /* next stall report */
  struct entry *next_free;
  char name[WF_NAME_MAX + 1]; /* the table's key */
} entry;

/* A response ready to be numbered. */
typedef struct ready {
  wf_response_msg resp; /* names unset: built at take */
  char *name;           /* malloc'd */
  meta m;
  rblock *pay;          /* pinned: the cache's new payload for name (OK, cache on), else NULL */
  uint32_t slot;        /* the entry's slot hint */
  uint8_t fusable;      /* an OK response of a fusable collective (the fusion hold counts them) */
  uint8_t dropped;      /* take: no memory for its response: freed, not published */
} ready;

struct wf_coord {
  int size;
  const int *ranks; /* group rank -> world rank (messages name world ranks); NULL: identity */
  double timeout;
  double stall_check, stall_shutdown;
  wf_stall_fn on_stall;
  void *stall_ctx;
  wf_clock_fn now;    /* the clock of holds, deadlines and units (NULL: wf_now_ns) */
  void *now_ctx;
  wf_strmap table;
  int64_t next_check; /* no entry's deadline or stall report is due before this */
  uint64_t next_seq;
  ready *ready;       /* seq not yet assigned */
  size_t nready, cap;
  wf_strmap units;    /* grouped ops with responses held (coord_unit.c) */
  wf_strmap cancelled; /* names cancelled while ranks still owed them (coord_cancel.c) */
  int64_t units_sweep_at; /* no unit can be idle for the timeout before this */
  uint8_t *departed; /* per rank: said BYE */
  uint8_t *joined;   /* per rank: weft_join pending */
  int njoined, last_joined;
  char join_name[WF_NAME_MAX + 1];
  wf_cache *cache;   /* response cache (NULL: WEFT_CACHE_CAPACITY=0) */
  const wf_request_msg **scratch; /* size entries: finish's view of an entry */
  int hold;          /* the fusion hold is on (no cycle time) */
  uint64_t pack_max; /* larger tensors are not fused (0: no limit) */
  int ar_unpacked;   /* fused allreduces cost no copy: pack_max does not apply */
  int npending_fusable; /* entries of fusable collectives */
  size_t nready_fusable; /* ready OK responses of fusable collectives */
  /* the two fusable entries a request most recently left waiting for other
   * ranks, and when: [0] the latest; an entry leaving the table leaves
   * these (the hold's clock: requests still arriving for pending tensors) */
  const struct entry *add_e[2];
  int64_t add_ns[2];
  int64_t first_ready_ns; /* when the oldest ready response became ready */
  int64_t hold_until;   /* take holds until then (INT64_MAX: not holding) */
  entry *free_entries;
  rblock *free_blocks;
  int nfree_entries, nfree_blocks;
};

/* Now, by the coordinator's clock (wf_coord_set_clock). */
static inline int64_t wf_cd_now(const wf_coord *c) { return c->now ? c->now(c->now_ctx) : wf_now_ns(); }

/* the world rank of group rank r, for messages */
static inline int WR(const wf_coord *c, int r) { return c->ranks ? c->ranks[r] : r; }

/* coord.c */
void wf_cd_block_unpin(rblock *b);
uint8_t wf_cd_entry_coll(const wf_coord *c, const entry *e);
uint32_t wf_cd_entry_unit(const wf_coord *c, const entry *e);
void wf_cd_entry_drop(wf_coord *c, entry *e); /* removes e from the table and frees it */
/* unit: the grouped op's tensor count, as in the requests (0: none) */
void wf_cd_emit_error(wf_coord *c, uint8_t coll, const char *name, weft_status st, const char *msg, uint32_t unit);
/* The same for a tensor that failed without every rank (timeout, a departed
 * rank, a protocol error, no memory): it breaks its grouped op (the unit
 * goes out as it is) instead of counting in it. */
void wf_cd_fail_alone(wf_coord *c, uint8_t coll, const char *name, weft_status st, const char *msg, uint32_t unit);
/* Fails e's name (a timeout, a departed rank) with an ERROR that lists
 * the group ranks it was decided without (response sizes), so that such a
 * rank does not take it for a request of its that reaches the coordinator
 * later (that one starts a new negotiation); breaks e's unit. */
void wf_cd_fail_missing(wf_coord *c, const entry *e, weft_status st, const char *msg);
/* An ERROR for name decided without the group ranks whose without[r] is 1
 * (listed in the response's sizes: they do not take it as their answer). */
void wf_cd_emit_error_without(wf_coord *c, uint8_t coll, const char *name, weft_status st, const char *msg,
                              const uint8_t *without);
void wf_cd_push(wf_coord *c, ready *q); /* appends q to the ready responses */
void wf_cd_ready_free(ready *q);        /* its response's arrays, name and pin */

/* coord_unit.c */
/* Holds q (1) if it is a tensor of a grouped op of unit tensors, publishing
 * the op's held responses when the last is in; 0: not part of one. */
int wf_cd_unit_take(wf_coord *c, ready *q, uint32_t unit);
void wf_cd_units_sweep(wf_coord *c, int64_t now); /* publishes units idle for the timeout, as they are */
void wf_cd_units_flush(wf_coord *c); /* publishes every unit as it is (every rank joined: no tensor can come) */
int64_t wf_cd_units_next(const wf_coord *c);      /* when the sweep has something to look at */
/* name (unit's tensor) failed without every rank: publish its unit as it is */
void wf_cd_unit_break(wf_coord *c, const char *name, uint32_t unit);
void wf_cd_units_free(wf_coord *c);

/* coord_cancel.c */
/* rank's request for name arrives: 1 if a cancellation still owed it the
 * answer (sent now, the request not recorded); 0: negotiate it. */
int wf_cd_cancelled_take(wf_coord *c, int rank, const char *name, uint8_t coll);
void wf_cd_cancelled_free(wf_coord *c);

#endif

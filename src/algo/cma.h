/* cma.h - shared pieces of the cross-memory attach algorithms (*_cma.c):
 * collectives among ranks of one host that read or write each other's
 * buffers directly (process_vm_readv/writev, see sched.h), synchronised by
 * tiny SEND/RECV messages: an address ("my buffer is ready, here it is")
 * and a token ("I am done with your buffer"). */
#ifndef WF_ALGO_CMA_H
#define WF_ALGO_CMA_H
#include <stdint.h>

#include "algo/algo.h"

/* Chunk of a fold: a chunk of each operand and the result stay in L2. */
#define WF_CMA_CHUNK_BYTES ((size_t)256 << 10)

/* Reads bytes at addr in process pid (rank, for the message) into local
 * with process_vm_readv, continuing partial transfers; what prefixes the
 * error message. PEER_LOST (the process is gone) or SYSTEM, naming the
 * rank, pid, address and errno. (sched_cma.c; the board's remote rounds
 * use it too.) */
weft_status wf_cma_read(int pid, uint64_t addr, void *local, size_t bytes, int rank, const char *what);

/* 1 if every rank of the group is on this host and may be read directly. */
int wf_cma_usable(const wf_coll_args *a);

/* The schedule's scratch for one CMA collective: 8-byte message slots per
 * peer, then tmp. */
typedef struct wf_cma_sync {
  uint64_t *mine; /* [p] the address this rank sends each peer */
  uint64_t *addr; /* [p] the addresses the peers sent */
  uint64_t *tok;  /* the token this rank sends */
  uint64_t *tokr; /* [p] tokens received */
  char *tmp;      /* tmp_bytes (64-byte aligned) */
} wf_cma_sync;

/* Takes the schedule's scratch; WEFT_OK or NO_MEMORY (with a message). */
weft_status wf_cma_setup(const wf_coll_args *a, wf_sched *s, size_t tmp_bytes, wf_cma_sync *y, const char *what);

/* Sends peer j the address p (8 bytes); receives peer j's into addr[j]. */
void wf_cma_send_addr(wf_sched *s, const wf_cma_sync *y, int j, const void *p);
void wf_cma_recv_addr(wf_sched *s, const wf_cma_sync *y, int j);
/* Peer j's memory at off bytes past the address it sent. */
wf_mem wf_cma_peer(const wf_coll_args *a, const wf_cma_sync *y, int j, size_t off);
/* "Done" tokens: to peer j, from peer j. */
void wf_cma_send_tok(wf_sched *s, const wf_cma_sync *y, int j);
void wf_cma_recv_tok(wf_sched *s, const wf_cma_sync *y, int j);
/* The last round of a cma schedule: a token to and from every peer ("done
 * reading your buffer"), so no rank returns a buffer a peer still reads.
 * Then WEFT_OK, or NO_MEMORY naming what if an append failed. */
weft_status wf_cma_finish(wf_sched *s, const wf_cma_sync *y, int rank, int size, const char *what);

/* Elements per fold chunk for elements of es bytes, at most n (>= 1). */
size_t wf_cma_chunk(size_t es, size_t n);

#endif

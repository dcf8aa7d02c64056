/* mpi.h - the MPI transport (WEFT_TRANSPORT=mpi): the data vtable
 * (transport.h) over MPI_Isend/MPI_Irecv on the job's duplicated
 * communicator (bootstrap/mpi_boot.h), so clusters get MPI's fabric support
 * (InfiniBand, RoCE, ...). Control messages stay on TCP.
 *
 * Called only from the engine thread, which polls it (wf_mpi_tr_progress,
 * MPI_Testsome) while requests are pending: MPI has no file descriptor to
 * wake epoll. Matching: one MPI tag per (group, collective mod 128) (the
 * group id in the high bits; the group id alone when MPI_TAG_UB is small; a
 * group whose tag would exceed MPI_TAG_UB is refused, WEFT_ERR_NOT_SUPPORTED,
 * never folded), and MPI's in-order matching per (source, tag,
 * communicator) pairs the k-th send of a (sender, receiver) pair with the
 * k-th receive, as the executor posts them in order; different groups'
 * concurrent collectives never share a tag. A message longer than
 * WF_MPI_CHUNK bytes travels as several MPI messages (counts are ints). A
 * received byte count that differs from the posted one is a protocol error.
 *
 * cancel_data: receives are MPI_Cancel'ed and tested (yielding) until MPI
 * confirms the cancellation or completes them, for up to 1 s (a matched
 * receive finishes as long as its sender lives); sends, which most MPIs
 * cannot cancel and which only read their buffer, for up to 0.2 s. No
 * request is MPI_Request_free'd while MPI may still use it: what remains is
 * kept (abandoned slots, tested by progress until MPI completes them). Only a
 * receive whose sender failed mid-transfer can outlast the wait (warned).
 *
 * incomplete(peer) (the peer said goodbye): 1 when a send to it is pending;
 * receives from it may still be in flight, so progress gives them 2 s from
 * then and reports on_error (WEFT_ERR_PEER_LOST) if they have not landed. */
#ifndef WF_TRANSPORT_MPI_H
#define WF_TRANSPORT_MPI_H
#include "bootstrap/mpi_boot.h"
#include "transport/transport.h"

typedef struct wf_mpi_tr wf_mpi_tr;

typedef struct wf_mpi_tr_cfg {
  int rank, size;
  void *cb_ctx;
  /* A transfer with peer failed (MPI error, wrong byte count): st is
   * WEFT_ERR_PEER_LOST or WEFT_ERR_PROTOCOL. Engine thread. */
  void (*on_error)(void *ctx, int peer, weft_status st, const char *msg);
} wf_mpi_tr_cfg;

/* Fails (WEFT_ERR_NOT_SUPPORTED) when MPI does not provide
 * MPI_THREAD_MULTIPLE. c must outlive the transport. */
weft_status wf_mpi_tr_create(wf_mpi_comm *c, const wf_mpi_tr_cfg *cfg, wf_mpi_tr **out);
/* Cancels what is pending (as cancel_data) and frees. NULL is a no-op. */
void wf_mpi_tr_destroy(wf_mpi_tr *t);
wf_transport *wf_mpi_tr_transport(wf_mpi_tr *t);
/* Tests the pending requests; returns how many transfers completed. */
int wf_mpi_tr_progress(wf_mpi_tr *t);
/* Number of MPI requests pending (0: nothing to poll). */
int wf_mpi_tr_active(const wf_mpi_tr *t);
/* Bytes of the pending MPI requests. */
size_t wf_mpi_tr_bytes(const wf_mpi_tr *t);

#endif

/* mpi_none.c - the MPI entry points of a build without MPI (WEFT_WITH_MPI
 * off or MPI not found): each says so. Compiled instead of mpi_boot.c (and
 * transport/mpi_none.c instead of transport/mpi.c). */
#include "bootstrap/mpi_boot.h"
#include "util/err.h"

int wf_mpi_built(void) { return 0; }

void wf_mpi_peer_lost(void) {}

weft_status wf_mpi_comm_open(double timeout_seconds, wf_mpi_comm **out, int *rank, int *size) {
  (void)timeout_seconds;
  *out = NULL;
  *rank = *size = -1;
  return wf_err(WEFT_ERR_NOT_SUPPORTED, WF_NO_MPI_MSG);
}

void wf_mpi_comm_close(wf_mpi_comm *c) { (void)c; }

int wf_mpi_comm_multiple(const wf_mpi_comm *c) {
  (void)c;
  return 0;
}

weft_status wf_mpi_boot_exchange(wf_mpi_comm *c, const char *bind_addr, const char *host, double timeout_seconds,
                                 char *addr, size_t addrlen, uint8_t *secret, size_t cap, size_t *slen, int *lfd) {
  (void)c, (void)bind_addr, (void)host, (void)timeout_seconds, (void)addr, (void)addrlen, (void)secret, (void)cap,
      (void)slen;
  *lfd = -1;
  return wf_err(WEFT_ERR_NOT_SUPPORTED, WF_NO_MPI_MSG);
}


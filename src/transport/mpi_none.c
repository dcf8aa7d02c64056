/* mpi_none.c - the MPI transport of a build without MPI: each entry point
 * says so. Compiled instead of mpi.c. */
#include "transport/mpi.h"
#include "util/err.h"

weft_status wf_mpi_tr_create(wf_mpi_comm *c, const wf_mpi_tr_cfg *cfg, wf_mpi_tr **out) {
  (void)c, (void)cfg;
  *out = NULL;
  return wf_err(WEFT_ERR_NOT_SUPPORTED, "WEFT_TRANSPORT=mpi: " WF_NO_MPI_MSG);
}

void wf_mpi_tr_destroy(wf_mpi_tr *t) { (void)t; }

wf_transport *wf_mpi_tr_transport(wf_mpi_tr *t) {
  (void)t;
  return NULL;
}

int wf_mpi_tr_progress(wf_mpi_tr *t) {
  (void)t;
  return 0;
}

int wf_mpi_tr_active(const wf_mpi_tr *t) {
  (void)t;
  return 0;
}

size_t wf_mpi_tr_bytes(const wf_mpi_tr *t) {
  (void)t;
  return 0;
}

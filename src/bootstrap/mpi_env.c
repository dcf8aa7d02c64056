/* mpi_env.c - is this process one rank of a job an MPI launcher started?
 * (Compiled with and without MPI: weft_init asks before deciding how to
 * bootstrap, and says "built without MPI" when it cannot use one.) */
#include <stdlib.h>

#include "bootstrap/mpi_boot.h"

const char *wf_mpi_launcher_var(void) {
  /* Open MPI (mpirun), PMIx (Open MPI 5, srun --mpi=pmix), PMI-1/2 (MPICH
   * hydra, srun --mpi=pmi2), MVAPICH */
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                                     "MV2_COMM_WORLD_SIZE", NULL};
  for (const char *const *v = vars; *v; v++) {
    const char *s = getenv(*v);
    if (s && *s) return *v;
  }
  return NULL;
}

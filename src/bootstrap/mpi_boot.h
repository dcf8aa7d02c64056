/* mpi_boot.h - weft under an MPI launcher (mpirun, srun): detecting one,
 * initialising MPI (or joining an application's MPI), the job's duplicated
 * communicator, and the rendezvous hand-off: rank 0 opens its rendezvous
 * listener on an ephemeral port, picks the job secret (WEFT_SECRET, or
 * RAND_bytes), and every rank receives address and secret by broadcast over
 * the duplicated communicator; the ordinary TCP rendezvous (bootstrap.h)
 * then runs with them. No WEFT_ADDR is needed.
 *
 * MPI is initialised with MPI_THREAD_MULTIPLE unless the application already
 * initialised it (then its level is kept; weft only calls MPI from
 * weft_init's thread for the bootstrap, and from its engine thread only with
 * WEFT_TRANSPORT=mpi, which needs MULTIPLE). weft never calls MPI_Finalize
 * in weft_finalize, so weft_init works again in the same process; if weft
 * initialised MPI, an atexit handler finalises it (skipped, with a warning,
 * while a world still uses MPI: call weft_finalize before exiting).
 *
 * The collectives here are non-blocking ones tested until
 * WEFT_INIT_TIMEOUT_SECONDS passes (a rank that never calls weft_init makes
 * the others fail, naming their MPI rank and host, instead of hang);
 * MPI_Init_thread itself has no deadline. A collective that timed out stays
 * active in MPI, so its request and buffers are kept (never freed) and the
 * exit handler then skips MPI_Finalize.
 *
 * Built without MPI (mpi_none.c), wf_mpi_launcher_var still works and every
 * other call returns WEFT_ERR_NOT_SUPPORTED "weft was built without MPI". */
#ifndef WF_MPI_BOOT_H
#define WF_MPI_BOOT_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* What every MPI entry point of a build without MPI says (mpi_none.c). */
#define WF_NO_MPI_MSG "weft was built without MPI (rebuild with -DWEFT_WITH_MPI=ON; Debian: libopenmpi-dev)"

typedef struct wf_mpi_comm wf_mpi_comm; /* the job's dup'ed MPI_COMM_WORLD */

/* 1 if this build has MPI support. */
int wf_mpi_built(void);

/* A world lost a rank (died, unreachable): weft's exit handler then skips
 * MPI_Finalize, which would wait for it. Any thread; a no-op without MPI. */
void wf_mpi_peer_lost(void);

/* The environment variable that shows an MPI launcher started this process
 * (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK, ...), or NULL. */
const char *wf_mpi_launcher_var(void);

/* Initialises MPI if needed and duplicates MPI_COMM_WORLD (errors return,
 * not abort, on the duplicate); *rank and *size are this process's place in
 * it. timeout_seconds bounds the duplication. */
weft_status wf_mpi_comm_open(double timeout_seconds, wf_mpi_comm **out, int *rank, int *size);

/* Frees the duplicate (not MPI itself). NULL is a no-op. */
void wf_mpi_comm_close(wf_mpi_comm *c);

/* 1 if MPI provides MPI_THREAD_MULTIPLE (the engine thread may call it). */
int wf_mpi_comm_multiple(const wf_mpi_comm *c);

/* The rendezvous hand-off (collective over c). Rank 0 listens on bind_addr
 * (its host part; "" or NULL: 127.0.0.1 when every rank is on rank 0's host,
 * else every interface, announced under this host's first non-loopback IPv4
 * address) and uses secret[0..*slen) as the job secret, or 32 random bytes
 * when *slen is 0. Every rank gets rank 0's "a.b.c.d:port" in addr and the
 * secret in secret and its length in *slen (secret holds cap bytes). *lfd: rank 0's listener
 * (the caller passes it to wf_bootstrap, which closes it), -1 elsewhere.
 * host: the name this rank reports (NULL: gethostname). */
weft_status wf_mpi_boot_exchange(wf_mpi_comm *c, const char *bind_addr, const char *host, double timeout_seconds,
                                 char *addr, size_t addrlen, uint8_t *secret, size_t cap, size_t *slen, int *lfd);

#ifdef WEFT_HAVE_MPI
#include <mpi.h>
/* The duplicated communicator (MPI_ERRORS_RETURN is set on it). */
MPI_Comm wf_mpi_comm_handle(const wf_mpi_comm *c);
#endif

#endif

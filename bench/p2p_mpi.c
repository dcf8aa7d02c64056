/* p2p_mpi.c - the MPI side of weft-bench's point-to-point ops, same columns
 * and definitions: pingpong (MPI_Send/MPI_Recv between ranks 0 and 1, time =
 * half the round trip) and sendrecv (a ring shift with MPI_Sendrecv, time
 * per iteration). Mean over iterations, max over ranks. Not built by CMake;
 * bench/p2p_compare.sh builds it with mpicc.
 *
 * usage: mpirun -np 2 p2p_mpi pingpong|sendrecv SIZE[,SIZE...] ITERS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 4 || size < 2) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -np N p2p_mpi pingpong|sendrecv SIZES ITERS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int pingpong = !strcmp(argv[1], "pingpong"), iters = atoi(argv[3]);
  char list[1024];
  snprintf(list, sizeof list, "%s", argv[2]);
  size_t maxb = 0;
  for (char *s = list, *t; (t = strtok(s, ",")); s = NULL)
    if ((size_t)strtoull(t, NULL, 0) > maxb) maxb = strtoull(t, NULL, 0);
  char *sbuf = malloc(maxb + 1), *rbuf = malloc(maxb + 1);
  memset(sbuf, 1, maxb + 1);
  memset(rbuf, 0, maxb + 1);
  if (rank == 0) printf("# mpi %s, world size %d\n# %12s %13s %13s %13s %13s\n", argv[1], size, "size(B)",
                        "count(elts)", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
  snprintf(list, sizeof list, "%s", argv[2]);
  for (char *s = list, *t; (t = strtok(s, ",")); s = NULL) {
    int bytes = (int)strtoull(t, NULL, 0);
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    double t0 = 0;
    for (int it = -5; it < iters; it++) {
      if (it == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
      }
      if (pingpong) {
        if (rank == 0) {
          MPI_Send(sbuf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
          MPI_Recv(rbuf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
          MPI_Recv(rbuf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(rbuf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
      } else {
        MPI_Sendrecv(sbuf, bytes, MPI_BYTE, to, 2, rbuf, bytes, MPI_BYTE, from, 2, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
      }
    }
    double tm = (MPI_Wtime() - t0) / iters, mx;
    if (pingpong) tm /= 2;
    MPI_Reduce(&tm, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
      printf("%14d %13d %13.2f %13.3f %13.3f\n", bytes, bytes / 4, mx * 1e6, bytes / mx / 1e9, bytes / mx / 1e9);
  }
  free(sbuf);
  free(rbuf);
  MPI_Finalize();
  return 0;
}

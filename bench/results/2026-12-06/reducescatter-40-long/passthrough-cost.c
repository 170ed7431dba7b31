/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * passthrough-cost.c - what squall's pass-through path costs a
 * reduce-scatter on shared memory, against a known delay: blocks of
 * `calls` reduce-scatters of recvcount floats, three kinds rotated 30
 * times, the median block (slowest rank) of each:
 *   plain          PMPI_Reduce_scatter_block
 *   plain + busy   the same after a busy wait of `us` microseconds
 *   squall none    squallMpiReduceScatterBlock, SQUALL_COMPRESS=none
 * With 4 ranks on 2 cores a rank's extra CPU time delays the others that
 * share its core, so the busy wait calibrates what a microsecond of CPU
 * before each call costs there.
 *   mpicc -O2 -I include passthrough-cost.c -L build/.libs -lsquall-mpi -lsquall \
 *     -Wl,-rpath,$PWD/build/.libs -o /tmp/passthrough-cost
 *   SQUALL_COMPRESS=none mpirun -n 4 /tmp/passthrough-cost 4096 200 1
 */
#include <mpi.h>
#include <squall_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void busy(double s) {
  double t0 = now();
  while (now() - t0 < s) {
  }
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc != 4) {
    if (!rank) fprintf(stderr, "usage: passthrough-cost RECVCOUNT CALLS BUSY_US\n");
    MPI_Finalize();
    return 2;
  }
  int rc = atoi(argv[1]), calls = atoi(argv[2]);
  double extra = atof(argv[3]) * 1e-6;
  enum { REPS = 30 };
  float *s = calloc((size_t)rc * (size_t)n, 4), *r = calloc((size_t)rc, 4);
  double t[3 * REPS], med[3];
  for (int rep = 0; rep < REPS; rep++)
    for (int k = 0; k < 3; k++) {
      int kind = (k + rep) % 3; /* each kind in each place of the rotation */
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < calls; i++) {
        if (kind == 2) {
          squallMpiReduceScatterBlock(s, r, rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else {
          if (kind == 1) busy(extra);
          PMPI_Reduce_scatter_block(s, r, rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
      }
      t[kind * REPS + rep] = (MPI_Wtime() - t0) / calls;
    }
  MPI_Allreduce(MPI_IN_PLACE, t, 3 * REPS, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  for (int k = 0; k < 3; k++) {
    qsort(t + k * REPS, REPS, sizeof(double), cmp);
    med[k] = t[k * REPS + REPS / 2];
  }
  if (!rank)
    printf("%d ranks, recvcount %d: plain %.2f us, plain + %.2f us busy %.2f us (%.3fx), squall none %.2f us (%.3fx)\n",
           n, rc, med[0] * 1e6, extra * 1e6, med[1] * 1e6, med[0] / med[1], med[2] * 1e6, med[0] / med[2]);
  free(s);
  free(r);
  MPI_Finalize();
  return 0;
}

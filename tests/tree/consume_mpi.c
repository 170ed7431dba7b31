/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * consume_mpi.c - an MPI program that calls squallMpiAllreduce, built by
 * tests/tree/consume.sh and tests/tree/build-mpich.sh against a squall
 * outside the tree (an install, or another MPI's build): the sum over the
 * ranks, checked on every rank.
 */
#include <stdio.h>

#include <mpi.h>
#include <squall_mpi.h>

int main(int argc, char **argv) {
  enum { n = 1 << 16 };
  static float send[n], recv[n];
  MPI_Init(&argc, &argv);
  int rank, size, bad = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 0; i < n; i++) send[i] = (float)(i % 32 + rank);
  int rc = squallMpiAllreduce(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "consume_mpi: rank %d: squallMpiAllreduce returned %d: %s\n", rank, rc, squallGetLastError());
    bad = 1;
  }
  /* the values and their sums are small integers: exact in fp16 too */
  for (int i = 0; i < n && !bad; i++) {
    float want = (float)(size * (i % 32) + size * (size - 1) / 2);
    if (recv[i] != want) {
      fprintf(stderr, "consume_mpi: rank %d: element %d is %g, not %g\n", rank, i, recv[i], want);
      bad = 1;
    }
  }
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && !any) printf("consume_mpi: %d ranks, %d elements: the sum on every rank\n", size, n);
  MPI_Finalize();
  return any;
}

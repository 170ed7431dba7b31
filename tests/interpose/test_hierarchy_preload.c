/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_hierarchy_preload.c - a plain NCCL program (it knows nothing of
 * squall) for tests/interpose/hierarchy-preload.sh, which runs it under squall's
 * NCCL interposer with SQUALL_COMPRESS=fp16 on 4 ranks as 2 nodes x 2:
 * sums of dyadic inputs (multiples of 1/8 in [-8, 8]), which fp16 carries
 * exactly flat or two-level, must come out exact and identical on every
 * rank, in place too. Which path ran is for the script to read from the
 * statistics: here only the results. Prints the number of all-reduces.
 */
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float gen(unsigned seed, int r, size_t i) {
  uint64_t x = (uint64_t)seed * 1000003u + (uint64_t)r * 7919u + i + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (float)((int)(x % 129) - 64) / 8.0f;
}

int main(int argc, char **argv) {
  int rank, nranks, bad = 0, calls = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  size_t counts[] = {4099, 100000, 4099, 7};
  for (int t = 0; t < 4; t++) {
    size_t n = counts[t];
    int in_place = t == 2;
    float *g = malloc(n * 4), *out = malloc(n * 4), *all = malloc(n * 4 * (size_t)nranks);
    for (size_t i = 0; i < n; i++) g[i] = gen((unsigned)t, rank, i);
    ncclResult_t r = ncclAllReduce(g, in_place ? g : out, n, ncclFloat32, ncclSum, comm, NULL);
    const float *res = in_place ? g : out;
    calls++;
    if (r != ncclSuccess) {
      fprintf(stderr, "rank %d: FAIL: call %d: %s\n", rank, t, ncclGetErrorString(r));
      bad++;
    }
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
      float sum = 0;
      for (int q = 0; q < nranks; q++) sum += gen((unsigned)t, q, i);
      wrong += res[i] != sum;
    }
    if (wrong) {
      fprintf(stderr, "rank %d: FAIL: call %d (n=%zu): %zu elements differ from the exact sum\n", rank, t, n,
              wrong);
      bad++;
    }
    MPI_Allgather(res, (int)n * 4, MPI_BYTE, all, (int)n * 4, MPI_BYTE, MPI_COMM_WORLD);
    for (int q = 1; q < nranks; q++)
      if (memcmp(all, all + (size_t)q * n, n * 4) != 0) {
        fprintf(stderr, "rank %d: FAIL: call %d: rank %d's result differs from rank 0's\n", rank, t, q);
        bad++;
      }
    free(g);
    free(out);
    free(all);
  }
  ncclCommDestroy(comm);
  int total = 0;
  MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_hierarchy_preload: %d all-reduces, %d failures\n", calls, total);
  MPI_Finalize();
  return total ? 1 : 0;
}

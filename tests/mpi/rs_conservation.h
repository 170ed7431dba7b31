/* SPDX-License-Identifier: BSD-3-Clause */
/* rs_conservation.h - what the reduce-scatter tests through MPI
 * (test_reducescatter_mpi.c) and through the test NCCL
 * (tests/nccl/test_nccl_reducescatter.c) share: the counters they read and
 * the sums that conservation compares. It needs MPI (both run on it: the
 * test NCCL is written on MPI) and squall.h, neither Check nor an
 * entry point's header, so each test keeps its own way to assert. */
#ifndef SQUALL_TESTS_MPI_RS_CONSERVATION_H
#define SQUALL_TESTS_MPI_RS_CONSERVATION_H

#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

#include "squall.h"

static inline uint64_t rs_passes(squallPassReason_t why) {
  squallStats_t st = SQUALL_STATS_INITIALIZER;
  squallStatsGet(&st);
  return st.passthrough[why];
}

static inline uint64_t rs_compressed(void) {
  squallStats_t st = SQUALL_STATS_INITIALIZER;
  squallStatsGet(&st);
  return st.compressedCalls;
}

/* What rs_conserve found: how many of the n elements differ (the first of
 * them: its index and its three sums), and how many have a residual. */
typedef struct {
  size_t bad, first, lossy;
  double got, res, in;
} rs_sums;

/* T reduce-scatters of rc elements a rank, the input of step t on rank r
 * gen(seed0 + t, r, i): the sum over steps of the shards, gathered, plus
 * every rank's residual must equal the sum of every input; in double,
 * where every term is a float multiple of 2^-20 or coarser below 2^12, so
 * every sum is exact. shards: this rank's, T x rc; res: its residual, n =
 * rc x nranks. Collective over MPI_COMM_WORLD. */
static inline rs_sums rs_conserve(const float *shards, const float *res, size_t rc, int T, int seed0,
                                  float (*gen)(int seed, int r, size_t i), int rank, int nranks) {
  size_t n = rc * (size_t)nranks;
  double *mine = calloc(rc, 8), *got = malloc(n * 8), *in = calloc(n, 8), *in_all = malloc(n * 8);
  double *r = malloc(n * 8), *r_all = malloc(n * 8);
  for (int t = 0; t < T; t++)
    for (size_t i = 0; i < rc; i++) mine[i] += shards[(size_t)t * rc + i];
  for (int t = 0; t < T; t++)
    for (size_t i = 0; i < n; i++) in[i] += gen(seed0 + t, rank, i);
  for (size_t i = 0; i < n; i++) r[i] = res[i];
  MPI_Allgather(mine, (int)rc, MPI_DOUBLE, got, (int)rc, MPI_DOUBLE, MPI_COMM_WORLD);
  MPI_Allreduce(in, in_all, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(r, r_all, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  rs_sums s = {0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < n; i++) {
    if (got[i] + r_all[i] != in_all[i] && s.bad++ == 0) s.first = i, s.got = got[i], s.res = r_all[i], s.in = in_all[i];
    s.lossy += r_all[i] != 0;
  }
  free(mine);
  free(got);
  free(in);
  free(in_all);
  free(r);
  free(r_all);
  return s;
}

#endif

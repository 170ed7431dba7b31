/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_preload_reducescatter.c - an NCCL program that knows nothing of
 * squall, for tests/interpose/preload-reducescatter.sh: on NCCL_RS_STEPS
 * (5) steps it reduce-scatters a float32 tensor (ncclSum), then does one
 * reduce-scatter inside ncclGroupStart/End and one all-reduce. Every
 * shard is checked against the exact sum of the dyadic inputs: bit for
 * bit in mode "plain" (the call reached NCCL unchanged), within the int8
 * codec's error in mode "int8" (squall compressed it). Mode "mpi" makes
 * float MPI_Allreduce calls instead, for the MPI interposer. The script
 * reads the SQUALL_STATS files for which calls squall took.
 */
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 5,
       RC = 2048,
       AR = 1024 };

static int rank, nranks, failures;

static float gen(int step, int r, size_t i) { /* multiples of 1/8 in [-8, 8] */
  unsigned x = (unsigned)(step * 2654435761u) ^ (unsigned)(r * 40503u) ^ (unsigned)(i * 2246822519u);
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return (float)((int)(x % 129) - 64) / 8.0f;
}

/* This rank's shard of step's inputs, summed exactly (dyadic). */
static void exact_shard(int step, float *want) {
  for (size_t i = 0; i < RC; i++) {
    float s = 0;
    for (int r = 0; r < nranks; r++) s += gen(step, r, (size_t)rank * RC + i);
    want[i] = s;
  }
}

/* plain: the bits of the exact sum; int8: each rank's code is off by at
 * most half a step of its bucket's scale (at most 8/127 here), and error
 * feedback adds at most the last residual: within 2 * 8/127 per rank. */
static void check_shard(const char *mode, const float *got, const float *want, const char *what) {
  int plain = !strcmp(mode, "plain");
  double tol = plain ? 0.0 : 2.0 * 8.0 / 127.0 * nranks;
  for (size_t i = 0; i < RC; i++)
    if (!(fabs((double)got[i] - (double)want[i]) <= tol)) {
      fprintf(stderr, "rank %d: FAIL: %s, element %zu: %g, expected %g (tolerance %g)\n", rank, what, i, got[i],
              want[i], tol);
      failures++;
      return;
    }
}

/* Mode "mpi", for the MPI interposer: STEPS float all-reduces (MPI_SUM),
 * each within the int8 codec's error of the exact sum (bit for bit where
 * squall passed it through: the sums of 1/8 steps are exact). */
static int mpi_mode(void) {
  float *g = malloc(RC * 4), *out = malloc(RC * 4);
  for (int step = 0; step < STEPS; step++) {
    for (size_t i = 0; i < RC; i++) g[i] = gen(step, rank, i);
    if (MPI_Allreduce(g, out, RC, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) failures++;
    for (size_t i = 0; i < RC; i++) {
      float s = 0;
      for (int r = 0; r < nranks; r++) s += gen(step, r, i);
      if (!(fabs((double)out[i] - s) <= 2.0 * 8.0 / 127.0 * nranks)) {
        fprintf(stderr, "rank %d: FAIL: MPI_Allreduce step %d element %zu: %g, expected %g\n", rank, step, i, out[i], s);
        failures++;
        break;
      }
    }
  }
  free(g);
  free(out);
  int any = 0;
  PMPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && !any) printf("test_preload_reducescatter mpi: every sum as expected\n");
  MPI_Finalize();
  return any ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "plain") && strcmp(argv[1], "int8") && strcmp(argv[1], "mpi"))) {
    fprintf(stderr, "usage: test_preload_reducescatter plain|int8|mpi\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (!strcmp(argv[1], "mpi")) return mpi_mode();
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) {
    fprintf(stderr, "ncclCommInitRank failed\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  size_t n = (size_t)RC * (size_t)nranks;
  float *g = malloc(n * 4), *out = malloc(RC * 4), *want = malloc(RC * 4);
  for (int step = 0; step <= STEPS; step++) {
    for (size_t i = 0; i < n; i++) g[i] = gen(step, rank, i);
    exact_shard(step, want);
    int grouped = step == STEPS; /* the last one in a group: it passes through (in_group) */
    if (grouped) ncclGroupStart();
    ncclResult_t r = ncclReduceScatter(g, out, RC, ncclFloat32, ncclSum, comm, NULL);
    if (grouped) {
      ncclResult_t e = ncclGroupEnd();
      if (r == ncclSuccess) r = e;
    }
    if (r != ncclSuccess) {
      fprintf(stderr, "rank %d: FAIL: ncclReduceScatter step %d: %s\n", rank, step, ncclGetErrorString(r));
      failures++;
      continue;
    }
    check_shard(grouped ? "plain" : argv[1], out, want, grouped ? "grouped reduce-scatter" : "reduce-scatter");
  }
  /* one all-reduce: SQUALL_COLLECTIVES holds allreduce in every run */
  float *a = malloc(AR * 4);
  for (size_t i = 0; i < AR; i++) a[i] = 1.0f;
  if (ncclAllReduce(a, a, AR, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess || fabs(a[0] - (float)nranks) > 0.1f) {
    fprintf(stderr, "rank %d: FAIL: the all-reduce\n", rank);
    failures++;
  }
  ncclCommDestroy(comm);
  int any = 0;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && !any) printf("test_preload_reducescatter %s: every shard as expected\n", argv[1]);
  free(g);
  free(out);
  free(want);
  free(a);
  MPI_Finalize();
  return any ? 1 : 0;
}

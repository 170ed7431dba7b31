/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_preload_mpi_rs.c - an MPI program that knows nothing of squall, for
 * tests/interpose/preload-mpi-rs.sh, which runs it under the MPI
 * interposer (LD_PRELOAD=libsquall-preload-mpi.so). On STEPS steps it
 * reduce-scatters float32 tensors (MPI_SUM) five ways:
 *   MPI_Reduce_scatter_block, out of place and in place (MPI_IN_PLACE);
 *   MPI_Reduce_scatter with equal recvcounts, out of place and in place;
 *   MPI_Reduce_scatter with uneven recvcounts (RC + rank for each rank).
 * Each shard is compared with the exact sum of the dyadic inputs and with
 * what the PMPI_ call itself returns for the same input: bit for bit in
 * mode "plain" (every call reached MPI unchanged), within the int8 codec's
 * error in mode "int8" (squall compressed the four equal-count calls).
 * The uneven call is checked bit for bit in both modes: it always passes
 * through. The script reads the SQUALL_STATS files for which calls squall
 * took, and the log for the uneven counts' INFO line.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 5,
       RC = 2048 };

static int rank, nranks, failures;

static float gen(int step, int r, size_t i) { /* multiples of 1/8 in [-8, 8] */
  unsigned x = (unsigned)(step * 2654435761u) ^ (unsigned)(r * 40503u) ^ (unsigned)(i * 2246822519u);
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return (float)((int)(x % 129) - 64) / 8.0f;
}

/* Elements [off, off + len) of step's inputs summed over the ranks:
 * exact (dyadic, far from float's precision), whatever the order. */
static void exact(int step, size_t off, size_t len, float *want) {
  for (size_t i = 0; i < len; i++) {
    float s = 0;
    for (int r = 0; r < nranks; r++) s += gen(step, r, off + i);
    want[i] = s;
  }
}

/* plain: the bits of the exact sum and of PMPI's answer; int8: each
 * rank's code is off by at most half a step of its bucket's scale (at
 * most 8/127 here), and error feedback adds at most the last residual:
 * within 2 * 8/127 per rank. */
static void check(int plain, const float *got, const float *want, const float *pmpi, size_t len, int step,
                  const char *what) {
  double tol = plain ? 0.0 : 2.0 * 8.0 / 127.0 * nranks;
  if (plain && memcmp(got, pmpi, len * sizeof *got) != 0) {
    fprintf(stderr, "rank %d: FAIL: %s step %d: not the bits PMPI gives\n", rank, what, step);
    failures++;
    return;
  }
  for (size_t i = 0; i < len; i++)
    if (!(fabs((double)got[i] - (double)want[i]) <= tol)) {
      fprintf(stderr, "rank %d: FAIL: %s step %d, element %zu: %g, expected %g (tolerance %g)\n", rank, what, step,
              i, got[i], want[i], tol);
      failures++;
      return;
    }
}

static void ok_or_fail(int rc, const char *what, int step) {
  if (rc == MPI_SUCCESS) return;
  fprintf(stderr, "rank %d: FAIL: %s step %d returned %d\n", rank, what, step, rc);
  failures++;
}

/* The four equal-count calls of one step; each tensor keeps its own
 * buffers over the steps (its own residual in squall). */
static void equal_calls(int step, int plain, float *const *send, float *const *inplace, const int *counts, float *out,
                        float *ref, float *want) {
  size_t n = (size_t)RC * (size_t)nranks;
  exact(step, (size_t)rank * RC, RC, want);
  for (size_t i = 0; i < n; i++) send[0][i] = send[1][i] = gen(step, rank, i);
  ok_or_fail(PMPI_Reduce_scatter_block(send[0], ref, RC, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "PMPI block", step);
  ok_or_fail(MPI_Reduce_scatter_block(send[0], out, RC, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "block", step);
  check(plain, out, want, ref, RC, step, "MPI_Reduce_scatter_block");
  for (size_t i = 0; i < n; i++) inplace[0][i] = gen(step, rank, i);
  ok_or_fail(MPI_Reduce_scatter_block(MPI_IN_PLACE, inplace[0], RC, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
             "block in place", step);
  check(plain, inplace[0], want, ref, RC, step, "MPI_Reduce_scatter_block in place");
  ok_or_fail(PMPI_Reduce_scatter(send[1], ref, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "PMPI equal", step);
  ok_or_fail(MPI_Reduce_scatter(send[1], out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "equal", step);
  check(plain, out, want, ref, RC, step, "MPI_Reduce_scatter, equal counts");
  for (size_t i = 0; i < n; i++) inplace[1][i] = gen(step, rank, i);
  ok_or_fail(MPI_Reduce_scatter(MPI_IN_PLACE, inplace[1], counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
             "equal in place", step);
  check(plain, inplace[1], want, ref, RC, step, "MPI_Reduce_scatter in place, equal counts");
}

/* The uneven call: MPI's own answer in every mode. */
static void uneven_call(int step, float *send, const int *counts, float *out, float *ref, float *want) {
  size_t n = 0, off = 0;
  for (int r = 0; r < nranks; r++) {
    if (r < rank) off += (size_t)counts[r];
    n += (size_t)counts[r];
  }
  for (size_t i = 0; i < n; i++) send[i] = gen(step, rank, i);
  exact(step, off, (size_t)counts[rank], want);
  ok_or_fail(PMPI_Reduce_scatter(send, ref, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "PMPI uneven", step);
  ok_or_fail(MPI_Reduce_scatter(send, out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "uneven", step);
  check(1, out, want, ref, (size_t)counts[rank], step, "MPI_Reduce_scatter, uneven counts");
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "plain") && strcmp(argv[1], "int8"))) {
    fprintf(stderr, "usage: test_preload_mpi_rs plain|int8\n");
    return 2;
  }
  int plain = !strcmp(argv[1], "plain");
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  size_t n = (size_t)(RC + nranks) * (size_t)nranks;
  int *equal = malloc((size_t)nranks * sizeof *equal), *uneven = malloc((size_t)nranks * sizeof *uneven);
  for (int r = 0; r < nranks; r++) {
    equal[r] = RC;
    uneven[r] = RC + r;
  }
  float *send[2] = {malloc(n * 4), malloc(n * 4)}, *inplace[2] = {malloc(n * 4), malloc(n * 4)};
  float *usend = malloc(n * 4), *out = malloc((RC + nranks) * 4), *ref = malloc((RC + nranks) * 4);
  float *want = malloc((RC + nranks) * 4);
  for (int step = 0; step < STEPS; step++) {
    equal_calls(step, plain, send, inplace, equal, out, ref, want);
    uneven_call(step, usend, uneven, out, ref, want);
  }
  int any = 0;
  PMPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && !any) printf("test_preload_mpi_rs %s: every shard as expected\n", argv[1]);
  free(send[0]);
  free(send[1]);
  free(inplace[0]);
  free(inplace[1]);
  free(usend);
  free(out);
  free(ref);
  free(want);
  free(equal);
  free(uneven);
  MPI_Finalize();
  return any ? 1 : 0;
}

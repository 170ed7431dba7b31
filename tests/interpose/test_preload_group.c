/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_preload_group.c - ncclGroupStart/ncclGroupEnd under the NCCL
 * interposer, on the host-memory test NCCL (tests/nccl/fakenccl), run by
 * tests/interpose/preload-group.sh with top-k. A plain NCCL program: it
 * knows nothing of squall, and compares two communicators over the same
 * ranks, A (calls grouped) and B (the same calls, ungrouped), whose
 * residuals start empty alike.
 *
 *   test_preload_group run     groups, then prints "expect COMPRESSED IN_GROUP"
 *   test_preload_group fault   a grouped call that fails inside squall
 *
 * run: a group of all-reduces alone (a nested group in it) gives the same
 * bits as the ungrouped calls, and nothing before its ncclGroupEnd; a group
 * that mixes in an ncclAllGather, one over A and B, and one ended by
 * ncclGroupSimulateEnd give the exact sum (passed through). fault: with
 * FAKENCCL_FAULT, ncclGroupEnd returns the failure on every rank, and the
 * next call matches the ungrouped twin's: the residual was kept alike.
 */
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks, failures;

static void check(int ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "test_preload_group: rank %d: FAIL: %s\n", rank, what);
  failures++;
}

#define N 20000
#define T 3 /* tensors per group */

static float send[2][T][N], recv[2][T][N];

/* Integer values: every dense sum is exact whatever the order. */
static void fill(int step) {
  for (int c = 0; c < 2; c++)
    for (int t = 0; t < T; t++)
      for (int i = 0; i < N; i++) send[c][t][i] = (float)((rank * 7 + i * 13 + t * 5 + step * 3) % 97 - 48);
  memset(recv, 0x5a, sizeof recv);
}

static int exact(int c, int t, int step) {
  for (int i = 0; i < N; i++) {
    float s = 0;
    for (int q = 0; q < nranks; q++) s += (float)((q * 7 + i * 13 + t * 5 + step * 3) % 97 - 48);
    if (recv[c][t][i] != s) return 0;
  }
  return 1;
}

static ncclComm_t new_comm(void) {
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  check(ncclCommInitRank(&comm, nranks, id, rank) == ncclSuccess, "ncclCommInitRank");
  return comm;
}

static int everywhere(int ok) {
  int all;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all;
}

static void ar(int c, int t, ncclComm_t comm) {
  check(ncclAllReduce(send[c][t], recv[c][t], N, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess,
        "ncclAllReduce returned an error");
}

/* Tensors 0..T-1 on A, grouped (tensor 1 in a nested group); B ungrouped. */
static void clean_group(ncclComm_t a, ncclComm_t b, int step) {
  fill(step);
  check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  ar(0, 0, a);
  check(ncclGroupStart() == ncclSuccess, "nested ncclGroupStart");
  ar(0, 1, a);
  check(ncclGroupEnd() == ncclSuccess, "nested ncclGroupEnd");
  ar(0, 2, a);
  unsigned char sentinel[4];
  memset(sentinel, 0x5a, sizeof sentinel);
  check(memcmp(recv[0][0], sentinel, 4) == 0, "a grouped call ran before its ncclGroupEnd");
  check(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd of a group of all-reduces");
  for (int t = 0; t < T; t++) ar(1, t, b);
  check(memcmp(recv[0], recv[1], sizeof recv[0]) == 0, "the group's results differ from the ungrouped calls'");
  check(!exact(0, 0, step), "top-k gave the exact sum: not compressed?");
}

static void mixed_groups(ncclComm_t a, ncclComm_t b, int step) {
  fill(step);
  int gathered[64];
  check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  ar(0, 0, a);
  check(ncclAllGather(&rank, gathered, 1, ncclInt32, a, NULL) == ncclSuccess, "ncclAllGather");
  ar(0, 1, a);
  check(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd of a mixed group");
  check(exact(0, 0, step) && exact(0, 1, step), "a mixed group is not the exact sum");
  for (int q = 0; q < nranks; q++) check(gathered[q] == q, "the all-gather in the group");
  /* two communicators */
  check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  ar(0, 2, a);
  ar(1, 2, b);
  check(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd of a group on two communicators");
  check(exact(0, 2, step) && exact(1, 2, step), "a group on two communicators is not the exact sum");
  /* simulated: the test NCCL runs what it is given, so the sum is there */
  check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  ar(1, 0, b);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  check(ncclGroupSimulateEnd(&sim) == ncclSuccess, "ncclGroupSimulateEnd");
  check(exact(1, 0, step), "a simulated group's call did not pass through");
}

static int run(void) {
  ncclComm_t a = new_comm(), b = new_comm();
  long compressed = 0, in_group = 0;
  for (int step = 0; step < 3; step++) {
    clean_group(a, b, step);
    compressed += 2 * T;
  }
  for (int step = 3; step < 5; step++) {
    mixed_groups(a, b, step);
    in_group += 5;
  }
  clean_group(a, b, 5); /* compressed again */
  compressed += 2 * T;
  check(ncclGroupEnd() == ncclInvalidUsage, "a stray ncclGroupEnd is NCCL's ncclInvalidUsage");
  ncclCommDestroy(a);
  ncclCommDestroy(b);
  printf("expect %ld %ld\n", compressed, in_group); /* every rank: the same */
  return 0;
}

/* squall's second collective of the call fails (after the residual was
 * rewritten), grouped on A and ungrouped on B; then one more call each. */
static int fault(void) {
  ncclComm_t a = new_comm(), b = new_comm();
  fill(0);
  check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  ar(0, 0, a);
  setenv("FAKENCCL_FAULT", "fail:2", 1);
  ncclResult_t r = ncclGroupEnd();
  unsetenv("FAKENCCL_FAULT");
  check(everywhere(r == ncclSystemError), "ncclGroupEnd did not return the failure on every rank");
  setenv("FAKENCCL_FAULT", "fail:02", 1);
  r = ncclAllReduce(send[1][0], recv[1][0], N, ncclFloat32, ncclSum, b, NULL);
  unsetenv("FAKENCCL_FAULT");
  check(everywhere(r == ncclSystemError), "the ungrouped twin did not fail alike");
  fill(1);
  check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  ar(0, 0, a);
  check(ncclGroupEnd() == ncclSuccess, "the group after the failure");
  ar(1, 0, b);
  check(memcmp(recv[0][0], recv[1][0], sizeof recv[0][0]) == 0,
        "after a failed grouped call the residual differs from the ungrouped call's");
  check(!exact(0, 0, 1), "top-k gave the exact sum: not compressed?");
  ncclCommDestroy(a);
  ncclCommDestroy(b);
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (argc != 2 || (strcmp(argv[1], "run") && strcmp(argv[1], "fault"))) {
    if (rank == 0) fprintf(stderr, "usage: test_preload_group run|fault\n");
    MPI_Finalize();
    return 2;
  }
  if (nranks > 64) {
    if (rank == 0) fprintf(stderr, "test_preload_group: at most 64 ranks\n");
    MPI_Finalize();
    return 2;
  }
  if (!strcmp(argv[1], "run")) run();
  else fault();
  int bad;
  MPI_Allreduce(&failures, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_preload_group %s: %d failures\n", argv[1], bad);
  MPI_Finalize();
  return bad ? 1 : 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_nccl_tracking.c - what the NCCL interposer records about a
 * communicator (a PreMulSum op, a non-blocking mark), when recording it
 * runs out of memory (one failing calloc): the all-reduces it concerns
 * must fail with ncclSystemError, never take a path the peers do not take
 * (pass through where they compress, or compress where they pass through).
 * Every rank injects the same failure, so that no rank waits for another.
 * Run on 2 ranks (tests/nccl/runs.list) on the test-only host NCCL.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_nccl.h"
#include "engine/residual.h"
#include "nccl_test_util.h"
#include "nccl_comm.h"
#include "squall_nccl.h"

static int rank, nranks, passed, failed;

static void check(int ok, const char *what) {
  if (ok) {
    passed++;
  } else {
    failed++;
    fprintf(stderr, "rank %d: FAIL: %s\n", rank, what);
  }
}

/* The next calloc fails when armed; libsquall_core is linked in, so its
 * calls bind to this one. */
extern void *__libc_calloc(size_t n, size_t size);
static int calloc_armed, calloc_fired;

void *calloc(size_t n, size_t size) {
  if (calloc_armed) {
    calloc_armed = 0;
    calloc_fired = 1;
    return NULL;
  }
  return __libc_calloc(n, size);
}

static ncclComm_t new_comm(void) { return test_nccl_comm(rank, nranks); }

/* A PreMulSum op of scale 0.5, recorded (or not, when the calloc fails)
 * as the interposer does when the program creates it. */
static ncclRedOp_t premul_op(ncclComm_t comm, int fail) {
  ncclRedOp_t op;
  float half = 0.5f;
  if (ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32, ncclScalarHostImmediate, comm) != ncclSuccess) {
    fprintf(stderr, "ncclRedOpCreatePreMulSum failed\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  calloc_armed = fail;
  calloc_fired = 0;
  squall__nccl_premul_add(comm, op, &half, ncclFloat32, ncclScalarHostImmediate);
  calloc_armed = 0;
  check(calloc_fired == fail, "the injected calloc failure hit the recording");
  return op;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  use("SQUALL_COMPRESS=fp16");
  size_t n = 4099;
  float *g = malloc(n * 4), *out = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen(5, rank, i);
  squallStats_t a, b;

  /* recorded: a PreMulSum call is a compressed sum of 0.5 * input (exact:
   * dyadic inputs and fp16) */
  ncclComm_t comm = new_comm();
  ncclRedOp_t op = premul_op(comm, 0);
  squallStatsGet(&a);
  check(squallAllReduce(g, out, n, ncclFloat32, op, comm, NULL) == ncclSuccess, "recorded op: call");
  squallStatsGet(&b);
  check(b.compressedCalls - a.compressedCalls == 1, "recorded op: compressed");
  int exact = 1;
  for (size_t i = 0; i < n; i++) {
    float sum = 0;
    for (int r = 0; r < nranks; r++) sum += 0.5f * gen(5, r, i);
    exact &= out[i] == sum;
  }
  check(exact, "recorded op: the sum of 0.5 * input, exactly");
  squall__nccl_premul_remove(comm, op);
  ncclRedOpDestroy(op, comm);

  /* not recorded: an error, not a pass-through on this rank alone */
  op = premul_op(comm, 1);
  squallStatsGet(&a);
  check(squallAllReduce(g, out, n, ncclFloat32, op, comm, NULL) == ncclSystemError,
        "unrecorded PreMulSum op: ncclSystemError");
  squallStatsGet(&b);
  check(b.calls == a.calls, "unrecorded PreMulSum op: nothing ran");
  check(squallAllReduce(g, out, n, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess,
        "unrecorded PreMulSum op: other ops still run");
  /* destroyed: its number may come back for an op that is recorded */
  squall__nccl_premul_remove(comm, op);
  ncclRedOpDestroy(op, comm);
  op = premul_op(comm, 0);
  check(squallAllReduce(g, out, n, ncclFloat32, op, comm, NULL) == ncclSuccess,
        "an op recorded after the lost one was destroyed: runs");
  squall__nccl_premul_remove(comm, op);
  ncclRedOpDestroy(op, comm);
  squallCommForget(comm);
  ncclCommDestroy(comm);

  /* a non-blocking mark that cannot be recorded (the communicator's state
   * is new: its calloc fails): an error, not a compressed call on this
   * rank alone */
  comm = new_comm();
  calloc_armed = 1;
  calloc_fired = 0;
  squall__nccl_mark_nonblocking(comm);
  calloc_armed = 0;
  check(calloc_fired, "the injected calloc failure hit the non-blocking mark");
  squallStatsGet(&a);
  check(squallAllReduce(g, out, n, ncclFloat32, ncclSum, comm, NULL) == ncclSystemError,
        "unrecorded non-blocking mark: ncclSystemError");
  squallStatsGet(&b);
  check(b.compressedCalls == a.compressedCalls, "unrecorded non-blocking mark: nothing compressed");
  squallCommForget(comm);
  ncclCommDestroy(comm);

  /* forgotten: a new communicator is unaffected */
  comm = new_comm();
  squall__nccl_mark_nonblocking(comm);
  squallStatsGet(&a);
  size_t held = squall__residuals_process_bytes();
  for (int step = 0; step < 3; step++)
    check(squallAllReduce(g, out, n, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "recorded mark: call");
  squallStatsGet(&b);
  check(b.passthrough[squallPassNonblocking] - a.passthrough[squallPassNonblocking] == 3,
        "recorded mark: passes through as non-blocking");
  /* what passes through prepares nothing: no residual is charged to
   * SQUALL_EF_MAX_BYTES, which other communicators share */
  check(squall__residuals_process_bytes() == held, "non-blocking calls hold no residual memory");
  squallCommForget(comm);
  ncclCommDestroy(comm);

  int tot[2] = {passed, failed}, sum[2];
  MPI_Reduce(tot, sum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("NCCL tracking faults, %d ranks: %d passed, %d failed\n", nranks, sum[0], sum[1]);
  free(g);
  free(out);
  MPI_Finalize();
  return failed ? 1 : 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_nccl_faults.c - squallAllReduce's failure policy on the test-only
 * host NCCL (tests/nccl/fakenccl), whose FAKENCCL_FAULT fails or corrupts the
 * n-th collective after it completed on every rank (run by
 * tests/nccl/runs.list: 2 and 3 ranks). This program also replaces
 * calloc (libsquall's host allocations resolve to it) to fail one large
 * allocation on one rank.
 *
 * Asserted: a failure after anything changed comes back as an error, never
 * as a passed-through "success" (which used to count data twice or all-reduce
 * a zeroed buffer); a corrupt top-k payload is ncclRemoteError; an
 * allocation failure on one rank makes every rank pass the call through
 * together; an overflowing count is ncclInvalidArgument; exact conservation
 * (inputs = outputs + residuals) over the calls that succeeded; ranks in
 * step afterwards. A hang fails through tests/run-mpi.sh's time limit.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <squall_nccl.h>

#include "nccl_comm.h"
#include "nccl_test_util.h"

static int rank, nranks, passed, failed;

static void check(int ok, const char *fmt, const char *what) {
  if (ok) {
    passed++;
  } else {
    failed++;
    fprintf(stderr, "rank %d: FAIL: %s%s\n", rank, fmt, what);
  }
}
#define CHECK(cond, what) check((cond), what, "")
#define CHECKS(cond, what, ctx) check((cond), what ": ", ctx)

/* -------------------------------------- one failing allocation (calloc) */
extern void *__libc_calloc(size_t n, size_t size);
static size_t calloc_min = 0; /* armed when nonzero: fail the next calloc of at least this */

/* default visibility (the build hides symbols): libsquall.so must bind to it */
__attribute__((visibility("default"))) void *calloc(size_t n, size_t size) {
  if (calloc_min && n * size >= calloc_min) {
    calloc_min = 0;
    if (getenv("TEST_DEBUG")) fprintf(stderr, "calloc(%zu, %zu) fails\n", n, size);
    return NULL;
  }
  return __libc_calloc(n, size);
}

/* --------------------------------------------------------------- helpers */
static int same_everywhere(long v) {
  long lo, hi;
  MPI_Allreduce(&v, &lo, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&v, &hi, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/* A plain NCCL all-reduce pairs with its peers': the ranks are in step. */
static void check_in_step(ncclComm_t comm, const char *ctx) {
  int mine = rank + 1, sum = 0;
  CHECKS(ncclAllReduce(&mine, &sum, 1, ncclInt32, ncclSum, comm, NULL) == ncclSuccess &&
             sum == nranks * (nranks + 1) / 2,
         "ranks in step afterwards", ctx);
}

/* What call 1 goes wrong by: a fault the test NCCL injects (FAKENCCL_FAULT),
 * or arguments that ranks other than 0 pass differently (an erroneous
 * program: NCCL requires the same count, type and operation everywhere). */
typedef struct {
  const char *fault;   /* FAKENCCL_FAULT, or NULL */
  size_t extra;        /* the others' count is n + extra */
  ncclDataType_t type; /* the others' type and operation */
  ncclRedOp_t op;
} call_fault;

/* Four calls of one tensor with the fault set for call 1; then a flush
 * (SQUALL_COMPRESS=topk:1 with a zero input sends g + residual = the
 * residual, and empties it), so that
 *   sum of successful outputs + flush == sum of successful inputs.
 * Mismatched arguments are refused before anything changed: the caller's
 * output is untouched as well. */
static void run_case(ncclComm_t comm, const char *spec, const call_fault *f, int in_place, ncclResult_t want) {
  char ctx[200];
  snprintf(ctx, sizeof ctx, "%s, %s%s (others: +%zu elements, type %d, op %d)%s", spec,
           f->fault ? "FAKENCCL_FAULT=" : "mismatch", f->fault ? f->fault : "", f->extra, (int)f->type,
           (int)f->op, in_place ? ", in place" : "");
  size_t n = 20011;
  float *g = calloc(n + f->extra, 4), *out = calloc(n + f->extra, 4), *before = malloc(n * 4);
  double *in_sum = calloc(n, 8), *out_sum = calloc(n, 8);
  use(spec);
  squallResetResiduals(comm);
  int failures = 0;
  for (int step = 0; step < 4; step++) {
    for (size_t i = 0; i < n; i++) g[i] = gen(10 + step, rank, i);
    float *send = g;
    if (in_place) {
      memcpy(out, g, n * 4);
      send = out;
    }
    int odd = step == 1 && !f->fault && rank != 0;
    if (step == 1 && f->fault) setenv("FAKENCCL_FAULT", f->fault, 1);
    if (step == 1 && !in_place) memset(out, 0x5a, n * 4);
    memcpy(before, out, n * 4);
    ncclResult_t r = squallAllReduce(send, out, odd ? n + f->extra : n, odd ? f->type : ncclFloat32,
                                     odd ? f->op : ncclSum, comm, NULL);
    unsetenv("FAKENCCL_FAULT");
    CHECKS(same_everywhere(r), "every rank returns the same", ctx);
    if (r != ncclSuccess && !f->fault)
      CHECKS(memcmp(before, out, n * 4) == 0, "refused arguments leave the output as it was", ctx);
    if (r == ncclSuccess) {
      for (size_t i = 0; i < n; i++) {
        for (int q = 0; q < nranks; q++) in_sum[i] += gen(10 + step, q, i);
        out_sum[i] += out[i];
      }
    } else {
      failures++;
      CHECKS(step == 1 && r == want, "the injected fault is returned as the expected error", ctx);
      /* a failed NCCL call is named with NCCL's own number and text */
      char nccl_says[160];
      snprintf(nccl_says, sizeof nccl_says, "NCCL error %d (%s)", (int)r, ncclGetErrorString(r));
      if (f->fault && !strncmp(f->fault, "fail:", 5))
        CHECKS(strstr(squallGetLastError(), nccl_says) != NULL, "the detail quotes NCCL's error", ctx);
    }
  }
  CHECKS(failures == 1, "exactly the faulty call failed", ctx);
  /* the flush, through the in-place tensor's key when that was the key */
  use("SQUALL_COMPRESS=topk:1");
  float *key = in_place ? out : g;
  memset(key, 0, n * 4);
  CHECKS(squallAllReduce(key, out, n, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "flush", ctx);
  int exact = 1;
  for (size_t i = 0; i < n; i++) exact &= out_sum[i] + out[i] == in_sum[i];
  CHECKS(exact, "outputs + residuals == inputs over the calls that succeeded", ctx);
  check_in_step(comm, ctx);
  free(g);
  free(out);
  free(before);
  free(in_sum);
  free(out_sum);
}

static void run_fault(ncclComm_t comm, const char *spec, const char *fault, int in_place, ncclResult_t want) {
  call_fault f = {fault, 0, ncclFloat32, ncclSum};
  run_case(comm, spec, &f, in_place, want);
}

/* Rank 0 cannot allocate the scratch of a new shape: every rank passes that
 * call through, and it is exact. */
static void run_alloc_fault(ncclComm_t comm, const char *spec, size_t n) {
  /* n: a size no call before had, so that the scratch must grow */
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen(30, rank, i);
  use(spec);
  squallStats_t before, after;
  squallStatsGet(&before);
  if (rank == 0) calloc_min = 64 * 1024;
  ncclResult_t r = squallAllReduce(g, out, n, ncclFloat32, ncclSum, comm, NULL);
  calloc_min = 0;
  squallStatsGet(&after);
  CHECKS(r == ncclSuccess, "a local allocation failure before anything collective is not an error", spec);
  CHECKS(after.passthrough[squallPassError] == before.passthrough[squallPassError] + 1,
         "every rank passed the call through (reason: error)", spec);
  ncclAllReduce(g, ref, n, ncclFloat32, ncclSum, comm, NULL);
  CHECKS(memcmp(out, ref, n * 4) == 0, "the passed-through call is exact", spec);
  CHECKS(squallAllReduce(g, out, n, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "the next call", spec);
  squallStatsGet(&before);
  CHECKS(before.compressedCalls == after.compressedCalls + 1, "the next call is compressed again", spec);
  check_in_step(comm, spec);
  free(g);
  free(out);
  free(ref);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclComm_t comm = test_nccl_comm(rank, nranks);
  /* Collectives of one compressed call on a host-memory communicator:
   * top-k: 1 header, 2 all-gather; 16-bit: 1 header, 2 max, 3 sum;
   * dense (topk:1): 1 header, 2 sum. */
  const char *topk = "SQUALL_COMPRESS=topk:0.02";
  for (int ip = 0; ip < 2; ip++) {
    run_fault(comm, topk, "fail:1", ip, ncclSystemError);
    run_fault(comm, topk, "fail:2", ip, ncclSystemError); /* after the residual was rewritten */
    run_fault(comm, topk, "corrupt:2", ip, ncclRemoteError);
    run_fault(comm, "SQUALL_COMPRESS=topk:0.02 SQUALL_TOPK_VALUES=fp16", "corrupt:2", ip, ncclRemoteError);
    for (int at = 1; at <= 3; at++) {
      char f[16];
      snprintf(f, sizeof f, "fail:%d", at);
      run_fault(comm, "SQUALL_COMPRESS=fp16", f, ip, ncclSystemError);
      run_fault(comm, "SQUALL_COMPRESS=bf16", f, ip, ncclSystemError);
    }
    run_fault(comm, "SQUALL_COMPRESS=topk:1", "fail:2", ip, ncclSystemError);
  }
  /* Arguments that differ between ranks, where every rank would compress
   * the call: found in the call header, ncclInvalidArgument everywhere
   * (they used to hang, or to fail on some ranks only). */
  const call_fault odd[] = {{NULL, 1, ncclFloat32, ncclSum},
                            {NULL, 4096, ncclFloat32, ncclSum},
                            {NULL, 0, ncclFloat32, ncclAvg},
                            {NULL, 0, ncclFloat16, ncclSum},
                            {NULL, 0, ncclBfloat16, ncclAvg}};
  const char *codecs[] = {topk, "SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=int8", "SQUALL_COMPRESS=topk:1"};
  if (nranks > 1)
    for (size_t k = 0; k < sizeof codecs / sizeof codecs[0]; k++)
      for (size_t m = 0; m < sizeof odd / sizeof odd[0]; m++) run_case(comm, codecs[k], &odd[m], (int)(m % 2), ncclInvalidArgument);
  run_alloc_fault(comm, topk, 70001);
  run_alloc_fault(comm, "SQUALL_COMPRESS=fp16", 90001);

  /* count * element size overflows: refused like NCCL, without touching memory */
  float x = 0;
  use(topk);
  CHECK(squallAllReduce(&x, &x, SIZE_MAX / 2 + 1, ncclFloat32, ncclSum, comm, NULL) == ncclInvalidArgument,
        "an overflowing count is ncclInvalidArgument");
  CHECK(strstr(squallGetLastError(), "squallAllReduce: count") != NULL,
        "squallGetLastError names the call and the count");
  CHECK(squallAllReduce(&x, &x, SIZE_MAX / 2 + 1, ncclInt32, ncclMax, comm, NULL) == ncclInvalidArgument,
        "an overflowing count is ncclInvalidArgument for a type squall passes through too");
  check_in_step(comm, "after the argument errors");

  squallCommForget(comm);
  ncclCommDestroy(comm);
  int tot[2] = {passed, failed}, sum[2];
  MPI_Reduce(tot, sum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("test_nccl_faults: %d passed, %d failed\n", sum[0], sum[1]);
  MPI_Finalize();
  return sum[1] && rank == 0 ? 1 : failed ? 1
                                          : 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_nccl_direct.c - squallAllReduce(), the direct API with
 * ncclAllReduce's signature, on host buffers through libsquall and the
 * test-only host NCCL (tests/nccl/fakenccl). Run on 2 and 3 ranks (tests/nccl/runs.list).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <squall_nccl.h>

#include "nccl_comm.h"
#include "nccl_test_util.h"
#include <squall_mpi.h>

static int rank, nranks, passed, failed;

static void check(int ok, const char *what) {
  if (ok) {
    passed++;
  } else {
    failed++;
    fprintf(stderr, "rank %d: FAIL: %s\n", rank, what);
  }
}

static int same_on_all_ranks(const void *buf, size_t bytes) {
  unsigned char *all = malloc(bytes * (size_t)nranks);
  MPI_Allgather(buf, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  int ok = 1;
  for (int r = 1; r < nranks; r++) ok &= memcmp(all, all + (size_t)r * bytes, bytes) == 0;
  free(all);
  return ok;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclComm_t comm = test_nccl_comm(rank, nranks);
  size_t n = 20011;
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen(1, rank, i);

  /* top-k: the NCCL transport gives the MPI transport's bits (rank-ordered
   * sparse sum), which test_engine_mpi checks against a sort reference. */
  use("SQUALL_COMPRESS=topk:0.02");
  squallStats_t before, after;
  squallStatsGet(&before);
  check(squallAllReduce(g, out, n, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "topk call");
  squallStatsGet(&after);
  check(after.compressedCalls == before.compressedCalls + 1, "topk call was compressed");
  float *g2 = malloc(n * 4);
  memcpy(g2, g, n * 4); /* another tensor key: a fresh residual on the MPI side */
  check(squallMpiAllreduce(g2, ref, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "mpi topk");
  check(memcmp(out, ref, n * 4) == 0, "topk over NCCL equals topk over MPI bit for bit");
  check(same_on_all_ranks(out, n * 4), "topk identical on every rank");

  /* the two-phase codecs over NCCL (grouped send/recv
   * all-to-all, all-gather) give the MPI transport's bits, two steps so
   * that the residuals take part; fresh tensors on both sides. */
  {
    static const char *specs[] = {"SQUALL_COMPRESS=int8", "SQUALL_COMPRESS=int4 SQUALL_BUCKET=64",
                                  "SQUALL_COMPRESS=fp8", "SQUALL_COMPRESS=fp16 SQUALL_HALF_ACCUM=fp32"};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
      use(specs[s]);
      float *a = malloc(n * 4), *b = malloc(n * 4), *ra = malloc(n * 4), *rb = malloc(n * 4);
      int ok = 1;
      for (int step = 0; step < 2; step++) {
        for (size_t i = 0; i < n; i++) a[i] = b[i] = gen(10 + step, rank, i) * 0.37f;
        ok &= squallAllReduce(a, ra, n, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess;
        ok &= squallMpiAllreduce(b, rb, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS;
        ok &= memcmp(ra, rb, n * 4) == 0 && same_on_all_ranks(ra, n * 4);
      }
      char what[160];
      snprintf(what, sizeof what, "%s over NCCL equals MPI bit for bit, two steps", specs[s]);
      check(ok, what);
      free(a), free(b), free(ra), free(rb);
    }
  }

  /* fp16 and average, within the 16-bit bound; in place */
  use("SQUALL_COMPRESS=fp16");
  /* out is a buffer squall has not seen: it would inherit the top-k
   * residual left above (a fresh buffer continues the tensor of that shape
   * whose buffer is gone); this check wants a zero residual. */
  check(squallResetResiduals(comm) == ncclSuccess, "reset before fp16");
  memcpy(out, g, n * 4);
  check(squallAllReduce(out, out, n, ncclFloat32, ncclAvg, comm, NULL) == ncclSuccess, "fp16 avg call");
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double exact = 0;
    for (int r = 0; r < nranks; r++) exact += gen(1, r, i);
    worst = fmax(worst, fabs(out[i] - (float)exact / (float)nranks));
  }
  /* dyadic inputs of 7 bits: scaled codes and their sums are exact in fp16,
   * and the average is that sum divided by P once, in float */
  check(worst == 0, "fp16 average of dyadic inputs is the exact sum / P");

  /* bfloat16 data compressed with fp16 */
  unsigned short *h = malloc(n * 2), *ho = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    float v = gen(2, rank, i);
    unsigned u;
    memcpy(&u, &v, 4);
    h[i] = (unsigned short)(u >> 16); /* exact: 7-bit dyadic values */
  }
  squallStatsGet(&before);
  check(squallAllReduce(h, ho, n, ncclBfloat16, ncclSum, comm, NULL) == ncclSuccess, "bf16 data call");
  squallStatsGet(&after);
  check(after.compressedCalls == before.compressedCalls + 1, "bf16 data was compressed");
  int bf_ok = 1;
  for (size_t i = 0; i < n; i++) {
    double exact = 0;
    for (int r = 0; r < nranks; r++) exact += gen(2, r, i);
    unsigned u = (unsigned)ho[i] << 16;
    float v;
    memcpy(&v, &u, 4);
    bf_ok &= fabs(v - exact) <= fabs(exact) * 0x1p-8 + 1e-6;
  }
  check(bf_ok, "bf16 data sum within bf16 rounding");

  /* pass-through: int32, max, and an op squall does not know: bit exact */
  int *ia = malloc(n * 4), *ib = malloc(n * 4), *ic = malloc(n * 4);
  for (size_t i = 0; i < n; i++) ia[i] = (int)(i * 7 + (size_t)rank);
  check(squallAllReduce(ia, ib, n, ncclInt32, ncclSum, comm, NULL) == ncclSuccess, "int call");
  pncclAllReduce(ia, ic, n, ncclInt32, ncclSum, comm, NULL);
  check(memcmp(ib, ic, n * 4) == 0, "int32 passes through bit for bit");
  check(squallAllReduce(g, out, n, ncclFloat32, ncclMax, comm, NULL) == ncclSuccess, "max call");
  pncclAllReduce(g, ref, n, ncclFloat32, ncclMax, comm, NULL);
  check(memcmp(out, ref, n * 4) == 0, "max passes through bit for bit");
  float two = 2.0f;
  ncclRedOp_t premul;
  ncclRedOpCreatePreMulSum(&premul, &two, ncclFloat32, ncclScalarHostImmediate, comm);
  check(squallAllReduce(g, out, n, ncclFloat32, premul, comm, NULL) == ncclSuccess, "premul call");
  pncclAllReduce(g, ref, n, ncclFloat32, premul, comm, NULL);
  check(memcmp(out, ref, n * 4) == 0, "an untracked PreMulSum op passes through bit for bit");
  ncclRedOpDestroy(premul, comm);

  /* A PreMulSum op used on data of another type is NCCL's to refuse */
  double two_d = 2.0;
  ncclRedOpCreatePreMulSum(&premul, &two_d, ncclFloat64, ncclScalarHostImmediate, comm);
  use("SQUALL_COMPRESS=fp16");
  check(squallAllReduce(g, out, n, ncclFloat32, premul, comm, NULL) == ncclInvalidArgument,
        "a float64 PreMulSum op on float data is ncclInvalidArgument, as NCCL says");
  ncclRedOpDestroy(premul, comm);

  /* errors as NCCL reports them */
  check(squallAllReduce(g, out, n, ncclFloat32, ncclSum, NULL, NULL) == ncclInvalidArgument,
        "NULL communicator is ncclInvalidArgument");
  check(strstr(squallGetLastError(), "ncclAllReduce (squallAllReduce passed the call through) failed: NCCL error") !=
            NULL,
        "squallGetLastError holds NCCL's failure of a call squallAllReduce passed through");
  struct {
    char junk[256];
  } not_a_comm = {{0}};
  check(squallAllReduce(g, out, n, ncclFloat32, ncclSum, (ncclComm_t)&not_a_comm, NULL) == ncclInvalidArgument,
        "something that is no communicator is ncclInvalidArgument");

  /* A non-blocking communicator squall was not told about (the direct API
   * sees no creation): NCCL answers ncclInProgress to each of squall's own
   * operations (FAKENCCL_NONBLOCKING_CALLS), which squall waits out before
   * its next, so the sum is the blocking one's, bit for bit, and the
   * communicator is idle afterwards. */
  {
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nb = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&nb, nranks, id, rank, &cfg);
    ncclResult_t state = ncclInProgress;
    for (int i = 0; i < 1000 && state == ncclInProgress && (r == ncclSuccess || r == ncclInProgress); i++)
      ncclCommGetAsyncError(nb, &state);
    check(state == ncclSuccess, "non-blocking communicator ready");
    static const char *specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=topk:0.02"};
    setenv("FAKENCCL_NONBLOCKING_CALLS", "inprogress", 1);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
      use(specs[s]);
      float *a = malloc(n * 4), *b = malloc(n * 4), *ra = malloc(n * 4), *rb = malloc(n * 4);
      for (size_t i = 0; i < n; i++) a[i] = b[i] = gen(20, rank, i) * 0.61f;
      check(squallResetResiduals(nb) == ncclSuccess, "reset residuals"); /* from zero, as the reference */
      squallStatsGet(&before);
      r = squallAllReduce(a, ra, n, ncclFloat32, ncclSum, nb, NULL);
      squallStatsGet(&after);
      ncclCommGetAsyncError(nb, &state);
      /* the reference from a zero residual too: b and rb may sit at the
       * addresses of earlier tensors of this size, whose residual they take */
      check(squallMpiResetResiduals(MPI_COMM_WORLD) == MPI_SUCCESS, "reset the reference's residuals");
      check(squallMpiAllreduce(b, rb, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "mpi reference");
      char what[160];
      snprintf(what, sizeof what, "%s on a non-blocking communicator: success (%d), compressed, idle after (%d), "
                                  "MPI's bits",
               specs[s], (int)r, (int)state);
      check(r == ncclSuccess && after.compressedCalls == before.compressedCalls + 1 && state == ncclSuccess &&
                memcmp(ra, rb, n * 4) == 0 && same_on_all_ranks(ra, n * 4),
            what);
      free(a), free(b), free(ra), free(rb);
    }
    unsetenv("FAKENCCL_NONBLOCKING_CALLS");
    squallCommForget(nb);
    ncclCommDestroy(nb);
  }

  check(squallResetResiduals(comm) == ncclSuccess, "reset residuals");
  check(squallCommForget(comm) == ncclSuccess, "forget");
  ncclCommDestroy(comm);
  int tot[2] = {passed, failed}, sum[2];
  MPI_Reduce(tot, sum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("%d passed, %d failed\n", sum[0], sum[1]);
  free(g);
  free(g2);
  free(out);
  free(ref);
  free(h);
  free(ho);
  free(ia);
  free(ib);
  free(ic);
  MPI_Finalize();
  return failed ? 1 : 0;
}

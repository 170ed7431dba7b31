/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_hierarchy_nccl.c - the two-level all-reduce through squallAllReduce
 * on the test-only host NCCL (tests/nccl/fakenccl), with SQUALL_RANKS_PER_NODE=2:
 * on 4 ranks (2 nodes x 2) it must run two-level, on 3 (2 + 1, uneven)
 * flat. Run on 4 and 3 ranks (tests/nccl/runs.list). Checks: top-k equals the model of
 * the path (hierarchy_model.h) bit for bit on every rank, also in place and
 * for a count not divisible by L; 20 error-feedback steps equal the MPI
 * path's (whose conservation test_hierarchy_mpi proves) bit for bit;
 * averages; exact pass-through; ranks disagreeing on SQUALL_HIERARCHY pass
 * through together; and an ncclCommSplit that fails (FAKENCCL_FAIL_SPLIT=1)
 * leaves the communicator flat, with the reason counted, and correct.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "../mpi/hierarchy_model.h"
#include "nccl_comm.h"
#include "squall_mpi.h"
#include "squall_nccl.h"

static int rank, nranks, failed, passed, two_level;
static const int rpn = 2;

static void check(int ok, const char *what) {
  if (ok) {
    passed++;
  } else {
    failed++;
    fprintf(stderr, "rank %d: FAIL: %s\n", rank, what);
  }
}

static void use(const char *spec) {
  squallConfig_t c, env;
  squallConfigDefault(&c);
  squallGetConfig(&env);
  c.costModel = env.costModel; /* run-mpi.sh: off, so that every eligible call is compressed */
  c.debug = env.debug;
  squallConfigParse(&c, "SQUALL_MIN_BYTES=0 SQUALL_RANKS_PER_NODE=2");
  if (squallConfigParse(&c, spec) != squallSuccess || squallSetConfig(&c) != squallSuccess) {
    fprintf(stderr, "bad spec %s\n", spec);
    MPI_Abort(MPI_COMM_WORLD, 2);
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

static ncclComm_t new_comm(void) { return test_nccl_comm(rank, nranks); }

static void model(int two, uint64_t seed, size_t n, double ratio, float *out) {
  if (two) hm_model_two_level(squall__topk_k, nranks, rpn, seed, n, ratio, out);
  else hm_model_flat(squall__topk_k, nranks, seed, n, ratio, out);
}

/* One top-k call: the model's bits everywhere, counted on the expected path. */
static void topk_call(ncclComm_t comm, int two, int flat_reason, size_t n, uint64_t seed, int in_place,
                      const char *what) {
  char msg[160];
  float *g = malloc(n * 4 + 4), *out = malloc(n * 4 + 4), *ref = malloc(n * 4 + 4);
  hm_fill(g, n, seed, rank);
  squallResetResiduals(comm); /* the model starts from zero residuals */
  squallStats_t a, b;
  squallStatsGet(&a);
  ncclResult_t r = squallAllReduce(g, in_place ? g : out, n, ncclFloat32, ncclSum, comm, NULL);
  squallStatsGet(&b);
  snprintf(msg, sizeof msg, "%s: call", what);
  check(r == ncclSuccess, msg);
  const float *res = in_place ? g : out;
  model(two, seed, n, 0.01, ref);
  snprintf(msg, sizeof msg, "%s: equals the %s model bit for bit", what, two ? "two-level" : "flat");
  check(memcmp(res, ref, n * 4) == 0, msg);
  snprintf(msg, sizeof msg, "%s: identical on every rank", what);
  check(same_on_all_ranks(res, n * 4), msg);
  snprintf(msg, sizeof msg, "%s: counted on the %s path", what, two ? "two-level" : "flat");
  check(b.compressedCalls - a.compressedCalls == 1 && b.twoLevelCalls - a.twoLevelCalls == (uint64_t)two &&
            b.flatCalls - a.flatCalls == (uint64_t)!two,
        msg);
  if (!two) {
    snprintf(msg, sizeof msg, "%s: flat for reason %s", what, squallFlatReasonName((squallFlatReason_t)flat_reason));
    check(b.flat[flat_reason] - a.flat[flat_reason] == 1, msg);
  } else {
    size_t s = (n + rpn - 1) / rpn;
    snprintf(msg, sizeof msg, "%s: intra-node bytes are the dense reduce-scatter and all-gather", what);
    check(b.bytesIntraNode - a.bytesIntraNode == 2 * (uint64_t)(rpn - 1) * s * 4, msg);
  }
  free(g);
  free(out);
  free(ref);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  two_level = nranks % rpn == 0 && nranks / rpn >= 2;
  int uneven_reason = squallFlatUneven;
  use("SQUALL_COMPRESS=topk:0.01");

  /* A failing ncclCommSplit: flat, with the reason, and right. */
  setenv("FAKENCCL_FAIL_SPLIT", "1", 1);
  ncclComm_t bad = new_comm();
  topk_call(bad, 0, two_level ? squallFlatSplitFailed : uneven_reason, 30011, 1, 0, "split fails");
  topk_call(bad, 0, two_level ? squallFlatSplitFailed : uneven_reason, 30011, 2, 0, "split failed before");
  unsetenv("FAKENCCL_FAIL_SPLIT");
  squallCommForget(bad);
  ncclCommDestroy(bad);

  ncclComm_t comm = new_comm();
  topk_call(comm, two_level, uneven_reason, 100000, 3, 0, "divisible count");
  topk_call(comm, two_level, uneven_reason, 100003, 4, 0, "count not divisible by L");
  topk_call(comm, two_level, uneven_reason, 20001, 5, 1, "in place");
  topk_call(comm, two_level, uneven_reason, 1, 6, 0, "one element");

  /* 20 error-feedback steps: the same bits as the MPI path's. */
  size_t n = 3001;
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  use("SQUALL_COMPRESS=topk:0.01");
  squallResetResiduals(comm);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  int steps_same = 1;
  for (int t = 0; t < 20; t++) {
    hm_fill(g, n, 100 + (uint64_t)t, rank);
    check(squallAllReduce(g, out, n, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "ef step");
    check(squallMpiAllreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "mpi ef step");
    steps_same &= memcmp(out, ref, n * 4) == 0 && same_on_all_ranks(out, n * 4);
  }
  check(steps_same, "20 error-feedback steps equal the MPI path bit for bit on every rank");

  /* fp16 average of dyadic inputs: exact sums, divided by P once */
  use("SQUALL_COMPRESS=fp16");
  hm_fill(out, n, 7, rank);
  squallStats_t a, b;
  squallStatsGet(&a);
  check(squallAllReduce(out, out, n, ncclFloat32, ncclAvg, comm, NULL) == ncclSuccess, "fp16 avg call");
  squallStatsGet(&b);
  check(b.twoLevelCalls - a.twoLevelCalls == (uint64_t)two_level, "fp16 average on the expected path");
  int avg_ok = 1;
  for (size_t i = 0; i < n; i++) {
    float exact = 0;
    for (int r = 0; r < nranks; r++) exact += hm_gen(7, r, i);
    avg_ok &= out[i] == exact / (float)nranks;
  }
  check(avg_ok, "fp16 average of dyadic inputs is the exact sum / P");

  /* pass-through: compression off, and integers: bit for bit */
  use("SQUALL_COMPRESS=none");
  hm_fill(g, n, 8, rank);
  check(squallAllReduce(g, out, n, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "none call");
  pncclAllReduce(g, ref, n, ncclFloat32, ncclSum, comm, NULL);
  check(memcmp(out, ref, n * 4) == 0, "compression off passes through bit for bit");
  int *ia = malloc(n * 4), *ib = malloc(n * 4), *ic = malloc(n * 4);
  for (size_t i = 0; i < n; i++) ia[i] = (int)(i * 7 + (size_t)rank);
  use("SQUALL_COMPRESS=topk:0.01");
  check(squallAllReduce(ia, ib, n, ncclInt32, ncclSum, comm, NULL) == ncclSuccess, "int call");
  pncclAllReduce(ia, ic, n, ncclInt32, ncclSum, comm, NULL);
  check(memcmp(ib, ic, n * 4) == 0, "int32 passes through bit for bit");

  /* ranks disagreeing on SQUALL_HIERARCHY: everyone passes through */
  use(rank == 0 ? "SQUALL_COMPRESS=topk:0.01 SQUALL_HIERARCHY=flat" : "SQUALL_COMPRESS=topk:0.01");
  squallStatsGet(&a);
  check(squallAllReduce(g, out, n, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "mismatch call");
  squallStatsGet(&b);
  pncclAllReduce(g, ref, n, ncclFloat32, ncclSum, comm, NULL);
  check(memcmp(out, ref, n * 4) == 0 && b.passthrough[squallPassMismatch] - a.passthrough[squallPassMismatch] == 1,
        "disagreeing on SQUALL_HIERARCHY passes through, exact");
  /* agreeing on flat again: flat, configured */
  use("SQUALL_COMPRESS=topk:0.01 SQUALL_HIERARCHY=flat");
  squallResetResiduals(comm);
  topk_call(comm, 0, two_level ? squallFlatConfigured : squallFlatConfigured, 4096, 9, 0, "SQUALL_HIERARCHY=flat");

  squallCommForget(comm);
  ncclCommDestroy(comm);
  int tot[2] = {passed, failed}, sum[2];
  MPI_Reduce(tot, sum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("hierarchy over NCCL, %d ranks (%s): %d passed, %d failed\n", nranks,
                        two_level ? "2 nodes x 2" : "uneven nodes", sum[0], sum[1]);
  free(g);
  free(out);
  free(ref);
  free(ia);
  free(ib);
  free(ic);
  MPI_Finalize();
  return failed ? 1 : 0;
}

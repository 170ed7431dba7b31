/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_nccl_reducescatter.c - squallReduceScatter(), ncclReduceScatter's
 * signature, on host buffers through the test-only host NCCL
 * (tests/nccl/fakenccl; tests/nccl/runs.list: 2, 3 and 4 ranks).
 *
 * Asserted: every pass-through (type, op, codec none, below the size
 * threshold, recvcount 0, top-k, a configuration mismatch) is the plain
 * ncclReduceScatter bit for bit and counted under its reason; for fp16,
 * bf16, int8, int4 and fp8, conservation over 20 steps (the shards every
 * rank received, gathered, plus every rank's residual, equal the sum of
 * all inputs, exactly on dyadic data), out of place and in place
 * (recvbuff = sendbuff + rank * recvcount), and on 4 ranks as two nodes
 * of two (two levels); a rerun, a run in place and
 * one with SQUALL_CHUNK_BYTES set give the same bits; the NCCL path gives
 * squallMpiReduceScatterBlock's bits; SQUALL_COLLECTIVES does not stop a
 * direct call; injected faults of the header and of the exchange
 * (FAKENCCL_FAULT) are an error on every rank with the residual as it
 * was; bad input (recvcount 0, an overflowing recvcount, buffers NCCL
 * forbids to overlap) is NCCL's answer or ncclInvalidArgument naming the
 * problem, and the ranks stay in step. A hang fails through
 * tests/run-mpi.sh's time limit.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <squall_mpi.h>
#include <squall_nccl.h>

#include "api/api_nccl.h" /* squall__nccl_get_scatter_residual */
#include "../mpi/rs_conservation.h"
#include "nccl_comm.h"
#include "nccl_test_util.h"

static int rank, nranks, passed, failed;
static ncclComm_t comm;

static void check(int ok, const char *what, const char *ctx) {
  if (ok) {
    passed++;
  } else {
    failed++;
    fprintf(stderr, "rank %d: FAIL: %s (%s)\n", rank, what, ctx);
  }
}

static const char *const codecs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=bf16", "SQUALL_COMPRESS=int8",
                                     "SQUALL_COMPRESS=int4", "SQUALL_COMPRESS=fp8", "SQUALL_COMPRESS=topk:0.05"};
#define NCODECS (sizeof codecs / sizeof codecs[0])

static void fill(float *g, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) g[i] = gen(seed, rank, i);
}

static int all_ranks(int ok) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

/* A plain NCCL all-reduce pairs with its peers': the ranks are in step. */
static void check_in_step(const char *ctx) {
  int mine = rank + 1, sum = 0;
  check(ncclAllReduce(&mine, &sum, 1, ncclInt32, ncclSum, comm, NULL) == ncclSuccess &&
            sum == nranks * (nranks + 1) / 2,
        "ranks in step afterwards", ctx);
}

/* ------------------------------------------------------ pass-throughs */

/* One call squall passes through for `why`: bit for bit the plain
 * ncclReduceScatter, counted under its reason, nothing compressed. */
static void check_plain(const char *spec, ncclDataType_t t, ncclRedOp_t op, size_t rc, squallPassReason_t why) {
  use(spec);
  size_t es = t == ncclFloat64 ? 8 : t == ncclFloat16 ? 2
                                                      : 4,
         n = rc * (size_t)nranks, bytes = n * es + 8;
  char *send = malloc(bytes), *a = calloc(1, bytes), *b = calloc(1, bytes);
  for (size_t i = 0; i < n; i++) {
    float f = gen(5, rank, i) * 1.37f; /* not dyadic: a codec would show */
    if (t == ncclFloat64) ((double *)send)[i] = f;
    else if (t == ncclInt32) ((int *)send)[i] = (int)(f * 8);
    else if (t == ncclFloat16) ((uint16_t *)send)[i] = (uint16_t)(0x3c00 + (i & 0xff));
    else ((float *)send)[i] = f;
  }
  uint64_t before = rs_passes(why), comp = rs_compressed();
  check(squallReduceScatter(send, a, rc, t, op, comm, NULL) == ncclSuccess, "squallReduceScatter succeeds", spec);
  check(ncclReduceScatter(send, b, rc, t, op, comm, NULL) == ncclSuccess, "ncclReduceScatter succeeds", spec);
  check(memcmp(a, b, bytes) == 0, "the plain reduce-scatter, bit for bit", spec);
  check(rs_passes(why) == before + 1, "counted under its reason", squallPassReasonName(why));
  check(rs_compressed() == comp, "nothing compressed", spec);
  free(send);
  free(a);
  free(b);
}

static void test_passthrough_exact(void) {
  check_plain("SQUALL_COMPRESS=int8", ncclFloat64, ncclSum, 700, squallPassType);
  check_plain("SQUALL_COMPRESS=int8", ncclInt32, ncclSum, 700, squallPassType);
  check_plain("SQUALL_COMPRESS=int8", ncclFloat16, ncclSum, 700, squallPassType); /* fp32 only */
  check_plain("SQUALL_COMPRESS=int8", ncclFloat32, ncclMax, 700, squallPassOp);
  check_plain("SQUALL_COMPRESS=none", ncclFloat32, ncclSum, 700, squallPassDisabled);
  check_plain("SQUALL_COMPRESS=fp16 SQUALL_MIN_BYTES=1M", ncclFloat32, ncclSum, 700, squallPassSmall);
  check_plain("SQUALL_COMPRESS=int8", ncclFloat32, ncclSum, 0, squallPassSmall); /* recvcount 0: a no-op */
}

/* Ranks on different codecs: the call header sees it, every rank passes
 * the call through together, bit for bit. */
static void test_mismatch_passes_through(void) {
  check_plain(rank == 0 ? "SQUALL_COMPRESS=int8" : "SQUALL_COMPRESS=fp16", ncclFloat32, ncclSum, 1000,
              squallPassMismatch);
}

/* ------------------------------------------------------- conservation */

/* T steps of one codec from zeroed residuals, from sendbuff into this
 * rank's block of it (in place) or into a buffer of its own. Returns this
 * rank's shards (T x rc floats) and its final residual (n floats). */
static int run_steps(const char *spec, size_t rc, int T, int in_place, int seed0, float *shards, float *res) {
  use(spec);
  squallResetResiduals(comm);
  size_t n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *out = malloc(rc * 4);
  uint64_t comp = rs_compressed();
  int ok = 1;
  for (int t = 0; t < T && ok; t++) {
    fill(g, n, seed0 + t);
    float *recv = in_place ? g + (size_t)rank * rc : out;
    ok = squallReduceScatter(g, recv, rc, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess;
    check(ok, "a compressed reduce-scatter succeeds", squallGetLastError());
    memcpy(shards + (size_t)t * rc, recv, rc * 4);
  }
  check(rs_compressed() == comp + (uint64_t)T, "every call was compressed", spec);
  ok = ok && squall__nccl_get_scatter_residual(comm, g, rc, ncclFloat32, res) == ncclSuccess;
  check(ok, "the residual is kept", spec);
  free(g);
  free(out);
  return ok;
}

/* Sum over steps of the shards, gathered, plus every rank's residual,
 * equals the sum of every input (rs_conserve); not compared where a call
 * failed. */
static void check_conservation(const char *spec, size_t rc, int in_place) {
  enum { T = 20 };
  size_t n = rc * (size_t)nranks;
  float *shards = malloc(T * rc * 4), *res = malloc(n * 4);
  int ok = all_ranks(run_steps(spec, rc, T, in_place, 100, shards, res));
  rs_sums s = rs_conserve(shards, res, rc, T, 100, gen, rank, nranks);
  char ctx[160];
  snprintf(ctx, sizeof ctx, "%s rc=%zu%s", spec, rc, in_place ? " in place" : "");
  if (ok && s.bad)
    fprintf(stderr, "rank %d: %s: element %zu: out %.17g + residuals %.17g != in %.17g\n", rank, ctx, s.first, s.got,
            s.res, s.in);
  check(ok && s.bad == 0, "outputs plus residuals equal the inputs over 20 steps", ctx);
  /* the residual is real: int4 cannot send 1/8 steps of [-8, 8] */
  if (strstr(spec, "int4")) check(ok && s.lossy > 0, "int4 leaves a residual", ctx);
  free(shards);
  free(res);
}

static void test_conservation(void) {
  /* 1000: whole buckets; 333: a shard ending in part of a bucket */
  for (size_t c = 0; c < NCODECS; c++) {
    check_conservation(codecs[c], 1000, 0);
    check_conservation(codecs[c], 333, 0);
    check_conservation(codecs[c], 777, 1);
  }
}

/* Two levels through NCCL (4 ranks as 2 nodes of 2, SQUALL_RANKS_PER_NODE):
 * every call runs two-level (node communicators split from NCCL's), and
 * conservation holds, in place too (the input is copied before anything
 * is written). */
static void test_two_level(void) {
  if (nranks != 4) return;
  static const char *const specs[] = {"SQUALL_COMPRESS=int8 SQUALL_RANKS_PER_NODE=2",
                                      "SQUALL_COMPRESS=fp16 SQUALL_RANKS_PER_NODE=2",
                                      "SQUALL_COMPRESS=topk:0.05 SQUALL_RANKS_PER_NODE=2"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    for (int in_place = 0; in_place < 2; in_place++) {
      squallStats_t a = SQUALL_STATS_INITIALIZER, z = SQUALL_STATS_INITIALIZER;
      squallStatsGet(&a);
      check_conservation(specs[i], 1000, in_place);
      squallStatsGet(&z);
      check(z.twoLevelCalls - a.twoLevelCalls == 20, "every call ran two levels", specs[i]);
    }
}

/* ------------------------------------------------- the same bits again */

/* A rerun, a run in place and one with SQUALL_CHUNK_BYTES set give the
 * shards and the residual of the first run, bit for bit. */
static void test_rerun_identical(void) {
  enum { T = 4 };
  size_t rc = 3001, n = rc * (size_t)nranks;
  float *s0 = malloc(T * rc * 4), *s1 = malloc(T * rc * 4), *r0 = malloc(n * 4), *r1 = malloc(n * 4);
  for (size_t c = 0; c < NCODECS; c++) {
    char spec[128], chunked[160];
    snprintf(spec, sizeof spec, "%s SQUALL_BUCKET=64", codecs[c]);
    snprintf(chunked, sizeof chunked, "%s SQUALL_CHUNK_BYTES=4096", spec);
    run_steps(spec, rc, T, 0, 40, s0, r0);
    const char *variants[3] = {spec, spec, chunked};
    for (int v = 0; v < 3; v++) {
      run_steps(variants[v], rc, T, v == 1, 40, s1, r1);
      char ctx[200];
      snprintf(ctx, sizeof ctx, "%s, run %d", variants[v], v);
      check(memcmp(s0, s1, T * rc * 4) == 0, "the same shards", ctx);
      check(memcmp(r0, r1, n * 4) == 0, "the same residual", ctx);
    }
  }
  free(s0);
  free(s1);
  free(r0);
  free(r1);
}

/* Over the test NCCL squall's exchange is NCCL's send/recv, over MPI
 * MPI_Alltoall: the same codes and the same rank-ordered sums, so the same
 * bits, two steps so that the residuals take part (fresh tensors on both
 * sides). */
static void test_same_as_mpi(void) {
  size_t rc = 1500, n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *g2 = malloc(n * 4), *a = malloc(rc * 4), *b = malloc(rc * 4);
  for (size_t c = 0; c < NCODECS; c++) {
    use(codecs[c]);
    for (int t = 0; t < 2; t++) {
      fill(g, n, 70 + t);
      memcpy(g2, g, n * 4);
      check(squallReduceScatter(g, a, rc, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "NCCL call", codecs[c]);
      check(squallMpiReduceScatterBlock(g2, b, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS,
            "MPI call", codecs[c]);
      check(memcmp(a, b, rc * 4) == 0, "NCCL's shard is MPI's, bit for bit", codecs[c]);
    }
  }
  free(g);
  free(g2);
  free(a);
  free(b);
}

/* SQUALL_COLLECTIVES is the interposers' switch: a direct call is
 * compressed whatever it holds; ncclAvg is the sum over the ranks. */
static void test_direct_ignores_switch(void) {
  size_t rc = 1024, n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *sum = malloc(rc * 4), *avg = malloc(rc * 4);
  fill(g, n, 3);
  use("SQUALL_COMPRESS=fp16 SQUALL_COLLECTIVES=allreduce");
  uint64_t comp = rs_compressed(), off = rs_passes(squallPassCollectiveOff);
  check(squallReduceScatter(g, sum, rc, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "sum", "");
  check(rs_compressed() == comp + 1 && rs_passes(squallPassCollectiveOff) == off, "a direct call is compressed",
        "SQUALL_COLLECTIVES=allreduce");
  float *g2 = malloc(n * 4);
  memcpy(g2, g, n * 4); /* a fresh residual: the same codes as the sum's first call */
  check(squallReduceScatter(g2, avg, rc, ncclFloat32, ncclAvg, comm, NULL) == ncclSuccess, "avg", "");
  int same = 1;
  for (size_t i = 0; i < rc; i++) same &= avg[i] == sum[i] / (float)nranks;
  check(same, "ncclAvg is the compressed sum divided by the ranks", "");
  free(g);
  free(g2);
  free(sum);
  free(avg);
}

/* ------------------------------------------------------------- faults */

/* An injected failure (FAKENCCL_FAULT: fail:1 hits the call header's
 * collective, p2p-fail:1 the exchange of the codes after the residual
 * moved): an error on every rank, the residual as it was, and the next
 * call runs. */
static void check_fault(const char *spec, const char *fault) {
  size_t rc = 2000, n = rc * (size_t)nranks;
  float *before = malloc(n * 4), *after = malloc(n * 4), *g = malloc(n * 4), *out = malloc(rc * 4);
  char ctx[160];
  snprintf(ctx, sizeof ctx, "%s FAKENCCL_FAULT=%s", spec, fault);
  use(spec);
  squallResetResiduals(comm);
  for (int t = 0; t < 3; t++) { /* a residual with mass */
    fill(g, n, 60 + t);
    check(squallReduceScatter(g, out, rc, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "a call before", ctx);
  }
  check(squall__nccl_get_scatter_residual(comm, g, rc, ncclFloat32, before) == ncclSuccess, "a residual", ctx);
  fill(g, n, 63);
  setenv("FAKENCCL_FAULT", fault, 1);
  ncclResult_t r = squallReduceScatter(g, out, rc, ncclFloat32, ncclSum, comm, NULL);
  unsetenv("FAKENCCL_FAULT");
  check(all_ranks(r != ncclSuccess), "an error on every rank", ctx);
  check(squall__nccl_get_scatter_residual(comm, g, rc, ncclFloat32, after) == ncclSuccess, "a residual after", ctx);
  check(memcmp(before, after, n * 4) == 0, "the residual restored", ctx);
  check(squallReduceScatter(g, out, rc, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "the next call", ctx);
  check_in_step(ctx);
  free(before);
  free(after);
  free(g);
  free(out);
}

static void test_faults(void) {
  check_fault("SQUALL_COMPRESS=int8", "fail:1");
  check_fault("SQUALL_COMPRESS=int8", "p2p-fail:1");
  check_fault("SQUALL_COMPRESS=fp16", "p2p-fail:1");
  check_fault("SQUALL_COMPRESS=fp8", "p2p-fail:1");
}

/* ---------------------------------------------------------- bad input */

static void test_bad_input(void) {
  use("SQUALL_COMPRESS=int8");
  size_t rc = 600, n = rc * (size_t)nranks;
  float *g = malloc((n + 1) * 4), out = 42.0f;
  fill(g, n + 1, 8);
  /* recvcount 0: NCCL's no-op success, nothing written */
  check(squallReduceScatter(g, &out, 0, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess && out == 42.0f,
        "recvcount 0 is a no-op success", "");
  /* recvcount * nranks overflows size_t */
  check(squallReduceScatter(g, &out, SIZE_MAX / 2 + 1, ncclFloat32, ncclSum, comm, NULL) == ncclInvalidArgument &&
            strstr(squallGetLastError(), "overflows") != NULL,
        "an overflowing recvcount is ncclInvalidArgument, said so", squallGetLastError());
  /* recvbuff inside sendbuff one element past this rank's block */
  check(squallReduceScatter(g, g + (size_t)rank * rc + 1, rc, ncclFloat32, ncclSum, comm, NULL) ==
                ncclInvalidArgument &&
            strstr(squallGetLastError(), "overlaps") != NULL,
        "overlapping buffers are ncclInvalidArgument, said so", squallGetLastError());
  /* and the ranks are in step: the next compressed call runs */
  check(squallReduceScatter(g, g + (size_t)rank * rc, rc, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess,
        "the call after bad input", squallGetLastError());
  check_in_step("bad input");
  free(g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  comm = test_nccl_comm(rank, nranks);
  test_passthrough_exact();
  test_mismatch_passes_through();
  test_conservation();
  test_two_level();
  test_rerun_identical();
  test_same_as_mpi();
  test_direct_ignores_switch();
  test_faults();
  test_bad_input();
  ncclCommDestroy(comm);
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("%d checks passed, %s\n", passed, any ? "some FAILED" : "none failed");
  MPI_Finalize();
  return any ? 1 : 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_hierarchy_mpi.c - the two-level all-reduce over MPI (run, as
 * tests/mpi/runs.list says, on 4 ranks as 2 nodes x 2 with
 * SQUALL_RANKS_PER_NODE=2, and on 3 ranks, which that makes 2 + 1:
 * uneven, so flat). Top-k results are compared bit for
 * bit with the model of the path that must run (hierarchy_model.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_mpi.h" /* squall__mpi_get_residual */
#include "codecs/codec.h"
#include "common/internal.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "hierarchy_model.h"
#include "mpi_check.h"
#include "squall_mpi.h"
#include "transports/transport_mpi.h"

static int rank, nranks, rpn, two_level; /* two_level: what this layout must run */

#define gen hm_gen
#define fill hm_fill

/* Defaults plus spec, keeping the environment's logging, statistics file
 * and SQUALL_RANKS_PER_NODE. */
static void use_config(const char *spec) {
  squallConfig_t c, env;
  squallConfigDefault(&c);
  squallGetConfig(&env);
  c.debug = env.debug;
  c.costModel = env.costModel; /* run-mpi.sh: off, so that every eligible call is compressed */
  c.ranksPerNode = rpn;
  memcpy(c.statsPath, env.statsPath, sizeof c.statsPath);
  ck_assert_int_eq(squallConfigParse(&c, "SQUALL_MIN_BYTES=0"), squallSuccess);
  ck_assert_msg(squallConfigParse(&c, spec) == squallSuccess, "bad spec %s: %s", spec, squallGetLastError());
  ck_assert_int_eq(squallSetConfig(&c), squallSuccess);
}

static void assert_identical_across_ranks(const void *buf, size_t bytes) {
  unsigned char *all = malloc(bytes * (size_t)nranks + 1);
  MPI_Allgather(buf, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 1; r < nranks; r++)
    ck_assert_msg(memcmp(all, all + (size_t)r * bytes, bytes) == 0, "rank %d differs from rank 0", r);
  free(all);
}

static void model_flat(uint64_t seed, size_t n, double ratio, float *out) {
  hm_model_flat(squall__topk_k, nranks, seed, n, ratio, out);
}
static void model_two_level(uint64_t seed, size_t n, double ratio, float *out) {
  hm_model_two_level(squall__topk_k, nranks, rpn, seed, n, ratio, out);
}

/* ------------------------------------------------------------ tests */
START_TEST(test_passthrough_exact) {
  size_t n = 3001;
  float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
  fill(a, n, 1, rank);
  PMPI_Allreduce(a, c, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  use_config("SQUALL_COMPRESS=none");
  ck_assert_int_eq(squallMpiAllreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(memcmp(b, c, n * 4) == 0);
  /* warm-up steps go dense, two-level or not */
  use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_WARMUP=1");
  float *w = malloc(n * 4);
  memcpy(w, a, n * 4);
  ck_assert_int_eq(squallMpiAllreduce(w, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(memcmp(b, c, n * 4) == 0);
  /* below SQUALL_MIN_BYTES */
  use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_MIN_BYTES=1M");
  ck_assert_int_eq(squallMpiAllreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(memcmp(b, c, n * 4) == 0);
  /* max: never compressed */
  use_config("SQUALL_COMPRESS=fp16");
  ck_assert_int_eq(squallMpiAllreduce(a, b, (int)n, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD), MPI_SUCCESS);
  PMPI_Allreduce(a, c, (int)n, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  ck_assert(memcmp(b, c, n * 4) == 0);
  free(a);
  free(b);
  free(c);
  free(w);
}
END_TEST

/* Bytes at the node boundary of a pass-through call: all inter-node while
 * the nodes are not known (a fresh communicator, nothing compressed yet),
 * then split by the ring's next rank once a compressed call found them. */
START_TEST(test_boundary_bytes_before_nodes_known) {
  size_t n = 3001;
  float *a = malloc(n * 4), *b = malloc(n * 4);
  fill(a, n, 2, rank);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  squallStats_t s0, s1, s2, s3;
  use_config("SQUALL_COMPRESS=none");
  squallStatsGet(&s0);
  ck_assert_int_eq(squallMpiAllreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
  squallStatsGet(&s1);
  ck_assert_uint_gt(s1.bytesWire - s0.bytesWire, 0);
  ck_assert_uint_eq(s1.bytesInterNode - s0.bytesInterNode, s1.bytesWire - s0.bytesWire);
  use_config("SQUALL_COMPRESS=fp16");
  ck_assert_int_eq(squallMpiAllreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
  use_config("SQUALL_COMPRESS=none");
  squallStatsGet(&s2);
  ck_assert_int_eq(squallMpiAllreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
  squallStatsGet(&s3);
  /* consecutive ranks fill a node (SQUALL_RANKS_PER_NODE) */
  int next_elsewhere = (rank + 1) % nranks / rpn != rank / rpn;
  uint64_t wire = s3.bytesWire - s2.bytesWire;
  ck_assert_uint_eq(s3.bytesInterNode - s2.bytesInterNode, next_elsewhere ? wire : 0);
  ck_assert_uint_eq(s3.bytesIntraNode - s2.bytesIntraNode, next_elsewhere ? 0 : wire);
  squallMpiCommFree(comm);
  MPI_Comm_free(&comm);
  free(a);
  free(b);
}
END_TEST

/* The path this layout must take, the model's bits on every rank, and the
 * statistics: path counters, flat reasons, bytes split at the boundary. */
static void check_topk(size_t n, double ratio, int in_place, uint64_t seed) {
  char spec[96];
  snprintf(spec, sizeof spec, "SQUALL_COMPRESS=topk:%.17g", ratio);
  use_config(spec);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  float *g = malloc(n * 4 + 4), *out = malloc(n * 4 + 4), *ref = malloc(n * 4 + 4);
  fill(g, n, seed, rank);
  squallStats_t a, b;
  squallStatsGet(&a);
  if (in_place)
    ck_assert_int_eq(squallMpiAllreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  else
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  squallStatsGet(&b);
  const float *res = in_place ? g : out;
  (two_level ? model_two_level : model_flat)(seed, n, ratio, ref);
  for (size_t i = 0; i < n; i++)
    MC_CHECK(memcmp(&res[i], &ref[i], 4) == 0, "n=%zu%s: element %zu is %a, model %a", n,
             in_place ? " in place" : "", i, res[i], ref[i]);
  assert_identical_across_ranks(res, n * 4);
  ck_assert_uint_eq(b.compressedCalls - a.compressedCalls, 1);
  ck_assert_uint_eq(b.twoLevelCalls - a.twoLevelCalls, (uint64_t)two_level);
  ck_assert_uint_eq(b.flatCalls - a.flatCalls, (uint64_t)!two_level);
  ck_assert_uint_eq((b.bytesInterNode - a.bytesInterNode) + (b.bytesIntraNode - a.bytesIntraNode),
                    b.bytesWire - a.bytesWire);
  if (two_level) {
    size_t s = (n + (size_t)rpn - 1) / (size_t)rpn;
    ck_assert_uint_eq(b.bytesIntraNode - a.bytesIntraNode, 2 * (uint64_t)(rpn - 1) * s * 4);
  } else {
    ck_assert_uint_eq(b.flat[squallFlatUneven] - a.flat[squallFlatUneven], 1);
  }
  free(g);
  free(out);
  free(ref);
}

START_TEST(test_topk_matches_model) {
  check_topk(100000, 0.01, 0, 11); /* divisible by L */
  check_topk(100003, 0.01, 0, 12); /* not divisible: the last shard is padded */
  check_topk(20001, 0.05, 1, 13);  /* in place */
  check_topk(1, 1.0, 0, 14);       /* fewer elements than ranks on a node */
  /* The padding of the last shard is zero whatever the scratch held before
   * (here: large sums from a dense call), so it never takes a top-k slot. */
  size_t big = 4097;
  float *x = malloc(big * 4), *y = malloc(big * 4);
  for (size_t i = 0; i < big; i++) x[i] = 1000.0f;
  use_config("SQUALL_COMPRESS=topk:1"); /* sparsity cannot pay: dense, exact */
  ck_assert_int_eq(squallMpiAllreduce(x, y, (int)big, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(y[201] == 1000.0f * (float)nranks);
  free(x);
  free(y);
  check_topk(201, 0.05, 0, 20);
  check_topk(99, 0.02, 0, 21);
}
END_TEST

/* Error feedback conserves every input exactly: over 20 steps, the sum of
 * the outputs (one rank's) plus every rank's residual is the sum of all
 * inputs. The count is not divisible by L. */
/* Over `steps` calls: every rank holds the same bits and took the same
 * path (two-level or flat) at every call; outputs plus residuals equal the
 * inputs exactly. With mixed = 1 the cost model may choose flat for some
 * calls (SQUALL_COST_MODEL=on in spec): at least one, its exploration. */
static void check_conservation_steps(const char *spec, int steps, int mixed) {
  size_t n = 3001;
  use_config(spec);
  float *g = malloc(n * 4), *out = malloc(n * 4), *res = malloc(n * 4);
  double *sum_out = calloc(n, 8), *sum_in = calloc(n, 8), *mine = malloc(n * 8), *res_sum = calloc(n, 8);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  squallStats_t a, b;
  squallStatsGet(&a);
  for (int t = 0; t < steps; t++) {
    fill(g, n, 100 + (uint64_t)t, rank);
    for (size_t i = 0; i < n; i++)
      for (int r = 0; r < nranks; r++) sum_in[i] += gen(100 + (uint64_t)t, r, i);
    squallStats_t before, after;
    squallStatsGet(&before);
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    squallStatsGet(&after);
    assert_identical_across_ranks(out, n * 4);
    uint64_t path = after.twoLevelCalls - before.twoLevelCalls;
    assert_identical_across_ranks(&path, sizeof path);
    for (size_t i = 0; i < n; i++) sum_out[i] += out[i];
  }
  squallStatsGet(&b);
  if (!mixed) ck_assert_uint_eq(b.twoLevelCalls - a.twoLevelCalls, two_level ? (uint64_t)steps : 0);
  else if (two_level) { /* both ran: two-level first, flat at least when exploring */
    ck_assert_msg(b.twoLevelCalls > a.twoLevelCalls, "%s: no two-level call", spec);
    ck_assert_msg(b.flat[squallFlatSlower] > a.flat[squallFlatSlower], "%s: never tried flat", spec);
    ck_assert_uint_eq(b.compressedCalls - a.compressedCalls, (uint64_t)steps);
  }
  ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res), MPI_SUCCESS);
  for (size_t i = 0; i < n; i++) mine[i] = res[i];
  MPI_Allreduce(mine, res_sum, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double kept = 0;
  for (size_t i = 0; i < n; i++) {
    MC_CHECK(sum_out[i] + res_sum[i] == sum_in[i], "%s: element %zu: sent %.17g + kept %.17g != %.17g",
             spec, i, sum_out[i], res_sum[i], sum_in[i]);
    kept += fabs(res_sum[i]);
  }
  if (strstr(spec, "topk")) ck_assert_msg(kept > 0, "%s: top-k kept nothing back", spec);
  free(g);
  free(out);
  free(res);
  free(sum_out);
  free(sum_in);
  free(mine);
  free(res_sum);
}

static void check_conservation(const char *spec) { check_conservation_steps(spec, 20, 0); }

START_TEST(test_conservation_topk) { check_conservation("SQUALL_COMPRESS=topk:0.01"); }
END_TEST
START_TEST(test_conservation_topk_fp16_values) {
  check_conservation("SQUALL_COMPRESS=topk:0.02 SQUALL_TOPK_VALUES=fp16 SQUALL_ZSTD=0");
}
END_TEST
START_TEST(test_conservation_fp16) { check_conservation("SQUALL_COMPRESS=fp16"); }
END_TEST
/* Error feedback keeps each rank's (here: each node sum's) rounding to 16
 * bits; the 16-bit sum across ranks rounds too, which nothing keeps. The
 * inputs are multiples of 1/8 up to 8: the sum stays exact in bf16's 8 bits
 * up to 4 ranks (256 steps of 1/8), so beyond that bf16 cannot conserve. */
START_TEST(test_conservation_bf16) {
  if (nranks <= 4) check_conservation("SQUALL_COMPRESS=bf16");
}
END_TEST

/* The cost model choosing between two levels and flat per size (the
 * given 1 Mbit/s link keeps it from passing calls through): the choice
 * is the same on every rank at every call, and moving between the flat
 * and the shard residuals loses nothing. */
START_TEST(test_level_choice_conserves) {
  check_conservation_steps("SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=0.001", 70, 1);
  check_conservation_steps("SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=0.001", 40, 1);
  squallMpiResetResiduals(MPI_COMM_WORLD);
}
END_TEST

START_TEST(test_small_counts_identical) {
  size_t counts[] = {1, 2, 3, 5, 7, 1023};
  const char *specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=bf16", "SQUALL_COMPRESS=topk:0.3"};
  for (size_t s = 0; s < 3; s++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      size_t n = counts[c];
      use_config(specs[s]);
      float *g = malloc(n * 4), *out = malloc(n * 4);
      fill(g, n, 51, rank);
      ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
      for (size_t i = 0; i < n; i++) MC_CHECK(isfinite(out[i]), "element %zu is not finite", i);
      assert_identical_across_ranks(out, n * 4);
      free(g);
      free(out);
    }
}
END_TEST

/* Ranks that disagree on SQUALL_HIERARCHY pass through together (no hang,
 * exact sum); agreeing on flat runs flat for the stated reason. */
START_TEST(test_hierarchy_mismatch_and_flat) {
  size_t n = 4096;
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  fill(g, n, 71, rank);
  PMPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  squallStats_t a, b;
  use_config(rank == 0 ? "SQUALL_COMPRESS=topk:0.01 SQUALL_HIERARCHY=flat" : "SQUALL_COMPRESS=topk:0.01");
  squallStatsGet(&a);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  squallStatsGet(&b);
  ck_assert(memcmp(out, ref, n * 4) == 0);
  ck_assert_uint_eq(b.passthrough[squallPassMismatch] - a.passthrough[squallPassMismatch], 1);
  /* and on SQUALL_RANKS_PER_NODE */
  use_config(rank == 0 ? "SQUALL_COMPRESS=fp16 SQUALL_RANKS_PER_NODE=1" : "SQUALL_COMPRESS=fp16");
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(memcmp(out, ref, n * 4) == 0);
  /* all flat: the flat model, counted as configured */
  use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_HIERARCHY=flat");
  squallMpiResetResiduals(MPI_COMM_WORLD);
  squallStatsGet(&a);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  squallStatsGet(&b);
  model_flat(71, n, 0.01, ref);
  ck_assert(memcmp(out, ref, n * 4) == 0);
  ck_assert_uint_eq(b.flat[squallFlatConfigured] - a.flat[squallFlatConfigured], 1);
  ck_assert_uint_eq(b.twoLevelCalls - a.twoLevelCalls, 0);
  /* SQUALL_RANKS_PER_NODE=1: one rank per node, flat */
  use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_RANKS_PER_NODE=1");
  squallMpiResetResiduals(MPI_COMM_WORLD);
  squallStatsGet(&a);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  squallStatsGet(&b);
  ck_assert(memcmp(out, ref, n * 4) == 0);
  ck_assert_uint_eq(b.flat[squallFlatOneRankPerNode] - a.flat[squallFlatOneRankPerNode], 1);
  /* one rank's node: all inter-node bytes */
  ck_assert_uint_eq(b.bytesInterNode - a.bytesInterNode, b.bytesWire - a.bytesWire);
  free(g);
  free(out);
  free(ref);
}
END_TEST

/* Engine level: average and 16-bit data with a pre-multiplier, which the
 * MPI entry point cannot express, and a transport that cannot split. */
START_TEST(test_engine_average_halves_nosplit) {
  squall_mpi_ctx ctx;
  squall_transport tr;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  ck_assert_int_eq(squall__transport_mpi_init(&tr, &ctx, dup), squallSuccess);
  squall_engine *e = squall__engine_create(&tr, &squall__kernels_host);
  ck_assert_ptr_nonnull(e);
  size_t n = 2047;
  float *g = malloc(n * 4), *out = malloc(n * 4);
  fill(g, n, 61, rank);
  squallStats_t a, b;
  use_config("SQUALL_COMPRESS=topk:1"); /* dense fallback inside: exact */
  squallStatsGet(&a);
  squall_call c = {.send = g, .recv = out, .count = n, .dtype = SQ_DT_F32, .elsize = 4, .op = SQ_OP_AVG, .premul = 1.0f};
  squall_decision reason;
  ck_assert_int_eq(squall__engine_allreduce(e, &c, &reason), squallSuccess);
  ck_assert_int_ne(reason.route, SQ_ROUTE_PASS);
  squallStatsGet(&b);
  ck_assert_uint_eq(b.twoLevelCalls - a.twoLevelCalls, (uint64_t)two_level);
  for (size_t i = 0; i < n; i++) {
    float exact = 0;
    for (int r = 0; r < nranks; r++) exact += gen(61, r, i);
    MC_CHECK(out[i] == exact / (float)nranks, "avg element %zu: %a vs %a", i, out[i], exact / nranks);
  }
  uint16_t *h = malloc(n * 2), *ho = malloc(n * 2);
  for (size_t i = 0; i < n; i++) h[i] = sq_f32_to_f16(gen(62, rank, i));
  use_config("SQUALL_COMPRESS=fp16");
  squall_call hc = {.send = h, .recv = ho, .count = n, .dtype = SQ_DT_F16, .elsize = 2, .op = SQ_OP_SUM, .premul = 0.5f};
  ck_assert_int_eq(squall__engine_allreduce(e, &hc, &reason), squallSuccess);
  ck_assert_int_ne(reason.route, SQ_ROUTE_PASS);
  for (size_t i = 0; i < n; i++) {
    double exact = 0;
    for (int r = 0; r < nranks; r++) exact += 0.5 * gen(62, r, i);
    MC_CHECK(sq_f16_to_f32(ho[i]) == (float)exact, "f16 premul element %zu", i);
  }
  assert_identical_across_ranks(ho, n * 2);
  squall__engine_free(e);

  /* No split (an NCCL older than 2.18): flat, counted, still the flat model. */
  tr.split = NULL;
  e = squall__engine_create(&tr, &squall__kernels_host);
  use_config("SQUALL_COMPRESS=topk:0.01");
  squallStatsGet(&a);
  squall_call fc = {.send = g, .recv = out, .count = n, .dtype = SQ_DT_F32, .elsize = 4, .op = SQ_OP_SUM, .premul = 1.0f};
  ck_assert_int_eq(squall__engine_allreduce(e, &fc, &reason), squallSuccess);
  squallStatsGet(&b);
  float *ref = malloc(n * 4);
  model_flat(61, n, 0.01, ref);
  ck_assert(memcmp(out, ref, n * 4) == 0);
  ck_assert_uint_eq(b.flat[two_level ? squallFlatNoSplit : squallFlatUneven] -
                        a.flat[two_level ? squallFlatNoSplit : squallFlatUneven],
                    1);
  squall__engine_free(e);
  squall__transport_mpi_fini(&ctx); /* the engines copied the transport, not its ctx */
  MPI_Comm_free(&dup);
  free(g);
  free(out);
  free(h);
  free(ho);
  free(ref);
}
END_TEST

/* A failure after the shard's compressed all-reduce succeeded (the node
 * all-gather, injected on every rank alike so that no rank waits): the
 * call returns the error, never passes through, and every residual holds
 * what it held before; the next call then gives the same bits as an engine
 * that never failed. The split is wrapped so that the node communicator's
 * all-gather can be made to fail. */
static squallResult_t (*real_split)(void *, void *, int, int, squall_transport *);
static squallResult_t (*real_allgather)(void *, void *, const void *, void *, size_t);
static void *intra_ctx;
static int fail_intra;

static squallResult_t failing_allgather(void *ctx, void *stream, const void *send, void *recv, size_t bytes) {
  if (ctx == intra_ctx && fail_intra) return squall__fail(squallSystemError, "injected node all-gather failure");
  return real_allgather(ctx, stream, send, recv, bytes);
}

static squallResult_t wrapping_split(void *ctx, void *stream, int color, int key, squall_transport *sub) {
  squallResult_t r = real_split(ctx, stream, color, key, sub);
  if (r != squallSuccess) return r;
  if (intra_ctx == NULL) intra_ctx = sub->ctx; /* the first split is the node's */
  real_allgather = sub->allgather;
  sub->allgather = failing_allgather;
  return r;
}

/* spec: top-k, whose residual changes after its exchange; fp16, whose
 * shard call takes its backup in its encoding pass once the scale is
 * guessed (from the second call on); int8, whose encoder backs up each
 * block as it encodes it. mul: 1, or a factor that makes the
 * data inexact in fp16, so that the residual to restore is not zero. */
static void shard_failure_case(const char *spec, float mul) {
  squall_mpi_ctx ctx[2];
  squall_transport tr[2];
  MPI_Comm dup[2];
  squall_engine *e[2];
  for (int i = 0; i < 2; i++) {
    MPI_Comm_dup(MPI_COMM_WORLD, &dup[i]);
    ck_assert_int_eq(squall__transport_mpi_init(&tr[i], &ctx[i], dup[i]), squallSuccess);
  }
  real_split = tr[0].split;
  tr[0].split = wrapping_split;
  intra_ctx = NULL;
  fail_intra = 0;
  for (int i = 0; i < 2; i++) ck_assert_ptr_nonnull(e[i] = squall__engine_create(&tr[i], &squall__kernels_host));
  use_config(spec);
  size_t n = 4003; /* not a multiple of the node size: a padded shard */
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  float *res0 = malloc(n * 4), *res1 = malloc(n * 4), *rref = malloc(n * 4);
  squall_decision d;
  squallStats_t a, b;
  fill(g, n, 71, rank);
  for (size_t i = 0; i < n; i++) g[i] *= mul;
  squall_call c = {.send = g, .recv = out, .count = n, .dtype = SQ_DT_F32, .elsize = 4, .op = SQ_OP_SUM, .premul = 1.0f};
  squall_call cr = c;
  cr.recv = ref;
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(squall__engine_allreduce(e[i], i ? &cr : &c, &d), squallSuccess);
    ck_assert_int_eq(d.route, SQ_ROUTE_TWOLEVEL);
  }
  ck_assert_ptr_nonnull(intra_ctx);
  ck_assert_int_eq(squall__engine_get_residual(e[0], g, n, SQ_DT_F32, 0, res0), squallSuccess);
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) kept += res0[i] != 0.0f;
  ck_assert_msg(kept > 0, "%s: nothing in the residual to restore", spec);
  fill(g, n, 72, rank);
  for (size_t i = 0; i < n; i++) g[i] *= mul;
  fail_intra = 1;
  squallStatsGet(&a);
  ck_assert_int_eq(squall__engine_allreduce(e[0], &c, &d), squallSystemError);
  squallStatsGet(&b);
  ck_assert_uint_eq(b.passthrough[squallPassError] - a.passthrough[squallPassError], 1);
  ck_assert_uint_eq(b.twoLevelCalls - a.twoLevelCalls, 0);
  fail_intra = 0;
  ck_assert_int_eq(squall__engine_get_residual(e[0], g, n, SQ_DT_F32, 0, res1), squallSuccess);
  ck_assert_msg(memcmp(res0, res1, n * 4) == 0, "%s: the residual changed in a failed call", spec);
  /* the retry and the engine that never failed: the same bits, the same residual */
  ck_assert_int_eq(squall__engine_allreduce(e[0], &c, &d), squallSuccess);
  ck_assert_int_eq(squall__engine_allreduce(e[1], &cr, &d), squallSuccess);
  ck_assert(memcmp(out, ref, n * 4) == 0);
  ck_assert_int_eq(squall__engine_get_residual(e[0], g, n, SQ_DT_F32, 0, res1), squallSuccess);
  ck_assert_int_eq(squall__engine_get_residual(e[1], g, n, SQ_DT_F32, 0, rref), squallSuccess);
  ck_assert(memcmp(res1, rref, n * 4) == 0);
  for (int i = 0; i < 2; i++) {
    squall__engine_free(e[i]);
    squall__transport_mpi_fini(&ctx[i]);
    MPI_Comm_free(&dup[i]);
  }
  free(g);
  free(out);
  free(ref);
  free(res0);
  free(res1);
  free(rref);
}

START_TEST(test_failure_after_shard_restores_residual) {
  if (!two_level) return; /* flat layouts: the flat path's faults tests cover it */
  shard_failure_case("SQUALL_COMPRESS=topk:0.01", 1.0f);
  shard_failure_case("SQUALL_COMPRESS=fp16", 1.1f);
  shard_failure_case("SQUALL_COMPRESS=int8", 1.0f);
}
END_TEST

/* The shard residual's slot is looked up once per call, as on the flat
 * path (residual.h): two tensors of one shape at stable addresses, then a
 * third, new one. A second lookup per call would shorten the round to one
 * lookup, and the new tensor would take a live tensor's residual. */
START_TEST(test_shard_residual_identity) {
  if (!two_level) return;
  use_config("SQUALL_COMPRESS=topk:0.01");
  squallMpiResetResiduals(MPI_COMM_WORLD);
  size_t n = 2999; /* a shape no other test uses */
  float *t[3], *out = malloc(n * 4), *ref = malloc(n * 4);
  for (int i = 0; i < 3; i++) t[i] = malloc(n * 4);
  for (int step = 0; step < 4; step++)
    for (int i = 0; i < (step == 3 ? 3 : 2); i++) {
      fill(t[i], n, 300 + (uint64_t)(step * 3 + i), rank);
      ck_assert_int_eq(squallMpiAllreduce(t[i], out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    }
  /* the new tensor started from a zero residual: the model's bits */
  model_two_level(300 + 3 * 3 + 2, n, 0.01, ref);
  ck_assert_msg(memcmp(out, ref, n * 4) == 0, "the new tensor took another tensor's shard residual");
  for (int i = 0; i < 3; i++) free(t[i]);
  free(out);
  free(ref);
}
END_TEST

/* Counts n and n + 1 have one shard size (3001 and 3002 elements: 1501
 * per rank of a two-rank node), but they are tensors of different shapes,
 * each with a residual of its own, as on one node: sent alternately from
 * one buffer into one output, what each sends plus what each keeps is
 * what each was given, and no residual answers for a count nobody sent. */
START_TEST(test_shard_residual_per_count) {
  if (!two_level) return;
  use_config("SQUALL_COMPRESS=fp16");
  squallMpiResetResiduals(MPI_COMM_WORLD);
  size_t n = 3001, m = n + 1;
  const float mul = 1.0f + 0x1p-12f; /* 19 significant bits: fp16 keeps a residual */
  float *g = malloc(m * 4), *out = malloc(m * 4), *res = malloc(m * 4);
  double *sent = calloc(2 * m, 8), *given = calloc(2 * m, 8), *kept = malloc(2 * m * 8), *kept_all = malloc(2 * m * 8);
  for (int t = 0; t < 8; t++)
    for (int which = 0; which < 2; which++) {
      size_t cnt = which ? m : n;
      uint64_t seed = 500 + (uint64_t)(2 * t + which);
      fill(g, cnt, seed, rank);
      for (size_t i = 0; i < cnt; i++) g[i] *= mul;
      for (size_t i = 0; i < cnt; i++)
        for (int r = 0; r < nranks; r++) given[which * m + i] += gen(seed, r, i) * mul;
      ck_assert_int_eq(squallMpiAllreduce(g, out, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
      for (size_t i = 0; i < cnt; i++) sent[which * m + i] += out[i];
    }
  for (int which = 0; which < 2; which++) {
    size_t cnt = which ? m : n;
    ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)cnt, MPI_FLOAT, res), MPI_SUCCESS);
    for (size_t i = 0; i < m; i++) kept[which * m + i] = i < cnt ? res[i] : 0;
  }
  MPI_Allreduce(kept, kept_all, (int)(2 * m), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < 2 * m; i++)
    MC_CHECK(sent[i] + kept_all[i] == given[i], "count %zu, element %zu: sent %.17g + kept %.17g != %.17g",
             i < m ? n : m, i % m, sent[i], kept_all[i], given[i]);
  /* a buffer sent with n elements keeps no residual of n + 1 */
  float *h = malloc(m * 4);
  fill(h, n, 520, rank);
  ck_assert_int_eq(squallMpiAllreduce(h, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, h, (int)n, MPI_FLOAT, res), MPI_SUCCESS);
  ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, h, (int)m, MPI_FLOAT, res), MPI_ERR_ARG);
  free(g);
  free(out);
  free(res);
  free(h);
  free(sent);
  free(given);
  free(kept);
  free(kept_all);
}
END_TEST

/* squallSetConfig from another thread during two-level calls, at
 * different points on each rank. A two-level call runs its shard with the
 * configuration its own plan was made from (squall_shard), never with a
 * snapshot of its own: the thread flips between codecs whose shards take
 * different routes (16-bit, top-k, two-phase), and every call still
 * succeeds, with the same bits on every rank, where the shard used to
 * take a second snapshot ("route decided, prepared" internal errors, or
 * shards of one call running different codecs across nodes). Ranks whose
 * snapshots differ pass through together (the header). The thread never
 * turns compression off: see test_engine_mpi's set_config tests. */
START_TEST(test_set_config_from_another_thread) {
  static const char *const specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=topk:0.01", "SQUALL_COMPRESS=int8",
                                      "SQUALL_COMPRESS=topk:0.05 SQUALL_ZSTD=0", "SQUALL_COMPRESS=bf16"};
  use_config("SQUALL_COMPRESS=fp16");
  size_t n = 20000;
  float *g = malloc(n * 4), *out = malloc(n * 4);
  fill(g, n, 91, rank);
  squallStats_t a, b;
  squallStatsGet(&a);
  /* calls agree between flips, and flips land inside calls: the pause is
   * a few of this build's calls long (a sanitizer build's are slower) */
  double t0 = MPI_Wtime(), call = 0;
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  double mine = MPI_Wtime() - t0;
  MPI_Allreduce(&mine, &call, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  long pause = (long)(3e9 * call) > 500000 ? (long)(3e9 * call) : 500000;
  mc_flipper flip = {.specs = specs, .nspecs = 5, .pause_ns = pause + 300000 * (long)rank};
  mc_flip_start(&flip);
  for (int t = 0; t < 200; t++) {
    ck_assert_msg(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS,
                  "call %d failed: %s", t, squallGetLastError());
    assert_identical_across_ranks(out, n * 4);
  }
  mc_flip_stop(&flip);
  squallStatsGet(&b);
  if (two_level) ck_assert_msg(b.twoLevelCalls > a.twoLevelCalls, "no call ran two-level");
  free(g);
  free(out);
}
END_TEST

/* The two options: accepted values, clear errors, printed and defaulted. */
START_TEST(test_options) {
  squallConfig_t c;
  ck_assert_int_eq(squallConfigDefault(&c), squallSuccess);
  ck_assert_int_eq(c.hierarchy, squallHierarchyAuto);
  ck_assert_int_eq(c.ranksPerNode, 0);
  ck_assert_int_eq(squallConfigParse(&c, "hierarchy=FLAT ranks_per_node=8"), squallSuccess);
  ck_assert_int_eq(c.hierarchy, squallHierarchyFlat);
  ck_assert_int_eq(c.ranksPerNode, 8);
  ck_assert_int_eq(squallConfigSet(&c, "SQUALL_HIERARCHY", "tree"), squallInvalidArgument);
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "SQUALL_HIERARCHY='tree' is invalid"));
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "auto or flat"));
  ck_assert_int_eq(squallConfigSet(&c, "SQUALL_RANKS_PER_NODE", "-1"), squallInvalidArgument);
  ck_assert_int_eq(squallConfigSet(&c, "SQUALL_RANKS_PER_NODE", "2x"), squallInvalidArgument);
  ck_assert_int_eq(c.ranksPerNode, 8); /* unchanged by the refusals */
  ck_assert_str_eq(squallFlatReasonName(squallFlatUneven), "uneven_nodes");
  ck_assert_str_eq(squallFlatReasonName(squallFlatNoSplit), "no_split");
}
END_TEST

static int layout(void) {
  two_level = mc_two_level(nranks, &rpn);
  return MC_RUN;
}

int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "hierarchy", .rank = &rank, .nranks = &nranks,
      .setup = layout,
      /* test_level_choice_conserves last: it leaves residuals of several kinds */
      .cases = MC_CASES(
          {"mpi", 120, MC_TESTS(test_options, test_passthrough_exact, test_boundary_bytes_before_nodes_known,
                                test_topk_matches_model, test_conservation_topk, test_conservation_topk_fp16_values,
                                test_conservation_fp16, test_conservation_bf16, test_small_counts_identical,
                                test_hierarchy_mismatch_and_flat, test_engine_average_halves_nosplit,
                                test_failure_after_shard_restores_residual, test_shard_residual_identity,
                                test_shard_residual_per_count, test_set_config_from_another_thread,
                                test_level_choice_conserves)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

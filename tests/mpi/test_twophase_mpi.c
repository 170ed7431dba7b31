/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_twophase_mpi.c - the two-phase compressed all-reduce (int8, int4,
 * fp8; fp16 and bf16 with SQUALL_HALF_ACCUM=fp32) end to end over MPI
 * ranks (tests/mpi/runs.list): every rank holds the same bits; error
 * feedback conserves every input exactly over 20 steps (outputs plus all
 * ranks' residuals equal the inputs' sum); one step meets the codec's
 * error bound; non-finite inputs come out non-finite; fp16 summed in fp32
 * is never worse than summed in 16 bits (rel_err printed for both).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_mpi.h" /* squall__mpi_get_residual */
#include "mpi_check.h"
#include "squall.h"
#include "squall_mpi.h"
#include "codecs/codec.h"
#include "engine/costmodel.h"   /* SQ_COST_RECHECK */
#include "engine/topk_rounds.h" /* squall__topk_rounds_pack */
#include "engine/twophase.h"
#include "explore_rhythm.h"
#include "transports/transport_mpi.h"

static int rank, nranks;

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static uint64_t key(uint64_t seed, int r, size_t i) { return mix(seed * 1000003u + (uint64_t)r * 7919u + i); }
static float gen_uniform(uint64_t seed, int r, size_t i) { /* [-1, 1) */
  return (float)((double)(key(seed, r, i) >> 40) / (double)(1 << 23) - 1.0);
}
/* Dyadic: integers in [-4095, 4095] over 64 (13 bits: fp16 and bf16
 * round them, and every codec's residual is a multiple of 2^-11 or
 * coarser), so every fp32 sum below is exact. */
static float gen_dyadic(uint64_t seed, int r, size_t i) {
  return (float)((int)(key(seed, r, i) % 8191) - 4095) / 64.0f;
}

static void assert_identical_across_ranks(const void *buf, size_t bytes, const char *what) {
  unsigned char *all = malloc(bytes * (size_t)nranks);
  MPI_Allgather(buf, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 1; r < nranks; r++)
    ck_assert_msg(memcmp(all, all + (size_t)r * bytes, bytes) == 0, "%s: rank %d differs from rank 0", what, r);
  free(all);
}

static const char *codecs[] = {
    "SQUALL_COMPRESS=int8", "SQUALL_COMPRESS=int4", "SQUALL_COMPRESS=fp8",
    "SQUALL_COMPRESS=fp16 SQUALL_HALF_ACCUM=fp32", "SQUALL_COMPRESS=bf16 SQUALL_HALF_ACCUM=fp32",
    "SQUALL_COMPRESS=int8 SQUALL_BUCKET=64", "SQUALL_COMPRESS=fp8 SQUALL_BUCKET=1024",
    /* pipelined: many chunks, a short last one */
    "SQUALL_COMPRESS=int8 SQUALL_BUCKET=64 SQUALL_CHUNK_BYTES=4K", "SQUALL_COMPRESS=int4 SQUALL_CHUNK_BYTES=12K",
    "SQUALL_COMPRESS=fp16 SQUALL_CHUNK_BYTES=2K", "SQUALL_COMPRESS=bf16 SQUALL_CHUNK_BYTES=1K"};
#define NCODECS (sizeof codecs / sizeof codecs[0])

/* Counts that exercise: several buckets per shard, a partial last bucket,
 * fewer buckets than ranks (empty shards), a single element. */
static const size_t counts[] = {20011, 1536, 700, 1};

/* ------------------------------------------------------- conservation */

/* Over T steps: sum_t out_t + sum_r e_r == sum_t sum_r g_r, per element,
 * exactly (every sum is exact in fp32 and double for these inputs); every
 * step's output is the same bits on every rank. */
static void check_conservation(const char *spec, size_t n) {
  enum { T = 20 };
  mc_use_config(spec);
  float *g = malloc(n * 4), *out = malloc(n * 4), *res = malloc(n * 4);
  double *sum_out = calloc(n, sizeof(double)), *sum_in = calloc(n, sizeof(double));
  double *tot_res = malloc(n * sizeof(double)), *mine = malloc(n * sizeof(double));
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  for (int t = 0; t < T; t++) {
    for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(100 + (uint64_t)t, rank, i);
    ck_assert_msg(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS,
                  "%s: %s", spec, squallGetLastError());
    assert_identical_across_ranks(out, n * 4, spec);
    for (size_t i = 0; i < n; i++) {
      sum_out[i] += out[i];
      for (int r = 0; r < nranks; r++) sum_in[i] += gen_dyadic(100 + (uint64_t)t, r, i);
    }
  }
  ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res), MPI_SUCCESS);
  for (size_t i = 0; i < n; i++) mine[i] = res[i];
  MPI_Allreduce(mine, tot_res, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  int lossy = 0;
  for (size_t i = 0; i < n; i++) {
    MC_CHECK(sum_out[i] + tot_res[i] == sum_in[i], "%s n=%zu elem %zu: outputs %.17g + residuals %.17g != inputs %.17g",
             spec, n, i, sum_out[i], tot_res[i], sum_in[i]);
    lossy |= tot_res[i] != 0;
  }
  /* the codecs do round these inputs: the residuals are not all zero */
  if (n > 100) ck_assert_msg(lossy, "%s: no residual at all is implausible", spec);
  free(g);
  free(out);
  free(res);
  free(sum_out);
  free(sum_in);
  free(tot_res);
  free(mine);
}

START_TEST(test_conservation) {
  for (size_t c = 0; c < NCODECS; c++)
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) check_conservation(codecs[c], counts[k]);
}
END_TEST

/* ------------------------------------------------- a scale that moves */

static uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

/* The 16-bit two-phase call against a model of it that every rank runs
 * for all ranks with the plain codec functions (absmax, then encode at
 * the agreed scale): the same output bits at every step and the same
 * residual at the end. The data's magnitude jumps by powers of two from
 * step to step, so that the engine's guess (the tensor's previous scale)
 * misses at most steps and its rescale pass runs, and is right at some. */
static void check_against_model(const char *spec, size_t n) {
  enum { T = 8 };
  int P = nranks;
  sq_half_kind kind = strstr(spec, "bf16") ? SQ_HALF_BF16 : SQ_HALF_FP16;
  /* bf16 has float's range, so its scale is 1 until |a| nears
   * BF16_MAX / 2P: the top exponent E puts 0.75 * 2^E above that and P
   * times it still below float's largest (P <= 4) */
  int E = P > 2 ? 126 : 127;
  const int fp16_exps[T] = {0, 3, -2, 5, 5, -1, 0, 2}, bf16_exps[T] = {E - 20, E, E - 10, E, E - 1, E - 15, E, E - 5};
  const int *exps = kind == SQ_HALF_BF16 ? bf16_exps : fp16_exps;
  float amp = kind == SQ_HALF_BF16 ? 0.75f : 1.0f;
  mc_use_config(spec);
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  size_t se = ((n + (size_t)P - 1) / (size_t)P + 63) / 64 * 64; /* shards of whole lines of 64 */
  float *g = malloc(n * 4), *out = malloc(n * 4), *res = malloc(n * 4), *want = malloc(n * 4);
  float *mg = malloc((size_t)P * n * 4), *me = calloc((size_t)P * n, 4), *sum = malloc(se * 4);
  uint16_t *codes = malloc((size_t)P * se * P * 2 + 2), *blocks = malloc((size_t)P * se * 2 + 2);
  int changes = 0; /* steps whose scale differs from the step before: the guess missed */
  float last = 0;
  for (int t = 0; t < T; t++) {
    for (int r = 0; r < P; r++)
      for (size_t i = 0; i < n; i++) mg[(size_t)r * n + i] = ldexpf(amp * gen_uniform(300 + (uint64_t)t, r, i), exps[t]);
    memcpy(g, mg + (size_t)rank * n, n * 4);
    ck_assert_msg(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "%s: %s",
                  spec, squallGetLastError());
    /* the model: the global max, a scale with headroom for the sum of P
     * codes (twophase.c), every rank's encode, each shard's rank-ordered
     * fp32 sum re-encoded with its owner's residual, the decode */
    float m = 0;
    for (int r = 0; r < P; r++) {
      float x = squall__absmax(mg + (size_t)r * n, me + (size_t)r * n, n);
      if (x > m) m = x;
    }
    float scale = sq_pow2_scale(m, (kind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX) / (float)(2 * P));
    if (scale > (kind == SQ_HALF_FP16 ? 0x1p100f : 1.0f)) scale = kind == SQ_HALF_FP16 ? 0x1p100f : 1.0f;
    changes += t > 0 && scale != last;
    last = scale;
    for (int r = 0; r < P; r++)
      squall__half_encode(kind, mg + (size_t)r * n, me + (size_t)r * n, codes + (size_t)r * P * se, n, scale);
    for (int q = 0; q < P; q++) {
      size_t lo = (size_t)q * se < n ? (size_t)q * se : n, cnt = n - lo < se ? n - lo : se;
      for (int r = 0; r < P; r++) memcpy(blocks + (size_t)r * se, codes + (size_t)r * P * se + lo, cnt * 2);
      squall__half_reduce(kind, blocks, P, se, sum, cnt, scale);
      squall__half_encode(kind, sum, me + (size_t)q * n + lo, blocks, cnt, scale);
      squall__half_decode(kind, blocks, want + lo, cnt, scale, 0);
    }
    for (size_t i = 0; i < n; i++)
      MC_CHECK(bits_of(out[i]) == bits_of(want[i]), "%s n=%zu step %d elem %zu: %a, the model %a", spec, n, t, i,
               (double)out[i], (double)want[i]);
  }
  ck_assert_msg(changes >= 3, "%s: the scale changed at %d steps only", spec, changes);
  ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res), MPI_SUCCESS);
  for (size_t i = 0; i < n; i++)
    MC_CHECK(bits_of(res[i]) == bits_of(me[(size_t)rank * n + i]), "%s n=%zu: residual %zu: %a, the model %a",
             spec, n, i, (double)res[i], (double)me[(size_t)rank * n + i]);
  free(g);
  free(out);
  free(res);
  free(want);
  free(mg);
  free(me);
  free(sum);
  free(codes);
  free(blocks);
}

START_TEST(test_scale_changes) {
  const char *specs[] = {"SQUALL_COMPRESS=fp16 SQUALL_HALF_ACCUM=fp32", "SQUALL_COMPRESS=bf16 SQUALL_HALF_ACCUM=fp32",
                         "SQUALL_COMPRESS=fp16 SQUALL_CHUNK_BYTES=2K", "SQUALL_COMPRESS=bf16 SQUALL_CHUNK_BYTES=1K"};
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
    check_against_model(specs[s], 20011);
    check_against_model(specs[s], 5);
  }
}
END_TEST

/* ------------------------------------------------------- error bound */

/* One step from zero residuals, uniform inputs with max M per rank: the
 * first encode errs by at most half a step per rank (int8: M/127, int4:
 * M/7, fp8: M/16 relative to each bucket's max), the second by the same on
 * sums up to P*M: |out - exact| <= 2 P M q (1 + q). */
static double check_bound(const char *spec, double q, float amp, double *rel) {
  size_t n = 30011;
  mc_use_config(spec);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  float *g = malloc(n * 4), *out = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen_uniform(7, rank, i) * amp;
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  assert_identical_across_ranks(out, n * 4, spec);
  double maxerr = 0, num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double exact = 0;
    for (int r = 0; r < nranks; r++) exact += (double)(gen_uniform(7, r, i) * amp);
    double e = fabs((double)out[i] - exact);
    maxerr = fmax(maxerr, e);
    num += e * e;
    den += exact * exact;
  }
  double bound = 2.0 * nranks * amp * q * (1 + q) * 1.0001;
  ck_assert_msg(maxerr <= bound, "%s: max error %g above bound %g", spec, maxerr, bound);
  ck_assert_msg(maxerr > 0, "%s: no error at all is implausible", spec);
  /* deterministic: from zero residuals again, the same bits */
  float *avg = malloc(n * 4);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  ck_assert_int_eq(squallMpiAllreduce(g, avg, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  for (size_t i = 0; i < n; i++) /* same residuals, same bits */
    MC_CHECK(avg[i] == out[i], "element %zu: %a, and %a from the same residuals", i, (double)out[i], (double)avg[i]);
  free(avg);
  free(g);
  free(out);
  *rel = sqrt(num / den);
  return maxerr;
}

START_TEST(test_error_bounds) {
  double rel;
  check_bound("SQUALL_COMPRESS=int8", 1.0 / 127, 1.0f, &rel);
  check_bound("SQUALL_COMPRESS=int8", 1.0 / 127, 3e-30f, &rel);
  check_bound("SQUALL_COMPRESS=int8", 1.0 / 127, 1e37f, &rel);
  check_bound("SQUALL_COMPRESS=int4", 1.0 / 7, 1.0f, &rel);
  check_bound("SQUALL_COMPRESS=fp8", 1.0 / 16, 1.0f, &rel);
  check_bound("SQUALL_COMPRESS=fp8", 1.0 / 16, 1e-20f, &rel);
  check_bound("SQUALL_COMPRESS=fp16 SQUALL_HALF_ACCUM=fp32", 0x1p-11, 1.0f, &rel);
  check_bound("SQUALL_COMPRESS=bf16 SQUALL_HALF_ACCUM=fp32", 0x1p-8, 1.0f, &rel);
  check_bound("SQUALL_COMPRESS=bf16 SQUALL_HALF_ACCUM=fp32", 0x1p-8, 1e37f, &rel);
}
END_TEST

/* fp16 and bf16: summed in fp32 the error is at most what the 16-bit sum
 * gives (equal-ish at P = 2, smaller beyond); rank 0 prints both. */
START_TEST(test_half_accumulation) {
  const char *kinds[] = {"fp16", "bf16"};
  for (int k = 0; k < 2; k++) {
    char spec[128];
    double rel32, rel16;
    double u = k == 0 ? 0x1p-11 : 0x1p-8;
    snprintf(spec, sizeof spec, "SQUALL_COMPRESS=%s SQUALL_HALF_ACCUM=fp32", kinds[k]);
    check_bound(spec, u, 1.0f, &rel32);
    snprintf(spec, sizeof spec, "SQUALL_COMPRESS=%s SQUALL_HALF_ACCUM=half", kinds[k]);
    /* 16-bit sums: P - 1 roundings of partial sums up to P: wider bound */
    check_bound(spec, u * nranks, 1.0f, &rel16);
    if (rank == 0)
      printf("rel_err %s P=%d: fp32 accumulation %.3e, 16-bit accumulation %.3e\n", kinds[k], nranks,
             rel32, rel16);
    if (nranks >= 4) ck_assert_msg(rel32 < rel16, "%s: fp32 accumulation (%g) not better than 16-bit (%g)",
                                   kinds[k], rel32, rel16);
  }
}
END_TEST

/* ------------------------------------------------------- non-finite */

/* NaN and Inf in one rank's input: every rank's output is non-finite
 * exactly there (+Inf where only +Inf was seen), and finite elsewhere. */
START_TEST(test_nonfinite_propagates) {
  size_t n = 5000;
  const char *specs[] = {"SQUALL_COMPRESS=int8", "SQUALL_COMPRESS=int4", "SQUALL_COMPRESS=fp8"};
  for (int s = 0; s < 3; s++) {
    mc_use_config(specs[s]);
    squallMpiResetResiduals(MPI_COMM_WORLD);
    float *g = malloc(n * 4), *out = malloc(n * 4);
    for (size_t i = 0; i < n; i++) g[i] = gen_uniform(3, rank, i);
    if (rank == nranks - 1) {
      g[10] = NAN;
      g[1000] = INFINITY;
      g[4999] = -INFINITY;
    }
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    assert_identical_across_ranks(out, n * 4, specs[s]);
    for (size_t i = 0; i < n; i++) {
      if (i == 10) ck_assert(isnan(out[i]));
      else if (i == 1000) ck_assert(out[i] == INFINITY);
      else if (i == 4999) ck_assert(out[i] == -INFINITY);
      else ck_assert_msg(isfinite(out[i]), "%s: elem %zu = %g", specs[s], i, out[i]);
    }
    /* the residual holds nothing for them, so the next step is finite */
    for (size_t i = 0; i < n; i++) g[i] = gen_uniform(4, rank, i);
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    for (size_t i = 0; i < n; i++) MC_CHECK(isfinite(out[i]), "element %zu is not finite", i);
    free(g);
    free(out);
  }
}
END_TEST

/* ------------------------------------------------------- pipelining */

/* T steps with error feedback, from zero residuals: every output and the
 * final residual, so that two chunkings can be compared bit for bit. One
 * tensor: the same send and receive buffers every step (a residual is
 * known by both addresses), each output copied out. */
static void run_steps(const char *spec, const char *chunk, size_t n, int T, float *outs, float *res,
                      uint64_t *pipelined) {
  char full[256];
  snprintf(full, sizeof full, "%s SQUALL_CHUNK_BYTES=%s", spec, chunk);
  mc_use_config(full);
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  float *g = malloc(n * 4), *out = malloc(n * 4);
  squallStats_t before, after;
  squallStatsGet(&before);
  for (int t = 0; t < T; t++) {
    for (size_t i = 0; i < n; i++) g[i] = gen_uniform(40 + (uint64_t)t, rank, i) * (t % 2 ? 1e-3f : 7.0f);
    ck_assert_msg(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "%s: %s",
                  full, squallGetLastError());
    memcpy(outs + (size_t)t * n, out, n * 4);
  }
  squallStatsGet(&after);
  *pipelined = after.pipelinedCalls - before.pipelinedCalls;
  ck_assert_int_eq(after.compressedCalls - before.compressedCalls, T);
  ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res), MPI_SUCCESS);
  free(g);
  free(out);
}

/* Chunks change the order of the work, never a bit of the result or of
 * the residuals, whatever the chunk size (down to one bucket per shard). */
START_TEST(test_pipelined_identical) {
  enum { T = 4 };
  const char *specs[] = {"SQUALL_COMPRESS=int8", "SQUALL_COMPRESS=int4 SQUALL_BUCKET=64",
                         "SQUALL_COMPRESS=fp8", "SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=bf16"};
  /* one granule (a bucket, or 64 elements) per shard and chunk; several
   * chunks with a short last one; a few large ones */
  const struct {
    size_t n;
    const char *chunk;
  } cases[] = {{5003, "1"}, {70001, "8K"}, {70001, "64K"}};
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
    size_t nmax = 70001;
    float *ref = malloc((size_t)T * nmax * 4), *got = malloc((size_t)T * nmax * 4);
    float *ref_res = malloc(nmax * 4), *got_res = malloc(nmax * 4);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      size_t n = cases[c].n;
      const char *chunk = cases[c].chunk;
      uint64_t pipelined;
      run_steps(specs[s], "0", n, T, ref, ref_res, &pipelined);
      ck_assert_msg(pipelined == 0, "%s: chunk 0 pipelined %llu calls", specs[s], (unsigned long long)pipelined);
      run_steps(specs[s], chunk, n, T, got, got_res, &pipelined);
      ck_assert_msg(pipelined == T, "%s chunk %s n=%zu: %llu of %d calls pipelined", specs[s], chunk, n,
                    (unsigned long long)pipelined, T);
      for (size_t i = 0; i < (size_t)T * n; i++)
        MC_CHECK(memcmp(&ref[i], &got[i], 4) == 0, "%s chunk %s n=%zu: step %zu elem %zu: %a != %a",
                 specs[s], chunk, n, i / n, i % n, (double)got[i], (double)ref[i]);
      ck_assert_msg(memcmp(ref_res, got_res, n * 4) == 0, "%s chunk %s n=%zu: residuals differ", specs[s], chunk,
                    n);
    }
    free(ref);
    free(got);
    free(ref_res);
    free(got_res);
  }
}
END_TEST

/* Top-k's exchange in rounds (engine/topk_rounds.h) is pipelining too:
 * whatever the rounds, packed, raw or lossless, fp32 or fp16 values,
 * every output and the residuals are bit for bit those of one exchange,
 * and the rounds without zstd send what the format says, packed or raw
 * (which the cost model's estimate also gives). */
START_TEST(test_topk_rounds_identical) {
  enum { T = 4 };
  /* 82000 elements at 0.2: 4 rounds at most (SQ_TOPK_ROUND_MIN entries
   * each, packed in 2 pages), and sparse up to 4 ranks; 2^20 + 3 at 0.01:
   * 2, on the sampled selection. pack 0: the rounds without zstd go raw. */
  /* clang-format off */
  const struct { const char *spec; size_t n; const char *chunk; uint64_t rounds; int pack; } cases[] = {
      {"SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=0", 82000, "1", 4, 1},
      {"SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=0", 82000, "1", 4, 0},
      {"SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=0 SQUALL_TOPK_VALUES=fp16", 82000, "1", 4, 1},
      {"SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=0 SQUALL_TOPK_VALUES=fp16", 82000, "1", 4, 0},
      {"SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=1", 82000, "1", 4, 1},
      {"SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=1 SQUALL_TOPK_VALUES=fp16", 82000, "120K", 3, 1},
      {"SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=1", ((size_t)1 << 20) + 3, "1", 2, 1},
      {"SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=0", ((size_t)1 << 20) + 3, "1", 2, 1},
  };
  /* clang-format on */
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    size_t n = cases[c].n;
    squall__topk_rounds_pack = cases[c].pack;
    float *ref = malloc((size_t)T * n * 4), *got = malloc((size_t)T * n * 4);
    float *ref_res = malloc(n * 4), *got_res = malloc(n * 4);
    uint64_t pipelined;
    squallStats_t a, b;
    run_steps(cases[c].spec, "0", n, T, ref, ref_res, &pipelined);
    ck_assert_msg(pipelined == 0, "%s: chunk 0 ran %llu calls in rounds", cases[c].spec, (unsigned long long)pipelined);
    squallStatsGet(&a);
    run_steps(cases[c].spec, cases[c].chunk, n, T, got, got_res, &pipelined);
    squallStatsGet(&b);
    squall__topk_rounds_pack = 1;
    ck_assert_msg(pipelined == T, "%s: %llu of %d calls in rounds", cases[c].spec, (unsigned long long)pipelined, T);
    if (strstr(cases[c].spec, "ZSTD=0") && nranks > 1) { /* the rounds send what the format says */
      squallValueType_t vt = strstr(cases[c].spec, "fp16") ? squallValueFp16 : squallValueFp32;
      double ratio = strstr(cases[c].spec, "topk:0.2") ? 0.2 : 0.01;
      size_t k = squall__topk_k(n, ratio), R = (size_t)cases[c].rounds;
      uint64_t per_call = 0;
      for (size_t j = 0; j < R; j++) {
        size_t m = (j + 1) * k / R - j * k / R, packed = squall__topk_part_packed_bytes(m, n, vt);
        if (cases[c].pack) ck_assert_uint_gt(packed, 0); /* these sizes all pack */
        per_call += (uint64_t)(nranks - 1) * (cases[c].pack ? packed : squall__topk_slot_bytes(m, vt));
      }
      ck_assert_msg(b.bytesWire - a.bytesWire == (uint64_t)T * per_call,
                    "%s pack %d: the rounds sent %llu bytes, the format says %llu", cases[c].spec, cases[c].pack,
                    (unsigned long long)(b.bytesWire - a.bytesWire), (unsigned long long)((uint64_t)T * per_call));
      squall__topk_rounds_pack = cases[c].pack; /* the cost model's figure: the same bytes */
      ck_assert_uint_eq(squall__topk_rounds_wire(n, k, vt, nranks, R), per_call);
      squall__topk_rounds_pack = 1;
    }
    ck_assert_msg(b.pipelineChunks - a.pipelineChunks == T * cases[c].rounds, "%s: %llu rounds in %d calls",
                  cases[c].spec, (unsigned long long)(b.pipelineChunks - a.pipelineChunks), T);
    for (size_t i = 0; i < (size_t)T * n; i++)
      MC_CHECK(memcmp(&ref[i], &got[i], 4) == 0, "%s: step %zu elem %zu: %a != %a", cases[c].spec, i / n, i % n,
               (double)got[i], (double)ref[i]);
    ck_assert_msg(memcmp(ref_res, got_res, n * 4) == 0, "%s: residuals differ", cases[c].spec);
    assert_identical_across_ranks(got, (size_t)T * n * 4, cases[c].spec);
    free(ref);
    free(got);
    free(ref_res);
    free(got_res);
  }
}
END_TEST

/* A result large enough to be written cold (SQ_OUT_COLD_BYTES) has the
 * same bits whichever stores the decoders use: streamed, plain, or
 * alternating while the process learns (its trials fall on the chunks of
 * the first such call). Every rank learns on its own. */
START_TEST(test_cold_outputs_identical) {
  enum { T = 2 };
  const char *specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=int8"};
  const int modes[] = {SQ_STORE_PLAIN, SQ_STORE_STREAM, -1 /* learn */};
  size_t n = SQ_OUT_COLD_BYTES / sizeof(float) + 1001;
  float *ref = malloc((size_t)T * n * 4), *got = malloc((size_t)T * n * 4);
  float *ref_res = malloc(n * 4), *got_res = malloc(n * 4);
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
      uint64_t pipelined;
      squall__cold_stores_force(modes[m]);
      run_steps(specs[s], "4M", n, T, m ? got : ref, m ? got_res : ref_res, &pipelined);
      ck_assert_msg(pipelined == T, "%s: %llu of %d calls pipelined", specs[s], (unsigned long long)pipelined, T);
      if (m == 0) continue;
      size_t i = 0; /* ck_assert per element of 4M would cost a system call each */
      while (i < (size_t)T * n && memcmp(&ref[i], &got[i], 4) == 0) i++;
      if (i < (size_t)T * n)
        ck_abort_msg("%s, stores %d: step %zu elem %zu: %a, plain stores %a", specs[s], modes[m], i / n, i % n,
                     (double)got[i], (double)ref[i]);
      ck_assert_msg(memcmp(ref_res, got_res, n * 4) == 0, "%s, stores %d: residuals differ", specs[s], modes[m]);
      assert_identical_across_ranks(got, (size_t)T * n * 4, specs[s]);
    }
  squall__cold_stores_force(-1);
  free(ref);
  free(got);
  free(ref_res);
  free(got_res);
}
END_TEST

/* ------------------------------------------------------- cost model */

static void counts_identical(uint64_t v, const char *what) {
  assert_identical_across_ranks(&v, sizeof v, what);
}

/* A link said to be 100 Tbit/s: plain must win once the codec's speed is
 * known. Calls 1 (new memory: not measured), 2 (the codec's first figure,
 * which alone declines nothing) and 3 (the codec measured again) are
 * compressed; then every call passes through as would_not_pay, bit
 * for bit the plain all-reduce (of g + the residual the compressed calls
 * left, which the first declined call carries), on every rank alike, except
 * the exploring calls, compressed to refresh the figures. Two declines
 * through the header settle the class: its calls then skip the header,
 * except the rechecks and the exploring calls (and the one after each),
 * in the rhythm's shape (explore_rhythm.h; enough calls for the longest
 * exploring period). A 1 Mbit/s link given then (on every rank): within
 * 256 calls every call is compressed. */
START_TEST(test_cost_model) {
  size_t n = 200003;
  float *g = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4), *res = malloc(n * 4);
  const char *specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=int8", "SQUALL_COMPRESS=topk:0.01"};
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
    char spec[256];
    snprintf(spec, sizeof spec, "%s SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000", specs[s]);
    mc_use_config(spec);
    squallMpiCommFree(MPI_COMM_WORLD); /* a fresh engine: no figures yet */
    /* top-k also tries its slots raw (SQUALL_ZSTD on), a codec kind of its
     * own whose first figure declines nothing either (its first call finds
     * its memory ready: not fresh, so two calls measure it) */
    int measured = strstr(spec, "topk") ? 5 : 3, calls = measured + RHYTHM_LONGEST + 5;
    explore_rhythm r;
    rhythm_start(&r, spec, measured);
    squallStats_t before, after;
    for (int t = 0; t < calls; t++) {
      for (size_t i = 0; i < n; i++) g[i] = gen_uniform(60 + (uint64_t)t, rank, i);
      if (squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res) != MPI_SUCCESS) memset(res, 0, n * 4);
      squallStatsGet(&before);
      ck_assert_int_eq(squallMpiAllreduce(g, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
      squallStatsGet(&after);
      int c = after.compressedCalls > before.compressedCalls;
      int d = after.passthrough[squallPassNotPaying] > before.passthrough[squallPassNotPaying];
      int headed = (int)(after.headers - before.headers);
      counts_identical((uint64_t)c, spec);
      counts_identical((uint64_t)headed, spec);
      ck_assert_msg(headed <= 1, "%s call %d: %d headers", spec, t, headed);
      ck_assert_msg(headed || d, "%s call %d: compressed without a header", spec, t);
      ck_assert_msg(c + d == 1, "%s call %d: neither compressed nor declined", spec, t);
      rhythm_call(&r, t, c, headed);
      if (d) { /* passed through: exactly the plain sum, of g + the residual where one was carried */
        int carried = 0;
        for (size_t i = 0; i < n; i++) {
          carried |= res[i] != 0.0f;
          res[i] += g[i];
        }
        if (carried) ck_assert_msg(headed, "%s call %d: a residual carried without a header", spec, t);
        PMPI_Allreduce(carried ? res : g, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        ck_assert_msg(memcmp(a, b, n * 4) == 0, "%s call %d: declined but not the plain all-reduce", spec, t);
        if (squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res) == MPI_SUCCESS && headed)
          for (size_t i = 0; i < n; i++)
            MC_CHECK(res[i] == 0.0f, "%s call %d: residual[%zu] = %g left", spec, t, i, res[i]);
      }
      if (t < 3) ck_assert_msg(c, "%s call %d: declined before the codec was measured", spec, t);
    }
    /* then an exploration at least every 512th declined call */
    ck_assert_msg(r.explorations >= 1, "%s: no exploration in %d calls", spec, calls);

    snprintf(spec, sizeof spec, "%s SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=0.001", specs[s]);
    mc_use_config(spec);
    int first_compressed = -1;
    for (int t = 0; t < (SQ_COST_RECHECK << SQ_COST_RECHECK_SHIFTS) + 4; t++) {
      squallStatsGet(&before);
      ck_assert_int_eq(squallMpiAllreduce(g, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
      squallStatsGet(&after);
      int c = after.compressedCalls > before.compressedCalls;
      counts_identical((uint64_t)c, spec);
      if (c && first_compressed < 0) first_compressed = t;
      ck_assert_msg(c || first_compressed < 0, "%s: call %d passed through after call %d compressed", spec, t,
                    first_compressed);
    }
    ck_assert_msg(first_compressed >= 0 && first_compressed < (SQ_COST_RECHECK << SQ_COST_RECHECK_SHIFTS),
                  "%s: a slow link given, first compressed call %d", spec, first_compressed);
  }
  free(g);
  free(a);
  free(b);
  free(res);
}
END_TEST

/* A rank that changes its configuration alone while a class is settled
 * (its calls skip the header): the skipped calls stay the plain
 * all-reduce on every rank, the class's next header (a recheck, within 256
 * declined calls) meets the other ranks' header and sees the disagreement,
 * and from then on every call has a header and passes through until the
 * configurations agree again; then the class settles again. Nothing hangs,
 * nothing is summed wrong. */
START_TEST(test_settled_config_change) {
  if (nranks < 2) return;
  size_t n = 100003;
  float *g = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
  mc_use_config("SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000");
  squallConfig_t agreed;
  squallGetConfig(&agreed);
  squallMpiCommFree(MPI_COMM_WORLD); /* a fresh engine: no figures yet */
  int mismatched = 0, skipped_after_change = 0, settled_headers = 0;
  enum { CHANGE = 6,
         BACK = CHANGE + (SQ_COST_RECHECK << SQ_COST_RECHECK_SHIFTS) + 4,
         CALLS = BACK + 15 };
  for (int t = 0; t < CALLS; t++) {
    if (t == CHANGE && rank == 0) mc_use_config("SQUALL_COMPRESS=int8 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000");
    if (t == BACK && rank == 0) ck_assert_int_eq(squallSetConfig(&agreed), squallSuccess);
    for (size_t i = 0; i < n; i++) g[i] = gen_uniform(90 + (uint64_t)t, rank, i);
    squallStats_t before, after;
    squallStatsGet(&before);
    ck_assert_int_eq(squallMpiAllreduce(g, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    squallStatsGet(&after);
    uint64_t headed = after.headers - before.headers;
    uint64_t mism = after.passthrough[squallPassMismatch] - before.passthrough[squallPassMismatch];
    counts_identical(headed, "settled: headers");
    counts_identical(mism, "settled: mismatches");
    if (t >= CHANGE && t < BACK) {
      /* rank 0 holds another codec: nothing may be compressed */
      ck_assert_msg(after.compressedCalls == before.compressedCalls, "call %d compressed while ranks disagree", t);
      PMPI_Allreduce(g, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      ck_assert_msg(memcmp(a, b, n * 4) == 0, "call %d: not the plain all-reduce", t);
      skipped_after_change += headed == 0;
      if (mism) mismatched++;
      if (mismatched) ck_assert_msg(headed == 1 && mism == 1, "call %d: after the disagreement: %llu headers", t,
                                    (unsigned long long)headed);
    }
    if (t >= BACK + 2) { /* agreed again, declined twice through the header: settled */
      settled_headers += (int)headed;
      ck_assert_msg(after.compressedCalls == before.compressedCalls, "call %d compressed", t);
    }
    assert_identical_across_ranks(a, n * 4, "settled: result");
  }
  ck_assert_msg(skipped_after_change > 0 && mismatched > 0, "skipped %d, mismatched %d", skipped_after_change,
                mismatched);
  /* 13 calls, one check header in every SQ_COST_RECHECK */
  ck_assert_msg(settled_headers <= (13 + SQ_COST_RECHECK - 1) / SQ_COST_RECHECK, "%d headers in 13 settled calls",
                settled_headers);
  mc_use_config("SQUALL_COMPRESS=int8");
  free(g);
  free(a);
  free(b);
}
END_TEST

/* With the link measured (auto) on shared memory, calls of many sizes: each
 * rank predicts from its own timings, yet every rank takes the same path
 * at every call and holds the same bits. */
/* One call of n fresh elements under the cost model: every rank makes
 * the same decision, has the same headers and holds the same result. */
static void agreed_call(float *g, float *a, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) g[i] = gen_uniform(seed, rank, i);
  squallStats_t before, after;
  squallStatsGet(&before);
  ck_assert_int_eq(squallMpiAllreduce(g, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  squallStatsGet(&after);
  counts_identical(after.compressedCalls - before.compressedCalls, "compressed or not");
  counts_identical(after.headers - before.headers, "headers");
  assert_identical_across_ranks(a, n * 4, "cost model: result");
}

START_TEST(test_cost_model_agrees) {
  mc_use_config("SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on");
  size_t nmax = 1 << 18;
  float *g = malloc(nmax * 4), *a = malloc(nmax * 4);
  for (size_t n = 1000; n <= nmax; n = n * 3 / 2)
    for (int t = 0; t < 3; t++) agreed_call(g, a, n, 80 + (uint64_t)t);
  /* Plain timed first at each size, passed through with compression off
   * (as squall-bench's warm-ups are): then whole calls, timed on each rank,
   * decide, and the plain probes stay off; every rank still agrees. */
  for (size_t n = 5000; n <= nmax; n *= 4)
    for (int t = 0; t < 9; t++) {
      mc_use_config(t < 3 ? "SQUALL_COMPRESS=none" : "SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on");
      agreed_call(g, a, n, 90 + (uint64_t)t);
    }
  free(g);
  free(a);
}
END_TEST

/* In place (send == recv) gives the bits of out of place. */
START_TEST(test_in_place) {
  size_t n = 4099;
  mc_use_config("SQUALL_COMPRESS=int8 SQUALL_EF=0");
  float *g = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen_uniform(9, rank, i);
  memcpy(b, g, n * 4);
  ck_assert_int_eq(squallMpiAllreduce(g, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert_int_eq(squallMpiAllreduce(MPI_IN_PLACE, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(memcmp(a, b, n * 4) == 0);
  free(g);
  free(a);
  free(b);
}
END_TEST

/* Ranks that disagree on the bucket (or on the 16-bit accumulation) would
 * exchange blocks of different layouts: the agreement sees it and every
 * rank passes through, bit for bit the plain all-reduce. */
START_TEST(test_disagreement_passes_through) {
  if (nranks < 2) return;
  size_t n = 3000;
  float *g = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen_uniform(12, rank, i);
  const char *specs[2][2] = {{"SQUALL_COMPRESS=int8 SQUALL_BUCKET=64", "SQUALL_COMPRESS=int8 SQUALL_BUCKET=512"},
                             {"SQUALL_COMPRESS=fp16 SQUALL_HALF_ACCUM=half", "SQUALL_COMPRESS=fp16 SQUALL_HALF_ACCUM=fp32"}};
  for (int s = 0; s < 2; s++) {
    mc_use_config(specs[s][rank == 0 ? 0 : 1]);
    squallStats_t before, after;
    squallStatsGet(&before);
    ck_assert_int_eq(squallMpiAllreduce(g, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    squallStatsGet(&after);
    PMPI_Allreduce(g, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    ck_assert_msg(memcmp(a, b, n * 4) == 0, "%s: not the plain all-reduce", specs[s][1]);
    ck_assert(after.passthrough[squallPassMismatch] == before.passthrough[squallPassMismatch] + 1);
  }
  free(g);
  free(a);
  free(b);
}
END_TEST

/* The two-phase call itself, on the MPI transport, with kernel set k; the
 * backup it takes of the residual (in the encoding pass where it guesses
 * the scale, else by a copy) is the residual as it was. */
static void twophase_direct(const squall_transport *tr, const squall_kernels *k, const squall_twophase_codec *cd,
                            const float *g, float *res, float *out, size_t n, float *last_scale) {
  float scalars[4] = {0};
  void *ws = malloc(k->absmax_workspace_bytes(n) + 1);
  void *scratch = malloc(squall__twophase_scratch_bytes(cd, n, tr->nranks) + 1);
  float *backup = malloc(n * 4 + 4), *before = malloc(n * 4 + 4);
  if (res) memcpy(before, res, n * 4);
  double codec_s = 0;
  uint64_t wire = 0;
  int backed_up = -1;
  ck_assert_int_eq(squall__twophase_allreduce(tr, k, cd, NULL, g, res, out, n, scalars, ws, scratch, last_scale,
                                              res ? backup : NULL, &backed_up, &codec_s, &wire),
                   squallSuccess);
  ck_assert_int_eq(backed_up, res != NULL);
  if (res) ck_assert_msg(memcmp(backup, before, n * 4) == 0, "n=%zu: the backup is not the residual as it was", n);
  free(ws);
  free(scratch);
  free(backup);
  free(before);
}

/* The host kernels sum and re-encode an owner's 16-bit shard in one pass
 * (half_reduce_encode); the device set leaves that entry NULL and runs the
 * two kernels. Both routes of twophase.c give the same bits: results,
 * residuals and the next call's scale, over calls whose scale jumps (the
 * guess misses), pipelined or not, in place or not, with and without
 * error feedback. */
START_TEST(test_owner_routes_identical) {
  squall_mpi_ctx ctx = {0};
  squall_transport tr;
  ck_assert_int_eq(squall__transport_mpi_init(&tr, &ctx, MPI_COMM_WORLD), squallSuccess);
  squall_kernels two_pass = squall__kernels_host;
  two_pass.half_reduce_encode = NULL;
  const size_t lens[] = {1, 1000, 20011};
  const size_t chunk_bytes[] = {0, 2048};
  const int exps[] = {0, 3, -2, 20, 20};
  for (int kind = 0; kind < 2; kind++)
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
      for (size_t ci = 0; ci < 2; ci++)
        for (int variant = 0; variant < 3; variant++) { /* 0: out of place, 1: in place, 2: no residual */
          size_t n = lens[li];
          squall_twophase_codec cd = {.hkind = (sq_half_kind)kind, .chunk_bytes = chunk_bytes[ci], .guess = 1};
          float *g1 = malloc(n * 4), *g2 = malloc(n * 4), *o1 = malloc(n * 4), *o2 = malloc(n * 4);
          float *r1 = calloc(n, 4), *r2 = calloc(n, 4), last1 = 0, last2 = 0;
          for (int t = 0; t < (int)(sizeof exps / sizeof exps[0]); t++) {
            for (size_t i = 0; i < n; i++) g1[i] = g2[i] = ldexpf(gen_uniform(700 + (uint64_t)t, rank, i), exps[t]);
            float *out1 = variant == 1 ? g1 : o1, *out2 = variant == 1 ? g2 : o2;
            twophase_direct(&tr, &squall__kernels_host, &cd, g1, variant == 2 ? NULL : r1, out1, n, &last1);
            twophase_direct(&tr, &two_pass, &cd, g2, variant == 2 ? NULL : r2, out2, n, &last2);
            for (size_t i = 0; i < n; i++) {
              MC_CHECK(bits_of(out1[i]) == bits_of(out2[i]),
                       "kind %d n %zu chunk %zu variant %d step %d elem %zu: %a, two passes %a", kind, n,
                       chunk_bytes[ci], variant, t, i, (double)out1[i], (double)out2[i]);
              ck_assert_msg(bits_of(r1[i]) == bits_of(r2[i]),
                            "kind %d n %zu chunk %zu variant %d step %d elem %zu: residual %a, two passes %a", kind,
                            n, chunk_bytes[ci], variant, t, i, (double)r1[i], (double)r2[i]);
            }
            ck_assert_msg(bits_of(last1) == bits_of(last2), "kind %d n %zu step %d: scale %a, two passes %a", kind,
                          n, t, (double)last1, (double)last2);
          }
          free(g1);
          free(g2);
          free(o1);
          free(o2);
          free(r1);
          free(r2);
        }
  squall__transport_mpi_fini(&ctx);
}
END_TEST

int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "twophase", .rank = &rank, .nranks = &nranks,
      .cases = MC_CASES(
          {"engine", 600, MC_TESTS(test_conservation, test_scale_changes, test_error_bounds, test_half_accumulation,
                                   test_nonfinite_propagates, test_in_place, test_disagreement_passes_through)},
          {"pipelining", 600, MC_TESTS(test_pipelined_identical, test_topk_rounds_identical,
                                       test_owner_routes_identical, test_cold_outputs_identical)},
          {"cost_model", 600, MC_TESTS(test_cost_model, test_settled_config_change, test_cost_model_agrees)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

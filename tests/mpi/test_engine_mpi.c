/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_engine_mpi.c - the compressed all-reduce end to end over MPI ranks
 * (tests/mpi/runs.list: 1, 2, 3 and 4 ranks): pass-through is bit
 * exact, 16-bit paths meet their error bound, top-k equals an independent
 * reference on every rank, error feedback conserves every input exactly.
 */
#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <time.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "api/api_mpi.h" /* squall__mpi_get_residual */
#include "codecs/codec.h"
#include "engine/costmodel.h" /* SQ_COST_RECHECK, SQ_COST_RECHECK_SHIFTS */
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "engine/residual.h"
#include "mpi_check.h"
#include "squall_mpi.h"
#include "transports/transport_mpi.h"

static int rank, nranks;

/* Deterministic inputs: any rank can regenerate any rank's data. */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static float gen_uniform(uint64_t seed, int r, size_t i) { /* in [-1, 1) */
  return (float)((double)(mix(seed * 1000003u + (uint64_t)r * 7919u + i) >> 40) / (double)(1 << 23) - 1.0);
}
/* Dyadic: integers in [-64, 64] times 1/8, so every sum below is exact. */
static float gen_dyadic(uint64_t seed, int r, size_t i) {
  return (float)((int)(mix(seed * 1000003u + (uint64_t)r * 7919u + i) % 129) - 64) / 8.0f;
}
static void fill(float *x, size_t n, uint64_t seed, int r, float (*gen)(uint64_t, int, size_t)) {
  for (size_t i = 0; i < n; i++) x[i] = gen(seed, r, i);
}

/* Defaults plus spec; logging and SQUALL_STATS stay as the environment set them
 * (the environment's, not the last test's). */
static void use_config(const char *spec) {
  squallConfig_t c, env;
  squallConfigDefault(&c);
  ck_assert_int_eq(squallConfigFromEnv(&env), squallSuccess);
  c.debug = env.debug;
  c.costModel = env.costModel; /* run-mpi.sh: off, so that every eligible call is compressed */
  c.minRanks = env.minRanks;   /* engine-1 runs the suite on one rank with SQUALL_MIN_RANKS=1 */
  memcpy(c.statsPath, env.statsPath, sizeof c.statsPath);
  ck_assert_int_eq(squallConfigParse(&c, "SQUALL_MIN_BYTES=0"), squallSuccess);
  ck_assert_msg(squallConfigParse(&c, spec) == squallSuccess, "bad spec %s: %s", spec, squallGetLastError());
  ck_assert_int_eq(squallSetConfig(&c), squallSuccess);
  /* Residuals are matched by shape: without this, a test would inherit the
   * residual an earlier test left for the same element count. */
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
}

/* Every rank must hold the same bits. */
static void assert_identical_across_ranks(const void *buf, size_t bytes) {
  unsigned char *all = malloc(bytes * (size_t)nranks);
  MPI_Allgather(buf, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 1; r < nranks; r++)
    ck_assert_msg(memcmp(all, all + (size_t)r * bytes, bytes) == 0, "rank %d differs from rank 0", r);
  free(all);
}

/* ------------------------------------------------------------ pass-through */
START_TEST(test_passthrough_bit_exact) {
  const char *specs[] = {"SQUALL_COMPRESS=none", "SQUALL_COMPRESS=topk:0.01", "SQUALL_COMPRESS=fp16"};
  size_t n = 1000;
  for (size_t s = 0; s < 3; s++) {
    use_config(specs[s]);
    /* integers, and float with max/min/prod, always pass through */
    int *ia = malloc(n * sizeof *ia), *ib = malloc(n * sizeof *ib), *ic = malloc(n * sizeof *ic);
    for (size_t i = 0; i < n; i++) ia[i] = (int)(mix(i + (uint64_t)rank) % 1000);
    ck_assert_int_eq(squallMpiAllreduce(ia, ib, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    PMPI_Allreduce(ia, ic, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ck_assert(memcmp(ib, ic, n * sizeof *ib) == 0);
    MPI_Op ops[] = {MPI_MAX, MPI_MIN, MPI_PROD};
    float *fa = malloc(n * 4), *fb = malloc(n * 4), *fc = malloc(n * 4);
    fill(fa, n, 11, rank, gen_uniform);
    for (int o = 0; o < 3; o++) {
      ck_assert_int_eq(squallMpiAllreduce(fa, fb, (int)n, MPI_FLOAT, ops[o], MPI_COMM_WORLD), MPI_SUCCESS);
      PMPI_Allreduce(fa, fc, (int)n, MPI_FLOAT, ops[o], MPI_COMM_WORLD);
      ck_assert_msg(memcmp(fb, fc, n * 4) == 0, "op %d under %s changed the result", o, specs[s]);
    }
    free(ia);
    free(ib);
    free(ic);
    free(fa);
    free(fb);
    free(fc);
  }
  /* fp32 sum with compression off: bit for bit MPI_Allreduce */
  use_config("SQUALL_COMPRESS=none");
  float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
  fill(a, n, 12, rank, gen_uniform);
  ck_assert_int_eq(squallMpiAllreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  PMPI_Allreduce(a, c, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  ck_assert(memcmp(b, c, n * 4) == 0);
  /* below SQUALL_MIN_BYTES: untouched too */
  use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_MIN_BYTES=1M");
  ck_assert_int_eq(squallMpiAllreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(memcmp(b, c, n * 4) == 0);
  free(a);
  free(b);
  free(c);
}
END_TEST

/* --------------------------------------------------------------- 16-bit */
static void check_half(const char *codec, double unit_roundoff, float amplitude) {
  size_t n = 4099; /* odd */
  use_config(codec);
  float *g = malloc(n * 4), *out = malloc(n * 4), *x = malloc(n * 4);
  fill(g, n, 21, rank, gen_uniform);
  for (size_t i = 0; i < n; i++) g[i] *= amplitude;
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  /* exact sum in double, from every rank's regenerated input */
  double maxabs = 0, maxerr = 0;
  for (size_t i = 0; i < n; i++) {
    double exact = 0;
    for (int r = 0; r < nranks; r++) exact += (double)(gen_uniform(21, r, i) * amplitude);
    for (int r = 0; r < nranks; r++) maxabs = fmax(maxabs, fabs((double)(gen_uniform(21, r, i) * amplitude)));
    MC_CHECK(isfinite(out[i]), "%s: element %zu is not finite", codec, i);
    maxerr = fmax(maxerr, fabs((double)out[i] - exact));
  }
  /* each rank's code rounds once (u*max), the 16-bit sum rounds P-1 times
   * on partial sums up to P*max: bound (P + P*(P-1)) * u * max */
  double bound = (nranks + (double)nranks * (nranks - 1)) * unit_roundoff * maxabs * 1.0001;
  ck_assert_msg(maxerr <= bound, "%s: max error %g above bound %g", codec, maxerr, bound);
  ck_assert_msg(maxerr > 0, "%s: no rounding at all is implausible", codec);
  /* in place gives the same bits */
  memcpy(x, g, n * 4);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  ck_assert_int_eq(squallMpiAllreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(memcmp(x, out, n * 4) == 0);
  free(g);
  free(out);
  free(x);
}

START_TEST(test_fp16_error_bound) { check_half("SQUALL_COMPRESS=fp16", 0x1p-11, 1.0f); }
END_TEST
START_TEST(test_fp16_tiny_values_are_scaled) { check_half("SQUALL_COMPRESS=fp16", 0x1p-11, 1e-7f); }
END_TEST
START_TEST(test_fp16_near_max_no_overflow) { check_half("SQUALL_COMPRESS=fp16", 0x1p-11, 65504.0f); }
END_TEST
/* sums near float's top: the scale reaches 2^-112 on 4 ranks */
START_TEST(test_fp16_huge_values) { check_half("SQUALL_COMPRESS=fp16", 0x1p-11, 5e37f); }
END_TEST
START_TEST(test_bf16_error_bound) { check_half("SQUALL_COMPRESS=bf16", 0x1p-8, 1.0f); }
END_TEST
START_TEST(test_bf16_huge_values) { check_half("SQUALL_COMPRESS=bf16", 0x1p-8, 5e37f); }
END_TEST

/* ---------------------------------------------------------------- top-k */
typedef struct {
  uint32_t key;
  uint32_t idx;
} ranked;
static int by_key_desc(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  if (x->key != y->key) return x->key > y->key ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Sort-based reference: every rank's top k, summed in rank order. */
static void topk_reference(uint64_t seed, size_t n, size_t k, float *dense) {
  ranked *rk = malloc(n * sizeof *rk);
  memset(dense, 0, n * 4);
  for (int r = 0; r < nranks; r++) {
    for (size_t i = 0; i < n; i++) {
      float v = gen_uniform(seed, r, i);
      uint32_t bits;
      memcpy(&bits, &v, 4);
      rk[i].key = bits & 0x7fffffffu;
      rk[i].idx = (uint32_t)i;
    }
    qsort(rk, n, sizeof *rk, by_key_desc);
    /* add in ascending index order, as the decoder does */
    char *take = calloc(n, 1);
    for (size_t j = 0; j < k; j++) take[rk[j].idx] = 1;
    for (size_t i = 0; i < n; i++)
      if (take[i]) dense[i] += gen_uniform(seed, r, i);
    free(take);
  }
  free(rk);
}

static void check_topk(const char *spec, double ratio, size_t n, int zstd) {
  char full[128];
  snprintf(full, sizeof full, "SQUALL_COMPRESS=topk:%.17g SQUALL_ZSTD=%d %s", ratio, zstd, spec);
  use_config(full);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  fill(g, n, 31, rank, gen_uniform);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  size_t k = squall__topk_k(n, ratio);
  topk_reference(31, n, k, ref);
  for (size_t i = 0; i < n; i++)
    MC_CHECK(memcmp(&out[i], &ref[i], 4) == 0, "%s n=%zu: element %zu is %a, reference %a", full, n,
             i, out[i], ref[i]);
  assert_identical_across_ranks(out, n * 4);
  free(g);
  free(out);
  free(ref);
}

START_TEST(test_topk_matches_reference) {
  check_topk("", 0.01, 100003, 0);
  check_topk("", 0.01, 100003, 1);
  check_topk("", 0.05, 4096, 3);
  check_topk("", 0.001, 1 << 17, 1);
}
END_TEST

/* An application may change the floating-point environment, on one rank
 * only: the rounding mode (fesetround), flush-to-zero and
 * denormals-are-zero (-ffast-math, torch.set_flush_denormal). Every
 * codec's result is still the bits the default environment gives, on
 * every rank.
 * Inputs: uniform values, whose sums round, and subnormal ones, which
 * denormals-are-zero would read as zeros. */
static void odd_fp_env(int on) {
  static int rm;
#if defined(__x86_64__)
  static unsigned csr;
  if (on) {
    csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* flush-to-zero, denormals-are-zero */
  } else
    _mm_setcsr(csr);
#endif
  if (on) {
    rm = fegetround();
    fesetround(FE_UPWARD);
  } else
    fesetround(rm);
}

START_TEST(test_codecs_ignore_a_ranks_fp_environment) {
  const char *specs[] = {"SQUALL_COMPRESS=topk:0.25 SQUALL_ZSTD=0",
                         "SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=0",
                         "SQUALL_COMPRESS=topk:0.25 SQUALL_TOPK_VALUES=fp16 SQUALL_ZSTD=0",
                         "SQUALL_COMPRESS=fp16",
                         "SQUALL_COMPRESS=bf16",
                         "SQUALL_COMPRESS=fp16 SQUALL_HALF_ACCUM=half",
                         "SQUALL_COMPRESS=int8",
                         "SQUALL_COMPRESS=int4",
                         "SQUALL_COMPRESS=fp8"};
  size_t n = 40099;
  float *g = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
  float *res_want = malloc(n * 4), *res_got = malloc(n * 4);
  for (size_t s = 0; s < sizeof specs / sizeof *specs; s++)
    for (int tiny = 0; tiny < 2; tiny++) {
      fill(g, n, 57 + (uint64_t)tiny, rank, gen_uniform);
      if (tiny)
        for (size_t i = 0; i < n; i++) g[i] *= 0x1p-130f;
      use_config(specs[s]);
      ck_assert_int_eq(squallMpiAllreduce(g, want, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
      ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res_want), MPI_SUCCESS);
      squallMpiResetResiduals(MPI_COMM_WORLD);
      if (rank == 0) odd_fp_env(1);
      int rc = squallMpiAllreduce(g, got, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (rank == 0) odd_fp_env(0);
      ck_assert_int_eq(rc, MPI_SUCCESS);
      ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res_got), MPI_SUCCESS);
      assert_identical_across_ranks(got, n * 4);
      size_t bad = 0;
      while (bad < n && memcmp(&got[bad], &want[bad], 4) == 0) bad++;
      /* what the rank keeps must not depend on its environment either */
      int res_same = memcmp(res_got, res_want, n * 4) == 0;
      MPI_Allreduce(MPI_IN_PLACE, &res_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      ck_assert_msg(res_same, "%s%s: a residual differs from the default environment's", specs[s],
                    tiny ? " (subnormal inputs)" : "");
      int all_same = bad == n; /* every rank fails together: none waits in the next call */
      MPI_Allreduce(MPI_IN_PLACE, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      ck_assert_msg(all_same, "%s%s: element %zu is %a, %a in the default environment (rank %d)", specs[s],
                    tiny ? " (subnormal inputs)" : "", bad, bad < n ? got[bad] : 0.0f, bad < n ? want[bad] : 0.0f,
                    rank);
    }
  free(g);
  free(want);
  free(got);
  free(res_want);
  free(res_got);
}
END_TEST

START_TEST(test_topk_ratio_one_equals_dense) {
  /* At ratio 1 sparsity cannot pay: the engine runs the plain sum of
   * g + residual, which here (fresh residual) is MPI_Allreduce's result. */
  use_config("SQUALL_COMPRESS=topk:1");
  squallMpiResetResiduals(MPI_COMM_WORLD);
  size_t n = 5000;
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  fill(g, n, 41, rank, gen_uniform);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  PMPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  ck_assert(memcmp(out, ref, n * 4) == 0);
  squallStats_t st;
  squallStatsGet(&st);
  ck_assert_uint_gt(st.compressedCalls, 0);
  free(g);
  free(out);
  free(ref);
}
END_TEST

/* ------------------------------------------------- conservation (exact) */
/* wire (may be NULL): this rank's bytes on the wire at each step */
/* Every rank's residual of the tensor last sent from send, added to the
 * outputs so far, is exactly the inputs so far (dyadic data); want_kept:
 * and something was kept back (top-k at 1%), so the residual did carry. */
static void assert_conserved_with(const char *what, const void *send, size_t n, const double *sum_in,
                                  const double *sum_out, int want_kept) {
  float *res = malloc(n * 4);
  double *mine = malloc(n * 8), *kept = malloc(n * 8), total = 0;
  ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, send, (int)n, MPI_FLOAT, res), MPI_SUCCESS);
  for (size_t i = 0; i < n; i++) mine[i] = res[i];
  MPI_Allreduce(mine, kept, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < n; i++) {
    MC_CHECK(sum_out[i] + kept[i] == sum_in[i], "%s: element %zu: sent %.17g + kept %.17g != %.17g", what, i,
             sum_out[i], kept[i], sum_in[i]);
    total += fabs(kept[i]);
  }
  if (want_kept) ck_assert_msg(total > 0, "%s: kept nothing back", what);
  free(res);
  free(mine);
  free(kept);
}

static void check_conservation_steps(const char *spec, size_t n, int steps, uint64_t *wire) {
  use_config(spec);
  float *g = malloc(n * 4), *out = malloc(n * 4);
  double *sum_out = calloc(n, 8), *sum_in = calloc(n, 8);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  for (int t = 0; t < steps; t++) {
    fill(g, n, 100 + (uint64_t)t, rank, gen_dyadic);
    for (size_t i = 0; i < n; i++)
      for (int r = 0; r < nranks; r++) sum_in[i] += gen_dyadic(100 + (uint64_t)t, r, i);
    squallStats_t before, after;
    squallStatsGet(&before);
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    squallStatsGet(&after);
    if (wire) wire[t] = after.bytesWire - before.bytesWire;
    for (size_t i = 0; i < n; i++) sum_out[i] += out[i];
  }
  assert_conserved_with(spec, g, n, sum_in, sum_out, strstr(spec, "topk") != NULL);
  free(g);
  free(out);
  free(sum_out);
  free(sum_in);
}

static void check_conservation(const char *spec) { check_conservation_steps(spec, 3001, 20, NULL); }

/* With the cost model on, top-k times its calls with the lossless stage
 * and without it (raw slots: (P-1) slots on the wire exactly) and runs
 * whichever was faster: both are tried within the first calls, every rank
 * takes the same one at every call, and error feedback stays exact across
 * the switches. The given slow link keeps calls from passing through. */
START_TEST(test_topk_lossless_or_raw) {
  if (nranks == 1) return; /* one rank sends nothing: both look the same */
  enum { STEPS = 12 };
  size_t n = 1 << 16;
  uint64_t raw[1], wire[STEPS];
  check_conservation_steps("SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=0", n, 1, raw);
  check_conservation_steps("SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=1 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=0.001",
                           n, STEPS, wire);
  int ran_raw = 0, ran_lossless = 0;
  for (int t = 0; t < STEPS; t++) {
    int is_raw = wire[t] == raw[0];
    assert_identical_across_ranks(&is_raw, sizeof is_raw);
    ran_raw += is_raw;
    ran_lossless += !is_raw;
    ck_assert_msg(is_raw || wire[t] < raw[0], "step %d: %llu bytes, more than raw %llu", t,
                  (unsigned long long)wire[t], (unsigned long long)raw[0]);
  }
  ck_assert_msg(ran_raw > 0 && ran_lossless > 0, "raw %d, lossless %d of %d calls", ran_raw, ran_lossless, STEPS);
}
END_TEST

/* A call the cost model declines (a link so fast that compressing never
 * pays; the first calls compress all the same, to time the codec) runs
 * plain with the tensor's residual folded into its contribution: the
 * residual is empty after every declined call that had a header, mass is
 * conserved exactly, and nothing waits for the next compressed call. In
 * place and not. */
START_TEST(test_declined_calls_carry_the_residual) {
  if (nranks == 1) return;
  size_t n = 1 << 14;
  for (int in_place = 0; in_place < 2; in_place++) {
    use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000");
    squallMpiCommFree(MPI_COMM_WORLD); /* a fresh engine, which compresses its first calls */
    float *g = malloc(n * 4), *out = malloc(n * 4), *res = malloc(n * 4);
    double *sum_out = calloc(n, 8), *sum_in = calloc(n, 8);
    int compressed = 0, folds = 0, unsent = 0;
    for (int t = 0; t < 40; t++) {
      fill(g, n, 500 + (uint64_t)t, rank, gen_dyadic);
      for (size_t i = 0; i < n; i++)
        for (int r = 0; r < nranks; r++) sum_in[i] += gen_dyadic(500 + (uint64_t)t, r, i);
      if (in_place) memcpy(out, g, n * 4);
      squallStats_t a, b;
      squallStatsGet(&a);
      ck_assert_int_eq(squallMpiAllreduce(in_place ? MPI_IN_PLACE : g, out, (int)n, MPI_FLOAT, MPI_SUM,
                                          MPI_COMM_WORLD),
                       MPI_SUCCESS);
      squallStatsGet(&b);
      for (size_t i = 0; i < n; i++) sum_out[i] += out[i];
      int comp = b.compressedCalls > a.compressedCalls;
      int headed_decline = b.passthrough[squallPassNotPaying] > a.passthrough[squallPassNotPaying] &&
                           b.headers > a.headers;
      compressed += comp;
      if (comp) unsent = 1;
      if (headed_decline) {
        ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, in_place ? out : g, (int)n, MPI_FLOAT, res),
                         MPI_SUCCESS);
        for (size_t i = 0; i < n; i++)
          MC_CHECK(res[i] == 0.0f, "step %d: a declined call left residual[%zu] = %g", t, i, res[i]);
        folds += unsent;
        unsent = 0;
      }
    }
    ck_assert_msg(compressed > 0 && folds > 0, "in place %d: %d compressed calls, %d declined after them",
                  in_place, compressed, folds);
    assert_conserved_with(in_place ? "declined, in place" : "declined", in_place ? out : g, n, sum_in, sum_out, 0);
    free(g);
    free(out);
    free(res);
    free(sum_out);
    free(sum_in);
  }
}
END_TEST

START_TEST(test_conservation_topk) { check_conservation("SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=1"); }
END_TEST
START_TEST(test_conservation_topk_fp16_values) {
  check_conservation("SQUALL_COMPRESS=topk:0.02 SQUALL_TOPK_VALUES=fp16 SQUALL_ZSTD=0");
}
END_TEST
START_TEST(test_conservation_fp16) { check_conservation("SQUALL_COMPRESS=fp16"); }
END_TEST
START_TEST(test_conservation_bf16) { check_conservation("SQUALL_COMPRESS=bf16"); }
END_TEST

/* ------------------------------------------------------------ edge cases */
START_TEST(test_small_and_odd_counts) {
  size_t counts[] = {0, 1, (size_t)nranks - 1, (size_t)nranks, 7, 1023};
  const char *specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=bf16", "SQUALL_COMPRESS=topk:0.3"};
  for (size_t s = 0; s < 3; s++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      size_t n = counts[c];
      use_config(specs[s]);
      float *g = malloc(n * 4 + 4), *out = malloc(n * 4 + 4);
      fill(g, n, 51, rank, gen_dyadic);
      ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
      for (size_t i = 0; i < n; i++) MC_CHECK(isfinite(out[i]), "element %zu is not finite", i);
      assert_identical_across_ranks(out, n * 4);
      free(g);
      free(out);
    }
}
END_TEST

START_TEST(test_topk_in_place) {
  use_config("SQUALL_COMPRESS=topk:0.05 SQUALL_ZSTD=1");
  size_t n = 20000;
  float *g = malloc(n * 4), *x = malloc(n * 4), *ref = malloc(n * 4);
  fill(g, n, 31, rank, gen_uniform);
  memcpy(x, g, n * 4);
  ck_assert_int_eq(squallMpiAllreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  topk_reference(31, n, squall__topk_k(n, 0.05), ref);
  ck_assert(memcmp(x, ref, n * 4) == 0);
  free(g);
  free(x);
  free(ref);
}
END_TEST

/* Engine-level: average, pre-multiplied sums and 16-bit data, which MPI's
 * entry point cannot express. */
START_TEST(test_engine_average_and_halves) {
  squall_mpi_ctx ctx;
  squall_transport tr;
  ck_assert_int_eq(squall__transport_mpi_init(&tr, &ctx, MPI_COMM_WORLD), squallSuccess);
  squall_engine *e = squall__engine_create(&tr, &squall__kernels_host);
  ck_assert_ptr_nonnull(e);
  size_t n = 2048;
  float *g = malloc(n * 4), *out = malloc(n * 4);
  fill(g, n, 61, rank, gen_dyadic);
  const char *specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=topk:1", "SQUALL_COMPRESS=bf16"};
  for (int s = 0; s < 3; s++) {
    use_config(specs[s]);
    squall_call c = {.send = g, .recv = out, .count = n, .dtype = SQ_DT_F32, .elsize = 4, .op = SQ_OP_AVG, .premul = 1.0f};
    squall_decision d;
    ck_assert_int_eq(squall__engine_allreduce(e, &c, &d), squallSuccess);
    ck_assert_int_ne(d.route, SQ_ROUTE_PASS);
    for (size_t i = 0; i < n; i++) {
      double exact = 0;
      for (int r = 0; r < nranks; r++) exact += gen_dyadic(61, r, i);
      MC_CHECK(fabs(out[i] - exact / nranks) <= 1e-2 * (fabs(exact / nranks) + 1), "%s avg element %zu", specs[s], i);
    }
  }
  /* fp16 data, pre-multiplied by 0.5 (dyadic: exact), summed in fp16 */
  uint16_t *h = malloc(n * 2), *ho = malloc(n * 2);
  for (size_t i = 0; i < n; i++) h[i] = sq_f32_to_f16(gen_dyadic(62, rank, i));
  use_config("SQUALL_COMPRESS=fp16");
  squall_call c = {.send = h, .recv = ho, .count = n, .dtype = SQ_DT_F16, .elsize = 2, .op = SQ_OP_SUM, .premul = 0.5f};
  squall_decision d;
  ck_assert_int_eq(squall__engine_allreduce(e, &c, &d), squallSuccess);
  ck_assert_int_ne(d.route, SQ_ROUTE_PASS);
  for (size_t i = 0; i < n; i++) {
    double exact = 0;
    for (int r = 0; r < nranks; r++) exact += 0.5 * gen_dyadic(62, r, i);
    MC_CHECK(sq_f16_to_f32(ho[i]) == (float)exact, "f16 premul element %zu: %g vs %g", i, sq_f16_to_f32(ho[i]), exact);
  }
  squall__engine_free(e);
  squall__transport_mpi_fini(&ctx);
  free(g);
  free(out);
  free(h);
  free(ho);
}
END_TEST

/* An engine over MPI_COMM_WORLD with kernel set k (which must outlive it):
 * for tests below the MPI entry point, or that change what the engine sees
 * of its kernels. */
typedef struct {
  squall_mpi_ctx ctx;
  squall_transport tr;
  squall_engine *e;
} test_engine;
static void engine_with(test_engine *t, const squall_kernels *k) {
  ck_assert_int_eq(squall__transport_mpi_init(&t->tr, &t->ctx, MPI_COMM_WORLD), squallSuccess);
  ck_assert_ptr_nonnull(t->e = squall__engine_create(&t->tr, k));
}
static void engine_done(test_engine *t) {
  squall__engine_free(t->e);
  squall__transport_mpi_fini(&t->ctx);
}

/* Averages and pre-multiplied sums (NCCL's ncclAvg and PreMulSum, which
 * MPI's entry point cannot express) give the default environment's bits
 * too when one rank rounds upward with flush-to-zero and
 * denormals-are-zero: the division by the rank count (inexact on 3 ranks)
 * and the multiplier (0.3, inexact everywhere) round to nearest. */
START_TEST(test_average_and_premul_ignore_a_ranks_fp_environment) {
  test_engine te;
  engine_with(&te, &squall__kernels_host);
  squall_engine *e = te.e;
  size_t n = 4099;
  float *g = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
  fill(g, n, 63, rank, gen_uniform);
  const char *specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=bf16", "SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=0",
                         "SQUALL_COMPRESS=int8"};
  for (size_t s = 0; s < sizeof specs / sizeof *specs; s++)
    for (int avg = 0; avg < 2; avg++) {
      use_config(specs[s]);
      /* clang-format off */
      squall_call c = {.send = g, .recv = want, .count = n, .dtype = SQ_DT_F32, .elsize = 4,
                       .op = avg ? SQ_OP_AVG : SQ_OP_SUM, .premul = avg ? 1.0f : 0.3f};
      /* clang-format on */
      squall_decision d;
      ck_assert_int_eq(squall__engine_reset_residuals(e), squallSuccess);
      ck_assert_int_eq(squall__engine_allreduce(e, &c, &d), squallSuccess);
      ck_assert_int_ne(d.route, SQ_ROUTE_PASS);
      ck_assert_int_eq(squall__engine_reset_residuals(e), squallSuccess);
      c.recv = got;
      if (rank == 0) odd_fp_env(1);
      squallResult_t r = squall__engine_allreduce(e, &c, &d);
      if (rank == 0) odd_fp_env(0);
      ck_assert_int_eq(r, squallSuccess);
      size_t bad = 0;
      while (bad < n && memcmp(&got[bad], &want[bad], 4) == 0) bad++;
      int all_same = bad == n; /* every rank fails together */
      MPI_Allreduce(MPI_IN_PLACE, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      ck_assert_msg(all_same, "%s %s: element %zu is %a, %a in the default environment (rank %d)", specs[s],
                    avg ? "average" : "premul 0.3", bad, bad < n ? got[bad] : 0.0f, bad < n ? want[bad] : 0.0f, rank);
    }
  engine_done(&te);
  free(g);
  free(want);
  free(got);
}
END_TEST

/* A kernel set whose top-k takes fewer elements than the call (the CUDA
 * set's int counts) sends the call to top-k's dense route on every rank,
 * decided before anything collective: the exact sum (dyadic data), where
 * the host set's limit takes top-k. */
START_TEST(test_topk_limit_of_kernel_set_goes_dense) {
  size_t n = 4096;
  float *g = malloc(n * 4), *out = malloc(n * 4);
  fill(g, n, 63, rank, gen_dyadic);
  use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=off");
  for (int limited = 0; limited < 2; limited++) {
    squall_kernels k = squall__kernels_host;
    if (limited) k.topk_max_elems = n - 1;
    test_engine t;
    engine_with(&t, &k);
    squall_engine *e = t.e;
    squall_call c = {.send = g, .recv = out, .count = n, .dtype = SQ_DT_F32, .elsize = 4, .op = SQ_OP_SUM, .premul = 1.0f};
    squall_decision d;
    ck_assert_int_eq(squall__engine_allreduce(e, &c, &d), squallSuccess);
    ck_assert_int_eq(d.route, limited ? SQ_ROUTE_DENSE : SQ_ROUTE_TOPK);
    if (limited)
      for (size_t i = 0; i < n; i++) {
        float exact = 0;
        for (int r = 0; r < nranks; r++) exact += gen_dyadic(63, r, i);
        MC_CHECK(out[i] == exact, "dense route element %zu: %g vs %g", i, out[i], exact);
      }
    engine_done(&t);
  }
  free(g);
  free(out);
}
END_TEST

/* A CUDA graph replays the addresses of its capture: scratch that grows
 * after a captured call must stay allocated (until the engine is freed),
 * where before any capture the old block is freed at once. The host set
 * with a device set's abilities runs as a device engine does (headers only where
 * needed, capture honoured); its free is counted. */
static int kept_frees, kept_allocs;
static size_t kept_sizes[64]; /* the size of each allocation, in order */
static void *counting_alloc(void *stream, size_t bytes) {
  if (kept_allocs < 64) kept_sizes[kept_allocs] = bytes;
  kept_allocs++;
  return squall__kernels_host.alloc(stream, bytes);
}
static void counting_free(void *stream, void *p) {
  kept_frees++;
  squall__kernels_host.free(stream, p);
}

/* Whether an allocation in [from, to) is twice one in [before, from). */
static int doubled(int before, int from, int to) {
  for (int i = from; i < to && i < 64; i++)
    for (int j = before; j < from; j++)
      if (kept_sizes[i] == 2 * kept_sizes[j]) return 1;
  return 0;
}

START_TEST(test_scratch_kept_for_captured_graphs) {
  size_t small = 4096, big = 65536, sizes[] = {small, small, big, big + 1024};
  float *g = malloc((big + 1024) * 4), *out = malloc((big + 1024) * 4);
  fill(g, big + 1024, 64, rank, gen_dyadic);
  use_config("SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=off");
  for (int captured = 0; captured < 2; captured++) {
    squall_kernels k = squall__kernels_host;
    k.name = "host-as-device"; /* the host set, with a device set's abilities */
    k.on_host = k.topk_in_rounds = k.twophase_alone = 0;
    k.alloc = counting_alloc;
    k.free = counting_free;
    kept_frees = kept_allocs = 0;
    test_engine t;
    engine_with(&t, &k);
    squall_engine *e = t.e;
    squall_decision d;
    int mark[5] = {0};
    /* the small call, then (captured or not) again, then the big one, then a little bigger */
    for (int step = 0; step < 4; step++) {
      /* clang-format off */
      squall_call c = {.send = g, .recv = out, .count = sizes[step], .dtype = SQ_DT_F32, .elsize = 4,
                       .op = SQ_OP_SUM, .premul = 1.0f, .capturing = step == 1 && captured};
      /* clang-format on */
      int frees = kept_frees;
      mark[step] = kept_allocs;
      ck_assert_int_eq(squall__engine_allreduce(e, &c, &d), squallSuccess);
      ck_assert_int_eq(d.route, SQ_ROUTE_TWOPHASE);
      if (step >= 2) /* the scratch grew: the old block freed only where no graph may use it */
        ck_assert_msg(captured ? kept_frees == frees : kept_frees > frees, "captured %d step %d: %d frees while the scratch grew",
                      captured, step, kept_frees - frees);
    }
    mark[4] = kept_allocs;
    /* kept blocks stay below the one in use: after a capture a small growth doubles the scratch */
    ck_assert_int_eq(doubled(mark[2], mark[3], mark[4]), captured);
    engine_done(&t);
    ck_assert_int_eq(kept_frees, kept_allocs); /* and nothing leaks */
  }
  free(g);
  free(out);
}
END_TEST

/* Calls on one communicator from different streams share its scratch: a
 * call on another stream than the last compressed call's waits for that
 * call's fence first; calls on the same stream, and captured calls, do
 * not; every compressed, uncaptured call records a fence on its stream.
 * The host set with a device set's abilities, with a fence that logs. */
static int fence_made;
static char fence_log[64]; /* 'r<stream>' recorded, 'w<stream>' waited */
static void log_fence(char what, void *stream) {
  size_t n = strlen(fence_log);
  if (n + 2 < sizeof fence_log) fence_log[n] = what, fence_log[n + 1] = (char)('0' + (int)(uintptr_t)stream);
}
static squallResult_t fake_fence_record(void **fence, void *stream) {
  if (*fence == NULL) *fence = &fence_made, fence_made++;
  log_fence('r', stream);
  return squallSuccess;
}
static squallResult_t fake_fence_wait(void *fence, void *stream) {
  ck_assert_ptr_eq(fence, &fence_made);
  log_fence('w', stream);
  return squallSuccess;
}
static void fake_fence_free(void *fence) {
  ck_assert_ptr_eq(fence, &fence_made);
  fence_made--;
}

START_TEST(test_stream_fence_orders_calls) {
  size_t n = 4096;
  float *g = malloc(n * 4), *out = malloc(n * 4);
  fill(g, n, 65, rank, gen_dyadic);
  use_config("SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=off");
  squall_kernels k = squall__kernels_host;
  k.name = "host-as-device"; /* the host set, with a device set's abilities */
  k.on_host = k.topk_in_rounds = k.twophase_alone = 0;
  k.fence_record = fake_fence_record;
  k.fence_wait = fake_fence_wait;
  k.fence_free = fake_fence_free;
  fence_made = 0;
  fence_log[0] = 0;
  test_engine t;
  engine_with(&t, &k);
  squall_engine *e = t.e;
  /* streams 1, 1, 2, then 1 captured, 2, and a sum of ints (passes through) on 1 */
  const int streams[] = {1, 1, 2, 1, 2, 1};
  for (int i = 0; i < 6; i++) {
    /* clang-format off */
    squall_call c = {.send = g, .recv = out, .count = n, .dtype = i == 5 ? -1 : SQ_DT_F32, .elsize = 4,
                     .op = SQ_OP_SUM, .premul = 1.0f, .stream = (void *)(uintptr_t)streams[i], .capturing = i == 3};
    /* clang-format on */
    squall_decision d;
    ck_assert_int_eq(squall__engine_allreduce(e, &c, &d), squallSuccess);
    ck_assert_int_eq(d.route, i == 5 ? SQ_ROUTE_PASS : SQ_ROUTE_TWOPHASE);
  }
  /* the pass-through waits too: the wait comes before the route is known */
  ck_assert_str_eq(fence_log, "r1r1w2r2r2w1");
  engine_done(&t);
  ck_assert_int_eq(fence_made, 0); /* freed with the engine */
  free(g);
  free(out);
}
END_TEST

/* A device engine (the host set with a device set's abilities: headers only where
 * needed, the cost model on its device schedule, costing_device.c) whose
 * ranks are all on one node passes its calls through as not paying while
 * a size class is unmeasured, from its first eligible call (past the
 * warm-up, which may find the nodes without a header of its own), but for
 * the measuring calls: every other call of the class takes the other side
 * until every rank has its figures (the class's call count decides:
 * P plain, C compressed, W warm-up below). With SQUALL_COST_MODEL=off it
 * compresses, and so does a lone rank (SQUALL_MIN_RANKS=1 is there to
 * prove the path); across nodes (nodes of one rank each; nodes of two
 * ranks run two levels on 4 ranks and flat on 3, uneven) the unmeasured
 * class compresses but for every other call, plain. The nodes are set with
 * SQUALL_RANKS_PER_NODE, whatever host the launcher put the ranks on. */
START_TEST(test_device_on_one_node_passes_through) {
  size_t n = 4096;
  float *g = malloc(n * 4), *out = malloc(n * 4), *res = malloc(n * 4);
  fill(g, n, 66, rank, gen_uniform);
  char all[32];
  snprintf(all, sizeof all, " SQUALL_RANKS_PER_NODE=%d", nranks);
  const char *two = " SQUALL_RANKS_PER_NODE=2";
  const struct {
    const char *spec, *nodes;
    int warmup;
    int route; /* on 2+ ranks: SQ_ROUTE_PASS where the rule applies */
  } cases[] = {
      {"SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on", all, 0, SQ_ROUTE_PASS},
      {"SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=on", all, 0, SQ_ROUTE_PASS},
      {"SQUALL_COMPRESS=int8 SQUALL_COST_MODEL=on SQUALL_HIERARCHY=flat", all, 0, SQ_ROUTE_PASS},
      {"SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on SQUALL_WARMUP=1", all, 1, SQ_ROUTE_PASS},
      {"SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on", "", 0, SQ_ROUTE_PASS}, /* the launcher's nodes: one host */
      {"SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=off", all, 0, SQ_ROUTE_TWOPHASE},
      {"SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on SQUALL_RANKS_PER_NODE=1", "", 0, SQ_ROUTE_TWOPHASE},
      {"SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on", two, 0, -1}, /* by rank count, below */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char spec[256];
    snprintf(spec, sizeof spec, "%s%s", cases[i].spec, cases[i].nodes);
    use_config(spec);
    squall_kernels k = squall__kernels_host;
    k.name = "host-as-device"; /* the host set, with a device set's abilities */
    k.on_host = k.topk_in_rounds = k.twophase_alone = 0;
    test_engine t;
    engine_with(&t, &k);
    int want = cases[i].route;
    if (want < 0) want = nranks == 4 ? SQ_ROUTE_TWOLEVEL : nranks == 2 ? SQ_ROUTE_PASS
                                                                       : SQ_ROUTE_TWOPHASE;
    if (nranks == 1) want = SQ_ROUTE_TWOPHASE; /* a lone rank compresses */
    if (!strcmp(cases[i].nodes, "") && strstr(spec, "RANKS_PER_NODE") == NULL) {
      /* the launcher's nodes: this test's premise is one host */
      char me[MPI_MAX_PROCESSOR_NAME], first[MPI_MAX_PROCESSOR_NAME];
      int len;
      MPI_Get_processor_name(me, &len);
      memcpy(first, me, sizeof me);
      MPI_Bcast(first, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
      int same = !strcmp(me, first);
      MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (!same) {
        engine_done(&t);
        continue;
      }
    }
    int calls = 3 + cases[i].warmup;
    /* the calls' paths: the first on one node finds the nodes and passes;
     * with nodes unknown (a warm-up before), compressing is the default */
    const char *paths = nranks == 1 || strstr(spec, "COST_MODEL=off") ? (cases[i].warmup ? "WCCC" : "CCC")
                        : want == SQ_ROUTE_PASS                       ? (cases[i].warmup ? "WPPC" : "PCP")
                                                                      : "CPC";
    int want_pass = 0, want_comp = 0;
    for (int call = 0; call < calls; call++) {
      /* clang-format off */
      squall_call c = {.send = g, .recv = out, .count = n, .dtype = SQ_DT_F32, .elsize = 4, .op = SQ_OP_SUM,
                       .premul = 1.0f};
      /* clang-format on */
      squall_decision d;
      ck_assert_int_eq(squall__engine_allreduce(t.e, &c, &d), squallSuccess);
      if (paths[call] == 'W') {
        ck_assert_msg(d.route == SQ_ROUTE_PASS && d.reason == squallPassWarmup, "%s, call %d: not a warm-up", spec,
                      call);
      } else if (paths[call] == 'P') {
        want_pass++;
        ck_assert_msg(d.route == SQ_ROUTE_PASS && d.reason == squallPassNotPaying, "%s, call %d: route %d, reason %s",
                      spec, call, (int)d.route, squallPassReasonName(d.reason));
      } else if (want == SQ_ROUTE_PASS) { /* a measuring call on one node: flat */
        want_comp++;
        ck_assert_msg(d.route != SQ_ROUTE_PASS && d.route != SQ_ROUTE_TWOLEVEL, "%s, call %d: route %d, reason %s",
                      spec, call, (int)d.route, squallPassReasonName(d.reason));
      } else {
        want_comp++;
        ck_assert_msg(d.route == (squall_route)want || (strstr(spec, "topk") && d.route == SQ_ROUTE_TOPK),
                      "%s, call %d: route %d, expected %d (%s)", spec, call, (int)d.route, want,
                      squallPassReasonName(d.reason));
      }
    }
    const squallStats_t *st = squall__engine_stats(t.e);
    ck_assert_uint_eq(st->passthrough[squallPassNotPaying], (unsigned)want_pass);
    ck_assert_uint_eq(st->compressedCalls, (unsigned)want_comp);
    engine_done(&t);
  }
  free(g);
  free(out);
  free(res);
}
END_TEST

START_TEST(test_config_mismatch_passes_through) {
  if (nranks < 2) return; /* one rank cannot disagree with itself */
  /* Ranks disagree: every rank must pass through (no hang, no mixed codecs). */
  use_config(rank == 0 ? "SQUALL_COMPRESS=topk:0.01" : "SQUALL_COMPRESS=fp16");
  size_t n = 4096;
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  fill(g, n, 71, rank, gen_uniform);
  squallStats_t before, after;
  squallStatsGet(&before);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  PMPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  ck_assert(memcmp(out, ref, n * 4) == 0);
  squallStatsGet(&after);
  ck_assert_uint_eq(after.passthrough[squallPassMismatch] - before.passthrough[squallPassMismatch], 1);
  /* A difference in SQUALL_MIN_BYTES alone also counts. */
  use_config(rank == 0 ? "SQUALL_COMPRESS=fp16 SQUALL_MIN_BYTES=1" : "SQUALL_COMPRESS=fp16");
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(memcmp(out, ref, n * 4) == 0);
  /* Agreement again: compression resumes. */
  use_config("SQUALL_COMPRESS=fp16");
  squallStatsGet(&before);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  squallStatsGet(&after);
  ck_assert_uint_eq(after.compressedCalls - before.compressedCalls, 1);
  free(g);
  free(out);
  free(ref);
}
END_TEST

START_TEST(test_warmup_goes_dense) {
  use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_WARMUP=2");
  size_t n = 10007; /* a count no other test uses: a fresh tensor */
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  fill(g, n, 81, rank, gen_uniform);
  PMPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int t = 0; t < 2; t++) {
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    ck_assert(memcmp(out, ref, n * 4) == 0);
  }
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(memcmp(out, ref, n * 4) != 0); /* third call is sparse */
  free(g);
  free(out);
  free(ref);
}
END_TEST

START_TEST(test_stats_topk_wire_bytes) {
  const int zstd[] = {0, 1};
  for (int z = 0; z < 2; z++) {
    char spec[96];
    snprintf(spec, sizeof spec, "SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=%d", zstd[z]);
    use_config(spec);
    size_t n = 1 << 18;
    float *g = malloc(n * 4), *out = malloc(n * 4);
    fill(g, n, 91, rank, gen_uniform);
    squallStatsReset();
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    squallStats_t st;
    squallStatsGet(&st);
    ck_assert_uint_eq(st.calls, 1);
    ck_assert_uint_eq(st.compressedCalls, 1);
    ck_assert_uint_eq(st.bytesIn, n * 4);
    ck_assert_msg(st.bytesWire * 10 <= st.bytesIn, "wire %llu vs in %llu", (unsigned long long)st.bytesWire,
                  (unsigned long long)st.bytesIn);
    ck_assert(nranks == 1 || st.bytesWire > 0); /* one rank sends nothing */
    free(g);
    free(out);
  }
}
END_TEST

START_TEST(test_ef_memory_cap) {
  use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_EF_MAX_BYTES=1K");
  size_t n = 4111; /* a count no other test uses: a fresh tensor, refused by the cap */
  float *g = malloc(n * 4), *out = malloc(n * 4), *res = malloc(n * 4);
  fill(g, n, 93, rank, gen_uniform);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert_int_ne(squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res), MPI_SUCCESS);
  free(g);
  free(out);
  free(res);
}
END_TEST

/* ------------------------------------- rank-consistent decisions */
/* One rank's SQUALL_MIN_RANKS says "pass through", the others' say
 * "compress": agreement comes before min_ranks is used, so every rank sees
 * the disagreement and passes through (this used to deadlock). */
START_TEST(test_min_ranks_differ_passes_through) {
  if (nranks < 2) return;
  squallConfig_t c;
  squallConfigDefault(&c);
  squallGetConfig(&c);
  squallConfig_t saved = c;
  ck_assert_int_eq(squallConfigParse(&c, "SQUALL_COMPRESS=topk:0.01 SQUALL_MIN_BYTES=0"), squallSuccess);
  c.minRanks = rank == 0 ? nranks + 1 : 1;
  ck_assert_int_eq(squallSetConfig(&c), squallSuccess);
  size_t n = 8192;
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  fill(g, n, 72, rank, gen_uniform);
  for (int t = 0; t < 3; t++) {
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    PMPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    ck_assert(memcmp(out, ref, n * 4) == 0);
  }
  ck_assert_int_eq(squallSetConfig(&saved), squallSuccess);
  free(g);
  free(out);
  free(ref);
}
END_TEST

/* Warm-up counts calls per shape, not per buffer: rank 0 reuses one
 * buffer, the others hand a new one each call, and every rank still takes
 * the same route on every call (this used to hang for top-k and fail with
 * MPI_ERR_TRUNCATE for fp16). */
static void check_warmup_buffers(const char *spec, size_t n) {
  use_config(spec);
  float *keep[6] = {0}, *out = malloc(n * 4), *ref = malloc(n * 4);
  float *fixed = malloc(n * 4);
  squallStats_t before, after;
  for (int t = 0; t < 6; t++) {
    float *g = fixed;
    if (rank != 0) g = keep[t] = malloc(n * 4); /* all alive: six distinct addresses */
    fill(g, n, 300 + (uint64_t)t, rank, gen_dyadic);
    squallStatsGet(&before);
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    squallStatsGet(&after);
    int warm = after.passthrough[squallPassWarmup] > before.passthrough[squallPassWarmup];
    ck_assert_msg(warm == (t < 2), "%s: call %d: warm-up %d", spec, t, warm);
    assert_identical_across_ranks(out, n * 4);
    if (warm) {
      PMPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      ck_assert(memcmp(out, ref, n * 4) == 0);
    }
  }
  for (int t = 0; t < 6; t++) free(keep[t]);
  free(fixed);
  free(out);
  free(ref);
}

START_TEST(test_warmup_same_on_every_rank) {
  check_warmup_buffers("SQUALL_COMPRESS=topk:0.01 SQUALL_WARMUP=2", 10009);
  check_warmup_buffers("SQUALL_COMPRESS=fp16 SQUALL_WARMUP=2", 10037);
}
END_TEST

/* An intercommunicator's all-reduce sums the other group's data: every
 * rank passes it through alike (fp16 used to abort, top-k to hang). */
START_TEST(test_intercomm_passes_through) {
  if (nranks < 2) return;
  MPI_Comm half, inter;
  int color = rank % 2;
  MPI_Comm_split(MPI_COMM_WORLD, color, rank, &half);
  MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, color ? 0 : 1, 77, &inter);
  size_t n = 6000;
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  fill(g, n, 74, rank, gen_uniform);
  const char *specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=topk:0.01", "SQUALL_COMPRESS=bf16"};
  for (int s = 0; s < 3; s++) {
    use_config(specs[s]);
    squallStats_t before, after;
    squallStatsGet(&before);
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, inter), MPI_SUCCESS);
    squallStatsGet(&after);
    ck_assert_uint_eq(after.passthrough[squallPassIntercomm] - before.passthrough[squallPassIntercomm], 1);
    PMPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, inter);
    ck_assert_msg(memcmp(out, ref, n * 4) == 0, "%s on an intercommunicator", specs[s]);
  }
  squallMpiCommFree(inter);
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
  free(g);
  free(out);
  free(ref);
}
END_TEST

/* squallSetConfig from another thread while calls run, at different
 * points on each rank: each call uses one snapshot, and the header, which
 * every call here exchanges (every configuration the thread sets would
 * compress it), makes ranks whose snapshots differ pass through together.
 * Every call succeeds and every rank holds the same bits (used to hang or
 * abort). Such a thread breaks squallSetConfig's collective rule
 * (squall(7)): where a configuration would pass the call through without
 * a header (compression off, a size class the cost model settled), ranks
 * could meet with different collectives, which is why the thread never
 * sets one; test_set_config_collective covers those. */
static void check_set_config_from_another_thread(const char *spec) {
  static const char *const specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=topk:0.01", "SQUALL_COMPRESS=int8",
                                      "SQUALL_COMPRESS=bf16", "SQUALL_COMPRESS=topk:0.05 SQUALL_ZSTD=0"};
  use_config(spec);
  size_t n = 3000;
  float *g = malloc(n * 4), *out = malloc(n * 4);
  fill(g, n, 75, rank, gen_dyadic);
  mc_flipper flip = {.specs = specs, .nspecs = 5, .offset = (unsigned)rank, .pause_ns = 50000};
  mc_flip_start(&flip);
  for (int t = 0; t < 300; t++) {
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    assert_identical_across_ranks(out, n * 4);
  }
  mc_flip_stop(&flip);
  free(g);
  free(out);
}

START_TEST(test_set_config_from_another_thread) {
  check_set_config_from_another_thread("SQUALL_COMPRESS=fp16");
  check_set_config_from_another_thread("SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on");
}
END_TEST

/* squallSetConfig called collectively (every rank between the same two
 * calls) takes effect at the next call where the configuration before it
 * passed through without a header for itself (compression off, below the
 * size threshold), and at the class's next recheck where the cost model
 * had settled the class (only past headers decide that, the same on every
 * rank: within SQ_COST_RECHECK << SQ_COST_RECHECK_SHIFTS calls; until
 * then plain's bits, and from then on compressed). Calls the agreed
 * configuration passes through exchange no header at all, and give
 * plain's bits. */
START_TEST(test_set_config_collective) {
  const char *specs[] = {"SQUALL_COMPRESS=none", "SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=topk:0.01 SQUALL_MIN_BYTES=1M",
                         "SQUALL_COMPRESS=topk:0.01", "SQUALL_COMPRESS=int8 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000",
                         "SQUALL_COMPRESS=none", "SQUALL_COMPRESS=bf16"};
  const int compresses[] = {0, 1, 0, 1, 0, 0, 1};
  const int after_settled = 6; /* 4 settled the class, and 5 passed through as settled */
  size_t n = 3001;
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  fill(g, n, 77, rank, gen_uniform);
  MPI_Comm comm; /* an engine of its own: no size class settled by an earlier test */
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  PMPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, comm);
  for (int round = 0; round < 2; round++)
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
      use_config(specs[s]);
      int calls = (int)s == after_settled ? (SQ_COST_RECHECK << SQ_COST_RECHECK_SHIFTS) + 4 : 40, first = -1;
      for (int t = 0; t < calls; t++) {
        squallStats_t before, after;
        squallStatsGet(&before);
        ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
        squallStatsGet(&after);
        assert_identical_across_ranks(out, n * 4);
        uint64_t comp = after.compressedCalls - before.compressedCalls, heads = after.headers - before.headers;
        if ((int)s == after_settled && first < 0 && comp == 0) /* not yet rechecked: plain */
          ck_assert_msg(memcmp(out, ref, n * 4) == 0, "%s: call %d is not plain's", specs[s], t);
        else if (compresses[s])
          ck_assert_msg(comp == 1, "%s: call %d passed through", specs[s], t);
        else if (t >= 1 && s != 4) /* the first may carry what the last compressed call left */
          ck_assert_msg(comp == 0 && memcmp(out, ref, n * 4) == 0, "%s: call %d is not plain's", specs[s], t);
        if (comp && first < 0) first = t;
        if (!compresses[s] && t > 0 && s != 4 && s != 5) /* 5: the class 4 settled heads at its rechecks */
          ck_assert_msg(heads == 0, "%s: call %d exchanged a header", specs[s], t);
      }
      if ((int)s == after_settled)
        ck_assert_msg(first >= 0 && first < (SQ_COST_RECHECK << SQ_COST_RECHECK_SHIFTS),
                      "%s after a settled class: first compressed call %d", specs[s], first);
    }
  squallMpiCommFree(comm);
  MPI_Comm_free(&comm);
  free(g);
  free(out);
  free(ref);
}
END_TEST

/* ---------------------------------------------------- residual identity */

/* A loop that hands a new buffer every step (as mpi4py/NumPy code does)
 * keeps one residual: memory stays flat, error feedback carries over, and
 * conservation is exact with the last buffer's residual. All buffers stay
 * alive here, so no address ever comes back. */
START_TEST(test_fresh_buffer_each_step_keeps_one_residual) {
  use_config("SQUALL_COMPRESS=topk:0.01");
  squallMpiResetResiduals(MPI_COMM_WORLD);
  size_t n = 12007; /* a shape no other test uses */
  enum { STEPS = 40 };
  double *sum_in = calloc(n, 8), *sum_out = calloc(n, 8);
  float *out = malloc(n * 4), *bufs[STEPS];
  size_t bytes_after_first = 0;
  for (int t = 0; t < STEPS; t++) {
    float *g = bufs[t] = malloc(n * 4);
    fill(g, n, 400 + (uint64_t)t, rank, gen_dyadic);
    for (size_t i = 0; i < n; i++)
      for (int r = 0; r < nranks; r++) sum_in[i] += gen_dyadic(400 + (uint64_t)t, r, i);
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    for (size_t i = 0; i < n; i++) sum_out[i] += out[i];
    if (t == 0) bytes_after_first = squall__residuals_process_bytes();
    ck_assert_msg(squall__residuals_process_bytes() == bytes_after_first,
                  "step %d: residual bytes grew from %zu to %zu", t, bytes_after_first,
                  squall__residuals_process_bytes());
  }
  /* top-k at 1% keeps most of it back: the residual carried */
  assert_conserved_with("rotating outputs", bufs[STEPS - 1], n, sum_in, sum_out, 1);
  for (int t = 0; t < STEPS; t++) free(bufs[t]);
  free(sum_in);
  free(sum_out);
  free(out);
}
END_TEST

/* The same loop freeing each buffer: the allocator hands addresses back
 * in whatever order it likes, which can look like a few tensors at stable
 * addresses; memory stays bounded all the same. */
START_TEST(test_fresh_buffer_each_step_bounded_memory) {
  use_config("SQUALL_COMPRESS=topk:0.01");
  size_t n = 12013;
  float *out = malloc(n * 4);
  size_t at_10 = 0;
  for (int t = 0; t < 200; t++) {
    float *g = malloc(n * 4);
    fill(g, n, 700 + (uint64_t)t, rank, gen_dyadic);
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    if (t == 10) at_10 = squall__residuals_process_bytes();
    free(g);
  }
  ck_assert_msg(squall__residuals_process_bytes() == at_10, "residual bytes grew from %zu to %zu", at_10,
                squall__residuals_process_bytes());
  free(out);
}
END_TEST

/* Two tensors of one shape at stable addresses keep one residual each. */
START_TEST(test_same_shape_stable_tensors_keep_their_own_residuals) {
  use_config("SQUALL_COMPRESS=topk:0.01");
  size_t n = 12011;
  float *a = malloc(n * 4), *b = malloc(n * 4), *out = malloc(n * 4), *ra = malloc(n * 4), *rb = malloc(n * 4);
  size_t before = squall__residuals_process_bytes();
  for (int t = 0; t < 5; t++) {
    fill(a, n, 500 + (uint64_t)t, rank, gen_uniform);
    fill(b, n, 600 + (uint64_t)t, rank, gen_uniform);
    ck_assert_int_eq(squallMpiAllreduce(a, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    ck_assert_int_eq(squallMpiAllreduce(b, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  }
  ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, a, (int)n, MPI_FLOAT, ra), MPI_SUCCESS);
  ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, b, (int)n, MPI_FLOAT, rb), MPI_SUCCESS);
  ck_assert(memcmp(ra, rb, n * 4) != 0);
  ck_assert_uint_eq(squall__residuals_process_bytes() - before, 2 * n * sizeof(float));
  free(a);
  free(b);
  free(out);
  free(ra);
  free(rb);
}
END_TEST

/* Where failures return (MPI_ERRORS_RETURN, as mpi4py sets), host top-k
 * writes each next residual into its shape's spare and swaps it in,
 * instead of updating in place as where failures are fatal: the same
 * results and residuals bit for bit, over calls of two tensors, one
 * exchange and in rounds (3 rounds), both on the sampled path, and one
 * spare for the shape beside the two residuals. Where SQUALL_EF_MAX_BYTES
 * has room for the residuals but not the spare, the selection pass copies
 * the residual into the backup instead: the same bits again, no spare. */
START_TEST(test_topk_spare_matches_in_place) {
  static const struct {
    const char *spec;
    size_t n;
    int capped;
  } cases[] = {
      {"SQUALL_COMPRESS=topk:0.01", 70001, 0},
      {"SQUALL_COMPRESS=topk:0.1 SQUALL_CHUNK_BYTES=1", 140002, 0},
      {"SQUALL_COMPRESS=topk:0.01", 70003, 1},
  };
  for (size_t cs = 0; cs < sizeof cases / sizeof cases[0]; cs++) {
    size_t n = cases[cs].n; /* sizes no other test uses; the sampled path */
    size_t before = squall__residuals_process_bytes();
    char spec[160];
    if (cases[cs].capped) /* room for the four residuals of this test, not for a spare */
      snprintf(spec, sizeof spec, "%s SQUALL_EF_MAX_BYTES=%zu", cases[cs].spec, before + 4 * n * sizeof(float));
    else
      snprintf(spec, sizeof spec, "%s", cases[cs].spec);
    use_config(spec);
    MPI_Comm fatal, returning;
    MPI_Comm_dup(MPI_COMM_WORLD, &fatal);
    MPI_Comm_dup(MPI_COMM_WORLD, &returning);
    MPI_Comm_set_errhandler(returning, MPI_ERRORS_RETURN);
    float *a = malloc(n * 4), *b = malloc(n * 4), *o1 = malloc(n * 4), *o2 = malloc(n * 4), *r1 = malloc(n * 4),
          *r2 = malloc(n * 4);
    for (int t = 0; t < 4; t++) {
      fill(a, n, 700 + (uint64_t)t, rank, gen_uniform);
      fill(b, n, 800 + (uint64_t)t, rank, gen_uniform);
      for (int j = 0; j < 2; j++) {
        const float *x = j ? b : a;
        ck_assert_int_eq(squallMpiAllreduce(x, o1, (int)n, MPI_FLOAT, MPI_SUM, fatal), MPI_SUCCESS);
        ck_assert_int_eq(squallMpiAllreduce(x, o2, (int)n, MPI_FLOAT, MPI_SUM, returning), MPI_SUCCESS);
        ck_assert_msg(memcmp(o1, o2, n * 4) == 0, "%s: step %d tensor %d: results differ", spec, t, j);
      }
    }
    for (int j = 0; j < 2; j++) {
      const float *x = j ? b : a;
      ck_assert_int_eq(squall__mpi_get_residual(fatal, x, (int)n, MPI_FLOAT, r1), MPI_SUCCESS);
      ck_assert_int_eq(squall__mpi_get_residual(returning, x, (int)n, MPI_FLOAT, r2), MPI_SUCCESS);
      ck_assert_msg(memcmp(r1, r2, n * 4) == 0, "%s: tensor %d: residuals differ", spec, j);
    }
    /* two residuals on each communicator, and the returning one's spare */
    size_t spares = cases[cs].capped ? 0 : 1;
    if (nranks > 1)
      ck_assert_uint_eq(squall__residuals_process_bytes() - before, (4 + spares) * n * sizeof(float));
    MPI_Comm_free(&fatal);
    MPI_Comm_free(&returning);
    free(a);
    free(b);
    free(o1);
    free(o2);
    free(r1);
    free(r2);
  }
  use_config("SQUALL_COMPRESS=topk:0.01");
}
END_TEST

/* Tensors of one shape sent from one buffer (a staging copy, or NumPy
 * temporaries the allocator puts at one address, Allreduce(g * 1.0, out))
 * keep their own residuals when each has its own output: an all-zero
 * tensor's result stays exactly zero beside a busy one (sharing the send
 * address's residual, it received the other's unsent mass), and the busy
 * one's residual conserves its own inputs exactly. */
START_TEST(test_one_send_buffer_distinct_outputs_keep_their_own_residuals) {
  use_config("SQUALL_COMPRESS=topk:0.01");
  size_t n = 12017; /* a shape no other test uses */
  float *stage = malloc(n * 4), *out_zero = malloc(n * 4), *out_busy = malloc(n * 4);
  double *sum_in = calloc(n, 8), *sum_out = calloc(n, 8);
  for (int t = 0; t < 6; t++) {
    memset(stage, 0, n * 4);
    ck_assert_int_eq(squallMpiAllreduce(stage, out_zero, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    for (size_t i = 0; i < n; i++)
      MC_CHECK(out_zero[i] == 0.0f, "step %d: the all-zero tensor's element %zu is %g", t, i, out_zero[i]);
    fill(stage, n, 800 + (uint64_t)t, rank, gen_dyadic);
    for (size_t i = 0; i < n; i++)
      for (int r = 0; r < nranks; r++) sum_in[i] += gen_dyadic(800 + (uint64_t)t, r, i);
    ck_assert_int_eq(squallMpiAllreduce(stage, out_busy, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    for (size_t i = 0; i < n; i++) sum_out[i] += out_busy[i];
  }
  /* the residual of the tensor last sent from stage: the busy one's */
  assert_conserved_with("staging buffer", stage, n, sum_in, sum_out, 1);
  free(stage);
  free(out_zero);
  free(out_busy);
  free(sum_in);
  free(sum_out);
}
END_TEST

/* One TCase per feature: CK_RUN_CASE=<name> runs just that one. */
int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "engine", .rank = &rank, .nranks = &nranks,
      .cases = MC_CASES(
          {"passthrough", 120, MC_TESTS(test_passthrough_bit_exact)},
          {"half", 120, MC_TESTS(test_fp16_error_bound, test_fp16_tiny_values_are_scaled,
                                 test_fp16_near_max_no_overflow, test_fp16_huge_values, test_bf16_error_bound,
                                 test_bf16_huge_values)},
          {"topk", 120, MC_TESTS(test_topk_matches_reference, test_topk_ratio_one_equals_dense,
                                 test_codecs_ignore_a_ranks_fp_environment, test_topk_in_place)},
          {"conservation", 120, MC_TESTS(test_conservation_topk, test_conservation_topk_fp16_values,
                                         test_conservation_fp16, test_conservation_bf16, test_topk_lossless_or_raw,
                                         test_declined_calls_carry_the_residual)},
          {"edge", 120, MC_TESTS(test_small_and_odd_counts, test_engine_average_and_halves,
                                 test_average_and_premul_ignore_a_ranks_fp_environment,
                                 test_topk_limit_of_kernel_set_goes_dense, test_scratch_kept_for_captured_graphs,
                                 test_stream_fence_orders_calls)},
          {"agreement", 120, MC_TESTS(test_config_mismatch_passes_through, test_device_on_one_node_passes_through,
                                      test_min_ranks_differ_passes_through, test_intercomm_passes_through)},
          {"set_config", 120, MC_TESTS(test_set_config_from_another_thread, test_set_config_collective)},
          {"warmup", 120, MC_TESTS(test_warmup_goes_dense, test_warmup_same_on_every_rank)},
          {"stats", 120, MC_TESTS(test_stats_topk_wire_bytes)},
          {"residuals", 120, MC_TESTS(test_ef_memory_cap, test_fresh_buffer_each_step_keeps_one_residual,
                                      test_fresh_buffer_each_step_bounded_memory,
                                      test_one_send_buffer_distinct_outputs_keep_their_own_residuals,
                                      test_same_shape_stable_tensors_keep_their_own_residuals,
                                      test_topk_spare_matches_in_place)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

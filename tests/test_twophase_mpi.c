/*
 * test_twophase_mpi.c - the two-phase compressed all-reduce (int8, int4,
 * fp8; fp16 and bf16 with SQUALL_HALF_ACCUM=fp32) end to end over MPI
 * ranks (tests/twophase-N.sh): every rank holds the same bits; error
 * feedback conserves every input exactly over 20 steps (outputs plus all
 * ranks' residuals equal the inputs' sum); one step meets the codec's
 * error bound; non-finite inputs come out non-finite; fp16 summed in fp32
 * is never worse than summed in 16 bits (rel_err printed for both).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"
#include "squall.h"
#include "squall_mpi.h"

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

static void use_config(const char *spec) {
  squallConfig_t c, env;
  squallConfigDefault(&c);
  squallGetConfig(&env);
  c.costModel = env.costModel; /* run-mpi.sh: off, so that every eligible call is compressed */
  c.debug = env.debug;
  memcpy(c.statsPath, env.statsPath, sizeof c.statsPath);
  ck_assert_int_eq(squallConfigParse(&c, "SQUALL_MIN_BYTES=0"), squallSuccess);
  ck_assert_msg(squallConfigParse(&c, spec) == squallSuccess, "bad spec %s: %s", spec, squallGetLastError());
  ck_assert_int_eq(squallSetConfig(&c), squallSuccess);
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
    "SQUALL_COMPRESS=int8 SQUALL_BUCKET=64", "SQUALL_COMPRESS=fp8 SQUALL_BUCKET=1024"};
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
  use_config(spec);
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
  ck_assert_int_eq(squallMpiGetResidual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res), MPI_SUCCESS);
  for (size_t i = 0; i < n; i++) mine[i] = res[i];
  MPI_Allreduce(mine, tot_res, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  int lossy = 0;
  for (size_t i = 0; i < n; i++) {
    ck_assert_msg(sum_out[i] + tot_res[i] == sum_in[i], "%s n=%zu elem %zu: outputs %.17g + residuals %.17g != inputs %.17g",
                  spec, n, i, sum_out[i], tot_res[i], sum_in[i]);
    lossy |= tot_res[i] != 0;
  }
  /* the codecs do round these inputs: the residuals are not all zero */
  if (n > 100) ck_assert_msg(lossy, "%s: no residual at all is implausible", spec);
  free(g); free(out); free(res); free(sum_out); free(sum_in); free(tot_res); free(mine);
}

START_TEST(test_conservation) {
  for (size_t c = 0; c < NCODECS; c++)
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) check_conservation(codecs[c], counts[k]);
}
END_TEST

/* ------------------------------------------------------- error bound */

/* One step from zero residuals, uniform inputs with max M per rank: the
 * first encode errs by at most half a step per rank (int8: M/127, int4:
 * M/7, fp8: M/16 relative to each bucket's max), the second by the same on
 * sums up to P*M: |out - exact| <= 2 P M q (1 + q). */
static double check_bound(const char *spec, double q, float amp, double *rel) {
  size_t n = 30011;
  use_config(spec);
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
  for (size_t i = 0; i < n; i++) ck_assert(avg[i] == out[i]); /* same residuals, same bits */
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
    use_config(specs[s]);
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
    for (size_t i = 0; i < n; i++) ck_assert(isfinite(out[i]));
    free(g);
    free(out);
  }
}
END_TEST

/* In place (send == recv) gives the bits of out of place. */
START_TEST(test_in_place) {
  size_t n = 4099;
  use_config("SQUALL_COMPRESS=int8 SQUALL_EF=0");
  float *g = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen_uniform(9, rank, i);
  memcpy(b, g, n * 4);
  ck_assert_int_eq(squallMpiAllreduce(g, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert_int_eq(squallMpiAllreduce(MPI_IN_PLACE, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(memcmp(a, b, n * 4) == 0);
  free(g); free(a); free(b);
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
    use_config(specs[s][rank == 0 ? 0 : 1]);
    squallStats_t before, after;
    squallStatsGet(&before);
    ck_assert_int_eq(squallMpiAllreduce(g, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    squallStatsGet(&after);
    PMPI_Allreduce(g, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    ck_assert_msg(memcmp(a, b, n * 4) == 0, "%s: not the plain all-reduce", specs[s][1]);
    ck_assert(after.passthrough[squallPassMismatch] == before.passthrough[squallPassMismatch] + 1);
  }
  free(g); free(a); free(b);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("twophase");
  TCase *tc = tcase_create("engine");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_conservation);
  tcase_add_test(tc, test_error_bounds);
  tcase_add_test(tc, test_half_accumulation);
  tcase_add_test(tc, test_nonfinite_propagates);
  tcase_add_test(tc, test_in_place);
  tcase_add_test(tc, test_disagreement_passes_through);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int failed = mpi_check_run(suite());
  MPI_Finalize();
  return failed ? 1 : 0;
}

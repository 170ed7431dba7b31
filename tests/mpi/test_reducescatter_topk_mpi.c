/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_reducescatter_topk_mpi.c - top-k's reduce-scatter through
 * squallMpiReduceScatterBlock (tests/mpi/runs.list: 2, 3 and 4 ranks),
 * against a model written here from the rule alone: each rank selects,
 * in each owner's block of recvcount elements, the k_b entries of largest
 * |g + r| (ties to the lower index), and each owner's shard is the
 * rank-ordered fp32 sum of what the ranks selected in its block; the
 * residual keeps what was not sent. Checked: the shards and the residuals
 * bit for bit against the model over 20 steps, on dyadic data (so also
 * conservation, exactly) with topk:0.01 and topk:0.1, a recvcount below
 * 1 / ratio (k_b = 1), in place, fp16 values; the bytes on the wire (one
 * slot per peer); the same bits on a rerun and whatever SQUALL_CHUNK_BYTES
 * says; the dense fallback where slots would send more than the fp32
 * blocks; an injected failure of the all-to-all (an error on every rank,
 * the residual as it was, the next call runs).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_mpi.h" /* squall__mpi_get_scatter_residual */
#include "mpi_check.h"
#include "squall_mpi.h"

static int rank, nranks;

/* ------------------------------------------------ fault-injecting PMPI */
/* squall's MPI transport exchanges the slots with PMPI_Alltoall; when
 * armed, the next one fails on every rank after it completed (the ranks
 * stay in step). */
static int armed, fired;

typedef int (*alltoall_t)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);

int PMPI_Alltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm comm) {
  static alltoall_t real;
  if (!real) real = (alltoall_t)dlsym(RTLD_NEXT, "PMPI_Alltoall");
  int rc = real(s, sn, st, r, rn, rt, comm);
  if (rc != MPI_SUCCESS || !armed) return rc;
  armed = 0;
  fired = 1;
  return MPI_ERR_TRUNCATE;
}

/* ------------------------------------------------------------ helpers */
/* A check that fails on some ranks only must not leave the others waiting
 * in the case's next collective: failures are noted (the first one's
 * message kept) and settled together, on every rank, at the case's end. */
static int bad;
static char why[512];

static void note(int ok, const char *fmt, ...) {
  if (ok || bad) return;
  bad = 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
}

static void settle(void) {
  int mine = bad, any = 0;
  bad = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (mine) ck_abort_msg("rank %d: %s", rank, why);
  if (any) ck_abort_msg("rank %d: another rank failed a check", rank);
}

static float gen_dyadic(int seed, int r, size_t i) { /* multiples of 1/8 in [-8, 8]: many ties */
  uint64_t x = (uint64_t)seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)r * 0xbf58476d1ce4e5b9ull ^ i * 0x94d049bb133111ebull;
  x ^= x >> 31;
  x *= 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return (float)((int)(x % 129) - 64) / 8.0f;
}

static void fill(float *g, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(seed, rank, i);
}

static squallStats_t stats(void) {
  squallStats_t st = SQUALL_STATS_INITIALIZER;
  squallStatsGet(&st);
  return st;
}

/* k_b = ceil(rc * permille / 1000), at least 1 (squall(7): ratio * recvcount). */
static size_t k_of(size_t rc, int permille) {
  size_t k = (rc * (size_t)permille + 999) / 1000;
  return k < 1 ? 1 : k;
}

/* ------------------------------------------------------------ the model */
/* Orders a block's indices by |a| descending, then index ascending. */
static const float *cmp_a;
static int by_magnitude(const void *x, const void *y) {
  size_t i = *(const size_t *)x, j = *(const size_t *)y;
  float ai = cmp_a[i] < 0 ? -cmp_a[i] : cmp_a[i], aj = cmp_a[j] < 0 ? -cmp_a[j] : cmp_a[j];
  if (ai != aj) return ai > aj ? -1 : 1;
  return i < j ? -1 : i > j;
}

/* One step of this rank's model: a = g + r; in each block the k largest
 * |a| go into sent (zero elsewhere) and leave r, the rest stay in r. */
static void model_select(const float *g, float *r, float *sent, size_t rc, size_t k) {
  size_t n = rc * (size_t)nranks, *idx = malloc(rc * sizeof *idx);
  float *a = malloc(n * 4);
  for (size_t i = 0; i < n; i++) a[i] = g[i] + r[i];
  memset(sent, 0, n * 4);
  for (int b = 0; b < nranks; b++) {
    const float *ab = a + (size_t)b * rc;
    for (size_t i = 0; i < rc; i++) idx[i] = i;
    cmp_a = ab;
    qsort(idx, rc, sizeof *idx, by_magnitude);
    for (size_t j = 0; j < k; j++) sent[(size_t)b * rc + idx[j]] = ab[idx[j]];
  }
  for (size_t i = 0; i < n; i++) r[i] = a[i] - sent[i];
  free(idx);
  free(a);
}

/* The owner's shard: every rank's sent block of this rank, added in rank
 * order in fp32. */
static void model_shard(const float *sent, float *shard, size_t rc) {
  size_t n = rc * (size_t)nranks;
  float *all = malloc(n * (size_t)nranks * 4);
  MPI_Allgather(sent, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
  for (size_t i = 0; i < rc; i++) {
    float s = 0.0f;
    for (int q = 0; q < nranks; q++) s += all[(size_t)q * n + (size_t)rank * rc + i];
    shard[i] = s;
  }
  free(all);
}

/* ------------------------------------------------------- against it */

/* T steps of spec from zeroed residuals (in place: the input is
 * recvbuf's). Returns this rank's shards (T x rc) and final residual (n). */
static void run_steps(const char *spec, size_t rc, int T, int in_place, int seed0, float *shards, float *res) {
  mc_use_config(spec);
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  size_t n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *buf = malloc(n * 4);
  for (int t = 0; t < T; t++) {
    fill(g, n, seed0 + t);
    int r;
    if (in_place) {
      memcpy(buf, g, n * 4);
      r = squallMpiReduceScatterBlock(MPI_IN_PLACE, buf, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else {
      r = squallMpiReduceScatterBlock(g, buf, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    note(r == MPI_SUCCESS, "%s rc=%zu step %d: %s", spec, rc, t, squallGetLastError());
    memcpy(shards + (size_t)t * rc, buf, rc * 4);
  }
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, in_place ? buf : g, (int)rc, MPI_FLOAT, res),
                   MPI_SUCCESS);
  free(g);
  free(buf);
}

/* 20 steps against the model: every shard and the final residual, bit
 * for bit (floats compared by value: a zero's sign is not the rule's);
 * every call compressed, each sending one slot of k_b entries (fp32:
 * 8 bytes an entry) to each peer; and conservation in double. */
static void check_model(const char *spec, size_t rc, int permille, int in_place) {
  enum { T = 20 };
  size_t n = rc * (size_t)nranks, k = k_of(rc, permille);
  float *shards = malloc(T * rc * 4), *res = malloc(n * 4);
  squallStats_t before = stats();
  run_steps(spec, rc, T, in_place, 200, shards, res);
  squallStats_t after = stats();
  note(after.compressedCalls == before.compressedCalls + T, "%s rc=%zu: not every call was compressed", spec, rc);
  int fp16 = strstr(spec, "VALUES=fp16") != NULL;
  if (!fp16) /* fp16's slots: 6 bytes an entry and the scale, padded */
    note(after.bytesWire - before.bytesWire == (uint64_t)T * (uint64_t)(nranks - 1) * 8 * k,
         "%s rc=%zu: %llu bytes on the wire, not one slot of %zu entries per peer", spec, rc,
         (unsigned long long)(after.bytesWire - before.bytesWire), k);
  float *g = malloc(n * 4), *r = calloc(n, 4), *sent = malloc(n * 4), *want = malloc(rc * 4);
  double *in = calloc(n, 8), *mine = calloc(rc, 8);
  for (int t = 0; t < T; t++) {
    fill(g, n, 200 + t);
    for (size_t i = 0; i < n; i++) in[i] += g[i];
    model_select(g, r, sent, rc, k);
    model_shard(sent, want, rc);
    for (size_t i = 0; i < rc; i++) {
      note(shards[(size_t)t * rc + i] == want[i], "%s rc=%zu%s step %d: shard element %zu: %.9g, the model %.9g", spec,
           rc, in_place ? " in place" : "", t, i, shards[(size_t)t * rc + i], want[i]);
      mine[i] += shards[(size_t)t * rc + i];
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    note(res[i] == r[i], "%s rc=%zu: residual element %zu: %.9g, the model %.9g", spec, rc, i, res[i], r[i]);
    kept += r[i] != 0;
  }
  note(kept > 0, "%s rc=%zu: the residual is empty: nothing tested", spec, rc);
  /* conservation: the shards, gathered, plus every residual == every input */
  double *got = malloc(n * 8), *rd = malloc(n * 8), *r_all = malloc(n * 8), *in_all = malloc(n * 8);
  for (size_t i = 0; i < n; i++) rd[i] = res[i];
  MPI_Allgather(mine, (int)rc, MPI_DOUBLE, got, (int)rc, MPI_DOUBLE, MPI_COMM_WORLD);
  MPI_Allreduce(rd, r_all, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(in, in_all, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < n; i++)
    note(got[i] + r_all[i] == in_all[i], "%s rc=%zu: element %zu: out %.17g + residuals %.17g != in %.17g", spec, rc,
         i, got[i], r_all[i], in_all[i]);
  free(shards), free(res), free(g), free(r), free(sent), free(want), free(in), free(mine);
  free(got), free(rd), free(r_all), free(in_all);
  settle();
}

START_TEST(test_topk_001) {
  check_model("SQUALL_COMPRESS=topk:0.01", 1000, 10, 0);
  check_model("SQUALL_COMPRESS=topk:0.01", 2345, 10, 0);
}
END_TEST

START_TEST(test_topk_01) {
  check_model("SQUALL_COMPRESS=topk:0.1", 1000, 100, 0);
  check_model("SQUALL_COMPRESS=topk:0.1", 333, 100, 0);
}
END_TEST

/* recvcount 50 < 1 / 0.01: one entry per block, still sparse */
START_TEST(test_small_block_one_entry) { check_model("SQUALL_COMPRESS=topk:0.01", 50, 10, 0); }
END_TEST

START_TEST(test_in_place) { check_model("SQUALL_COMPRESS=topk:0.1", 777, 100, 1); }
END_TEST

/* fp16 values of multiples of 1/8 below 2^8 are exact at any power-of-two
 * scale the encoder can choose: the model holds as it is. */
START_TEST(test_fp16_values) { check_model("SQUALL_COMPRESS=topk:0.1 SQUALL_TOPK_VALUES=fp16", 500, 100, 0); }
END_TEST

/* ------------------------------------------------- the same bits again */

/* A rerun, a run with small chunks configured, and a run in place give
 * the first run's shards and residual, bit for bit. */
START_TEST(test_rerun_identical) {
  enum { T = 5 };
  size_t rc = 3001, n = rc * (size_t)nranks;
  float *s0 = malloc(T * rc * 4), *s1 = malloc(T * rc * 4), *r0 = malloc(n * 4), *r1 = malloc(n * 4);
  const char *spec = "SQUALL_COMPRESS=topk:0.01";
  const char *variants[3] = {spec, "SQUALL_COMPRESS=topk:0.01 SQUALL_CHUNK_BYTES=4096", spec};
  run_steps(spec, rc, T, 0, 40, s0, r0);
  for (int v = 0; v < 3; v++) {
    run_steps(variants[v], rc, T, v == 2, 40, s1, r1);
    note(memcmp(s0, s1, T * rc * 4) == 0, "%s (run %d): other shards", variants[v], v);
    note(memcmp(r0, r1, n * 4) == 0, "%s (run %d): another residual", variants[v], v);
  }
  settle();
  free(s0);
  free(s1);
  free(r0);
  free(r1);
}
END_TEST

/* ------------------------------------------------------ dense fallback */

/* Where one slot per peer would send more than the fp32 block (topk:0.9;
 * recvcount 1, whose one entry takes 8 bytes), the call is the
 * reduce-scatter of g + r, which empties the residual: from zeroed
 * residuals, MPI's own result, and nothing kept. */
static void check_dense(const char *spec, size_t rc) {
  size_t n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *a = calloc(rc, 4), *b = calloc(rc, 4), *res = malloc(n * 4);
  mc_use_config(spec);
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  fill(g, n, 7);
  squallStats_t before = stats();
  ck_assert_int_eq(squallMpiReduceScatterBlock(g, a, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  squallStats_t after = stats();
  ck_assert_int_eq(PMPI_Reduce_scatter_block(g, b, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  note(memcmp(a, b, rc * 4) == 0, "%s rc=%zu: not the reduce-scatter of g", spec, rc);
  note(after.compressedCalls == before.compressedCalls + 1, "%s rc=%zu: not compressed", spec, rc);
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, g, (int)rc, MPI_FLOAT, res), MPI_SUCCESS);
  for (size_t i = 0; i < n; i++) note(res[i] == 0.0f, "%s rc=%zu: residual element %zu kept", spec, rc, i);
  settle();
  free(g);
  free(a);
  free(b);
  free(res);
}

START_TEST(test_dense_fallback) {
  check_dense("SQUALL_COMPRESS=topk:0.9", 1000);
  check_dense("SQUALL_COMPRESS=topk:0.01", 1);
}
END_TEST

/* ------------------------------------------------------------- faults */

/* A failed all-to-all: an error on every rank, the residual as it was,
 * and the next call runs. */
START_TEST(test_fault_restores_residual) {
  size_t rc = 2000, n = rc * (size_t)nranks;
  float *before = malloc(n * 4), *after = malloc(n * 4), *g = malloc(n * 4), *out = malloc(rc * 4);
  mc_use_config("SQUALL_COMPRESS=topk:0.01");
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  for (int t = 0; t < 3; t++) { /* a residual with mass */
    fill(g, n, 60 + t);
    ck_assert_int_eq(squallMpiReduceScatterBlock(g, out, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  }
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, g, (int)rc, MPI_FLOAT, before), MPI_SUCCESS);
  fill(g, n, 63);
  armed = 1;
  fired = 0;
  int r = squallMpiReduceScatterBlock(g, out, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  armed = 0;
  ck_assert_msg(fired, "the fault did not fire");
  int failed = r != MPI_SUCCESS, everywhere = 0;
  MPI_Allreduce(&failed, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  ck_assert_msg(everywhere, "a rank returned success after an injected failure");
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, g, (int)rc, MPI_FLOAT, after), MPI_SUCCESS);
  note(memcmp(before, after, n * 4) == 0, "the residual was not restored");
  note(squallMpiReduceScatterBlock(g, out, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS,
       "the call after the failure: %s", squallGetLastError());
  settle();
  free(before);
  free(after);
  free(g);
  free(out);
}
END_TEST

int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "reducescatter-topk", .rank = &rank, .nranks = &nranks,
      .errors_return = 1, /* the error cases return */
      .cases = MC_CASES(
          {"reducescatter-topk", 600, MC_TESTS(test_topk_001, test_topk_01, test_small_block_one_entry, test_in_place,
                                               test_fp16_values, test_rerun_identical, test_dense_fallback,
                                               test_fault_restores_residual)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_reducescatter_mpi.c - squallMpiReduceScatterBlock (tests/mpi/runs.list:
 * 2, 3 and 4 ranks): every pass-through bit for bit
 * PMPI_Reduce_scatter_block's; for each codec, conservation over 20 steps
 * (the shards every rank received, gathered, plus every rank's residual,
 * equal the sum of all inputs, exactly on dyadic data); the same bits on a
 * rerun, pipelined in small chunks, and in place; a configuration
 * mismatch passes through; ranks that pass different counts get an error
 * on every rank; an injected failure of the exchange returns an error on
 * every rank and leaves the residual as it was.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_mpi.h" /* squall__mpi_get_scatter_residual */
#include "mpi_check.h"
#include "rs_conservation.h"
#include "squall_mpi.h"

static int rank, nranks;

/* ------------------------------------------------ fault-injecting PMPI */
/* squall's MPI transport exchanges the codes with PMPI_Alltoall (one
 * chunk) or PMPI_Ialltoall (pipelined); when armed, the armed_at-th of
 * them since arming fails on every rank (after it completed: ranks stay in
 * step), or its start fails (nothing in flight for it). */
static int armed_at, seen, fired;

static void arm(int at) {
  armed_at = at;
  seen = 0;
  fired = 0;
}

#define REAL(name, type)   \
  static type real_##name; \
  if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

typedef int (*alltoall_t)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);
typedef int (*ialltoall_t)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Request *);

static int hits(void) {
  if (armed_at == 0 || ++seen != armed_at) return 0;
  fired = 1;
  return 1;
}

int PMPI_Alltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm comm) {
  REAL(PMPI_Alltoall, alltoall_t);
  int rc = real_PMPI_Alltoall(s, sn, st, r, rn, rt, comm);
  return rc == MPI_SUCCESS && hits() ? MPI_ERR_TRUNCATE : rc;
}

int PMPI_Ialltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm comm,
                   MPI_Request *req) {
  REAL(PMPI_Ialltoall, ialltoall_t);
  if (hits()) {
    *req = MPI_REQUEST_NULL;
    return MPI_ERR_TRUNCATE;
  }
  return real_PMPI_Ialltoall(s, sn, st, r, rn, rt, comm, req);
}

/* ------------------------------------------------------------ helpers */
static float gen_dyadic(int seed, int r, size_t i) { /* multiples of 1/8 in [-8, 8] */
  uint64_t x = (uint64_t)seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)r * 0xbf58476d1ce4e5b9ull ^ i * 0x94d049bb133111ebull;
  x ^= x >> 31;
  x *= 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return (float)((int)(x % 129) - 64) / 8.0f;
}

static const char *const codecs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=bf16", "SQUALL_COMPRESS=int8",
                                     "SQUALL_COMPRESS=int4", "SQUALL_COMPRESS=fp8"};
#define NCODECS (sizeof codecs / sizeof codecs[0])

static void fill(float *g, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(seed, rank, i);
}

static int rs(const void *send, void *recv, size_t rc) {
  return squallMpiReduceScatterBlock(send, recv, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* ------------------------------------------------------ pass-throughs */

/* One call that squall passes through for `why`: bit for bit the plain
 * reduce-scatter, counted under its reason, nothing compressed. */
static void check_plain(const char *spec, MPI_Datatype t, MPI_Op op, int rc, squallPassReason_t why) {
  mc_use_config(spec);
  int es = 0;
  MPI_Type_size(t, &es);
  size_t n = (size_t)rc * (size_t)nranks, bytes = n * (size_t)es + 8;
  char *send = malloc(bytes), *a = calloc(1, bytes), *b = calloc(1, bytes);
  for (size_t i = 0; i < n; i++) {
    float f = gen_dyadic(5, rank, i) * 1.37f; /* not dyadic: a codec would show */
    if (t == MPI_DOUBLE) ((double *)send)[i] = f;
    else if (t == MPI_INT) ((int *)send)[i] = (int)(f * 8);
    else ((float *)send)[i] = f;
  }
  uint64_t before = rs_passes(why), comp = rs_compressed();
  ck_assert_int_eq(squallMpiReduceScatterBlock(send, a, rc, t, op, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert_int_eq(PMPI_Reduce_scatter_block(send, b, rc, t, op, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert_msg(memcmp(a, b, (size_t)rc * (size_t)es) == 0, "%s: not the plain reduce-scatter", spec);
  ck_assert_msg(rs_passes(why) == before + 1, "%s: not counted as %s", spec, squallPassReasonName(why));
  ck_assert_msg(rs_compressed() == comp, "%s: compressed", spec);
  free(send);
  free(a);
  free(b);
}

START_TEST(test_passthrough_exact) {
  check_plain("SQUALL_COMPRESS=int8", MPI_DOUBLE, MPI_SUM, 700, squallPassType);
  check_plain("SQUALL_COMPRESS=int8", MPI_INT, MPI_SUM, 700, squallPassType);
  check_plain("SQUALL_COMPRESS=int8", MPI_FLOAT, MPI_MAX, 700, squallPassOp);
  check_plain("SQUALL_COMPRESS=fp16 SQUALL_MIN_BYTES=1M", MPI_FLOAT, MPI_SUM, 700, squallPassSmall);
  check_plain("SQUALL_COMPRESS=fp16 SQUALL_MIN_RANKS=64", MPI_FLOAT, MPI_SUM, 700, squallPassSingleRank);
  check_plain("SQUALL_COMPRESS=none", MPI_FLOAT, MPI_SUM, 700, squallPassDisabled);
  check_plain("SQUALL_COMPRESS=int8", MPI_FLOAT, MPI_SUM, 0, squallPassSmall); /* recvcount 0 */
}
END_TEST

/* An intercommunicator's reduce-scatter sums the other group's data: it
 * passes through, as MPI's own. */
START_TEST(test_intercomm_passes_through) {
  if (nranks % 2) return; /* two groups of one size: one buffer layout */
  mc_use_config("SQUALL_COMPRESS=int8");
  MPI_Comm half, inter;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 7, &inter);
  int rc = 500;
  size_t n = (size_t)rc * (size_t)nranks;
  float *g = malloc(n * 4), *a = calloc(n, 4), *b = calloc(n, 4);
  fill(g, n, 9);
  uint64_t before = rs_passes(squallPassIntercomm);
  ck_assert_int_eq(squallMpiReduceScatterBlock(g, a, rc, MPI_FLOAT, MPI_SUM, inter), MPI_SUCCESS);
  ck_assert_int_eq(PMPI_Reduce_scatter_block(g, b, rc, MPI_FLOAT, MPI_SUM, inter), MPI_SUCCESS);
  ck_assert(memcmp(a, b, (size_t)rc * 4) == 0);
  ck_assert(rs_passes(squallPassIntercomm) == before + 1);
  squallMpiCommFree(inter);
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
  free(g);
  free(a);
  free(b);
}
END_TEST

/* Ranks that disagree on the bucket would exchange blocks of different
 * layouts: the call header sees it and every rank passes through. */
START_TEST(test_mismatch_passes_through) {
  mc_use_config(rank == 0 ? "SQUALL_COMPRESS=int8 SQUALL_BUCKET=64" : "SQUALL_COMPRESS=int8 SQUALL_BUCKET=512");
  size_t rc = 1000, n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *a = calloc(rc, 4), *b = calloc(rc, 4);
  for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(3, rank, i) * 1.37f;
  uint64_t before = rs_passes(squallPassMismatch);
  ck_assert_int_eq(rs(g, a, rc), MPI_SUCCESS);
  ck_assert_int_eq(PMPI_Reduce_scatter_block(g, b, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert_msg(memcmp(a, b, rc * 4) == 0, "a mismatch: not the plain reduce-scatter");
  ck_assert(rs_passes(squallPassMismatch) == before + 1);
  free(g);
  free(a);
  free(b);
}
END_TEST

/* Ranks that pass different counts to a call every rank would compress:
 * an error on every rank (no hang, no mismatched exchange), and the next
 * call runs. */
START_TEST(test_different_counts_fail_everywhere) {
  mc_use_config("SQUALL_COMPRESS=int8");
  size_t rc = 600, n = (rc + 8) * (size_t)nranks;
  float *g = malloc(n * 4), *out = calloc(rc + 8, 4);
  fill(g, n, 4);
  int r = rs(g, out, rank == 0 ? rc + 8 : rc);
  ck_assert_int_ne(r, MPI_SUCCESS);
  ck_assert_int_eq(rs(g, out, rc), MPI_SUCCESS);
  free(g);
  free(out);
}
END_TEST

/* ------------------------------------------------------- conservation */

/* T steps of one codec from zeroed residuals; in place, the input is
 * recvbuf's. Returns this rank's shards (T x rc floats) and its final
 * residual (n floats). */
static void run_steps(const char *spec, size_t rc, int T, int in_place, int seed0, float *shards, float *res) {
  mc_use_config(spec);
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  size_t n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *buf = malloc(n * 4);
  uint64_t comp = rs_compressed();
  for (int t = 0; t < T; t++) {
    fill(g, n, seed0 + t);
    if (in_place) {
      memcpy(buf, g, n * 4);
      ck_assert_msg(squallMpiReduceScatterBlock(MPI_IN_PLACE, buf, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) ==
                        MPI_SUCCESS,
                    "%s: %s", spec, squallGetLastError());
    } else {
      ck_assert_msg(rs(g, buf, rc) == MPI_SUCCESS, "%s: %s", spec, squallGetLastError());
    }
    memcpy(shards + (size_t)t * rc, buf, rc * 4);
  }
  ck_assert_msg(rs_compressed() == comp + (uint64_t)T, "%s: not every call was compressed", spec);
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, in_place ? buf : g, (int)rc, MPI_FLOAT, res),
                   MPI_SUCCESS);
  free(g);
  free(buf);
}

/* Sum over steps of the shards, gathered, plus every rank's residual,
 * equals the sum of every input (rs_conserve). */
static void check_conservation(const char *spec, size_t rc, int in_place) {
  enum { T = 20 };
  size_t n = rc * (size_t)nranks;
  float *shards = malloc(T * rc * 4), *res = malloc(n * 4);
  run_steps(spec, rc, T, in_place, 100, shards, res);
  rs_sums s = rs_conserve(shards, res, rc, T, 100, gen_dyadic, rank, nranks);
  MC_CHECK(s.bad == 0, "%s rc=%zu%s: element %zu: out %.17g + residuals %.17g != in %.17g (%zu elements differ)", spec,
           rc, in_place ? " in place" : "", s.first, s.got, s.res, s.in, s.bad);
  /* the residual is real: int4 cannot send 1/8 steps of [-8, 8] */
  if (strstr(spec, "int4")) ck_assert_msg(s.lossy > 0, "%s: every residual is zero", spec);
  free(shards);
  free(res);
}

START_TEST(test_conservation) {
  /* 1000: whole buckets of 8 and lines of 64 per shard nowhere; 333: a
   * shard ending in part of a bucket and starting off its lines */
  const size_t counts[] = {1000, 333};
  for (size_t c = 0; c < NCODECS; c++)
    for (size_t k = 0; k < 2; k++) check_conservation(codecs[c], counts[k], 0);
}
END_TEST

START_TEST(test_conservation_in_place) {
  for (size_t c = 0; c < NCODECS; c++) check_conservation(codecs[c], 777, 1);
}
END_TEST

/* ------------------------------------------------- the same bits again */

/* A rerun, a run pipelined in chunks of 4 KiB, and a run in place give the
 * shards and the residual of the first run, bit for bit. */
START_TEST(test_rerun_pipelined_in_place_identical) {
  enum { T = 5 };
  size_t rc = 3001, n = rc * (size_t)nranks;
  float *s0 = malloc(T * rc * 4), *s1 = malloc(T * rc * 4), *r0 = malloc(n * 4), *r1 = malloc(n * 4);
  for (size_t c = 0; c < NCODECS; c++) {
    char spec[128], piped[160];
    snprintf(spec, sizeof spec, "%s SQUALL_BUCKET=64", codecs[c]);
    snprintf(piped, sizeof piped, "%s SQUALL_CHUNK_BYTES=4096", spec);
    run_steps(spec, rc, T, 0, 40, s0, r0);
    const char *variants[3] = {spec, piped, spec};
    for (int v = 0; v < 3; v++) {
      squallStats_t a = SQUALL_STATS_INITIALIZER, b = SQUALL_STATS_INITIALIZER;
      squallStatsGet(&a);
      run_steps(variants[v], rc, T, v == 2, 40, s1, r1);
      squallStatsGet(&b);
      if (v == 1) ck_assert_msg(b.pipelinedCalls == a.pipelinedCalls + T, "%s: not pipelined", piped);
      else ck_assert(b.pipelinedCalls == a.pipelinedCalls);
      ck_assert_msg(memcmp(s0, s1, T * rc * 4) == 0, "%s (run %d): other shards", variants[v], v);
      ck_assert_msg(memcmp(r0, r1, n * 4) == 0, "%s (run %d): another residual", variants[v], v);
    }
  }
  free(s0);
  free(s1);
  free(r0);
  free(r1);
}
END_TEST

/* ------------------------------------------------------------- faults */

/* A failed exchange: an error on every rank, the residual as it was, and
 * the next call runs. */
static void check_fault(const char *spec, int at) {
  size_t rc = 2000, n = rc * (size_t)nranks;
  float *before = malloc(n * 4), *after = malloc(n * 4), *g = malloc(n * 4), *out = malloc(rc * 4);
  mc_use_config(spec);
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  for (int t = 0; t < 3; t++) { /* a residual with mass */
    fill(g, n, 60 + t);
    ck_assert_msg(rs(g, out, rc) == MPI_SUCCESS, "%s: %s", spec, squallGetLastError());
  }
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, g, (int)rc, MPI_FLOAT, before), MPI_SUCCESS);
  fill(g, n, 63);
  arm(at);
  int r = rs(g, out, rc);
  int was_fired = fired;
  arm(0);
  ck_assert_msg(was_fired, "%s: the fault did not fire", spec);
  int failed = r != MPI_SUCCESS, everywhere = 0;
  MPI_Allreduce(&failed, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  ck_assert_msg(everywhere, "%s: a rank returned success after an injected failure", spec);
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, g, (int)rc, MPI_FLOAT, after), MPI_SUCCESS);
  ck_assert_msg(memcmp(before, after, n * 4) == 0, "%s: the residual was not restored", spec);
  ck_assert_msg(rs(g, out, rc) == MPI_SUCCESS, "%s: the call after the failure: %s", spec, squallGetLastError());
  free(before);
  free(after);
  free(g);
  free(out);
}

START_TEST(test_fault_restores_residual) {
  check_fault("SQUALL_COMPRESS=int8", 1);
  check_fault("SQUALL_COMPRESS=fp16", 1);
  /* pipelined: the third chunk's exchange fails to start, two in flight */
  check_fault("SQUALL_COMPRESS=int4 SQUALL_BUCKET=64 SQUALL_CHUNK_BYTES=4096", 3);
  check_fault("SQUALL_COMPRESS=bf16 SQUALL_CHUNK_BYTES=4096", 3);
}
END_TEST

int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "reducescatter", .rank = &rank, .nranks = &nranks,
      .errors_return = 1, /* the error cases return */
      .cases = MC_CASES(
          {"reducescatter", 600, MC_TESTS(test_passthrough_exact, test_intercomm_passes_through,
                                          test_mismatch_passes_through, test_different_counts_fail_everywhere,
                                          test_conservation, test_conservation_in_place,
                                          test_rerun_pipelined_in_place_identical, test_fault_restores_residual)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

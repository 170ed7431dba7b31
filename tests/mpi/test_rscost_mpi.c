/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_rscost_mpi.c - the cost model on squallMpiReduceScatterBlock
 * (tests/mpi/runs.list: 2 and 4 ranks). On a link said to be 100 Tbit/s
 * (the fast link of shared memory, without its timing noise) a
 * reduce-scatter is compressed only while its codec is measured, then
 * passes through as not_paying, bit for bit the plain reduce-scatter,
 * except the exploring call every 32 declined ones; its size class
 * settles (no call header) as the all-reduce's does. A slow link given
 * then compresses every call within 16. Its figures are its own: an
 * all-reduce of the same bytes that the model declines leaves the
 * reduce-scatter to measure its codec first, and the other way round.
 * Every decision is the same on every rank, and ranks that disagree on the
 * codec leave the model's lean (its hysteresis) alike.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_mpi.h"      /* squall__mpi_get_scatter_residual */
#include "engine/costmodel.h" /* SQ_COST_EXPLORE, SQ_COST_RECHECK */
#include "engine/plan.h"      /* squall__cost_of */
#include "engine_fixture.h"
#include "explore_rhythm.h"
#include "mpi_check.h"
#include "squall_mpi.h"

static int rank, nranks;

static float gen(int seed, int r, size_t i) { /* multiples of 1/8 in [-8, 8] */
  uint64_t x = (uint64_t)seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)r * 0xbf58476d1ce4e5b9ull ^ i * 0x94d049bb133111ebull;
  x ^= x >> 31;
  x *= 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return (float)((int)(x % 129) - 64) / 8.0f;
}

static void same_on_every_rank(uint64_t v, const char *what, int call) {
  uint64_t lo = v, hi = v;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  ck_assert_msg(lo == hi, "%s, call %d: ranks differ (%llu .. %llu)", what, call, (unsigned long long)lo,
                (unsigned long long)hi);
}

/* What one call did: 1 compressed, 0 declined (not_paying); the headers
 * it exchanged in *headed. Fails on any other path. */
static int one_call(int coll, const float *g, float *out, size_t rc, const char *spec, int call, int *headed) {
  squallStats_t a = SQUALL_STATS_INITIALIZER, b = SQUALL_STATS_INITIALIZER;
  squallStatsGet(&a);
  int err = coll ? squallMpiReduceScatterBlock(g, out, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)
                 : squallMpiAllreduce(g, out, (int)(rc * (size_t)nranks), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  ck_assert_msg(err == MPI_SUCCESS, "%s, call %d: error %d", spec, call, err);
  squallStatsGet(&b);
  int c = b.compressedCalls > a.compressedCalls;
  int d = b.passthrough[squallPassNotPaying] > a.passthrough[squallPassNotPaying];
  ck_assert_msg(c + d == 1, "%s, call %d: neither compressed nor declined as not paying", spec, call);
  *headed = (int)(b.headers - a.headers);
  same_on_every_rank((uint64_t)c, spec, call);
  same_on_every_rank((uint64_t)*headed, spec, call);
  return c;
}

#define N_PER_RANK 50001 /* odd: a shard ends inside a bucket */

/* This rank's residual of the tensor reduce-scattered from g (n floats),
 * zeros where none is kept. */
static void scatter_residual(const float *g, size_t rc, size_t n, float *out) {
  if (squall__mpi_get_scatter_residual(MPI_COMM_WORLD, g, (int)rc, MPI_FLOAT, out) != MPI_SUCCESS)
    memset(out, 0, n * 4);
}

/* A declined call t: the plain reduce-scatter of g + the residual r its
 * tensor held before it (g + r formed here: the same floats the fold
 * forms), bit for bit, and the residual empty after it; 1 where r held
 * mass. */
static int declined_is_plain(const float *g, const float *r, const float *a, size_t rc, size_t n, float *work,
                             float *b, const char *spec, int t) {
  int carried = 0;
  for (size_t i = 0; i < n; i++) {
    carried |= r[i] != 0.0f;
    work[i] = g[i] + r[i];
  }
  PMPI_Reduce_scatter_block(work, b, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  ck_assert_msg(memcmp(a, b, rc * 4) == 0, "%s, call %d: declined but not the plain reduce-scatter of g + r", spec, t);
  scatter_residual(g, rc, n, work);
  for (size_t i = 0; i < n; i++)
    MC_CHECK(work[i] == 0.0f, "%s, call %d: residual[%zu] = %g left after a declined call", spec, t, i, work[i]);
  return carried;
}

/* Calls t0.. of spec on the fast link, g fresh each call, until `calls`
 * have run or (stop_at_compressed) one compressed, each declined one
 * checked (declined_is_plain) and all in the rhythm's shape where r is
 * given; returns the calls made, and adds declined calls that carried mass
 * to *carried. */
static int fast_calls(const char *spec, int t0, int calls, int stop_at_compressed, explore_rhythm *r, int *carried) {
  size_t rc = N_PER_RANK, n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *a = malloc(rc * 4), *b = malloc(rc * 4), *res = malloc(n * 4), *work = malloc(n * 4);
  int t = t0;
  for (; t < t0 + calls; t++) {
    for (size_t i = 0; i < n; i++) g[i] = gen(100 + t, rank, i) / 3.0f; /* thirds: no codec sends them exactly */
    scatter_residual(g, rc, n, res);
    int headed, c = one_call(1, g, a, rc, spec, t, &headed);
    if (!c) *carried += declined_is_plain(g, res, a, rc, n, work, b, spec, t);
    if (r) rhythm_call(r, t, c, headed);
    if (c && stop_at_compressed) break;
  }
  free(g);
  free(a);
  free(b);
  free(res);
  free(work);
  return t - t0 + (t < t0 + calls);
}

/* Reduce-scatters on the fast link: calls 1 (new memory, not timed), 2
 * (the codec's first figure, which alone declines nothing) and 3 are
 * compressed; then the model declines every call but the exploring ones,
 * in the rhythm's shape (explore_rhythm.h), each declined one the plain
 * reduce-scatter of the input and of what the tensor's last compressed
 * call left (the fold: squall(7), ERROR FEEDBACK). Enough calls for the
 * longest exploring period. */
#define FAST_CALLS (3 + RHYTHM_LONGEST + 5)
START_TEST(test_fast_link_declines) {
  size_t rc = N_PER_RANK, n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *a = malloc(rc * 4);
  const char *codecs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=int8"};
  for (size_t k = 0; k < 2; k++) {
    char spec[160];
    snprintf(spec, sizeof spec, "%s SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000", codecs[k]);
    mc_use_config(spec);
    squallMpiCommFree(MPI_COMM_WORLD); /* a fresh engine: no figures yet */
    explore_rhythm r;
    rhythm_start(&r, spec, 3);
    int carried = 0;
    fast_calls(spec, 0, 3, 0, &r, &carried);
    ck_assert_msg(r.compressed == 3, "%s: declined before the codec was measured", spec);
    fast_calls(spec, 3, FAST_CALLS - 3, 0, &r, &carried);
    ck_assert_msg(r.explorations >= 1, "%s: no exploration in %d calls", spec, FAST_CALLS);
    ck_assert_msg(carried >= 1, "%s: no declined call carried a residual", spec);
    for (size_t i = 0; i < n; i++) g[i] = gen(7, rank, i);

    snprintf(spec, sizeof spec, "%s SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=0.001", codecs[k]);
    mc_use_config(spec);
    int first = -1;
    for (int t = 0; t < (SQ_COST_RECHECK << SQ_COST_RECHECK_SHIFTS) + 4; t++) {
      int headed, c = one_call(1, g, a, rc, spec, t, &headed);
      if (c && first < 0) first = t;
      ck_assert_msg(c || first < 0, "%s: call %d passed through after call %d compressed", spec, t, first);
    }
    ck_assert_msg(first >= 0 && first < (SQ_COST_RECHECK << SQ_COST_RECHECK_SHIFTS), "%s: a slow link given, first compressed call %d", spec,
                  first);
  }
  free(g);
  free(a);
}
END_TEST

/* A codec changed in a size class the model has just declined (not
 * settled yet, so the next call's header sees the change): the new
 * codec's rhythm counts from its own first call, not on from the old
 * codec's declined calls (which would bring its first exploration one
 * call short of its period: the rhythm's shape fails). */
START_TEST(test_new_codec_counts_afresh) {
  const char *fp16 = "SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000";
  const char *int8 = "SQUALL_COMPRESS=int8 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000";
  mc_use_config(fp16);
  squallMpiCommFree(MPI_COMM_WORLD);
  explore_rhythm r;
  rhythm_start(&r, fp16, 3);
  int carried = 0;
  fast_calls(fp16, 0, 4, 0, &r, &carried);
  ck_assert_msg(r.compressed == 3 && r.declined == 1, "fp16: %d compressed, %d declined", r.compressed, r.declined);
  mc_use_config(int8);
  rhythm_start(&r, int8, 3);
  fast_calls(int8, 4, 3 + RHYTHM_LONGEST + 5, 0, &r, &carried);
  ck_assert_msg(r.explorations >= 1, "int8: no exploration");
}
END_TEST

/* Calls of the same bytes, all-reduce first and reduce-scatter after, and
 * then the other way: whatever the first has taught the model (declined,
 * settled), the second still measures its own codec over 3 compressed
 * calls before declining: neither collective reads the other's figures. */
START_TEST(test_figures_apart) {
  size_t rc = N_PER_RANK, n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *a = malloc(n * 4);
  const char *spec = "SQUALL_COMPRESS=int8 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000";
  for (int order = 0; order < 2; order++) {
    mc_use_config(spec);
    squallMpiCommFree(MPI_COMM_WORLD);
    for (int phase = 0; phase < 2; phase++) {
      int coll = phase ^ order, c = 0, headed;
      for (int t = 0; t < 8; t++) {
        for (size_t i = 0; i < n; i++) g[i] = gen(300 + t, rank, i);
        c = one_call(coll, g, a, rc, spec, t, &headed);
        ck_assert_msg(c == (t < 3), "%s, %s after %d %s calls, call %d: %s", spec,
                      coll ? "reduce-scatter" : "all-reduce", phase ? 8 : 0, coll ? "all-reduce" : "reduce-scatter",
                      t, c ? "compressed" : "declined");
      }
    }
  }
  free(g);
  free(a);
}
END_TEST

/* The model's lean (its last own verdict on a class, which sets the
 * margin to compress again) names a codec, so it is written only on calls
 * whose configuration every rank agreed: ranks that disagree (rank 0 on
 * another codec) must leave it as it was, alike on every rank, or once
 * they agree again one rank would need 5% and another 25% to compress, and
 * part ways at a predicted gain between the two. Engine level, to read the
 * lean itself: both codecs measured and declined on a fast link, then
 * calls where the ranks disagree. */
START_TEST(test_lean_only_where_agreed) {
  if (nranks < 2) return;
  engine_fixture f;
  ef_open(&f);
  ef_engine(&f);
  size_t n = N_PER_RANK;
  float *g = malloc(n * 4), *out = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen(7, rank, i);
  const char *fp16 = "SQUALL_COMPRESS=fp16 SQUALL_MIN_BYTES=0 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000";
  const char *int8 = "SQUALL_COMPRESS=int8 SQUALL_MIN_BYTES=0 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000";
  squall_call ar = {.count = n, .coll = SQ_COLL_ALLREDUCE, .dtype = SQ_DT_F32, .elsize = 4, .premul = 1.0f};
  const squall_cost *m = squall__cost_of(f.e, &ar);
  int cls = squall__cost_class((uint64_t)n * 4);
  ef_use(&f, int8); /* both codecs measured, and declined */
  for (int t = 0; t < 6; t++) ef_call(&f, SQ_COLL_ALLREDUCE, g, out, n, SQ_OP_SUM);
  ef_use(&f, fp16);
  for (int t = 0; t < 6; t++) ef_call(&f, SQ_COLL_ALLREDUCE, g, out, n, SQ_OP_SUM);
  ck_assert_msg(m->leaning_plain[cls] == squallCodecFp16 + 1, "rank %d: fp16 declined, lean %d", rank,
                (int)m->leaning_plain[cls]);
  ef_use(&f, rank == 0 ? int8 : fp16);
  int mismatched = 0;
  for (int t = 0; t < 4; t++) {
    squall_decision d = ef_call(&f, SQ_COLL_ALLREDUCE, g, out, n, SQ_OP_SUM);
    mismatched += d.reason == squallPassMismatch;
    same_on_every_rank(m->leaning_plain[cls], "the lean while the ranks disagree", t);
  }
  ck_assert_msg(mismatched > 0, "rank %d: no call passed through as a mismatch", rank);
  ef_close(&f);
  free(g);
  free(out);
}
END_TEST

/* A settled class's calls pass through without a plan, but not without
 * squall's own checks of the arguments: the same buffer as sendbuf and
 * recvbuf without MPI_IN_PLACE still gets MPI_ERR_BUFFER through the
 * communicator's handler, and is not counted, as before the class
 * settled. (The settled path once ran before the checks: the reduce-scatter
 * then returned MPI_SUCCESS, and Open MPI aborted the job on the
 * all-reduce.) */
START_TEST(test_settled_calls_checked) {
  size_t rc = N_PER_RANK, n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *a = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen(500, rank, i);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  mc_use_config("SQUALL_COMPRESS=fp16 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000");
  for (int coll = 0; coll < 2; coll++) {
    squallStats_t s0 = SQUALL_STATS_INITIALIZER, s1 = SQUALL_STATS_INITIALIZER;
    for (int t = 0; t < 12; t++) { /* 3 compressed to measure, then declined: settled from the third declined call */
      squallStatsGet(&s0);
      int err = coll ? squallMpiReduceScatterBlock(g, a, (int)rc, MPI_FLOAT, MPI_SUM, comm)
                     : squallMpiAllreduce(g, a, (int)n, MPI_FLOAT, MPI_SUM, comm);
      ck_assert_int_eq(err, MPI_SUCCESS);
      squallStatsGet(&s1);
    }
    ck_assert_msg(s1.passthrough[squallPassNotPaying] == s0.passthrough[squallPassNotPaying] + 1 &&
                      s1.headers == s0.headers,
                  "%s: the 12th call was not a settled class's (declined without a header)",
                  coll ? "reduce-scatter" : "all-reduce");
    squallStatsGet(&s0);
    int err = coll ? squallMpiReduceScatterBlock(g, g, (int)rc, MPI_FLOAT, MPI_SUM, comm)
                   : squallMpiAllreduce(g, g, (int)n, MPI_FLOAT, MPI_SUM, comm);
    squallStatsGet(&s1);
    int cls = MPI_SUCCESS;
    MPI_Error_class(err, &cls);
    ck_assert_msg(cls == MPI_ERR_BUFFER, "%s with sendbuf == recvbuf in a settled class: error class %d, not %d",
                  coll ? "reduce-scatter" : "all-reduce", cls, MPI_ERR_BUFFER);
    ck_assert_msg(s1.calls == s0.calls, "the refused call was counted (%llu calls)",
                  (unsigned long long)(s1.calls - s0.calls));
  }
  squallMpiCommFree(comm);
  MPI_Comm_free(&comm);
  free(g);
  free(a);
}
END_TEST

int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "rscost", .rank = &rank, .nranks = &nranks,
      .cases = MC_CASES(
          {"rscost", 600, MC_TESTS(test_fast_link_declines, test_new_codec_counts_afresh, test_figures_apart, test_lean_only_where_agreed,
                                    test_settled_calls_checked)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

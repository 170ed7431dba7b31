/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_hierarchy_faults.c - local failures on one rank around the two-level
 * all-reduce (tests/mpi/runs.list: 4 ranks as 2 nodes x 2):
 * every allocation a two-level call needs (its scratch, the node
 * reduce-scatter's ring, the inner engine's scratch and shard residual)
 * happens before the call header, so that one rank's failure makes every
 * rank pass the call through together instead of leaving its peers waiting
 * in a collective. Checked on the host engine (a header on every call) and
 * on a "device" engine (the host kernels with a device set's abilities: the header
 * only when the configuration changed or memory must grow), where growth
 * of the two-level memory must bring the header. A captured call (CUDA
 * graph capture: nothing may allocate) decides from the plan, the same on
 * every rank, also after a rank failed to grow. A hang is a failure here:
 * tests/run-mpi.sh stops it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "common/internal.h"
#include "engine_fixture.h"
#include "hierarchy_model.h"
#include "mpi_check.h"
#include "squall_mpi.h"

static int rank, nranks, rpn, two_level;

static void use_config(const char *spec) {
  squallConfig_t c, env;
  squallConfigDefault(&c);
  squallGetConfig(&env);
  c.debug = env.debug;
  c.ranksPerNode = rpn;
  ck_assert_int_eq(squallConfigParse(&c, "SQUALL_MIN_BYTES=0"), squallSuccess);
  ck_assert_msg(squallConfigParse(&c, spec) == squallSuccess, "bad spec %s: %s", spec, squallGetLastError());
  ck_assert_int_eq(squallSetConfig(&c), squallSuccess);
}

static int same_everywhere(long v) {
  long lo, hi;
  MPI_Allreduce(&v, &lo, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&v, &hi, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/* ------------------------------------------------------ injected faults */
/* Rank 0's kernel memory runs out at its fail_at-th allocation after
 * arming: that one and every later one fail until disarmed (an engine may
 * retry a smaller size, as it does after a capture, where it first asks
 * for twice its scratch). */
static int fail_at, seen, fired;

static void *failing_alloc(void *stream, size_t bytes) {
  if (rank == 0 && fail_at && ++seen >= fail_at) {
    fired = 1;
    return NULL;
  }
  return squall__kernels_host.alloc(stream, bytes);
}

static void arm(int a) {
  fail_at = a;
  seen = fired = 0;
}

/* Rank 0's node reduce-scatter cannot reserve its ring (its malloc). */
static int ring_fail;
static squallResult_t (*real_reserve)(void *, size_t);
static squallResult_t (*real_split)(void *, void *, int, int, squall_transport *);

static squallResult_t failing_reserve(void *ctx, size_t s) {
  if (rank == 0 && ring_fail) {
    fired = 1;
    return squall__fail(squallSystemError, "injected: no memory for a %zu-float ring", s);
  }
  return real_reserve(ctx, s);
}

static squallResult_t wrapping_split(void *ctx, void *stream, int color, int key, squall_transport *sub) {
  squallResult_t r = real_split(ctx, stream, color, key, sub);
  if (r == squallSuccess && sub->reserve_reduce_scatter) {
    real_reserve = sub->reserve_reduce_scatter;
    sub->reserve_reduce_scatter = failing_reserve;
  }
  return r;
}

/* Headers (and other host all-reduce(min)s) on the engine's transport. */
static int min_calls;
static squallResult_t (*real_min)(void *, void *, int64_t *, size_t);

static squallResult_t counting_min(void *ctx, void *stream, int64_t *buf, size_t n) {
  min_calls++;
  return real_min(ctx, stream, buf, n);
}

/* ------------------------------------------------------------- fixture */
static void setup(engine_fixture *f, int device) {
  ef_open(f);
  real_split = f->tr.split;
  f->tr.split = wrapping_split;
  real_min = f->tr.allreduce_min_i64_host;
  f->tr.allreduce_min_i64_host = counting_min;
  f->k.alloc = failing_alloc;
  /* the host set with a device set's abilities: the engine exchanges
   * headers as on a GPU */
  if (device) {
    f->k.name = "host-as-device";
    f->k.on_host = f->k.topk_in_rounds = f->k.twophase_alone = 0;
  }
  ef_engine(f);
  arm(0);
  ring_fail = 0;
}

/* One call of a fresh tensor of n elements (seed): its route and reason,
 * the same on every rank; a compressed result equals the model. */
static squall_decision call(engine_fixture *f, size_t n, uint64_t seed, int capturing, float *g, float *out) {
  hm_fill(g, n, seed, rank);
  ck_assert_int_eq(squall__engine_reset_residuals(f->e), squallSuccess); /* the model starts from zero */
  /* clang-format off */
  squall_call c = {.send = g, .recv = out, .count = n, .dtype = SQ_DT_F32, .elsize = 4, .op = SQ_OP_SUM,
                   .premul = 1.0f, .capturing = capturing};
  /* clang-format on */
  squall_decision d;
  ck_assert_int_eq(squall__engine_allreduce(f->e, &c, &d), squallSuccess);
  int reason = d.route == SQ_ROUTE_PASS ? (int)d.reason : -1; /* set for a pass-through only */
  ck_assert_msg(same_everywhere(d.route) && same_everywhere(reason),
                "n=%zu: ranks took different routes (this rank: route %d, reason %d)", n, (int)d.route,
                reason);
  if (d.route == SQ_ROUTE_TWOLEVEL || d.route == SQ_ROUTE_TOPK) {
    float *ref = malloc(n * 4);
    if (d.route == SQ_ROUTE_TWOLEVEL) hm_model_two_level(squall__topk_k, nranks, rpn, seed, n, 0.01, ref);
    else hm_model_flat(squall__topk_k, nranks, seed, n, 0.01, ref);
    ck_assert_msg(memcmp(out, ref, n * 4) == 0, "n=%zu: not the model's bits (route %d)", n, (int)d.route);
    free(ref);
  }
  return d;
}

/* A growing two-level call whose a-th allocation fails on rank 0: every
 * rank passes it through together; a captured call of it then passes
 * through everywhere too (its memory was never planned); the retry runs
 * two-level with the model's bits. */
static void grow_with_fault(engine_fixture *f, int device) {
  /* the cost model off: its variant rhythm counts a call every rank passed
   * through for a failed preparation, and would run the retry flat */
  use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=off");
  size_t n0 = 4003, nmax = 4003 * 27;
  float *g = malloc(nmax * 4), *out = malloc(nmax * 4);
  squall_decision d = call(f, n0, 1, 0, g, out);
  ck_assert_int_eq(d.route, SQ_ROUTE_TWOLEVEL);
  for (int a = 1; a <= 3; a++) { /* the scratch, the inner engine's scratch, the shard residual */
    /* odd: padded shards, so the scratch holds the data too; 3x larger
     * each time, so that every buffer grows to its exact size (after a
     * capture a smaller growth first asks for twice the old scratch) */
    size_t n = n0 * (a == 1 ? 3 : a == 2 ? 9
                                         : 27);
    int headers = min_calls;
    arm(a);
    d = call(f, n, 10 + (uint64_t)a, 0, g, out);
    int hit = fired;
    arm(0);
    if (rank == 0) ck_assert_msg(hit, "%s engine: a growing two-level call made fewer than %d allocations",
                                 device ? "device" : "host", a);
    ck_assert_int_eq(d.route, SQ_ROUTE_PASS);
    ck_assert_int_eq(d.reason, squallPassError);
    ck_assert_msg(min_calls > headers, "%s engine: two-level memory grew without a header",
                  device ? "device" : "host");
    if (device) {
      d = call(f, n, 20 + (uint64_t)a, 1, g, out);
      ck_assert_int_eq(d.route, SQ_ROUTE_PASS);
      ck_assert_int_eq(d.reason, squallPassCapture);
    }
    d = call(f, n, 30 + (uint64_t)a, 0, g, out);
    ck_assert_int_eq(d.route, SQ_ROUTE_TWOLEVEL);
    if (device) { /* planned now on every rank: captured calls run */
      headers = min_calls;
      d = call(f, n, 40 + (uint64_t)a, 1, g, out);
      ck_assert_int_eq(d.route, SQ_ROUTE_TWOLEVEL);
      ck_assert_int_eq(min_calls, headers); /* and without a header */
    }
  }
  free(g);
  free(out);
}

START_TEST(test_two_level_growth_alloc_fault_host) {
  if (!two_level) return;
  engine_fixture f;
  setup(&f, 0);
  grow_with_fault(&f, 0);
  ef_close(&f);
}
END_TEST

START_TEST(test_two_level_growth_alloc_fault_device) {
  if (!two_level) return;
  engine_fixture f;
  setup(&f, 1);
  grow_with_fault(&f, 1);
  ef_close(&f);
}
END_TEST

/* The node reduce-scatter's ring is reserved before the header too. */
START_TEST(test_ring_reserve_fault) {
  if (!two_level) return;
  for (int device = 0; device < 2; device++) {
    engine_fixture f;
    setup(&f, device);
    /* cost model off: its device schedule would run some calls plain */
    use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=off");
    size_t n0 = 3001, n = 12001;
    float *g = malloc(n * 4), *out = malloc(n * 4);
    ck_assert_int_eq(call(&f, n0, 50, 0, g, out).route, SQ_ROUTE_TWOLEVEL);
    ring_fail = 1;
    fired = 0;
    squall_decision d = call(&f, n, 51, 0, g, out);
    ring_fail = 0;
    if (rank == 0) ck_assert_msg(fired, "the ring was not reserved in prepare");
    ck_assert_int_eq(d.route, SQ_ROUTE_PASS);
    ck_assert_int_eq(d.reason, squallPassError);
    ck_assert_int_eq(call(&f, n, 52, 0, g, out).route, SQ_ROUTE_TWOLEVEL);
    ef_close(&f);
    free(g);
    free(out);
  }
}
END_TEST

/* Flat path, device engine: rank 0 fails to grow its scratch. The old
 * scratch stays, and the plan does not grow, so a captured call of that
 * size passes through on every rank alike (not: rank 0 alone, for lack of
 * memory, while its peers compress). */
START_TEST(test_flat_capture_after_failed_growth) {
  engine_fixture f;
  setup(&f, 1);
  /* cost model off: its device schedule would run some calls plain */
  use_config("SQUALL_COMPRESS=topk:0.01 SQUALL_HIERARCHY=flat SQUALL_COST_MODEL=off");
  size_t n0 = 3001, n = 20011;
  float *g = malloc(n * 4), *out = malloc(n * 4);
  squall_decision d = call(&f, n0, 60, 0, g, out);
  ck_assert_int_ne(d.route, SQ_ROUTE_PASS);
  arm(1);
  d = call(&f, n, 61, 0, g, out);
  if (rank == 0) ck_assert(fired);
  arm(0);
  ck_assert_int_eq(d.route, SQ_ROUTE_PASS);
  ck_assert_int_eq(d.reason, squallPassError);
  d = call(&f, n, 62, 1, g, out);
  ck_assert_int_eq(d.route, SQ_ROUTE_PASS);
  ck_assert_int_eq(d.reason, squallPassCapture);
  d = call(&f, n0, 63, 1, g, out); /* planned before: runs, rank 0 still has its old scratch */
  ck_assert_int_ne(d.route, SQ_ROUTE_PASS);
  ck_assert_int_ne(call(&f, n, 64, 0, g, out).route, SQ_ROUTE_PASS);
  ck_assert_int_ne(call(&f, n, 65, 1, g, out).route, SQ_ROUTE_PASS);
  ef_close(&f);
  free(g);
  free(out);
}
END_TEST

static int layout(void) {
  two_level = mc_two_level(nranks, &rpn);
  return MC_RUN;
}

int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "hierarchy-faults", .rank = &rank, .nranks = &nranks,
      .setup = layout,
      .cases = MC_CASES(
          {"one rank", 120, MC_TESTS(test_two_level_growth_alloc_fault_host, test_two_level_growth_alloc_fault_device,
                                     test_ring_reserve_fault, test_flat_capture_after_failed_growth)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

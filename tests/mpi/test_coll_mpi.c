/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_coll_mpi.c - squallColl over collectives a caller provides, here
 * written on MPI. The same engine runs behind squallMpiAllreduce, so for
 * every codec a squallColl call must give squallMpiAllreduce's bits, step
 * after step (the residuals evolve alike); a pass-through gives plain
 * MPI_Allreduce's; a failing collective of the caller's fails the call on
 * every rank and leaves the residual as it was; bad tables and arguments
 * are refused with the argument named. squallCollReduceScatter likewise
 * against squallMpiReduceScatterBlock and MPI_Reduce_scatter_block.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_mpi.h" /* squall__mpi_get_scatter_residual */
#include "codecs/codec.h"
#include "common/internal.h"
#include "mpi_check.h"
#include "squall_coll.h"
#include "squall_mpi.h"

static int rank, nranks;

/* ------------------------------------------------- the caller's functions */
typedef struct {
  MPI_Comm comm;
  int calls;   /* collectives so far */
  int fail_at; /* the collective (1-based) that fails on every rank; 0: none */
  int gathers; /* allGather calls */
} mpi_ctx;

static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  squall__half_sum(SQ_HALF_FP16, in, inout, (size_t)*len);
}
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  squall__half_sum(SQ_HALF_BF16, in, inout, (size_t)*len);
}

static int failing(mpi_ctx *m) { return ++m->calls == m->fail_at; }

static int c_allreduce(void *ctx, const void *send, void *recv, size_t count, squallDataType_t type,
                       squallRedOp_t op, void *stream) {
  mpi_ctx *m = ctx;
  (void)stream;
  if (failing(m)) return 42;
  static MPI_Op f16, bf16;
  if (f16 == MPI_OP_NULL || f16 == 0) {
    MPI_Op_create(sum_f16, 1, &f16);
    MPI_Op_create(sum_bf16, 1, &bf16);
  }
  MPI_Datatype t = type == squallFloat32 ? MPI_FLOAT : type == squallInt64 ? MPI_INT64_T
                                                                           : MPI_UINT16_T;
  MPI_Op o = op == squallMax ? MPI_MAX : op == squallMin ? MPI_MIN
                                                         : MPI_SUM;
  if (type == squallFloat16) o = f16;
  if (type == squallBfloat16) o = bf16;
  int rc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, t, o, m->comm);
  if (rc == MPI_SUCCESS && op == squallAvg && type == squallFloat32) /* a pass-through's average */
    for (size_t i = 0; i < count; i++) ((float *)recv)[i] /= (float)nranks;
  return rc;
}

static int c_allgather(void *ctx, const void *send, void *recv, size_t bytes, void *stream) {
  mpi_ctx *m = ctx;
  (void)stream;
  m->gathers++;
  if (failing(m)) return 43;
  return MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, m->comm);
}

static int c_alltoall(void *ctx, const void *send, void *recv, size_t bytes, void *stream) {
  mpi_ctx *m = ctx;
  (void)stream;
  if (failing(m)) return 44;
  return MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, m->comm);
}

static int c_reducescatter(void *ctx, const void *send, void *recv, size_t recvcount, squallDataType_t type,
                           squallRedOp_t op, void *stream) {
  mpi_ctx *m = ctx;
  (void)stream;
  if (failing(m) || type != squallFloat32 || (op != squallSum && op != squallAvg)) return 45;
  /* NCCL's in place (recv is this rank's block of send) is aliasing to
   * MPI, which MPICH refuses: sum from a copy */
  size_t n = recvcount * (size_t)nranks;
  const float *s = send;
  float *copy = NULL;
  if ((const float *)recv >= s && (const float *)recv < s + n) {
    copy = malloc(n * sizeof(float));
    if (copy == NULL) return 46;
    memcpy(copy, send, n * sizeof(float));
    send = copy;
  }
  int rc = MPI_Reduce_scatter_block(send, recv, (int)recvcount, MPI_FLOAT, MPI_SUM, m->comm);
  free(copy);
  if (rc == MPI_SUCCESS && op == squallAvg)
    for (size_t i = 0; i < recvcount; i++) ((float *)recv)[i] /= (float)nranks;
  return rc;
}

static squallCollectives_t table(mpi_ctx *m) {
  squallCollectives_t c = SQUALL_COLLECTIVES_INIT;
  c.ctx = m;
  c.rank = rank;
  c.nranks = nranks;
  c.allReduce = c_allreduce;
  c.allGather = c_allgather;
  c.allToAll = c_alltoall;
  c.reduceScatter = c_reducescatter;
  return c;
}

/* The configuration of a case (mc_use_config's), for squallCollCreate. */
static squallConfig_t config_of(const char *spec) {
  mc_use_config(spec);
  squallConfig_t c;
  squallGetConfig(&c);
  return c;
}

static void fill(float *x, size_t n, int step) {
  uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1) + (uint64_t)step * 7919u;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((int64_t)(s >> 40) - (1 << 23)) / 1048576.0f; /* dyadic: sums are exact */
  }
}

static void assert_same_bits(const float *a, const float *b, size_t n, const char *what, int step) {
  for (size_t i = 0; i < n; i++)
    MC_CHECK(memcmp(&a[i], &b[i], 4) == 0, "%s, step %d: element %zu is %a, squallMpiAllreduce gave %a", what, step,
             i, (double)a[i], (double)b[i]);
}

/* The plain reduce-scatter of g + r (n floats each: the floats a fold
 * sends) into out (rc floats); work holds n floats. */
static void plain_of_fold(const float *g, const float *r, float *work, float *out, size_t rc, size_t n) {
  for (size_t i = 0; i < n; i++) work[i] = g[i] + r[i];
  PMPI_Reduce_scatter_block(work, out, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* A residual of n floats that a call folded: none kept, or all zeros. */
static void assert_emptied(int kept, const float *r, size_t n, const char *spec, const char *what) {
  for (size_t i = 0; kept && i < n; i++)
    MC_CHECK(r[i] == 0.0f, "%s, compression off: residual[%zu] = %g left (%s)", spec, i, r[i], what);
}

/* ------------------------------------------------------------ the tests */

START_TEST(test_same_bits_as_mpi) {
  const char *specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=bf16", "SQUALL_COMPRESS=topk:0.01",
                         "SQUALL_COMPRESS=topk:0.05 SQUALL_TOPK_VALUES=fp16", "SQUALL_COMPRESS=int8",
                         "SQUALL_COMPRESS=int4", "SQUALL_COMPRESS=fp8", "SQUALL_COMPRESS=fp16 SQUALL_HALF_ACCUM=fp32"};
  size_t n = 5003;
  float *g = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
  for (size_t s = 0; s < SQ_ARRAY_SIZE(specs); s++) {
    squallConfig_t cfg = config_of(specs[s]);
    mpi_ctx m = {0};
    MPI_Comm_dup(MPI_COMM_WORLD, &m.comm);
    MPI_Comm mine;
    MPI_Comm_dup(MPI_COMM_WORLD, &mine);
    squallCollectives_t t = table(&m);
    squallColl_t coll;
    ck_assert_msg(squallCollCreate(&t, &cfg, &coll) == squallSuccess, "%s", squallGetLastError());
    for (int step = 0; step < 6; step++) {
      fill(g, n, step);
      ck_assert_msg(squallCollAllReduce(coll, g, a, n, squallFloat32, squallSum, NULL, NULL) == squallSuccess,
                    "%s: %s", specs[s], squallGetLastError());
      ck_assert_int_eq(squallMpiAllreduce(g, b, (int)n, MPI_FLOAT, MPI_SUM, mine), MPI_SUCCESS);
      assert_same_bits(a, b, n, specs[s], step);
    }
    squallStats_t st;
    ck_assert_int_eq(squallCollStats(coll, &st), squallSuccess);
    ck_assert_msg(st.compressedCalls == 6, "%s: %llu of 6 calls compressed", specs[s],
                  (unsigned long long)st.compressedCalls);
    squallCollDestroy(coll);
    squallMpiCommFree(mine);
    MPI_Comm_free(&mine);
    MPI_Comm_free(&m.comm);
  }
  free(g);
  free(a);
  free(b);
}
END_TEST

/* A residual keyed by the caller follows the tensor into new buffers: the
 * same bits as one that keeps its buffers. */
START_TEST(test_key_follows_moving_buffers) {
  squallConfig_t cfg = config_of("SQUALL_COMPRESS=topk:0.01");
  size_t n = 4096;
  mpi_ctx m1 = {0}, m2 = {0};
  MPI_Comm_dup(MPI_COMM_WORLD, &m1.comm);
  MPI_Comm_dup(MPI_COMM_WORLD, &m2.comm);
  squallCollectives_t t1 = table(&m1), t2 = table(&m2);
  squallColl_t fixed, moving;
  ck_assert_int_eq(squallCollCreate(&t1, &cfg, &fixed), squallSuccess);
  ck_assert_int_eq(squallCollCreate(&t2, &cfg, &moving), squallSuccess);
  float *g = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
  for (int step = 0; step < 5; step++) {
    float *gm = malloc(n * 4), *bm = malloc(n * 4); /* new buffers every step */
    fill(g, n, step);
    memcpy(gm, g, n * 4);
    ck_assert_int_eq(squallCollAllReduce(fixed, g, a, n, squallFloat32, squallSum, NULL, NULL), squallSuccess);
    ck_assert_int_eq(squallCollAllReduce(moving, gm, bm, n, squallFloat32, squallSum, (const void *)(uintptr_t)7,
                                         NULL),
                     squallSuccess);
    assert_same_bits(bm, a, n, "keyed", step);
    free(gm);
    free(bm);
  }
  float *ra = malloc(n * 4), *rb = malloc(n * 4);
  ck_assert_int_eq(squallCollGetResidual(fixed, g, n, squallFloat32, ra), squallSuccess);
  ck_assert_int_eq(squallCollGetResidual(moving, (const void *)(uintptr_t)7, n, squallFloat32, rb), squallSuccess);
  assert_same_bits(rb, ra, n, "keyed residual", 5);
  squallCollDestroy(fixed);
  squallCollDestroy(moving);
  MPI_Comm_free(&m1.comm);
  MPI_Comm_free(&m2.comm);
  free(g);
  free(a);
  free(b);
  free(ra);
  free(rb);
}
END_TEST

/* Calls squall does not compress give the plain all-reduce's bits. */
START_TEST(test_passthrough_is_plain) {
  size_t n = 3001;
  float *g = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
  const char *specs[] = {"SQUALL_COMPRESS=none", "SQUALL_COMPRESS=topk:0.01 SQUALL_MIN_BYTES=1M"};
  for (size_t s = 0; s < SQ_ARRAY_SIZE(specs); s++) {
    squallConfig_t cfg = config_of(specs[s]);
    mpi_ctx m = {0};
    MPI_Comm_dup(MPI_COMM_WORLD, &m.comm);
    squallCollectives_t t = table(&m);
    squallColl_t coll;
    ck_assert_int_eq(squallCollCreate(&t, &cfg, &coll), squallSuccess);
    fill(g, n, 1);
    ck_assert_int_eq(squallCollAllReduce(coll, g, a, n, squallFloat32, squallSum, NULL, NULL), squallSuccess);
    MPI_Allreduce(g, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    assert_same_bits(a, b, n, specs[s], 0);
    /* an average passes through as the caller's own average */
    ck_assert_int_eq(squallCollAllReduce(coll, g, a, n, squallFloat32, squallAvg, NULL, NULL), squallSuccess);
    for (size_t i = 0; i < n; i++) b[i] /= (float)nranks;
    assert_same_bits(a, b, n, "an average passed through", 0);
    ck_assert_int_eq(m.gathers, 0);
    squallCollDestroy(coll);
    MPI_Comm_free(&m.comm);
  }
  free(g);
  free(a);
  free(b);
}
END_TEST

/* A caller's collective that fails, at each point of a call in turn:
 * the call fails with squallSystemError naming it, and the residual is as
 * before the call. */
START_TEST(test_failure_restores_residual) {
  const char *specs[] = {"SQUALL_COMPRESS=topk:0.01", "SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=int8"};
  size_t n = 4099;
  float *g = malloc(n * 4), *out = malloc(n * 4), *before = malloc(n * 4), *after = malloc(n * 4);
  for (size_t s = 0; s < SQ_ARRAY_SIZE(specs); s++) {
    for (int at = 1; at <= 4; at++) {
      squallConfig_t cfg = config_of(specs[s]);
      mpi_ctx m = {0};
      MPI_Comm_dup(MPI_COMM_WORLD, &m.comm);
      squallCollectives_t t = table(&m);
      squallColl_t coll;
      ck_assert_int_eq(squallCollCreate(&t, &cfg, &coll), squallSuccess);
      fill(g, n, 0);
      ck_assert_int_eq(squallCollAllReduce(coll, g, out, n, squallFloat32, squallSum, NULL, NULL), squallSuccess);
      ck_assert_int_eq(squallCollGetResidual(coll, g, n, squallFloat32, before), squallSuccess);
      int calls = m.calls;
      m.fail_at = calls + at; /* the at-th collective of the next call */
      fill(g, n, 1);
      squallResult_t r = squallCollAllReduce(coll, g, out, n, squallFloat32, squallSum, NULL, NULL);
      if (m.calls >= m.fail_at) {
        ck_assert_msg(r == squallSystemError, "%s, collective %d: result %d", specs[s], at, (int)r);
        ck_assert_msg(strstr(squallGetLastError(), "the caller's") != NULL, "%s: '%s' names no collective",
                      specs[s], squallGetLastError());
        ck_assert_int_eq(squallCollGetResidual(coll, g, n, squallFloat32, after), squallSuccess);
        assert_same_bits(after, before, n, "residual after a failed call", at);
      } else {
        ck_assert_int_eq(r, squallSuccess); /* the call had fewer collectives */
      }
      squallCollDestroy(coll);
      MPI_Comm_free(&m.comm);
    }
  }
  free(g);
  free(out);
  free(before);
  free(after);
}
END_TEST

START_TEST(test_bad_arguments) {
  mpi_ctx m = {0};
  squallCollectives_t t = table(&m);
  squallColl_t coll = (squallColl_t)1;
  squallCollectives_t bad = t;
  bad.allGather = NULL;
  ck_assert_int_eq(squallCollCreate(&bad, NULL, &coll), squallInvalidArgument);
  ck_assert_ptr_null(coll);
  ck_assert_msg(strstr(squallGetLastError(), "allGather") != NULL, "%s", squallGetLastError());
  bad = t;
  bad.size = 8;
  ck_assert_int_eq(squallCollCreate(&bad, NULL, &coll), squallInvalidArgument);
  ck_assert_msg(strstr(squallGetLastError(), "size") != NULL, "%s", squallGetLastError());
  bad = t;
  bad.rank = nranks;
  ck_assert_int_eq(squallCollCreate(&bad, NULL, &coll), squallInvalidArgument);
  ck_assert_int_eq(squallCollCreate(NULL, NULL, &coll), squallInvalidArgument);
  squallConfig_t cfg = config_of("SQUALL_COMPRESS=fp16");
  cfg.topkRatio = -1;
  ck_assert_int_eq(squallCollCreate(&t, &cfg, &coll), squallInvalidArgument);
  ck_assert_int_eq(squallCollCreate(&t, NULL, &coll), squallSuccess);
  float x[4] = {0};
  ck_assert_int_eq(squallCollAllReduce(coll, x, x, 4, (squallDataType_t)9, squallSum, NULL, NULL),
                   squallInvalidArgument);
  ck_assert_int_eq(squallCollAllReduce(coll, NULL, x, 4, squallFloat32, squallSum, NULL, NULL),
                   squallInvalidArgument);
  ck_assert_int_eq(m.calls, 0); /* refused before anything collective */
  ck_assert_int_eq(squallCollDestroy(coll), squallSuccess);
  ck_assert_int_eq(squallCollDestroy(NULL), squallSuccess);
}
END_TEST

/* ------------------------------------------------------- reduce-scatter */

/* One collective set on a fresh duplicate of MPI_COMM_WORLD. */
typedef struct {
  mpi_ctx m;
  squallCollectives_t t;
  squallColl_t coll;
} rs_case;

static void rs_open(rs_case *c, const char *spec) {
  squallConfig_t cfg = config_of(spec);
  memset(c, 0, sizeof *c);
  MPI_Comm_dup(MPI_COMM_WORLD, &c->m.comm);
  c->t = table(&c->m);
  ck_assert_msg(squallCollCreate(&c->t, &cfg, &c->coll) == squallSuccess, "%s", squallGetLastError());
}

static void rs_close(rs_case *c) {
  squallCollDestroy(c->coll);
  MPI_Comm_free(&c->m.comm);
}

/* Every codec: squallMpiReduceScatterBlock's bits and residual, step
 * after step, out of place and in place (recv = this rank's block of
 * send; MPI_IN_PLACE for the MPI twin); the compressed ones counted as
 * compressed. Then a step with
 * compression off: each carries its tensor's residual into the plain
 * reduce-scatter (the fold), the same bits again, exactly the plain
 * reduce-scatter of g + r, no residual left, and in place the caller's
 * other blocks as they were. */
START_TEST(test_rs_same_bits_as_mpi) {
  const char *specs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=bf16", "SQUALL_COMPRESS=int8",
                         "SQUALL_COMPRESS=int4", "SQUALL_COMPRESS=fp8", "SQUALL_COMPRESS=topk:0.05"};
  size_t rc = 1001, n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *inplace = malloc(n * 4), *a = malloc(rc * 4), *b = malloc(rc * 4);
  float *ra = malloc(n * 4), *rb = malloc(n * 4), *mpi_ip = malloc(n * 4);
  for (size_t s = 0; s < SQ_ARRAY_SIZE(specs); s++) {
    rs_case c, d;
    rs_open(&c, specs[s]);
    rs_open(&d, specs[s]);
    MPI_Comm mine, mine_ip; /* the MPI twin, out of place and with MPI_IN_PLACE */
    MPI_Comm_dup(MPI_COMM_WORLD, &mine);
    MPI_Comm_dup(MPI_COMM_WORLD, &mine_ip);
    const void *key = (const void *)(uintptr_t)3;
    for (int step = 0; step < 5; step++) {
      fill(g, n, step);
      memcpy(inplace, g, n * 4);
      ck_assert_msg(squallCollReduceScatter(c.coll, g, a, rc, squallFloat32, squallSum, key, NULL) == squallSuccess,
                    "%s: %s", specs[s], squallGetLastError());
      float *own = inplace + (size_t)rank * rc;
      ck_assert_msg(squallCollReduceScatter(d.coll, inplace, own, rc, squallFloat32, squallSum, key, NULL) ==
                        squallSuccess,
                    "%s in place: %s", specs[s], squallGetLastError());
      ck_assert_int_eq(squallMpiReduceScatterBlock(g, b, (int)rc, MPI_FLOAT, MPI_SUM, mine), MPI_SUCCESS);
      memcpy(mpi_ip, g, n * 4);
      ck_assert_int_eq(squallMpiReduceScatterBlock(MPI_IN_PLACE, mpi_ip, (int)rc, MPI_FLOAT, MPI_SUM, mine_ip),
                       MPI_SUCCESS);
      assert_same_bits(a, b, rc, specs[s], step);
      assert_same_bits(own, b, rc, "in place", step);
      assert_same_bits(mpi_ip, b, rc, "MPI_IN_PLACE", step);
    }
    /* a residual where the MPI twin keeps one (none where both pass through), with its bits */
    int have = squallCollGetResidual(c.coll, key, n, squallFloat32, ra) == squallSuccess;
    int twin = squall__mpi_get_scatter_residual(mine, g, (int)rc, MPI_FLOAT, rb) == MPI_SUCCESS;
    ck_assert_msg(have == twin, "%s: a residual here %d, in squallMpiReduceScatterBlock %d", specs[s], have, twin);
    if (have) assert_same_bits(ra, rb, n, "reduce-scatter residual", 5);
    squallStats_t st;
    ck_assert_int_eq(squallCollStats(c.coll, &st), squallSuccess);
    ck_assert_msg(st.compressedCalls + st.passthroughCalls == 5, "%s: %llu calls counted", specs[s],
                  (unsigned long long)(st.compressedCalls + st.passthroughCalls));
    if (strstr(specs[s], "topk") == NULL)
      ck_assert_msg(st.compressedCalls == 5, "%s: %llu of 5 calls compressed", specs[s],
                    (unsigned long long)st.compressedCalls);
    squallConfig_t off = config_of("SQUALL_COMPRESS=none");
    ck_assert_int_eq(squallCollSetConfig(c.coll, &off), squallSuccess);
    ck_assert_int_eq(squallCollSetConfig(d.coll, &off), squallSuccess);
    fill(g, n, 5);
    memcpy(inplace, g, n * 4);
    if (!have) memset(rb, 0, n * 4);
    float *plain = malloc(rc * 4);
    plain_of_fold(g, rb, ra, plain, rc, n);
    ck_assert(squallCollReduceScatter(c.coll, g, a, rc, squallFloat32, squallSum, key, NULL) == squallSuccess);
    ck_assert(squallCollReduceScatter(d.coll, inplace, inplace + (size_t)rank * rc, rc, squallFloat32, squallSum, key,
                                      NULL) == squallSuccess);
    ck_assert_int_eq(squallMpiReduceScatterBlock(g, b, (int)rc, MPI_FLOAT, MPI_SUM, mine), MPI_SUCCESS);
    assert_same_bits(b, plain, rc, "compression off: the plain reduce-scatter of g + r", 5);
    assert_same_bits(a, plain, rc, "compression off, squallColl", 5);
    assert_same_bits(inplace + (size_t)rank * rc, plain, rc, "compression off, squallColl in place", 5);
    for (size_t i = 0; i < n; i++) /* the fold is sent from squall's own buffer: the caller's other blocks stay */
      if (i / rc != (size_t)rank)
        MC_CHECK(inplace[i] == g[i], "%s, compression off, in place: send[%zu] changed", specs[s], i);
    /* MPI_IN_PLACE: its own residual rides along; the result lands in recvbuf's first block */
    if (squall__mpi_get_scatter_residual(mine_ip, mpi_ip, (int)rc, MPI_FLOAT, rb) != MPI_SUCCESS) memset(rb, 0, n * 4);
    plain_of_fold(g, rb, ra, plain, rc, n);
    memcpy(mpi_ip, g, n * 4);
    ck_assert_int_eq(squallMpiReduceScatterBlock(MPI_IN_PLACE, mpi_ip, (int)rc, MPI_FLOAT, MPI_SUM, mine_ip),
                     MPI_SUCCESS);
    assert_same_bits(mpi_ip, plain, rc, "compression off, MPI_IN_PLACE: the plain reduce-scatter of g + r", 5);
    assert_emptied(squallCollGetResidual(c.coll, key, n, squallFloat32, rb) == squallSuccess, rb, n, specs[s],
                   "squallColl");
    assert_emptied(squall__mpi_get_scatter_residual(mine, g, (int)rc, MPI_FLOAT, rb) == MPI_SUCCESS, rb, n, specs[s],
                   "MPI");
    assert_emptied(squall__mpi_get_scatter_residual(mine_ip, mpi_ip, (int)rc, MPI_FLOAT, rb) == MPI_SUCCESS, rb, n,
                   specs[s], "MPI_IN_PLACE");
    free(plain);
    rs_close(&c);
    rs_close(&d);
    squallMpiCommFree(mine);
    MPI_Comm_free(&mine);
    squallMpiCommFree(mine_ip);
    MPI_Comm_free(&mine_ip);
  }
  free(g), free(inplace), free(a), free(b), free(ra), free(rb), free(mpi_ip);
}
END_TEST

/* What squall does not compress is the caller's reduceScatter, bits and
 * all: codec none, an average, a call below SQUALL_MIN_BYTES. */
START_TEST(test_rs_passthrough_is_plain) {
  size_t rc = 777, n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *a = malloc(rc * 4), *b = malloc(rc * 4);
  const char *specs[] = {"SQUALL_COMPRESS=none", "SQUALL_COMPRESS=fp16 SQUALL_MIN_BYTES=1M"};
  for (size_t s = 0; s < SQ_ARRAY_SIZE(specs); s++) {
    rs_case c;
    rs_open(&c, specs[s]);
    fill(g, n, 2);
    ck_assert_int_eq(squallCollReduceScatter(c.coll, g, a, rc, squallFloat32, squallSum, NULL, NULL), squallSuccess);
    MPI_Reduce_scatter_block(g, b, (int)rc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    assert_same_bits(a, b, rc, specs[s], 0);
    ck_assert_int_eq(squallCollReduceScatter(c.coll, g, a, rc, squallFloat32, squallAvg, NULL, NULL), squallSuccess);
    for (size_t i = 0; i < rc; i++) b[i] /= (float)nranks;
    assert_same_bits(a, b, rc, "an average passed through", 0);
    ck_assert_int_eq(c.m.gathers, 0);
    squallStats_t st;
    ck_assert_int_eq(squallCollStats(c.coll, &st), squallSuccess);
    ck_assert_msg(st.passthroughCalls == 2, "%s: %llu pass-throughs", specs[s],
                  (unsigned long long)st.passthroughCalls);
    rs_close(&c);
  }
  free(g), free(a), free(b);
}
END_TEST

/* A caller's collective that fails inside a compressed reduce-scatter
 * fails the call on every rank, and the residual is as before it. */
START_TEST(test_rs_failure_restores_residual) {
  size_t rc = 2003, n = rc * (size_t)nranks;
  float *g = malloc(n * 4), *out = malloc(rc * 4), *before = malloc(n * 4), *after = malloc(n * 4);
  for (int at = 1; at <= 3; at++) {
    rs_case c;
    rs_open(&c, "SQUALL_COMPRESS=int8");
    fill(g, n, 0);
    ck_assert_int_eq(squallCollReduceScatter(c.coll, g, out, rc, squallFloat32, squallSum, NULL, NULL), squallSuccess);
    ck_assert_int_eq(squallCollGetResidual(c.coll, g, n, squallFloat32, before), squallSuccess);
    c.m.fail_at = c.m.calls + at;
    fill(g, n, 1);
    squallResult_t r = squallCollReduceScatter(c.coll, g, out, rc, squallFloat32, squallSum, NULL, NULL);
    if (c.m.calls >= c.m.fail_at) {
      ck_assert_msg(r == squallSystemError, "collective %d: result %d", at, (int)r);
      ck_assert_msg(strstr(squallGetLastError(), "the caller's") != NULL, "'%s' names no collective",
                    squallGetLastError());
      ck_assert_int_eq(squallCollGetResidual(c.coll, g, n, squallFloat32, after), squallSuccess);
      assert_same_bits(after, before, n, "residual after a failed reduce-scatter", at);
    } else {
      ck_assert_int_eq(r, squallSuccess);
    }
    rs_close(&c);
  }
  free(g), free(out), free(before), free(after);
}
END_TEST

/* Refused before anything collective, naming the problem. */
START_TEST(test_rs_bad_arguments) {
  rs_case c;
  rs_open(&c, "SQUALL_COMPRESS=fp16");
  float x[64] = {0}, y[64] = {0};
  size_t rc = 64 / (size_t)nranks;
  ck_assert_int_eq(squallCollReduceScatter(c.coll, x, x + 1, rc, squallFloat32, squallSum, NULL, NULL),
                   squallInvalidArgument);
  ck_assert_msg(strstr(squallGetLastError(), "overlaps") != NULL, "%s", squallGetLastError());
  ck_assert_int_eq(squallCollReduceScatter(c.coll, x, x, SIZE_MAX / 2, squallFloat32, squallSum, NULL, NULL),
                   squallInvalidArgument);
  ck_assert_msg(strstr(squallGetLastError(), "overflows") != NULL, "%s", squallGetLastError());
  ck_assert_int_eq(squallCollReduceScatter(c.coll, NULL, x, rc, squallFloat32, squallSum, NULL, NULL),
                   squallInvalidArgument);
  ck_assert_int_eq(squallCollReduceScatter(c.coll, x, x, rc, (squallDataType_t)9, squallSum, NULL, NULL),
                   squallInvalidArgument);
  ck_assert_int_eq(c.m.calls, 0);
  /* recvcount 0: nothing to do, as the caller's own reduce-scatter */
  ck_assert_int_eq(squallCollReduceScatter(c.coll, x, y, 0, squallFloat32, squallSum, NULL, NULL), squallSuccess);
  rs_close(&c);
  mpi_ctx m = {0};
  squallCollectives_t t = table(&m);
  t.reduceScatter = NULL;
  squallColl_t coll;
  ck_assert_int_eq(squallCollCreate(&t, NULL, &coll), squallSuccess);
  ck_assert_int_eq(squallCollReduceScatter(coll, x, x, rc, squallFloat32, squallSum, NULL, NULL),
                   squallInvalidArgument);
  ck_assert_msg(strstr(squallGetLastError(), "reduceScatter") != NULL, "%s", squallGetLastError());
  squallCollDestroy(coll);
}
END_TEST

int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "coll", .rank = &rank, .nranks = &nranks,
      .cases = MC_CASES(
          {"coll", MC_NO_TIMEOUT, MC_TESTS(test_bad_arguments, test_same_bits_as_mpi, test_key_follows_moving_buffers,
                                           test_passthrough_is_plain, test_failure_restores_residual,
                                           test_rs_bad_arguments, test_rs_same_bits_as_mpi,
                                           test_rs_passthrough_is_plain, test_rs_failure_restores_residual)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_audit_mpi.c - the standing adversarial suite of the MPI path (run
 * (tests/mpi/runs.list) on 2 ranks and on 4, where a faked
 * MPI_COMM_TYPE_SHARED makes the real node discovery see 2 nodes of 2):
 *   - every residual is delivered: many tensors of one size class, in a
 *     fixed and a shuffled order, in a class the cost model declines; a
 *     call that passes through carries what its tensor's residual held
 *     (flat and two-level shard residuals), and the ledger stays exact;
 *   - error handlers changed after the first compressed call, both ways,
 *     with a failure injected in the node ring (squall's own node
 *     communicators must not abort where the caller's would return);
 *   - one error class for one failure, on every path;
 *   - statistics count a two-level call's chunks;
 *   - no header where nothing can compress;
 *   - pass-through means MPI's own answer: every type and op against
 *     plain MPI, argument errors, intercommunicators, and nothing logged
 *     for calls squall never touches;
 *   - device buffers (a CUDA-aware MPI) pass through, from an injected
 *     "is device" answer;
 *   - threads, each on a communicator of its own, at once.
 * MPI failures are injected here by defining the PMPI functions squall
 * calls: each forwards to the real one (dlsym RTLD_NEXT) unless armed,
 * and an armed failure does what MPI does: it calls the communicator's
 * error handler, then returns the code.
 */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_mpi.h"      /* squall__mpi_get_residual */
#include "engine/costmodel.h" /* SQ_COST_EXPLORE */
#include "mpi_check.h"
#include "squall_mpi.h"

static int rank, nranks, fake_nodes;

#define INJECTED MPI_ERR_TRUNCATE /* a class squall itself never returns */

/* ------------------------------------------------------ injected faults */
static int fail_sendrecv, fail_alltoall; /* armed: the next such call fails, on every rank */

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

static int injected(MPI_Comm comm) {
  PMPI_Comm_call_errhandler(comm, INJECTED); /* as MPI does before it returns an error */
  return INJECTED;
}

int PMPI_Sendrecv(const void *sb, int sc, MPI_Datatype st, int dest, int stag, void *rb, int rc, MPI_Datatype rt,
                  int src, int rtag, MPI_Comm comm, MPI_Status *status) {
  if (fail_sendrecv) {
    fail_sendrecv = 0;
    return injected(comm);
  }
  return REAL(PMPI_Sendrecv)(sb, sc, st, dest, stag, rb, rc, rt, src, rtag, comm, status);
}

int PMPI_Alltoall(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt, MPI_Comm comm) {
  if (fail_alltoall) {
    fail_alltoall = 0;
    return injected(comm);
  }
  return REAL(PMPI_Alltoall)(sb, sc, st, rb, rc, rt, comm);
}

int PMPI_Ialltoall(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt, MPI_Comm comm,
                   MPI_Request *req) {
  if (fail_alltoall) {
    fail_alltoall = 0;
    *req = MPI_REQUEST_NULL;
    return injected(comm);
  }
  return REAL(PMPI_Ialltoall)(sb, sc, st, rb, rc, rt, comm, req);
}

/* A slow link for plain calls (armed): float all-reduces of 1024 elements
 * or more take 4 ms longer, so that the cost model finds compressing pays
 * and probes plain now and then. */
static int slow_plain;
int PMPI_Allreduce(const void *sb, void *rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
  if (slow_plain && t == MPI_FLOAT && n >= 1024) usleep(4000);
  return REAL(PMPI_Allreduce)(sb, rb, n, t, op, comm);
}

/* Nodes faked through MPI_COMM_TYPE_SHARED (audit-4, tests/mpi/runs.list): ranks 2j and
 * 2j+1 share a "node", so that squall's own node discovery finds two. */
int PMPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm *out) {
  if (fake_nodes && type == MPI_COMM_TYPE_SHARED) {
    int r;
    PMPI_Comm_rank(comm, &r);
    return PMPI_Comm_split(comm, r / 2, key, out);
  }
  return REAL(PMPI_Comm_split_type)(comm, type, key, info, out);
}

#ifdef HAVE_CUDA
/* A CUDA-aware MPI's device buffer, where no GPU is: squall's question
 * (lib/api/cuda_pointer.c) answered here, yes for this one buffer. */
static const void *fake_device;
int squall__cuda_pointer_is_device(const void *p);
int squall__cuda_pointer_is_device(const void *p) { return fake_device && p == fake_device; }
#endif

/* --------------------------------------------------------------- helpers */
/* Dyadic inputs (integers in [-64, 64] times 1/8, so every sum below is
 * exact), drawn as the other MPI suites draw them (splitmix64). */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static float dyadic(uint64_t seed, int r, size_t i) {
  return (float)((int)(mix(seed * 1000003u + (uint64_t)r * 7919u + i) % 129) - 64) / 8.0f;
}

static void use(const char *spec) { mc_use_config(spec); }

static MPI_Comm fresh_comm(MPI_Errhandler h) {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  if (h != MPI_ERRHANDLER_NULL) MPI_Comm_set_errhandler(c, h);
  return c;
}

static void drop_comm(MPI_Comm *c) {
  squallMpiCommFree(*c);
  MPI_Comm_free(c);
}

/* This rank's residual of the tensor sent from g (flat and shard, in
 * place); zeros where none is kept. */
static void residual_of(MPI_Comm comm, const float *g, size_t n, float *out) {
  if (squall__mpi_get_residual(comm, g, (int)n, MPI_FLOAT, out) != MPI_SUCCESS) memset(out, 0, n * 4);
}

static int all_zero(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (x[i] != 0.0f) return 0;
  return 1;
}

static uint64_t compressed_calls(void) {
  squallStats_t s;
  squallStatsGet(&s);
  return s.compressedCalls;
}

static uint64_t headers(void) {
  squallStats_t s;
  squallStatsGet(&s);
  return s.headers;
}

/* ------------------------------------------- every residual is delivered */
/* T tensors of one size, called `steps` times each, in a fixed order or one
 * shuffled each step (the same shuffle on every rank), under specs[step /
 * period % nspecs] (squallSetConfig at the same step on every rank). A
 * call that passes through must leave its tensor's residual empty, flat
 * and shard (it carried them), whatever the tensor's place in the order;
 * conservation is exact over everything. */
static void check_delivery(int T, int shuffled, const char *const *specs, int nspecs, int period, int steps) {
  const size_t n = 4096 + (size_t)T; /* a shape of its own per T */
  MPI_Comm comm = fresh_comm(MPI_ERRHANDLER_NULL);
  float **g = malloc(sizeof *g * (size_t)T), **outs = malloc(sizeof *outs * (size_t)T), *res = malloc(n * 4);
  double **sum_in = malloc(sizeof *sum_in * (size_t)T), **sum_out = malloc(sizeof *sum_out * (size_t)T);
  for (int j = 0; j < T; j++) {
    g[j] = malloc(n * 4);
    outs[j] = malloc(n * 4);
    sum_in[j] = calloc(n, 8);
    sum_out[j] = calloc(n, 8);
  }
  int *order = malloc(sizeof *order * (size_t)T), carried = 0, explored_late = 0;
  for (int step = 0; step < steps; step++) {
    if (step % period == 0) use(specs[step / period % nspecs]);
    for (int j = 0; j < T; j++) order[j] = j;
    for (int j = T - 1; shuffled && j > 0; j--) { /* Fisher-Yates, the same seed on every rank */
      int k = (int)(mix((uint64_t)step * 131u + (uint64_t)j) % (uint64_t)(j + 1)), t = order[j];
      order[j] = order[k];
      order[k] = t;
    }
    for (int o = 0; o < T; o++) {
      int j = order[o];
      uint64_t seed = (uint64_t)step * 64u + (uint64_t)j;
      for (size_t i = 0; i < n; i++) {
        g[j][i] = dyadic(seed, rank, i);
        for (int r = 0; r < nranks; r++) sum_in[j][i] += dyadic(seed, r, i);
      }
      residual_of(comm, g[j], n, res);
      int held = !all_zero(res, n);
      uint64_t c0 = compressed_calls();
      ck_assert_int_eq(squallMpiAllreduce(g[j], outs[j], (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
      int compressed = compressed_calls() != c0;
      for (size_t i = 0; i < n; i++) sum_out[j][i] += outs[j][i];
      residual_of(comm, g[j], n, res);
      if (!compressed) {
        MC_CHECK(all_zero(res, n), "T=%d%s: tensor %d, step %d: a pass-through left its residual behind", T,
                 shuffled ? " shuffled" : "", j, step);
        carried += held;
      } else if (step >= 4) {
        explored_late++;
      }
    }
  }
  /* the property was exercised: explorations left mass that later calls carried */
  ck_assert_msg(explored_late > 0 && carried > 0, "T=%d: %d explorations, %d carried: nothing was tested", T,
                explored_late, carried);
  /* the ledger over the class: a residual may move between tensors of
   * one shape on their first step (squall(7), tensor identity) */
  double *kept = calloc(n, 8), *mine = calloc(n, 8), *in = calloc(n, 8), *sent = calloc(n, 8);
  for (int j = 0; j < T; j++) {
    residual_of(comm, g[j], n, res);
    for (size_t i = 0; i < n; i++) {
      mine[i] += res[i];
      in[i] += sum_in[j][i];
      sent[i] += sum_out[j][i];
    }
  }
  MPI_Allreduce(mine, kept, (int)n, MPI_DOUBLE, MPI_SUM, comm);
  for (size_t i = 0; i < n; i++)
    MC_CHECK(sent[i] + kept[i] == in[i], "T=%d element %zu: sent %.17g + kept %.17g != %.17g", T, i, sent[i],
             kept[i], in[i]);
  free(kept);
  free(mine);
  free(in);
  free(sent);
  for (int j = 0; j < T; j++) {
    free(g[j]);
    free(outs[j]);
    free(sum_in[j]);
    free(sum_out[j]);
  }
  free(g);
  free(outs);
  free(sum_in);
  free(sum_out);
  free(res);
  free(order);
  drop_comm(&comm);
}

/* A size class the cost model declines (a link said to be 100 Tbit/s,
 * flat: two-level calls are weighed by whole-call times, which vary):
 * after the first calls, only the explorations compress, at the rhythm's
 * positions (at a loss that large, every 512th declined call), and every
 * other call of every tensor carries what they left. */
START_TEST(test_every_residual_delivered) {
  const char *declined[] = {"SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=100000 "
                            "SQUALL_HIERARCHY=flat"};
  const int Ts[] = {1, 2, 3, 4, 8, 16};
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
    int steps = (SQ_COST_EXPLORE << SQ_COST_EXPLORE_SHIFTS) / Ts[i] + 48; /* an exploration, and steps after it */
    check_delivery(Ts[i], 0, declined, 1, steps, steps);
    check_delivery(Ts[i], 1, declined, 1, steps, steps);
  }
}
END_TEST

/* Two levels (4 ranks as 2 nodes): steps that compress two-level leave
 * shard residuals, and the steps after them, which pass through (below
 * the size threshold), carry them at each shard's place. */
START_TEST(test_shard_residuals_delivered) {
  if (!fake_nodes) return;
  const char *phases[] = {"SQUALL_COMPRESS=topk:0.01", "SQUALL_COMPRESS=topk:0.01 SQUALL_MIN_BYTES=1G"};
  const int Ts[] = {1, 3, 4};
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
    check_delivery(Ts[i], 0, phases, 2, 3, 48);
    check_delivery(Ts[i], 1, phases, 2, 3, 48);
  }
}
END_TEST

/* A tensor whose buffers are new every step (both of them, as NumPy code
 * hands out) carries its residual with it while compressed (squall(7),
 * RESIDUALS), and so into the plain calls once compression is off: the
 * first of them delivers everything, and the sums are exact. */
START_TEST(test_fresh_buffers_deliver) {
  const size_t n = 6007;
  MPI_Comm comm = fresh_comm(MPI_ERRHANDLER_NULL);
  enum { STEPS = 6 };
  float *bufs[2 * STEPS];
  double *sum_in = calloc(n, 8), *sum_out = calloc(n, 8), *kept = calloc(n, 8), *mine = calloc(n, 8);
  float *res = malloc(n * 4);
  for (int step = 0; step < STEPS; step++) {
    if (step == 0) use("SQUALL_COMPRESS=topk:0.01");
    if (step == STEPS / 2) use("SQUALL_COMPRESS=none");
    float *g = bufs[2 * step] = malloc(n * 4), *out = bufs[2 * step + 1] = malloc(n * 4); /* kept alive: new addresses */
    for (size_t i = 0; i < n; i++) {
      g[i] = dyadic(700 + (uint64_t)step, rank, i);
      for (int r = 0; r < nranks; r++) sum_in[i] += dyadic(700 + (uint64_t)step, r, i);
    }
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
    for (size_t i = 0; i < n; i++) sum_out[i] += out[i];
    if (step < STEPS / 2) continue;
    residual_of(comm, g, n, res);
    ck_assert_msg(all_zero(res, n), "step %d: the pass-through left a residual", step);
    for (size_t i = 0; i < n; i++)
      MC_CHECK(sum_out[i] == sum_in[i], "step %d, element %zu: sent %.17g of %.17g", step, i, sum_out[i], sum_in[i]);
  }
  for (int i = 0; i < 2 * STEPS; i++) free(bufs[i]);
  free(sum_in);
  free(sum_out);
  free(kept);
  free(mine);
  free(res);
  drop_comm(&comm);
}
END_TEST

/* A rank whose residual is empty where its peers' is not (its own
 * affair: squallMpiResetResiduals is local) decides every call as they do,
 * with the cost model on over a slow link: whether a pass-through folds
 * must never change what the model learns (a review found a version where
 * it decided whether the plain call was timed, and the ranks' probes then
 * parted: a hang; here the pass-throughs of the size class fold on one
 * rank only, and the calls after them must still meet). */
START_TEST(test_rank_local_fold_keeps_ranks_together) {
  const int nx = 10240, ny = 14336, T = 3;
  MPI_Comm comm = fresh_comm(MPI_ERRHANDLER_NULL);
  float *x[3], *xo[3], *y = malloc((size_t)ny * 4), *yo = malloc((size_t)ny * 4);
  for (int j = 0; j < T; j++) {
    x[j] = malloc((size_t)nx * 4);
    xo[j] = malloc((size_t)nx * 4);
    for (int i = 0; i < nx; i++) x[j][i] = dyadic((uint64_t)j, rank, (size_t)i);
  }
  for (int i = 0; i < ny; i++) y[i] = dyadic(99, rank, (size_t)i);
  slow_plain = 1;
  use("SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=on SQUALL_HIERARCHY=flat");
  for (int j = 0; j < T; j++) ck_assert_int_eq(squallMpiAllreduce(x[j], xo[j], nx, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
  /* compression off: a reason whose plain calls are timed (for the model) */
  use("SQUALL_COMPRESS=none SQUALL_COST_MODEL=on SQUALL_HIERARCHY=flat");
  if (rank == 1) squallMpiResetResiduals(comm); /* only rank 0 folds below */
  for (int j = 0; j < T; j++) ck_assert_int_eq(squallMpiAllreduce(x[j], xo[j], nx, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
  use("SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=on SQUALL_HIERARCHY=flat");
  for (int k = 0; k < 4; k++) {
    ck_assert_int_eq(squallMpiAllreduce(y, yo, ny, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
    float *lo = malloc((size_t)ny * 4), *hi = malloc((size_t)ny * 4);
    /* clang-format off */
    REAL(PMPI_Allreduce)(yo, lo, ny, MPI_FLOAT, MPI_MIN, comm);
    REAL(PMPI_Allreduce)(yo, hi, ny, MPI_FLOAT, MPI_MAX, comm);
    /* clang-format on */
    ck_assert_msg(memcmp(lo, hi, (size_t)ny * 4) == 0, "call %d: ranks differ", k);
    free(lo);
    free(hi);
  }
  slow_plain = 0;
  for (int j = 0; j < T; j++) {
    free(x[j]);
    free(xo[j]);
  }
  free(y);
  free(yo);
  drop_comm(&comm);
}
END_TEST

/* ------------------------------------------------------- error handlers */
static int handler_calls, handler_code;
static void recording_handler(MPI_Comm *comm, int *code, ...) {
  (void)comm;
  handler_calls++;
  handler_code = *code;
}

/* A call that fails in the node ring (two-level) or in the exchange
 * (flat): every rank gets MPI's own class, the residual is as before. */
static int failing_call(MPI_Comm comm, int in_ring, size_t n) {
  float *g = malloc(n * 4), *out = malloc(n * 4), *before = malloc(n * 4), *after = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = dyadic(900, rank, i);
  residual_of(comm, g, n, before);
  if (in_ring) fail_sendrecv = 1;
  else fail_alltoall = 1;
  int rc = squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, comm);
  fail_sendrecv = fail_alltoall = 0;
  residual_of(comm, g, n, after);
  ck_assert_msg(memcmp(before, after, n * 4) == 0, "the failed call changed the residual");
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS); /* and goes on */
  free(g);
  free(out);
  free(before);
  free(after);
  return rc;
}

static void first_call(MPI_Comm comm, size_t n, int two_level) {
  float *g = calloc(n, 4), *out = malloc(n * 4);
  squallStats_t s0, s1;
  squallStatsGet(&s0);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
  squallStatsGet(&s1);
  ck_assert_uint_eq(s1.compressedCalls - s0.compressedCalls, 1);
  ck_assert_uint_eq(s1.twoLevelCalls - s0.twoLevelCalls, (uint64_t)two_level);
  free(g);
  free(out);
}

/* The handler set after the first compressed call (which made the node
 * communicators) decides, both ways. */
START_TEST(test_handler_changed_after_first_call) {
  if (!fake_nodes) return; /* two nodes are needed */
  use("SQUALL_COMPRESS=fp16");
  const size_t n = 20000;
  /* fatal at first, then MPI_ERRORS_RETURN: the failure returns */
  MPI_Comm comm = fresh_comm(MPI_ERRHANDLER_NULL);
  first_call(comm, n, 1);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  ck_assert_int_eq(failing_call(comm, 1, n), INJECTED);
  drop_comm(&comm);
  /* returning at first, then a handler of the program's: it is called,
   * once, with MPI's own class */
  comm = fresh_comm(MPI_ERRORS_RETURN);
  first_call(comm, n, 1);
  MPI_Errhandler h;
  MPI_Comm_create_errhandler(recording_handler, &h);
  MPI_Comm_set_errhandler(comm, h);
  handler_calls = 0;
  ck_assert_int_eq(failing_call(comm, 1, n), INJECTED);
  ck_assert_int_eq(handler_calls, 1);
  ck_assert_int_eq(handler_code, INJECTED);
  MPI_Errhandler_free(&h);
  drop_comm(&comm);
}
END_TEST

/* One failure, one class, on every path: the flat exchange, the node
 * ring, the exchange across nodes. */
START_TEST(test_one_class_for_one_failure) {
  const size_t n = 20000;
  use("SQUALL_COMPRESS=int8 SQUALL_HIERARCHY=flat");
  MPI_Comm comm = fresh_comm(MPI_ERRORS_RETURN);
  first_call(comm, n, 0);
  ck_assert_int_eq(failing_call(comm, 0, n), INJECTED);
  drop_comm(&comm);
  if (!fake_nodes) return;
  use("SQUALL_COMPRESS=int8");
  comm = fresh_comm(MPI_ERRORS_RETURN);
  first_call(comm, n, 1);
  ck_assert_int_eq(failing_call(comm, 1, n), INJECTED); /* the node ring */
  ck_assert_int_eq(failing_call(comm, 0, n), INJECTED); /* across nodes */
  drop_comm(&comm);
}
END_TEST

/* ------------------------------------------------------------ statistics */
START_TEST(test_two_level_chunks_counted) {
  if (!fake_nodes) return;
  use("SQUALL_COMPRESS=int8 SQUALL_CHUNK_BYTES=64K");
  const size_t n = 1 << 18; /* 1 MiB: a shard of 128K floats, 8 chunks of 64 KiB */
  MPI_Comm comm = fresh_comm(MPI_ERRHANDLER_NULL);
  float *g = malloc(n * 4), *out = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = dyadic(5, rank, i);
  squallStats_t s0, s1;
  squallStatsGet(&s0);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
  squallStatsGet(&s1);
  ck_assert_uint_eq(s1.twoLevelCalls - s0.twoLevelCalls, 1);
  ck_assert_uint_eq(s1.pipelinedCalls - s0.pipelinedCalls, 1);
  ck_assert_uint_ge(s1.pipelineChunks - s0.pipelineChunks, 2);
  free(g);
  free(out);
  drop_comm(&comm);
}
END_TEST

/* ---------------------------------------------------- no header for nothing */
/* Calls the agreed configuration passes through whatever the other ranks
 * say cost no header (after the communicator's first, which agrees on
 * the configuration), and give plain's bits. */
START_TEST(test_no_header_where_nothing_compresses) {
  const char *specs[] = {"SQUALL_COMPRESS=none", "SQUALL_COMPRESS=fp16 SQUALL_MIN_BYTES=1M",
                         "SQUALL_COMPRESS=topk:0.01 SQUALL_MIN_RANKS=64"};
  MPI_Comm comm = fresh_comm(MPI_ERRHANDLER_NULL);
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
    use(specs[s]);
    for (size_t n = 1; n <= 16384; n *= 2) {
      float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
      for (size_t i = 0; i < n; i++) g[i] = dyadic(n, rank, i);
      PMPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, comm);
      uint64_t h0 = headers();
      ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
      ck_assert_int_eq(squallMpiAllreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
      ck_assert_msg(headers() - h0 == (n == 1 ? 1u : 0u), "%s, %zu floats: %llu headers", specs[s], n,
                    (unsigned long long)(headers() - h0));
      ck_assert(memcmp(out, ref, n * 4) == 0 && memcmp(g, ref, n * 4) == 0);
      free(g);
      free(out);
      free(ref);
    }
  }
  drop_comm(&comm);
}
END_TEST

/* --------------------------------------------------- MPI's own semantics */
/* compressible: squall compresses float sums here (skipped: not plain's bits) */
static void types_and_ops(MPI_Comm comm, int compressible) {
  /* clang-format off */
  struct { MPI_Datatype t; const char *name; int size; } types[] = {
      {MPI_FLOAT, "float", 4}, {MPI_DOUBLE, "double", 8}, {MPI_INT, "int", 4}, {MPI_LONG, "long", 8},
      {MPI_SHORT, "short", 2}, {MPI_UNSIGNED, "unsigned", 4}, {MPI_FLOAT_INT, "float_int", 8},
      {MPI_C_BOOL, "bool", 1}, {MPI_BYTE, "byte", 1}};
  /* clang-format on */
  /* clang-format off */
  struct { MPI_Op op; const char *name; } ops[] = {
      {MPI_SUM, "sum"}, {MPI_PROD, "prod"}, {MPI_MAX, "max"}, {MPI_MIN, "min"}, {MPI_LAND, "land"},
      {MPI_BAND, "band"}, {MPI_MAXLOC, "maxloc"}, {MPI_BOR, "bor"}, {MPI_OP_NULL, "null"}};
  /* clang-format on */
  const int count = 300;
  unsigned char *in = malloc(count * 16), *a = malloc(count * 16), *b = malloc(count * 16);
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
      if (compressible && types[t].t == MPI_FLOAT && ops[o].op == MPI_SUM) continue;
      for (int i = 0; i < count * 16; i++) in[i] = (unsigned char)(mix((uint64_t)rank * 977u + (uint64_t)i) % 7);
      memset(a, 0xa5, count * 16);
      memset(b, 0xa5, count * 16);
      int ra = PMPI_Allreduce(in, a, count, types[t].t, ops[o].op, comm);
      int rb = squallMpiAllreduce(in, b, count, types[t].t, ops[o].op, comm);
      ck_assert_msg(ra == rb, "%s %s: MPI says %d, squall %d", types[t].name, ops[o].name, ra, rb);
      if (ra == MPI_SUCCESS)
        ck_assert_msg(memcmp(a, b, (size_t)count * (size_t)types[t].size) == 0, "%s %s: other bits",
                      types[t].name, ops[o].name);
    }
  free(in);
  free(a);
  free(b);
}

/* Every type and op squall does not compress, and argument errors, give
 * MPI's own answer, with nothing logged; also where the configuration
 * would compress float sums. */
START_TEST(test_pass_through_is_mpi) {
  use("SQUALL_COMPRESS=topk:0.01");
  MPI_Comm comm = fresh_comm(MPI_ERRORS_RETURN);
  char log[] = "/tmp/squall-audit-log-XXXXXX";
  int fd = mkstemp(log), saved = dup(2);
  ck_assert_int_ge(fd, 0);
  if (!getenv("AUDIT_KEEP_STDERR")) dup2(fd, 2); /* squall logs to stderr */
  types_and_ops(comm, 1);
  /* argument errors: MPI's class (Open MPI aborts on aliased buffers
   * whatever the handler, so squall's pass-through does too: not here) */
  float f[4] = {1, 2, 3, 4}, r[4];
  int e1 = squallMpiAllreduce(f, r, 4, MPI_DATATYPE_NULL, MPI_SUM, comm);
  int e2 = PMPI_Allreduce(f, r, 4, MPI_DATATYPE_NULL, MPI_SUM, comm);
  int e3 = squallMpiAllreduce(f, r, 4, MPI_FLOAT, MPI_OP_NULL, comm);
  int e4 = PMPI_Allreduce(f, r, 4, MPI_FLOAT, MPI_OP_NULL, comm);
  int e5 = squallMpiAllreduce(f, r, -1, MPI_FLOAT, MPI_SUM, comm);
  int e6 = PMPI_Allreduce(f, r, -1, MPI_FLOAT, MPI_SUM, comm);
  /* aliased buffers and no op: Open MPI names the op (squall once said
   * MPI_ERR_BUFFER, and logged it) */
  int e7 = squallMpiAllreduce(f, f, 4, MPI_FLOAT, MPI_OP_NULL, comm);
  int e8 = PMPI_Allreduce(f, f, 4, MPI_FLOAT, MPI_OP_NULL, comm);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  off_t logged = lseek(fd, 0, SEEK_END);
  close(fd);
  unlink(log);
  ck_assert_int_eq(e1, e2);
  ck_assert_int_eq(e3, e4);
  ck_assert_int_eq(e5, e6);
  ck_assert_int_eq(e7, e8);
  ck_assert_int_ne(e3, MPI_SUCCESS);
  ck_assert_msg(logged == 0, "squall logged %lld bytes for calls it never touches", (long long)logged);
  drop_comm(&comm);
}
END_TEST

/* An intercommunicator passes through, bit for bit, whatever the codec. */
START_TEST(test_intercomm_is_mpi) {
  if (nranks < 2) return;
  use("SQUALL_COMPRESS=fp16");
  MPI_Comm half, inter;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 7, &inter);
  MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
  types_and_ops(inter, 0);
  squallMpiCommFree(inter);
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
}
END_TEST

/* ---------------------------------------------------------------- threads */
/* Two threads per rank, each on a communicator of its own, at once
 * (MPI_THREAD_MULTIPLE): compressed float sums give the same bits on
 * every rank, and what squall never touches gives MPI's own bits. */
typedef struct {
  MPI_Comm comm;
  int id, failures;
} thread_job;

static void *thread_calls(void *arg) {
  thread_job *j = arg;
  const size_t n = 3000;
  float *g = malloc(n * 4), *out = malloc(n * 4), *lo = malloc(n * 4), *hi = malloc(n * 4);
  double d[64], dref[64], dout[64];
  for (int t = 0; t < 100; t++) {
    for (size_t i = 0; i < n; i++) g[i] = dyadic((uint64_t)(j->id * 1000 + t), rank, i);
    for (int i = 0; i < 64; i++) d[i] = dyadic((uint64_t)t, rank, (size_t)i) * 1e-3;
    if (squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, j->comm) != MPI_SUCCESS) j->failures++;
    PMPI_Allreduce(out, lo, (int)n, MPI_FLOAT, MPI_MIN, j->comm);
    PMPI_Allreduce(out, hi, (int)n, MPI_FLOAT, MPI_MAX, j->comm);
    if (memcmp(lo, hi, n * 4) != 0) j->failures++; /* ranks differ */
    if (squallMpiAllreduce(d, dout, 64, MPI_DOUBLE, MPI_SUM, j->comm) != MPI_SUCCESS) j->failures++;
    PMPI_Allreduce(d, dref, 64, MPI_DOUBLE, MPI_SUM, j->comm);
    if (memcmp(dout, dref, sizeof dref) != 0) j->failures++;
  }
  free(g);
  free(out);
  free(lo);
  free(hi);
  return NULL;
}

START_TEST(test_threads_on_their_own_communicators) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) return; /* said by main() */
  use("SQUALL_COMPRESS=fp16");
  thread_job jobs[2];
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    jobs[i] = (thread_job){.comm = fresh_comm(MPI_ERRHANDLER_NULL), .id = i};
    ck_assert_int_eq(pthread_create(&th[i], NULL, thread_calls, &jobs[i]), 0);
  }
  for (int i = 0; i < 2; i++) {
    pthread_join(th[i], NULL);
    ck_assert_msg(jobs[i].failures == 0, "thread %d: %d failures", i, jobs[i].failures);
    drop_comm(&jobs[i].comm);
  }
}
END_TEST

/* ------------------------------------------------------ device buffers */
/* Rank 0's buffer is "device memory" (a CUDA-aware MPI's), the others'
 * host memory: every rank passes the call through together. */
START_TEST(test_device_buffers_pass_through) {
#ifdef HAVE_CUDA
  use("SQUALL_COMPRESS=topk:0.01");
  const size_t n = 8192;
  MPI_Comm comm = fresh_comm(MPI_ERRHANDLER_NULL);
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = dyadic(11, rank, i);
  PMPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, comm);
  for (int step = 0; step < 3; step++) {
    fake_device = rank == 0 ? g : NULL;
    squallStats_t s0, s1;
    squallStatsGet(&s0);
    ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
    squallStatsGet(&s1);
    fake_device = NULL;
    ck_assert_uint_eq(s1.passthrough[squallPassDeviceMemory] - s0.passthrough[squallPassDeviceMemory], 1);
    ck_assert(memcmp(out, ref, n * 4) == 0);
  }
  ck_assert_str_eq(squallPassReasonName(squallPassDeviceMemory), "device_memory");
  free(g);
  free(out);
  free(ref);
  drop_comm(&comm);
#endif
}
END_TEST

static int note_threads(void) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE && rank == 0)
    printf("note: MPI gives no MPI_THREAD_MULTIPLE here: the threads probe is skipped\n");
  return MC_RUN;
}

/* One TCase per probe: CK_RUN_CASE=<name> runs just that one. */
int main(int argc, char **argv) {
  fake_nodes = getenv("AUDIT_FAKE_NODES") != NULL; /* before MPI_Init: its MPI_Comm_split_type */
  /* clang-format off */
  const mc_suite m = {
      .name = "audit", .rank = &rank, .nranks = &nranks,
      .thread_multiple = 1,
      .setup = note_threads,
      .cases = MC_CASES(
          {"delivery", 240, MC_TESTS(test_every_residual_delivered)},
          {"shards", 240, MC_TESTS(test_shard_residuals_delivered)},
          {"fresh", 240, MC_TESTS(test_fresh_buffers_deliver)},
          {"together", 240, MC_TESTS(test_rank_local_fold_keeps_ranks_together)},
          {"handlers", 240, MC_TESTS(test_handler_changed_after_first_call)},
          {"classes", 240, MC_TESTS(test_one_class_for_one_failure)},
          {"chunks", 240, MC_TESTS(test_two_level_chunks_counted)},
          {"headers", 240, MC_TESTS(test_no_header_where_nothing_compresses)},
          {"mpi", 240, MC_TESTS(test_pass_through_is_mpi)},
          {"intercomm", 240, MC_TESTS(test_intercomm_is_mpi)},
          {"device", 240, MC_TESTS(test_device_buffers_pass_through)},
          {"threads", 240, MC_TESTS(test_threads_on_their_own_communicators)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_reducescatter_twolevel_mpi.c - the two-level reduce-scatter through
 * squallMpiReduceScatterBlock (tests/mpi/runs.list, SQUALL_RANKS_PER_NODE=2:
 * 4 ranks as 2 nodes x 2, 6 as 3 x 2, and 3 as 2 + 1, uneven, so flat).
 * The model of a two-level call: each node's exact sum of the blocks that
 * the ranks with one local index own, then squall's own flat compressed
 * reduce-scatter of that chunk over the ranks with that local index (a
 * communicator of one node per rank, so flat): every rank's shard, and its
 * residual placed back at its blocks, must equal the model's bit for bit,
 * call after call. Also: conservation over 20 steps for every codec (exact
 * on dyadic data); the statistics (two-level calls, dense bytes inside the
 * node; flat calls and their reason where nodes are uneven); in place and
 * pipelined runs give the same bits; ranks placed on nodes out of order
 * (engine level, a node key of rank % 2) and the average; top-k, which has
 * no reduce-scatter route, never makes a two-level call that fails; an
 * exchange that fails across nodes or inside the node is an error on every
 * rank with the residual as it was; one rank that cannot allocate makes
 * every rank pass the call through; its whole-call times are the
 * reduce-scatter's figures, not the all-reduce's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_mpi.h" /* squall__mpi_get_scatter_residual */
#include "common/internal.h"
#include "engine/costmodel.h" /* squall__cost_call_seconds */
#include "engine/plan.h"      /* squall__cost_of, squall__cost_kind */
#include "engine_fixture.h"
#include "mpi_check.h"
#include "squall_mpi.h"

static int rank, nranks, rpn, two_level, nodes;
static int *node_of, *local_of; /* SQUALL_RANKS_PER_NODE's layout: consecutive ranks fill a node */
static MPI_Comm across;         /* the ranks with this rank's local index, in node order */

/* ------------------------------------------------ fault-injecting PMPI */
/* The inner engine exchanges its codes with PMPI_Alltoall (one chunk); the
 * node reduce-scatter is a ring of PMPI_Sendrecv. When armed, the at-th
 * call since arming fails on every rank, after it completed (ranks stay in
 * step). */
static int armed_a2a, armed_ring, seen, fired;

static void arm(int a2a, int ring) {
  armed_a2a = a2a;
  armed_ring = ring;
  seen = fired = 0;
}

static int hits(int at) {
  if (at == 0 || ++seen != at) return 0;
  fired = 1;
  return 1;
}

#define REAL(name, type)   \
  static type real_##name; \
  if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

typedef int (*alltoall_t)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);
typedef int (*sendrecv_t)(const void *, int, MPI_Datatype, int, int, void *, int, MPI_Datatype, int, int, MPI_Comm,
                          MPI_Status *);

int PMPI_Alltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm comm) {
  REAL(PMPI_Alltoall, alltoall_t);
  int rc = real_PMPI_Alltoall(s, sn, st, r, rn, rt, comm);
  return rc == MPI_SUCCESS && hits(armed_a2a) ? MPI_ERR_TRUNCATE : rc;
}

int PMPI_Sendrecv(const void *s, int sn, MPI_Datatype st, int dst, int stag, void *r, int rn, MPI_Datatype rt,
                  int src, int rtag, MPI_Comm comm, MPI_Status *status) {
  REAL(PMPI_Sendrecv, sendrecv_t);
  int rc = real_PMPI_Sendrecv(s, sn, st, dst, stag, r, rn, rt, src, rtag, comm, status);
  return rc == MPI_SUCCESS && hits(armed_ring) ? MPI_ERR_TRUNCATE : rc;
}

/* ------------------------------------------------------------ helpers */
/* Multiples of 1/8 in [-8, 8], from (seed, rank, index): any rank can
 * regenerate any rank's input. */
static float gen(uint64_t seed, int r, size_t i) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)r * 0xbf58476d1ce4e5b9ull ^ i * 0x94d049bb133111ebull;
  x ^= x >> 31;
  x *= 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return (float)((int)(x % 129) - 64) / 8.0f;
}

static const char *const codecs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=bf16", "SQUALL_COMPRESS=int8",
                                     "SQUALL_COMPRESS=int4", "SQUALL_COMPRESS=fp8"};
#define NCODECS (sizeof codecs / sizeof codecs[0])

/* 19 significant bits: fp16 and bf16 keep a residual; node sums stay exact */
static const float MUL = 1.0f + 0x1p-12f;

/* Defaults plus spec, keeping the environment's logging, cost model (off
 * in make check), statistics file and SQUALL_RANKS_PER_NODE. */
static void use_config(const char *spec) {
  squallConfig_t c, env;
  squallConfigDefault(&c);
  squallGetConfig(&env);
  c.debug = env.debug;
  c.costModel = env.costModel;
  c.ranksPerNode = rpn;
  memcpy(c.statsPath, env.statsPath, sizeof c.statsPath);
  ck_assert_int_eq(squallConfigParse(&c, "SQUALL_MIN_BYTES=0"), squallSuccess);
  ck_assert_msg(squallConfigParse(&c, spec) == squallSuccess, "bad spec %s: %s", spec, squallGetLastError());
  ck_assert_int_eq(squallSetConfig(&c), squallSuccess);
}

static void fill(float *g, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) g[i] = gen(seed, rank, i) * MUL;
}

static int rs(MPI_Comm comm, const void *send, void *recv, size_t b) {
  return squallMpiReduceScatterBlock(send, recv, (int)b, MPI_FLOAT, MPI_SUM, comm);
}

static squallStats_t stats(void) {
  squallStats_t st = SQUALL_STATS_INITIALIZER;
  squallStatsGet(&st);
  return st;
}

/* The rank on node n with local index l in a layout (-1: none). */
static int rank_at(const int *nd, const int *lc, int n, int l) {
  for (int r = 0; r < nranks; r++)
    if (nd[r] == n && lc[r] == l) return r;
  return -1;
}

/* This rank's node's exact sum of its local index's chunk: place n holds
 * the block of the rank on node n with this rank's local index. */
static void chunk_of(const int *nd, const int *lc, int N, uint64_t seed, size_t b, float *chunk) {
  for (int n = 0; n < N; n++) {
    int owner = rank_at(nd, lc, n, lc[rank]);
    for (size_t o = 0; o < b; o++) {
      float sum = 0;
      for (int q = 0; q < nranks; q++)
        if (nd[q] == nd[rank]) sum += gen(seed, q, (size_t)owner * b + o) * MUL;
      chunk[(size_t)n * b + o] = sum;
    }
  }
}

/* A comparison every rank fails together: one that stopped alone would
 * leave the others waiting in the next collective. why: this rank's first
 * mismatch, or empty. */
static void all_agree(const char *why) {
  int ok = why[0] == 0, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  ck_assert_msg(all, "rank %d: %s", rank, ok ? "fine here, not on another rank" : why);
}

/* n floats bit for bit against the model's, on every rank. */
static void check_bits(const float *got, const float *want, size_t n, const char *what, int step) {
  char why[256] = "";
  for (size_t i = 0; i < n && !why[0]; i++)
    if (memcmp(&got[i], &want[i], 4) != 0)
      snprintf(why, sizeof why, "%s step %d: element %zu is %a, model %a", what, step, i, got[i], want[i]);
  all_agree(why);
}

/* A two-level residual (count floats, placed at the blocks) against the
 * model's (N blocks of the chunk): the blocks of this local index's ranks
 * hold the chunk's, every other block zero. */
static void check_residual(const int *nd, const int *lc, const float *res, const float *cres, size_t b,
                           const char *what) {
  char why[256] = "";
  for (int r = 0; r < nranks; r++)
    for (size_t o = 0; o < b && !why[0]; o++) {
      float want = lc[r] == lc[rank] ? cres[(size_t)nd[r] * b + o] : 0.0f;
      if (memcmp(&res[(size_t)r * b + o], &want, 4) != 0)
        snprintf(why, sizeof why, "%s: residual of block %d, element %zu: %a, model %a", what, r, o,
                 res[(size_t)r * b + o], want);
    }
  all_agree(why);
}

/* ------------------------------------------------------- the model */

/* T calls from zeroed residuals, each against the model (two-level), or
 * counted flat for uneven nodes with the flat reason. */
static void check_model(const char *spec, size_t b, int T) {
  use_config(spec);
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert_int_eq(squallMpiResetResiduals(across), MPI_SUCCESS);
  size_t n = b * (size_t)nranks, s = b * (size_t)nodes;
  float *g = malloc(n * 4), *out = malloc(b * 4 + 4), *chunk = malloc(s * 4), *ref = malloc(b * 4 + 4);
  for (int t = 0; t < T; t++) {
    uint64_t seed = 200 + (uint64_t)t;
    fill(g, n, seed);
    squallStats_t a = stats();
    ck_assert_msg(rs(MPI_COMM_WORLD, g, out, b) == MPI_SUCCESS, "%s: %s", spec, squallGetLastError());
    squallStats_t z = stats();
    ck_assert_uint_eq(z.compressedCalls - a.compressedCalls, 1);
    ck_assert_uint_eq(z.twoLevelCalls - a.twoLevelCalls, (uint64_t)two_level);
    ck_assert_uint_eq(z.flat[squallFlatUneven] - a.flat[squallFlatUneven], (uint64_t)!two_level);
    ck_assert_uint_eq((z.bytesInterNode - a.bytesInterNode) + (z.bytesIntraNode - a.bytesIntraNode),
                      z.bytesWire - a.bytesWire);
    if (!two_level) continue;
    /* dense inside the node: one reduce-scatter of the chunk, no all-gather */
    ck_assert_uint_eq(z.bytesIntraNode - a.bytesIntraNode, (uint64_t)(rpn - 1) * s * 4);
    chunk_of(node_of, local_of, nodes, seed, b, chunk);
    ck_assert_int_eq(rs(across, chunk, ref, b), MPI_SUCCESS);
    check_bits(out, ref, b, spec, t);
  }
  if (two_level) {
    float *res = malloc(n * 4), *cres = malloc(s * 4);
    ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, g, (int)b, MPI_FLOAT, res), MPI_SUCCESS);
    ck_assert_int_eq(squall__mpi_get_scatter_residual(across, chunk, (int)b, MPI_FLOAT, cres), MPI_SUCCESS);
    check_residual(node_of, local_of, res, cres, b, spec);
    free(res);
    free(cres);
  }
  free(g);
  free(out);
  free(chunk);
  free(ref);
}

START_TEST(test_matches_model) {
  for (size_t c = 0; c < NCODECS; c++) {
    check_model(codecs[c], 1000, 4); /* whole buckets nowhere: 1000 is no multiple of 64 */
    check_model(codecs[c], 333, 2);  /* blocks ending in part of a bucket, off their lines */
  }
  check_model("SQUALL_COMPRESS=int8 SQUALL_BUCKET=64 SQUALL_CHUNK_BYTES=4096", 3001, 3); /* pipelined across nodes */
  check_model("SQUALL_COMPRESS=fp16", 1, 2);                                             /* one element per rank */
}
END_TEST

/* Where the codec is exact on the data (fp16 of multiples of 1/8, whose
 * node sums need at most 8 bits), the result is the exact sum. */
START_TEST(test_fp16_exact) {
  use_config("SQUALL_COMPRESS=fp16");
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  size_t b = 777, n = b * (size_t)nranks;
  float *g = malloc(n * 4), *out = malloc(b * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen(9, rank, i);
  ck_assert_int_eq(rs(MPI_COMM_WORLD, g, out, b), MPI_SUCCESS);
  float *exact = calloc(b, 4);
  for (size_t o = 0; o < b; o++)
    for (int q = 0; q < nranks; q++) exact[o] += gen(9, q, (size_t)rank * b + o);
  check_bits(out, exact, b, "fp16 on exact data", 0);
  free(g);
  free(out);
  free(exact);
}
END_TEST

/* ------------------------------------------------------- conservation */

/* Over 20 steps: every rank's shards, gathered, plus every rank's
 * residual, equal the sum of all inputs (in double: every term is exact). */
static void check_conservation(const char *spec, size_t b) {
  enum { T = 20 };
  use_config(spec);
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  size_t n = b * (size_t)nranks;
  float *g = malloc(n * 4), *out = malloc(b * 4), *res = malloc(n * 4);
  double *mine = calloc(b, 8), *got = malloc(n * 8), *in = calloc(n, 8), *r = malloc(n * 8), *r_all = malloc(n * 8);
  squallStats_t a = stats();
  for (int t = 0; t < T; t++) {
    fill(g, n, 400 + (uint64_t)t);
    ck_assert_msg(rs(MPI_COMM_WORLD, g, out, b) == MPI_SUCCESS, "%s: %s", spec, squallGetLastError());
    for (size_t i = 0; i < b; i++) mine[i] += out[i];
    for (size_t i = 0; i < n; i++)
      for (int q = 0; q < nranks; q++) in[i] += (double)(gen(400 + (uint64_t)t, q, i) * MUL);
  }
  squallStats_t z = stats();
  ck_assert_uint_eq(z.twoLevelCalls - a.twoLevelCalls, two_level ? (uint64_t)T : 0);
  ck_assert_uint_eq(z.flat[squallFlatUneven] - a.flat[squallFlatUneven], two_level ? 0 : (uint64_t)T);
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, g, (int)b, MPI_FLOAT, res), MPI_SUCCESS);
  for (size_t i = 0; i < n; i++) r[i] = res[i];
  MPI_Allgather(mine, (int)b, MPI_DOUBLE, got, (int)b, MPI_DOUBLE, MPI_COMM_WORLD);
  MPI_Allreduce(r, r_all, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  size_t lossy = 0;
  for (size_t i = 0; i < n; i++) {
    MC_CHECK(got[i] + r_all[i] == in[i], "%s: element %zu: out %.17g + residuals %.17g != in %.17g", spec, i, got[i],
             r_all[i], in[i]);
    lossy += r_all[i] != 0;
  }
  ck_assert_msg(lossy > 0, "%s: every residual is zero: nothing was conserved", spec);
  free(g);
  free(out);
  free(res);
  free(mine);
  free(got);
  free(in);
  free(r);
  free(r_all);
}

START_TEST(test_conservation) {
  for (size_t c = 0; c < NCODECS; c++) check_conservation(codecs[c], 1000);
}
END_TEST

/* ------------------------------------------------- the same bits again */

/* T steps into shards (T x b) and the final residual (n floats). */
static void run_steps(const char *spec, size_t b, int T, int in_place, float *shards, float *res) {
  use_config(spec);
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  size_t n = b * (size_t)nranks;
  float *g = malloc(n * 4), *buf = malloc(n * 4);
  for (int t = 0; t < T; t++) {
    fill(g, n, 600 + (uint64_t)t);
    if (in_place) {
      memcpy(buf, g, n * 4);
      ck_assert_int_eq(squallMpiReduceScatterBlock(MPI_IN_PLACE, buf, (int)b, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                       MPI_SUCCESS);
    } else {
      ck_assert_int_eq(rs(MPI_COMM_WORLD, g, buf, b), MPI_SUCCESS);
    }
    memcpy(shards + (size_t)t * b, buf, b * 4);
  }
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, in_place ? buf : g, (int)b, MPI_FLOAT, res),
                   MPI_SUCCESS);
  free(g);
  free(buf);
}

START_TEST(test_in_place_pipelined_identical) {
  enum { T = 4 };
  size_t b = 2001, n = b * (size_t)nranks;
  float *s0 = malloc(T * b * 4), *s1 = malloc(T * b * 4), *r0 = malloc(n * 4), *r1 = malloc(n * 4);
  const char *base[] = {"SQUALL_COMPRESS=int4 SQUALL_BUCKET=64", "SQUALL_COMPRESS=bf16"};
  for (int c = 0; c < 2; c++) {
    char piped[128];
    snprintf(piped, sizeof piped, "%s SQUALL_CHUNK_BYTES=4096", base[c]);
    run_steps(base[c], b, T, 0, s0, r0);
    run_steps(base[c], b, T, 1, s1, r1);
    all_agree(memcmp(s0, s1, T * b * 4) == 0 && memcmp(r0, r1, n * 4) == 0 ? "" : "in place: other bits");
    squallStats_t a = stats();
    run_steps(piped, b, T, 0, s1, r1);
    squallStats_t z = stats();
    ck_assert_msg(z.pipelinedCalls - a.pipelinedCalls == T, "%s: not pipelined", piped);
    all_agree(memcmp(s0, s1, T * b * 4) == 0 && memcmp(r0, r1, n * 4) == 0 ? "" : "pipelined: other bits");
  }
  free(s0);
  free(s1);
  free(r0);
  free(r1);
}
END_TEST

/* Top-k has no reduce-scatter route: it passes through, exactly, as flat,
 * never as a two-level call whose shard the inner engine refuses. Should
 * it get one, the call must run two-level where the nodes allow it. */
START_TEST(test_topk_consistent) {
  use_config("SQUALL_COMPRESS=topk:0.01");
  size_t b = 1500, n = b * (size_t)nranks;
  float *g = malloc(n * 4), *out = malloc(b * 4), *ref = malloc(b * 4);
  fill(g, n, 31);
  squallStats_t a = stats();
  ck_assert_int_eq(rs(MPI_COMM_WORLD, g, out, b), MPI_SUCCESS);
  squallStats_t z = stats();
  if (z.passthrough[squallPassCodecUnsupported] > a.passthrough[squallPassCodecUnsupported]) {
    ck_assert_int_eq(PMPI_Reduce_scatter_block(g, ref, (int)b, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    ck_assert(memcmp(out, ref, b * 4) == 0);
  } else {
    ck_assert_uint_eq(z.compressedCalls - a.compressedCalls, 1);
    ck_assert_uint_eq(z.twoLevelCalls - a.twoLevelCalls, (uint64_t)two_level);
  }
  free(g);
  free(out);
  free(ref);
}
END_TEST

/* --------------------------------------------------------------- faults */

/* A failure across nodes (the inner exchange) or inside the node (its
 * ring): an error on every rank, the residual as it was, the next call
 * runs. */
static void check_fault(const char *spec, int a2a, int ring) {
  size_t b = 1500, n = b * (size_t)nranks;
  float *before = malloc(n * 4), *after = malloc(n * 4), *g = malloc(n * 4), *out = malloc(b * 4);
  use_config(spec);
  ck_assert_int_eq(squallMpiResetResiduals(MPI_COMM_WORLD), MPI_SUCCESS);
  for (int t = 0; t < 3; t++) { /* a residual with mass */
    fill(g, n, 700 + (uint64_t)t);
    ck_assert_int_eq(rs(MPI_COMM_WORLD, g, out, b), MPI_SUCCESS);
  }
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, g, (int)b, MPI_FLOAT, before), MPI_SUCCESS);
  fill(g, n, 703);
  squallStats_t a = stats();
  arm(a2a, ring);
  int r = rs(MPI_COMM_WORLD, g, out, b);
  int was_fired = fired;
  arm(0, 0);
  squallStats_t z = stats();
  ck_assert_msg(was_fired, "%s: the fault did not fire", spec);
  int failed = r != MPI_SUCCESS, everywhere = 0;
  MPI_Allreduce(&failed, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  ck_assert_msg(everywhere, "%s: a rank returned success after an injected failure", spec);
  ck_assert_uint_eq(z.twoLevelCalls - a.twoLevelCalls, 0);
  ck_assert_int_eq(squall__mpi_get_scatter_residual(MPI_COMM_WORLD, g, (int)b, MPI_FLOAT, after), MPI_SUCCESS);
  all_agree(memcmp(before, after, n * 4) == 0 ? "" : "the residual was not restored");
  ck_assert_msg(rs(MPI_COMM_WORLD, g, out, b) == MPI_SUCCESS, "%s: after the failure: %s", spec, squallGetLastError());
  free(before);
  free(after);
  free(g);
  free(out);
}

START_TEST(test_faults_restore_residual) {
  if (!two_level) return; /* flat: test_reducescatter_mpi's faults */
  check_fault("SQUALL_COMPRESS=int8", 1, 0);
  check_fault("SQUALL_COMPRESS=fp16", 1, 0);
  check_fault("SQUALL_COMPRESS=int8", 0, 1);
}
END_TEST

/* ------------------------------------------------ engine-level layouts */
static uint64_t key_mod2(int r) { return (uint64_t)(r % 2); }
static squallResult_t node_key_mod2(void *ctx, void *stream, uint64_t *key) {
  (void)ctx, (void)stream;
  *key = key_mod2(rank);
  return squallSuccess;
}

/* Rank 0's kernel memory runs out while armed. */
static int alloc_fail;
static void *failing_alloc(void *stream, size_t bytes) {
  if (rank == 0 && alloc_fail) {
    fired = 1;
    return NULL;
  }
  return squall__kernels_host.alloc(stream, bytes);
}

/* An engine whose nodes are rank % 2 (ranks 0, 2, ... on node 0): a node
 * table out of rank order; spec on top of the process's configuration,
 * with no SQUALL_RANKS_PER_NODE, so that the transport's keys count. */
static void setup(engine_fixture *f, const char *spec) {
  ef_open(f);
  f->tr.node_key = node_key_mod2;
  f->k.alloc = failing_alloc;
  ef_engine(f);
  squallConfig_t c = ef_config(spec);
  c.ranksPerNode = 0;
  ef_set(f, &c);
}

static squall_decision engine_rs(engine_fixture *f, const float *g, float *out, size_t b, squall_op op) {
  return ef_call(f, SQ_COLL_REDUCE_SCATTER, g, out, b * (size_t)nranks, op);
}

/* Blocks reach their owners through a node table out of rank order, the
 * residual is placed back at the owners' blocks, and the average divides
 * by every rank. */
START_TEST(test_permuted_nodes_and_average) {
  if (nranks % 2 || nranks < 4) return; /* two equal nodes of rank % 2 */
  use_config("SQUALL_COMPRESS=int8");
  int *nd = malloc(sizeof(int) * (size_t)nranks), *lc = malloc(sizeof(int) * (size_t)nranks);
  for (int r = 0; r < nranks; r++) nd[r] = (int)key_mod2(r), lc[r] = r / 2;
  MPI_Comm mod2;
  MPI_Comm_split(MPI_COMM_WORLD, lc[rank], nd[rank], &mod2); /* one rank per node: flat */
  size_t b = 1234, n = b * (size_t)nranks, s = 2 * b;
  float *g = malloc(n * 4), *out = malloc(b * 4), *chunk = malloc(s * 4), *ref = malloc(b * 4);
  float *res = malloc(n * 4), *cres = malloc(s * 4);
  engine_fixture f;
  setup(&f, "SQUALL_COMPRESS=int8");
  ck_assert_int_eq(squallMpiResetResiduals(mod2), MPI_SUCCESS);
  for (int t = 0; t < 3; t++) {
    fill(g, n, 800 + (uint64_t)t);
    squall_decision d = engine_rs(&f, g, out, b, t == 2 ? SQ_OP_AVG : SQ_OP_SUM);
    ck_assert_int_eq(d.route, SQ_ROUTE_TWOLEVEL);
    chunk_of(nd, lc, 2, 800 + (uint64_t)t, b, chunk);
    ck_assert_int_eq(rs(mod2, chunk, ref, b), MPI_SUCCESS);
    if (t == 2)
      for (size_t i = 0; i < b; i++) ref[i] /= (float)nranks;
    check_bits(out, ref, b, t == 2 ? "rank % 2 nodes, average" : "rank % 2 nodes", t);
  }
  ck_assert_int_eq(squall__engine_get_scatter_residual(f.e, g, n, SQ_DT_F32, res), squallSuccess);
  ck_assert_int_eq(squall__mpi_get_scatter_residual(mod2, chunk, (int)b, MPI_FLOAT, cres), MPI_SUCCESS);
  check_residual(nd, lc, res, cres, b, "rank % 2 nodes");
  ef_close(&f);
  MPI_Comm_free(&mod2);
  free(nd);
  free(lc);
  free(g);
  free(out);
  free(chunk);
  free(ref);
  free(res);
  free(cres);
}
END_TEST

/* One rank cannot grow the two-level memory of a larger call (allocated
 * before the call header): every rank passes it through together; the
 * retry runs two-level. */
START_TEST(test_alloc_fault_passes_together) {
  if (nranks % 2 || nranks < 4) return;
  engine_fixture f;
  setup(&f, "SQUALL_COMPRESS=fp16");
  size_t b0 = 300, b = 3000, n = b * (size_t)nranks;
  float *g = malloc(n * 4), *out = malloc(b * 4);
  fill(g, n, 900);
  ck_assert_int_eq(engine_rs(&f, g, out, b0, SQ_OP_SUM).route, SQ_ROUTE_TWOLEVEL);
  alloc_fail = 1;
  fired = 0;
  squall_decision d = engine_rs(&f, g, out, b, SQ_OP_SUM);
  alloc_fail = 0;
  if (rank == 0) ck_assert_msg(fired, "no allocation for a growing two-level reduce-scatter");
  int route = d.route, lo, hi;
  MPI_Allreduce(&route, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&route, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ck_assert_int_eq(lo, SQ_ROUTE_PASS);
  ck_assert_int_eq(hi, SQ_ROUTE_PASS);
  ck_assert_int_eq(d.reason, squallPassError);
  ck_assert_int_eq(engine_rs(&f, g, out, b, SQ_OP_SUM).route, SQ_ROUTE_TWOLEVEL);
  ef_close(&f);
  free(g);
  free(out);
}
END_TEST

/* The cost model weighs a two-level reduce-scatter against the flat one
 * from the reduce-scatter's own figures: its whole-call times go there, not
 * into the all-reduce's (they did, so the reduce-scatter's choice never saw
 * its two-level time, and the all-reduce's read times of another call). */
START_TEST(test_twolevel_times_its_own) {
  if (nranks % 2 || nranks < 4) return;
  const char *spec = "SQUALL_COMPRESS=fp16 SQUALL_MIN_BYTES=0 SQUALL_COST_MODEL=on SQUALL_LINK_GBPS=0.01";
  engine_fixture f;
  setup(&f, spec);
  size_t b = 4096, n = b * (size_t)nranks;
  float *g = malloc(n * 4), *out = malloc(b * 4);
  int twolevel = 0;
  for (int t = 0; t < 12; t++) {
    fill(g, n, 1000 + (uint64_t)t);
    twolevel += engine_rs(&f, g, out, b, SQ_OP_SUM).route == SQ_ROUTE_TWOLEVEL;
  }
  ck_assert_msg(twolevel >= 3, "%d of 12 calls ran two-level: too few to have a time", twolevel);
  squallConfig_t cfg;
  squallGetConfig(&cfg);
  ck_assert_int_eq(squallConfigParse(&cfg, spec), squallSuccess);
  int kind = squall__cost_kind(&cfg, SQ_ROUTE_TWOLEVEL);
  squall_call rsc = {.count = n, .coll = SQ_COLL_REDUCE_SCATTER, .dtype = SQ_DT_F32, .elsize = 4, .premul = 1.0f};
  squall_call arc = rsc;
  arc.coll = SQ_COLL_ALLREDUCE;
  ck_assert_ptr_ne(squall__cost_of(f.e, &rsc), squall__cost_of(f.e, &arc));
  ck_assert_msg(squall__cost_call_seconds(squall__cost_of(f.e, &rsc), kind, n * 4) > 0,
                "the reduce-scatter's figures have no two-level time after %d two-level calls", twolevel);
  ck_assert_msg(squall__cost_call_seconds(squall__cost_of(f.e, &arc), kind, n * 4) == 0,
                "the all-reduce's figures hold a two-level time, and no all-reduce ran");
  ef_close(&f);
  free(g);
  free(out);
}
END_TEST

/* SQUALL_RANKS_PER_NODE's layout, and the communicator across nodes. */
static int layout(void) {
  two_level = mc_two_level(nranks, &rpn);
  nodes = two_level ? nranks / rpn : 1;
  node_of = malloc(sizeof(int) * (size_t)nranks);
  local_of = malloc(sizeof(int) * (size_t)nranks);
  for (int r = 0; r < nranks; r++) node_of[r] = r / rpn, local_of[r] = r % rpn;
  MPI_Comm_split(MPI_COMM_WORLD, local_of[rank], node_of[rank], &across);
  return MC_RUN;
}

static void free_layout(void) {
  MPI_Comm_free(&across);
  free(node_of);
  free(local_of);
}

int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "reducescatter-twolevel", .rank = &rank, .nranks = &nranks,
      .errors_return = 1, /* the error cases return */
      .setup = layout,
      .teardown = free_layout,
      .cases = MC_CASES(
          {"two levels", 600, MC_TESTS(test_matches_model, test_fp16_exact, test_conservation,
                                       test_in_place_pipelined_identical, test_topk_consistent,
                                       test_faults_restore_residual, test_permuted_nodes_and_average,
                                       test_alloc_fault_passes_together, test_twolevel_times_its_own)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

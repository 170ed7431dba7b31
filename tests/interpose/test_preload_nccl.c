/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_preload_nccl.c - an NCCL program that knows nothing of squall (plain
 * nccl.h, linked with -lnccl, unique ids broadcast with MPI), run by
 * tests/interpose/preload-nccl.sh with LD_PRELOAD=libsquall-preload.so against the
 * host-memory NCCL of tests/nccl/fakenccl (or with no interposer at all).
 *
 *   test_preload_nccl run MODE DIR     (under mpirun, every rank)
 *   test_preload_nccl check DIR NP     (once, afterwards)
 *
 * MODE is what the results must be:
 *   plain       no interposer: every sum is exact
 *   topk:RATIO  top-k, fp32 values, error feedback: each compressed result
 *               equals, bit for bit, a model of the codec computed here from
 *               every rank's input (k = ceil(RATIO*n) entries of largest |a|,
 *               ties to the lower index, a = premul*g + e, summed in rank
 *               order); averages are that sum divided by the rank count
 *   fp16, bf16  within the 16-bit error bound of the exact sum, and not exact
 * Whatever the mode, calls squall must pass through (integer, max, small,
 * inside a group, single-rank communicators, device-resident PreMulSum
 * scalars) are exact, and every rank of a communicator holds the same bits.
 * Inputs are multiples of 2^-8 below 2^12 in magnitude, so every dense sum is
 * exact in float whatever the order.
 *
 * "run" also writes DIR/expect.<rank>: how many calls squall should have
 * compressed and passed through, by reason; "check" compares that with the
 * SQUALL_STATS files DIR/stats.<rank>.json the interposer writes at exit.
 */
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXP 16

static int wrank, wsize, failures, checks;
static char mode[64];
static double ratio; /* > 0 in topk mode */
static int half_mode, plain_mode;

static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "test_preload_nccl: rank %d: FAIL: ", wrank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  failures++;
}

static void check(int ok, const char *fmt, ...) {
  checks++;
  if (ok) return;
  va_list ap;
  va_start(ap, fmt);
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fail("%s", msg);
}

#define NCCL_OK(call)                                                                        \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    check(r_ == ncclSuccess, "%s returned %d (%s)", #call, (int)r_, ncclGetErrorString(r_)); \
  } while (0)

/* ------------------------------------------------------------ what squall should count */
enum { R_IN_GROUP,
       R_TYPE,
       R_OP,
       R_SMALL,
       R_SINGLE,
       R_NONBLOCKING,
       R_COUNT };
static const char *reason_key[R_COUNT] = {"in_group", "type", "op", "small", "single_rank", "nonblocking"};
static long exp_compressed, exp_pass[R_COUNT];

/* ------------------------------------------------------------ communicators */
typedef struct {
  ncclComm_t nc;
  MPI_Comm mc; /* the same ranks in the same order, for checks */
  int rank, size;
  int world[MAXP]; /* world rank of each member */
  const char *name;
} tcomm;

static void members(tcomm *c) {
  MPI_Comm_rank(c->mc, &c->rank);
  MPI_Comm_size(c->mc, &c->size);
  MPI_Allgather(&wrank, 1, MPI_INT, c->world, 1, MPI_INT, c->mc);
}

static ncclUniqueId new_id(void) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (wrank == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  return id;
}

/* A communicator over all ranks; config NULL means ncclCommInitRank. */
static void world_comm(tcomm *c, const char *name, ncclConfig_t *config) {
  memset(c, 0, sizeof *c);
  c->name = name;
  ncclUniqueId id = new_id();
  if (config) {
    /* A non-blocking init may also answer ncclInProgress. */
    ncclResult_t r = ncclCommInitRankConfig(&c->nc, wsize, id, wrank, config);
    check(r == ncclSuccess || (r == ncclInProgress && config->blocking == 0),
          "ncclCommInitRankConfig returned %d (%s)", (int)r, ncclGetErrorString(r));
  } else
    NCCL_OK(ncclCommInitRank(&c->nc, wsize, id, wrank));
  MPI_Comm_dup(MPI_COMM_WORLD, &c->mc);
  members(c);
}

/* A new non-blocking communicator (r: what its creation answered) is
 * polled until ready, then joined to the world's MPI mirror. */
static void nonblocking_ready(tcomm *c, ncclResult_t r, const char *what) {
  check(r == ncclSuccess || r == ncclInProgress, "%s: %d", what, (int)r);
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 1000 && state == ncclInProgress; i++) NCCL_OK(ncclCommGetAsyncError(c->nc, &state));
  check(state == ncclSuccess, "%s: state %d after polling", what, (int)state);
  MPI_Comm_dup(MPI_COMM_WORLD, &c->mc);
  members(c);
}

static void drop(tcomm *c) {
  MPI_Comm_free(&c->mc);
  c->nc = NULL;
}

/* ------------------------------------------------------------ data and the model */
static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* World rank r's gradient for (tensor, step): multiples of 2^-8 in (-2^12, 2^12). */
static void gen(float *g, size_t n, int tensor, int step, int r) {
  uint64_t s = ((uint64_t)tensor << 40) ^ ((uint64_t)step << 20) ^ (uint64_t)r;
  for (size_t i = 0; i < n; i++) g[i] = (float)((int64_t)(splitmix(&s) % (1u << 21)) - (1 << 20)) / 256.0f;
}

/* k as squall computes it: ceil(ratio*n), where a fraction within 4 ulps is
 * the rounding of a decimal ratio rather than a real remainder. */
static size_t topk_k(size_t n, double r) {
  double x = r * (double)n;
  size_t m = (size_t)x;
  size_t k = x - (double)m > 4.0 * 2.220446049250313e-16 * x ? m + 1 : m;
  return k < 1 ? 1 : k > n ? n
                           : k;
}

static const float *cmp_a;
static int by_magnitude(const void *x, const void *y) {
  uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
  float a = fabsf(cmp_a[i]), b = fabsf(cmp_a[j]);
  if (a != b) return a > b ? -1 : 1;
  return i < j ? -1 : i > j;
}
static int ascending(const void *x, const void *y) {
  uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
  return i < j ? -1 : i > j;
}

/* One tensor of one communicator: the caller's buffers and the model's
 * residual of every member. */
typedef struct {
  int id;
  size_t n;
  float *send, *recv;
  float *res; /* size * n */
} tensor;

static tensor *tensor_new(int id, size_t n, int size) {
  tensor *t = calloc(1, sizeof *t);
  t->id = id;
  t->n = n;
  t->send = malloc(n * sizeof(float));
  t->recv = malloc(n * sizeof(float));
  t->res = calloc((size_t)size * n, sizeof(float));
  return t;
}

/* The residuals squall keeps for a tensor vanish with its communicator. */
static void tensor_reset(tensor *t, int size) { memset(t->res, 0, (size_t)size * t->n * sizeof(float)); }

/* Fills t->send with this rank's input and exact with the exact sum of all
 * members' premul*g. When compressed (top-k mode), also model with the
 * top-k model's sum, advancing the model's residuals as squall advances its
 * own; a call squall passes through leaves them alone. Returns max
 * |premul*g| over the members. */
static double expected(const tcomm *c, tensor *t, int step, float premul, int compressed, float *exact,
                       float *model) {
  size_t n = t->n, k = compressed && ratio > 0 ? topk_k(n, ratio) : 0;
  float *g = malloc(n * sizeof *g), *a = malloc(n * sizeof *a);
  uint32_t *idx = malloc(n * sizeof *idx);
  double *sum = calloc(n, sizeof *sum), maxabs = 0;
  memset(model, 0, n * sizeof *model);
  for (int m = 0; m < c->size; m++) {
    gen(g, n, t->id, step, c->world[m]);
    if (m == c->rank) memcpy(t->send, g, n * sizeof *g);
    float *e = t->res + (size_t)m * n;
    for (size_t i = 0; i < n; i++) {
      float pg = premul * g[i];
      sum[i] += pg;
      if (fabs(pg) > maxabs) maxabs = fabs(pg);
      a[i] = pg + e[i];
    }
    if (k == 0) continue;
    for (size_t i = 0; i < n; i++) idx[i] = (uint32_t)i;
    cmp_a = a;
    qsort(idx, n, sizeof *idx, by_magnitude);
    qsort(idx, k, sizeof *idx, ascending);
    memcpy(e, a, n * sizeof *e); /* what is not sent stays */
    for (size_t j = 0; j < k; j++) {
      e[idx[j]] = 0.0f;
      model[idx[j]] += a[idx[j]];
    }
  }
  for (size_t i = 0; i < n; i++) exact[i] = (float)sum[i];
  free(g);
  free(a);
  free(idx);
  free(sum);
  return maxabs;
}

static uint64_t fnv(const void *p, size_t bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ULL;
  return h;
}

static void same_on_all(const tcomm *c, const void *buf, size_t bytes, const char *what) {
  uint64_t h = fnv(buf, bytes), all[MAXP];
  MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, c->mc);
  int same = 1;
  for (int m = 0; m < c->size; m++) same &= all[m] == h;
  check(same, "%s on %s: ranks hold different results", what, c->name);
}

static void same_bits(const float *got, const float *want, size_t n, const char *what, const char *vs) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof(float)) && bad++ == 0) first = i;
  check(bad == 0, "%s: %zu of %zu elements differ from %s, first at %zu: %.9g != %.9g", what, bad, n, vs, first,
        bad ? got[first] : 0.0, bad ? want[first] : 0.0);
}

/* Another collective into the caller's group: a broadcast from rank 0. */
static void mix_in(tcomm *c) {
  int v = c->rank == 0 ? 42 : 0;
  NCCL_OK(ncclBroadcast(&v, &v, 1, ncclInt32, 0, c->nc, NULL));
  check(v == 42, "the broadcast in a group delivered %d, expected 42", v);
}

/* ------------------------------------------------------------ one all-reduce, checked */
/* Runs a float all-reduce of tensor t (op: ncclSum, ncclAvg or a PreMulSum
 * op with multiplier premul) and checks it. expect_reason is the reason
 * squall passes it through (PASS), or -1 when it compresses it. */
static void float_call(tcomm *c, tensor *t, int step, ncclRedOp_t op, float premul, int in_place,
                       int expect_reason, const char *what) {
  size_t n = t->n;
  float *exact = malloc(n * sizeof *exact), *model = malloc(n * sizeof *model);
  int compressed = !plain_mode && expect_reason < 0;
  double maxabs = expected(c, t, step, premul, compressed, exact, model);
  int avg = op == ncclAvg;
  float *out = in_place ? t->send : t->recv;
  NCCL_OK(ncclAllReduce(t->send, out, n, ncclFloat32, op, c->nc, NULL));
  char label[160];
  snprintf(label, sizeof label, "%s (tensor %d step %d on %s)", what, t->id, step, c->name);
  same_on_all(c, out, n * sizeof *out, label);
  if (!plain_mode) {
    if (expect_reason < 0) exp_compressed++;
    else exp_pass[expect_reason]++;
  }
  if (!compressed || ratio > 0) {
    /* Exact: dense, or the top-k model. A squall-compressed call keeps
     * its residual; a passed-through one leaves the model's untouched. */
    const float *want = compressed ? model : exact;
    if (avg) {
      /* The sum over P: squall divides the sum by P (one rounding); NCCL may
       * scale each input by 1/P first (P+1 roundings of terms <= maxabs). */
      double tol = (c->size + 2) * 1.1920929e-07 * maxabs;
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < n; i++) {
        double w = (double)want[i] / c->size;
        if (fabs(out[i] - w) > tol && bad++ == 0) first = i;
      }
      check(bad == 0, "%s: %zu elements off the average, first at %zu: %.9g != %.9g", label, bad, first,
            bad ? out[first] : 0.0, bad ? (double)want[first] / c->size : 0.0);
    } else {
      same_bits(out, want, n, label, compressed ? "the top-k model" : "the exact sum");
    }
  } else if (half_mode) {
    /* Per element: the residuals before and after (one 16-bit rounding each,
     * at most 2^-11 (fp16) or 2^-8 (bf16) of twice the scaled global max),
     * and the P-1 additions in 16 bits. */
    double unit = strcmp(mode, "fp16") == 0 ? 1.0 / 2048 : 1.0 / 256, p = c->size;
    double bound = (2 * p + p * p) * unit * 4 * maxabs, err = 0;
    for (size_t i = 0; i < n; i++) {
      double w = exact[i] / (avg ? p : 1.0), d = fabs(out[i] - w);
      if (d > err) err = d;
    }
    check(err <= bound, "%s: error %g above the %s bound %g", label, err, mode, bound);
    check(err > 0, "%s: result is exact, so it was not compressed with %s", label, mode);
  }
  free(exact);
  free(model);
}

/* Integer sum, float max, and a small float sum: squall must not touch them. */
static void passthrough_calls(tcomm *c) {
  size_t n = 65536;
  int32_t *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
  int64_t *sum = calloc(n, sizeof *sum);
  for (int m = 0; m < c->size; m++) {
    uint64_t s = 77 + (uint64_t)c->world[m];
    for (size_t i = 0; i < n; i++) {
      int32_t v = (int32_t)(splitmix(&s) % (1u << 25)) - (1 << 24);
      if (m == c->rank) in[i] = v;
      sum[i] += v;
    }
  }
  NCCL_OK(ncclAllReduce(in, out, n, ncclInt32, ncclSum, c->nc, NULL));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += out[i] != (int32_t)sum[i];
  check(bad == 0, "int32 sum on %s: %zu elements differ from the exact sum", c->name, bad);
  if (!plain_mode) exp_pass[R_TYPE]++; /* squall looks at the type first, single rank or not */
  free(in);
  free(out);
  free(sum);

  float *g = malloc(n * sizeof *g), *mx = malloc(n * sizeof *mx), *fo = malloc(n * sizeof *fo);
  float *mine = malloc(n * sizeof *mine);
  for (int m = 0; m < c->size; m++) {
    gen(g, n, 900, 0, c->world[m]);
    if (m == c->rank) memcpy(mine, g, n * sizeof *g);
    for (size_t i = 0; i < n; i++) mx[i] = m == 0 || g[i] > mx[i] ? g[i] : mx[i];
  }
  NCCL_OK(ncclAllReduce(mine, fo, n, ncclFloat32, ncclMax, c->nc, NULL));
  same_bits(fo, mx, n, "float max", "the exact maximum");
  if (!plain_mode) exp_pass[R_OP]++;
  free(g);
  free(mx);
  free(fo);
  free(mine);
}

/* ------------------------------------------------------------ the run */
static void write_expectations(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/expect.%d", dir, wrank);
  FILE *f = fopen(path, "w");
  if (!f) {
    fail("cannot write %s", path);
    return;
  }
  fprintf(f, "compressed %ld\n", exp_compressed);
  for (int r = 0; r < R_COUNT; r++) fprintf(f, "%s %ld\n", reason_key[r], exp_pass[r]);
  fclose(f);
}

static int run(const char *dir) {
  if (wsize < 2 || wsize > MAXP) {
    fprintf(stderr, "test_preload_nccl: needs 2 to %d ranks, got %d\n", MAXP, wsize);
    return 2;
  }
  int v = 0;
  NCCL_OK(ncclGetVersion(&v));
  if (wrank == 0) printf("test_preload_nccl: %s on %d ranks, NCCL %d\n", mode, wsize, v);

  /* 1. Eligible sums on a world communicator, over steps (the residual
   *    carries), in place, averaged, and with a host PreMulSum scalar. */
  tcomm c1;
  world_comm(&c1, "comm1", NULL);
  tensor *t1 = tensor_new(1, 65543, wsize), *t2 = tensor_new(2, 50000, wsize);
  /* t4's shape differs from t3's: a buffer squall has not seen inherits
   * the residual of a same-shape tensor whose buffer it never saw again
   * (squall(7), RESIDUALS), which this model does not follow. */
  tensor *t3 = tensor_new(3, 40000, wsize), *t4 = tensor_new(4, 40001, wsize);
  for (int s = 0; s < 3; s++) float_call(&c1, t1, s, ncclSum, 1.0f, 0, -1, "float sum");
  for (int s = 0; s < 2; s++) float_call(&c1, t2, s, ncclSum, 1.0f, 1, -1, "in-place float sum");
  float_call(&c1, t3, 0, ncclAvg, 1.0f, 0, -1, "float average");
  float quarter = 0.25f;
  ncclRedOp_t pm;
  NCCL_OK(ncclRedOpCreatePreMulSum(&pm, &quarter, ncclFloat32, ncclScalarHostImmediate, c1.nc));
  quarter = 8.0f; /* host-immediate: NCCL and squall took the value at creation */
  float_call(&c1, t4, 0, pm, 0.25f, 0, -1, "PreMulSum(0.25, host) sum");
  NCCL_OK(ncclRedOpDestroy(pm, c1.nc));

  /* 2. What squall must pass through untouched. A device-resident scalar
   *    cannot be read without synchronising, so that op is not a sum to it. */
  tensor *t5 = tensor_new(5, 40000, wsize);
  float dev_scalar = 0.25f;
  NCCL_OK(ncclRedOpCreatePreMulSum(&pm, &dev_scalar, ncclFloat32, ncclScalarDevice, c1.nc));
  float_call(&c1, t5, 0, pm, 0.25f, 0, R_OP, "PreMulSum(0.25, device) sum");
  NCCL_OK(ncclRedOpDestroy(pm, c1.nc));
  passthrough_calls(&c1);
  tensor *small = tensor_new(6, 100, wsize); /* 400 bytes < SQUALL_MIN_BYTES=4K */
  float_call(&c1, small, 0, ncclSum, 1.0f, 0, R_SMALL, "small float sum");

  /* 3. Groups that mix another collective in (an ncclBroadcast first):
   *    inside (nested too) every all-reduce passes into NCCL's group; after
   *    the outermost end, and after ncclGroupSimulateEnd, calls compress
   *    again. Groups of all-reduces alone: tests/interpose/preload-group.sh. */
  tensor *t7 = tensor_new(7, 65536, wsize);
  NCCL_OK(ncclGroupStart());
  mix_in(&c1);
  float_call(&c1, t7, 0, ncclSum, 1.0f, 0, R_IN_GROUP, "float sum in a group");
  NCCL_OK(ncclGroupStart());
  float_call(&c1, t7, 1, ncclSum, 1.0f, 0, R_IN_GROUP, "float sum in a nested group");
  NCCL_OK(ncclGroupEnd());
  float_call(&c1, t7, 2, ncclSum, 1.0f, 0, R_IN_GROUP, "float sum in the outer group");
  NCCL_OK(ncclGroupEnd());
  float_call(&c1, t7, 3, ncclSum, 1.0f, 0, -1, "float sum after the group");
  NCCL_OK(ncclGroupStart());
  mix_in(&c1);
  float_call(&c1, t7, 4, ncclSum, 1.0f, 0, R_IN_GROUP, "float sum in a simulated group");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCL_OK(ncclGroupSimulateEnd(&sim));
  float_call(&c1, t7, 5, ncclSum, 1.0f, 0, -1, "float sum after ncclGroupSimulateEnd");
  ncclResult_t r = ncclGroupEnd(); /* not in a group: NCCL's own error */
  check(r == ncclInvalidUsage, "ncclGroupEnd outside a group returned %d, expected ncclInvalidUsage", (int)r);
  float_call(&c1, t7, 6, ncclSum, 1.0f, 0, -1, "float sum after a stray ncclGroupEnd");

  /* 4. Bad arguments: NCCL's answers, and squall counts nothing. */
  r = ncclAllReduce(t1->send, t1->recv, t1->n, ncclFloat32, ncclSum, NULL, NULL);
  check(r == ncclInvalidArgument, "ncclAllReduce with a NULL comm returned %d, expected ncclInvalidArgument",
        (int)r);

  /* 5. A second communicator (InitRankConfig), interleaved with the first. */
  tcomm c2;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  world_comm(&c2, "comm2", &cfg);
  tensor *t8 = tensor_new(8, 30000, wsize);
  for (int s = 0; s < 2; s++) {
    float_call(&c2, t8, s, ncclSum, 1.0f, 0, -1, "float sum on the second communicator");
    float_call(&c1, t1, 3 + s, ncclSum, 1.0f, 0, -1, "float sum interleaved on the first");
  }

  /* 6. Destroy, then re-create: the new communicator (often at the same
   *    address) starts with no residual for the same buffer. */
  ncclComm_t old = c2.nc;
  NCCL_OK(ncclCommDestroy(c2.nc));
  drop(&c2);
  world_comm(&c2, "comm2 re-created", NULL);
  tensor_reset(t8, wsize);
  if (wrank == 0)
    printf("test_preload_nccl: re-created communicator at %s address\n", c2.nc == old ? "the same" : "another");
  float_call(&c2, t8, 2, ncclSum, 1.0f, 0, -1, "float sum on the re-created communicator");

  /* 7. A split: the last rank alone when there are three or more. */
  tcomm c3;
  memset(&c3, 0, sizeof c3);
  c3.name = "split";
  int color = wsize > 2 && wrank == wsize - 1 ? 1 : 0;
  NCCL_OK(ncclCommSplit(c1.nc, color, wrank, &c3.nc, NULL));
  MPI_Comm_split(MPI_COMM_WORLD, color, wrank, &c3.mc);
  members(&c3);
  tensor *t9 = tensor_new(9, 30000, wsize);
  float_call(&c3, t9, 0, ncclSum, 1.0f, 0, c3.size > 1 ? -1 : R_SINGLE, "float sum on a split communicator");
  passthrough_calls(&c3);

  /* 8. Shrink: all but the last rank. */
  tcomm c4;
  memset(&c4, 0, sizeof c4);
  c4.name = "shrunk";
  int last = wsize - 1;
  MPI_Comm_split(MPI_COMM_WORLD, wrank == last ? MPI_UNDEFINED : 0, wrank, &c4.mc);
  tensor *t10 = tensor_new(10, 30000, wsize);
  if (wrank != last) {
    NCCL_OK(ncclCommShrink(c1.nc, &last, 1, &c4.nc, NULL, NCCL_SHRINK_DEFAULT));
    members(&c4);
    float_call(&c4, t10, 0, ncclSum, 1.0f, 0, c4.size > 1 ? -1 : R_SINGLE, "float sum on a shrunk communicator");
    NCCL_OK(ncclCommRevoke(c4.nc, NCCL_REVOKE_DEFAULT));
    NCCL_OK(ncclCommDestroy(c4.nc));
    drop(&c4);
  }

  /* 9. Abort while idle, then the first communicator still works. */
  tcomm c5;
  world_comm(&c5, "comm5", NULL);
  tensor *t11 = tensor_new(11, 30000, wsize);
  float_call(&c5, t11, 0, ncclSum, 1.0f, 0, -1, "float sum before an abort");
  NCCL_OK(ncclCommAbort(c5.nc));
  drop(&c5);
  float_call(&c1, t1, 5, ncclSum, 1.0f, 0, -1, "float sum after another communicator's abort");

  /* 10. Non-blocking: polled until ready, then passed through untouched
   * (NCCL may answer ncclInProgress to squall's own collectives). */
  tcomm c6;
  ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
  nb.blocking = 0;
  ncclConfig_t blocking_cfg = NCCL_CONFIG_INITIALIZER;
  blocking_cfg.blocking = 1;
  world_comm(&c6, "non-blocking", &nb);
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 1000 && state == ncclInProgress; i++) NCCL_OK(ncclCommGetAsyncError(c6.nc, &state));
  check(state == ncclSuccess, "non-blocking communicator: state %d after polling", (int)state);
  tensor *t12 = tensor_new(12, 30000, wsize);
  float_call(&c6, t12, 0, ncclSum, 1.0f, 0, R_NONBLOCKING, "float sum on a non-blocking communicator");
  /* A split without a config inherits the parent's mode: non-blocking too. */
  tcomm c6s;
  memset(&c6s, 0, sizeof c6s);
  c6s.name = "non-blocking split";
  nonblocking_ready(&c6s, ncclCommSplit(c6.nc, 0, wrank, &c6s.nc, NULL), "split of a non-blocking communicator");
  tensor *t12s = tensor_new(14, 30000, wsize);
  float_call(&c6s, t12s, 0, ncclSum, 1.0f, 0, R_NONBLOCKING, "float sum on a non-blocking communicator's split");
  NCCL_OK(ncclCommDestroy(c6s.nc));
  drop(&c6s);
  /* NCCL's recovery: revoke, then shrink without a config. The revoke
   * drops squall's state of the communicator but not its mode, so the
   * child is non-blocking too. */
  if (wsize > 2) {
    tcomm c6r;
    memset(&c6r, 0, sizeof c6r);
    c6r.name = "shrink of a revoked non-blocking communicator";
    int last = wsize - 1;
    NCCL_OK(ncclCommRevoke(c6.nc, NCCL_REVOKE_DEFAULT));
    MPI_Comm_split(MPI_COMM_WORLD, wrank == last ? MPI_UNDEFINED : 0, wrank, &c6r.mc);
    if (wrank != last) {
      ncclResult_t r = ncclCommShrink(c6.nc, &last, 1, &c6r.nc, NULL, NCCL_SHRINK_DEFAULT);
      check(r == ncclSuccess || r == ncclInProgress, "shrink of a revoked communicator: %d", (int)r);
      ncclResult_t st = ncclInProgress;
      for (int i = 0; i < 1000 && st == ncclInProgress; i++) NCCL_OK(ncclCommGetAsyncError(c6r.nc, &st));
      members(&c6r);
      tensor *t12r = tensor_new(18, 30000, wsize);
      float_call(&c6r, t12r, 0, ncclSum, 1.0f, 0, R_NONBLOCKING, "float sum on the shrink of a revoked non-blocking communicator");
      NCCL_OK(ncclCommDestroy(c6r.nc));
      MPI_Comm_free(&c6r.mc);
    }
  }
  NCCL_OK(ncclCommFinalize(c6.nc));
  NCCL_OK(ncclCommDestroy(c6.nc));
  drop(&c6);
  /* NCCL_COMM_BLOCKING=0 or 1 overrides the config, as in NCCL: the
   * interposer must judge the mode NCCL gives, not the one asked for. */
  setenv("NCCL_COMM_BLOCKING", "1", 1);
  tcomm c6b;
  world_comm(&c6b, "NCCL_COMM_BLOCKING=1 over config blocking=0", &nb);
  tensor *t12b = tensor_new(15, 30000, wsize);
  float_call(&c6b, t12b, 0, ncclSum, 1.0f, 0, -1, "float sum on a communicator NCCL_COMM_BLOCKING=1 kept blocking");
  NCCL_OK(ncclCommDestroy(c6b.nc));
  drop(&c6b);
  setenv("NCCL_COMM_BLOCKING", "0", 1);
  tcomm c6e;
  memset(&c6e, 0, sizeof c6e);
  c6e.name = "NCCL_COMM_BLOCKING=0 without a config";
  ncclUniqueId id6e = new_id();
  nonblocking_ready(&c6e, ncclCommInitRank(&c6e.nc, wsize, id6e, wrank), "ncclCommInitRank under NCCL_COMM_BLOCKING=0");
  tensor *t12e = tensor_new(16, 30000, wsize);
  float_call(&c6e, t12e, 0, ncclSum, 1.0f, 0, R_NONBLOCKING, "float sum on a communicator NCCL_COMM_BLOCKING=0 made non-blocking");
  NCCL_OK(ncclCommDestroy(c6e.nc));
  drop(&c6e);
  unsetenv("NCCL_COMM_BLOCKING");
  /* The mode is each rank's own: rank 0 non-blocking, the others blocking.
   * The call header tells every rank, and every rank passes through (a
   * blocking rank that compressed alone would pair its collectives with
   * rank 0's plain all-reduce). */
  if (wsize > 1) {
    tcomm c6m;
    memset(&c6m, 0, sizeof c6m);
    c6m.name = "non-blocking on rank 0 only";
    ncclUniqueId id6m = new_id();
    nonblocking_ready(&c6m, ncclCommInitRankConfig(&c6m.nc, wsize, id6m, wrank, wrank == 0 ? &nb : &blocking_cfg),
                      "ncclCommInitRankConfig, non-blocking on rank 0 only");
    tensor *t12m = tensor_new(17, 30000, wsize);
    for (int step = 0; step < 2; step++)
      float_call(&c6m, t12m, step, ncclSum, 1.0f, 0, R_NONBLOCKING, "float sum, non-blocking on rank 0 only");
    NCCL_OK(ncclCommDestroy(c6m.nc));
    drop(&c6m);
  }

  /* 11. InitRankScalable with one id. */
  tcomm c7;
  memset(&c7, 0, sizeof c7);
  c7.name = "scalable";
  ncclUniqueId id = new_id();
  NCCL_OK(ncclCommInitRankScalable(&c7.nc, wsize, wrank, 1, &id, NULL));
  MPI_Comm_dup(MPI_COMM_WORLD, &c7.mc);
  members(&c7);
  tensor *t13 = tensor_new(13, 30000, wsize);
  float_call(&c7, t13, 0, ncclSum, 1.0f, 0, -1, "float sum on an InitRankScalable communicator");
  NCCL_OK(ncclCommDestroy(c7.nc));
  drop(&c7);

  /* 12. A failure squall raises itself (a count whose bytes overflow) is
   * what ncclGetLastError describes, not NCCL's older text; NCCL alone
   * refuses the count too. */
  float dummy = 0.0f;
  ncclResult_t er = ncclAllReduce(&dummy, &dummy, SIZE_MAX / 2, ncclFloat32, ncclSum, c1.nc, NULL);
  check(er == ncclInvalidArgument, "an overflowing count: %d", (int)er);
  const char *text = ncclGetLastError(c1.nc);
  check(plain_mode || (text && strstr(text, "squall") && strstr(text, "overflows")),
        "ncclGetLastError after squall's own failure: '%s'", text ? text : "(null)");
  /* named as the program called it */
  check(plain_mode || (text && strstr(text, "ncclAllReduce: count") && !strstr(text, "squallAllReduce")),
        "the message names the call the program made: '%s'", text ? text : "(null)");

  NCCL_OK(ncclCommDestroy(c3.nc));
  drop(&c3);
  NCCL_OK(ncclCommDestroy(c2.nc));
  drop(&c2);
  NCCL_OK(ncclCommFinalize(c1.nc));
  NCCL_OK(ncclCommDestroy(c1.nc));
  drop(&c1);

  if (!plain_mode) write_expectations(dir);
  int all[2] = {failures, checks}, sum[2];
  MPI_Allreduce(all, sum, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (wrank == 0)
    printf("test_preload_nccl: %s: %d checks, %d failed; rank 0 expects %ld compressed calls\n", mode, sum[1],
           sum[0], exp_compressed);
  return sum[0] ? 1 : 0;
}

/* ------------------------------------------------------------ the statistics check */
/* The number after "key": in a one-line JSON object; -1 when absent. */
static long json_number(const char *json, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(json, pat);
  return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

static int check_stats(const char *dir, int np) {
  int bad = 0;
  for (int r = 0; r < np; r++) {
    char path[600], json[4096] = "";
    snprintf(path, sizeof path, "%s/stats.%d.json", dir, r);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(json, sizeof json, f)) {
      printf("test_preload_nccl: FAIL: no statistics from rank %d (%s)\n", r, path);
      bad++;
      if (f) fclose(f);
      continue;
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/expect.%d", dir, r);
    f = fopen(path, "r");
    if (!f) {
      printf("test_preload_nccl: FAIL: no expectations from rank %d (%s)\n", r, path);
      bad++;
      continue;
    }
    char key[64];
    long want, pass_total = 0;
    while (fscanf(f, "%63s %ld", key, &want) == 2) {
      long got = json_number(json, strcmp(key, "compressed") ? key : "compressed_calls");
      if (strcmp(key, "compressed")) pass_total += want;
      if (got != want) {
        printf("test_preload_nccl: FAIL: rank %d: %s = %ld in the statistics, expected %ld\n", r, key, got, want);
        bad++;
      }
    }
    fclose(f);
    long got = json_number(json, "passthrough_calls");
    if (got != pass_total) {
      printf("test_preload_nccl: FAIL: rank %d: %ld calls passed through, expected %ld\n", r, got, pass_total);
      bad++;
    }
    const char *never[] = {"error", "config_mismatch", "disabled"};
    for (int i = 0; i < 3; i++)
      if ((got = json_number(json, never[i])) != 0) {
        printf("test_preload_nccl: FAIL: rank %d: %ld calls passed through for '%s'\n", r, got, never[i]);
        bad++;
      }
    if (!bad) printf("test_preload_nccl: rank %d statistics as expected: %s", r, json);
  }
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "check")) return check_stats(argv[2], atoi(argv[3]));
  if (argc != 4 || strcmp(argv[1], "run")) {
    fprintf(stderr, "usage: test_preload_nccl run plain|topk:RATIO|fp16|bf16 DIR\n"
                    "       test_preload_nccl check DIR NP\n");
    return 2;
  }
  snprintf(mode, sizeof mode, "%s", argv[2]);
  plain_mode = !strcmp(mode, "plain");
  half_mode = !strcmp(mode, "fp16") || !strcmp(mode, "bf16");
  if (!strncmp(mode, "topk:", 5)) ratio = atof(mode + 5);
  if (!plain_mode && !half_mode && !(ratio > 0 && ratio <= 1)) {
    fprintf(stderr, "test_preload_nccl: mode '%s' (accepted: plain, topk:RATIO, fp16, bf16)\n", mode);
    return 2;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  int rc = run(argv[3]);
  MPI_Finalize();
  return rc;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_fakenccl.c - sanity test of the test-only host-memory NCCL
 * (tests/nccl/fakenccl), run on 2 MPI ranks (tests/nccl/runs.list).
 *
 * Proves first that the process runs the fake, not the real libnccl.so.2;
 * then checks every collective against MPI for every datatype and operator,
 * through both name families (ncclX and pncclX), and the return codes of
 * bad calls. Plain C: each rank counts its checks, rank 0 prints the sums
 * as "N passed, N failed", and the exit status is nonzero on any failure.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks, passed, failed;

static void check_(int ok, int line, const char *expr, const char *fmt, ...) {
  if (ok) {
    passed++;
    return;
  }
  failed++;
  fprintf(stderr, "rank %d: test_fakenccl.c:%d: FAILED %s", rank, line, expr);
  if (fmt && *fmt) {
    va_list ap;
    va_start(ap, fmt);
    fputs(": ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
  }
  fputc('\n', stderr);
}
#define CHECK(cond, ...) check_(!!(cond), __LINE__, #cond, "" __VA_ARGS__)
/* A call's result code, named on failure together with the last error. */
#define CHECK_RC(call, want)                                                                     \
  do {                                                                                           \
    ncclResult_t rc_ = (call);                                                                   \
    check_(rc_ == (want), __LINE__, #call, "returned %d (%s), expected %d; last error: %s", rc_, \
           ncclGetErrorString(rc_), (int)(want), ncclGetLastError(NULL));                        \
  } while (0)

/* ---------------------------------------------------------------- both name families */
typedef struct api {
  const char *name;
  ncclResult_t (*getUniqueId)(ncclUniqueId *);
  ncclResult_t (*commInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*commDestroy)(ncclComm_t);
  ncclResult_t (*commCount)(const ncclComm_t, int *);
  ncclResult_t (*commUserRank)(const ncclComm_t, int *);
  ncclResult_t (*allReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*allGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*preMulSum)(ncclRedOp_t *, void *, ncclDataType_t, ncclScalarResidence_t, ncclComm_t);
  ncclResult_t (*redOpDestroy)(ncclRedOp_t, ncclComm_t);
  ncclResult_t (*groupStart)(void);
  ncclResult_t (*groupEnd)(void);
} api;

static const api families[] = {
    {"nccl", ncclGetUniqueId, ncclCommInitRank, ncclCommDestroy, ncclCommCount, ncclCommUserRank, ncclAllReduce,
     ncclAllGather, ncclBroadcast, ncclReduce, ncclReduceScatter, ncclRedOpCreatePreMulSum, ncclRedOpDestroy,
     ncclGroupStart, ncclGroupEnd},
    {"pnccl", pncclGetUniqueId, pncclCommInitRank, pncclCommDestroy, pncclCommCount, pncclCommUserRank,
     pncclAllReduce, pncclAllGather, pncclBroadcast, pncclReduce, pncclReduceScatter, pncclRedOpCreatePreMulSum,
     pncclRedOpDestroy, pncclGroupStart, pncclGroupEnd},
};

/* An id from rank 0, handed to every rank. */
static ncclUniqueId shared_id(const api *a) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0) CHECK_RC(a->getUniqueId(&id), ncclSuccess);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  return id;
}

static ncclComm_t world_comm(const api *a) {
  ncclComm_t c = NULL;
  CHECK_RC(a->commInitRank(&c, nranks, shared_id(a), rank), ncclSuccess);
  return c;
}

/* ---------------------------------------------------------------- data and oracles */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Independent 16-bit conversions: the compiler's _Float16 for binary16, and
 * for bfloat16 a choice between the two neighbours by distance. */
#ifdef __FLT16_MAX__
#define HAVE_HALF_ORACLE 1
static uint16_t oracle_half(float f) {
  _Float16 h = (_Float16)f;
  uint16_t u;
  memcpy(&u, &h, 2);
  return u;
}
static float oracle_half_to_float(uint16_t u) {
  _Float16 h;
  memcpy(&h, &u, 2);
  return (float)h;
}
#else
#define HAVE_HALF_ORACLE 0
static uint16_t oracle_half(float f) {
  (void)f;
  return 0;
}
static float oracle_half_to_float(uint16_t u) {
  (void)u;
  return 0;
}
#endif
static float bf16_value(uint32_t hi) {
  uint32_t u = hi << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t oracle_bf16(float f) { /* finite inputs only */
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t lo = u >> 16, hi = lo + 1; /* hi: next magnitude up */
  double dlo = (double)f - bf16_value(lo), dhi = (double)bf16_value(hi) - f;
  if (dlo < 0) dlo = -dlo;
  if (dhi < 0) dhi = -dhi;
  if (dlo < dhi || (dlo == dhi && !(lo & 1))) return (uint16_t)lo;
  return (uint16_t)hi;
}
static float oracle_bf16_to_float(uint16_t b) { return bf16_value(b); }

static const ncclDataType_t reducible[] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64,
                                           ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16};
#define NREDUCIBLE (sizeof reducible / sizeof reducible[0])
static const char *const tname[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                    "half", "float", "double", "bf16", "fp8e4m3", "fp8e5m2"};
static const size_t tsize[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
static const char *const opname[] = {"sum", "prod", "max", "min", "avg"};

static MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: return MPI_INT8_T;
  case ncclUint8: return MPI_UINT8_T;
  case ncclInt32: return MPI_INT32_T;
  case ncclUint32: return MPI_UINT32_T;
  case ncclInt64: return MPI_INT64_T;
  case ncclUint64: return MPI_UINT64_T;
  case ncclFloat32: return MPI_FLOAT;
  case ncclFloat64: return MPI_DOUBLE;
  default: return MPI_DATATYPE_NULL; /* 16-bit floats: no MPI type */
  }
}
static MPI_Op mpi_op(ncclRedOp_t op) {
  return op == ncclProd ? MPI_PROD : op == ncclMax ? MPI_MAX
                                 : op == ncclMin   ? MPI_MIN
                                                   : MPI_SUM;
}

/* Small values so that products of a few ranks stay in range: integers in
 * [-3, 3] ([0, 6] unsigned), floats k/4 with |k| <= 40 (dyadic: sums exact). */
static void fill(ncclDataType_t t, void *buf, size_t n, int r, uint64_t salt) {
  for (size_t i = 0; i < n; i++) {
    uint64_t m = mix(salt * 1000003u + (uint64_t)r * 7919u + i);
    int k = (int)(m % 7) - 3, q = (int)(m % 81) - 40;
    char *p = (char *)buf + i * tsize[t];
    switch (t) {
    case ncclInt8: *(int8_t *)p = (int8_t)k; break;
    case ncclUint8: *(uint8_t *)p = (uint8_t)(k + 3); break;
    case ncclInt32: *(int32_t *)p = k; break;
    case ncclUint32: *(uint32_t *)p = (uint32_t)(k + 3); break;
    case ncclInt64: *(int64_t *)p = k; break;
    case ncclUint64: *(uint64_t *)p = (uint64_t)(k + 3); break;
    case ncclFloat32: *(float *)p = q / 4.0f; break;
    case ncclFloat64: *(double *)p = q / 4.0; break;
    case ncclFloat16: *(uint16_t *)p = oracle_half(q / 4.0f); break;
    case ncclBfloat16: *(uint16_t *)p = oracle_bf16(q / 4.0f); break;
    default: *(uint8_t *)p = (uint8_t)m; break; /* fp8: bytes only */
    }
  }
}

static int is_pow2(int n) { return n > 0 && !(n & (n - 1)); }

/* Reference all-reduce. Native types: MPI_Allreduce itself (average: the MPI
 * sum divided by nranks). 16-bit floats: MPI_Allgather, then a rank-order
 * fold in float rounded by the oracle after each step. */
static void reference_allreduce(ncclDataType_t t, ncclRedOp_t op, const void *in, void *out, size_t n) {
  if (mpi_type(t) != MPI_DATATYPE_NULL) {
    MPI_Allreduce(in, out, (int)n, mpi_type(t), mpi_op(op), MPI_COMM_WORLD);
    if (op != ncclAvg) return;
    for (size_t i = 0; i < n; i++) {
      switch (t) {
      case ncclInt8: ((int8_t *)out)[i] = (int8_t)(((int8_t *)out)[i] / nranks); break;
      case ncclUint8: ((uint8_t *)out)[i] = (uint8_t)(((uint8_t *)out)[i] / nranks); break;
      case ncclInt32: ((int32_t *)out)[i] /= nranks; break;
      case ncclUint32: ((uint32_t *)out)[i] /= (uint32_t)nranks; break;
      case ncclInt64: ((int64_t *)out)[i] /= nranks; break;
      case ncclUint64: ((uint64_t *)out)[i] /= (uint64_t)nranks; break;
      case ncclFloat32: ((float *)out)[i] /= (float)nranks; break;
      default: ((double *)out)[i] /= nranks; break;
      }
    }
    return;
  }
  uint16_t (*to16)(float) = t == ncclFloat16 ? oracle_half : oracle_bf16;
  float (*from16)(uint16_t) = t == ncclFloat16 ? oracle_half_to_float : oracle_bf16_to_float;
  uint16_t *all = malloc(n * 2 * (size_t)nranks);
  MPI_Allgather(in, (int)(2 * n), MPI_BYTE, all, (int)(2 * n), MPI_BYTE, MPI_COMM_WORLD);
  uint16_t scale = to16(1.0f / (float)nranks);
  for (size_t i = 0; i < n; i++) {
    uint16_t acc = 0;
    for (int r = 0; r < nranks; r++) {
      uint16_t x = all[(size_t)r * n + i];
      if (op == ncclAvg) x = to16(from16(x) * from16(scale));
      if (r == 0) {
        acc = x;
        continue;
      }
      float a = from16(acc), b = from16(x), c;
      switch (op) {
      case ncclProd: c = a * b; break;
      case ncclMax: c = b > a ? b : a; break;
      case ncclMin: c = b < a ? b : a; break;
      default: c = a + b; break;
      }
      acc = to16(c);
    }
    ((uint16_t *)out)[i] = acc;
  }
  free(all);
}

/* Exact equality, element by element; names the first difference. */
static void check_equal(const void *got, const void *want, size_t n, ncclDataType_t t, int line, const char *what) {
  size_t s = tsize[t];
  for (size_t i = 0; i < n; i++) {
    if (memcmp((const char *)got + i * s, (const char *)want + i * s, s)) {
      uint64_t g = 0, w = 0;
      memcpy(&g, (const char *)got + i * s, s);
      memcpy(&w, (const char *)want + i * s, s);
      check_(0, line, what, "%s element %zu: got 0x%llx, expected 0x%llx", tname[t], i, (unsigned long long)g,
             (unsigned long long)w);
      return;
    }
  }
  check_(1, line, what, NULL);
}

/* ---------------------------------------------------------------- which library */
static void test_loaded_library(void) {
  Dl_info info;
  void *p = dlsym(RTLD_DEFAULT, "pncclAllReduce"), *q = dlsym(RTLD_DEFAULT, "ncclAllReduce");
  CHECK(p && q, "pncclAllReduce or ncclAllReduce not found");
  CHECK(p == q, "ncclAllReduce %p is not an alias of pncclAllReduce %p", q, p);
  memset(&info, 0, sizeof info);
  CHECK(p && dladdr(p, &info) && info.dli_fname, "dladdr found no library for pncclAllReduce");
  const char *path = info.dli_fname ? info.dli_fname : "";
  CHECK(strstr(path, "/tests/nccl/fakenccl/"), "NCCL comes from %s, not tests/nccl/fakenccl", path);
  if (rank == 0) printf("# NCCL library: %s\n", path);
  /* The real library must not be mapped at all. */
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[4096];
  int real = 0;
  while (maps && fgets(line, sizeof line, maps))
    if (strstr(line, "libnccl.so") && !strstr(line, "/tests/nccl/fakenccl/")) {
      real = 1;
      fprintf(stderr, "rank %d: mapped: %s", rank, line);
    }
  if (maps) fclose(maps);
  CHECK(maps && !real, "another libnccl.so is mapped into the process");
}

static void test_version_and_errors(void) {
  int v = 0;
  CHECK_RC(ncclGetVersion(&v), ncclSuccess);
  CHECK(v == NCCL_VERSION_CODE, "version %d, header %d", v, NCCL_VERSION_CODE);
  CHECK_RC(pncclGetVersion(&v), ncclSuccess);
  CHECK(v == NCCL_VERSION_CODE, "version %d", v);
  CHECK_RC(ncclGetVersion(NULL), ncclInvalidArgument);
  for (int a = 0; a < ncclNumResults; a++) {
    const char *s = ncclGetErrorString((ncclResult_t)a);
    CHECK(s && *s, "no string for result %d", a);
    for (int b = 0; b < a; b++) CHECK(strcmp(s, ncclGetErrorString((ncclResult_t)b)), "results %d and %d", a, b);
  }
  CHECK(pncclGetErrorString(ncclNumResults) != NULL);
  int n;
  CHECK_RC(ncclCommCount(NULL, &n), ncclInvalidArgument);
  CHECK(strstr(ncclGetLastError(NULL), "ncclCommCount"), "last error: %s", ncclGetLastError(NULL));
  CHECK(pncclGetLastError(NULL) == ncclGetLastError(NULL));
  void *m = NULL;
  CHECK_RC(ncclMemAlloc(&m, 100), ncclSuccess);
  CHECK(m != NULL);
  if (m) memset(m, 1, 100);
  CHECK_RC(ncclMemFree(m), ncclSuccess);
  CHECK_RC(pncclMemAlloc(NULL, 8), ncclInvalidArgument);
}

static void test_unique_ids(void) {
  ncclUniqueId a, b;
  CHECK_RC(ncclGetUniqueId(&a), ncclSuccess);
  CHECK_RC(pncclGetUniqueId(&b), ncclSuccess);
  CHECK(memcmp(&a, &b, sizeof a), "two calls gave the same id");
  CHECK_RC(ncclGetUniqueId(NULL), ncclInvalidArgument);
  ncclUniqueId *all = malloc(sizeof a * (size_t)nranks);
  MPI_Allgather(&a, sizeof a, MPI_BYTE, all, sizeof a, MPI_BYTE, MPI_COMM_WORLD);
  int same = 0;
  for (int r = 0; r < nranks; r++)
    for (int s = 0; s < r; s++) same += !memcmp(&all[r], &all[s], sizeof a);
  CHECK(same == 0, "%d pairs of ranks drew the same id", same);
  free(all);
}

/* ---------------------------------------------------------------- communicators */
static void test_comm_basics(const api *a) {
  ncclComm_t c = world_comm(a);
  int n = -1, r = -1, d = -1;
  CHECK_RC(a->commCount(c, &n), ncclSuccess);
  CHECK(n == nranks, "%s: count %d", a->name, n);
  CHECK_RC(a->commUserRank(c, &r), ncclSuccess);
  CHECK(r == rank, "%s: rank %d", a->name, r);
  CHECK_RC(ncclCommCuDevice(c, &d), ncclSuccess);
  CHECK(d == 0, "device %d", d);
  CHECK_RC(ncclCommCount(c, NULL), ncclInvalidArgument);
  CHECK_RC(a->commDestroy(c), ncclSuccess);
  CHECK_RC(a->commCount(c, &n), ncclInvalidArgument); /* destroyed: refused, not read */
  CHECK_RC(a->commDestroy(c), ncclInvalidArgument);
  CHECK_RC(a->commDestroy(NULL), ncclSuccess);

  /* NCCL ranks in reverse world order: an all-gather of world ranks shows it. */
  ncclComm_t rev = NULL;
  CHECK_RC(a->commInitRank(&rev, nranks, shared_id(a), nranks - 1 - rank), ncclSuccess);
  int *got = calloc((size_t)nranks, sizeof *got);
  CHECK_RC(a->allGather(&rank, got, 1, ncclInt32, rev, NULL), ncclSuccess);
  for (int i = 0; i < nranks; i++) CHECK(got[i] == nranks - 1 - i, "nccl rank %d is world rank %d", i, got[i]);
  free(got);
  CHECK_RC(a->commDestroy(rev), ncclSuccess);
}

static void test_init_errors(void) {
  ncclUniqueId id = shared_id(&families[0]), zero;
  memset(&zero, 0, sizeof zero);
  ncclComm_t c = (ncclComm_t)&c;
  CHECK_RC(ncclCommInitRank(NULL, nranks, id, rank), ncclInvalidArgument);
  CHECK_RC(ncclCommInitRank(&c, nranks, id, nranks), ncclInvalidArgument);
  CHECK(c == NULL, "failed init leaves *comm %p", (void *)c);
  CHECK_RC(ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument);
  CHECK_RC(ncclCommInitRank(&c, nranks, id, -1), ncclInvalidArgument);
  CHECK_RC(ncclCommInitRank(&c, nranks, zero, rank), ncclInvalidArgument);
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  CHECK_RC(ncclCommInitRankConfig(&c, nranks, id, rank, &bad), ncclInvalidArgument);
  ncclConfig_t badblock = NCCL_CONFIG_INITIALIZER;
  badblock.blocking = 7;
  CHECK_RC(ncclCommInitRankConfig(&c, nranks, id, rank, &badblock), ncclInvalidArgument);
  /* Collective failures, reported on every rank: nranks that does not match
   * the callers, and one rank number given to every caller. */
  CHECK_RC(ncclCommInitRank(&c, nranks + 1, shared_id(&families[0]), rank), ncclInvalidUsage);
  CHECK(c == NULL);
  if (nranks > 1) CHECK_RC(ncclCommInitRank(&c, nranks, shared_id(&families[0]), 0), ncclInvalidUsage);
}

static void test_init_variants(void) {
  ncclComm_t c = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  CHECK_RC(ncclCommInitRankConfig(&c, nranks, shared_id(&families[0]), rank, &cfg), ncclSuccess);
  CHECK_RC(ncclCommDestroy(c), ncclSuccess);
  CHECK_RC(pncclCommInitRankConfig(&c, nranks, shared_id(&families[1]), rank, NULL), ncclSuccess);
  CHECK_RC(pncclCommDestroy(c), ncclSuccess);

  /* Scalable init: every rank passes the same array of ids. */
  ncclUniqueId ids[2];
  if (rank == 0) {
    ncclGetUniqueId(&ids[0]);
    ncclGetUniqueId(&ids[1]);
  }
  MPI_Bcast(ids, sizeof ids, MPI_BYTE, 0, MPI_COMM_WORLD);
  int nid = nranks >= 2 ? 2 : 1, n = 0;
  CHECK_RC(ncclCommInitRankScalable(&c, nranks, rank, nid, ids, NULL), ncclSuccess);
  CHECK_RC(ncclCommCount(c, &n), ncclSuccess);
  CHECK(n == nranks);
  CHECK_RC(ncclCommDestroy(c), ncclSuccess);
  CHECK_RC(pncclCommInitRankScalable(&c, nranks, rank, nranks + 1, ids, NULL), ncclInvalidArgument);

  /* InitAll: one process is one rank. */
  ncclComm_t one[2] = {NULL, NULL};
  CHECK_RC(ncclCommInitAll(one, 1, NULL), ncclSuccess);
  CHECK_RC(ncclCommCount(one[0], &n), ncclSuccess);
  CHECK(n == 1);
  CHECK_RC(ncclCommDestroy(one[0]), ncclSuccess);
  CHECK_RC(ncclCommInitAll(one, 2, NULL), ncclInvalidUsage);
  CHECK_RC(ncclCommInitAll(NULL, 1, NULL), ncclInvalidArgument);
}

/* blocking = 0: init reports ncclInProgress once through GetAsyncError, and
 * the communicator is refused until then, as NCCL refuses it. */
static void test_nonblocking(void) {
  ncclComm_t c = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t rc = ncclCommInitRankConfig(&c, nranks, shared_id(&families[0]), rank, &cfg);
  CHECK(rc == ncclSuccess || rc == ncclInProgress, "init returned %d", rc);
  CHECK(c != NULL);
  float x = 1.0f, y = 0.0f;
  int n = 0;
  CHECK_RC(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, c, NULL), ncclInvalidArgument);
  CHECK_RC(ncclCommCount(c, &n), ncclInvalidArgument);
  ncclResult_t state = ncclSuccess;
  CHECK_RC(ncclCommGetAsyncError(c, &state), ncclSuccess);
  CHECK(state == ncclInProgress, "first poll: %d", state);
  CHECK_RC(pncclCommGetAsyncError(c, &state), ncclSuccess);
  CHECK(state == ncclSuccess, "second poll: %d", state);
  CHECK_RC(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, c, NULL), ncclSuccess);
  CHECK(y == (float)nranks);
  /* A split inherits non-blocking mode when config is NULL. */
  ncclComm_t s = NULL;
  rc = ncclCommSplit(c, 0, rank, &s, NULL);
  CHECK(rc == ncclSuccess || rc == ncclInProgress, "split returned %d", rc);
  CHECK_RC(ncclCommCount(s, &n), ncclInvalidArgument);
  CHECK_RC(ncclCommGetAsyncError(s, &state), ncclSuccess);
  CHECK(state == ncclInProgress);
  CHECK_RC(ncclCommGetAsyncError(s, &state), ncclSuccess);
  CHECK(state == ncclSuccess);
  CHECK_RC(ncclCommDestroy(s), ncclSuccess);
  CHECK_RC(ncclCommDestroy(c), ncclSuccess);
  CHECK_RC(ncclCommGetAsyncError(NULL, &state), ncclInvalidArgument);
}

static void test_split_and_shrink(void) {
  ncclComm_t w = world_comm(&families[0]), s = NULL;
  /* One color for all, keys reversed: ranks reversed. */
  int n = 0, r = -1;
  CHECK_RC(ncclCommSplit(w, 7, -rank, &s, NULL), ncclSuccess);
  CHECK_RC(ncclCommUserRank(s, &r), ncclSuccess);
  CHECK(r == nranks - 1 - rank, "split rank %d", r);
  CHECK_RC(ncclCommDestroy(s), ncclSuccess);
  /* Even ranks together; odd ranks opt out. */
  s = (ncclComm_t)&s;
  CHECK_RC(pncclCommSplit(w, rank % 2 ? NCCL_SPLIT_NOCOLOR : 0, rank, &s, NULL), ncclSuccess);
  if (rank % 2) {
    CHECK(s == NULL, "NOCOLOR gave %p", (void *)s);
  } else {
    int evens = (nranks + 1) / 2, sum = 0;
    CHECK_RC(ncclCommCount(s, &n), ncclSuccess);
    CHECK(n == evens);
    CHECK_RC(ncclAllReduce(&rank, &sum, 1, ncclInt32, ncclSum, s, NULL), ncclSuccess);
    CHECK(sum == (evens - 1) * evens, "sum of even world ranks %d", sum); /* 0+2+...+2(e-1) */
    CHECK_RC(ncclCommDestroy(s), ncclSuccess);
  }
  CHECK_RC(ncclCommSplit(w, -5, 0, &s, NULL), ncclInvalidArgument);
  CHECK_RC(ncclCommSplit(NULL, 0, 0, &s, NULL), ncclInvalidArgument);

  /* Shrink away the last rank; it must not call. */
  int last = nranks - 1;
  if (nranks > 1) {
    if (rank == last) {
      CHECK_RC(ncclCommShrink(w, &last, 1, &s, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
    } else {
      CHECK_RC(ncclCommShrink(w, &last, 1, &s, NULL, NCCL_SHRINK_DEFAULT), ncclSuccess);
      CHECK_RC(ncclCommCount(s, &n), ncclSuccess);
      CHECK(n == nranks - 1);
      CHECK_RC(ncclCommUserRank(s, &r), ncclSuccess);
      CHECK(r == rank);
      CHECK_RC(ncclCommDestroy(s), ncclSuccess);
    }
    CHECK(last == nranks - 1, "the exclude list was changed");
  }
  CHECK_RC(ncclCommShrink(w, NULL, 1, &s, NULL, 0), ncclInvalidArgument);
  CHECK_RC(ncclCommDestroy(w), ncclSuccess);
}

static void test_teardown(void) {
  ncclComm_t c = world_comm(&families[0]);
  float x = 1, y = 0;
  CHECK_RC(ncclCommFinalize(c), ncclSuccess);
  CHECK_RC(ncclCommFinalize(c), ncclInvalidArgument);
  CHECK_RC(ncclCommDestroy(c), ncclSuccess);

  c = world_comm(&families[0]);
  CHECK_RC(ncclCommRevoke(c, 1), ncclInvalidArgument);
  CHECK_RC(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT), ncclSuccess);
  CHECK_RC(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, c, NULL), ncclInvalidUsage);
  CHECK_RC(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT), ncclInvalidArgument);
  CHECK_RC(ncclCommDestroy(c), ncclSuccess);

  c = world_comm(&families[1]);
  CHECK_RC(pncclCommAbort(c), ncclSuccess); /* idle abort */
  CHECK_RC(ncclCommAbort(c), ncclInvalidArgument);
  CHECK_RC(ncclCommAbort(NULL), ncclSuccess);
  CHECK_RC(ncclCommFinalize(NULL), ncclSuccess);
  CHECK_RC(ncclCommRevoke(NULL, 0), ncclSuccess);
}

/* ---------------------------------------------------------------- collectives */
static void test_allreduce(const api *a) {
  ncclComm_t c = world_comm(a);
  const size_t n = 257;
  for (size_t ti = 0; ti < NREDUCIBLE; ti++) {
    ncclDataType_t t = reducible[ti];
    if (t == ncclFloat16 && !HAVE_HALF_ORACLE) continue;
    for (int op = ncclSum; op < ncclNumOps; op++) {
      char *in = malloc(n * 8), *got = malloc(n * 8), *want = malloc(n * 8);
      fill(t, in, n, rank, (uint64_t)(ti * 10 + (size_t)op));
      CHECK_RC(a->allReduce(in, got, n, t, (ncclRedOp_t)op, c, NULL), ncclSuccess);
      reference_allreduce(t, (ncclRedOp_t)op, in, want, n);
      char what[96];
      snprintf(what, sizeof what, "%sAllReduce %s %s", a->name, tname[t], opname[op]);
      int float_avg_inexact = op == ncclAvg && !is_pow2(nranks) && (t >= ncclFloat16 && t <= ncclBfloat16);
      if (!float_avg_inexact) check_equal(got, want, n, t, __LINE__, what);
      /* In place gives the same bits. */
      CHECK_RC(a->allReduce(in, in, n, t, (ncclRedOp_t)op, c, NULL), ncclSuccess);
      check_equal(in, got, n, t, __LINE__, what);
      free(in);
      free(got);
      free(want);
    }
  }
  /* Ties after a 16-bit sum go to the even neighbour, down or up: in
   * binary16 2048 + 1 -> 2048 and 2050 + 1 -> 2052; in bfloat16
   * 256 + 1 -> 256 and 258 + 1 -> 260. */
  if (nranks == 2) {
    static const uint16_t big[4] = {0x6800, 0x6801, 0x4380, 0x4381}, one[4] = {0x3c00, 0x3c00, 0x3f80, 0x3f80},
                          tie[4] = {0x6800, 0x6802, 0x4380, 0x4382};
    for (int k = 0; k < 4; k++) {
      uint16_t x = rank ? one[k] : big[k], out = 0;
      CHECK_RC(a->allReduce(&x, &out, 1, k < 2 ? ncclFloat16 : ncclBfloat16, ncclSum, c, NULL), ncclSuccess);
      CHECK(out == tie[k], "%s tie %d: 0x%x + 0x%x = 0x%x, expected 0x%x", k < 2 ? "half" : "bf16", k, big[k],
            one[k], out, tie[k]);
    }
  }
  CHECK_RC(a->commDestroy(c), ncclSuccess);
}

static void test_premulsum(const api *a) {
  ncclComm_t c = world_comm(a);
  const size_t n = 33;
  /* Each rank scales its own input by its own scalar (rank + 1) / 2. */
  float fs = (float)(rank + 1) / 2, fin[33], fgot[33], fwant[33], fmine[33];
  fill(ncclFloat32, fin, n, rank, 900);
  ncclRedOp_t op = ncclSum, op2 = ncclSum;
  CHECK_RC(a->preMulSum(&op, &fs, ncclFloat32, ncclScalarHostImmediate, c), ncclSuccess);
  CHECK((int)op >= (int)ncclNumOps, "op id %d", (int)op);
  fs = 1000.0f; /* copied at creation: this must not matter */
  CHECK_RC(a->allReduce(fin, fgot, n, ncclFloat32, op, c, NULL), ncclSuccess);
  for (size_t i = 0; i < n; i++) fmine[i] = fin[i] * ((float)(rank + 1) / 2);
  MPI_Allreduce(fmine, fwant, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  check_equal(fgot, fwant, n, ncclFloat32, __LINE__, "PreMulSum float host immediate");

  /* Device residence: the pointer is read at each call. */
  double ds = 3.0, din[33], dgot[33], dwant[33], dmine[33];
  fill(ncclFloat64, din, n, rank, 901);
  CHECK_RC(a->preMulSum(&op2, &ds, ncclFloat64, ncclScalarDevice, c), ncclSuccess);
  CHECK(op2 != op, "two live ops share id %d", (int)op);
  ds = 0.25 * (rank + 1);
  CHECK_RC(a->allReduce(din, dgot, n, ncclFloat64, op2, c, NULL), ncclSuccess);
  for (size_t i = 0; i < n; i++) dmine[i] = din[i] * (0.25 * (rank + 1));
  MPI_Allreduce(dmine, dwant, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  check_equal(dgot, dwant, n, ncclFloat64, __LINE__, "PreMulSum double device scalar");

  /* Integers and half. */
  int32_t is = rank + 2, iin[33], igot[33], iwant[33], imine[33];
  ncclRedOp_t op3;
  fill(ncclInt32, iin, n, rank, 902);
  CHECK_RC(a->preMulSum(&op3, &is, ncclInt32, ncclScalarHostImmediate, c), ncclSuccess);
  CHECK_RC(a->allReduce(iin, igot, n, ncclInt32, op3, c, NULL), ncclSuccess);
  for (size_t i = 0; i < n; i++) imine[i] = iin[i] * (rank + 2);
  MPI_Allreduce(imine, iwant, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  check_equal(igot, iwant, n, ncclInt32, __LINE__, "PreMulSum int32");
  CHECK_RC(a->redOpDestroy(op3, c), ncclSuccess);
  if (HAVE_HALF_ORACLE) {
    uint16_t hs = oracle_half(0.5f), hin[33], hgot[33], hwant[33];
    ncclRedOp_t op4;
    fill(ncclFloat16, hin, n, rank, 903);
    CHECK_RC(a->preMulSum(&op4, &hs, ncclFloat16, ncclScalarHostImmediate, c), ncclSuccess);
    CHECK_RC(a->allReduce(hin, hgot, n, ncclFloat16, op4, c, NULL), ncclSuccess);
    for (size_t i = 0; i < n; i++) hin[i] = oracle_half(oracle_half_to_float(hin[i]) * 0.5f);
    reference_allreduce(ncclFloat16, ncclSum, hin, hwant, n);
    check_equal(hgot, hwant, n, ncclFloat16, __LINE__, "PreMulSum half");
    CHECK_RC(a->redOpDestroy(op4, c), ncclSuccess);
  }

  /* Misuse. */
  CHECK_RC(a->allReduce(din, dgot, n, ncclFloat64, op, c, NULL), ncclInvalidArgument); /* made for float */
  CHECK_RC(a->redOpDestroy(op, c), ncclSuccess);
  CHECK_RC(a->allReduce(fin, fgot, n, ncclFloat32, op, c, NULL), ncclInvalidArgument); /* destroyed */
  CHECK_RC(a->redOpDestroy(op, c), ncclInvalidArgument);
  CHECK_RC(a->redOpDestroy(ncclSum, c), ncclInvalidArgument);
  CHECK_RC(a->redOpDestroy((ncclRedOp_t)-3, c), ncclInvalidArgument);
  CHECK_RC(a->redOpDestroy(op2, NULL), ncclInvalidArgument);
  CHECK_RC(a->preMulSum(&op, NULL, ncclFloat32, ncclScalarHostImmediate, c), ncclInvalidArgument);
  CHECK_RC(a->preMulSum(&op, &fs, ncclNumTypes, ncclScalarHostImmediate, c), ncclInvalidArgument);
  CHECK_RC(a->preMulSum(&op, &fs, ncclFloat32, ncclScalarHostImmediate, NULL), ncclInvalidArgument);
  /* Ops belong to their communicator. */
  ncclComm_t other = world_comm(a);
  CHECK_RC(a->allReduce(din, dgot, n, ncclFloat64, op2, other, NULL), ncclInvalidArgument);
  CHECK_RC(a->commDestroy(other), ncclSuccess);
  CHECK_RC(a->redOpDestroy(op2, c), ncclSuccess);
  CHECK_RC(a->commDestroy(c), ncclSuccess);
}

static void test_other_collectives(const api *a) {
  ncclComm_t c = world_comm(a);
  const size_t n = 19;
  int32_t in[19], *got = calloc(n * (size_t)nranks, 4), *want = calloc(n * (size_t)nranks, 4);
  fill(ncclInt32, in, n, rank, 700);

  /* AllGather, out of place, in place (send = recv + rank block), and fp8 bytes. */
  CHECK_RC(a->allGather(in, got, n, ncclInt32, c, NULL), ncclSuccess);
  MPI_Allgather(in, (int)n, MPI_INT32_T, want, (int)n, MPI_INT32_T, MPI_COMM_WORLD);
  check_equal(got, want, n * (size_t)nranks, ncclInt32, __LINE__, "AllGather");
  memset(got, 0, n * (size_t)nranks * 4);
  memcpy(got + n * (size_t)rank, in, sizeof in);
  CHECK_RC(a->allGather(got + n * (size_t)rank, got, n, ncclInt32, c, NULL), ncclSuccess);
  check_equal(got, want, n * (size_t)nranks, ncclInt32, __LINE__, "AllGather in place");
  uint8_t b8[4] = {(uint8_t)rank, 1, 2, 3}, g8[4 * 16];
  if (nranks <= 16) {
    CHECK_RC(a->allGather(b8, g8, 4, ncclFloat8e4m3, c, NULL), ncclSuccess);
    for (int r = 0; r < nranks; r++) CHECK(g8[4 * r] == r && g8[4 * r + 3] == 3);
  }

  /* Broadcast from the last rank: out of place, in place, and ncclBcast. */
  int root = nranks - 1;
  int32_t bin[19], bout[19], bwant[19];
  fill(ncclInt32, bin, n, rank, 701);
  memcpy(bwant, bin, sizeof bin);
  MPI_Bcast(bwant, (int)n, MPI_INT32_T, root, MPI_COMM_WORLD);
  memset(bout, 0, sizeof bout);
  CHECK_RC(a->broadcast(bin, bout, n, ncclInt32, root, c, NULL), ncclSuccess);
  check_equal(bout, bwant, n, ncclInt32, __LINE__, "Broadcast");
  memcpy(bout, bin, sizeof bin);
  CHECK_RC(a->broadcast(bout, bout, n, ncclInt32, root, c, NULL), ncclSuccess);
  check_equal(bout, bwant, n, ncclInt32, __LINE__, "Broadcast in place");
  memcpy(bout, bin, sizeof bin);
  CHECK_RC(ncclBcast(bout, n, ncclInt32, root, c, NULL), ncclSuccess);
  check_equal(bout, bwant, n, ncclInt32, __LINE__, "ncclBcast");
  memcpy(bout, bin, sizeof bin);
  CHECK_RC(pncclBcast(bout, n, ncclInt32, root, c, NULL), ncclSuccess);
  check_equal(bout, bwant, n, ncclInt32, __LINE__, "pncclBcast");
  CHECK_RC(a->broadcast(bin, bout, n, ncclInt32, nranks, c, NULL), ncclInvalidArgument);

  /* Reduce to rank 0; the result is defined on the root only. */
  float fin[19], fgot[19], fwant[19];
  fill(ncclFloat32, fin, n, rank, 702);
  CHECK_RC(a->reduce(fin, fgot, n, ncclFloat32, ncclMax, 0, c, NULL), ncclSuccess);
  MPI_Reduce(fin, fwant, (int)n, MPI_FLOAT, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) check_equal(fgot, fwant, n, ncclFloat32, __LINE__, "Reduce max");
  CHECK_RC(a->reduce(fin, fgot, n, ncclFloat32, ncclMax, -1, c, NULL), ncclInvalidArgument);

  /* ReduceScatter: block r of the sum goes to rank r. */
  int32_t *rs_in = malloc(n * (size_t)nranks * 4), rs_got[19], rs_want[19];
  fill(ncclInt32, rs_in, n * (size_t)nranks, rank, 703);
  CHECK_RC(a->reduceScatter(rs_in, rs_got, n, ncclInt32, ncclSum, c, NULL), ncclSuccess);
  MPI_Reduce_scatter_block(rs_in, rs_want, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  check_equal(rs_got, rs_want, n, ncclInt32, __LINE__, "ReduceScatter");
  free(rs_in);

  /* A group of two all-reduces; the group returns the first error inside it. */
  int32_t s1 = rank, s2 = 2 * rank, r1 = -1, r2 = -1, want_sum = nranks * (nranks - 1) / 2;
  CHECK_RC(a->groupStart(), ncclSuccess);
  CHECK_RC(a->groupStart(), ncclSuccess);
  CHECK_RC(a->allReduce(&s1, &r1, 1, ncclInt32, ncclSum, c, NULL), ncclSuccess);
  CHECK_RC(a->groupEnd(), ncclSuccess);
  CHECK_RC(a->allReduce(&s2, &r2, 1, ncclInt32, ncclSum, c, NULL), ncclSuccess);
  CHECK_RC(a->groupEnd(), ncclSuccess);
  CHECK(r1 == want_sum && r2 == 2 * want_sum, "group results %d %d", r1, r2);
  CHECK_RC(a->groupStart(), ncclSuccess);
  CHECK_RC(a->allReduce(&s1, &r1, 1, ncclNumTypes, ncclSum, c, NULL), ncclInvalidArgument);
  CHECK_RC(a->groupEnd(), ncclInvalidArgument);
  CHECK_RC(a->groupEnd(), ncclInvalidUsage); /* not in a group */
  CHECK_RC(a->groupStart(), ncclSuccess);
  CHECK_RC(a->groupEnd(), ncclSuccess); /* the error was not kept */
  free(got);
  free(want);
  CHECK_RC(a->commDestroy(c), ncclSuccess);
}

static void test_collective_errors(void) {
  ncclComm_t c = world_comm(&families[0]);
  float x[4] = {1, 2, 3, 4}, y[4 * 64];
  CHECK_RC(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument);
  CHECK_RC(pncclAllReduce(x, y, 4, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument);
  CHECK_RC(ncclAllGather(x, y, 4, ncclFloat32, NULL, NULL), ncclInvalidArgument);
  CHECK_RC(ncclBroadcast(x, y, 4, ncclFloat32, 0, NULL, NULL), ncclInvalidArgument);
  CHECK_RC(ncclReduce(x, y, 4, ncclFloat32, ncclSum, 0, NULL, NULL), ncclInvalidArgument);
  CHECK_RC(ncclAllReduce(x, y, 4, ncclNumTypes, ncclSum, c, NULL), ncclInvalidArgument);
  CHECK(strstr(ncclGetLastError(NULL), "datatype 12"), "last error: %s", ncclGetLastError(NULL));
  CHECK_RC(ncclAllReduce(x, y, 4, (ncclDataType_t)-1, ncclSum, c, NULL), ncclInvalidArgument);
  CHECK_RC(ncclAllGather(x, y, 4, ncclNumTypes, c, NULL), ncclInvalidArgument);
  CHECK_RC(ncclAllReduce(x, y, 4, ncclFloat32, (ncclRedOp_t)(ncclNumOps + 50), c, NULL), ncclInvalidArgument);
  CHECK_RC(ncclAllReduce(x, y, 4, ncclFloat32, (ncclRedOp_t)-1, c, NULL), ncclInvalidArgument);
  CHECK_RC(ncclAllReduce(x, y, 4, ncclFloat8e4m3, ncclSum, c, NULL), ncclInvalidArgument);
  CHECK_RC(ncclAllReduce(NULL, y, 4, ncclFloat32, ncclSum, c, NULL), ncclInvalidArgument);
  CHECK_RC(ncclAllReduce(x, NULL, 4, ncclFloat32, ncclSum, c, NULL), ncclInvalidArgument);
  CHECK_RC(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, c, NULL), ncclSuccess); /* nothing to do */
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER, badsim = NCCL_SIM_INFO_INITIALIZER;
  badsim.magic = 1;
  CHECK_RC(ncclGroupStart(), ncclSuccess);
  CHECK_RC(ncclGroupSimulateEnd(&sim), ncclSuccess);
  CHECK_RC(pncclGroupStart(), ncclSuccess);
  CHECK_RC(pncclGroupSimulateEnd(&badsim), ncclInvalidArgument);
  CHECK_RC(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
  setenv("FAKENCCL_NS_PER_CALL", "soon", 1); /* a bad link setting is the call's error, named (every rank) */
  CHECK_RC(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, c, NULL), ncclInvalidArgument);
  CHECK(strstr(ncclGetLastError(NULL), "FAKENCCL_NS_PER_CALL='soon'"), "last error: %s", ncclGetLastError(NULL));
  unsetenv("FAKENCCL_NS_PER_CALL");
  CHECK_RC(ncclCommDestroy(c), ncclSuccess);
  CHECK_RC(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, c, NULL), ncclInvalidArgument); /* destroyed */
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (rank == 0 && !HAVE_HALF_ORACLE) printf("# no _Float16 in this compiler: binary16 results not checked\n");

  test_loaded_library();
  test_version_and_errors();
  test_unique_ids();
  test_init_errors();
  test_init_variants();
  test_nonblocking();
  test_split_and_shrink();
  test_teardown();
  test_collective_errors();
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
    test_comm_basics(&families[f]);
    test_allreduce(&families[f]);
    test_premulsum(&families[f]);
    test_other_collectives(&families[f]);
  }

  int mine[2] = {passed, failed}, sum[2];
  MPI_Reduce(mine, sum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Bcast(sum, 2, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("%d passed, %d failed\n", sum[0], sum[1]);
  MPI_Finalize();
  return sum[1] ? 1 : 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_faults_mpi.c - the failure policy under injected faults, over MPI
 * (tests/mpi/runs.list: 2 and 3 ranks):
 *   - a fault-injecting PMPI layer (this program defines PMPI_Allreduce,
 *     PMPI_Allgather and PMPI_Allgatherv, which squall's MPI transport
 *     calls; each forwards to MPI's own and, when armed, fails or corrupts
 *     the n-th collective after it completed on every rank, so ranks stay
 *     in step whatever squall does next);
 *   - a kernel set whose n-th allocation fails on one rank.
 * Every scenario asserts: no hang (tests/run-mpi.sh bounds the run), no
 * success with a wrong result, exact conservation (inputs = outputs +
 * residuals over every call that returned success, on dyadic data), and
 * ranks in step afterwards.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <zstd.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_mpi.h" /* squall__mpi_get_residual */
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "mpi_check.h"
#include "squall_mpi.h"
#include "transports/transport_mpi.h"

static int rank, nranks;

/* ------------------------------------------------ fault-injecting PMPI */
typedef enum { FAULT_NONE,
               FAULT_FAIL,
               FAULT_CORRUPT } fault_kind;
static fault_kind armed_kind;
static int armed_at, seen; /* the armed_at-th collective (1-based) since arming */
static int fired;

static void arm(fault_kind kind, int at) {
  armed_kind = kind;
  armed_at = at;
  seen = 0;
  fired = 0;
}

/* After MPI's own call: the fault, if this is the armed collective. */
static int inject(int rc, void *recv, size_t bytes) {
  if (armed_kind == FAULT_NONE || rc != MPI_SUCCESS || ++seen != armed_at) return rc;
  fired = 1;
  if (armed_kind == FAULT_FAIL) return MPI_ERR_TRUNCATE; /* a class squall must hand back */
  memset(recv, 0xff, bytes);                             /* indices out of range, NaN values */
  return MPI_SUCCESS;
}

#define REAL(name, type)   \
  static type real_##name; \
  if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

typedef int (*allreduce_t)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);
typedef int (*allgather_t)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);
typedef int (*allgatherv_t)(const void *, int, MPI_Datatype, void *, const int *, const int *, MPI_Datatype,
                            MPI_Comm);

int PMPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
  REAL(PMPI_Allreduce, allreduce_t);
  int size = 0;
  MPI_Type_size(t, &size);
  return inject(real_PMPI_Allreduce(s, r, n, t, op, comm), r, (size_t)n * (size_t)size);
}

int PMPI_Allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm comm) {
  REAL(PMPI_Allgather, allgather_t);
  int size = 0, p = 0;
  MPI_Type_size(rt, &size);
  MPI_Comm_size(comm, &p);
  return inject(real_PMPI_Allgather(s, sn, st, r, rn, rt, comm), r, (size_t)rn * (size_t)size * (size_t)p);
}

int PMPI_Allgatherv(const void *s, int sn, MPI_Datatype st, void *r, const int *rc, const int *displs,
                    MPI_Datatype rt, MPI_Comm comm) {
  REAL(PMPI_Allgatherv, allgatherv_t);
  int p = 0;
  MPI_Comm_size(comm, &p);
  size_t total = 0;
  for (int i = 0; i < p; i++) total += (size_t)rc[i];
  return inject(real_PMPI_Allgatherv(s, sn, st, r, rc, displs, rt, comm), r, total); /* MPI_BYTE */
}

/* The pipelined two-phase all-reduce's non-blocking collectives: a fault
 * fails the start (nothing in flight for it; earlier chunks are). */
typedef int (*ialltoall_t)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Request *);

/* 1 when this start is the armed failure (then no request is in flight). */
static int start_fails(MPI_Request *req) {
  if (armed_kind != FAULT_FAIL || ++seen != armed_at) return 0;
  fired = 1;
  *req = MPI_REQUEST_NULL;
  return 1;
}

int PMPI_Ialltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm comm,
                   MPI_Request *req) {
  REAL(PMPI_Ialltoall, ialltoall_t);
  if (start_fails(req)) return MPI_ERR_TRUNCATE;
  return real_PMPI_Ialltoall(s, sn, st, r, rn, rt, comm, req);
}

/* A non-blocking all-gather whose data arrives corrupt at this rank only
 * (the armed_iag-th since arming, 0: none): its receive buffer is spoilt
 * when a wait or a test completes it. */
static int armed_iag, iag_seen;
static MPI_Request spoil_req = MPI_REQUEST_NULL;
static void *spoil_buf;
static size_t spoil_bytes;

int PMPI_Iallgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm comm,
                    MPI_Request *req) {
  REAL(PMPI_Iallgather, ialltoall_t);
  if (start_fails(req)) return MPI_ERR_TRUNCATE;
  int rc = real_PMPI_Iallgather(s, sn, st, r, rn, rt, comm, req);
  if (rc == MPI_SUCCESS && armed_iag && ++iag_seen == armed_iag) {
    int size = 0, p = 0;
    MPI_Type_size(rt, &size);
    MPI_Comm_size(comm, &p);
    spoil_req = *req;
    spoil_buf = r;
    spoil_bytes = (size_t)rn * (size_t)size * (size_t)p;
  }
  return rc;
}

static void spoil_if(MPI_Request was, int done) {
  if (!done || was == MPI_REQUEST_NULL || was != spoil_req) return;
  memset(spoil_buf, 0xff, spoil_bytes); /* indices out of range, NaN values */
  spoil_req = MPI_REQUEST_NULL;
  fired = 1;
}

typedef int (*wait_t)(MPI_Request *, MPI_Status *);
typedef int (*test_t)(MPI_Request *, int *, MPI_Status *);
int PMPI_Wait(MPI_Request *req, MPI_Status *status) {
  REAL(PMPI_Wait, wait_t);
  MPI_Request was = *req;
  int rc = real_PMPI_Wait(req, status);
  spoil_if(was, rc == MPI_SUCCESS);
  return rc;
}

int PMPI_Test(MPI_Request *req, int *flag, MPI_Status *status) {
  REAL(PMPI_Test, test_t);
  MPI_Request was = *req;
  int rc = real_PMPI_Test(req, flag, status);
  spoil_if(was, rc == MPI_SUCCESS && *flag);
  return rc;
}

/* zstd allocates its context for each slot (or round) it codes: that
 * allocation failing on one rank is the one local failure that can happen
 * after the call header. This program's ZSTD_createCCtx (squall's static
 * code binds to it) fails when armed. */
typedef ZSTD_CCtx *(*zstd_create_t)(void);
static int zstd_fail_armed;

ZSTD_CCtx *ZSTD_createCCtx(void) {
  REAL(ZSTD_createCCtx, zstd_create_t);
  if (zstd_fail_armed) {
    zstd_fail_armed = 0;
    return NULL;
  }
  return real_ZSTD_createCCtx();
}

/* ------------------------------------------------------------ helpers */
static float gen_dyadic(int seed, int r, size_t i) { /* multiples of 1/8 in [-8, 8] */
  uint64_t x = (uint64_t)seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)r * 0xbf58476d1ce4e5b9ull ^ i * 0x94d049bb133111ebull;
  x ^= x >> 31;
  x *= 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return (float)((int)(x % 129) - 64) / 8.0f;
}

static void use_config(const char *spec) {
  squallConfig_t c, env;
  squallConfigDefault(&c);
  squallGetConfig(&env);
  c.debug = env.debug;
  c.costModel = env.costModel; /* run-mpi.sh: off, so that every eligible call is compressed */
  c.minRanks = env.minRanks;
  ck_assert_int_eq(squallConfigParse(&c, "SQUALL_MIN_BYTES=0"), squallSuccess);
  ck_assert_msg(squallConfigParse(&c, spec) == squallSuccess, "bad spec %s", spec);
  ck_assert_int_eq(squallSetConfig(&c), squallSuccess);
}

/* The same value on every rank? */
static int same_everywhere(long v) {
  long lo, hi;
  MPI_Allreduce(&v, &lo, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&v, &hi, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/* Ranks in step: a plain all-reduce after the scenario pairs with its peers'. */
static void assert_in_step(int tag) {
  int mine = tag * 1000 + rank, sum = 0;
  ck_assert_int_eq(MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert_int_eq(sum, tag * 1000 * nranks + nranks * (nranks - 1) / 2);
}

/* Conservation bookkeeping of one tensor over successful calls. */
typedef struct {
  size_t n;
  double *in, *out;
} ledger;

static void ledger_init(ledger *l, size_t n) {
  l->n = n;
  l->in = calloc(n, sizeof(double));
  l->out = calloc(n, sizeof(double));
}

static void ledger_add(ledger *l, int seed, const float *out) {
  for (size_t i = 0; i < l->n; i++) {
    for (int r = 0; r < nranks; r++) l->in[i] += gen_dyadic(seed, r, i);
    l->out[i] += out[i];
  }
}

/* outputs + every rank's residual == inputs, element by element, exactly. */
static void ledger_check(ledger *l, const float *res, const char *what) {
  double *mine = malloc(l->n * sizeof(double)), *kept = malloc(l->n * sizeof(double));
  for (size_t i = 0; i < l->n; i++) mine[i] = res ? res[i] : 0.0;
  MPI_Allreduce(mine, kept, (int)l->n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < l->n; i++)
    MC_CHECK(l->out[i] + kept[i] == l->in[i], "%s: element %zu: sent %.17g + kept %.17g != %.17g", what, i,
             l->out[i], kept[i], l->in[i]);
  free(mine);
  free(kept);
  free(l->in);
  free(l->out);
}

/* ------------------------------------- collective faults, squallMpiAllreduce */
typedef struct {
  const char *spec;
  int collectives; /* per compressed call: the header, then the codec's */
  int gather;      /* which of them carries top-k payloads (0: none) */
} scenario;

static const scenario scenarios[] = {
    {"SQUALL_COMPRESS=topk:0.02 SQUALL_ZSTD=0", 2, 2},
    {"SQUALL_COMPRESS=topk:0.02 SQUALL_ZSTD=1", 3, 3}, /* header, sizes, payloads */
    {"SQUALL_COMPRESS=topk:0.02 SQUALL_TOPK_VALUES=fp16 SQUALL_ZSTD=0", 2, 2},
    {"SQUALL_COMPRESS=fp16", 3, 0}, /* header, max, 16-bit sum */
    {"SQUALL_COMPRESS=bf16", 3, 0},
    {"SQUALL_COMPRESS=topk:1", 2, 0}, /* dense fallback: header, sum */
};

/* Four calls of one tensor; in call 1 the at-th collective fails or is
 * corrupted. in_place: the tensor is the receive buffer. */
static void run_fault(const scenario *sc, fault_kind kind, int at, int in_place) {
  size_t n = 6007;
  use_config(sc->spec);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  float *g = malloc(n * 4), *out = malloc(n * 4), *res = malloc(n * 4);
  ledger l;
  ledger_init(&l, n);
  int failures = 0;
  for (int step = 0; step < 4; step++) {
    int seed = 1000 + step;
    for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(seed, rank, i);
    if (in_place) memcpy(out, g, n * 4);
    if (step == 1) arm(kind, at);
    int rc = squallMpiAllreduce(in_place ? MPI_IN_PLACE : g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int hit = fired;
    arm(FAULT_NONE, 0);
    ck_assert_msg(same_everywhere(rc), "%s, fault %d at %d: ranks returned different codes", sc->spec, kind, at);
    if (rc == MPI_SUCCESS) {
      ledger_add(&l, seed, out);
      continue;
    }
    failures++;
    ck_assert_msg(hit && step == 1, "%s: call %d failed (%d) without a fault", sc->spec, step, rc);
    /* A failed MPI call's own class comes back; a corrupt payload is
     * squall's remote error. */
    ck_assert_int_eq(rc, kind == FAULT_FAIL ? MPI_ERR_TRUNCATE : MPI_ERR_OTHER);
  }
  /* A failure injected into a collective the call really made is reported;
   * a corrupted payload is detected. */
  ck_assert_msg(failures == 1, "%s, fault %d at collective %d: %d failures, expected 1", sc->spec, kind, at,
                failures);
  const void *key = in_place ? (const void *)out : g;
  int has = squall__mpi_get_residual(MPI_COMM_WORLD, key, (int)n, MPI_FLOAT, res) == MPI_SUCCESS;
  ledger_check(&l, has ? res : NULL, sc->spec);
  assert_in_step(at);
  free(g);
  free(out);
  free(res);
}

START_TEST(test_collective_failure_returns_error_and_conserves) {
  for (size_t s = 0; s < sizeof scenarios / sizeof scenarios[0]; s++)
    for (int at = 1; at <= scenarios[s].collectives; at++) {
      run_fault(&scenarios[s], FAULT_FAIL, at, 0);
      run_fault(&scenarios[s], FAULT_FAIL, at, 1);
    }
}
END_TEST

/* Pipelined (one bucket per shard and chunk): a failed chunk exchange
 * anywhere in the call is returned on every rank, with exact conservation
 * and ranks in step afterwards. Wrapped collectives per call: the header,
 * then an all-to-all and an all-gather per chunk. */
START_TEST(test_pipelined_failure_returns_error_and_conserves) {
  size_t n = 6007, buckets = (n + 511) / 512, chunks = (buckets + (size_t)nranks - 1) / (size_t)nranks;
  scenario sc = {"SQUALL_COMPRESS=int8 SQUALL_CHUNK_BYTES=1", 1 + 2 * (int)chunks, 0};
  squallStats_t a, b;
  squallStatsGet(&a);
  for (int at = 1; at <= sc.collectives; at++) {
    run_fault(&sc, FAULT_FAIL, at, 0);
    run_fault(&sc, FAULT_FAIL, at, 1);
  }
  squallStatsGet(&b);
  ck_assert_msg(b.pipelinedCalls > a.pipelinedCalls, "nothing ran pipelined");
}
END_TEST

/* Floats with full mantissas in [-1, 1): no codec sends them exactly, so
 * every codec leaves a residual that a failure could lose. */
static float gen_full(int seed, int r, size_t i) {
  uint64_t x = (uint64_t)seed * 0xd1b54a32d192ed03ull ^ (uint64_t)r * 0x9e3779b97f4a7c15ull ^ i * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 32;
  return (float)((double)(x & 0xffffffu) / 8388608.0 - 1.0);
}

/* One all-reduce through the MPI entry point (e NULL) or engine e (0 or
 * MPI_ERR_OTHER), and the residual of the tensor sent from key. */
static int restore_call(squall_engine *e, float *g, float *out, size_t n, int in_place) {
  if (e == NULL)
    return squallMpiAllreduce(in_place ? MPI_IN_PLACE : g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  /* clang-format off */
  squall_call c = {.send = in_place ? out : g, .recv = out, .count = n, .dtype = SQ_DT_F32, .elsize = 4,
                   .op = SQ_OP_SUM, .premul = 1.0f};
  /* clang-format on */
  squall_decision d;
  return squall__engine_allreduce(e, &c, &d) == squallSuccess ? MPI_SUCCESS : MPI_ERR_OTHER;
}
static int restore_residual(squall_engine *e, const void *key, size_t n, float *res) {
  if (e == NULL) return squall__mpi_get_residual(MPI_COMM_WORLD, key, (int)n, MPI_FLOAT, res);
  return squall__engine_get_residual(e, key, n, SQ_DT_F32, 0, res) == squallSuccess ? MPI_SUCCESS : MPI_ERR_OTHER;
}

/* Four calls of one tensor; in the third (the tensor's scale is guessed
 * by then, so the encoders keep their own backups) the at-th collective
 * fails. Asserts that a failure returns an error on every rank, leaves each
 * rank's residual bit for bit as it was before the call and the send
 * buffer untouched, and that the next call succeeds. Returns whether the
 * at-th collective existed (the fault fired). k: the kernel set of an
 * engine of its own, NULL for the MPI entry point's. */
static int restore_case(const char *spec, size_t n, int at, int in_place, const squall_kernels *k) {
  use_config(spec);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  squall_mpi_ctx ctx;
  squall_transport tr;
  squall_engine *e = NULL;
  if (k) {
    ck_assert_int_eq(squall__transport_mpi_init(&tr, &ctx, MPI_COMM_WORLD), squallSuccess);
    ck_assert_ptr_nonnull(e = squall__engine_create(&tr, k));
  }
  float *g = malloc(n * 4), *out = malloc(n * 4), *before = malloc(n * 4), *after = malloc(n * 4),
        *sent = malloc(n * 4);
  const void *key = in_place ? (const void *)out : g;
  int hit = 0;
  for (int step = 0; step < 4; step++) {
    for (size_t i = 0; i < n; i++) g[i] = gen_full(5000 + step, rank, i);
    if (in_place) memcpy(out, g, n * 4);
    if (step == 2) {
      ck_assert_int_eq(restore_residual(e, key, n, before), MPI_SUCCESS);
      memcpy(sent, g, n * 4);
      arm(FAULT_FAIL, at);
    }
    int rc = restore_call(e, g, out, n, in_place);
    int fired_now = fired;
    arm(FAULT_NONE, 0);
    ck_assert_msg(same_everywhere(rc), "%s, fault at %d: ranks returned different codes", spec, at);
    if (step != 2 || !fired_now) {
      ck_assert_msg(rc == MPI_SUCCESS, "%s, fault at %d: call %d failed (%d) without a fault", spec, at, step, rc);
      continue;
    }
    hit = 1;
    ck_assert_msg(rc != MPI_SUCCESS, "%s: the failed collective %d was not reported", spec, at);
    ck_assert_int_eq(restore_residual(e, key, n, after), MPI_SUCCESS);
    for (size_t i = 0; i < n; i++)
      MC_CHECK(memcmp(before + i, after + i, 4) == 0,
               "%s, %s, fault at collective %d: residual[%zu] is %a after the failed call, %a before", spec,
               in_place ? "in place" : "out of place", at, i, (double)after[i], (double)before[i]);
    if (!in_place) ck_assert_msg(memcmp(sent, g, n * 4) == 0, "%s, fault at %d: the send buffer changed", spec, at);
  }
  assert_in_step(at);
  if (e) {
    squall__engine_free(e);
    squall__transport_mpi_fini(&ctx);
  }
  free(g);
  free(out);
  free(before);
  free(after);
  free(sent);
  return hit;
}

/* Every collective of cases (spec, n) on both placements. */
typedef struct {
  const char *spec;
  size_t n;
} restore_spec;
static void restore_at_every_collective(const restore_spec *cases, size_t ncases, const squall_kernels *k) {
  for (size_t s = 0; s < ncases; s++)
    for (int in_place = 0; in_place < 2; in_place++) {
      int at = 1;
      while (restore_case(cases[s].spec, cases[s].n, at, in_place, k)) {
        at++;
        ck_assert_msg(at < 1000, "%s: the call makes 1000 collectives or more", cases[s].spec);
      }
      /* the header and at least one exchange of the codec failed */
      ck_assert_msg(at > 2, "%s: only %d collective(s) per call were seen", cases[s].spec, at - 1);
    }
}

/* Exact conservation (the ledgers above) holds where every rank's loss
 * could cancel another's; this pins each rank's own residual, at every
 * collective of the call, for every codec, pipelined or not: the 16-bit
 * encoder's backup in its guessing pass, the quantised encoder's per-block
 * copy and its completion after the failure, top-k's next residual in the
 * shape's spare (the sampled path on the large tensors, the full path on
 * the small), which leaves the residual as it was. */
START_TEST(test_failed_call_restores_each_residual_bit_for_bit) {
  /* 65565 = 2^16 + 29: top-k's sampled path, whose fused pass writes the
   * spare (smaller tensors take the full path) */
  static const restore_spec cases[] = {
      {"SQUALL_COMPRESS=fp16", 6007},
      {"SQUALL_COMPRESS=bf16", 6007},
      {"SQUALL_COMPRESS=int8", 6007},
      {"SQUALL_COMPRESS=int4", 6007},
      {"SQUALL_COMPRESS=fp8", 6007},
      {"SQUALL_COMPRESS=fp16 SQUALL_CHUNK_BYTES=1", 6007},
      {"SQUALL_COMPRESS=int8 SQUALL_CHUNK_BYTES=1", 6007},
      {"SQUALL_COMPRESS=int4 SQUALL_BUCKET=64 SQUALL_CHUNK_BYTES=1", 6007},
      {"SQUALL_COMPRESS=topk:0.02 SQUALL_ZSTD=0", 6007},
      {"SQUALL_COMPRESS=topk:0.02 SQUALL_ZSTD=1", 6007},
      {"SQUALL_COMPRESS=topk:0.02 SQUALL_TOPK_VALUES=fp16 SQUALL_ZSTD=0", 6007},
      {"SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=0", 65565},
      {"SQUALL_COMPRESS=topk:0.01 SQUALL_TOPK_VALUES=fp16 SQUALL_ZSTD=1", 65565},
      /* the exchange in rounds (3 of 4,371 entries): a round that fails
       * to start, with earlier ones in flight */
      {"SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=0 SQUALL_CHUNK_BYTES=1", 65565},
      {"SQUALL_COMPRESS=topk:0.2 SQUALL_TOPK_VALUES=fp16 SQUALL_ZSTD=1 SQUALL_CHUNK_BYTES=1", 65565},
  };
  restore_at_every_collective(cases, sizeof cases / sizeof cases[0], NULL);
}
END_TEST

/* The host kernels write top-k's next residual into the shape's spare
 * (the cases above); without topk_encode_to, or where the cap refuses a
 * spare, the selection pass copies the residual into the backup instead,
 * which a failure restores from. */
START_TEST(test_failed_topk_call_with_backup_copy_restores_residual) {
  static const restore_spec cases[] = {
      {"SQUALL_COMPRESS=topk:0.02 SQUALL_ZSTD=0", 6007},
      {"SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=0", 65565},
      {"SQUALL_COMPRESS=topk:0.01 SQUALL_TOPK_VALUES=fp16 SQUALL_ZSTD=1", 65565},
      {"SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=0 SQUALL_CHUNK_BYTES=1", 65565},
  };
  squall_kernels k = squall__kernels_host;
  k.topk_encode_to = NULL;
  restore_at_every_collective(cases, sizeof cases / sizeof cases[0], &k);
}
END_TEST

/* A kernel set without topk_encode_backup or topk_encode_to (the
 * device's): where failures return, top-k selects first and updates the
 * residual after the exchange, and a failure anywhere leaves it as it
 * was. */
START_TEST(test_failed_topk_call_without_fused_backup_keeps_residual) {
  static const restore_spec cases[] = {
      {"SQUALL_COMPRESS=topk:0.02 SQUALL_ZSTD=0", 6007},
      {"SQUALL_COMPRESS=topk:0.01 SQUALL_ZSTD=1", 65565},
      {"SQUALL_COMPRESS=topk:0.01 SQUALL_TOPK_VALUES=fp16 SQUALL_ZSTD=0", 65565},
  };
  squall_kernels k = squall__kernels_host;
  k.topk_encode_backup = NULL;
  k.topk_encode_to = NULL;
  restore_at_every_collective(cases, sizeof cases / sizeof cases[0], &k);
}
END_TEST

START_TEST(test_corrupt_topk_payload_is_an_error) {
  for (size_t s = 0; s < sizeof scenarios / sizeof scenarios[0]; s++)
    if (scenarios[s].gather) {
      run_fault(&scenarios[s], FAULT_CORRUPT, scenarios[s].gather, 0);
      run_fault(&scenarios[s], FAULT_CORRUPT, scenarios[s].gather, 1); /* in place: the caller's buffer too */
    }
}
END_TEST

/* Top-k in rounds: a round that arrives corrupt at one rank only fails
 * the call there (a remote error) and nowhere else, and that rank still
 * goes through the later rounds, so nobody waits for it: the next call
 * runs on every rank, with the same result everywhere. */
START_TEST(test_round_corrupt_at_one_rank_hangs_nobody) {
  if (nranks < 2) return;
  /* (the cost model off: every call compresses, whatever this machine's speed) */
  const char *specs[] = {"SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=0 SQUALL_CHUNK_BYTES=1 SQUALL_COST_MODEL=off",
                         "SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=1 SQUALL_CHUNK_BYTES=1 SQUALL_COST_MODEL=off"};
  size_t n = 82000; /* 4 rounds: the first ones failing leave later ones to post */
  float *g = malloc(n * 4), *out = malloc(n * 4);
  for (size_t sp = 0; sp < sizeof specs / sizeof specs[0]; sp++)
    for (int round = 1; round <= 4; round++) {
      use_config(specs[sp]);
      squallMpiResetResiduals(MPI_COMM_WORLD);
      for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < n; i++) g[i] = gen_full(7000 + step, rank, i);
        int victim = step == 1 && rank == nranks - 1;
        fired = 0;
        iag_seen = 0;
        armed_iag = victim ? round : 0;
        int rc = squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        armed_iag = 0;
        spoil_req = MPI_REQUEST_NULL;
        ck_assert_msg(fired == victim, "%s round %d step %d: the corruption %s", specs[sp], round, step,
                      fired ? "fired where it was not armed" : "never fired");
        ck_assert_msg(rc == (victim ? MPI_ERR_OTHER : MPI_SUCCESS), "%s round %d step %d: rank %d returned %d",
                      specs[sp], round, step, rank, rc);
        if (step == 2) { /* everyone in step, the same sum everywhere */
          uint64_t h = 1469598103934665603ull;
          const unsigned char *b = (const unsigned char *)out;
          for (size_t i = 0; i < n * 4; i++) h = (h ^ b[i]) * 1099511628211ull;
          ck_assert_msg(same_everywhere((long)(h >> 1)), "%s round %d: ranks hold different results", specs[sp],
                        round);
        }
      }
      assert_in_step(100 + round);
    }
  free(g);
  free(out);
}
END_TEST

/* A corrupted call header (every rank sees garbage alike) is not "all ok":
 * every rank passes the call through, exactly. */
START_TEST(test_corrupt_header_passes_through_together) {
  use_config("SQUALL_COMPRESS=fp16");
  size_t n = 4096;
  float *g = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(7, rank, i);
  arm(FAULT_CORRUPT, 1);
  ck_assert_int_eq(squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(fired);
  arm(FAULT_NONE, 0);
  MPI_Allreduce(g, ref, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  ck_assert(memcmp(out, ref, n * 4) == 0);
  assert_in_step(7);
  free(g);
  free(out);
  free(ref);
}
END_TEST

/* zstd fails on rank 0 only, after the header: rank 0 still joins the
 * all-gather (with an empty payload), or in rounds the agreement of their
 * sizes, so every rank fails that call together and nothing hangs; the
 * residuals are restored. */
static void compressor_failure(const char *spec, size_t n) {
  use_config(spec);
  squallMpiResetResiduals(MPI_COMM_WORLD);
  float *g = malloc(n * 4), *out = malloc(n * 4), *res = malloc(n * 4);
  ledger l;
  ledger_init(&l, n);
  for (int step = 0; step < 4; step++) {
    int seed = 3000 + step;
    for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(seed, rank, i);
    zstd_fail_armed = step == 1 && rank == 0;
    int rc = squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    zstd_fail_armed = 0;
    int ok = rc == MPI_SUCCESS;
    ck_assert_msg(same_everywhere(ok), "step %d: some ranks failed, some did not", step);
    ck_assert_msg(ok == (step != 1), "step %d: %s", step, ok ? "the injected failure was not reported" : "failed");
    if (ok) ledger_add(&l, seed, out);
    else ck_assert_int_eq(rc, rank == 0 ? MPI_ERR_INTERN : MPI_ERR_OTHER);
  }
  ck_assert_int_eq(squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res), MPI_SUCCESS);
  ledger_check(&l, res, "zstd failure on rank 0");
  assert_in_step(9);
  free(g);
  free(out);
  free(res);
}

START_TEST(test_compressor_failure_on_one_rank_fails_everywhere) {
  if (nranks < 2) return;
  compressor_failure("SQUALL_COMPRESS=topk:0.02 SQUALL_ZSTD=1", 6007);
  compressor_failure("SQUALL_COMPRESS=topk:0.2 SQUALL_ZSTD=1 SQUALL_CHUNK_BYTES=1", 65565); /* in rounds */
}
END_TEST

/* ------------------------------------------------ local argument errors */
START_TEST(test_aliased_buffers_as_mpi_takes_them) {
  size_t n = 1024;
  float *g = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(3, rank, i);
  const char *specs[] = {"SQUALL_COMPRESS=none", "SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=topk:0.01"};
  for (int s = 0; s < 3; s++) {
    use_config(specs[s]);
    ck_assert_int_eq(squallMpiAllreduce(g, g, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
  }
  assert_in_step(3); /* rejected before anything collective */
  /* One element cannot clash with itself: MPI takes it as in place, for
   * any type, and so does squall (compressed here: no size floor). */
  use_config("SQUALL_COMPRESS=fp16 SQUALL_MIN_BYTES=0 SQUALL_COST_MODEL=off");
  float x = (float)(rank + 1);
  squallStats_t a, b;
  squallStatsGet(&a);
  ck_assert_int_eq(squallMpiAllreduce(&x, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  squallStatsGet(&b);
  ck_assert_float_eq(x, (float)nranks * (float)(nranks + 1) / 2);
  if (nranks > 1) ck_assert_uint_eq(b.compressedCalls - a.compressedCalls, 1);
  squallMpiResetResiduals(MPI_COMM_WORLD); /* keyed to a stack address later tests may reuse */
  double d = rank + 1;
  ck_assert_int_eq(squallMpiAllreduce(&d, &d, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert(d == (double)nranks * (nranks + 1) / 2);
  free(g);
}
END_TEST

/* A null send or receive buffer with floats to reduce: MPI would fault;
 * squall refuses it before anything collective, whatever the codec (top-k
 * once took a null output as "none wanted" and dropped the sum), and the
 * residuals stay as they were. */
START_TEST(test_null_buffers_rejected_alike) {
  size_t n = 1024;
  float *g = malloc(n * 4), *res = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(4, rank, i);
  const char *specs[] = {"SQUALL_COMPRESS=none", "SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=int8",
                         "SQUALL_COMPRESS=topk:0.01"};
  for (int s = 0; s < 4; s++) {
    use_config(specs[s]);
    ck_assert_int_eq(squallMpiAllreduce(g, NULL, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    ck_assert_int_eq(squallMpiAllreduce(NULL, g, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    ck_assert_int_eq(squallMpiAllreduce(MPI_IN_PLACE, NULL, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                     MPI_ERR_BUFFER);
    ck_assert_int_eq(squallMpiAllreduce(g, MPI_IN_PLACE, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    ck_assert_int_eq(squallMpiAllreduce(MPI_IN_PLACE, MPI_IN_PLACE, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                     MPI_ERR_BUFFER);
    /* nothing was sent: no residual for the buffer, or an empty one */
    if (squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res) == MPI_SUCCESS)
      for (size_t i = 0; i < n; i++) ck_assert_msg(res[i] == 0.0f, "%s: residual[%zu] = %g", specs[s], i, res[i]);
  }
  assert_in_step(3); /* rejected before anything collective */
  free(g);
  free(res);
}
END_TEST

/* ------------------------------------------- allocation faults (engine) */
static int alloc_fail_at, alloc_seen; /* on rank 0 only */

static void *failing_alloc(void *stream, size_t bytes) {
  if (rank == 0 && alloc_fail_at && ++alloc_seen == alloc_fail_at) return NULL;
  return squall__kernels_host.alloc(stream, bytes);
}

/* Rank 0's a-th allocation fails: the call that needed it passes through on
 * every rank together (squallPassError), and nothing is lost. */
static void run_alloc_fault(const char *spec, int a) {
  squall_mpi_ctx ctx;
  squall_transport tr;
  ck_assert_int_eq(squall__transport_mpi_init(&tr, &ctx, MPI_COMM_WORLD), squallSuccess);
  squall_kernels k = squall__kernels_host;
  k.alloc = failing_alloc;
  squall_engine *e = squall__engine_create(&tr, &k);
  ck_assert_ptr_nonnull(e);
  use_config(spec);
  size_t n = 5003;
  float *g = malloc(n * 4), *out = malloc(n * 4), *res = malloc(n * 4);
  ledger l;
  ledger_init(&l, n);
  alloc_seen = 0;
  alloc_fail_at = a;
  int passed_error = 0;
  for (int step = 0; step < 4; step++) {
    int seed = 2000 + step;
    for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(seed, rank, i);
    /* clang-format off */
    squall_call c = {.send = g, .recv = out, .count = n, .dtype = SQ_DT_F32, .elsize = 4, .op = SQ_OP_SUM,
                     .premul = 1.0f};
    /* clang-format on */
    squall_decision d;
    ck_assert_int_eq(squall__engine_allreduce(e, &c, &d), squallSuccess);
    ck_assert(same_everywhere(d.route) && same_everywhere(d.reason));
    if (d.route == SQ_ROUTE_PASS) { /* what an entry point does */
      ck_assert_int_eq(d.reason, squallPassError);
      passed_error++;
      MPI_Allreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    ledger_add(&l, seed, out);
  }
  alloc_fail_at = 0;
  ck_assert_msg(same_everywhere(passed_error), "%s: ranks disagree on what passed through", spec);
  ck_assert_msg(passed_error == 1, "%s: allocation %d failed on rank 0, %d calls passed through", spec, a,
                passed_error);
  int has = squall__engine_get_residual(e, g, n, SQ_DT_F32, 0, res) == squallSuccess;
  ledger_check(&l, has ? res : NULL, spec);
  assert_in_step(100 + a);
  squall__engine_free(e);
  squall__transport_mpi_fini(&ctx);
  free(g);
  free(out);
  free(res);
}

START_TEST(test_alloc_failure_on_one_rank_passes_through_together) {
  const char *specs[] = {"SQUALL_COMPRESS=topk:0.02", "SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=topk:1"};
  for (int s = 0; s < 3; s++)
    for (int a = 1; a <= 2; a++) run_alloc_fault(specs[s], a); /* the scratch, the residual */
}
END_TEST

/* Ranks other than 0 pass a larger count in call 1 (an erroneous program:
 * MPI requires one count everywhere). Every rank compresses such a call,
 * so the call header finds it: MPI_ERR_ARG on every rank, the output as it
 * was, the residuals exact, the ranks in step. Plain MPI fails on some
 * ranks only, or hangs, or corrupts memory. */
START_TEST(test_rank_dependent_count_fails_everywhere) {
  if (nranks < 2) return;
  size_t n = 6007, extra[] = {1, 512, 6007};
  const char *specs[] = {"SQUALL_COMPRESS=topk:0.02", "SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=int8",
                         "SQUALL_COMPRESS=topk:1"};
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
    for (size_t x = 0; x < sizeof extra / sizeof extra[0]; x++) {
      use_config(specs[s]);
      squallMpiResetResiduals(MPI_COMM_WORLD);
      float *g = calloc(n + extra[x], 4), *out = malloc((n + extra[x]) * 4), *res = malloc(n * 4);
      ledger l;
      ledger_init(&l, n);
      for (int step = 0; step < 3; step++) {
        int seed = 4000 + step, odd = step == 1 && rank != 0;
        for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(seed, rank, i);
        memset(out, 0x5a, (n + extra[x]) * 4);
        int rc = squallMpiAllreduce(g, out, (int)(odd ? n + extra[x] : n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        ck_assert_msg(rc == (step == 1 ? MPI_ERR_ARG : MPI_SUCCESS), "%s, +%zu, step %d: returned %d", specs[s],
                      extra[x], step, rc);
        if (rc == MPI_SUCCESS) {
          ledger_add(&l, seed, out);
          continue;
        }
        for (size_t i = 0; i < n + extra[x]; i++)
          ck_assert_msg(((const unsigned char *)out)[4 * i] == 0x5a, "%s: the output changed at %zu", specs[s], i);
      }
      int has = squall__mpi_get_residual(MPI_COMM_WORLD, g, (int)n, MPI_FLOAT, res) == MPI_SUCCESS;
      ledger_check(&l, has ? res : NULL, specs[s]);
      assert_in_step(11);
      free(g);
      free(out);
      free(res);
    }
}
END_TEST

/* faults-fatal.sh: on a communicator whose errors are fatal (the
 * default), a corrupt top-k payload must end the process, not return: the
 * engine keeps no way back there (transport.h, failures_fatal). Returning
 * is this program's failure (exit 42). */
static int fatal_corrupt_topk(void) {
  size_t n = 6007;
  /* the configuration comes from the environment (faults-fatal.sh) */
  float *g = malloc(n * 4), *out = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = gen_dyadic(7, rank, i);
  /* a first call as the suite's (the first of a communicator also finds
   * the nodes); then the header and the slots' all-gather, corrupted */
  int rc = squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return 43;
  arm(FAULT_CORRUPT, 2);
  rc = squallMpiAllreduce(g, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  fprintf(stderr, "rank %d: a corrupt payload on a fatal communicator returned %d (fired %d)\n", rank, rc, fired);
  return 42;
}

/* Before the suite: faults-fatal.sh's run, or squall's errors to the
 * communicator's handler, as MPI's own go, for the suite. */
static int fatal_or_errors_return(void) {
  if (getenv("SQUALL_TEST_FATAL")) return fatal_corrupt_topk();
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return MC_RUN;
}

int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "faults", .rank = &rank, .nranks = &nranks,
      .setup = fatal_or_errors_return,
      .cases = MC_CASES(
          {"collective", 0, MC_TESTS(test_collective_failure_returns_error_and_conserves,
                                     test_pipelined_failure_returns_error_and_conserves,
                                     test_failed_call_restores_each_residual_bit_for_bit,
                                     test_failed_topk_call_with_backup_copy_restores_residual,
                                     test_failed_topk_call_without_fused_backup_keeps_residual,
                                     test_corrupt_topk_payload_is_an_error,
                                     test_corrupt_header_passes_through_together,
                                     test_compressor_failure_on_one_rank_fails_everywhere,
                                     test_round_corrupt_at_one_rank_hangs_nobody)},
          {"arguments", 0, MC_TESTS(test_aliased_buffers_as_mpi_takes_them, test_null_buffers_rejected_alike,
                                    test_rank_dependent_count_fails_everywhere)},
          {"alloc", 0, MC_TESTS(test_alloc_failure_on_one_rank_passes_through_together)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

/*
 * preload_nccl.c - libsquall-preload.so, the NCCL interposer. Loaded with
 * LD_PRELOAD ahead of libnccl, it defines the NCCL functions squall must
 * see and hands each to the real one, found by its profiling name (pncclX)
 * through preload_resolve.c; it does not link libnccl.
 *
 *   ncclAllReduce          -> squall__nccl_allreduce (compress or pass through)
 *   ncclGroupStart/End,
 *   ncclGroupSimulateEnd   -> this thread's group depth: calls inside a
 *                             user's group pass through unchanged
 *   comm creation          -> forwarded; squall's state appears lazily on the
 *                             first all-reduce of a communicator
 *   comm teardown          -> squall__nccl_comm_forget, then forwarded
 *   PreMulSum create/destroy -> forwarded, and tracked so that such ops
 *                             count as sums
 *
 * Every wrapper runs under a thread-local guard: while squall or the real
 * NCCL is inside an intercepted call on this thread, further intercepted
 * calls (libnccl calls some of its own exported functions) go straight to
 * the real function and are not counted.
 *
 * Failure policy: never abort the host. A real function that cannot be
 * found makes that call print why (once per function) and return
 * ncclSystemError; an optional one (newer than the NCCL loaded) returns
 * ncclInvalidUsage. Anything squall cannot do passes the call through.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "common/internal.h"

#include <pthread.h>
#include <string.h>

#include "interpose/preload_resolve.h"
#include "api/api_nccl.h"
#include "common/stats.h"

#define EXPORT __attribute__((visibility("default")))

/* NCCL's optional entry points, recognised by macros their headers add with
 * them, so that the file builds against older nccl.h too. */
#if defined(NCCL_SIM_INFO_INITIALIZER)
#define HAVE_GROUP_SIMULATE_END 1
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
#define HAVE_INIT_RANK_SCALABLE 1
#endif
#if defined(NCCL_SHRINK_DEFAULT)
#define HAVE_COMM_SHRINK 1
#endif
#if defined(NCCL_REVOKE_DEFAULT)
#define HAVE_COMM_REVOKE 1
#endif

/* X(name, required, return type, parameter types): every real function the
 * interposer calls, looked up as "pnccl" #name. required = 0 marks the
 * functions older NCCL releases lack (and ncclGetVersion, used for the log). */
#define REAL_TABLE(X)                                                                           \
  X(AllReduce, 1, ncclResult_t,                                                                 \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))      \
  X(AllGather, 1, ncclResult_t, (const void *, void *, size_t, ncclDataType_t, ncclComm_t,      \
                                 cudaStream_t))                                                 \
  X(CommCount, 1, ncclResult_t, (const ncclComm_t, int *))                                      \
  X(CommUserRank, 1, ncclResult_t, (const ncclComm_t, int *))                                   \
  X(CommCuDevice, 1, ncclResult_t, (const ncclComm_t, int *))                                   \
  X(CommGetAsyncError, 1, ncclResult_t, (ncclComm_t, ncclResult_t *))                           \
  X(GroupStart, 1, ncclResult_t, (void))                                                        \
  X(GroupEnd, 1, ncclResult_t, (void))                                                          \
  X(GroupSimulateEnd, 0, ncclResult_t, (void *))                                                \
  X(CommInitRank, 1, ncclResult_t, (ncclComm_t *, int, ncclUniqueId, int))                      \
  X(CommInitRankConfig, 1, ncclResult_t, (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *)) \
  X(CommInitAll, 1, ncclResult_t, (ncclComm_t *, int, const int *))                             \
  X(CommInitRankScalable, 0, ncclResult_t,                                                      \
    (ncclComm_t *, int, int, int, ncclUniqueId *, ncclConfig_t *))                              \
  X(CommSplit, 0, ncclResult_t, (ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *))           \
  X(CommShrink, 0, ncclResult_t, (ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int))   \
  X(CommFinalize, 1, ncclResult_t, (ncclComm_t))                                                \
  X(CommDestroy, 1, ncclResult_t, (ncclComm_t))                                                 \
  X(CommAbort, 1, ncclResult_t, (ncclComm_t))                                                   \
  X(CommRevoke, 0, ncclResult_t, (ncclComm_t, int))                                             \
  X(RedOpCreatePreMulSum, 1, ncclResult_t,                                                      \
    (ncclRedOp_t *, void *, ncclDataType_t, ncclScalarResidence_t, ncclComm_t))                 \
  X(RedOpDestroy, 1, ncclResult_t, (ncclRedOp_t, ncclComm_t))                                   \
  X(GetVersion, 0, ncclResult_t, (int *))                                                       \
  X(ReduceScatter, 1, ncclResult_t,                                                             \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))

enum {
#define REAL_ENUM(name, req, ret, params) FN_##name,
  REAL_TABLE(REAL_ENUM)
#undef REAL_ENUM
  FN_COUNT
};

#define REAL_TYPEDEF(name, req, ret, params) typedef ret(*real_##name##_fn) params;
REAL_TABLE(REAL_TYPEDEF)
#undef REAL_TYPEDEF

typedef struct {
  const char *name; /* without the "nccl" prefix */
  int required;
} fn_info;

static const fn_info fn_infos[FN_COUNT] = {
#define REAL_INFO(name, req, ret, params) {#name, req},
    REAL_TABLE(REAL_INFO)
#undef REAL_INFO
};

static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;
static void *real_fn[FN_COUNT];
static char real_why[FN_COUNT][400];
static int missing_warned[FN_COUNT];
static int nccl_found; /* at least one required function resolved */
static squall_nccl_api api;
static int api_complete;

#define REAL(name) ((real_##name##_fn)real_fn[FN_##name])

/* This thread's depth of user ncclGroupStart calls, and the re-entry guard. */
static __thread int group_depth;
static __thread int inside;

static void resolve_all(void) {
  squall_preload_lib lib = {.soname = "libnccl.so.2", .self = (const void *)&resolve_all};
  squall_resolved_how how_allreduce = squall_resolved_none;
  for (int i = 0; i < FN_COUNT; i++) {
    char name[64];
    snprintf(name, sizeof name, "pnccl%s", fn_infos[i].name);
    squall_resolved_how how;
    real_fn[i] = squall__preload_lookup(&lib, name, &how, real_why[i], sizeof real_why[i]);
    if (i == FN_AllReduce) how_allreduce = how;
    if (real_fn[i] != NULL && fn_infos[i].required) nccl_found = 1;
  }
  api.allReduce = REAL(AllReduce);
  api.allGather = REAL(AllGather);
  api.commCount = REAL(CommCount);
  api.commUserRank = REAL(CommUserRank);
  api.commCuDevice = REAL(CommCuDevice);
  api.commGetAsyncError = REAL(CommGetAsyncError);
  api.groupStart = REAL(GroupStart);
  api.groupEnd = REAL(GroupEnd);
  /* two-level all-reduce: optional (ncclCommSplit came with NCCL 2.18);
   * missing ones keep every call flat, with the reason logged */
  api.reduceScatter = REAL(ReduceScatter);
  api.commSplit = REAL(CommSplit);
  api.commDestroy = REAL(CommDestroy);
  api_complete = api.allReduce && api.allGather && api.commCount && api.commUserRank &&
                 api.commCuDevice && api.commGetAsyncError && api.groupStart && api.groupEnd;
  if (how_allreduce != squall_resolved_none) {
    int version = 0;
    if (REAL(GetVersion)) REAL(GetVersion)(&version);
    SQ_INFO("NCCL interposer: real NCCL %d from %s, found %s", version,
            squall__preload_object_of(real_fn[FN_AllReduce]),
            how_allreduce == squall_resolved_next ? "with dlsym(RTLD_NEXT)"
                                                  : "with dlopen(libnccl.so.2, RTLD_NOLOAD)");
  }
}

static inline void resolve(void) { pthread_once(&resolve_once, resolve_all); }

/* The result of calling a function whose real one is missing. */
static ncclResult_t missing(int fn) {
  int optional = !fn_infos[fn].required && nccl_found;
  if (!__atomic_exchange_n(&missing_warned[fn], 1, __ATOMIC_RELAXED)) {
    if (optional)
      SQ_WARN("nccl%s: the loaded NCCL does not provide it (%s); returning ncclInvalidUsage",
              fn_infos[fn].name, real_why[fn]);
    else
      SQ_WARN("fatal: cannot forward nccl%s: %s. squall's NCCL interposer (LD_PRELOAD) needs the "
              "real NCCL, libnccl.so.2, loaded in the process; returning ncclSystemError",
              fn_infos[fn].name, real_why[fn]);
  }
  return optional ? ncclInvalidUsage : ncclSystemError;
}

/* Resolves, and returns from the wrapper when the real function is missing. */
#define NEED(name)                                      \
  do {                                                  \
    resolve();                                          \
    if (real_fn[FN_##name] == NULL) return missing(FN_##name); \
  } while (0)

/* Forwards a call that squall only needs to let through, under the guard. */
#define FORWARD(name, ...)                          \
  do {                                              \
    NEED(name);                                     \
    int outer_ = !inside;                           \
    inside = 1;                                     \
    ncclResult_t r_ = REAL(name)(__VA_ARGS__);      \
    if (outer_) inside = 0;                         \
    return r_;                                      \
  } while (0)

/* Runs `forget` for comm under the guard, then forwards. */
#define FORGET_THEN_FORWARD(name, comm, ...)        \
  do {                                              \
    NEED(name);                                     \
    if (inside) return REAL(name)(__VA_ARGS__);     \
    inside = 1;                                     \
    if (comm != NULL) squall__nccl_comm_forget(comm); \
    ncclResult_t r_ = REAL(name)(__VA_ARGS__);      \
    inside = 0;                                     \
    return r_;                                      \
  } while (0)

/* ------------------------------------------------------------ all-reduce */
EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream) {
  NEED(AllReduce);
  if (inside || comm == NULL) /* NULL: NCCL reports ncclInvalidArgument itself */
    return REAL(AllReduce)(sendbuff, recvbuff, count, datatype, op, comm, stream);
  if (!api_complete) {
    SQ_WARN_ONCE("the loaded NCCL lacks a function squall needs (%s); all-reduces pass through "
                 "uncompressed",
                 !api.allGather            ? real_why[FN_AllGather]
                 : !api.commCount          ? real_why[FN_CommCount]
                 : !api.commUserRank       ? real_why[FN_CommUserRank]
                 : !api.commCuDevice       ? real_why[FN_CommCuDevice]
                 : !api.commGetAsyncError  ? real_why[FN_CommGetAsyncError]
                 : !api.groupStart         ? real_why[FN_GroupStart]
                                           : real_why[FN_GroupEnd]);
    return REAL(AllReduce)(sendbuff, recvbuff, count, datatype, op, comm, stream);
  }
  inside = 1;
  /* A non-blocking communicator still initialising (ncclInProgress), or one
   * in error, is NCCL's business: the call goes to NCCL as it is. */
  ncclResult_t async = ncclSuccess, r;
  if (api.commGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess)
    r = REAL(AllReduce)(sendbuff, recvbuff, count, datatype, op, comm, stream);
  else
    r = squall__nccl_allreduce(&api, sendbuff, recvbuff, count, datatype, op, comm, stream,
                               group_depth > 0);
  inside = 0;
  return r;
}

/* ------------------------------------------------------------ groups */
EXPORT ncclResult_t ncclGroupStart(void) {
  NEED(GroupStart);
  if (inside) return REAL(GroupStart)();
  inside = 1;
  ncclResult_t r = REAL(GroupStart)();
  if (r == ncclSuccess) group_depth++;
  inside = 0;
  return r;
}

/* NCCL leaves a group level on every End at depth > 0, whatever the result
 * of launching the group; at depth 0 it reports ncclInvalidUsage. */
EXPORT ncclResult_t ncclGroupEnd(void) {
  NEED(GroupEnd);
  if (inside) return REAL(GroupEnd)();
  inside = 1;
  ncclResult_t r = REAL(GroupEnd)();
  if (group_depth > 0) group_depth--;
  inside = 0;
  return r;
}

#ifdef HAVE_GROUP_SIMULATE_END
/* Ends the group like ncclGroupEnd (NCCL leaves the level), launching nothing. */
EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  NEED(GroupSimulateEnd);
  if (inside) return REAL(GroupSimulateEnd)(simInfo);
  inside = 1;
  ncclResult_t r = REAL(GroupSimulateEnd)(simInfo);
  if (group_depth > 0) group_depth--;
  inside = 0;
  return r;
}
#endif

/* ------------------------------------------------------------ creation */
/* The rank of the first communicator this process creates names its
 * SQUALL_STATS file (the first call wins; it also arms the writer at exit).
 * In a data-parallel job that is the world communicator. */
#define INIT_THEN_NAME_STATS(name, rank, ...)                     \
  do {                                                            \
    NEED(name);                                                   \
    if (inside) return REAL(name)(__VA_ARGS__);                   \
    inside = 1;                                                   \
    ncclResult_t r_ = REAL(name)(__VA_ARGS__);                    \
    if (r_ == ncclSuccess || r_ == ncclInProgress) squall__stats_set_rank(rank); \
    inside = 0;                                                   \
    return r_;                                                    \
  } while (0)

/* Non-blocking communicators (config->blocking == 0) pass through: NCCL may
 * answer ncclInProgress to squall's own collectives, and the engine's
 * stream-ordered steps cannot wait for that. */
static ncclResult_t note_blocking(ncclResult_t r, ncclComm_t *newcomm, const ncclConfig_t *config) {
  if ((r == ncclSuccess || r == ncclInProgress) && newcomm && *newcomm && config && config->blocking == 0)
    squall__nccl_mark_nonblocking(*newcomm);
  return r;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  INIT_THEN_NAME_STATS(CommInitRank, rank, comm, nranks, commId, rank);
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                           ncclConfig_t *config) {
  NEED(CommInitRankConfig);
  if (inside) return REAL(CommInitRankConfig)(comm, nranks, commId, rank, config);
  inside = 1;
  ncclResult_t r = note_blocking(REAL(CommInitRankConfig)(comm, nranks, commId, rank, config), comm, config);
  if (r == ncclSuccess || r == ncclInProgress) squall__stats_set_rank(rank);
  inside = 0;
  return r;
}

EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
  FORWARD(CommInitAll, comm, ndev, devlist);
}

#ifdef HAVE_INIT_RANK_SCALABLE
EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                             ncclUniqueId *commIds, ncclConfig_t *config) {
  NEED(CommInitRankScalable);
  if (inside) return REAL(CommInitRankScalable)(newcomm, nranks, myrank, nId, commIds, config);
  inside = 1;
  ncclResult_t r =
      note_blocking(REAL(CommInitRankScalable)(newcomm, nranks, myrank, nId, commIds, config), newcomm, config);
  if (r == ncclSuccess || r == ncclInProgress) squall__stats_set_rank(myrank);
  inside = 0;
  return r;
}
#endif

EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                  ncclConfig_t *config) {
  NEED(CommSplit);
  if (inside) return REAL(CommSplit)(comm, color, key, newcomm, config);
  inside = 1;
  ncclResult_t r = note_blocking(REAL(CommSplit)(comm, color, key, newcomm, config), newcomm, config);
  inside = 0;
  return r;
}

#ifdef HAVE_COMM_SHRINK
EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                   ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  NEED(CommShrink);
  if (inside) return REAL(CommShrink)(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  inside = 1;
  ncclResult_t r = note_blocking(
      REAL(CommShrink)(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags), newcomm, config);
  inside = 0;
  return r;
}
#endif

/* ------------------------------------------------------------ teardown
 * squall's state goes first: once NCCL frees the communicator its address
 * may come back for a new one, which must not inherit stale residuals. */
EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) { FORGET_THEN_FORWARD(CommFinalize, comm, comm); }

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) { FORGET_THEN_FORWARD(CommDestroy, comm, comm); }

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { FORGET_THEN_FORWARD(CommAbort, comm, comm); }

#ifdef HAVE_COMM_REVOKE
EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  FORGET_THEN_FORWARD(CommRevoke, comm, comm, revokeFlags);
}
#endif

/* ------------------------------------------------------------ PreMulSum ops */
EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, ncclComm_t comm) {
  NEED(RedOpCreatePreMulSum);
  if (inside) return REAL(RedOpCreatePreMulSum)(op, scalar, datatype, residence, comm);
  inside = 1;
  ncclResult_t r = REAL(RedOpCreatePreMulSum)(op, scalar, datatype, residence, comm);
  if (r == ncclSuccess && op != NULL && comm != NULL)
    squall__nccl_premul_add(comm, *op, scalar, datatype, residence);
  inside = 0;
  return r;
}

/* Forgotten before NCCL frees it, so that another thread creating an op
 * that gets the same handle is not forgotten in its place. */
EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  NEED(RedOpDestroy);
  if (inside) return REAL(RedOpDestroy)(op, comm);
  inside = 1;
  if (comm != NULL) squall__nccl_premul_remove(comm, op);
  ncclResult_t r = REAL(RedOpDestroy)(op, comm);
  inside = 0;
  return r;
}

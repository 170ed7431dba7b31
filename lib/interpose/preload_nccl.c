/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * preload_nccl.c - libsquall-preload.so, the NCCL interposer. Loaded with
 * LD_PRELOAD ahead of libnccl, it defines the NCCL functions squall must
 * see and hands each to the real one, found by its profiling name (pncclX)
 * through preload_resolve.c; it does not link libnccl.
 *
 *   ncclAllReduce          -> squall__nccl_allreduce (compress or pass through)
 *   ncclReduceScatter      -> squall__nccl_reduce_scatter (compressed where
 *                             SQUALL_COLLECTIVES holds reducescatter; in a
 *                             group, the group rule of the other collectives)
 *   ncclGroupStart/End,
 *   ncclGroupSimulateEnd   -> preload_group.c: a group of all-reduces on one
 *                             communicator runs through squall at its
 *                             outermost end; other groups pass through
 *   the other collectives,
 *   ncclSend/Recv          -> forwarded; inside a group, they make it pass
 *                             through (preload_group.c)
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

#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "interpose/preload_group.h"
#include "interpose/preload_resolve.h"
#include "api/api_nccl.h"
#include "common/stats.h"
#include "transports/nccl_functions.h" /* the functions squall calls */

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

/* Every real function the interposer calls, looked up as "pnccl" Name:
 * the ones squall itself calls (transports/nccl_functions.h, which fill its
 * table), then the ones it only intercepts, in the same row form, X(field,
 * Name, req, core, ret, params), with no field of the table (none) and core
 * 0. req = 0 marks the functions older NCCL releases lack (and
 * ncclGetVersion and ncclGetLastError, used for the log). */
#define INTERCEPTED_ONLY(X)                                                                               \
  X(none, GroupSimulateEnd, 0, 0, ncclResult_t, (void *))                                                 \
  X(none, CommInitRank, 1, 0, ncclResult_t, (ncclComm_t *, int, ncclUniqueId, int))                       \
  X(none, CommInitRankConfig, 1, 0, ncclResult_t, (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *)) \
  X(none, CommInitAll, 1, 0, ncclResult_t, (ncclComm_t *, int, const int *))                              \
  X(none, CommInitRankScalable, 0, 0, ncclResult_t,                                                       \
    (ncclComm_t *, int, int, int, ncclUniqueId *, ncclConfig_t *))                                        \
  X(none, CommShrink, 0, 0, ncclResult_t, (ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int))    \
  X(none, CommFinalize, 1, 0, ncclResult_t, (ncclComm_t))                                                 \
  X(none, CommAbort, 1, 0, ncclResult_t, (ncclComm_t))                                                    \
  X(none, CommRevoke, 0, 0, ncclResult_t, (ncclComm_t, int))                                              \
  X(none, RedOpCreatePreMulSum, 1, 0, ncclResult_t,                                                       \
    (ncclRedOp_t *, void *, ncclDataType_t, ncclScalarResidence_t, ncclComm_t))                           \
  X(none, RedOpDestroy, 1, 0, ncclResult_t, (ncclRedOp_t, ncclComm_t))                                    \
  X(none, GetVersion, 0, 0, ncclResult_t, (int *))                                                        \
  X(none, Reduce, 1, 0, ncclResult_t,                                                                     \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t))           \
  X(none, Bcast, 1, 0, ncclResult_t, (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))     \
  X(none, Broadcast, 1, 0, ncclResult_t,                                                                  \
    (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                        \
  X(none, AlltoAll, 0, 0, ncclResult_t,                                                                   \
    (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))                             \
  X(none, Gather, 0, 0, ncclResult_t,                                                                     \
    (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                        \
  X(none, Scatter, 0, 0, ncclResult_t,                                                                    \
    (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                        \
  X(none, GetLastError, 0, 0, const char *, (ncclComm_t))

#define REAL_TABLE(X) SQ_NCCL_FUNCTIONS(X) INTERCEPTED_ONLY(X)

/* clang-format off */
enum {
#define REAL_ENUM(field, name, req, core, ret, params) FN_##name,
  REAL_TABLE(REAL_ENUM)
#undef REAL_ENUM
  FN_COUNT
};
/* clang-format on */

#define REAL_TYPEDEF(field, name, req, core, ret, params) typedef ret(*real_##name##_fn) params;
REAL_TABLE(REAL_TYPEDEF)
#undef REAL_TYPEDEF

typedef struct {
  const char *name; /* without the "nccl" prefix */
  int required;
} fn_info;

static const fn_info fn_infos[FN_COUNT] = {
#define REAL_INFO(field, name, req, core, ret, params) {#name, req},
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

/* The re-entry guard. */
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
  /* squall's table: every function it calls. The optional ones (core 0)
   * may stay NULL: without send and recv the two-phase path reports an
   * error; without reduceScatter, commSplit or commDestroy (ncclCommSplit
   * came with NCCL 2.18) every call stays flat, with the reason logged */
  api.caller = "ncclAllReduce";
  api_complete = 1;
#define API_SET(field, name, req, core, ret, params) \
  api.field = REAL(name);                            \
  if ((core) && api.field == NULL) api_complete = 0;
  SQ_NCCL_FUNCTIONS(API_SET)
#undef API_SET
  if (how_allreduce != squall_resolved_none) {
    int version = 0;
    /* clang-format off */
    if (REAL(GetVersion)) REAL(GetVersion)(&version);
    /* clang-format on */
    SQ_INFO("NCCL interposer: real NCCL %d from %s, found %s", version,
            squall__preload_object_of(real_fn[FN_AllReduce]),
            how_allreduce == squall_resolved_next ? "with dlsym(RTLD_NEXT)"
                                                  : "with dlopen(libnccl.so.2, RTLD_NOLOAD)");
  }
}

static inline void resolve(void) { pthread_once(&resolve_once, resolve_all); }

/* Why the table is incomplete: the first function squall needs (core 1)
 * that the loaded NCCL lacks. */
static const char *incomplete_why(void) {
#define CORE_WHY(field, name, req, core, ret, params) \
  if ((core) && api.field == NULL) return real_why[FN_##name];
  SQ_NCCL_FUNCTIONS(CORE_WHY)
#undef CORE_WHY
  return "none missing";
}

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
#define NEED(name)                                             \
  do {                                                         \
    resolve();                                                 \
    if (real_fn[FN_##name] == NULL) return missing(FN_##name); \
  } while (0)

/* The guard, in one place: a nested call (this thread is already inside an
 * intercepted call) goes straight to the real function; the outermost one
 * evaluates `outer`, the wrapper's work including its call of the real
 * function, with the guard held, and returns its result. */
#define GUARDED(name, args, outer)      \
  do {                                  \
    if (inside) return REAL(name) args; \
    inside = 1;                         \
    ncclResult_t r_ = (outer);          \
    inside = 0;                         \
    return r_;                          \
  } while (0)

/* A whole wrapper: resolve (a missing function returns why), then GUARDED. */
#define INTERCEPT(name, args, outer) \
  do {                               \
    NEED(name);                      \
    GUARDED(name, args, outer);      \
  } while (0)

/* Set by the first outermost ncclAllReduce: the hint at exit (mpi_hint)
 * needs to know whether the program used NCCL's all-reduce at all. */
static int allreduce_seen;

/* ------------------------------------------------------------ all-reduce
 * and its last error. Frameworks print ncclGetLastError beside a failed
 * call's code. A failure that squall raised itself leaves NCCL's text as it was, describing some
 * older error; so this thread's squall message is the last error from then
 * until NCCL's own text changes (a later NCCL failure). Where NCCL's text
 * changed during the call (squall failed because a collective of its own
 * did), NCCL's text stays: it names the cause. */
#define NCCL_TEXT_MAX 1024 /* NCCL's own buffer */
static __thread char raised_text[700], nccl_then[NCCL_TEXT_MAX];
static __thread int raised_valid;

static const char *nccl_text(ncclComm_t comm) {
  const char *t = REAL(GetLastError) ? REAL(GetLastError)(comm) : NULL;
  return t ? t : "";
}

/* A failure squall raised itself becomes this thread's last error (above);
 * before: NCCL's text when the call began. */
static ncclResult_t noted(ncclResult_t r, int raised, ncclComm_t comm, const char *before) {
  if (r == ncclSuccess) return r; /* NCCL keeps its text after a success too */
  const char *now = nccl_text(comm);
  raised_valid = raised && strncmp(now, before, NCCL_TEXT_MAX - 1) == 0;
  if (raised_valid) {
    snprintf(raised_text, sizeof raised_text, "squall: %s", squallGetLastError());
    snprintf(nccl_then, sizeof nccl_then, "%s", now);
  }
  return r;
}

/* The outermost all-reduce on a communicator: squall's (which leaves
 * NCCL's business to NCCL), its own failures noted for ncclGetLastError. */
static ncclResult_t allreduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const char *group_why) {
  char before[NCCL_TEXT_MAX];
  snprintf(before, sizeof before, "%s", nccl_text(comm));
  int raised = 0;
  ncclResult_t r = squall__nccl_allreduce(&api, sendbuff, recvbuff, count, datatype, op, comm, stream,
                                          group_why, 1, &raised);
  return noted(r, raised, comm, before);
}

/* The outermost reduce-scatter: squall's as the all-reduce (SQUALL_COLLECTIVES
 * decides in the engine whether squall takes it). */
static ncclResult_t reduce_scatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const char *group_why) {
  char before[NCCL_TEXT_MAX];
  snprintf(before, sizeof before, "%s", nccl_text(comm));
  int raised = 0;
  ncclResult_t r = squall__nccl_reduce_scatter(&api, sendbuff, recvbuff, recvcount, datatype, op, comm, stream,
                                               group_why, 1, &raised);
  return noted(r, raised, comm, before);
}
/* preload_group.c's way to run a call, with the guard held. */
static ncclResult_t run_call(const squall_group_call *c, const char *group_why) {
  return allreduce(c->send, c->recv, c->count, c->datatype, c->op, c->comm, c->stream, group_why);
}

static ncclResult_t grouped_or_now(const squall_group_call *c) {
  return squall__group_depth() > 0 ? squall__group_allreduce(c, run_call) : run_call(c, NULL);
}

EXPORT const char *ncclGetLastError(ncclComm_t comm) {
  resolve();
  if (!inside && raised_valid) {
    if (strncmp(nccl_text(comm), nccl_then, sizeof nccl_then - 1) == 0) return raised_text;
    raised_valid = 0;
  }
  return REAL(GetLastError) ? REAL(GetLastError)(comm) : "";
}

EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream) {
  NEED(AllReduce);
  if (!inside && !__atomic_load_n(&allreduce_seen, __ATOMIC_RELAXED))
    __atomic_store_n(&allreduce_seen, 1, __ATOMIC_RELAXED);
  if (comm == NULL) /* NCCL reports ncclInvalidArgument itself */
    return REAL(AllReduce)(sendbuff, recvbuff, count, datatype, op, comm, stream);
  if (!inside && !api_complete) {
    SQ_WARN_ONCE("the loaded NCCL lacks a function squall needs (%s); all-reduces pass through "
                 "uncompressed",
                 incomplete_why());
    return REAL(AllReduce)(sendbuff, recvbuff, count, datatype, op, comm, stream);
  }
  GUARDED(AllReduce, (sendbuff, recvbuff, count, datatype, op, comm, stream),
          grouped_or_now(&(squall_group_call){sendbuff, recvbuff, count, datatype, op, comm, stream}));
}

/* ------------------------------------------------------------ groups */
static ncclResult_t group_entered(ncclResult_t r) {
  if (r == ncclSuccess) squall__group_started();
  return r;
}

static ncclResult_t real_end(void *arg) {
  (void)arg;
  return REAL(GroupEnd)();
}

EXPORT ncclResult_t ncclGroupStart(void) { INTERCEPT(GroupStart, (), group_entered(REAL(GroupStart)())); }

EXPORT ncclResult_t ncclGroupEnd(void) { INTERCEPT(GroupEnd, (), squall__group_end(real_end, NULL, 0, run_call)); }

#ifdef HAVE_GROUP_SIMULATE_END
static ncclResult_t real_simulate_end(void *sim) { return REAL(GroupSimulateEnd)(sim); }

/* Ends the group like ncclGroupEnd (NCCL leaves the level), launching
 * nothing: the recorded all-reduces join NCCL's group first. */
EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  INTERCEPT(GroupSimulateEnd, (simInfo), squall__group_end(real_simulate_end, simInfo, 1, run_call));
}
#endif

/* The other collectives and send/recv: forwarded; inside a group that
 * holds recorded all-reduces, those join NCCL's group first. */
#define ENQUEUE(name, args) INTERCEPT(name, args, (squall__group_other("nccl" #name, run_call), REAL(name) args))

EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                               ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  ENQUEUE(Reduce, (sendbuff, recvbuff, count, datatype, op, root, comm, stream));
}

EXPORT ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                              cudaStream_t stream) {
  ENQUEUE(Bcast, (buff, count, datatype, root, comm, stream));
}

EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  int root, ncclComm_t comm, cudaStream_t stream) {
  ENQUEUE(Broadcast, (sendbuff, recvbuff, count, datatype, root, comm, stream));
}

/* A reduce-scatter inside a user's group is "another collective" of the
 * group rule (preload_group.c): the group passes through, the recorded
 * all-reduces first, and so does this call (reason in_group), into NCCL's
 * group. Outside a group squall takes it where SQUALL_COLLECTIVES says. */
static ncclResult_t reduce_scatter_now(const void *sendbuff, void *recvbuff, size_t recvcount,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  if (squall__group_depth() == 0)
    return reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream, NULL);
  squall__group_other("ncclReduceScatter", run_call);
  return reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream,
                        "holds ncclReduceScatter");
}

EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  NEED(ReduceScatter);
  if (comm == NULL || (!inside && !api_complete)) /* NCCL reports it; or squall cannot run (said at all-reduces) */
    return REAL(ReduceScatter)(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
  GUARDED(ReduceScatter, (sendbuff, recvbuff, recvcount, datatype, op, comm, stream),
          reduce_scatter_now(sendbuff, recvbuff, recvcount, datatype, op, comm, stream));
}

EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream) {
  ENQUEUE(AllGather, (sendbuff, recvbuff, sendcount, datatype, comm, stream));
}

EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
  ENQUEUE(Send, (sendbuff, count, datatype, peer, comm, stream));
}

EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
  ENQUEUE(Recv, (recvbuff, count, datatype, peer, comm, stream));
}

/* NCCL 2.28's: declared here for older headers, looked up like the rest. */
EXPORT ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclComm_t comm, cudaStream_t stream);
EXPORT ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclComm_t comm, cudaStream_t stream) {
  ENQUEUE(AlltoAll, (sendbuff, recvbuff, count, datatype, comm, stream));
}

EXPORT ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                               ncclComm_t comm, cudaStream_t stream);
EXPORT ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                               ncclComm_t comm, cudaStream_t stream) {
  ENQUEUE(Gather, (sendbuff, recvbuff, count, datatype, root, comm, stream));
}

EXPORT ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                                ncclComm_t comm, cudaStream_t stream);
EXPORT ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                                ncclComm_t comm, cudaStream_t stream) {
  ENQUEUE(Scatter, (sendbuff, recvbuff, count, datatype, root, comm, stream));
}

/* ------------------------------------------------------------ creation */
/* The rank in the first communicator this process creates names its
 * SQUALL_STATS file where the launcher's environment gives none (stats.h);
 * the call also arms the writer at exit. */
static ncclResult_t name_stats(ncclResult_t r, int rank, int nranks) {
  if (r == ncclSuccess || r == ncclInProgress) squall__stats_set_rank(rank, nranks, 0);
  return r;
}

/* Non-blocking communicators pass through: every call on one may answer
 * ncclInProgress, which the caller polls for; squall would have to wait
 * for each of its own steps (squall__nccl_settle), serialising what NCCL
 * overlaps. The mode is NCCL's: NCCL_COMM_BLOCKING=0 or 1 overrides
 * everything (read as NCCL reads it, strtoll base 0; other values are
 * ignored); else the config's blocking field where it is set; else a
 * split or shrink without a config inherits the parent's mode; else
 * blocking. Squall's own collectives on a communicator it did not see
 * made (squallAllReduce, which links NCCL directly) settle each step
 * instead. */
static int nonblocking_wanted(const ncclConfig_t *config, ncclComm_t parent) {
  const char *env = getenv("NCCL_COMM_BLOCKING");
  if (env && *env) {
    errno = 0;
    long long v = strtoll(env, NULL, 0);
    if (!errno && (v == 0 || v == 1)) return v == 0;
  }
  if (config) return config->blocking == 0;
  return parent && squall__nccl_is_nonblocking(parent);
}

static ncclResult_t note_blocking(ncclResult_t r, ncclComm_t *newcomm, const ncclConfig_t *config,
                                  ncclComm_t parent) {
  if ((r == ncclSuccess || r == ncclInProgress) && newcomm && *newcomm && nonblocking_wanted(config, parent))
    squall__nccl_mark_nonblocking(*newcomm);
  return r;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  INTERCEPT(CommInitRank, (comm, nranks, commId, rank),
            name_stats(note_blocking(REAL(CommInitRank)(comm, nranks, commId, rank), comm, NULL, NULL), rank,
                       nranks));
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                           ncclConfig_t *config) {
  INTERCEPT(CommInitRankConfig, (comm, nranks, commId, rank, config),
            name_stats(note_blocking(REAL(CommInitRankConfig)(comm, nranks, commId, rank, config), comm, config, NULL),
                       rank, nranks));
}

static ncclResult_t all_noted(ncclResult_t r, ncclComm_t *comms, int n) {
  for (int i = 0; comms && i < n; i++) note_blocking(r, &comms[i], NULL, NULL);
  return r;
}

EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
  INTERCEPT(CommInitAll, (comm, ndev, devlist), all_noted(REAL(CommInitAll)(comm, ndev, devlist), comm, ndev));
}

#ifdef HAVE_INIT_RANK_SCALABLE
EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                             ncclUniqueId *commIds, ncclConfig_t *config) {
  INTERCEPT(CommInitRankScalable, (newcomm, nranks, myrank, nId, commIds, config),
            name_stats(note_blocking(REAL(CommInitRankScalable)(newcomm, nranks, myrank, nId, commIds, config),
                                     newcomm, config, NULL),
                       myrank, nranks));
}
#endif

EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                  ncclConfig_t *config) {
  INTERCEPT(CommSplit, (comm, color, key, newcomm, config),
            note_blocking(REAL(CommSplit)(comm, color, key, newcomm, config), newcomm, config, comm));
}

#ifdef HAVE_COMM_SHRINK
EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                   ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  INTERCEPT(CommShrink, (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags),
            note_blocking(REAL(CommShrink)(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags),
                          newcomm, config, comm));
}
#endif

/* ------------------------------------------------------------ teardown
 * squall's state goes first: once NCCL frees the communicator its address
 * may come back for a new one, which must not inherit stale residuals. */
static int forget(ncclComm_t comm) {
  if (comm != NULL) squall__nccl_comm_forget(comm);
  return 0;
}

EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  INTERCEPT(CommFinalize, (comm), (forget(comm), REAL(CommFinalize)(comm)));
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  INTERCEPT(CommDestroy, (comm), (forget(comm), REAL(CommDestroy)(comm)));
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  INTERCEPT(CommAbort, (comm), (forget(comm), REAL(CommAbort)(comm)));
}

#ifdef HAVE_COMM_REVOKE
/* A revoked communicator's residuals go, but its mode stays known: NCCL's
 * recovery shrinks it next, and a shrink without a config takes the
 * parent's mode (note_blocking). */
static int forget_revoked(ncclComm_t comm) {
  int nonblocking = comm != NULL && squall__nccl_is_nonblocking(comm);
  forget(comm);
  if (nonblocking) squall__nccl_mark_nonblocking(comm);
  return 0;
}

EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  INTERCEPT(CommRevoke, (comm, revokeFlags), (forget_revoked(comm), REAL(CommRevoke)(comm, revokeFlags)));
}
#endif

/* ------------------------------------------------------------ PreMulSum ops */
static ncclResult_t premul_created(ncclResult_t r, ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                   ncclScalarResidence_t residence, ncclComm_t comm) {
  if (r == ncclSuccess && op != NULL && comm != NULL)
    squall__nccl_premul_add(comm, *op, scalar, datatype, residence);
  return r;
}

EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, ncclComm_t comm) {
  INTERCEPT(RedOpCreatePreMulSum, (op, scalar, datatype, residence, comm),
            premul_created(REAL(RedOpCreatePreMulSum)(op, scalar, datatype, residence, comm), op, scalar,
                           datatype, residence, comm));
}

/* Forgotten before NCCL frees it, so that another thread creating an op
 * that gets the same handle is not forgotten in its place. */
static int premul_forget(ncclComm_t comm, ncclRedOp_t op) {
  if (comm != NULL) squall__nccl_premul_remove(comm, op);
  return 0;
}

EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  INTERCEPT(RedOpDestroy, (op, comm), (premul_forget(comm, op), REAL(RedOpDestroy)(op, comm)));
}

/* ------------------------------------------------------------ the --mpi hint
 * squall-run preloads this interposer by default, and an MPI program run
 * that way (an mpi4py script, say) is never compressed: its all-reduces are
 * MPI_Allreduce, which only libsquall-preload-mpi.so catches. So at exit a
 * process that was configured to compress, never called ncclAllReduce, and
 * has an MPI library loaded but not squall's MPI interposer, says so (rank 0
 * only, when the launcher tells the rank). Counting MPI_Allreduce calls
 * would mean interposing MPI here, which this library must not do (it links
 * no MPI and must run in processes without one); a loaded libmpi is the
 * sign that the process is an MPI program, and it is read from the loader's
 * own list of objects, which costs nothing until exit. */
typedef struct {
  char mpi[256];  /* path of the first MPI library found, "" if none */
  int squall_mpi; /* libsquall-preload-mpi.so is loaded */
  int cuda;       /* the CUDA driver is loaded: the process used a GPU */
} loaded_libs;

static int note_lib(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  loaded_libs *l = data;
  const char *name = info->dlpi_name ? info->dlpi_name : "";
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (!strncmp(base, "libcuda.so", 10)) l->cuda = 1;
  if (!strncmp(base, "libsquall-preload-mpi", 21)) l->squall_mpi = 1;
  else if (!l->mpi[0] && (!strncmp(base, "libmpi.so", 9) || !strncmp(base, "libmpich.so", 11)))
    snprintf(l->mpi, sizeof l->mpi, "%s", name);
  return 0;
}

/* 1 when a launcher gave this process a place in a job of several
 * processes (torchrun, mpirun, srun): not a launcher itself, nor a lone
 * process. */
static int in_a_job(void) {
  static const char *sizes[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
  for (size_t i = 0; i < SQ_ARRAY_SIZE(sizes); i++) {
    const char *v = getenv(sizes[i]);
    if (v != NULL && atoi(v) > 1) return 1;
  }
  return 0;
}

/* 1 unless the launcher says this is a rank other than 0. */
static int maybe_rank0(void) {
  static const char *vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK",
                               "SLURM_PROCID"};
  for (size_t i = 0; i < SQ_ARRAY_SIZE(vars); i++) {
    const char *v = getenv(vars[i]);
    if (v != NULL && *v) return strcmp(v, "0") == 0;
  }
  return 1;
}

__attribute__((destructor)) static void mpi_hint(void) {
  if (__atomic_load_n(&allreduce_seen, __ATOMIC_RELAXED)) return;
  squallConfig_t cfg;
  squall__config_get(&cfg, NULL);
  if (cfg.codec == squallCodecNone) return;
  loaded_libs l = {"", 0, 0};
  dl_iterate_phdr(note_lib, &l);
  if (!maybe_rank0()) return;
  /* A process that used a GPU and all-reduced nothing through squall:
   * where it all-reduced with NCCL, that NCCL was out of LD_PRELOAD's
   * reach (linked statically, as in conda's PyTorch builds). */
  if (!l.mpi[0] && l.cuda && in_a_job()) {
    SQ_WARN("this process used CUDA and no ncclAllReduce reached the NCCL interposer: if it all-reduced "
            "with NCCL, that NCCL is linked statically (as in conda's PyTorch builds) or bound before the "
            "interposer, and LD_PRELOAD cannot reach it; use the PyTorch comm hook squall.torch.ddp_comm_hook, "
            "a PyTorch that loads libnccl.so (pip's), or link squallAllReduce directly");
    return;
  }
  if (!l.mpi[0] || l.squall_mpi) return;
  SQ_WARN("this process loaded MPI (%s) and made no ncclAllReduce call, so the NCCL interposer "
          "compressed nothing; for MPI_Allreduce use the MPI interposer: squall-run --mpi "
          "(or LD_PRELOAD=libsquall-preload-mpi.so)",
          l.mpi);
}

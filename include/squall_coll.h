/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * squall_coll.h - compressed all-reduce over collectives the caller
 * provides: a framework's own communicator (a PyTorch process group, a
 * JAX or Horovod backend, a custom RPC layer) instead of MPI or NCCL.
 *
 * The caller fills a squallCollectives_t with functions that run a plain
 * collective over its ranks; squall runs its codecs, error feedback, cost
 * model and call header on top of them, exactly as squallAllReduce() and
 * squallMpiAllreduce() do on NCCL and MPI. Every squallColl call is
 * collective: every rank makes it, in the same order, with the same count,
 * type and operation, and squall then calls the caller's functions in the
 * same order on every rank.
 *
 * Needs no MPI, NCCL or CUDA header.
 */
#ifndef SQUALL_COLL_H
#define SQUALL_COLL_H

#include "squall.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  squallFloat32 = 0,
  squallFloat16 = 1,
  squallBfloat16 = 2,
  squallInt64 = 3, /* squall's own call header (host memory, squallMin) */
  squallNumDataTypes = 4
} squallDataType_t;

typedef enum { squallSum = 0,
               squallMax = 1,
               squallMin = 2,
               squallAvg = 3,
               squallNumRedOps = 4 } squallRedOp_t;

typedef enum {
  squallMemoryHost = 0 /* buffers in host memory: the host codecs */
} squallMemory_t;

/* The caller's collectives. Each returns 0 on success; any other value
 * fails the squall call that made it (squallSystemError, with the value in
 * squallGetLastError()), after which the error-feedback residual is as
 * before the call. A collective that fails on some ranks only leaves the
 * others inside their next collective: the caller's library must then
 * fail on every rank (a timeout, an aborted communicator), as it would
 * without squall. `stream` is what the caller passed to
 * squallCollAllReduce. */
typedef struct {
  /* sizeof(squallCollectives_t): fields are only ever appended, and squall
   * reads only the first `size` bytes (SQUALL_COLLECTIVES_INIT sets it). */
  size_t size;
  void *ctx;        /* passed back to every function */
  int rank, nranks; /* this rank and the number of ranks */
  squallMemory_t memory;
  /* Required: recv = op over every rank's send, count elements of type;
   * send may equal recv. squall calls it with float32 (sum, max),
   * float16/bfloat16 (sum: codes squall has scaled to stay finite), int64
   * (min, on host memory: the call header), and for a call it passes
   * through, the caller's own type and operation, squallAvg included. */
  int (*allReduce)(void *ctx, const void *send, void *recv, size_t count, squallDataType_t type, squallRedOp_t op,
                   void *stream);
  /* Required: recv[r * bytes ...] = rank r's `bytes` bytes of send. */
  int (*allGather)(void *ctx, const void *send, void *recv, size_t bytes, void *stream);
  /* Optional (NULL: int8, int4 and fp8 pass through as disabled, fp16 and
   * bf16 run as a 16-bit all-reduce): send[r * bytes ...] goes to rank r,
   * recv[r * bytes ...] comes from rank r. */
  int (*allToAll)(void *ctx, const void *send, void *recv, size_t bytes, void *stream);
  /* Optional, for squallCollReduceScatter only (NULL: that call fails
   * with squallInvalidArgument): recv = rank `rank`'s block of op over
   * every rank's send, which holds nranks blocks of recvcount elements of
   * type. Runs the reduce-scatters squall passes through, with the call's
   * own type and op, squallAvg included. */
  int (*reduceScatter)(void *ctx, const void *send, void *recv, size_t recvcount, squallDataType_t type,
                       squallRedOp_t op, void *stream);
} squallCollectives_t;

#define SQUALL_COLLECTIVES_INIT \
  { sizeof(squallCollectives_t), NULL, 0, 0, squallMemoryHost, NULL, NULL, NULL, NULL }

/* squall's state for one set of collectives: its engine, residuals and
 * statistics. */
typedef struct squallColl *squallColl_t;

/* Makes *coll for the caller's collectives (copied; ctx must outlive
 * *coll). config: the configuration its calls run with (copied; see
 * squallConfigParse), or NULL for the process's (squallSetConfig, the
 * SQUALL_* variables). Local: no collective is called here.
 * squallInvalidArgument names a missing function or a bad rank, size or
 * memory kind. */
SQUALL_API squallResult_t squallCollCreate(const squallCollectives_t *collectives, const squallConfig_t *config,
                                           squallColl_t *coll);

/* All-reduce of count elements of type with op (squallSum or squallAvg),
 * recv = the sum (or mean) over every rank's send; send may equal recv.
 * key: the tensor's identity where the caller knows it (a gradient
 * bucket's index, as a pointer-sized integer), so that its error-feedback
 * residual follows the tensor even where its buffers move; NULL: the
 * buffers' addresses are its identity. Collective. Returns when recv
 * holds the result. A call squall does not compress (wrong type or op,
 * too small, compression off) runs the caller's allReduce with the call's
 * own type and op, and may then carry the tensor's residual; squallStats
 * says why. On failure recv is undefined and the residual as before. */
SQUALL_API squallResult_t squallCollAllReduce(squallColl_t coll, const void *send, void *recv, size_t count,
                                              squallDataType_t type, squallRedOp_t op, const void *key,
                                              void *stream);

/* Reduce-scatter: send holds nranks blocks of recvcount elements of type
 * (block r for rank r); recv = this rank's block of the sum over every
 * rank's send (op squallSum; squallAvg passes through). recv may be the
 * rank's own block of send (send + rank * recvcount elements, NCCL's in
 * place); any other overlap is refused. squall compresses float32 sums
 * (the owner of each block adds every rank's decoded contribution in fp32
 * in rank order) and keeps the error-feedback residual over the whole
 * send buffer, under key as for squallCollAllReduce; a float32 sum the
 * configuration passes through carries it where it holds mass (send is
 * then a buffer of squall's). Needs the caller's allToAll to compress and its
 * reduceScatter to pass through.
 * Collective; returns when recv holds the result. */
SQUALL_API squallResult_t squallCollReduceScatter(squallColl_t coll, const void *send, void *recv, size_t recvcount,
                                                  squallDataType_t type, squallRedOp_t op, const void *key,
                                                  void *stream);

/* Replaces the configuration coll's calls run with (copied). Collective:
 * every rank sets the same one between the same two calls, and never
 * while another thread has a call of coll in flight. */
SQUALL_API squallResult_t squallCollSetConfig(squallColl_t coll, const squallConfig_t *config);

/* Copies the error-feedback residual of the tensor last sent with key
 * (or, for key NULL, from send) of count elements of type into out (count
 * host floats): an all-reduce's, or where the tensor has none, a
 * reduce-scatter's (count: its send buffer's, nranks * recvcount).
 * squallInvalidArgument when squall keeps none. */
SQUALL_API squallResult_t squallCollGetResidual(squallColl_t coll, const void *key, size_t count,
                                                squallDataType_t type, float *out);

/* Zeroes coll's residuals (a new model, a checkpoint load). */
SQUALL_API squallResult_t squallCollResetResiduals(squallColl_t coll);

/* coll's counters (the same fields as squallStatsGet's; stats as
 * SQUALL_STATS_INITIALIZER sets it). */
SQUALL_API squallResult_t squallCollStats(squallColl_t coll, squallStats_t *stats);

/* Frees coll (accepts NULL). Local. */
SQUALL_API squallResult_t squallCollDestroy(squallColl_t coll);

/* The caller's sizeof in its struct's head, as squall.h does for its own
 * functions (not in the library itself). */
#ifndef SQUALL_BUILDING_LIBRARY
#define squallCollStats(coll, stats) squallCollStats(coll, squall__sized_stats(stats))
#endif

#ifdef __cplusplus
}
#endif

#endif

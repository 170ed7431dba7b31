/* SPDX-License-Identifier: BSD-3-Clause */
/* transport_nccl.c - NCCL collectives for the engine, on the call's stream. */
#include "common/internal.h"

#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "transports/transport_nccl.h"
#include "transports/topology_nccl.h" /* two-level all-reduce */

squallResult_t squall__nccl_result(const squall_nccl_api *api, ncclResult_t r, const char *what) {
  if (r == ncclSuccess) return squallSuccess;
  /* NCCL's codes are squall's (squall.h keeps the same numbers); the text
   * is NCCL's own, which says what the code means for NCCL. */
  const char *text = api->getErrorString ? api->getErrorString(r) : NULL;
  return squall__fail((squallResult_t)r, "%s failed: NCCL error %d (%s)", what, (int)r,
                      text ? text : "no text: this NCCL lacks ncclGetErrorString");
}

squallResult_t squall__nccl_settle(const squall_nccl_api *api, ncclComm_t comm, ncclResult_t r, const char *what) {
  while (r == ncclInProgress) {
    ncclResult_t state = ncclSuccess, q = api->commGetAsyncError(comm, &state);
    if (q != ncclSuccess)
      return squall__nccl_result(api, q, "ncclCommGetAsyncError (waiting for an operation in progress)");
    r = state;
    if (r == ncclInProgress) sched_yield(); /* NCCL's own threads finish it */
  }
  return squall__nccl_result(api, r, what);
}

/* The result of an operation on the context's communicator, settled. */
static squallResult_t done(const squall_nccl_ctx *c, ncclResult_t r, const char *what) {
  return squall__nccl_settle(c->api, c->comm, r, what);
}

static squallResult_t nccl_allreduce_half(void *ctx, void *stream, uint16_t *buf, size_t n, sq_half_kind kind) {
  squall_nccl_ctx *c = ctx;
  return done(c, c->api->allReduce(buf, buf, n, kind == SQ_HALF_BF16 ? ncclBfloat16 : ncclFloat16, ncclSum, c->comm, (cudaStream_t)stream),
              "ncclAllReduce (16-bit sum)");
}

static squallResult_t nccl_allreduce_max_f32(void *ctx, void *stream, float *buf, size_t n) {
  squall_nccl_ctx *c = ctx;
  return done(c, c->api->allReduce(buf, buf, n, ncclFloat32, ncclMax, c->comm, (cudaStream_t)stream),
              "ncclAllReduce (max)");
}

static squallResult_t nccl_allreduce_sum_f32(void *ctx, void *stream, const float *send, float *recv, size_t n) {
  squall_nccl_ctx *c = ctx;
  return done(c, c->api->allReduce(send, recv, n, ncclFloat32, ncclSum, c->comm, (cudaStream_t)stream),
              "ncclAllReduce (dense fallback)");
}

static squallResult_t nccl_allgather(void *ctx, void *stream, const void *send, void *recv, size_t bytes) {
  squall_nccl_ctx *c = ctx;
  return done(c, c->api->allGather(send, recv, bytes, ncclUint8, c->comm, (cudaStream_t)stream),
              "ncclAllGather");
}

/* A few host int64 from every rank, reduced to their minimum: staged
 * through device memory on a GPU and synchronised (the engine asks only
 * when the configuration changed or memory must grow). */
static squallResult_t nccl_allreduce_min_i64_host(void *ctx, void *stream, int64_t *buf, size_t n) {
  squall_nccl_ctx *c = ctx;
  cudaStream_t s = (cudaStream_t)stream;
  if (!c->device_memory)
    return done(c, c->api->allReduce(buf, buf, n, ncclInt64, ncclMin, c->comm, s), "ncclAllReduce (call header)");
  int64_t *d = NULL;
  size_t bytes = n * sizeof *buf;
  if (cudaMalloc((void **)&d, bytes) != cudaSuccess) {
    cudaGetLastError();
    return squall__fail(squallUnhandledCudaError, "cudaMalloc of %zu bytes for the call header", bytes);
  }
  squallResult_t r = squallSuccess;
  if (cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, s) != cudaSuccess)
    r = squall__fail(squallUnhandledCudaError, "cudaMemcpyAsync (call header)");
  if (r == squallSuccess)
    r = done(c, c->api->allReduce(d, d, n, ncclInt64, ncclMin, c->comm, s), "ncclAllReduce (call header)");
  if (r == squallSuccess &&
      (cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
       cudaStreamSynchronize(s) != cudaSuccess))
    r = squall__fail(squallUnhandledCudaError, "copying the call header back: %s",
                     cudaGetErrorString(cudaGetLastError()));
  cudaFree(d);
  return r;
}

/* All-to-all as grouped send/recv pairs (NCCL has no all-to-all
 * collective). */
static squallResult_t nccl_alltoall(void *ctx, void *stream, const void *send, void *recv, size_t bytes) {
  squall_nccl_ctx *c = ctx;
  int p = 0;
  SQ_FORWARD_IF_ERROR(squall__nccl_result(c->api, c->api->commCount(c->comm, &p), "ncclCommCount"));
  SQ_FORWARD_IF_ERROR(squall__nccl_result(c->api, c->api->groupStart(), "ncclGroupStart"));
  ncclResult_t r = ncclSuccess;
  for (int q = 0; q < p && r == ncclSuccess; q++) {
    r = c->api->send((const char *)send + (size_t)q * bytes, bytes, ncclUint8, q, c->comm, (cudaStream_t)stream);
    if (r == ncclSuccess)
      r = c->api->recv((char *)recv + (size_t)q * bytes, bytes, ncclUint8, q, c->comm, (cudaStream_t)stream);
  }
  ncclResult_t e = c->api->groupEnd(); /* always closed, also after a failed enqueue */
  return done(c, r != ncclSuccess ? r : e, "ncclSend/ncclRecv (all-to-all)");
}

squallResult_t squall__transport_nccl_init(squall_transport *tr, squall_nccl_ctx *ctx) {
  memset(tr, 0, sizeof *tr);
  tr->ctx = ctx;
  SQ_FORWARD_IF_ERROR(squall__nccl_result(ctx->api, ctx->api->commUserRank(ctx->comm, &tr->rank), "ncclCommUserRank"));
  SQ_FORWARD_IF_ERROR(squall__nccl_result(ctx->api, ctx->api->commCount(ctx->comm, &tr->nranks), "ncclCommCount"));
  tr->allreduce_half = nccl_allreduce_half;
  tr->allreduce_max_f32 = nccl_allreduce_max_f32;
  tr->allreduce_sum_f32 = nccl_allreduce_sum_f32;
  tr->allgather = nccl_allgather;
  tr->allgatherv = NULL; /* sizes stay fixed: no host synchronisation on the device path */
  tr->allreduce_min_i64_host = nccl_allreduce_min_i64_host;
  /* Optional: an NCCL without ncclSend/ncclRecv (before 2.7) leaves the
   * two-phase path out, which the engine decides before the call starts. */
  if (ctx->api->send != NULL && ctx->api->recv != NULL) tr->alltoall = nccl_alltoall;
  squall__topology_nccl_attach(tr, ctx); /* two-level all-reduce: split, reduce-scatter */
  return squallSuccess;
}

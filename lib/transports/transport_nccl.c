/* transport_nccl.c - NCCL collectives for the engine. */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "transports/transport_nccl.h"
#include "transports/topology_nccl.h" /* two-level all-reduce */

squallResult_t squall__nccl_result(ncclResult_t r, const char *what) {
  if (r == ncclSuccess) return squallSuccess;
  /* NCCL's codes are squall's (squall.h keeps the same numbers). */
  return squall__fail((squallResult_t)r, "%s failed: NCCL error %d", what, (int)r);
}

static squallResult_t nccl_allreduce_half(void *ctx, uint16_t *buf, size_t n, sq_half_kind kind) {
  squall_nccl_ctx *c = ctx;
  return squall__nccl_result(c->api->allReduce(buf, buf, n, kind == SQ_HALF_BF16 ? ncclBfloat16 : ncclFloat16,
                                               ncclSum, c->comm, c->stream),
                             "ncclAllReduce (16-bit sum)");
}

static squallResult_t nccl_allreduce_max_f32(void *ctx, float *buf, size_t n) {
  squall_nccl_ctx *c = ctx;
  return squall__nccl_result(c->api->allReduce(buf, buf, n, ncclFloat32, ncclMax, c->comm, c->stream),
                             "ncclAllReduce (max)");
}

static squallResult_t nccl_allreduce_sum_f32(void *ctx, const float *send, float *recv, size_t n) {
  squall_nccl_ctx *c = ctx;
  return squall__nccl_result(c->api->allReduce(send, recv, n, ncclFloat32, ncclSum, c->comm, c->stream),
                             "ncclAllReduce (dense fallback)");
}

static squallResult_t nccl_allgather(void *ctx, const void *send, void *recv, size_t bytes) {
  squall_nccl_ctx *c = ctx;
  return squall__nccl_result(c->api->allGather(send, recv, bytes, ncclUint8, c->comm, c->stream),
                             "ncclAllGather");
}

/* A few host bytes from every rank: staged through device memory on a GPU
 * (rare: once per configuration, so the synchronisation is acceptable). */
static squallResult_t nccl_allgather_host(void *ctx, const void *send, void *recv, size_t bytes) {
  squall_nccl_ctx *c = ctx;
  if (!c->device_memory) return nccl_allgather(ctx, send, recv, bytes);
#ifdef HAVE_CUDA
  int p = 0;
  SQ_FORWARD_IF_ERROR(squall__nccl_result(c->api->commCount(c->comm, &p), "ncclCommCount"));
  char *d = NULL;
  size_t total = bytes * (size_t)(p + 1);
  if (cudaMalloc((void **)&d, total) != cudaSuccess) {
    cudaGetLastError();
    return squall__fail(squallUnhandledCudaError, "cudaMalloc of %zu bytes for configuration agreement", total);
  }
  squallResult_t r = squallSuccess;
  if (cudaMemcpyAsync(d, send, bytes, cudaMemcpyHostToDevice, c->stream) != cudaSuccess)
    r = squall__fail(squallUnhandledCudaError, "cudaMemcpyAsync (agreement)");
  if (r == squallSuccess) r = nccl_allgather(ctx, d, d + bytes, bytes);
  if (r == squallSuccess &&
      (cudaMemcpyAsync(recv, d + bytes, bytes * (size_t)p, cudaMemcpyDeviceToHost, c->stream) != cudaSuccess ||
       cudaStreamSynchronize(c->stream) != cudaSuccess))
    r = squall__fail(squallUnhandledCudaError, "copying the agreement back: %s", cudaGetErrorString(cudaGetLastError()));
  cudaFree(d);
  return r;
#else
  return squall__fail(squallInternalError, "device memory without CUDA support");
#endif
}

squallResult_t squall__transport_nccl_init(squall_transport *tr, squall_nccl_ctx *ctx) {
  memset(tr, 0, sizeof *tr);
  tr->ctx = ctx;
  SQ_FORWARD_IF_ERROR(squall__nccl_result(ctx->api->commUserRank(ctx->comm, &tr->rank), "ncclCommUserRank"));
  SQ_FORWARD_IF_ERROR(squall__nccl_result(ctx->api->commCount(ctx->comm, &tr->nranks), "ncclCommCount"));
  tr->allreduce_half = nccl_allreduce_half;
  tr->allreduce_max_f32 = nccl_allreduce_max_f32;
  tr->allreduce_sum_f32 = nccl_allreduce_sum_f32;
  tr->allgather = nccl_allgather;
  tr->allgatherv = NULL; /* sizes stay fixed: no host synchronisation on the device path */
  tr->allgather_host = nccl_allgather_host;
  squall__topology_nccl_attach(tr, ctx); /* two-level all-reduce: split, reduce-scatter */
  return squallSuccess;
}

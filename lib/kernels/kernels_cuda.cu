/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kernels_cuda.cu - the engine's kernel set on device memory: the CUDA
 * codec twins (lib/codecs/cuda/: half.cu, topk.cu, sparse.cu) plus the
 * small element-wise kernels the engine needs around them. Everything is
 * enqueued on the call's stream; only alloc and to_host wait, and the
 * engine calls them outside the steady state (growth) or on request
 * (diagnostics).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <cuda_runtime_api.h>

#include "codecs/cuda/codec_cuda.h"
#include "codecs/codec.h"
#include "common/internal.h"
#include "kernels/kernels.h"

static cudaStream_t stream_of(void *stream) { return (cudaStream_t)stream; }

static squallResult_t cuda_result(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return squallSuccess;
  return squall__fail(squallUnhandledCudaError, "%s: %s", what, cudaGetErrorString(e));
}

static unsigned blocks_for(size_t n) {
  size_t b = (n + 255) / 256;
  return (unsigned)(b < 65535 * 16 ? (b ? b : 1) : 65535 * 16); /* grid-stride covers the rest */
}

#define GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void widen_kernel(int dtype, const void *src, float *dst, size_t n, float scalar) {
  GRID_STRIDE(i, n) {
    float v;
    if (dtype == SQ_DT_F32) v = ((const float *)src)[i];
    else v = sq_half_to_f32(squall__dtype_half_kind(dtype), ((const uint16_t *)src)[i]);
    dst[i] = scalar == 1.0f ? v : scalar * v;
  }
}

__global__ void narrow_kernel(int dtype, const float *src, void *dst, size_t n, float divisor) {
  GRID_STRIDE(i, n) {
    float v = divisor == 1.0f ? src[i] : src[i] / divisor;
    if (dtype == SQ_DT_F32) ((float *)dst)[i] = v;
    else ((uint16_t *)dst)[i] = sq_half_from_f32(squall__dtype_half_kind(dtype), v);
  }
}

__global__ void flush_kernel(const float *g, float *res, float *a, size_t n) {
  GRID_STRIDE(i, n) {
    if (res) {
      float r = res[i];
      a[i] = g[i] + r;
      res[i] = 0.0f;
    } else {
      a[i] = g[i];
    }
  }
}

__global__ void scale_kernel(const float *absmax, float limit, float max_scale, float *scale) {
  float s = sq_pow2_scale(*absmax, limit);
  *scale = s > max_scale ? max_scale : s;
}

static void *dev_alloc(void *stream, size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  if (cudaMemsetAsync(p, 0, bytes, stream_of(stream)) != cudaSuccess) {
    cudaFree(p);
    return NULL;
  }
  return p;
}

static void dev_free(void *stream, void *p) { cudaFree(p); }

static squallResult_t dev_zero(void *stream, void *p, size_t bytes) {
  return cuda_result(cudaMemsetAsync(p, 0, bytes, stream_of(stream)), "cudaMemsetAsync");
}

static squallResult_t dev_to_host(void *stream, void *dst, const void *src, size_t bytes) {
  cudaStream_t s = stream_of(stream);
  SQ_FORWARD_IF_ERROR(cuda_result(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync"));
  return cuda_result(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

static squallResult_t dev_flush(void *stream, const float *g, float *res, float *a, size_t n) {
  flush_kernel<<<blocks_for(n), 256, 0, stream_of(stream)>>>(g, res, a, n);
  return cuda_result(cudaGetLastError(), "flush kernel launch");
}

static squallResult_t dev_widen(void *stream, squall_dtype t, const void *src, float *dst, size_t n, float scalar) {
  widen_kernel<<<blocks_for(n), 256, 0, stream_of(stream)>>>((int)t, src, dst, n, scalar);
  return cuda_result(cudaGetLastError(), "widen kernel launch");
}

static squallResult_t dev_narrow(void *stream, squall_dtype t, const float *src, void *dst, size_t n, float divisor) {
  narrow_kernel<<<blocks_for(n), 256, 0, stream_of(stream)>>>((int)t, src, dst, n, divisor);
  return cuda_result(cudaGetLastError(), "narrow kernel launch");
}

static size_t dev_absmax_ws(size_t n) { return squall__cuda_absmax_workspace_bytes(n); }

static squallResult_t dev_absmax(void *stream, const float *g, const float *res, size_t n, float *out, void *ws) {
  return cuda_result(squall__cuda_absmax(g, res, n, out, ws, squall__cuda_absmax_workspace_bytes(n), stream_of(stream)),
                     "absmax kernels");
}

static squallResult_t dev_pow2_scale(void *stream, const float *absmax, float limit, float max_scale, float *scale) {
  scale_kernel<<<1, 1, 0, stream_of(stream)>>>(absmax, limit, max_scale, scale);
  return cuda_result(cudaGetLastError(), "scale kernel launch");
}

static squallResult_t dev_half_encode(void *stream, sq_half_kind kind, const float *g, float *res, uint16_t *out,
                                      size_t n, const float *scale) {
  return cuda_result(squall__cuda_half_encode(kind, g, res, out, n, scale, stream_of(stream)), "16-bit encode");
}

static squallResult_t dev_half_decode(void *stream, sq_half_kind kind, const uint16_t *in, float *out, size_t n,
                                      const float *scale, int cold) {
  (void)cold; /* a host hint */
  return cuda_result(squall__cuda_half_decode(kind, in, out, n, scale, 0, stream_of(stream)), "16-bit decode");
}

static size_t dev_topk_ws(size_t n, size_t k) { return squall__cuda_topk_workspace_bytes(n, k); }

static squallResult_t dev_topk_encode(void *stream, const float *g, float *res, size_t n, size_t k,
                                      squallValueType_t values, const float *scale, void *slot, void *ws) {
  return cuda_result(squall__cuda_topk_encode(g, res, n, k, values, scale, slot, ws,
                                              squall__cuda_topk_workspace_bytes(n, k), stream_of(stream)),
                     "top-k encode");
}

static squallResult_t dev_topk_select(void *stream, const float *g, const float *res, size_t n, size_t k,
                                      squallValueType_t values, const float *scale, void *slot, void *ws) {
  return cuda_result(squall__cuda_topk_select(g, res, n, k, values, scale, slot, ws,
                                              squall__cuda_topk_workspace_bytes(n, k), stream_of(stream)),
                     "top-k selection");
}

/* Validate, then the residual (skipped by the kernel itself when the flag
 * is set: no host wait, so also under graph capture), then the decode,
 * which writes dense only after the residual pass has read g. */
static squallResult_t dev_topk_finish(void *stream, const float *g, float *res, size_t n, size_t k,
                                      squallValueType_t values, void *ws, const void *slots, int nranks,
                                      int own, float *dense, int *flag) {
  cudaStream_t s = stream_of(stream);
  const size_t sb = squall__topk_slot_bytes(k, values);
  SQ_RETURN_ERROR_IF(res && (own < 0 || own >= nranks), squallInternalError,
                     "top-k finish: rank %d outside %d slots", own, nranks);
  if (res) { /* the check first: the decode below checks again, too late for the residual */
    SQ_FORWARD_IF_ERROR(cuda_result(squall__cuda_sparse_validate(slots, nranks, k, values, n, flag, s),
                                    "top-k payload check"));
    /* the sender's scale travels in its own slot */
    const float *scale = reinterpret_cast<const float *>(static_cast<const char *>(slots) + (size_t)own * sb +
                                                         squall__slot_scale_offset(k));
    SQ_FORWARD_IF_ERROR(cuda_result(squall__cuda_topk_commit(g, res, n, k, values, scale, ws,
                                                             squall__cuda_topk_workspace_bytes(n, k), flag, s),
                                    "top-k residual update"));
  }
  return cuda_result(squall__cuda_sparse_decode(slots, nranks, k, values, dense, n, flag, s), "sparse decode");
}

/* The stream fence (kernels.h): an event, recorded at the end of a
 * compressed call and waited on by a call on another stream. */
static squallResult_t dev_fence_record(void **fence, void *stream) {
  if (*fence == NULL) {
    cudaEvent_t ev;
    SQ_FORWARD_IF_ERROR(cuda_result(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate (fence)"));
    *fence = ev;
  }
  return cuda_result(cudaEventRecord((cudaEvent_t)*fence, stream_of(stream)), "cudaEventRecord (end of a call)");
}

static squallResult_t dev_fence_wait(void *fence, void *stream) {
  return cuda_result(cudaStreamWaitEvent(stream_of(stream), (cudaEvent_t)fence, 0),
                     "cudaStreamWaitEvent (the last call, on another stream)");
}

static void dev_fence_free(void *fence) {
  if (fence) cudaEventDestroy((cudaEvent_t)fence);
}

/* The timer (kernels.h): events with timing, recorded on the call's
 * stream; cudaEventQuery says whether the stream has reached one, so a
 * reading never waits. */
static squallResult_t dev_timer_record(void **mark, void *stream) {
  if (*mark == NULL) {
    cudaEvent_t ev;
    SQ_FORWARD_IF_ERROR(cuda_result(cudaEventCreate(&ev), "cudaEventCreate (timer)"));
    *mark = ev;
  }
  return cuda_result(cudaEventRecord((cudaEvent_t)*mark, stream_of(stream)), "cudaEventRecord (timer)");
}

static int dev_timer_elapsed(void *start, void *end, double *seconds) {
  if (start == NULL || end == NULL) return -1;
  cudaError_t q = cudaEventQuery((cudaEvent_t)end);
  if (q == cudaErrorNotReady) return 0;
  if (q == cudaSuccess) q = cudaEventQuery((cudaEvent_t)start); /* recorded before end: reached by now */
  float ms = 0;
  if (q == cudaSuccess) q = cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end);
  if (q != cudaSuccess) {
    cudaGetLastError(); /* a lost reading, not the call's error: the model waits for the next */
    return -1;
  }
  *seconds = (double)ms * 1e-3;
  return 1;
}

static void dev_timer_free(void *mark) {
  if (mark) cudaEventDestroy((cudaEvent_t)mark);
}

extern "C" {

const squall_kernels squall__kernels_cuda = {
    .name = "cuda",
    /* abilities (kernels.h): device memory, work enqueued on the stream */
    .on_host = 0,
    .topk_in_rounds = 0,
    .twophase_alone = 0,
    .topk_max_elems = (size_t)INT_MAX, /* topk.cu's int counts */
    .alloc = dev_alloc,
    .free = dev_free,
    .zero = dev_zero,
    .to_host = dev_to_host,
    .flush = dev_flush,
    .widen = dev_widen,
    .narrow = dev_narrow,
    .absmax_workspace_bytes = dev_absmax_ws,
    .absmax = dev_absmax,
    .pow2_scale = dev_pow2_scale,
    .half_encode = dev_half_encode,
    .half_decode = dev_half_decode,
    .topk_workspace_bytes = dev_topk_ws,
    .topk_encode = dev_topk_encode,
    .topk_select = dev_topk_select,
    .topk_finish = dev_topk_finish,
    /* quantised codecs (kernels_cuda_quant.cu) */
    .quant_encode = squall__dev_quant_encode,
    .quant_decode = squall__dev_quant_decode,
    .quant_reduce = squall__dev_quant_reduce,
    .half_reduce = squall__dev_half_reduce,
    /* the optional host-only fast paths (half_encode_guess .. topk_encode_to)
     * stay NULL; C++ takes designated fields in declaration order only */
    .fence_record = dev_fence_record,
    .fence_wait = dev_fence_wait,
    .fence_free = dev_fence_free,
    .timer_record = dev_timer_record,
    .timer_elapsed = dev_timer_elapsed,
    .timer_free = dev_timer_free,
};

int squall__cuda_is_device_pointer(const void *p) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError(); /* no driver, or an unregistered host pointer: host memory */
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

} /* extern "C" */

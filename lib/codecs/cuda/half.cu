/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * half.cu - device twins of the 16-bit codec (lib/codecs/codec_half.c): absmax,
 * power-of-two scale, encode with error feedback, decode. Per element the
 * kernels call lib/codecs/codec_math.h, as the host does, so the bits agree.
 * Plain grid-stride loops: these kernels are bound by memory bandwidth.
 */
#include <climits>
#include "codecs/cuda/codec_cuda.h"
#include "codecs/cuda/cuda_check.h"

namespace {

constexpr unsigned kThreads = 256;       /* every kernel here: 8 warps */
constexpr unsigned kAbsmaxBlocks = 1024; /* partial maxima, stage 1 */
constexpr unsigned kElementwiseBlocks = 8192;

/* The largest u32 over the block, in thread 0. Non-negative floats order
 * like their bit patterns, so a max over |a| bits is a max over |a|. */
__device__ uint32_t block_max_u32(uint32_t v) {
  __shared__ uint32_t warp_max[kThreads / 32];
  v = __reduce_max_sync(0xffffffffu, v);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (unsigned w = 1; w < kThreads / 32; w++) v = v > warp_max[w] ? v : warp_max[w];
  return v;
}

/* Stage 1: partial[blockIdx] = max |a| bits over the finite a this block
 * sees; a non-finite a contributes nothing (bits 0 = +0). */
__global__ void __launch_bounds__(kThreads)
absmax_partial(const float *g, const float *res, size_t n, uint32_t *partial) {
  uint32_t m = 0;
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n;
       i += (size_t)gridDim.x * kThreads) {
    float a = res ? g[i] + res[i] : g[i];
    uint32_t bits = sq_float_bits(a) & 0x7fffffffu;
    if (sq_isfinite(a) && bits > m) m = bits;
  }
  m = block_max_u32(m);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

/* Stage 2, one block: the max of the partials, as a float. */
__global__ void __launch_bounds__(kThreads)
absmax_final(const uint32_t *partial, unsigned nparts, float *d_absmax) {
  uint32_t m = 0;
  for (unsigned i = threadIdx.x; i < nparts; i += kThreads) m = partial[i] > m ? partial[i] : m;
  m = block_max_u32(m);
  if (threadIdx.x == 0) *d_absmax = sq_bits_float(m);
}

__global__ void pow2_scale_kernel(const float *d_absmax, float limit, float *d_scale) {
  *d_scale = sq_pow2_scale(*d_absmax, limit);
}

__global__ void __launch_bounds__(kThreads)
half_encode_kernel(sq_half_kind kind, const float *g, float *res, uint16_t *out, size_t n,
                   const float *d_scale) {
  const float scale = *d_scale;
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n;
       i += (size_t)gridDim.x * kThreads)
    out[i] = sq_half_encode_elem(kind, g[i], res ? &res[i] : nullptr, scale);
}

__global__ void __launch_bounds__(kThreads)
half_decode_kernel(sq_half_kind kind, const uint16_t *in, float *out, size_t n,
                   const float *d_scale, int accumulate) {
  const float scale = *d_scale;
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n;
       i += (size_t)gridDim.x * kThreads) {
    float d = sq_half_decode_elem(kind, in[i], scale);
    out[i] = accumulate ? out[i] + d : d;
  }
}

bool valid_kind(sq_half_kind kind) { return kind == SQ_HALF_FP16 || kind == SQ_HALF_BF16; }

} /* namespace */

extern "C" size_t squall__cuda_absmax_workspace_bytes(size_t n) {
  return (size_t)sq_cuda_grid(n, kThreads, kAbsmaxBlocks) * sizeof(uint32_t);
}

extern "C" cudaError_t squall__cuda_absmax(const float *g, const float *res, size_t n,
                                           float *d_absmax, void *ws, size_t ws_bytes,
                                           cudaStream_t stream) {
  SQ_CUDA_REQUIRE(d_absmax && ws && (n == 0 || g));
  SQ_CUDA_REQUIRE(ws_bytes >= squall__cuda_absmax_workspace_bytes(n));
  SQ_CUDA_REQUIRE((uintptr_t)ws % alignof(uint32_t) == 0);
  unsigned blocks = sq_cuda_grid(n, kThreads, kAbsmaxBlocks);
  uint32_t *partial = static_cast<uint32_t *>(ws);
  absmax_partial<<<blocks, kThreads, 0, stream>>>(g, res, n, partial);
  SQ_CUDA_CHECK_LAUNCH();
  absmax_final<<<1, kThreads, 0, stream>>>(partial, blocks, d_absmax);
  SQ_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

extern "C" cudaError_t squall__cuda_pow2_scale(const float *d_absmax, float limit, float *d_scale,
                                               cudaStream_t stream) {
  SQ_CUDA_REQUIRE(d_absmax && d_scale);
  pow2_scale_kernel<<<1, 1, 0, stream>>>(d_absmax, limit, d_scale);
  SQ_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

extern "C" cudaError_t squall__cuda_half_encode(sq_half_kind kind, const float *g, float *res,
                                                uint16_t *out, size_t n, const float *d_scale,
                                                cudaStream_t stream) {
  SQ_CUDA_REQUIRE(valid_kind(kind));
  if (n == 0) return cudaSuccess;
  SQ_CUDA_REQUIRE(g && out && d_scale);
  half_encode_kernel<<<sq_cuda_grid(n, kThreads, kElementwiseBlocks), kThreads, 0, stream>>>(
      kind, g, res, out, n, d_scale);
  SQ_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

extern "C" cudaError_t squall__cuda_half_decode(sq_half_kind kind, const uint16_t *in, float *out,
                                                size_t n, const float *d_scale, int accumulate,
                                                cudaStream_t stream) {
  SQ_CUDA_REQUIRE(valid_kind(kind));
  if (n == 0) return cudaSuccess;
  SQ_CUDA_REQUIRE(in && out && d_scale);
  half_decode_kernel<<<sq_cuda_grid(n, kThreads, kElementwiseBlocks), kThreads, 0, stream>>>(
      kind, in, out, n, d_scale, accumulate);
  SQ_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * quant.cu - device twins of the quantised codecs (lib/codecs/codec_quant.c):
 * per-bucket encode with error feedback, decode, and the rank-ordered fp32
 * reductions of the two-phase all-reduce (quantised and 16-bit). Per
 * element the kernels call lib/codecs/codec_math.h, as the host does, so
 * the bits agree. Every product in that arithmetic is exact (powers of two
 * times short integers), so nvcc's FMA contraction cannot change a result.
 */
#include "codecs/cuda/codec_cuda.h"
#include "codecs/cuda/cuda_check.h"

namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kBucketBlocks = 65535u * 4;
constexpr unsigned kElementwiseBlocks = 8192;

/* One block per bucket (grid-stride over buckets): the block's max |a| over
 * the finite a and the OR of the non-finite flags, then the codes. */
__global__ void __launch_bounds__(kThreads)
quant_encode_kernel(sq_quant_kind k, size_t bucket, const float *g, float *res, uint8_t *out,
                    size_t n, size_t nb) {
  __shared__ uint32_t warp_max[kThreads / 32], warp_flags[kThreads / 32];
  __shared__ float s_p, s_inv;
  const size_t stride = sq_quant_bucket_bytes(k, bucket);
  for (size_t j = blockIdx.x; j < nb; j += gridDim.x) {
    const size_t b0 = j * bucket, m = n - b0 < bucket ? n - b0 : bucket;
    uint32_t mx = 0, fl = 0;
    for (size_t i = threadIdx.x; i < m; i += kThreads) {
      float a = res ? g[b0 + i] + res[b0 + i] : g[b0 + i];
      uint32_t bits = sq_float_bits(a) & 0x7fffffffu;
      if (bits < 0x7f800000u) mx = bits > mx ? bits : mx;
      else fl |= sq_quant_nf_flag(a);
    }
    mx = __reduce_max_sync(0xffffffffu, mx);
    fl = __reduce_or_sync(0xffffffffu, fl);
    if ((threadIdx.x & 31) == 0) {
      warp_max[threadIdx.x / 32] = mx;
      warp_flags[threadIdx.x / 32] = fl;
    }
    __syncthreads();
    uint8_t *o = out + j * stride;
    if (threadIdx.x == 0) {
      for (unsigned w = 1; w < kThreads / 32; w++) {
        mx = mx > warp_max[w] ? mx : warp_max[w];
        fl |= warp_flags[w];
      }
      int s = sq_quant_exp(k, sq_bits_float(mx));
      s_p = sq_pow2(s);
      s_inv = sq_quant_inv_pow2(s);
      o[0] = (uint8_t)(int8_t)s;
      o[1] = (uint8_t)fl;
    }
    __syncthreads();
    const float p = s_p, inv = s_inv;
    uint8_t *c = o + SQ_QUANT_HEADER_BYTES;
    if (k == SQ_QUANT_INT4) {
      for (size_t q = threadIdx.x; q < (bucket + 1) / 2; q += kThreads) {
        uint32_t pair = 0;
        for (size_t i = 2 * q; i < 2 * q + 2 && i < m; i++) {
          float a = res ? g[b0 + i] + res[b0 + i] : g[b0 + i], d;
          pair |= sq_quant_encode_elem(k, a, p, inv, &d) << (4 * (i - 2 * q));
          if (res) res[b0 + i] = sq_quant_residual(a, d);
        }
        c[q] = (uint8_t)pair; /* zero past m: the host's padding */
      }
    } else {
      for (size_t i = threadIdx.x; i < bucket; i += kThreads) {
        if (i >= m) {
          c[i] = 0;
          continue;
        }
        float a = res ? g[b0 + i] + res[b0 + i] : g[b0 + i], d;
        c[i] = (uint8_t)sq_quant_encode_elem(k, a, p, inv, &d);
        if (res) res[b0 + i] = sq_quant_residual(a, d);
      }
    }
    __syncthreads(); /* the shared scale is rewritten by the next bucket */
  }
}

/* The decode of element i of an encoded tensor. */
__device__ __forceinline__ float decode_at(sq_quant_kind k, size_t bucket, size_t stride,
                                           const uint8_t *in, size_t i) {
  const uint8_t *h = in + (i / bucket) * stride;
  size_t e = i % bucket;
  uint32_t c = k == SQ_QUANT_INT4 ? (h[SQ_QUANT_HEADER_BYTES + e / 2] >> (4 * (e & 1))) & 0xfu
                                  : h[SQ_QUANT_HEADER_BYTES + e];
  return sq_quant_decode_elem(k, c, sq_quant_inv_pow2((int)(int8_t)h[0]), h[1]);
}

__global__ void __launch_bounds__(kThreads)
quant_decode_kernel(sq_quant_kind k, size_t bucket, const uint8_t *in, float *out, size_t n) {
  const size_t stride = sq_quant_bucket_bytes(k, bucket);
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += (size_t)gridDim.x * kThreads)
    out[i] = decode_at(k, bucket, stride, in, i);
}

__global__ void __launch_bounds__(kThreads)
quant_reduce_kernel(sq_quant_kind k, size_t bucket, const uint8_t *blocks, int nblocks,
                    size_t block_bytes, float *out, size_t n) {
  const size_t stride = sq_quant_bucket_bytes(k, bucket);
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += (size_t)gridDim.x * kThreads) {
    float acc = decode_at(k, bucket, stride, blocks, i);
    for (int r = 1; r < nblocks; r++) acc = acc + decode_at(k, bucket, stride, blocks + (size_t)r * block_bytes, i);
    out[i] = acc;
  }
}

__global__ void __launch_bounds__(kThreads)
half_reduce_kernel(sq_half_kind kind, const uint16_t *blocks, int nblocks, size_t block_elems,
                   float *out, size_t n, const float *d_scale) {
  const float scale = *d_scale;
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += (size_t)gridDim.x * kThreads) {
    float acc = sq_half_decode_elem(kind, blocks[i], scale);
    for (int r = 1; r < nblocks; r++) acc = acc + sq_half_decode_elem(kind, blocks[(size_t)r * block_elems + i], scale);
    out[i] = acc;
  }
}

bool valid(sq_quant_kind k, size_t bucket) {
  return (k == SQ_QUANT_INT8 || k == SQ_QUANT_INT4 || k == SQ_QUANT_FP8) && bucket > 0;
}

} /* namespace */

extern "C" cudaError_t squall__cuda_quant_encode(sq_quant_kind k, size_t bucket, const float *g,
                                                 float *res, uint8_t *out, size_t n,
                                                 cudaStream_t stream) {
  SQ_CUDA_REQUIRE(valid(k, bucket));
  if (n == 0) return cudaSuccess;
  SQ_CUDA_REQUIRE(g && out);
  size_t nb = (n + bucket - 1) / bucket;
  unsigned blocks = nb < kBucketBlocks ? (unsigned)nb : kBucketBlocks;
  quant_encode_kernel<<<blocks, kThreads, 0, stream>>>(k, bucket, g, res, out, n, nb);
  SQ_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

extern "C" cudaError_t squall__cuda_quant_decode(sq_quant_kind k, size_t bucket, const uint8_t *in,
                                                 float *out, size_t n, cudaStream_t stream) {
  SQ_CUDA_REQUIRE(valid(k, bucket));
  if (n == 0) return cudaSuccess;
  SQ_CUDA_REQUIRE(in && out);
  quant_decode_kernel<<<sq_cuda_grid(n, kThreads, kElementwiseBlocks), kThreads, 0, stream>>>(
      k, bucket, in, out, n);
  SQ_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

extern "C" cudaError_t squall__cuda_quant_reduce(sq_quant_kind k, size_t bucket, const uint8_t *blocks,
                                                 int nblocks, size_t block_bytes, float *out, size_t n,
                                                 cudaStream_t stream) {
  SQ_CUDA_REQUIRE(valid(k, bucket) && nblocks >= 1);
  if (n == 0) return cudaSuccess;
  SQ_CUDA_REQUIRE(blocks && out);
  quant_reduce_kernel<<<sq_cuda_grid(n, kThreads, kElementwiseBlocks), kThreads, 0, stream>>>(
      k, bucket, blocks, nblocks, block_bytes, out, n);
  SQ_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

extern "C" cudaError_t squall__cuda_half_reduce(sq_half_kind kind, const uint16_t *blocks, int nblocks,
                                                size_t block_elems, float *out, size_t n,
                                                const float *d_scale, cudaStream_t stream) {
  SQ_CUDA_REQUIRE((kind == SQ_HALF_FP16 || kind == SQ_HALF_BF16) && nblocks >= 1);
  if (n == 0) return cudaSuccess;
  SQ_CUDA_REQUIRE(blocks && out && d_scale);
  half_reduce_kernel<<<sq_cuda_grid(n, kThreads, kElementwiseBlocks), kThreads, 0, stream>>>(
      kind, blocks, nblocks, block_elems, out, n, d_scale);
  SQ_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

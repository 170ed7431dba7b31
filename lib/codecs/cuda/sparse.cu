/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sparse.cu - device twin of the sparse decoder (lib/codecs/codec_sparse.c): sums
 * the all-gathered top-k slots into a zeroed dense buffer, rank by rank.
 *
 * One kernel per rank, launched in rank order on one stream: inside a slot
 * the indices ascend strictly, so no two threads of a launch touch the same
 * element and a plain += is race-free; across ranks the stream orders the
 * additions. Every rank therefore adds the same numbers in the same order,
 * which is what makes the result bit-identical everywhere (and equal to the
 * host twin, which adds in the same order).
 */
#include "codecs/codec.h"
#include "codecs/cuda/codec_cuda.h"
#include "codecs/cuda/cuda_check.h"

namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kElementwiseBlocks = 8192;

/* Adds one slot into dense. An index >= n, or one not above its
 * predecessor, marks the payload corrupt: the entry is skipped and
 * *error = 1 (every writer stores the same 1). A corrupt slot may repeat an
 * index, so its additions may race; zero_if_error discards them. */
__global__ void __launch_bounds__(kThreads)
add_slot(const unsigned char *slot, uint32_t k, int fp16, size_t scale_offset, float *dense,
         size_t n, int *error) {
  const size_t j = (size_t)blockIdx.x * kThreads + threadIdx.x;
  if (j >= k) return;
  const uint32_t *idx = reinterpret_cast<const uint32_t *>(slot);
  const unsigned char *vals = slot + 4 * (size_t)k;
  const uint32_t i = idx[j];
  if ((size_t)i >= n || (j > 0 && idx[j - 1] >= i)) {
    *error = 1;
    return;
  }
  float v;
  if (fp16) {
    const float scale = *reinterpret_cast<const float *>(slot + scale_offset);
    v = sq_half_decode_elem(SQ_HALF_FP16, reinterpret_cast<const uint16_t *>(vals)[j], scale);
  } else {
    v = reinterpret_cast<const float *>(vals)[j];
  }
  dense[i] += v;
}

/* The index checks of add_slot alone. */
__global__ void __launch_bounds__(kThreads)
check_slot(const unsigned char *slot, uint32_t k, size_t n, int *error) {
  const size_t j = (size_t)blockIdx.x * kThreads + threadIdx.x;
  if (j >= k) return;
  const uint32_t *idx = reinterpret_cast<const uint32_t *>(slot);
  const uint32_t i = idx[j];
  if ((size_t)i >= n || (j > 0 && idx[j - 1] >= i)) *error = 1;
}

/* A corrupt payload leaves dense all zero, as on the host. */
__global__ void __launch_bounds__(kThreads)
zero_if_error(float *dense, size_t n, const int *error) {
  if (*error == 0) return;
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n;
       i += (size_t)gridDim.x * kThreads)
    dense[i] = 0.0f;
}

} /* namespace */

extern "C" cudaError_t squall__cuda_sparse_decode(const void *slots, int nranks, size_t k,
                                                  squallValueType_t values, float *dense,
                                                  size_t n, int *d_error, cudaStream_t stream) {
  SQ_CUDA_REQUIRE(values == squallValueFp32 || values == squallValueFp16);
  SQ_CUDA_REQUIRE(nranks >= 0 && k <= UINT32_MAX && d_error);
  SQ_CUDA_REQUIRE(n == 0 || dense);
  const bool adds = nranks > 0 && k > 0;
  SQ_CUDA_REQUIRE(!adds || (slots && (uintptr_t)slots % 4 == 0));
  const size_t slot_bytes = squall__topk_slot_bytes(k, values);
  const unsigned char *base = static_cast<const unsigned char *>(slots);

  SQ_CUDA_CHECK(cudaMemsetAsync(d_error, 0, sizeof *d_error, stream));
  if (n > 0) SQ_CUDA_CHECK(cudaMemsetAsync(dense, 0, n * sizeof *dense, stream)); /* +0.0f */
  if (!adds) return cudaSuccess;
  const unsigned grid = (unsigned)((k + kThreads - 1) / kThreads);
  for (int r = 0; r < nranks; r++) {
    add_slot<<<grid, kThreads, 0, stream>>>(base + (size_t)r * slot_bytes, (uint32_t)k,
                                            values == squallValueFp16,
                                            squall__slot_scale_offset(k), dense, n, d_error);
    SQ_CUDA_CHECK_LAUNCH();
  }
  if (n > 0) {
    zero_if_error<<<sq_cuda_grid(n, kThreads, kElementwiseBlocks), kThreads, 0, stream>>>(
        dense, n, d_error);
    SQ_CUDA_CHECK_LAUNCH();
  }
  return cudaSuccess;
}

extern "C" cudaError_t squall__cuda_sparse_validate(const void *slots, int nranks, size_t k,
                                                    squallValueType_t values, size_t n, int *d_error,
                                                    cudaStream_t stream) {
  SQ_CUDA_REQUIRE(values == squallValueFp32 || values == squallValueFp16);
  SQ_CUDA_REQUIRE(nranks >= 0 && k <= UINT32_MAX && d_error);
  const bool checks = nranks > 0 && k > 0;
  SQ_CUDA_REQUIRE(!checks || (slots && (uintptr_t)slots % 4 == 0));
  SQ_CUDA_CHECK(cudaMemsetAsync(d_error, 0, sizeof *d_error, stream));
  if (!checks) return cudaSuccess;
  const size_t slot_bytes = squall__topk_slot_bytes(k, values);
  const unsigned char *base = static_cast<const unsigned char *>(slots);
  const unsigned grid = (unsigned)((k + kThreads - 1) / kThreads);
  for (int r = 0; r < nranks; r++) {
    check_slot<<<grid, kThreads, 0, stream>>>(base + (size_t)r * slot_bytes, (uint32_t)k, n, d_error);
    SQ_CUDA_CHECK_LAUNCH();
  }
  return cudaSuccess;
}

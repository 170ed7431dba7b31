/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * cuda_check.h - propagate CUDA runtime errors, NCCLCHECK style: a failing
 * call returns its cudaError_t from the enclosing function. Launches are
 * checked with cudaGetLastError(), which also clears a non-sticky launch
 * error so that the caller's next call does not see it again.
 */
#ifndef SQUALL_CODECS_CUDA_CUDA_CHECK_H
#define SQUALL_CODECS_CUDA_CUDA_CHECK_H

#include <stddef.h>
#include <cuda_runtime_api.h>

#define SQ_CUDA_CHECK(call)                           \
  do {                                                \
    cudaError_t sq_cuda_e_ = (call);                  \
    if (sq_cuda_e_ != cudaSuccess) return sq_cuda_e_; \
  } while (0)

/* After a <<<...>>> launch: bad configuration, missing image for this GPU. */
#define SQ_CUDA_CHECK_LAUNCH() SQ_CUDA_CHECK(cudaGetLastError())

/* Argument checks of the device codecs: invalid arguments are reported as
 * cudaErrorInvalidValue, before anything is enqueued. */
#define SQ_CUDA_REQUIRE(cond)                  \
  do {                                         \
    if (!(cond)) return cudaErrorInvalidValue; \
  } while (0)

/* Blocks for a grid-stride loop over n items: enough to fill any current
 * GPU, at most max_blocks, at least 1 (so that n == 0 still launches and
 * the kernel writes its fixed outputs). */
static inline unsigned sq_cuda_grid(size_t n, unsigned threads, unsigned max_blocks) {
  size_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return b > max_blocks ? max_blocks : (unsigned)b;
}

#endif /* SQUALL_CODECS_CUDA_CUDA_CHECK_H */

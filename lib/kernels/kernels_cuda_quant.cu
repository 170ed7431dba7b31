/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kernels_cuda_quant.cu - the device kernel set's entries for the
 * quantised codecs and the two-phase reductions (kernels_cuda.cu points at
 * them): enqueue the lib/codecs/cuda/quant.cu twins on the call's stream.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <cuda_runtime_api.h>

#include "codecs/cuda/codec_cuda.h"
#include "common/internal.h"
#include "kernels/kernels.h"

static cudaStream_t quant_stream(void *stream) { return (cudaStream_t)stream; }

static squallResult_t quant_result(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return squallSuccess;
  return squall__fail(squallUnhandledCudaError, "%s: %s", what, cudaGetErrorString(e));
}

extern "C" {

squallResult_t squall__dev_quant_encode(void *stream, sq_quant_kind k, size_t bucket, const float *g,
                                        float *res, uint8_t *out, size_t n) {
  return quant_result(squall__cuda_quant_encode(k, bucket, g, res, out, n, quant_stream(stream)),
                      "quantised encode");
}

squallResult_t squall__dev_quant_decode(void *stream, sq_quant_kind k, size_t bucket, const uint8_t *in,
                                        float *out, size_t n, int cold) {
  (void)cold; /* a host hint */
  return quant_result(squall__cuda_quant_decode(k, bucket, in, out, n, quant_stream(stream)),
                      "quantised decode");
}

squallResult_t squall__dev_quant_reduce(void *stream, sq_quant_kind k, size_t bucket, const uint8_t *blocks,
                                        int nblocks, size_t block_bytes, float *out, size_t n) {
  return quant_result(squall__cuda_quant_reduce(k, bucket, blocks, nblocks, block_bytes, out, n,
                                                quant_stream(stream)),
                      "quantised reduce");
}

squallResult_t squall__dev_half_reduce(void *stream, sq_half_kind kind, const uint16_t *blocks, int nblocks,
                                       size_t block_elems, float *out, size_t n, const float *scale) {
  return quant_result(squall__cuda_half_reduce(kind, blocks, nblocks, block_elems, out, n, scale,
                                               quant_stream(stream)),
                      "16-bit reduce");
}

} /* extern "C" */

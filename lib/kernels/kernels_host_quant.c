/* SPDX-License-Identifier: BSD-3-Clause */
/* kernels_host_quant.c - the host kernel set's entries for the
 * quantised codecs and the two-phase reductions: thin wrappers over
 * codecs/codec_quant.c (kept apart from kernels_host.c, which only points
 * at them). */
#include "common/internal.h"

#include "codecs/codec.h"
#include "kernels/kernels.h"

squallResult_t squall__host_quant_encode(void *stream, sq_quant_kind k, size_t bucket, const float *g,
                                         float *res, uint8_t *out, size_t n) {
  squall__quant_encode(k, bucket, g, res, out, n);
  return squallSuccess;
}

squallResult_t squall__host_quant_encode_backup(void *stream, sq_quant_kind k, size_t bucket, const float *g,
                                                float *res, uint8_t *out, size_t n, float *backup) {
  squall__quant_encode_backup(k, bucket, g, res, out, n, backup);
  return squallSuccess;
}

squallResult_t squall__host_quant_decode(void *stream, sq_quant_kind k, size_t bucket,
                                         const uint8_t *in, float *out, size_t n, int cold) {
  if (cold)
    squall__quant_decode_cold(k, bucket, in, out, n);
  else
    squall__quant_decode(k, bucket, in, out, n, 0);
  return squallSuccess;
}

squallResult_t squall__host_quant_reduce(void *stream, sq_quant_kind k, size_t bucket,
                                         const uint8_t *blocks, int nblocks, size_t block_bytes,
                                         float *out, size_t n) {
  squall__quant_reduce(k, bucket, blocks, nblocks, block_bytes, out, n);
  return squallSuccess;
}

squallResult_t squall__host_half_reduce(void *stream, sq_half_kind kind, const uint16_t *blocks,
                                        int nblocks, size_t block_elems, float *out, size_t n,
                                        const float *scale) {
  squall__half_reduce(kind, blocks, nblocks, block_elems, out, n, *scale);
  return squallSuccess;
}

squallResult_t squall__host_half_reduce_encode(void *stream, sq_half_kind kind, const uint16_t *blocks,
                                               int nblocks, size_t block_elems, float *out, float *res,
                                               uint16_t *codes, size_t n, const float *scale) {
  (void)out; /* the sums stay in the codec's tile */
  squall__half_reduce_encode(kind, blocks, nblocks, block_elems, res, codes, n, *scale);
  return squallSuccess;
}

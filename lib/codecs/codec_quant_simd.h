/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * codec_quant_simd.h - the AVX2 inner loops of the quantised codecs
 * (codec_quant_avx2.c), private to codec_quant.c. Each function does the
 * leading part of one bucket that whole vectors cover and returns how many
 * elements it did; codec_quant.c finishes the rest with its scalar code,
 * which defines the bits (the vector code computes the same IEEE operations
 * in the same order, lane by lane, or in a bucket of tiny values the same
 * products of powers of two formed on the bits). Encoding comes here for buckets whose
 * scale exponent is above -100 (no decode can overflow there); decoding and
 * reducing for every bucket. Callers check squall__cpu_x86(SQ_CPU_AVX2)
 * first.
 */
#ifndef SQUALL_CODEC_QUANT_SIMD_H
#define SQUALL_CODEC_QUANT_SIMD_H

#include "codecs/codec.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define SQ_QUANT_HAVE_AVX2 1

/* Largest |a| over the finite a = g + res (res may be NULL) of m elements,
 * in *amax; returns the bucket's non-finite flags. Covers all m elements:
 * scan_bucket's result. */
uint32_t squall__qx_absmax(const float *g, const float *res, size_t m, float *amax);

/* The codes (and residuals when res != NULL) of the leading elements of a
 * bucket at scale p = 2^s, inv = 2^-s, s > -100; flagged: the bucket has
 * non-finite values. Returns how many: a multiple of 32 (int4: the codes of
 * an even count fill whole bytes). */
size_t squall__qx_encode(sq_quant_kind k, const float *g, float *res, uint8_t *c, size_t m, float p,
                         float inv, int flagged);

/* dst[0..i) = src[0..i) with non-temporal stores, dst 32-byte aligned;
 * returns i, a multiple of 8 (the caller copies the rest). */
size_t squall__qx_copy_stream(float *dst, const float *src, size_t m);

/* out[0..i) = (accumulate: +=) the decode of the leading codes of a bucket,
 * inv = 2^-s, marker = sq_quant_marker_value(flags); returns i, a multiple
 * of 16. stream != 0 (with accumulate == 0): out is 32-byte aligned, written
 * with non-temporal stores. */
size_t squall__qx_decode(sq_quant_kind k, const uint8_t *c, float inv, float marker, float *out, size_t m,
                         int accumulate, int stream);

/* out[0..i) = sum over r in order of the decodes of codes[r] under inv[r]
 * and marker[r] (accumulate: out[j] + that sum, added in the same order),
 * 1 <= nblocks <= SQ_QX_REDUCE_MAX_BLOCKS; returns i, a multiple of 16. */
#define SQ_QX_REDUCE_MAX_BLOCKS 32
size_t squall__qx_reduce(sq_quant_kind k, const uint8_t *const *codes, const float *inv, const float *marker,
                         int nblocks, float *out, size_t m, int accumulate);

/* The leading part of squall__half_reduce (nblocks >= 1) with inv = 1 /
 * scale exact; returns how many elements, a multiple of 16. fp16 needs
 * F16C as well as AVX2. */
size_t squall__qx_half_reduce(sq_half_kind kind, const uint16_t *blocks, int nblocks, size_t block_elems,
                              float *out, size_t n, float inv);
#endif

#endif /* SQUALL_CODEC_QUANT_SIMD_H */

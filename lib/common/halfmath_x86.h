/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * halfmath_x86.h - halfmath.h's bf16 conversions 8 lanes at a time (AVX2),
 * for the host's SIMD loops: the codecs' (codec_half.c) and the 16-bit sum
 * (halfmath.c). Each lane gives the bits of the scalar function it names.
 * fp16 needs no helper: F16C converts with the same rounding. Callers check
 * squall__cpu_x86 (cpu.h) before they call these.
 */
#ifndef SQUALL_COMMON_HALFMATH_X86_H
#define SQUALL_COMMON_HALFMATH_X86_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#include <stdint.h>
#include <immintrin.h>

/* bfloat16 rounding of 8 floats that are not NaN, as sq_f32_to_bf16:
 * round to nearest even by integer add. Returns the codes in the low 16
 * bits. */
__attribute__((target("avx2"))) static inline __m256i sq_bf16_round8_finite(__m256 x) {
  __m256i xi = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(xi, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(xi, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
}

/* sq_bf16_round8_finite for any floats: NaN lanes quieted, as
 * sq_f32_to_bf16 does. */
__attribute__((target("avx2"))) static inline __m256i sq_bf16_round8(__m256 x) {
  __m256i xi = _mm256_castps_si256(x);
  __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(xi, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
  __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(xi, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(sq_bf16_round8_finite(x), quiet, isnan);
}

/* The low 16 bits of 8 lanes, packed into 8 codes. */
__attribute__((target("avx2"))) static inline __m128i sq_pack8(__m256i v) {
  return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

/* 8 bf16 codes as floats, as sq_bf16_to_f32. */
__attribute__((target("avx2"))) static inline __m256 sq_bf16_load8(const uint16_t *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
#endif

#endif /* SQUALL_COMMON_HALFMATH_X86_H */

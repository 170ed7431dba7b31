/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * halfmath.c - the sum of two 16-bit vectors in their own format
 * (halfmath.h, squall__half_sum), which the MPI transport's reduction op
 * runs: F16C for fp16, AVX2 for bf16 where the CPU has them (cpu.h), the
 * scalar conversions otherwise and for the tail. Both give the same bits.
 *
 * libc and compiler intrinsics only, like the codecs that test it.
 */
#include <string.h>

#include "common/cpu.h"
#include "common/fpenv.h"
#include "common/halfmath.h"
#include "common/halfmath_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define SQ_HAVE_F16C_PATH 1

__attribute__((target("avx2"))) static size_t sum_bf16_avx2(const uint16_t *a, uint16_t *b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(b + i),
                     sq_pack8(sq_bf16_round8(_mm256_add_ps(sq_bf16_load8(a + i), sq_bf16_load8(b + i)))));
  return i;
}

/* Sum of two fp16 vectors, rounded back to fp16. */
__attribute__((target("f16c,avx"))) static size_t sum_f16c(const uint16_t *a, uint16_t *b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
    _mm_storeu_si128((__m128i *)(b + i),
                     _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return i;
}
#endif

/* Unaligned-safe element access (a uint16_t* need not be 2-aligned). */
static inline uint16_t ld16(const uint16_t *p, size_t i) {
  uint16_t x;
  memcpy(&x, (const char *)p + 2 * i, sizeof x);
  return x;
}
static inline void st16(uint16_t *p, size_t i, uint16_t x) { memcpy((char *)p + 2 * i, &x, sizeof x); }

void squall__half_sum(sq_half_kind kind, const uint16_t *a, uint16_t *b, size_t n) {
  size_t i = 0;
  const unsigned fp = squall__fp_default_begin();
#ifdef SQ_HAVE_F16C_PATH
  if (kind == SQ_HALF_FP16 && squall__cpu_x86(SQ_CPU_F16C)) i = sum_f16c(a, b, n);
  if (kind == SQ_HALF_BF16 && squall__cpu_x86(SQ_CPU_AVX2)) i = sum_bf16_avx2(a, b, n);
#endif
  for (; i < n; i++) st16(b, i, sq_half_from_f32(kind, sq_half_to_f32(kind, ld16(a, i)) + sq_half_to_f32(kind, ld16(b, i))));
  squall__fp_default_end(fp);
}

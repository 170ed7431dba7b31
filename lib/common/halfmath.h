/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * halfmath.h - the 16-bit number formats, element by element: fp16 (IEEE
 * binary16) and bf16 to and from float, rounded to nearest even, and the
 * float bit views they are made of. Both the codecs (codec_math.h builds
 * on these) and the transports (the MPI transport sums fp16 and bf16 with
 * an op of its own) need them, so they live here, below both. cc and nvcc
 * both compile this file (SQ_HD: __host__ __device__ under nvcc), so host
 * and device convert alike. Only integer bit manipulation and IEEE-exact
 * float operations appear here: never build with -ffast-math or
 * --use_fast_math.
 */
#ifndef SQUALL_COMMON_HALFMATH_H
#define SQUALL_COMMON_HALFMATH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define SQ_HD __host__ __device__ __forceinline__
#else
#define SQ_HD static inline
#endif

#define SQ_F16_MAX 65504.0f
#define SQ_BF16_MAX 3.3895313892515355e38f

typedef enum { SQ_HALF_FP16 = 0,
               SQ_HALF_BF16 = 1 } sq_half_kind;

SQ_HD uint32_t sq_float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SQ_HD float sq_bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/* Finite: neither Inf nor NaN. */
SQ_HD int sq_isfinite(float f) { return (sq_float_bits(f) & 0x7f800000u) != 0x7f800000u; }

/* float -> IEEE binary16, round to nearest even. Overflow gives +-Inf,
 * NaN stays NaN (quieted, sign and top payload bits kept). */
SQ_HD uint16_t sq_f32_to_f16(float f) {
  uint32_t x = sq_float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to Inf */
  uint32_t e = ax >> 23;
  if (e < 113) {                        /* below 2^-14: a half subnormal, or zero */
    if (e < 102) return (uint16_t)sign; /* below 2^-25: rounds to zero */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t h = ((e - 112) << 10) | ((ax & 0x7fffffu) >> 13);
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry moves into the exponent, as it should */
  return (uint16_t)(sign | h);
}

SQ_HD float sq_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
  if (e == 0x1f) return sq_bits_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    return sign ? -v : v;
  }
  return sq_bits_float(sign | ((e + 112) << 23) | (m << 13));
}

/* float -> bfloat16, round to nearest even; NaN stays NaN (quieted). */
SQ_HD uint16_t sq_f32_to_bf16(float f) {
  uint32_t x = sq_float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

SQ_HD float sq_bf16_to_f32(uint16_t h) { return sq_bits_float((uint32_t)h << 16); }

SQ_HD uint16_t sq_half_from_f32(sq_half_kind kind, float f) {
  return kind == SQ_HALF_BF16 ? sq_f32_to_bf16(f) : sq_f32_to_f16(f);
}

SQ_HD float sq_half_to_f32(sq_half_kind kind, uint16_t h) {
  return kind == SQ_HALF_BF16 ? sq_bf16_to_f32(h) : sq_f16_to_f32(h);
}

#if !defined(__CUDACC__)
/* b[i] = a[i] + b[i] in kind's format, rounded to nearest even (what a
 * 16-bit accumulator computes; the MPI transport's reduction op). Host
 * only (halfmath.c): F16C or AVX2 where the CPU has them, the same bits as
 * the scalar loop. */
void squall__half_sum(sq_half_kind kind, const uint16_t *a, uint16_t *b, size_t n);
#endif

#endif /* SQUALL_COMMON_HALFMATH_H */

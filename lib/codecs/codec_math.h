/*
 * codec_math.h - per-element arithmetic shared by the host codecs (cc) and
 * the CUDA kernels (nvcc). Both compilers include this one file, so a kernel
 * and its host twin compute the same bits. Only integer bit manipulation and
 * IEEE-exact float operations (+, -, *, / correctly rounded) appear here:
 * never build with -ffast-math or --use_fast_math.
 */
#ifndef SQUALL_CODEC_MATH_H
#define SQUALL_CODEC_MATH_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define SQ_HD __host__ __device__ __forceinline__
#else
#define SQ_HD static inline
#endif

#define SQ_F16_MAX 65504.0f
#define SQ_BF16_MAX 3.3895313892515355e38f

typedef enum { SQ_HALF_FP16 = 0, SQ_HALF_BF16 = 1 } sq_half_kind;

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
  if (e < 113) { /* below 2^-14: a half subnormal, or zero */
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

/* What the receiver reconstructs from a code: h / scale. */
SQ_HD float sq_half_decode_elem(sq_half_kind kind, uint16_t h, float scale) {
  return sq_half_to_f32(kind, h) / scale;
}

/* Residual after sending d for a: a - d. With scale a power of two this is
 * exact (Sterbenz), so d + residual == a bit for bit. Non-finite values are
 * delivered, never kept: a residual is always finite. */
SQ_HD float sq_residual_after(float a, float d) {
  return (sq_isfinite(a) && sq_isfinite(d)) ? a - d : 0.0f;
}

/* A residual that is not sent at all keeps a, if finite. */
SQ_HD float sq_residual_keep(float a) { return sq_isfinite(a) ? a : 0.0f; }

/* Flush to zero: a subnormal becomes a zero of the same sign; everything
 * else is returned unchanged. Integer work only. */
SQ_HD float sq_ftz(float x) {
  uint32_t b = sq_float_bits(x);
  return (b & 0x7f800000u) ? x : sq_bits_float(b & 0x80000000u);
}

/* The 16-bit encoder for an already formed a: code = round(a * scale) and,
 * when res is non-NULL, *res = a - decode(code).
 *
 * No subnormal leaves this function: the scaled value and the residual are
 * flushed to zero (sq_ftz). Subnormal arithmetic runs 100x slower on many
 * x86 cores (microcode assists), and a residual that reaches the subnormal
 * range would otherwise stay there call after call; the host SIMD loops get
 * the same bits from the MXCSR flush-to-zero bit. What this costs: a
 * residual below 2^-126 in magnitude is dropped, so per element and call
 * |decode(code) + res' - a| < 2^-126, and exactly 0 whenever a - decode(code)
 * is zero or normal. The code itself never changes for fp16 (anything below
 * 2^-126 rounds to a zero code anyway). */
SQ_HD uint16_t sq_half_encode_a(sq_half_kind kind, float a, float *res, float scale) {
  uint16_t h = sq_half_from_f32(kind, sq_ftz(a * scale));
  if (res) *res = sq_ftz(sq_residual_after(a, sq_half_decode_elem(kind, h, scale)));
  return h;
}

/* One element of the 16-bit encoder with optional error feedback:
 * a = g + *res (flushed to zero when subnormal), code = round(a * scale),
 * *res = a - decode(code) (flushed likewise): see sq_half_encode_a. g
 * itself is used as it is when there is no residual. */
SQ_HD uint16_t sq_half_encode_elem(sq_half_kind kind, float g, float *res, float scale) {
  float a = res ? sq_ftz(g + *res) : g;
  return sq_half_encode_a(kind, a, res, scale);
}

/* Ordering key for top-k: |a| as unsigned bits. Monotonic in |a| for
 * numbers, -0 == +0, and every NaN ranks above +Inf (so NaN is always sent
 * and propagates). */
SQ_HD uint32_t sq_topk_key(float a) { return sq_float_bits(a) & 0x7fffffffu; }

/* 2^e for -126 <= e <= 127, built from its bits (exact, no libm). */
SQ_HD float sq_pow2(int e) { return sq_bits_float((uint32_t)(e + 127) << 23); }

/* Largest power of two s with absmax * s <= limit, clamped to
 * [2^-100, 2^100]; 1 when absmax is zero, subnormal or not finite. Powers
 * of two keep scaling exact, which the residual invariant relies on. A
 * subnormal absmax counts as zero: the host absmax flushes subnormal a to
 * zero (as the encoder does) and the device one does not, and both must
 * pick the same scale; every code of such a buffer is zero either way. */
SQ_HD float sq_pow2_scale(float absmax, float limit) {
  if (!(absmax > 0.0f) || !sq_isfinite(absmax) || (sq_float_bits(absmax) & 0x7f800000u) == 0) return 1.0f;
  int el = (int)((sq_float_bits(limit) >> 23) & 0xffu) - 127;
  int ea = (int)((sq_float_bits(absmax) >> 23) & 0xffu) - 127;
  int s = el - ea; /* log2(limit/absmax) lies in (s-1, s+1) */
  if (s > 100) return sq_pow2(100);
  if (s < -99) return sq_pow2(-100);
  return absmax * sq_pow2(s) <= limit ? sq_pow2(s) : sq_pow2(s - 1);
}

#endif /* SQUALL_CODEC_MATH_H */

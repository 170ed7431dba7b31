/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_types.c - the element types squall-bench runs (-d): the generated
 * float gradients converted into half, bfloat16 or double as a rank of
 * that type would hold them, and results converted back to float for the
 * check. Plain integer bit work, so every rank rounds alike.
 */
#include <math.h>
#include <string.h>

#include "bench.h"

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* IEEE binary16, round to nearest even; overflow gives +-Inf, NaN stays
 * NaN (quiet), tiny values become subnormal or zero. */
static uint16_t to_half(float x) {
  uint32_t u = bits_of(x), sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0));
  int e = (int)(mag >> 23) - 127 + 15;
  uint32_t m = (mag & 0x7fffffu) | 0x800000u; /* 24 significant bits */
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  int shift = e > 0 ? 13 : 14 - e; /* subnormal: drop more bits */
  if (shift > 24) return (uint16_t)sign;
  uint32_t keep = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (keep & 1))) keep++;
  /* keep holds the implicit bit for normals: adding the exponent above it
   * carries a rounded-up significand into the next binade by itself */
  uint32_t h = e > 0 ? ((uint32_t)(e - 1) << 10) + keep : keep;
  if (h >= 0x7c00u) h = 0x7c00u;
  return (uint16_t)(sign | h);
}

static float from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
    float v = ldexpf((float)m, -24);
    return sign ? -v : v;
  }
  return float_of(sign | ((e - 15 + 127) << 23) | (m << 13));
}

/* bfloat16: float's top 16 bits, rounded to nearest even. */
static uint16_t to_bf16(float x) {
  uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) { return float_of((uint32_t)h << 16); }

void bench_to_type(bench_dtype t, const float *src, void *dst, size_t n) {
  if (t == BENCH_F32) {
    if (dst != src) memcpy(dst, src, n * sizeof *src);
    return;
  }
  if (t == BENCH_F64) { /* wider: from the last element down, so that dst may be src */
    double *d = dst;
    for (size_t i = n; i-- > 0;) d[i] = (double)src[i];
    return;
  }
  uint16_t *d = dst;
  for (size_t i = 0; i < n; i++) {
    float x = src[i];
    d[i] = t == BENCH_F16 ? to_half(x) : to_bf16(x);
  }
}

void bench_from_type(bench_dtype t, const void *src, float *dst, size_t n) {
  if (t == BENCH_F32) {
    if (dst != src) memcpy(dst, src, n * sizeof *dst);
    return;
  }
  if (t == BENCH_F64) { /* narrower: from the first element up */
    const double *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
    return;
  }
  const uint16_t *s = src;
  for (size_t i = n; i-- > 0;) {
    uint16_t h = s[i];
    dst[i] = t == BENCH_F16 ? from_half(h) : from_bf16(h);
  }
}

float bench_round_to(bench_dtype t, float x) {
  if (t == BENCH_F16) return from_half(to_half(x));
  if (t == BENCH_BF16) return from_bf16(to_bf16(x));
  return x;
}

double bench_dtype_unit(bench_dtype t) {
  return t == BENCH_F16 ? ldexp(1.0, -11) : t == BENCH_BF16 ? ldexp(1.0, -8)
                                                            : ldexp(1.0, -24);
}

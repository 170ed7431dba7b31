/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * xchg_reduce.c - element types and reductions of the device-memory test
 * NCCL, on host memory. Contributions are combined in rank order, so every
 * rank gets the same bits. Integers wrap (through uint64_t, no undefined
 * behaviour). binary16 and bfloat16 are widened to float, combined, and
 * rounded back to nearest even after every step: float has at least
 * 2p + 2 bits for both, so each step is the correctly rounded 16-bit
 * operation. Written apart from squall's own conversions, so that a bug
 * there does not hide by being repeated here.
 */
#include "xchg.h"

#include <math.h>
#include <string.h>

static const unsigned char sizes[DNX_NUM_TYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static const char *const names[DNX_NUM_TYPES] = {"int8", "uint8", "int32", "uint32", "int64",
                                                 "uint64", "float16", "float32", "float64", "bfloat16"};

size_t dnx_type_size(int type) { return type >= 0 && type < DNX_NUM_TYPES ? sizes[type] : 0; }
const char *dnx_type_name(int type) { return type >= 0 && type < DNX_NUM_TYPES ? names[type] : "(no type)"; }

/* ------------------------------------------------------------ 16-bit floats */
static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float dnx_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 0x3ffu;
  if (e == 31) return float_of(sign | 0x7f800000u | m << 13);
  if (e == 0) { /* subnormal or zero: m units of 2^-24, exact */
    float v = ldexpf((float)m, -24);
    return sign ? -v : v;
  }
  return float_of(sign | (e + 112) << 23 | m << 13);
}

uint16_t dnx_float_to_half(float f) {
  uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up round to infinity */
  if (a < 0x38800000u)                                     /* under 2^-14: a multiple of 2^-24, rounded to nearest even (1024 is the smallest normal) */
    return (uint16_t)(sign | (uint32_t)nearbyintf(ldexpf(float_of(a), 24)));
  uint32_t m = a - (112u << 23), q = m >> 13, rem = m & 0x1fffu;
  q += rem > 0x1000u || (rem == 0x1000u && (q & 1)); /* a carry moves into the exponent */
  return (uint16_t)(sign | q);
}

float dnx_bf16_to_float(uint16_t b) { return float_of((uint32_t)b << 16); }

uint16_t dnx_float_to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* ------------------------------------------------------------ combining */
#define STEP(acc, x, op)                                \
  switch (op) {                                         \
  case DNX_PROD: acc = acc * (x); break;                \
  case DNX_MAX: acc = (x) > (acc) ? (x) : (acc); break; \
  case DNX_MIN: acc = (x) < (acc) ? (x) : (acc); break; \
  default: acc = acc + (x); break; /* sum, average */   \
  }
#define ISTEP(T, acc, x, op)                                        \
  switch (op) {                                                     \
  case DNX_PROD: acc = (T)((uint64_t)(acc) * (uint64_t)(x)); break; \
  case DNX_MAX: acc = (x) > (acc) ? (x) : (acc); break;             \
  case DNX_MIN: acc = (x) < (acc) ? (x) : (acc); break;             \
  default: acc = (T)((uint64_t)(acc) + (uint64_t)(x)); break;       \
  }
#define COMBINE_INT(T)                                                     \
  for (size_t i = 0; i < count; i++) {                                     \
    T acc = ((const T *)in[0])[i];                                         \
    for (int r = 1; r < nin; r++) ISTEP(T, acc, ((const T *)in[r])[i], op) \
    if (op == DNX_AVG) acc = (T)(acc / (T)nin);                            \
    ((T *)out)[i] = acc;                                                   \
  }
#define COMBINE_FLT(T)                                                 \
  for (size_t i = 0; i < count; i++) {                                 \
    T acc = ((const T *)in[0])[i];                                     \
    for (int r = 1; r < nin; r++) STEP(acc, ((const T *)in[r])[i], op) \
    ((T *)out)[i] = acc;                                               \
  }
#define COMBINE_16(to_f, from_f)                                   \
  for (size_t i = 0; i < count; i++) {                             \
    uint16_t acc = ((const uint16_t *)in[0])[i];                   \
    for (int r = 1; r < nin; r++) {                                \
      float a = to_f(acc), x = to_f(((const uint16_t *)in[r])[i]); \
      STEP(a, x, op)                                               \
      acc = from_f(a);                                             \
    }                                                              \
    ((uint16_t *)out)[i] = acc;                                    \
  }

void dnx_combine(void *out, const void *const *in, int nin, size_t count, int type, int op) {
  switch (type) {
  case DNX_INT8: COMBINE_INT(int8_t) break;
  case DNX_UINT8: COMBINE_INT(uint8_t) break;
  case DNX_INT32: COMBINE_INT(int32_t) break;
  case DNX_UINT32: COMBINE_INT(uint32_t) break;
  case DNX_INT64: COMBINE_INT(int64_t) break;
  case DNX_UINT64: COMBINE_INT(uint64_t) break;
  case DNX_FLOAT32: COMBINE_FLT(float) break;
  case DNX_FLOAT64: COMBINE_FLT(double) break;
  case DNX_FLOAT16: COMBINE_16(dnx_half_to_float, dnx_float_to_half) break;
  case DNX_BFLOAT16: COMBINE_16(dnx_bf16_to_float, dnx_float_to_bf16) break;
  default: break; /* refused by dnx_check_types */
  }
}

/* dst = src * (1/divisor) in the type (floats only): NCCL's average
 * multiplies each contribution by 1/nranks, rounded to the type, first. */
void dnx_scale_recip(void *dst, const void *src, size_t count, int type, int divisor) {
  switch (type) {
  case DNX_FLOAT32: {
    float s = 1.0f / (float)divisor;
    for (size_t i = 0; i < count; i++) ((float *)dst)[i] = ((const float *)src)[i] * s;
    break;
  }
  case DNX_FLOAT64: {
    double s = 1.0 / divisor;
    for (size_t i = 0; i < count; i++) ((double *)dst)[i] = ((const double *)src)[i] * s;
    break;
  }
  case DNX_FLOAT16: {
    float s = dnx_half_to_float(dnx_float_to_half(1.0f / (float)divisor));
    for (size_t i = 0; i < count; i++)
      ((uint16_t *)dst)[i] = dnx_float_to_half(dnx_half_to_float(((const uint16_t *)src)[i]) * s);
    break;
  }
  case DNX_BFLOAT16: {
    float s = dnx_bf16_to_float(dnx_float_to_bf16(1.0f / (float)divisor));
    for (size_t i = 0; i < count; i++)
      ((uint16_t *)dst)[i] = dnx_float_to_bf16(dnx_bf16_to_float(((const uint16_t *)src)[i]) * s);
    break;
  }
  default: memmove(dst, src, count * dnx_type_size(type)); break; /* integers divide after the sum */
  }
}

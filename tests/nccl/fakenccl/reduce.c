/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * reduce.c - datatypes and the arithmetic of reductions, on host memory.
 *
 * Inputs are combined in rank order (rank 0 first), so every rank computes
 * the same bits whatever MPI does. Integers wrap as on the GPU. binary16 and
 * bfloat16 go through float and are rounded back after every step: float
 * has more than 2p+2 bits for both, so each step is the correctly rounded
 * 16-bit operation, as a native 16-bit add or multiply would be.
 */
#include "fakenccl.h"

#include <string.h>

/* clang-format off */
static const char *const type_names[ncclNumTypes] = {
    "ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",     "ncclInt64",     "ncclUint64",
    "ncclFloat16", "ncclFloat32", "ncclFloat64",  "ncclBfloat16",   "ncclFloat8e4m3", "ncclFloat8e5m2"};
/* clang-format on */
static const unsigned char type_sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

size_t fake__type_size(ncclDataType_t t) {
  return (int)t >= 0 && (int)t < ncclNumTypes ? type_sizes[t] : 0;
}

const char *fake__type_name(ncclDataType_t t) {
  return (int)t >= 0 && (int)t < ncclNumTypes ? type_names[t] : "(not a ncclDataType_t)";
}

/* ---------------------------------------------------------------- 16-bit floats */
static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float fake__half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | mant << 13); /* inf, NaN */
  if (exp == 0) {                                                      /* zero, subnormal: mant units of 2^-24, exact in float */
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
  }
  return bits_float(sign | (exp + 112) << 23 | mant << 13); /* rebias 15 -> 127 */
}

/* Keeps the part of m above bit `shift`, rounding the rest to nearest even. */
static uint32_t shift_round_even(uint32_t m, int shift) {
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  return q + (rem > half || (rem == half && (q & 1)));
}

uint16_t fake__float_to_half(float f) {
  uint32_t x = float_bits(f), sign = (x >> 16) & 0x8000, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff)); /* NaN stays NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);                      /* >= 65520 rounds to infinity */
  if (a >= 0x38800000u)                                                        /* normal: rebias, round 13 bits away; a carry moves into the exponent */
    return (uint16_t)(sign | shift_round_even(a - (112u << 23), 13));
  if (a <= 0x33000000u) return (uint16_t)sign; /* at most 2^-25: rounds to zero */
  /* subnormal result: the value in units of 2^-24 is mant * 2^(e - 126) */
  int e = (int)(a >> 23);
  return (uint16_t)(sign | shift_round_even((a & 0x7fffffu) | 0x800000u, 126 - e));
}

float fake__bf16_to_float(uint16_t b) { return bits_float((uint32_t)b << 16); }

uint16_t fake__float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

/* ---------------------------------------------------------------- operators */
static void store_double(ncclDataType_t t, double v, void *dst) {
  switch (t) {
  case ncclFloat16: {
    uint16_t h = fake__float_to_half((float)v);
    memcpy(dst, &h, 2);
    break;
  }
  case ncclBfloat16: {
    uint16_t b = fake__float_to_bf16((float)v);
    memcpy(dst, &b, 2);
    break;
  }
  case ncclFloat32: {
    float x = (float)v;
    memcpy(dst, &x, 4);
    break;
  }
  default: memcpy(dst, &v, 8); break; /* ncclFloat64 */
  }
}

static int is_float_type(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16;
}

ncclResult_t fake__redop_resolve(const struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t t,
                                 const char *fn, fake_redop *out) {
  memset(out, 0, sizeof *out);
  if (!fake__type_size(t))
    return fake__error(ncclInvalidArgument, "%s: datatype %d is not a ncclDataType_t (accepted: 0..%d)", fn,
                       (int)t, ncclNumTypes - 1);
  if (t == ncclFloat8e4m3 || t == ncclFloat8e5m2)
    return fake__error(ncclInvalidArgument,
                       "%s: datatype %s: reductions of fp8 are not implemented by the test NCCL", fn,
                       fake__type_name(t));
  if ((int)op < 0 || op > ncclMaxRedOp)
    return fake__error(ncclInvalidArgument,
                       "%s: reduction operation %d is invalid (accepted: ncclSum..ncclAvg, or an operation made "
                       "by ncclRedOpCreatePreMulSum)",
                       fn, (int)op);
  switch (op) {
  case ncclSum: out->combine = FAKE_SUM; return ncclSuccess;
  case ncclProd: out->combine = FAKE_PROD; return ncclSuccess;
  case ncclMax: out->combine = FAKE_MAX; return ncclSuccess;
  case ncclMin: out->combine = FAKE_MIN; return ncclSuccess;
  case ncclAvg: /* as NCCL: floats are pre-multiplied by 1/nranks, integers divided after the sum */
    out->combine = FAKE_SUM;
    if (is_float_type(t)) {
      out->premul = 1;
      store_double(t, 1.0 / comm->nranks, out->scalar);
    } else {
      out->postdiv = comm->nranks;
    }
    return ncclSuccess;
  default: break;
  }
  int ix = (int)op - (int)ncclNumOps;
  if (ix >= comm->nops || !comm->ops[ix].in_use)
    return fake__error(ncclInvalidArgument,
                       "%s: reduction operation %d is unknown to communicator %p (not created by "
                       "ncclRedOpCreatePreMulSum on it, or destroyed)",
                       fn, (int)op, (const void *)comm);
  const fake_premul *p = &comm->ops[ix];
  if (p->datatype != t)
    return fake__error(ncclInvalidArgument,
                       "%s: datatype %s differs from %s, the datatype operation %d was created with", fn,
                       fake__type_name(t), fake__type_name(p->datatype), (int)op);
  out->combine = FAKE_SUM;
  out->premul = 1;
  /* ncclScalarDevice: the scalar is read now, at the call, as the GPU would. */
  memcpy(out->scalar, p->residence == ncclScalarHostImmediate ? (const void *)p->value : p->ptr,
         fake__type_size(t));
  return ncclSuccess;
}

/* Integer arithmetic goes through uint64_t: wraps modulo 2^bits, no UB. */
#define INT_STEP(T, acc, x, how)                                     \
  switch (how) {                                                     \
  case FAKE_SUM: acc = (T)((uint64_t)(acc) + (uint64_t)(x)); break;  \
  case FAKE_PROD: acc = (T)((uint64_t)(acc) * (uint64_t)(x)); break; \
  case FAKE_MAX: acc = (x) > (acc) ? (x) : (acc); break;             \
  case FAKE_MIN: acc = (x) < (acc) ? (x) : (acc); break;             \
  }
#define FLT_STEP(acc, x, how)                            \
  switch (how) {                                         \
  case FAKE_SUM: acc = acc + (x); break;                 \
  case FAKE_PROD: acc = acc * (x); break;                \
  case FAKE_MAX: acc = (x) > (acc) ? (x) : (acc); break; \
  case FAKE_MIN: acc = (x) < (acc) ? (x) : (acc); break; \
  }

#define COMBINE_INT(T)                                       \
  for (size_t i = 0; i < count; i++) {                       \
    T acc = ((const T *)in)[i];                              \
    for (int r = 1; r < nin; r++) {                          \
      T x = ((const T *)((const char *)in + r * stride))[i]; \
      INT_STEP(T, acc, x, op->combine)                       \
    }                                                        \
    if (op->postdiv) acc = (T)(acc / (T)op->postdiv);        \
    ((T *)out)[i] = acc;                                     \
  }
#define COMBINE_FLT(T)                                       \
  for (size_t i = 0; i < count; i++) {                       \
    T acc = ((const T *)in)[i];                              \
    for (int r = 1; r < nin; r++) {                          \
      T x = ((const T *)((const char *)in + r * stride))[i]; \
      FLT_STEP(acc, x, op->combine)                          \
    }                                                        \
    ((T *)out)[i] = acc;                                     \
  }
/* 16-bit floats: widen, one step in float, round back. */
#define COMBINE_16(to_f, from_f)                                                             \
  for (size_t i = 0; i < count; i++) {                                                       \
    uint16_t acc = ((const uint16_t *)in)[i];                                                \
    for (int r = 1; r < nin; r++) {                                                          \
      float a = to_f(acc), x = to_f(((const uint16_t *)((const char *)in + r * stride))[i]); \
      FLT_STEP(a, x, op->combine)                                                            \
      acc = from_f(a);                                                                       \
    }                                                                                        \
    ((uint16_t *)out)[i] = acc;                                                              \
  }

void fake__combine(void *out, const void *in, size_t stride, int nin, size_t count,
                   ncclDataType_t t, const fake_redop *op) {
  switch (t) {
  case ncclInt8: COMBINE_INT(int8_t) break;
  case ncclUint8: COMBINE_INT(uint8_t) break;
  case ncclInt32: COMBINE_INT(int32_t) break;
  case ncclUint32: COMBINE_INT(uint32_t) break;
  case ncclInt64: COMBINE_INT(int64_t) break;
  case ncclUint64: COMBINE_INT(uint64_t) break;
  case ncclFloat32: COMBINE_FLT(float) break;
  case ncclFloat64: COMBINE_FLT(double) break;
  case ncclFloat16: COMBINE_16(fake__half_to_float, fake__float_to_half) break;
  case ncclBfloat16: COMBINE_16(fake__bf16_to_float, fake__float_to_bf16) break;
  default: break; /* rejected by fake__redop_resolve */
  }
}

#define SCALE_INT(T)                                                    \
  {                                                                     \
    T s;                                                                \
    memcpy(&s, scalar, sizeof s);                                       \
    for (size_t i = 0; i < count; i++)                                  \
      ((T *)dst)[i] = (T)((uint64_t)((const T *)src)[i] * (uint64_t)s); \
  }
#define SCALE_FLT(T)                                                            \
  {                                                                             \
    T s;                                                                        \
    memcpy(&s, scalar, sizeof s);                                               \
    for (size_t i = 0; i < count; i++) ((T *)dst)[i] = ((const T *)src)[i] * s; \
  }
#define SCALE_16(to_f, from_f)                                              \
  {                                                                         \
    uint16_t s;                                                             \
    memcpy(&s, scalar, sizeof s);                                           \
    float sf = to_f(s);                                                     \
    for (size_t i = 0; i < count; i++)                                      \
      ((uint16_t *)dst)[i] = from_f(to_f(((const uint16_t *)src)[i]) * sf); \
  }

void fake__scale(void *dst, const void *src, size_t count, ncclDataType_t t, const void *scalar) {
  switch (t) {
  case ncclInt8: SCALE_INT(int8_t) break;
  case ncclUint8: SCALE_INT(uint8_t) break;
  case ncclInt32: SCALE_INT(int32_t) break;
  case ncclUint32: SCALE_INT(uint32_t) break;
  case ncclInt64: SCALE_INT(int64_t) break;
  case ncclUint64: SCALE_INT(uint64_t) break;
  case ncclFloat32: SCALE_FLT(float) break;
  case ncclFloat64: SCALE_FLT(double) break;
  case ncclFloat16: SCALE_16(fake__half_to_float, fake__float_to_half) break;
  case ncclBfloat16: SCALE_16(fake__bf16_to_float, fake__float_to_bf16) break;
  default: break;
  }
}

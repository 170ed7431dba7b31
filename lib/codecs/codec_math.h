/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * codec_math.h - per-element arithmetic shared by the host codecs (cc) and
 * the CUDA kernels (nvcc): scaling, rounding, residuals, top-k keys and the
 * quantised formats, over the conversions of common/halfmath.h. Both
 * compilers include this one file, so a kernel and its host twin compute
 * the same bits. Only integer bit manipulation and IEEE-exact float
 * operations (+, -, *, / correctly rounded) appear here: never build with
 * -ffast-math or --use_fast_math.
 */
#ifndef SQUALL_CODEC_MATH_H
#define SQUALL_CODEC_MATH_H

#include <stdint.h>
#include <string.h>

/* The number formats themselves (fp16 and bf16 conversions, SQ_HD): the
 * transports need them too, so they sit below both, in common. */
#include "common/halfmath.h"

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
 * [2^-126, 2^100]; 1 when absmax is zero, subnormal or not finite. Powers
 * of two keep scaling exact, which the residual invariant relies on. The
 * floor is float's smallest normal (1/s = 2^126 is exact): a maximum up
 * to FLT_MAX then fits an fp16 limit of 65504/(2p) for p up to 8188 ranks
 * (FLT_MAX * 2^-126 < 4); a floor of 2^-100 sent sums above about
 * 8e34/p to infinity. (Values within 0.024% of FLT_MAX still round to an
 * fp16 code that decodes to infinity at any power-of-two scale, as those
 * within 0.2% do in bf16.) A
 * subnormal absmax counts as zero: the host absmax flushes subnormal a to
 * zero (as the encoder does) and the device one does not, and both must
 * pick the same scale; every code of such a buffer is zero either way. */
SQ_HD float sq_pow2_scale(float absmax, float limit) {
  if (!(absmax > 0.0f) || !sq_isfinite(absmax) || (sq_float_bits(absmax) & 0x7f800000u) == 0) return 1.0f;
  int el = (int)((sq_float_bits(limit) >> 23) & 0xffu) - 127;
  int ea = (int)((sq_float_bits(absmax) >> 23) & 0xffu) - 127;
  int s = el - ea; /* log2(limit/absmax) lies in (s-1, s+1) */
  if (s > 100) return sq_pow2(100);
  if (s < -125) return sq_pow2(-126);
  return absmax * sq_pow2(s) <= limit ? sq_pow2(s) : sq_pow2(s - 1);
}


/* ------------------------------------------------ quantised codecs (int8,
 * int4, fp8 e4m3) with one power-of-two scale per bucket of elements.
 *
 * A bucket of B elements goes on the wire as a 2-byte header followed by
 * its codes (B bytes for int8 and fp8, B/2 for int4, low nibble first):
 *   header[0]  s, the scale exponent as a signed byte in [-126, 127]: the
 *              codes hold a * 2^s, so decode is code / 2^s;
 *   header[1]  non-finite flags: 1 = a +Inf was seen, 2 = -Inf, 4 = NaN.
 * s is the largest exponent with max|a| * 2^s <= limit (127 for int8, 7
 * for int4, 448 for fp8) over the bucket's finite values, 0 for a bucket
 * with none. Powers of two keep a * 2^s and code / 2^s exact for every
 * float (s in [-126, 127] is what makes the decode exact down to float's
 * subnormals), so the error-feedback residual a - decode(code) is exact
 * too (Sterbenz: a nonzero code is within a factor 2 of a * 2^s).
 * Rounding is to nearest, ties to even; a code whose decode would overflow
 * float (buckets near FLT_MAX) moves one step toward zero instead.
 * A non-finite element is sent as the marker code (int8 -128, int4 -8,
 * fp8 0x7f/0xff, all outside the symmetric range) and decodes to +Inf when
 * the bucket saw only +Inf, -Inf when only -Inf, NaN otherwise; its
 * residual is 0. So the reduced sum is non-finite wherever a plain
 * all-reduce's would be: never a silent finite result. */
typedef enum { SQ_QUANT_INT8 = 0,
               SQ_QUANT_INT4 = 1,
               SQ_QUANT_FP8 = 2 } sq_quant_kind;

#define SQ_QUANT_HEADER_BYTES 2
#define SQ_QUANT_NF_PINF 1u
#define SQ_QUANT_NF_NINF 2u
#define SQ_QUANT_NF_NAN 4u

SQ_HD float sq_quant_limit(sq_quant_kind k) {
  return k == SQ_QUANT_INT8 ? 127.0f : k == SQ_QUANT_INT4 ? 7.0f
                                                          : 448.0f;
}

/* Wire bytes of one bucket of `bucket` elements (the last bucket of a
 * tensor is padded to this size). */
SQ_HD size_t sq_quant_bucket_bytes(sq_quant_kind k, size_t bucket) {
  return SQ_QUANT_HEADER_BYTES + (k == SQ_QUANT_INT4 ? (bucket + 1) / 2 : bucket);
}

/* The flag of one non-finite value (0 for a finite one). */
SQ_HD uint32_t sq_quant_nf_flag(float a) {
  uint32_t x = sq_float_bits(a);
  if ((x & 0x7f800000u) != 0x7f800000u) return 0;
  if (x & 0x7fffffu) return SQ_QUANT_NF_NAN;
  return (x >> 31) ? SQ_QUANT_NF_NINF : SQ_QUANT_NF_PINF;
}

/* The bucket's scale exponent: largest s in [-126, 127] with
 * absmax * 2^s <= limit; 0 for absmax 0 (or not finite). */
SQ_HD int sq_quant_exp(sq_quant_kind k, float absmax) {
  if (!(absmax > 0.0f) || !sq_isfinite(absmax)) return 0;
  float limit = sq_quant_limit(k);
  int el = (int)((sq_float_bits(limit) >> 23) & 0xffu) - 127;  /* 2..8 */
  int ea = (int)((sq_float_bits(absmax) >> 23) & 0xffu) - 127; /* -127 for subnormals */
  int s = el - ea;                                             /* absmax * 2^s lies in [2^el, 2^(el+1)) */
  if (s > 127) return 127;                                     /* then absmax * 2^127 < 2^el <= limit */
  return absmax * sq_pow2(s) <= limit ? s : s - 1;             /* s >= -125 since el >= 2 */
}

/* Round to nearest even for |x| <= 2^22: IEEE addition does the rounding. */
SQ_HD float sq_rne_int(float x) {
  const float magic = 12582912.0f; /* 1.5 * 2^23 */
  return (x + magic) - magic;
}

/* e4m3 (OCP FP8, bias 7, no infinities, max 448) of x with |x| <= 448 and
 * finite: round to nearest even. Returns the 8-bit code. */
SQ_HD uint32_t sq_f32_to_e4m3(float x) {
  uint32_t b = sq_float_bits(x);
  uint32_t sign = (b >> 24) & 0x80u, ax = b & 0x7fffffffu;
  if (ax < 0x3c800000u) /* below 2^-6: a multiple of 2^-9 (8 rounds into the smallest normal) */
    return sign | (uint32_t)sq_rne_int(sq_bits_float(ax) * 512.0f);
  uint32_t h = (((ax >> 23) - 120) << 3) | ((ax & 0x7fffffu) >> 20);
  uint32_t rem = ax & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (h & 1u))) h++; /* a carry moves into the exponent */
  return sign | h;
}

/* The value of an e4m3 code that is not the marker (S.1111.111). */
SQ_HD float sq_e4m3_to_f32(uint32_t c) {
  uint32_t sign = (c & 0x80u) << 24, e = (c >> 3) & 0xfu, m = c & 7u;
  if (e == 0) {
    float v = (float)m * 0.001953125f; /* m * 2^-9, exact */
    return sign ? -v : v;
  }
  return sq_bits_float(sign | ((e + 120) << 23) | (m << 20));
}

/* The code's value before unscaling (code * 1 for the integer kinds), or
 * a non-finite value for the marker. c holds the 8 code bits (4 for int4). */
SQ_HD int sq_quant_is_marker(sq_quant_kind k, uint32_t c) {
  return k == SQ_QUANT_INT8 ? c == 0x80u : k == SQ_QUANT_INT4 ? c == 0x8u
                                                              : (c & 0x7fu) == 0x7fu;
}

SQ_HD float sq_quant_code_value(sq_quant_kind k, uint32_t c) {
  if (k == SQ_QUANT_INT8) return (float)(int32_t)(int8_t)(uint8_t)c;
  if (k == SQ_QUANT_INT4) return (float)((int32_t)(c & 0xfu) - (int32_t)((c & 0x8u) << 1));
  return sq_e4m3_to_f32(c);
}

/* What a marker decodes to under the bucket's flags. */
SQ_HD float sq_quant_marker_value(uint32_t flags) {
  if (flags == SQ_QUANT_NF_PINF) return sq_bits_float(0x7f800000u);
  if (flags == SQ_QUANT_NF_NINF) return sq_bits_float(0xff800000u);
  return sq_bits_float(0x7fc00000u);
}

/* 2^-s for a header byte s, the decode multiplier: exact, 2^-127 being a
 * float subnormal. Bytes outside [-126, 127] (a corrupt header) clamp, so
 * they still decode to some float. code * 2^-s is the exact quotient
 * code / 2^s, so this is the division's result bit for bit. */
SQ_HD float sq_quant_inv_pow2(int s) {
  s = s < -126 ? -126 : s > 127 ? 127
                                : s;
  return s == 127 ? sq_bits_float(0x00400000u) : sq_pow2(-s);
}

/* Decode of one code (c: 8 bits; int4: the nibble) under scale 2^s, with
 * inv = sq_quant_inv_pow2(s): exact, since s <= 127 keeps code * 2^-s on
 * float's grid (a multiple of 2^-136 at worst, above 2^-149). */
SQ_HD float sq_quant_decode_elem(sq_quant_kind k, uint32_t c, float inv, uint32_t flags) {
  if (sq_quant_is_marker(k, c)) return sq_quant_marker_value(flags);
  return sq_quant_code_value(k, c) * inv;
}

/* One element of a bucket with scale p = 2^s (inv = 2^-s): the code of a,
 * and *d its decode (a itself for a non-finite a, so the residual rule
 * gives 0). */
SQ_HD uint32_t sq_quant_encode_elem(sq_quant_kind k, float a, float p, float inv, float *d) {
  if (!sq_isfinite(a)) {
    *d = a;
    return k == SQ_QUANT_INT8 ? 0x80u : k == SQ_QUANT_INT4 ? 0x8u
                                                           : 0x7fu;
  }
  float x = a * p; /* exact (or far below half a code when it underflows) */
  if (k == SQ_QUANT_FP8) {
    uint32_t c = sq_f32_to_e4m3(x);
    float v = sq_e4m3_to_f32(c) * inv;
    if (!sq_isfinite(v)) { /* rounded up past FLT_MAX: one step toward zero */
      c -= 1u;
      v = sq_e4m3_to_f32(c) * inv;
    }
    *d = v;
    return c;
  }
  float q = sq_rne_int(x);
  float v = q * inv;
  if (!sq_isfinite(v)) {
    q -= q > 0.0f ? 1.0f : -1.0f;
    v = q * inv;
  }
  *d = v;
  uint32_t c = (uint32_t)(int32_t)q;
  return k == SQ_QUANT_INT4 ? (c & 0xfu) : (c & 0xffu);
}

/* The residual after one quantised element (error feedback): a - d, exact;
 * 0 for non-finite values, which are delivered, never kept. */
SQ_HD float sq_quant_residual(float a, float d) { return sq_residual_after(a, d); }

#endif /* SQUALL_CODEC_MATH_H */

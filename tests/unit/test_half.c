/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_half.c - the 16-bit codec: fp16 and bf16 conversions against
 * independent references (GCC's _Float16, and a rounding reference written
 * here from the format definitions in double arithmetic), the
 * error-feedback invariant decode(code) + res' == a, decoding, absmax and
 * the power-of-two scale.
 */
#include <float.h>
#include <math.h>

#include "check_util.h"
#include <string.h>
#include "codecs/codec.h"

#if defined(__FLT16_MAX__)
#define HAVE_FLOAT16 1
#endif

/* ------------------------------------------------------------ references */

/* |value| of a code, from the format definitions (not from codec_math.h). */
static double ref_f16_mag(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  if (e == 31) return INFINITY;
  if (e == 0) return ldexp(m, -24);
  return ldexp(1024 + m, e - 25);
}

static double ref_bf16_mag(uint16_t h) {
  int e = (h >> 7) & 255, m = h & 127;
  if (e == 255) return INFINITY;
  if (e == 0) return ldexp(m, -133);
  return ldexp(128 + m, e - 134);
}

/* Round-to-nearest-even of a non-NaN float to a 16-bit format given by its
 * magnitude function: binary search for the largest code not above |f|,
 * then pick the nearer neighbour, the even one on a tie. inf_code's
 * magnitude is taken as 'beyond' (the next power of two past the largest
 * finite value), which is how IEEE decides overflow. Every difference below
 * is exact in double: the operands are within a few binades of each other
 * and have at most 24 significant bits. */
static uint16_t ref_round(float f, double (*mag)(uint16_t), uint16_t inf_code, double beyond) {
  uint16_t sign = (uint16_t)((tu_bits(f) >> 16) & 0x8000u);
  double x = fabs((double)f);
  uint32_t lo = 0, hi = inf_code - 1u;
  while (lo < hi) {
    uint32_t mid = (lo + hi + 1) / 2;
    if (mag((uint16_t)mid) <= x) lo = mid;
    else hi = mid - 1;
  }
  double down = mag((uint16_t)lo);
  double up = lo + 1 == inf_code ? beyond : mag((uint16_t)(lo + 1));
  if (x >= up) return (uint16_t)(sign | inf_code);
  double dl = x - down, du = up - x;
  uint32_t c = dl < du ? lo : du < dl ? lo + 1
                          : (lo & 1u) ? lo + 1
                                      : lo;
  return (uint16_t)(sign | c);
}

static uint16_t ref_f16(float f) { return ref_round(f, ref_f16_mag, 0x7c00, 65536.0); }
static uint16_t ref_bf16(float f) { return ref_round(f, ref_bf16_mag, 0x7f80, ldexp(1.0, 128)); }

static int f16_isnan(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
static int bf16_isnan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }

/* The documented NaN rule: quieted, sign and top payload bits kept. */
static uint16_t expect_f16_nan(float f) {
  uint32_t x = tu_bits(f);
  return (uint16_t)(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu));
}

/* Checks sq_f32_to_f16 on one input against the reference(s). */
static void check_f16_one(float f, int with_ref) {
  uint16_t got = sq_f32_to_f16(f);
  if (tu_isnan(f)) {
    TU_CHECK(got == expect_f16_nan(f), "f16(NaN 0x%08x) = 0x%04x, want 0x%04x", tu_bits(f), got,
             expect_f16_nan(f));
    return;
  }
#ifdef HAVE_FLOAT16
  _Float16 h16 = (_Float16)f;
  uint16_t want;
  memcpy(&want, &h16, sizeof want);
  TU_CHECK(got == want, "f16(0x%08x = %a) = 0x%04x, _Float16 gives 0x%04x", tu_bits(f), (double)f, got, want);
#endif
  if (with_ref) {
    uint16_t r = ref_f16(f);
    TU_CHECK(got == r, "f16(0x%08x = %a) = 0x%04x, reference gives 0x%04x", tu_bits(f), (double)f, got, r);
  }
}

static void check_bf16_one(float f) {
  uint16_t got = sq_f32_to_bf16(f);
  if (tu_isnan(f)) {
    uint16_t want = (uint16_t)((tu_bits(f) >> 16) | 0x40u);
    TU_CHECK(got == want, "bf16(NaN 0x%08x) = 0x%04x, want 0x%04x", tu_bits(f), got, want);
    return;
  }
  uint16_t r = ref_bf16(f);
  TU_CHECK(got == r, "bf16(0x%08x = %a) = 0x%04x, reference gives 0x%04x", tu_bits(f), (double)f, got, r);
}

/* Inputs that sit on the edges of both formats. */
/* clang-format off */
static const uint32_t edge_bits[] = {
    0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu,
    0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fffffffu,
    0x477fe000u /* 65504 */, 0x477fefffu /* just below 65520 */, 0x477ff000u /* 65520 */,
    0x477ff001u, 0x47800000u /* 65536 */, 0x38800000u /* 2^-14 */, 0x387fffffu, 0x387fe000u,
    0x33800000u /* 2^-24 */, 0x33000000u /* 2^-25: ties to 0 */, 0x33000001u, 0x32ffffffu,
    0x33c00000u /* 1.5*2^-24: ties to 2 */, 0x3f801000u /* 1+2^-11 */, 0x3f803000u, 0x3f800fffu,
    0x3f808000u /* bf16 tie */, 0x3f818000u, 0x3f807fffu, 0x7f7f8000u /* bf16 tie to Inf */,
    0x7f7f7fffu, 0x00008000u, 0x00018000u, 0x80010000u,
};
/* clang-format on */

/* ------------------------------------------------------- exhaustive 16-bit */

START_TEST(test_f16_all_patterns_roundtrip) {
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    float f = sq_f16_to_f32(h);
    if (f16_isnan(h)) {
      TU_CHECK(tu_isnan(f), "f16 0x%04x is NaN but decodes to %a", h, (double)f);
      TU_CHECK((tu_bits(f) >> 31) == (uint32_t)(h >> 15), "f16 NaN 0x%04x lost its sign", h);
      uint16_t back = sq_f32_to_f16(f);
      TU_CHECK(back == (h | 0x200u), "f16 NaN 0x%04x -> 0x%08x -> 0x%04x", h, tu_bits(f), back);
      continue;
    }
    /* Decode against the format definition, sign included. */
    double want = (h & 0x8000u) ? -ref_f16_mag(h) : ref_f16_mag(h);
    TU_CHECK((double)f == want && (tu_bits(f) >> 31) == (uint32_t)(h >> 15),
             "f16 0x%04x decodes to %a, want %a", h, (double)f, want);
#ifdef HAVE_FLOAT16
    _Float16 x;
    memcpy(&x, &h, sizeof h);
    TU_CHECK(tu_bits((float)x) == tu_bits(f), "f16 0x%04x: %a, _Float16 gives %a", h, (double)f,
             (double)(float)x);
#endif
    uint16_t back = sq_f32_to_f16(f);
    TU_CHECK(back == h, "f16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
  }
}
END_TEST

START_TEST(test_bf16_all_patterns_roundtrip) {
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    float f = sq_bf16_to_f32(h);
    uint16_t back = sq_f32_to_bf16(f);
    if (bf16_isnan(h)) {
      TU_CHECK(tu_isnan(f) && (tu_bits(f) >> 31) == (uint32_t)(h >> 15),
               "bf16 NaN 0x%04x decodes to 0x%08x", h, tu_bits(f));
      TU_CHECK(back == (h | 0x40u), "bf16 NaN 0x%04x -> 0x%04x", h, back);
      continue;
    }
    double want = (h & 0x8000u) ? -ref_bf16_mag(h) : ref_bf16_mag(h);
    TU_CHECK((double)f == want && (tu_bits(f) >> 31) == (uint32_t)(h >> 15),
             "bf16 0x%04x decodes to %a, want %a", h, (double)f, want);
    TU_CHECK(back == h, "bf16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
  }
}
END_TEST

/* ------------------------------------------------ float -> 16-bit, sampled */

START_TEST(test_f16_matches_reference) {
#ifndef HAVE_FLOAT16
  fprintf(stderr, "note: no _Float16 in this compiler; checking against the double reference only\n");
#endif
  for (size_t i = 0; i < sizeof edge_bits / sizeof edge_bits[0]; i++) {
    check_f16_one(tu_float(edge_bits[i]), 1);
    check_f16_one(tu_float(edge_bits[i] ^ 0x80000000u), 1);
  }
  /* A sweep over all 2^32 patterns with a prime stride (every exponent and
   * many mantissa tails), then random patterns; the double reference, being
   * slower, sees every 16th. */
#ifdef HAVE_FLOAT16
  const uint32_t stride = 89, nrand = 8u << 20;
#else
  const uint32_t stride = 1021, nrand = 2u << 20;
#endif
  uint32_t n = 0;
  for (uint64_t x = 0; x < (1ull << 32); x += stride, n++) check_f16_one(tu_float((uint32_t)x), (n & 15) == 0);
  tu_rng r = {0x5eed0001};
  for (uint32_t i = 0; i < nrand; i++) check_f16_one(tu_float(tu_u32(&r)), (i & 15) == 0);
  /* Every float whose rounding is decided in the fp16 range: exponent
   * fields 102..143, low mantissa bits around the rounding point. */
  for (uint32_t e = 100; e <= 144; e++)
    for (uint32_t m = 0; m < (1u << 23); m += 4093) {
      uint32_t base = (e << 23) | m;
      for (uint32_t d = 0; d < 3; d++) check_f16_one(tu_float(base + d), 1);
    }
}
END_TEST

START_TEST(test_bf16_matches_reference) {
  for (size_t i = 0; i < sizeof edge_bits / sizeof edge_bits[0]; i++) {
    check_bf16_one(tu_float(edge_bits[i]));
    check_bf16_one(tu_float(edge_bits[i] ^ 0x80000000u));
  }
  for (uint64_t x = 0; x < (1ull << 32); x += 1013) check_bf16_one(tu_float((uint32_t)x));
  tu_rng r = {0x5eed0002};
  for (uint32_t i = 0; i < (2u << 20); i++) check_bf16_one(tu_float(tu_u32(&r)));
  /* Exact ties in every binade: the low 16 bits are 0x8000. */
  for (uint32_t hi = 0; hi < 0x7f80u; hi += 7) {
    check_bf16_one(tu_float((hi << 16) | 0x8000u));
    check_bf16_one(tu_float((hi << 16) | 0x7fffu));
    check_bf16_one(tu_float((hi << 16) | 0x8001u));
  }
}
END_TEST

START_TEST(test_halfway_rounds_to_even) {
  /* fp16 near 1: ulp 2^-10. */
  ck_assert_uint_eq(sq_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);            /* tie, 1 is even */
  ck_assert_uint_eq(sq_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);        /* tie, up to even */
  ck_assert_uint_eq(sq_f32_to_f16(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01); /* above the tie */
  ck_assert_uint_eq(sq_f32_to_f16(-(1.0f + 3 * 0x1p-11f)), 0xbc02);
  ck_assert_uint_eq(sq_f32_to_f16(2049.0f), 0x6800); /* 2048 */
  ck_assert_uint_eq(sq_f32_to_f16(2051.0f), 0x6802); /* 2052 */
  /* Subnormal fp16 ties: quantum 2^-24. */
  ck_assert_uint_eq(sq_f32_to_f16(0x1p-25f), 0x0000);
  ck_assert_uint_eq(sq_f32_to_f16(3 * 0x1p-25f), 0x0002);
  ck_assert_uint_eq(sq_f32_to_f16(5 * 0x1p-25f), 0x0002);
  ck_assert_uint_eq(sq_f32_to_f16(-0x1p-25f), 0x8000);
  /* The carry out of the largest subnormal makes the smallest normal. */
  ck_assert_uint_eq(sq_f32_to_f16(0x1p-14f - 0x1p-26f), 0x0400);
  /* bf16 near 1: ulp 2^-7. */
  ck_assert_uint_eq(sq_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  ck_assert_uint_eq(sq_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  ck_assert_uint_eq(sq_f32_to_bf16(-(1.0f + 3 * 0x1p-8f)), 0xbf82);
}
END_TEST

START_TEST(test_overflow) {
  ck_assert_uint_eq(sq_f32_to_f16(65504.0f), 0x7bff);
  ck_assert_uint_eq(sq_f32_to_f16(65519.0f), 0x7bff);
  ck_assert_uint_eq(sq_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff);
  ck_assert_uint_eq(sq_f32_to_f16(65520.0f), 0x7c00);
  ck_assert_uint_eq(sq_f32_to_f16(-65520.0f), 0xfc00);
  ck_assert_uint_eq(sq_f32_to_f16(1e6f), 0x7c00);
  ck_assert_uint_eq(sq_f32_to_f16(FLT_MAX), 0x7c00);
  ck_assert_uint_eq(sq_f32_to_f16(-FLT_MAX), 0xfc00);
  ck_assert_uint_eq(sq_f32_to_bf16(FLT_MAX), 0x7f80); /* above the last bf16 tie */
  ck_assert_uint_eq(sq_f32_to_bf16(tu_float(0x7f7f7fffu)), 0x7f7f);
  ck_assert_float_eq(sq_bf16_to_f32(0x7f7f), SQ_BF16_MAX);
  ck_assert_float_eq(sq_f16_to_f32(0x7bff), SQ_F16_MAX);
  /* Scaling overflow in the encoder: delivered as Inf, residual 0. */
  float g = 60000.0f, res = 0.0f;
  uint16_t h = sq_half_encode_elem(SQ_HALF_FP16, g, &res, 2.0f);
  ck_assert_uint_eq(h, 0x7c00);
  ck_assert_uint_eq(tu_bits(res), 0);
}
END_TEST

START_TEST(test_nan_inf_propagate) {
  const float in[] = {INFINITY, -INFINITY, NAN, -NAN, tu_float(0x7f812345u), 1.0f};
  const size_t n = sizeof in / sizeof in[0];
  for (int kind = SQ_HALF_FP16; kind <= SQ_HALF_BF16; kind++) {
    float res[6] = {0.5f, -0.5f, 0.25f, 3.0f, 0.0f, INFINITY}; /* the last: g + res = Inf */
    float res_before[6];
    memcpy(res_before, res, sizeof res);
    uint16_t code[6];
    float out[6];
    squall__half_encode((sq_half_kind)kind, in, res, code, n, 0.0625f);
    squall__half_decode((sq_half_kind)kind, code, out, n, 0.0625f, 0);
    for (size_t i = 0; i < n; i++) {
      float a = in[i] + res_before[i];
      ck_assert_msg(!tu_isfinite(a), "input %zu should be non-finite", i);
      if (tu_isnan(a)) ck_assert_msg(tu_isnan(out[i]), "kind %d: NaN %zu decodes to %a", kind, i, (double)out[i]);
      else ck_assert_msg(tu_bits(out[i]) == tu_bits(a), "kind %d: %a decodes to %a", kind, (double)a,
                         (double)out[i]);
      ck_assert_msg(tu_bits(res[i]) == 0, "kind %d: residual %zu of a non-finite value is %a", kind, i,
                    (double)res[i]);
      /* The sign survives, NaN included. */
      ck_assert_uint_eq(tu_bits(out[i]) >> 31, tu_bits(a) >> 31);
    }
  }
}
END_TEST

START_TEST(test_subnormals) {
  /* Every fp16 subnormal is m * 2^-24 and round-trips through the encoder
   * at scale 1 with no residual. */
  for (uint32_t m = 1; m < 1024; m++) {
    float v = sq_f16_to_f32((uint16_t)m);
    ck_assert_msg(v == (float)m * 0x1p-24f, "subnormal 0x%04x is %a", m, (double)v);
    float res = 0.0f;
    uint16_t h = sq_half_encode_elem(SQ_HALF_FP16, v, &res, 1.0f);
    ck_assert_uint_eq(h, m);
    ck_assert_uint_eq(tu_bits(res), 0);
  }
  /* Float subnormals are far below both quanta of fp16 and become signed zeros
   * there; bf16 keeps their top 7 bits. */
  ck_assert_uint_eq(sq_f32_to_f16(tu_float(0x00000001u)), 0x0000);
  ck_assert_uint_eq(sq_f32_to_f16(tu_float(0x807fffffu)), 0x8000);
  ck_assert_uint_eq(sq_f32_to_bf16(tu_float(0x00400000u)), 0x0040);
  ck_assert_uint_eq(sq_f32_to_bf16(tu_float(0x00000001u)), 0x0000);
  /* A value below the fp16 range stays entirely in the residual. */
  float res = 0.0f, g = 0x1p-30f;
  uint16_t h = sq_half_encode_elem(SQ_HALF_FP16, g, &res, 1.0f);
  ck_assert_uint_eq(h, 0);
  ck_assert_float_eq(res, g);
}
END_TEST

/* ------------------------------------------------------- error feedback */

/* decode(code) + res' == a for every element, for power-of-two scales, with
 * a zero, a random or no prior residual. Data magnitudes are bounded so that
 * a*scale stays finite in the format (overflow is delivered as Inf by
 * design, and then the residual is 0). */
static void check_invariant(sq_half_kind kind, int log2_scale, int prior, uint64_t seed) {
  enum { N = 1 << 15 };
  static float g[N], res[N], a[N], out[N];
  static uint16_t code[N];
  tu_rng r = {seed};
  float scale = sq_pow2(log2_scale);
  int emax = (kind == SQ_HALF_FP16 ? 14 : 120) - log2_scale; /* a*scale < 2^15 (fp16) */
  if (emax > 120) emax = 120;
  /* Down to float underflow of a*scale: the invariant holds there too. */
  int emin = kind == SQ_HALF_FP16 ? emax - 45 : -125;
  for (size_t i = 0; i < N; i++) {
    g[i] = tu_float_exp(&r, emin, emax - 1);
    res[i] = prior == 1 ? tu_float_exp(&r, emin, emax - 2) * (tu_next(&r) & 1) : 0.0f;
    if (i % 97 == 0) g[i] = (i & 1) ? 0.0f : -0.0f;
    a[i] = g[i] + res[i];
  }
  squall__half_encode(kind, g, prior >= 0 ? res : NULL, code, N, scale);
  squall__half_decode(kind, code, out, N, scale, 0);
  for (size_t i = 0; i < N; i++) {
    float rr = prior >= 0 ? res[i] : 0.0f;
    float back = out[i] + rr;
    TU_CHECK(prior >= 0 || code[i] == sq_half_from_f32(kind, sq_ftz(g[i] * scale)),
             "no-residual encode of %a differs", (double)g[i]);
    if (prior < 0) continue;
    /* Exact, except that a subnormal a - decode is flushed: then res' is
     * a zero and the pair misses a by less than 2^-126. */
    TU_CHECK(tu_same_value(back, a[i]) ||
                 ((tu_bits(rr) & 0x7fffffffu) == 0 && fabs((double)a[i] - (double)out[i]) < 0x1p-126),
             "kind %d scale 2^%d: a=%a code=0x%04x decode=%a res'=%a, sum %a", kind, log2_scale,
             (double)a[i], code[i], (double)out[i], (double)rr, (double)back);
    /* The code is the nearest representable value (independent reference). */
    if ((i & 7) == 0) {
      float x = sq_ftz(sq_ftz(a[i]) * scale); /* what the encoder rounds */
      uint16_t want = kind == SQ_HALF_FP16 ? ref_f16(x) : ref_bf16(x);
      TU_CHECK(code[i] == want, "kind %d: round(%a) = 0x%04x, reference 0x%04x", kind,
               (double)(a[i] * scale), code[i], want);
    }
  }
}

START_TEST(test_ef_invariant) {
  static const int scales[] = {-20, -7, -1, 0, 3, 12, 24};
  for (int kind = SQ_HALF_FP16; kind <= SQ_HALF_BF16; kind++)
    for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++)
      for (int prior = -1; prior <= 1; prior++)
        check_invariant((sq_half_kind)kind, scales[s], prior, 1000u * (uint64_t)kind + 10u * s + (uint64_t)(prior + 1));
}
END_TEST

/* Over T steps of one rank: sum_t decode_t + e_T == sum_t g_t exactly, for
 * dyadic inputs small enough that every float sum is exact. */
START_TEST(test_ef_steps) {
  enum { N = 4096,
         T = 50 };
  static float g[N], res[N], sum_g[N], sum_d[N], out[N];
  static uint16_t code[N];
  for (int kind = SQ_HALF_FP16; kind <= SQ_HALF_BF16; kind++) {
    tu_rng r = {77u + (uint64_t)kind};
    memset(res, 0, sizeof res);
    memset(sum_g, 0, sizeof sum_g);
    memset(sum_d, 0, sizeof sum_d);
    for (int t = 0; t < T; t++) {
      for (size_t i = 0; i < N; i++) {
        g[i] = (float)((int32_t)(tu_u32(&r) >> 17) - (1 << 14)) * 0x1p-12f; /* [-4, 4), step 2^-12 */
        sum_g[i] += g[i];
      }
      float scale = sq_pow2_scale(squall__absmax(g, res, N), SQ_F16_MAX);
      squall__half_encode((sq_half_kind)kind, g, res, code, N, scale);
      squall__half_decode((sq_half_kind)kind, code, sum_d, N, scale, 1);
      squall__half_decode((sq_half_kind)kind, code, out, N, scale, 0);
    }
    for (size_t i = 0; i < N; i++)
      ck_assert_msg(tu_same_value(sum_d[i] + res[i], sum_g[i]), "kind %d elt %zu: %a + %a != %a", kind, i,
                    (double)sum_d[i], (double)res[i], (double)sum_g[i]);
  }
}
END_TEST

START_TEST(test_decode_accumulate) {
  enum { N = 1000 };
  float prior[N], out[N];
  uint16_t code[N];
  tu_rng r = {99};
  const float scales[] = {1.0f, 0x1p-5f, 0x1p9f, 3.0f};
  for (int kind = SQ_HALF_FP16; kind <= SQ_HALF_BF16; kind++)
    for (size_t s = 0; s < 4; s++) {
      for (size_t i = 0; i < N; i++) {
        code[i] = (uint16_t)tu_u32(&r);
        if (kind == SQ_HALF_FP16 && f16_isnan(code[i])) code[i] = 0x3c00;
        if (kind == SQ_HALF_BF16 && bf16_isnan(code[i])) code[i] = 0x3f80;
        prior[i] = tu_float_unit(&r) * 100.0f;
        out[i] = prior[i];
      }
      squall__half_decode((sq_half_kind)kind, code, out, N, scales[s], 1);
      for (size_t i = 0; i < N; i++) {
        double m = kind == SQ_HALF_FP16 ? ref_f16_mag(code[i]) : ref_bf16_mag(code[i]);
        float v = (float)((code[i] & 0x8000u) ? -m : m) / scales[s];
        ck_assert_msg(tu_bits(out[i]) == tu_bits(prior[i] + v), "kind %d elt %zu: %a, want %a", kind, i,
                      (double)out[i], (double)(prior[i] + v));
      }
      squall__half_decode((sq_half_kind)kind, code, out, N, scales[s], 0);
      for (size_t i = 0; i < N; i++) {
        double m = kind == SQ_HALF_FP16 ? ref_f16_mag(code[i]) : ref_bf16_mag(code[i]);
        float v = (float)((code[i] & 0x8000u) ? -m : m) / scales[s];
        ck_assert_msg(tu_bits(out[i]) == tu_bits(v), "kind %d overwrite elt %zu", kind, i);
      }
    }
}
END_TEST

START_TEST(test_absmax) {
  const float g[] = {1.0f, -7.5f, NAN, INFINITY, 3.0f, -INFINITY, -0.0f};
  const float res[] = {0.0f, 0.25f, 1.0f, -1.0f, -10.0f, 1.0f, 0.0f};
  ck_assert_float_eq(squall__absmax(g, NULL, 7), 7.5f);
  ck_assert_float_eq(squall__absmax(g, res, 7), 7.25f);
  ck_assert_float_eq(squall__absmax(g, res, 0), 0.0f);
  ck_assert_float_eq(squall__absmax(g + 2, NULL, 2), 0.0f);      /* only non-finite values */
  ck_assert_uint_eq(tu_bits(squall__absmax(g + 6, NULL, 1)), 0); /* -0 gives +0 */
  /* g + res overflowing to Inf is skipped. */
  const float big[] = {FLT_MAX, 2.0f}, bigres[] = {FLT_MAX, 0.0f};
  ck_assert_float_eq(squall__absmax(big, bigres, 2), 2.0f);
  ck_assert_float_eq(squall__absmax(big, NULL, 2), FLT_MAX);
  /* Random data against a plain loop. */
  enum { N = 10007 };
  static float x[N], e[N];
  tu_rng r = {5};
  for (int rep = 0; rep < 20; rep++) {
    float want = 0.0f;
    for (size_t i = 0; i < N; i++) {
      x[i] = tu_float(tu_u32(&r));
      e[i] = tu_float_exp(&r, -20, 20);
      float a = x[i] + e[i];
      if (tu_isfinite(a) && fabsf(a) > want) want = fabsf(a);
    }
    ck_assert_uint_eq(tu_bits(squall__absmax(x, e, N)), tu_bits(want));
  }
}
END_TEST

START_TEST(test_pow2_scale) {
  ck_assert_float_eq(sq_pow2(0), 1.0f);
  ck_assert_float_eq(sq_pow2(-126), FLT_MIN);
  ck_assert_float_eq(sq_pow2(127), 0x1p127f);
  ck_assert_float_eq(sq_pow2(-3), 0.125f);
  ck_assert_float_eq(sq_pow2_scale(0.0f, SQ_F16_MAX), 1.0f);
  ck_assert_float_eq(sq_pow2_scale(-0.0f, SQ_F16_MAX), 1.0f);
  ck_assert_float_eq(sq_pow2_scale(NAN, SQ_F16_MAX), 1.0f);
  ck_assert_float_eq(sq_pow2_scale(INFINITY, SQ_F16_MAX), 1.0f);
  ck_assert_float_eq(sq_pow2_scale(1.0f, SQ_F16_MAX), 32768.0f);
  ck_assert_float_eq(sq_pow2_scale(65504.0f, SQ_F16_MAX), 1.0f);
  ck_assert_float_eq(sq_pow2_scale(65505.0f, SQ_F16_MAX), 0.5f);
  ck_assert_float_eq(sq_pow2_scale(1e-30f, SQ_F16_MAX), 0x1p100f);  /* clamped */
  ck_assert_float_eq(sq_pow2_scale(tu_float(1), SQ_F16_MAX), 1.0f); /* subnormal: as zero */
  ck_assert_float_eq(sq_pow2_scale(FLT_MAX, SQ_F16_MAX), 0x1p-113f);
  ck_assert_float_eq(sq_pow2_scale(FLT_MAX, SQ_F16_MAX / 8192), 0x1p-126f); /* clamped: 8192 ranks */
  ck_assert_float_eq(sq_pow2_scale(FLT_MAX, SQ_F16_MAX / 16384), 0x1p-126f);
  const float limits[] = {SQ_F16_MAX, SQ_F16_MAX / 8, SQ_F16_MAX / 1000, SQ_BF16_MAX / 64, 1.0f};
  tu_rng r = {17};
  for (int i = 0; i < 200000; i++) {
    float m = tu_float(tu_u32(&r) & 0x7fffffffu);
    if (!tu_isfinite(m) || m < FLT_MIN) continue; /* zero and subnormals: 1, above */
    float lim = limits[i % 5];
    float s = sq_pow2_scale(m, lim);
    uint32_t sb = tu_bits(s);
    TU_CHECK((sb & 0x807fffffu) == 0 && sb != 0, "scale %a for %a is not a power of two", (double)s, (double)m);
    TU_CHECK(s >= 0x1p-126f && s <= 0x1p100f, "scale %a out of the clamp", (double)s);
    double prod = (double)m * s;
    if (s > 0x1p-126f) TU_CHECK(prod <= lim, "%a * %a > %a", (double)m, (double)s, (double)lim);
    if (s < 0x1p100f) TU_CHECK(prod * 2 > lim, "%a * 2 * %a <= %a: not the largest", (double)m, (double)s, (double)lim);
  }
}
END_TEST

/* The array functions (which may take a SIMD path on x86) give exactly the
 * bits of the per-element functions of codec_math.h, the CUDA twin's
 * definition: odd lengths, NaN, Inf, subnormals, residuals, accumulate. */
START_TEST(test_arrays_match_per_element) {
  tu_rng rng = {12345};
  size_t lens[] = {1, 7, 8, 9, 1000, 4099};
  for (size_t L = 0; L < sizeof lens / sizeof lens[0]; L++)
    for (int kind = 0; kind < 2; kind++) {
      size_t n = lens[L];
      float *g = malloc(n * 4), *r1 = malloc(n * 4), *r2 = malloc(n * 4), *o1 = malloc(n * 4), *o2 = malloc(n * 4);
      uint16_t *h1 = malloc(n * 2), *h2 = malloc(n * 2), *b1 = malloc(n * 2), *b2 = malloc(n * 2);
      for (size_t i = 0; i < n; i++) {
        uint32_t pick = tu_u32(&rng) % 16;
        g[i] = pick == 0   ? tu_float(tu_u32(&rng)) /* any bits: NaN, Inf, subnormal */
               : pick == 1 ? tu_float_exp(&rng, -40, -10)
                           : tu_float_exp(&rng, -8, 12);
        r1[i] = r2[i] = pick == 2 ? tu_float_exp(&rng, -20, -5) : 0.0f;
      }
      float scales[] = {1.0f, 0x1p-20f, 0x1p10f, 3.0f /* not a power of two: the scalar path */};
      for (int sc = 0; sc < 4; sc++) {
        squall__half_encode((sq_half_kind)kind, g, r1, h1, n, scales[sc]);
        for (size_t i = 0; i < n; i++) h2[i] = sq_half_encode_elem((sq_half_kind)kind, g[i], &r2[i], scales[sc]);
        ck_assert(memcmp(h1, h2, n * 2) == 0);
        for (size_t i = 0; i < n; i++) ck_assert_msg(tu_same_value(r1[i], r2[i]) || (tu_isnan(r1[i]) && tu_isnan(r2[i])),
                                                     "residual %zu: %a vs %a", i, r1[i], r2[i]);
        squall__half_encode((sq_half_kind)kind, g, NULL, h1, n, scales[sc]);
        for (size_t i = 0; i < n; i++) ck_assert_uint_eq(h1[i], sq_half_encode_elem((sq_half_kind)kind, g[i], NULL, scales[sc]));
        for (int acc = 0; acc < 2; acc++) {
          for (size_t i = 0; i < n; i++) o1[i] = o2[i] = (float)i;
          squall__half_decode((sq_half_kind)kind, h2, o1, n, scales[sc], acc);
          for (size_t i = 0; i < n; i++) {
            float d = sq_half_decode_elem((sq_half_kind)kind, h2[i], scales[sc]);
            o2[i] = acc ? o2[i] + d : d;
          }
          for (size_t i = 0; i < n; i++)
            ck_assert_msg(tu_same_value(o1[i], o2[i]) || (tu_isnan(o1[i]) && tu_isnan(o2[i])), "decode %zu", i);
        }
      }
      for (size_t i = 0; i < n; i++) {
        b1[i] = b2[i] = (uint16_t)tu_u32(&rng);
        h1[i] = (uint16_t)tu_u32(&rng);
      }
      squall__half_sum((sq_half_kind)kind, h1, b1, n);
      for (size_t i = 0; i < n; i++) {
        uint16_t want = sq_half_from_f32((sq_half_kind)kind, sq_half_to_f32((sq_half_kind)kind, h1[i]) +
                                                                 sq_half_to_f32((sq_half_kind)kind, b2[i]));
        float fw = sq_half_to_f32((sq_half_kind)kind, want), fg = sq_half_to_f32((sq_half_kind)kind, b1[i]);
        ck_assert_msg(b1[i] == want || (tu_isnan(fw) && tu_isnan(fg)), "sum %zu: %04x vs %04x", i, b1[i], want);
      }
      free(g);
      free(r1);
      free(r2);
      free(o1);
      free(o2);
      free(h1);
      free(h2);
      free(b1);
      free(b2);
    }
}
END_TEST

/* ------------------------------------------- subnormals and addresses */

static float ftz_ref(float x) { /* written out, not sq_ftz */
  return (tu_bits(x) & 0x7f800000u) ? x : tu_float(tu_bits(x) & 0x80000000u);
}

/* Error feedback on data near 1e-38 (a byte-filled buffer holds 2.37e-38):
 * no residual ever becomes subnormal, and what the flush drops is bounded:
 * per element and step |decode + res' - a| < 2^-126 with a = g + res
 * flushed as the encoder forms it, and exactly 0 where a - decode is
 * normal. Over T steps the sum of what was delivered plus the last
 * residual misses the sum of the inputs by less than T * 2^-125. */
START_TEST(test_tiny_ef_bound) {
  enum { N = 4096,
         T = 40 };
  static float g[N], res[N], out[N], prev[N];
  static double sum_g[N], sum_d[N];
  static uint16_t code[N];
  for (int run = 0; run < 4; run++) {
    int kind = run & 1, mixed = run >> 1; /* mixed: some entries near 1 set the scale */
    tu_rng r = {2026u + (uint64_t)run};
    memset(res, 0, sizeof res);
    memset(sum_g, 0, sizeof sum_g);
    memset(sum_d, 0, sizeof sum_d);
    size_t flushed = 0;
    for (int t = 0; t < T; t++) {
      for (size_t i = 0; i < N; i++) {
        uint64_t c = tu_below(&r, mixed ? 4 : 3);
        g[i] = c == 0 ? 2.37e-38f : c == 1 ? tu_float_unit(&r) * 4e-38f
                                : c == 2   ? tu_float(tu_u32(&r) & 0x807fffffu) /* subnormal g */
                                           : tu_float_unit(&r);
        sum_g[i] += (double)g[i];
        prev[i] = res[i];
      }
      float limit = kind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX;
      float scale = sq_pow2_scale(squall__absmax(g, res, N), limit);
      if (kind == SQ_HALF_BF16 && scale > 1.0f) scale = 1.0f;
      squall__half_encode((sq_half_kind)kind, g, res, code, N, scale);
      squall__half_decode((sq_half_kind)kind, code, out, N, scale, 0);
      for (size_t i = 0; i < N; i++) {
        TU_CHECK((tu_bits(res[i]) & 0x7f800000u) != 0 || (tu_bits(res[i]) & 0x7fffffffu) == 0,
                 "kind %d step %d elt %zu: subnormal residual %a", kind, t, i, (double)res[i]);
        float a = ftz_ref(g[i] + prev[i]);
        flushed += tu_bits(a) != tu_bits(g[i] + prev[i]); /* a itself was subnormal */
        double miss = fabs((double)out[i] + (double)res[i] - (double)a);
        double diff = (double)a - (double)out[i];
        if (diff != 0.0 && fabs(diff) < 0x1p-126) {
          flushed++;
          TU_CHECK(miss < 0x1p-126 && (tu_bits(res[i]) & 0x7fffffffu) == 0,
                   "kind %d step %d elt %zu: a %a, decode %a, res' %a", kind, t, i, (double)a,
                   (double)out[i], (double)res[i]);
        } else {
          TU_CHECK(miss == 0.0, "kind %d step %d elt %zu: a %a, decode %a, res' %a: not exact", kind, t,
                   i, (double)a, (double)out[i], (double)res[i]);
        }
        sum_d[i] += (double)out[i];
      }
    }
    ck_assert_msg(flushed > 0, "kind %d mixed %d: the data never reached the flush", kind, mixed);
    for (size_t i = 0; i < N; i++)
      TU_CHECK(fabs(sum_d[i] + (double)res[i] - sum_g[i]) < T * 0x1p-125, "kind %d elt %zu: lost %a", kind,
               i, sum_d[i] + (double)res[i] - sum_g[i]);
  }
}
END_TEST

#if defined(__x86_64__)
#include <immintrin.h>
/* The encoder sets flush-to-zero for its loops only: the caller's MXCSR
 * comes back unchanged, whatever it was. */
START_TEST(test_mxcsr_restored) {
  enum { N = 1000 };
  static float g[N], res[N], out[N];
  static uint16_t code[N];
  for (size_t i = 0; i < N; i++) g[i] = (float)i * 1e-3f;
  unsigned saved = _mm_getcsr();
  const unsigned modes[] = {0x1f80u /* default */, 0x9fc0u /* FTZ + DAZ */, 0x3f80u /* round down */};
  for (int m = 0; m < 3; m++) {
    _mm_setcsr(modes[m]);
    float mx = squall__absmax(g, res, N);
    squall__half_encode(SQ_HALF_FP16, g, res, code, N, 1.0f);
    squall__half_decode(SQ_HALF_FP16, code, out, N, 1.0f, 0);
    squall__half_encode(SQ_HALF_BF16, g, res, code, N, 1.0f);
    unsigned now = _mm_getcsr() & ~0x3fu; /* the sticky exception flags may change */
    _mm_setcsr(saved);
    ck_assert_msg(now == (modes[m] & ~0x3fu), "MXCSR 0x%x came back as 0x%x", modes[m], now);
    ck_assert(mx > 0.0f);
  }
}
END_TEST
#endif

/* Buffers one byte off their natural alignment give the same bytes as
 * aligned ones (memcpy-based scalar access, unaligned SIMD loads). */
START_TEST(test_unaligned_half) {
  const size_t lens[] = {1, 7, 33, 1000};
  for (size_t L = 0; L < 4; L++)
    for (int kind = 0; kind < 2; kind++) {
      size_t n = lens[L];
      float *g = malloc(n * 4), *res = malloc(n * 4), *out = malloc(n * 4);
      uint16_t *code = malloc(n * 2), *b = malloc(n * 2);
      char *gu = malloc(n * 4 + 1), *ru = malloc(n * 4 + 1), *ou = malloc(n * 4 + 1), *cu = malloc(n * 2 + 1),
           *bu = malloc(n * 2 + 1);
      tu_rng r = {5 + L};
      for (size_t i = 0; i < n; i++) {
        g[i] = tu_float_exp(&r, -10, 10);
        res[i] = (tu_next(&r) & 1) ? tu_float_exp(&r, -20, -12) : 0.0f;
        b[i] = (uint16_t)(0x3c00u + (tu_u32(&r) & 0x3ffu));
      }
      memcpy(gu + 1, g, n * 4);
      memcpy(ru + 1, res, n * 4);
      memcpy(bu + 1, b, n * 2);
      float m1 = squall__absmax(g, res, n), m2 = squall__absmax((const float *)(gu + 1), (const float *)(ru + 1), n);
      ck_assert_uint_eq(tu_bits(m1), tu_bits(m2));
      float scale = sq_pow2_scale(m1, SQ_F16_MAX);
      squall__half_encode((sq_half_kind)kind, g, res, code, n, scale);
      squall__half_encode((sq_half_kind)kind, (const float *)(gu + 1), (float *)(ru + 1), (uint16_t *)(cu + 1), n, scale);
      ck_assert(memcmp(code, cu + 1, n * 2) == 0);
      ck_assert(memcmp(res, ru + 1, n * 4) == 0);
      squall__half_decode((sq_half_kind)kind, code, out, n, scale, 0);
      squall__half_decode((sq_half_kind)kind, (const uint16_t *)(cu + 1), (float *)(ou + 1), n, scale, 0);
      ck_assert(memcmp(out, ou + 1, n * 4) == 0);
      squall__half_sum((sq_half_kind)kind, code, b, n);
      squall__half_sum((sq_half_kind)kind, (const uint16_t *)(cu + 1), (uint16_t *)(bu + 1), n);
      ck_assert(memcmp(b, bu + 1, n * 2) == 0);
      free(g);
      free(res);
      free(out);
      free(code);
      free(b);
      free(gu);
      free(ru);
      free(ou);
      free(cu);
      free(bu);
    }
}
END_TEST

/* One TCase per feature, so that CK_RUN_CASE=<name> runs just that one.
 * Timeouts leave room for a loaded machine (Check's default is 4 s). */
static Suite *half_suite(void) {
  Suite *s = suite_create("half");
  TCase *tc = tcase_create("f16-conversion");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_f16_all_patterns_roundtrip);
  tcase_add_test(tc, test_f16_matches_reference);
  suite_add_tcase(s, tc);
  tc = tcase_create("bf16-conversion");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_bf16_all_patterns_roundtrip);
  tcase_add_test(tc, test_bf16_matches_reference);
  suite_add_tcase(s, tc);
  tc = tcase_create("rounding");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_halfway_rounds_to_even);
  tcase_add_test(tc, test_overflow);
  tcase_add_test(tc, test_subnormals);
  suite_add_tcase(s, tc);
  tc = tcase_create("nan-inf");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_nan_inf_propagate);
  suite_add_tcase(s, tc);
  tc = tcase_create("error-feedback");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_ef_invariant);
  tcase_add_test(tc, test_ef_steps);
  suite_add_tcase(s, tc);
  tc = tcase_create("decode");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_decode_accumulate);
  suite_add_tcase(s, tc);
  tc = tcase_create("scale");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_absmax);
  tcase_add_test(tc, test_pow2_scale);
  suite_add_tcase(s, tc);
  tc = tcase_create("simd");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_arrays_match_per_element);
  suite_add_tcase(s, tc);
  return s;
}

/* A CPU without AVX, F16C or AVX2 takes the scalar loops: the same bits,
 * flushing included (MXCSR on x86, sq_ftz everywhere). */
START_TEST(test_scalar_matches_simd) {
  enum { N = 4099 };
  static float g[N], r1[N], r2[N], o1[N], o2[N];
  static uint16_t h1[N], h2[N], b1[N], b2[N];
  tu_rng r = {8080};
  for (int kind = 0; kind < 2; kind++) {
    for (size_t i = 0; i < N; i++) {
      uint64_t c = tu_below(&r, 4);
      g[i] = c == 0 ? tu_float(tu_u32(&r)) : c == 1 ? tu_float_unit(&r) * 3e-38f
                                                    : tu_float_exp(&r, -8, 8);
      r1[i] = r2[i] = (tu_next(&r) & 1) ? tu_float_exp(&r, -127, -10) : 0.0f;
      b1[i] = b2[i] = (uint16_t)tu_u32(&r);
    }
    squall__cpu_x86_disable(0);
    float m1 = squall__absmax(g, r1, N), s = sq_pow2_scale(m1, SQ_F16_MAX);
    squall__half_encode((sq_half_kind)kind, g, r1, h1, N, s);
    squall__half_decode((sq_half_kind)kind, h1, o1, N, s, 0);
    squall__half_sum((sq_half_kind)kind, h1, b1, N);
    squall__cpu_x86_disable(SQ_CPU_AVX | SQ_CPU_AVX2 | SQ_CPU_F16C);
    float m2 = squall__absmax(g, r2, N);
    squall__half_encode((sq_half_kind)kind, g, r2, h2, N, s);
    squall__half_decode((sq_half_kind)kind, h2, o2, N, s, 0);
    squall__half_sum((sq_half_kind)kind, h2, b2, N);
    squall__cpu_x86_disable(0);
    ck_assert_uint_eq(tu_bits(m1), tu_bits(m2));
    ck_assert(memcmp(h1, h2, sizeof h1) == 0);
    ck_assert(memcmp(r1, r2, sizeof r1) == 0);
    for (size_t i = 0; i < N; i++)
      ck_assert_msg(tu_bits(o1[i]) == tu_bits(o2[i]) || (tu_isnan(o1[i]) && tu_isnan(o2[i])), "decode %zu", i);
    for (size_t i = 0; i < N; i++) {
      float x = sq_half_to_f32((sq_half_kind)kind, b1[i]), y = sq_half_to_f32((sq_half_kind)kind, b2[i]);
      ck_assert_msg(b1[i] == b2[i] || (tu_isnan(x) && tu_isnan(y)), "sum %zu", i);
    }
  }
}
END_TEST

/* Large buffers, aligned or not: the same bits as the scalar loops, at
 * every offset. */
START_TEST(test_large_unaligned) {
  const size_t n = ((size_t)1 << 22) + 5;
  float *g = malloc(n * 4), *r1 = malloc(n * 4), *r2 = malloc(n * 4);
  char *o1 = malloc(n * 4 + 64), *o2 = malloc(n * 4 + 64), *c1 = malloc(n * 2 + 64), *c2 = malloc(n * 2 + 64);
  ck_assert(g && r1 && r2 && o1 && o2 && c1 && c2);
  tu_rng r = {606};
  for (size_t i = 0; i < n; i++) g[i] = tu_float_exp(&r, -12, 3);
  const size_t offs[] = {0, 6, 1}; /* 32-byte aligned; 4-byte aligned; not even that */
  for (int kind = 0; kind < 2; kind++)
    for (size_t oi = 0; oi < 3; oi++) {
      size_t off = offs[oi];
      for (size_t i = 0; i < n; i++) r1[i] = r2[i] = (i & 3) ? 0.0f : 0x1p-14f;
      float s = sq_pow2_scale(squall__absmax(g, r1, n), SQ_F16_MAX);
      squall__cpu_x86_disable(0);
      squall__half_encode((sq_half_kind)kind, g, r1, (uint16_t *)(c1 + off), n, s);
      squall__half_decode((sq_half_kind)kind, (uint16_t *)(c1 + off), (float *)(o1 + 2 * off), n, s, 0);
      squall__cpu_x86_disable(SQ_CPU_AVX | SQ_CPU_AVX2 | SQ_CPU_F16C);
      squall__half_encode((sq_half_kind)kind, g, r2, (uint16_t *)(c2 + off), n, s);
      squall__half_decode((sq_half_kind)kind, (uint16_t *)(c2 + off), (float *)(o2 + 2 * off), n, s, 0);
      squall__cpu_x86_disable(0);
      ck_assert_msg(memcmp(c1 + off, c2 + off, n * 2) == 0, "kind %d offset %zu: codes differ", kind, off);
      ck_assert_msg(memcmp(r1, r2, n * 4) == 0, "kind %d offset %zu: residuals differ", kind, off);
      ck_assert_msg(memcmp(o1 + 2 * off, o2 + 2 * off, n * 4) == 0, "kind %d offset %zu: decode differs", kind, off);
    }
  free(g);
  free(r1);
  free(r2);
  free(o1);
  free(o2);
  free(c1);
  free(c2);
}
END_TEST

/* The guessing encoder (the engine's host path when a tensor's previous
 * scale is known): one pass gives squall__absmax's maximum, and the codes
 * and residual of squall__half_encode at the agreed scale, bit for bit,
 * after a rescale where the guess missed; the scalar loops give the same.
 * Data spans many binades, with NaN, Inf, huge values that overflow at a
 * large guess, and no residual below 2^-126 (that flush is the one case
 * where a rescale may differ: squall__half_rescale). Streamed (cold)
 * codes are the same bits, at any address: one 16-byte aligned after a
 * scalar head, and an odd one (not streamed). */
START_TEST(test_encode_guess) {
  enum { N = 4099 };
  static float g[N], r0[N], rr[N], r1[N], r2[N];
  static uint16_t hr[N], h1[N], h2[N];
  static _Alignas(16) unsigned char hc[2 * N + 16];
  static _Alignas(32) float bk[N + 8]; /* backups at offsets 0..7 floats */
  tu_rng r = {4242};
  int clamped_overflow = 0;
  for (int kind = 0; kind < 2; kind++)
    for (int huge = 0; huge < 3; huge++) {
      for (size_t i = 0; i < N; i++) {
        uint64_t c = tu_below(&r, 64);
        /* huge 2: up to 2^127, where the fp16 scale reaches 2^-114 (its
         * floor, 2^-126, leaves no value below 2^127 that overflows at the
         * agreed scale: a floor of 2^-100 did, and the sum became Inf).
         * Not above 2^127: there both formats round a value near FLT_MAX
         * to a code that decodes to Inf at any power-of-two scale (fp16
         * from 0x1.ffep127, bf16 from 0x1.fep127). */
        g[i] = c == 0 ? __builtin_nanf("") : c == 1 ? -__builtin_inff()
                                                    : tu_float_exp(&r, -40, huge == 2 ? 126 : huge ? 60
                                                                                                   : 10);
        if (tu_next(&r) & 1) g[i] = -g[i];
        r0[i] = (tu_next(&r) & 1) ? tu_float_exp(&r, -30, -5) : 0.0f;
      }
      float limit = (kind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX) / 8, max_scale = kind ? 1.0f : 0x1p100f;
      float m = squall__absmax(g, r0, N), scale = sq_pow2_scale(m, limit);
      if (scale > max_scale) scale = max_scale;
      memcpy(rr, r0, sizeof rr);
      squall__half_encode((sq_half_kind)kind, g, rr, hr, N, scale);
      const float guesses[] = {scale, scale * 2, scale * 0x1p20f, scale / 4, 0x1p100f, 3.0f};
      for (size_t gi = 0; gi < sizeof guesses / sizeof guesses[0]; gi++)
        for (int mode = 3; mode >= 0; mode--) { /* 3, 2: cold, codes at byte 6, at byte 1; 1: simd; 0: scalar */
          float guess = guesses[gi];
          int simd = mode > 0, cold = mode > 1;
          float *res = simd ? r1 : r2;
          uint16_t *h = simd ? h1 : h2, *hw = cold ? (uint16_t *)(hc + (mode == 3 ? 6 : 1)) : h;
          memcpy(res, r0, sizeof r1);
          /* the backup at every float offset from a 32-byte boundary over
           * the guesses: streamed where aligned after the codes' head */
          float *backup = bk + gi % 8;
          memset(bk, 0, sizeof bk);
          squall__cpu_x86_disable(simd ? 0 : SQ_CPU_AVX | SQ_CPU_AVX2 | SQ_CPU_F16C);
          float mg = squall__half_encode_guess((sq_half_kind)kind, g, res, hw, N, guess, cold, backup);
          ck_assert_msg(memcmp(backup, r0, sizeof r0) == 0, "kind %d guess %a mode %d: the backup is not the residual",
                        kind, (double)guess, mode);
          int missed = squall__half_guess_missed((sq_half_kind)kind, guess, mg, scale);
          if (missed) squall__half_rescale((sq_half_kind)kind, res, hw, N, guess, scale);
          squall__cpu_x86_disable(0);
          if (cold) memcpy(h, hw, sizeof h1);
          ck_assert_msg(tu_bits(mg) == tu_bits(m), "kind %d guess %a: max %a, squall__absmax %a", kind,
                        (double)guess, (double)mg, (double)m);
          int overflow = 0; /* some finite a whose code at the guess decodes to Inf, per the definition */
          for (size_t i = 0; i < N; i++) {
            float a = g[i] + r0[i];
            uint16_t code = sq_half_encode_a((sq_half_kind)kind, a, NULL, guess);
            overflow |= tu_isfinite(a) && !tu_isfinite(sq_half_decode_elem((sq_half_kind)kind, code, guess));
          }
          clamped_overflow += overflow && guess == scale;
          ck_assert_msg(missed == (guess != scale || overflow), "kind %d guess %a scale %a: missed %d, overflow %d",
                        kind, (double)guess, (double)scale, missed, overflow);
          ck_assert_msg(memcmp(h, hr, sizeof hr) == 0, "kind %d guess %a mode %d: codes differ", kind,
                        (double)guess, mode);
          for (size_t i = 0; i < N; i++)
            ck_assert_msg(tu_bits(res[i]) == tu_bits(rr[i]), "kind %d guess %a mode %d elt %zu: res %a, want %a",
                          kind, (double)guess, mode, i, (double)res[i], (double)rr[i]);
        }
    }
  ck_assert_msg(clamped_overflow == 0, "%d encodes overflowed at the agreed scale", clamped_overflow);
  /* Cold codes of short lengths (within the scalar head, just past it, a
   * step or two of SIMD) at every 2-byte offset from a 16-byte boundary:
   * the bits of the plain encoder's. */
  for (int kind = 0; kind < 2; kind++)
    for (size_t n = 1; n <= 40; n += 3)
      for (size_t at = 0; at < 16; at += 2) {
        uint16_t *hw = (uint16_t *)(hc + at);
        memcpy(r1, r0, sizeof r1);
        memcpy(r2, r0, sizeof r2);
        float m1 = squall__half_encode_guess((sq_half_kind)kind, g, r1, h1, n, 1.0f, 0, NULL);
        memset(bk, 0, sizeof bk);
        float m2 = squall__half_encode_guess((sq_half_kind)kind, g, r2, hw, n, 1.0f, 1, bk + at / 2 % 8);
        ck_assert_msg(memcmp(bk + at / 2 % 8, r0, n * 4) == 0, "kind %d n %zu at %zu: backup differs", kind, n, at);
        ck_assert_msg(tu_bits(m1) == tu_bits(m2), "kind %d n %zu at %zu: max differs", kind, n, at);
        ck_assert_msg(memcmp(h1, hw, n * 2) == 0, "kind %d n %zu at %zu: cold codes differ", kind, n, at);
        ck_assert_msg(memcmp(r1, r2, n * 4) == 0, "kind %d n %zu at %zu: residuals differ", kind, n, at);
      }
}
END_TEST

/* A guess that overflows an element keeps its a, so the rescale still
 * delivers every bit of mass: decode + residual == a. */
START_TEST(test_rescale_conserves) {
  enum { N = 1000 };
  static float g[N], res[N], out[N];
  static uint16_t h[N];
  tu_rng r = {77};
  for (int kind = 0; kind < 2; kind++) {
    for (size_t i = 0; i < N; i++) {
      g[i] = tu_float_exp(&r, -20, 20);
      res[i] = tu_float_exp(&r, -30, -10);
    }
    float a[N];
    for (size_t i = 0; i < N; i++) a[i] = g[i] + res[i];
    float guess = 0x1p100f, scale = sq_pow2_scale(squall__absmax(g, res, N), SQ_F16_MAX);
    if (kind == SQ_HALF_BF16 && scale > 1.0f) scale = 1.0f;
    float m = squall__half_encode_guess((sq_half_kind)kind, g, res, h, N, kind ? 0x1p127f : guess, 0, NULL);
    ck_assert(squall__half_guess_missed((sq_half_kind)kind, kind ? 0x1p127f : guess, m, scale));
    squall__half_rescale((sq_half_kind)kind, res, h, N, kind ? 0x1p127f : guess, scale);
    squall__half_decode((sq_half_kind)kind, h, out, N, scale, 0);
    for (size_t i = 0; i < N; i++)
      ck_assert_msg(out[i] + res[i] == a[i], "kind %d elt %zu: %a + %a != %a", kind, i, (double)out[i],
                    (double)res[i], (double)a[i]);
  }
}
END_TEST

/* Subnormal flushing and buffer addresses (a case of its own, added last). */
static Suite *with_ftz(Suite *s) {
  TCase *tc = tcase_create("ftz");
  tcase_set_timeout(tc, 120); /* test_large_unaligned: 4M elements */
  tcase_add_test(tc, test_tiny_ef_bound);
#if defined(__x86_64__)
  tcase_add_test(tc, test_mxcsr_restored);
#endif
  tcase_add_test(tc, test_unaligned_half);
  tcase_add_test(tc, test_scalar_matches_simd);
  tcase_add_test(tc, test_large_unaligned);
  tcase_add_test(tc, test_encode_guess);
  tcase_add_test(tc, test_rescale_conserves);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(with_ftz(half_suite())); }

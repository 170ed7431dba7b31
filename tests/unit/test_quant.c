/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_quant.c - the quantised codecs (int8, int4, fp8 e4m3, per-bucket
 * power-of-two scales): every code decodes to what an independent
 * reference (libm ldexp, the e4m3 definition) gives; encoding rounds to the
 * nearest code, ties to even (checked against an exhaustive nearest-code
 * search); the error-feedback invariant decode(code) + res' == a holds bit
 * for bit; the scale rule and the special buckets (all zero, NaN/Inf,
 * subnormal, near FLT_MAX); the rank-ordered fp32 reductions; and that the
 * AVX2 loops give the scalar code's bytes on all of these.
 */
#include <float.h>
#include <math.h>
#if defined(__x86_64__)
#include <immintrin.h> /* _mm_getcsr: the MXCSR test */
#endif

#include "check_util.h"
#include "codecs/codec.h"

static const sq_quant_kind kinds[] = {SQ_QUANT_INT8, SQ_QUANT_INT4, SQ_QUANT_FP8};
static const char *kname[] = {"int8", "int4", "fp8"};

/* ------------------------------------------------------------ references */

/* The value of a code at scale exponent 0, from the format definitions. */
static double ref_code_value(sq_quant_kind k, unsigned c) {
  if (k == SQ_QUANT_INT8) return (double)(c < 128 ? (int)c : (int)c - 256);
  if (k == SQ_QUANT_INT4) return (double)(c < 8 ? (int)c : (int)c - 16);
  int e = (c >> 3) & 15, m = c & 7;
  double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
  return (c & 0x80) ? -v : v;
}

static int ref_is_marker(sq_quant_kind k, unsigned c) {
  return k == SQ_QUANT_INT8 ? c == 0x80 : k == SQ_QUANT_INT4 ? c == 8
                                                             : (c & 0x7f) == 0x7f;
}

static unsigned ncodes(sq_quant_kind k) { return k == SQ_QUANT_INT4 ? 16 : 256; }

/* Nearest non-marker code to x (scale 0), ties to the even code (even
 * integer; fp8: even mantissa bit pattern). For fp8 -0 and +0 are the same
 * value: the sign of x decides. */
static unsigned ref_nearest(sq_quant_kind k, double x) {
  unsigned best = 0;
  double bd = INFINITY;
  for (unsigned c = 0; c < ncodes(k); c++) {
    if (ref_is_marker(k, c)) continue;
    double v = ref_code_value(k, c), d = fabs(v - x);
    if (d < bd || (d == bd && (c & 1) == 0 && (best & 1) == 1)) {
      bd = d;
      best = c;
    }
  }
  if (k == SQ_QUANT_FP8 && (best & 0x7f) == 0) best = signbit(x) ? 0x80 : 0;
  return best;
}

/* A single-bucket buffer: header then codes. */
typedef struct {
  uint8_t b[2 + 4096];
} bucket_buf;

/* ------------------------------------------------------------ the codes */

START_TEST(test_every_code_decodes_to_reference) {
  static const int exps[] = {-126, -100, -7, -1, 0, 1, 5, 60, 127};
  for (int ki = 0; ki < 3; ki++) {
    sq_quant_kind k = kinds[ki];
    unsigned nc = ncodes(k);
    for (size_t ei = 0; ei < sizeof exps / sizeof exps[0]; ei++) {
      for (unsigned flags = 0; flags < 8; flags++) {
        bucket_buf bb;
        size_t n = nc;
        bb.b[0] = (uint8_t)(int8_t)exps[ei];
        bb.b[1] = (uint8_t)flags;
        for (unsigned c = 0; c < nc; c++) {
          if (k == SQ_QUANT_INT4) {
            if (c & 1) bb.b[2 + c / 2] |= (uint8_t)(c << 4);
            else bb.b[2 + c / 2] = (uint8_t)c;
          } else {
            bb.b[2 + c] = (uint8_t)c;
          }
        }
        float out[256];
        squall__quant_decode(k, n, bb.b, out, n, 0);
        for (unsigned c = 0; c < nc; c++) {
          if (ref_is_marker(k, c)) {
            float want = flags == 1 ? INFINITY : flags == 2 ? -INFINITY
                                                            : NAN;
            TU_CHECK(flags == 1 || flags == 2 ? out[c] == want : tu_isnan(out[c]),
                     "%s marker 0x%x flags %u decodes to %a", kname[ki], c, flags, (double)out[c]);
            continue;
          }
          /* as a float: past FLT_MAX that is Inf (codes the encoder never
           * emits at this scale, since it steps toward zero there) */
          float want = (float)ldexp(ref_code_value(k, c), -exps[ei]);
          TU_CHECK(tu_bits(out[c]) == tu_bits(want),
                   "%s code 0x%x at 2^%d: %a, reference %a", kname[ki], c, exps[ei], (double)out[c], (double)want);
        }
      }
    }
  }
}
END_TEST

/* The per-element e4m3 conversion on every representable value and on
 * every midpoint between neighbours (ties to even). */
START_TEST(test_fp8_conversion_exhaustive) {
  for (unsigned c = 0; c < 256; c++) {
    if (ref_is_marker(SQ_QUANT_FP8, c)) continue;
    float v = (float)ref_code_value(SQ_QUANT_FP8, c);
    ck_assert_uint_eq(sq_f32_to_e4m3(v), c);
    ck_assert(tu_bits(sq_e4m3_to_f32(c)) == tu_bits(v));
    if ((c & 0x7f) < 0x7e) { /* midpoint to the next larger magnitude */
      double mid = (ref_code_value(SQ_QUANT_FP8, c) + ref_code_value(SQ_QUANT_FP8, c + 1)) / 2;
      unsigned want = (c & 1) ? c + 1 : c;
      ck_assert_msg(sq_f32_to_e4m3((float)mid) == want, "midpoint %a -> 0x%x, want 0x%x", mid,
                    sq_f32_to_e4m3((float)mid), want);
    }
  }
}
END_TEST

/* Encoding at scale 1 (absmax pinned at the limit) picks the nearest code,
 * ties to even, for random and for tie inputs. */
START_TEST(test_encode_rounds_to_nearest_even) {
  tu_rng r = {7};
  for (int ki = 0; ki < 3; ki++) {
    sq_quant_kind k = kinds[ki];
    enum { N = 512 };
    float g[N];
    float lim = sq_quant_limit(k);
    g[0] = lim;
    for (size_t i = 1; i < N; i++) {
      if (i % 3 == 0) /* halfway between integers, or random fine points */
        g[i] = (float)((int)tu_below(&r, (uint64_t)(2 * lim)) - (int)lim) + 0.5f;
      else
        g[i] = tu_float_unit(&r) * lim;
      if (k == SQ_QUANT_FP8 && i % 5 == 0) g[i] = ldexpf(tu_float_unit(&r), -(int)tu_below(&r, 12));
    }
    uint8_t buf[2 + N];
    squall__quant_encode(k, N, g, NULL, buf, N);
    ck_assert_int_eq((int8_t)buf[0], 0);
    for (size_t i = 0; i < N; i++) {
      unsigned c = k == SQ_QUANT_INT4 ? (buf[2 + i / 2] >> (4 * (i & 1))) & 15 : buf[2 + i];
      unsigned want = ref_nearest(k, g[i]);
      if (k != SQ_QUANT_FP8 && ref_code_value(k, want) == 0) want = 0;
      TU_CHECK(c == want, "%s: %a encodes to 0x%x, nearest-even is 0x%x", kname[ki], (double)g[i], c, want);
    }
  }
}
END_TEST

/* ------------------------------------------------------------ the scale */

START_TEST(test_scale_rule) {
  tu_rng r = {11};
  for (int ki = 0; ki < 3; ki++) {
    sq_quant_kind k = kinds[ki];
    double lim = sq_quant_limit(k);
    for (int t = 0; t < 200000; t++) {
      float a = tu_float_exp(&r, -126, 127);
      a = fabsf(a);
      if (t % 7 == 0) a = tu_float(tu_u32(&r) & 0x007fffffu); /* subnormal */
      if (a == 0) continue;
      int s = sq_quant_exp(k, a);
      TU_CHECK(s >= -126 && s <= 127, "s=%d", s);
      TU_CHECK(ldexp(a, s) <= lim, "%s: %a * 2^%d > limit", kname[ki], (double)a, s);
      TU_CHECK(s == 127 || ldexp(a, s + 1) > lim, "%s: %a: 2^%d is not the largest", kname[ki], (double)a, s);
    }
    ck_assert_int_eq(sq_quant_exp(k, 0.0f), 0);
    ck_assert_int_eq(sq_quant_exp(k, INFINITY), 0);
    ck_assert_int_eq(sq_quant_exp(k, NAN), 0);
  }
}
END_TEST

/* ------------------------------------------------- error feedback invariant */

/* decode + res' == a bit for bit (zeros as values) over random buckets of
 * many magnitudes, with and without a prior residual, full and partial
 * last buckets. Non-finite a: res' = 0 and a non-finite decode. */
static void check_invariant(sq_quant_kind k, size_t bucket, int emin, int emax, uint64_t seed) {
  enum { N = 10000 };
  static float g[N], res[N], a[N], out[N];
  static uint8_t code[N * 2 + 4096];
  tu_rng r = {seed};
  for (size_t i = 0; i < N; i++) {
    /* each bucket gets its own magnitude range, so scales vary */
    size_t b = i / bucket;
    int lo = emin + (int)((b * 7) % (size_t)(emax - emin)), hi = lo + 3 < emax ? lo + 3 : emax;
    g[i] = tu_float_exp(&r, lo, hi);
    res[i] = (tu_next(&r) & 1) && lo > -122 ? tu_float_exp(&r, lo - 4, lo - 1) : 0.0f;
    if (i % 101 == 0) g[i] = (i & 1) ? 0.0f : -0.0f;
    if (i % 997 == 0) g[i] = tu_float(tu_u32(&r) & 0x807fffffu); /* subnormal */
    a[i] = g[i] + res[i];
  }
  squall__quant_encode(k, bucket, g, res, code, N);
  squall__quant_decode(k, bucket, code, out, N, 0);
  for (size_t i = 0; i < N; i++) {
    if (!tu_isfinite(a[i])) { /* g + res overflowed: delivered, not kept */
      unsigned flags = code[(i / bucket) * sq_quant_bucket_bytes(k, bucket) + 1];
      /* a bucket with both infinities delivers NaN (their sum's value) */
      TU_CHECK(res[i] == 0.0f && (flags == 3 ? tu_isnan(out[i]) : out[i] == a[i]),
               "%s: %a -> %a, res' %a, flags %u", kname[k], (double)a[i], (double)out[i],
               (double)res[i], flags);
      continue;
    }
    TU_CHECK(tu_same_value(out[i] + res[i], a[i]),
             "%s bucket %zu: a=%a decode=%a res'=%a", kname[k], bucket, (double)a[i], (double)out[i],
             (double)res[i]);
    TU_CHECK(tu_isfinite(out[i]), "%s: finite %a decodes to %a", kname[k], (double)a[i], (double)out[i]);
  }
}

START_TEST(test_ef_invariant) {
  static const size_t buckets[] = {8, 100, 512, 1024};
  for (int ki = 0; ki < 3; ki++)
    for (size_t b = 0; b < 4; b++) {
      check_invariant(kinds[ki], buckets[b], -20, 20, 100 + b);
      check_invariant(kinds[ki], buckets[b], -126, 127, 200 + b);
    }
}
END_TEST

/* Many steps of one rank: sum_t decode_t + res_T == sum_t g_t exactly on
 * dyadic data small enough that every float sum is exact. */
START_TEST(test_ef_steps) {
  enum { N = 3000,
         T = 40 };
  static float g[N], res[N], out[N];
  static double sum_g[N], sum_out[N];
  static uint8_t code[N * 2];
  tu_rng r = {5};
  for (int ki = 0; ki < 3; ki++) {
    memset(res, 0, sizeof res);
    memset(sum_g, 0, sizeof sum_g);
    memset(sum_out, 0, sizeof sum_out);
    for (int t = 0; t < T; t++) {
      for (size_t i = 0; i < N; i++) {
        g[i] = (float)((int)tu_below(&r, 4096) - 2048) / 1024.0f;
        sum_g[i] += g[i];
      }
      squall__quant_encode(kinds[ki], 256, g, res, code, N);
      squall__quant_decode(kinds[ki], 256, code, out, N, 0);
      for (size_t i = 0; i < N; i++) sum_out[i] += out[i];
    }
    for (size_t i = 0; i < N; i++)
      TU_CHECK(sum_out[i] + res[i] == sum_g[i], "%s: element %zu: %.17g + %.17g != %.17g", kname[ki], i,
               sum_out[i], (double)res[i], sum_g[i]);
  }
}
END_TEST

/* ------------------------------------------------------ special buckets */

static void encode1(sq_quant_kind k, const float *g, size_t n, float *res, uint8_t *buf, float *out) {
  squall__quant_encode(k, n, g, res, buf, n);
  squall__quant_decode(k, n, buf, out, n, 0);
}

START_TEST(test_all_zero_bucket) {
  for (int ki = 0; ki < 3; ki++) {
    float g[64] = {0}, res[64] = {0}, out[64];
    uint8_t buf[2 + 64];
    g[3] = -0.0f;
    encode1(kinds[ki], g, 64, res, buf, out);
    ck_assert_int_eq(buf[0], 0);
    ck_assert_int_eq(buf[1], 0);
    for (int i = 0; i < 64; i++) {
      ck_assert(out[i] == 0.0f && res[i] == 0.0f);
    }
  }
}
END_TEST

START_TEST(test_nonfinite_buckets) {
  for (int ki = 0; ki < 3; ki++) {
    sq_quant_kind k = kinds[ki];
    for (int which = 0; which < 4; which++) {
      float g[16], res[16] = {0}, out[16];
      uint8_t buf[2 + 16];
      for (int i = 0; i < 16; i++) g[i] = (float)(i - 8) * 0.25f;
      if (which == 0) g[5] = INFINITY;
      if (which == 1) g[5] = -INFINITY, g[9] = -INFINITY;
      if (which == 2) g[5] = NAN;
      if (which == 3) g[5] = INFINITY, g[9] = -INFINITY;
      res[5] = 0.5f; /* a residual on a non-finite element is dropped */
      encode1(k, g, 16, res, buf, out);
      ck_assert_int_eq(buf[1], which == 0 ? 1 : which == 1 ? 2
                                            : which == 2   ? 4
                                                           : 3);
      for (int i = 0; i < 16; i++) {
        if (!tu_isfinite(g[i])) {
          ck_assert_msg(which <= 1 ? out[i] == g[i] : tu_isnan(out[i]), "%s case %d elem %d: %a",
                        kname[ki], which, i, (double)out[i]);
          ck_assert(res[i] == 0.0f);
        } else {
          /* the finite values keep a scale set by the finite ones only */
          ck_assert_msg(out[i] + res[i] == g[i], "%s: finite %a lost", kname[ki], (double)g[i]);
          ck_assert(tu_isfinite(out[i]));
        }
      }
    }
  }
}
END_TEST

START_TEST(test_subnormal_bucket) {
  for (int ki = 0; ki < 3; ki++) {
    float g[32], res[32] = {0}, out[32];
    uint8_t buf[2 + 32];
    for (int i = 0; i < 32; i++) g[i] = tu_float((uint32_t)(i * 0x3f01 + 1) | (i & 1 ? 0x80000000u : 0));
    g[31] = tu_float(0x807fffffu); /* just below 2^-126: code about 2 at the largest scale */
    encode1(kinds[ki], g, 32, res, buf, out);
    ck_assert_int_eq((int8_t)buf[0], 127);
    for (int i = 0; i < 32; i++) ck_assert(out[i] + res[i] == g[i]);
    /* the largest element is sent, not left in the residual */
    ck_assert(out[31] != 0.0f);
  }
}
END_TEST

START_TEST(test_max_magnitude_bucket) {
  for (int ki = 0; ki < 3; ki++) {
    float g[8] = {FLT_MAX, -FLT_MAX, FLT_MAX / 3, 1.0f, -FLT_MAX / 1.5f, 0.0f, 1e30f, -1e38f};
    float res[8] = {0}, out[8];
    uint8_t buf[2 + 8];
    encode1(kinds[ki], g, 8, res, buf, out);
    for (int i = 0; i < 8; i++) {
      ck_assert_msg(tu_isfinite(out[i]), "%s: %a decodes to %a", kname[ki], (double)g[i], (double)out[i]);
      ck_assert_msg(out[i] + res[i] == g[i], "%s: invariant at %a", kname[ki], (double)g[i]);
    }
    ck_assert(out[0] > 0 && out[1] < 0);
  }
}
END_TEST

/* ------------------------------------------------------------ reductions */

START_TEST(test_reduce_in_rank_order) {
  enum { N = 1500,
         P = 5,
         B = 128 };
  static float g[P][N], out[N], d[N];
  tu_rng r = {3};
  for (int ki = 0; ki < 3; ki++) {
    sq_quant_kind k = kinds[ki];
    size_t bb = squall__quant_bytes(k, B, N) + 64;
    uint8_t *blocks = calloc(P, bb);
    for (int p = 0; p < P; p++) {
      for (size_t i = 0; i < N; i++) g[p][i] = tu_float_exp(&r, -10, 10);
      squall__quant_encode(k, B, g[p], NULL, blocks + p * bb, N);
    }
    squall__quant_reduce(k, B, blocks, P, bb, out, N);
    float want[N];
    for (int p = 0; p < P; p++) {
      squall__quant_decode(k, B, blocks + p * bb, d, N, 0);
      for (size_t i = 0; i < N; i++) want[i] = p ? want[i] + d[i] : d[i];
    }
    for (size_t i = 0; i < N; i++) TU_CHECK(tu_bits(out[i]) == tu_bits(want[i]), "%s elem %zu", kname[ki], i);
    free(blocks);
  }
  /* 16-bit codes */
  static uint16_t h[P * N];
  for (int kind = 0; kind < 2; kind++) {
    for (size_t i = 0; i < P * N; i++) h[i] = (uint16_t)(tu_u32(&r) & 0x3bff);
    squall__half_reduce((sq_half_kind)kind, h, P, N, out, N, 4.0f);
    for (size_t i = 0; i < N; i++) {
      float w = 0;
      for (int p = 0; p < P; p++) {
        float v = sq_half_to_f32((sq_half_kind)kind, h[p * N + i]) / 4.0f;
        w = p ? w + v : v;
      }
      TU_CHECK(tu_bits(out[i]) == tu_bits(w), "half kind %d elem %zu", kind, i);
    }
  }
}
END_TEST

/* The error of one encode is within half a code step of the bucket's scale
 * (int: 2^-s / 2; fp8: 2^-4 relative for normal codes plus the subnormal
 * step): the bound the README quotes. */
START_TEST(test_error_bound) {
  enum { N = 1 << 14,
         B = 512 };
  static float g[N], res[N], out[N];
  static uint8_t buf[N * 2];
  tu_rng r = {9};
  for (size_t i = 0; i < N; i++) g[i] = tu_float_unit(&r) * 3.0f;
  for (int ki = 0; ki < 3; ki++) {
    sq_quant_kind k = kinds[ki];
    memset(res, 0, sizeof res);
    squall__quant_encode(k, B, g, res, buf, N);
    squall__quant_decode(k, B, buf, out, N, 0);
    for (size_t i = 0; i < N; i++) {
      int s = (int8_t)buf[(i / B) * sq_quant_bucket_bytes(k, B)];
      double step = k == SQ_QUANT_FP8 ? fmax(ldexp(fabs(g[i]), -4), ldexp(1, -10 - s)) : ldexp(1, -1 - s);
      TU_CHECK(fabs((double)g[i] - out[i]) <= step, "%s: |%a - %a| > %g", kname[ki], (double)g[i],
               (double)out[i], step);
    }
  }
}
END_TEST

/* The array functions (with their vectorised fast paths) give the bits of
 * the per-element functions of codec_math.h, which the CUDA twins call:
 * encodes of buckets at every magnitude (fast and general paths), decodes
 * of random bytes (every header, flag and code). */
static void arrays_match_per_element(void) {
  enum { N = 4096,
         B = 256 };
  static float g[N], res[N], res2[N], out[N];
  static uint8_t buf[N * 2], rnd[N * 2];
  tu_rng r = {21};
  for (int ki = 0; ki < 3; ki++) {
    sq_quant_kind k = kinds[ki];
    size_t stride = sq_quant_bucket_bytes(k, B);
    for (size_t i = 0; i < N; i++) {
      int e = -140 + (int)((i / B) * 19 % 268); /* a range per bucket, up to float's top */
      g[i] = tu_float_exp(&r, e < -126 ? -126 : e > 127 ? 127
                                                        : e,
                          e + 2 > 127 ? 127 : e + 2 < -126 ? -126
                                                           : e + 2);
      res[i] = res2[i] = (i % 3) ? g[i] * 0.001f : 0.0f;
      if (i == 5 * B + 7) g[i] = NAN;
    }
    squall__quant_encode(k, B, g, res, buf, N);
    for (size_t b0 = 0; b0 < N; b0 += B) {
      float amax = 0;
      uint32_t flags = 0;
      for (size_t i = b0; i < b0 + B; i++) {
        float a = g[i] + res2[i];
        if (tu_isfinite(a)) amax = fabsf(a) > amax ? fabsf(a) : amax;
        else flags |= sq_quant_nf_flag(a);
      }
      int se = sq_quant_exp(k, amax);
      const uint8_t *o = buf + b0 / B * stride;
      TU_CHECK((int8_t)o[0] == se && o[1] == flags, "%s bucket %zu: header %d/%u, want %d/%u", kname[ki],
               b0 / B, (int8_t)o[0], o[1], se, flags);
      for (size_t i = b0; i < b0 + B; i++) {
        float a = g[i] + res2[i], d;
        uint32_t want = sq_quant_encode_elem(k, a, sq_pow2(se), sq_quant_inv_pow2(se), &d);
        size_t e = i - b0;
        uint32_t got = k == SQ_QUANT_INT4 ? (o[2 + e / 2] >> (4 * (e & 1))) & 15u : o[2 + e];
        TU_CHECK(got == want, "%s elem %zu (%a): code 0x%x, per-element 0x%x", kname[ki], i, (double)a, got, want);
        float rr = sq_quant_residual(a, d);
        TU_CHECK(tu_bits(res[i]) == tu_bits(rr), "%s elem %zu: residual %a, per-element %a", kname[ki], i,
                 (double)res[i], (double)rr);
      }
    }
    for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (uint8_t)tu_u32(&r);
    for (int acc = 0; acc < 2; acc++) {
      for (size_t i = 0; i < N; i++) out[i] = acc ? g[i] : 0.0f;
      squall__quant_decode(k, B, rnd, out, N, acc);
      for (size_t i = 0; i < N; i++) {
        const uint8_t *h = rnd + i / B * stride;
        size_t e = i % B;
        uint32_t c = k == SQ_QUANT_INT4 ? (h[2 + e / 2] >> (4 * (e & 1))) & 15u : h[2 + e];
        float d = sq_quant_decode_elem(k, c, sq_quant_inv_pow2((int8_t)h[0]), h[1]);
        float want = acc ? g[i] + d : d;
        TU_CHECK(tu_bits(out[i]) == tu_bits(want) || (tu_isnan(out[i]) && tu_isnan(want)),
                 "%s decode elem %zu: %a, per-element %a", kname[ki], i, (double)out[i], (double)want);
      }
    }
  }
}

/* Both the AVX2 loops (where the CPU has AVX2) and the scalar code. */
START_TEST(test_arrays_match_per_element) {
  squall__cpu_x86_disable(0);
  arrays_match_per_element();
  squall__cpu_x86_disable(SQ_CPU_AVX2);
  arrays_match_per_element();
  squall__cpu_x86_disable(0);
}
END_TEST

/* ------------------------------------------- vector loops == scalar code */

/* Inputs whose buckets are each of one kind: wide random magnitudes,
 * all-equal values, non-finite ones among finite, subnormals, values near
 * FLT_MAX (the scale clamp and the step toward zero), signed zeros, exact
 * ties at half a code step, magnitudes that push the scale exponent to
 * -100 and below (the general path), one infinity among finite values,
 * buckets of NaN or of one infinity only. The bucket's kind follows from its
 * index, so buffers of every length and bucket size mix them. */
static void fill_kinds(tu_rng *r, float *g, float *res, size_t n, size_t bucket) {
  for (size_t i = 0; i < n; i++) {
    size_t b = i / bucket;
    int e = (int)((b * 37) % 200) - 100;
    float x;
    switch (b % 12) {
    case 0: x = tu_float_exp(r, -126, 127); break;
    case 1: x = (b & 2 ? -1.0f : 1.0f) * ldexpf(1.375f, e); break; /* all equal */
    case 2: {
      x = tu_float_exp(r, e - 3, e);
      uint32_t u = tu_u32(r) % 64;
      if (u == 0) x = NAN;
      else if (u == 1) x = INFINITY;
      else if (u == 2 && (b & 1)) x = -INFINITY;
      break;
    }
    case 3: x = tu_float(tu_u32(r) & 0x807fffffu); break; /* subnormal or zero */
    case 4: x = (tu_next(r) & 1 ? -1.0f : 1.0f) * (FLT_MAX - ldexpf((float)tu_below(r, 64), 100)); break;
    case 5: x = tu_next(r) & 1 ? 0.0f : -0.0f; break;
    case 6: x = ldexpf((float)((int)tu_below(r, 255) - 127) + 0.5f, e / 10); break; /* ties */
    case 7: x = tu_float_exp(r, 100, 127); break;
    case 9: x = tu_below(r, 16) ? tu_float_exp(r, e - 3, e) : INFINITY; break;   /* flags +Inf only */
    case 10: x = tu_below(r, 16) ? tu_float_exp(r, e - 3, e) : -INFINITY; break; /* -Inf only */
    case 11: x = b & 2 ? NAN : (b & 4 ? -INFINITY : INFINITY); break;            /* all non-finite */
    default: x = tu_float_exp(r, e - 10, e); break;
    }
    g[i] = x;
    if (res) {
      uint32_t u = tu_u32(r) % 4;
      res[i] = u == 0 ? 0.0f : u == 1 ? -0.0f
                                      : x * 0.0078125f * tu_float_unit(r);
      if (!tu_isfinite(res[i])) res[i] = 0.0f;
    }
  }
}

/* Encode and decode (plain and accumulating) with AVX2 on and off: the same
 * bytes, residuals and float bits (NaN payloads included). Lengths with
 * tails shorter than a bucket and than a vector, odd counts (int4's last
 * nibble), buckets that are not multiples of the vector width, and inputs
 * that are only 4-byte aligned. */
START_TEST(test_simd_matches_scalar) {
  if (!squall__cpu_x86(SQ_CPU_AVX2)) fprintf(stderr, "test_quant: no AVX2 here, the scalar path runs twice\n");
  static const size_t lens[] = {1, 7, 15, 16, 31, 33, 100, 511, 512, 513, 1023, 5000, 9 * 512 + 17};
  static const size_t buckets[] = {8, 30, 33, 100, 512, 1024};
  enum { NMAX = 9 * 1024 + 64 };
  static float g[NMAX + 8], res0[NMAX + 8], res1[NMAX + 8], res2[NMAX + 8], out0[NMAX + 8], out1[NMAX + 8];
  static uint8_t c0[2 * NMAX + 4096], c1[2 * NMAX + 4096];
  tu_rng r = {31};
  for (int ki = 0; ki < 3; ki++)
    for (size_t bi = 0; bi < sizeof buckets / sizeof buckets[0]; bi++)
      for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int with_res = 0; with_res < 2; with_res++) {
          sq_quant_kind k = kinds[ki];
          size_t n = lens[li], bucket = buckets[bi], off = (li + bi) % 3; /* off: misaligned by floats */
          float *gp = g + off;
          fill_kinds(&r, gp, with_res ? res0 + off : NULL, n, bucket);
          memcpy(res1, res0, sizeof res0);
          memcpy(res2, res0, sizeof res0);
          size_t nb = squall__quant_bytes(k, bucket, n);
          memset(c0, 0xa5, nb + 8);
          memset(c1, 0x5a, nb + 8);
          squall__cpu_x86_disable(SQ_CPU_AVX2);
          squall__quant_encode(k, bucket, gp, with_res ? res1 + off : NULL, c0, n);
          squall__cpu_x86_disable(0);
          squall__quant_encode(k, bucket, gp, with_res ? res2 + off : NULL, c1, n);
          TU_CHECK(memcmp(c0, c1, nb) == 0, "%s bucket %zu n %zu res %d: encoded bytes differ", kname[ki],
                   bucket, n, with_res);
          for (size_t i = 0; i < n; i++)
            TU_CHECK(tu_bits(res1[off + i]) == tu_bits(res2[off + i]),
                     "%s bucket %zu n %zu elem %zu: residual %a (scalar) vs %a (avx2)", kname[ki], bucket, n, i,
                     (double)res1[off + i], (double)res2[off + i]);
          for (int acc = 0; acc < 2; acc++) {
            for (size_t i = 0; i < n; i++) out0[off + i] = out1[off + i] = acc ? gp[i] : -1.0f;
            squall__cpu_x86_disable(SQ_CPU_AVX2);
            squall__quant_decode(k, bucket, c0, out0 + off, n, acc);
            squall__cpu_x86_disable(0);
            squall__quant_decode(k, bucket, c0, out1 + off, n, acc);
            /* accumulating: which of two NaNs a sum keeps is the compiler's
             * choice (see test_simd_reduce_matches_scalar) */
            for (size_t i = 0; i < n; i++)
              TU_CHECK(tu_bits(out0[off + i]) == tu_bits(out1[off + i]) ||
                           (acc && tu_isnan(out0[off + i]) && tu_isnan(out1[off + i])),
                       "%s bucket %zu n %zu acc %d elem %zu: decode %a (scalar) vs %a (avx2)", kname[ki], bucket,
                       n, acc, i, (double)out0[off + i], (double)out1[off + i]);
          }
        }
}
END_TEST

/* Buckets of tiny values, whose scale exponent is 100 to 127 (the vector
 * loops form their products on the bits): the largest value of each at
 * 2^-90 .. 2^-149, with subnormals, zeros of both signs and normal values
 * among them, some with one non-finite value, and residuals as small;
 * encode (with a residual, over several steps, and without), decode and the
 * reduce of 4 ranks, with AVX2 on and off: the same bits. Then again with
 * the MXCSR's flush-to-zero and denormals-are-zero set, as -ffast-math or
 * torch.set_flush_denormal leave them: the codec runs with IEEE subnormals
 * whatever the caller set, and restores the caller's MXCSR. */
static void tiny_buckets(void) {
  enum { B = 64,
         NB = 60,
         N = B * NB,
         P = 4 };
  static float g[N], res0[N], res1[N], out0[N], out1[N];
  static uint8_t c0[2 * N + 256], c1[2 * N + 256], blocks[P * (2 * N + 256)];
  tu_rng r = {71};
  int tiny_scales = 0, same_tiny = 0;
  for (int ki = 0; ki < 3; ki++) {
    sq_quant_kind k = kinds[ki];
    size_t nb = squall__quant_bytes(k, B, N);
    for (int q = 0; q < P; q++) {
      for (size_t i = 0; i < N; i++) {
        int top = -90 - (int)(i / B); /* bucket b's values reach 2^(-90 - b) */
        uint32_t u = tu_u32(&r) % 8;
        float x;
        if (u < 2)
          x = 0.0f; /* signed below */
        else if (top >= -126 && u >= 4)
          x = tu_float_exp(&r, top - 20 < -126 ? -126 : top - 20, top);
        else /* subnormal: below 2^top where that is below 2^-126 */
          x = tu_float(tu_u32(&r) & (0x7fffffu >> (top >= -126 ? 0 : -126 - top > 22 ? 22
                                                                                     : -126 - top)));
        g[i] = (tu_next(&r) & 1) ? -x : x;
        if ((i / B) % 7 == 3 && (i % B == 5 || i % B == 13)) /* flagged, in either half of 16 lanes */
          g[i] = q & 1 ? NAN : (q & 2 ? -INFINITY : INFINITY);
        if ((i / B) % 7 == 5 && i % B == 21) /* +Inf, -Inf, ...: the sum is the default NaN */
          g[i] = q & 1 ? -INFINITY : INFINITY;
        res0[i] = (tu_next(&r) & 1) ? tu_float(tu_u32(&r) & 0x800fffffu) : 0.0f;
      }
      memcpy(res1, res0, sizeof res0);
      for (int step = 0; step < 3; step++) { /* residuals carried, as in training */
        squall__cpu_x86_disable(SQ_CPU_AVX2);
        squall__quant_encode(k, B, g, res0, c0, N);
        squall__cpu_x86_disable(0);
        squall__quant_encode(k, B, g, res1, c1, N);
        TU_CHECK(memcmp(c0, c1, nb) == 0, "%s rank %d step %d: encoded bytes differ", kname[ki], q, step);
        TU_CHECK(memcmp(res0, res1, sizeof res0) == 0, "%s rank %d step %d: residuals differ", kname[ki], q, step);
      }
      for (size_t o = 0; o < nb; o += sq_quant_bucket_bytes(k, B)) tiny_scales += (int8_t)c1[o] >= 100;
      squall__cpu_x86_disable(SQ_CPU_AVX2);
      squall__quant_encode(k, B, g, NULL, c0, N);
      squall__cpu_x86_disable(0);
      squall__quant_encode(k, B, g, NULL, c1, N);
      TU_CHECK(memcmp(c0, c1, nb) == 0, "%s rank %d: encoded bytes differ without a residual", kname[ki], q);
      for (int acc = 0; acc < 2; acc++) {
        for (size_t i = 0; i < N; i++) out0[i] = out1[i] = acc ? g[i] : -1.0f;
        squall__cpu_x86_disable(SQ_CPU_AVX2);
        squall__quant_decode(k, B, c1, out0, N, acc);
        squall__cpu_x86_disable(0);
        squall__quant_decode(k, B, c1, out1, N, acc);
        TU_CHECK(memcmp(out0, out1, sizeof out0) == 0, "%s rank %d acc %d: decodes differ", kname[ki], q, acc);
      }
      memcpy(blocks + (size_t)q * nb, c1, nb);
    }
    /* buckets whose tiny scale all ranks share (the reduce's same-scale
     * loop: every rank clamps at 127 from 2^-120 or so down) */
    int same_127 = 0, same_below = 0; /* s = 127 (2^-s subnormal) and 100 <= s < 127 */
    for (size_t o = 0; o < nb; o += sq_quant_bucket_bytes(k, B)) {
      int same = (int8_t)blocks[o] >= 100;
      for (int q = 1; q < P; q++) same &= blocks[(size_t)q * nb + o] == blocks[o];
      same_127 += same && (int8_t)blocks[o] == 127;
      same_below += same && (int8_t)blocks[o] < 127;
    }
    ck_assert_msg(same_127 > 0 && same_below > 0, "%s: buckets of one tiny scale on every rank: %d at 127, %d below",
                  kname[ki], same_127, same_below);
    same_tiny += same_127 + same_below;
    squall__cpu_x86_disable(SQ_CPU_AVX2);
    squall__quant_reduce(k, B, blocks, P, nb, out0, N);
    squall__cpu_x86_disable(0);
    squall__quant_reduce(k, B, blocks, P, nb, out1, N);
    TU_CHECK(memcmp(out0, out1, sizeof out0) == 0, "%s: reduces differ", kname[ki]);
  }
  ck_assert_msg(tiny_scales > 3 * P * NB / 2, "only %d buckets had a scale exponent of 100 or more", tiny_scales);
  ck_assert_msg(same_tiny > 3 * NB / 3, "only %d buckets had one tiny scale on every rank", same_tiny);
}

START_TEST(test_simd_tiny_buckets) {
  tiny_buckets();
#if defined(__x86_64__)
  unsigned old = _mm_getcsr();
  _mm_setcsr(old | 0x8040u); /* FTZ, DAZ */
  tiny_buckets();
  static float g[1000], res[1000], out[1000];
  static uint8_t c[1200];
  for (int i = 0; i < 1000; i++) g[i] = 0x1p-130f * (float)(i % 17);
  squall__quant_encode(SQ_QUANT_INT8, 100, g, res, c, 1000);
  squall__quant_decode(SQ_QUANT_INT8, 100, c, out, 1000, 0);
  squall__quant_reduce(SQ_QUANT_INT8, 100, c, 1, squall__quant_bytes(SQ_QUANT_INT8, 100, 1000), out, 1000);
  unsigned now = _mm_getcsr();
  _mm_setcsr(old);
  ck_assert_msg(now == (old | 0x8040u), "MXCSR %#x after the codec, %#x before", now, old | 0x8040u);
  for (int i = 0; i < 1000; i++) /* exact: out + res == g, subnormals and all */
    ck_assert_msg(out[i] + res[i] == g[i], "elt %d: %a + %a != %a", i, (double)out[i], (double)res[i], (double)g[i]);
#endif
}
END_TEST

/* Decodes of random bytes (every header, flag and code, the markers
 * among them) with AVX2 on and off. */
START_TEST(test_simd_decode_random_bytes) {
  enum { N = 8192 + 13 };
  static uint8_t in[2 * N + 4096];
  static float out0[N], out1[N];
  tu_rng r = {41};
  for (int ki = 0; ki < 3; ki++)
    for (size_t bucket = 8; bucket <= 1024; bucket *= 4) {
      sq_quant_kind k = kinds[ki];
      size_t nb = squall__quant_bytes(k, bucket, N);
      for (size_t i = 0; i < nb; i++) in[i] = (uint8_t)tu_u32(&r);
      /* most buckets without flags, so that the vector loops see them */
      size_t stride = sq_quant_bucket_bytes(k, bucket);
      for (size_t o = 0; o < nb; o += stride)
        if (tu_below(&r, 4)) in[o + 1] = 0;
      squall__cpu_x86_disable(SQ_CPU_AVX2);
      squall__quant_decode(k, bucket, in, out0, N, 0);
      squall__cpu_x86_disable(0);
      squall__quant_decode(k, bucket, in, out1, N, 0);
      TU_CHECK(memcmp(out0, out1, sizeof out0) == 0, "%s bucket %zu: decodes differ", kname[ki], bucket);
    }
}
END_TEST

/* A decode large enough for the streaming stores (4M elements), into an
 * aligned buffer and into one whose buckets alternate between 32-byte
 * aligned and not. */
START_TEST(test_simd_decode_streaming) {
  const size_t n = ((size_t)1 << 22) + 77, ob = ((n + 64) * sizeof(float) + 63) & ~(size_t)63;
  float *g = malloc((n + 8) * sizeof(float));
  float *o0 = aligned_alloc(64, ob), *o1 = aligned_alloc(64, ob); /* C11: a size that is a multiple of 64 */
  uint8_t *c = malloc(squall__quant_bytes(SQ_QUANT_INT8, 100, n) + 64);
  ck_assert(g && o0 && o1 && c);
  tu_rng r = {51};
  for (int ki = 0; ki < 3; ki++) {
    sq_quant_kind k = kinds[ki];
    size_t bucket = ki == 0 ? 512 : 100;
    fill_kinds(&r, g, NULL, n, bucket);
    squall__quant_encode(k, bucket, g, NULL, c, n);
    for (size_t off = 0; off <= 4; off += 4) {
      squall__cpu_x86_disable(SQ_CPU_AVX2);
      squall__quant_decode(k, bucket, c, o0 + off, n, 0);
      squall__cpu_x86_disable(0);
      squall__quant_decode(k, bucket, c, o1 + off, n, 0);
      ck_assert_msg(memcmp(o0 + off, o1 + off, n * sizeof(float)) == 0, "%s bucket %zu offset %zu: decodes differ",
                    kname[ki], bucket, off);
    }
  }
  free(g);
  free(o0);
  free(o1);
  free(c);
}
END_TEST

/* The encoder that backs the residual up on its way: the same codes and
 * residual as the plain encoder, and a backup that holds the residual as
 * it was, bit for bit (NaN-free by construction, -0 included), into a
 * backup on a 32-byte boundary (streamed) or off it, with AVX2 on and off;
 * nothing written past the end; no residual: no backup written. */
START_TEST(test_encode_backup) {
  static const size_t lens[] = {1, 9, 512, 513, 4000, 9 * 512 + 17};
  enum { NMAX = 9 * 512 + 17,
         PAD = 16 }; /* the longest of lens */
  float *g = malloc(NMAX * sizeof(float)), *res0 = malloc(NMAX * sizeof(float));
  float *res1 = malloc(NMAX * sizeof(float)), *res2 = malloc(NMAX * sizeof(float));
  float *bk = aligned_alloc(64, ((NMAX + PAD) * sizeof(float) + 63) / 64 * 64);
  uint8_t *c1 = malloc(2 * NMAX + 4096), *c2 = malloc(2 * NMAX + 4096);
  ck_assert(g && res0 && res1 && res2 && bk && c1 && c2);
  tu_rng r = {61};
  for (int avx = 0; avx < 2; avx++)
    for (int ki = 0; ki < 3; ki++)
      for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t off = 0; off <= 3; off += 3) {
          sq_quant_kind k = kinds[ki];
          size_t n = lens[li], bucket = li % 2 ? 100 : 512, nb = squall__quant_bytes(k, bucket, n);
          fill_kinds(&r, g, res0, n, bucket);
          memcpy(res1, res0, n * sizeof(float));
          memcpy(res2, res0, n * sizeof(float));
          memset(bk, 0xa5, (NMAX + PAD) * sizeof(float));
          squall__cpu_x86_disable(avx ? 0 : SQ_CPU_AVX2);
          squall__quant_encode(k, bucket, g, res1, c1, n);
          squall__quant_encode_backup(k, bucket, g, res2, c2, n, bk + off);
          squall__cpu_x86_disable(0);
          TU_CHECK(memcmp(c1, c2, nb) == 0, "%s n %zu: codes differ with a backup", kname[ki], n);
          TU_CHECK(memcmp(res1, res2, n * sizeof(float)) == 0, "%s n %zu: residuals differ with a backup", kname[ki],
                   n);
          TU_CHECK(memcmp(bk + off, res0, n * sizeof(float)) == 0,
                   "%s n %zu backup offset %zu avx2 %d: the backup is not the residual as it was", kname[ki], n, off,
                   avx);
          const unsigned char *tail = (const unsigned char *)(bk + off + n);
          for (size_t i = 0; i < 4 * (PAD - off); i++)
            TU_CHECK(tail[i] == 0xa5, "%s n %zu: the backup was written past its end", kname[ki], n);
          memset(bk, 0xa5, sizeof(float));
          squall__quant_encode_backup(k, bucket, g, NULL, c2, n, bk); /* no residual */
          TU_CHECK(((const unsigned char *)bk)[0] == 0xa5, "%s: a backup was written without a residual", kname[ki]);
        }
  free(g);
  free(res0);
  free(res1);
  free(res2);
  free(bk);
  free(c1);
  free(c2);
}
END_TEST

/* The reduce with AVX2 on and off: rank counts around the vector loop's
 * group of 32, buckets where some ranks have non-finite flags (the scalar
 * path for that bucket), tails, blocks further apart than their bytes. */
START_TEST(test_simd_reduce_matches_scalar) {
  static const int ranks[] = {1, 2, 3, 5, 32, 33, 70};
  static const size_t lens[] = {9, 100, 512, 1000, 3 * 512 + 5};
  static float g[3 * 512 + 5], out0[3 * 512 + 5], out1[3 * 512 + 5];
  tu_rng r = {61};
  for (int ki = 0; ki < 3; ki++)
    for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++)
      for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        sq_quant_kind k = kinds[ki];
        int p = ranks[ri];
        size_t n = lens[li], bucket = li % 2 ? 512 : 100;
        size_t bb = squall__quant_bytes(k, bucket, n) + 24;
        uint8_t *blocks = calloc((size_t)p, bb);
        ck_assert(blocks != NULL);
        for (int q = 0; q < p; q++) {
          fill_kinds(&r, g, NULL, n, bucket);
          /* mostly finite, so that whole buckets take the vector loops */
          for (size_t i = 0; i < n; i++)
            if (!tu_isfinite(g[i]) && tu_below(&r, 8)) g[i] = 1.0f;
          squall__quant_encode(k, bucket, g, NULL, blocks + (size_t)q * bb, n);
        }
        squall__cpu_x86_disable(SQ_CPU_AVX2);
        squall__quant_reduce(k, bucket, blocks, p, bb, out0, n);
        squall__cpu_x86_disable(0);
        squall__quant_reduce(k, bucket, blocks, p, bb, out1, n);
        for (size_t i = 0; i < n; i++) /* NaN: see below */
          TU_CHECK(tu_bits(out0[i]) == tu_bits(out1[i]) || (tu_isnan(out0[i]) && tu_isnan(out1[i])),
                   "%s p %d n %zu elem %zu: %a (scalar) vs %a (avx2)",
                   kname[ki], p, n, i, (double)out0[i], (double)out1[i]);
        free(blocks);
      }
  /* Every marker in one element across the ranks: +Inf, -Inf (their sum is
   * the default NaN), NaN, and a bucket with both infinities, in each order.
   * Which of two NaNs a sum keeps is the compiler's choice (it commutes
   * additions), in the scalar loop as in the vector one: a NaN is a NaN
   * here, and its re-encode is the same bytes either way (checked). */
  static const float specials[4] = {INFINITY, -INFINITY, NAN, 1.0f};
  for (int ki = 0; ki < 3; ki++)
    for (int perm = 0; perm < 24; perm++) {
      enum { P = 4,
             N = 48,
             B = 48 };
      int order[P] = {0, 1, 2, 3}, x = perm;
      for (int i = P - 1; i > 0; i--, x /= i + 1) { /* the perm-th permutation */
        int j = x % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
      }
      size_t bb = squall__quant_bytes(kinds[ki], B, N);
      uint8_t blocks[P * (2 + N)];
      for (int q = 0; q < P; q++) {
        for (size_t i = 0; i < N; i++) g[i] = (float)i - 20.0f;
        int sp = order[q];
        for (size_t i = 0; i < N; i += 3) g[i] = sp < 3 ? specials[sp] : (i & 1 ? INFINITY : -INFINITY);
        squall__quant_encode(kinds[ki], B, g, NULL, blocks + (size_t)q * bb, N);
      }
      squall__cpu_x86_disable(SQ_CPU_AVX2);
      squall__quant_reduce(kinds[ki], B, blocks, P, bb, out0, N);
      squall__cpu_x86_disable(0);
      squall__quant_reduce(kinds[ki], B, blocks, P, bb, out1, N);
      for (size_t i = 0; i < N; i++)
        TU_CHECK(tu_bits(out0[i]) == tu_bits(out1[i]) || (tu_isnan(out0[i]) && tu_isnan(out1[i])),
                 "%s order %d%d%d%d elem %zu: %a (scalar) vs %a (avx2)", kname[ki], order[0], order[1], order[2],
                 order[3], i, (double)out0[i], (double)out1[i]);
      uint8_t c0[2 + N], c1[2 + N];
      squall__quant_encode(kinds[ki], B, out0, NULL, c0, N);
      squall__quant_encode(kinds[ki], B, out1, NULL, c1, N);
      TU_CHECK(memcmp(c0, c1, bb) == 0, "%s order %d%d%d%d: the re-encoded sums differ", kname[ki], order[0],
               order[1], order[2], order[3]);
    }
}
END_TEST

/* The 16-bit reduce with the vector loops and without any SIMD: random
 * codes (NaN, Inf and subnormal halves among them), power-of-two scales
 * (the vector path) and others (the scalar one), tails, 1 to 33 ranks. */
START_TEST(test_simd_half_reduce_matches_scalar) {
  static const int ranks[] = {1, 2, 4, 33};
  static const size_t lens[] = {1, 15, 16, 17, 100, 1000};
  static const float scales[] = {1.0f, 4.0f, 0x1p-20f, 0x1p100f, 3.0f};
  enum { NMAX = 1000,
         PMAX = 33 };
  static uint16_t h[PMAX * (NMAX + 5)];
  static float out0[NMAX], out1[NMAX];
  tu_rng r = {71};
  for (int kind = 0; kind < 2; kind++)
    for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++)
      for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
          int p = ranks[ri];
          size_t n = lens[li], be = n + 5;
          for (size_t i = 0; i < (size_t)p * be; i++) h[i] = (uint16_t)tu_u32(&r);
          squall__cpu_x86_disable(SQ_CPU_AVX | SQ_CPU_AVX2 | SQ_CPU_F16C);
          squall__half_reduce((sq_half_kind)kind, h, p, be, out0, n, scales[si]);
          squall__cpu_x86_disable(0);
          squall__half_reduce((sq_half_kind)kind, h, p, be, out1, n, scales[si]);
          for (size_t i = 0; i < n; i++)
            TU_CHECK(tu_bits(out0[i]) == tu_bits(out1[i]) || (tu_isnan(out0[i]) && tu_isnan(out1[i])),
                     "half kind %d p %d n %zu scale %g elem %zu: %a (scalar) vs %a (simd)", kind, p, n,
                     (double)scales[si], i, (double)out0[i], (double)out1[i]);
        }
}
END_TEST

static Suite *quant_suite(void) {
  Suite *s = suite_create("quant");
  TCase *tc = tcase_create("codes");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_every_code_decodes_to_reference);
  tcase_add_test(tc, test_fp8_conversion_exhaustive);
  tcase_add_test(tc, test_encode_rounds_to_nearest_even);
  tcase_add_test(tc, test_scale_rule);
  suite_add_tcase(s, tc);
  tc = tcase_create("codec");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_ef_invariant);
  tcase_add_test(tc, test_ef_steps);
  tcase_add_test(tc, test_all_zero_bucket);
  tcase_add_test(tc, test_nonfinite_buckets);
  tcase_add_test(tc, test_subnormal_bucket);
  tcase_add_test(tc, test_max_magnitude_bucket);
  tcase_add_test(tc, test_reduce_in_rank_order);
  tcase_add_test(tc, test_error_bound);
  tcase_add_test(tc, test_arrays_match_per_element);
  suite_add_tcase(s, tc);
  tc = tcase_create("simd");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_simd_matches_scalar);
  tcase_add_test(tc, test_simd_tiny_buckets);
  tcase_add_test(tc, test_simd_decode_random_bytes);
  tcase_add_test(tc, test_simd_decode_streaming);
  tcase_add_test(tc, test_encode_backup);
  tcase_add_test(tc, test_simd_reduce_matches_scalar);
  tcase_add_test(tc, test_simd_half_reduce_matches_scalar);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(quant_suite()); }

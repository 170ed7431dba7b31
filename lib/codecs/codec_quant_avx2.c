/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * codec_quant_avx2.c - AVX2 inner loops of the quantised codecs, 8 lanes at
 * a time (see codec_quant_simd.h). Each lane computes what the scalar code
 * of codec_quant.c computes for its element, with the same IEEE
 * single-precision operations in the same order, so the bytes are
 * identical:
 *  - rounding to an integer is the add-and-subtract of 1.5 * 2^23 of
 *    sq_rne_int, not a round instruction (which keeps the sign of a zero
 *    that the addition turns into +0, and the residual a - 0 would differ
 *    for a = -0);
 *  - no FMA (target avx2 only): a * p and q * inv are separate products;
 *  - in a bucket of tiny values the products by powers of two are formed
 *    on the bits (scale_up, scale_down): the exact results, which the
 *    multiplies give too, since codec_quant.c runs every call with the
 *    MXCSR's flush-to-zero and denormals-are-zero bits clear.
 * Only codec_quant.c calls these, after checking squall__cpu_x86(AVX2).
 */
#include "codecs/codec_quant_simd.h"
#include "codecs/prefetch.h"

#ifdef SQ_QUANT_HAVE_AVX2
#include <immintrin.h>

#define SQ_AVX2 __attribute__((target("avx2")))
#define SQ_INLINE __attribute__((always_inline)) inline

static SQ_AVX2 SQ_INLINE __m256 load_a(const float *g, const float *res, size_t i) {
  __m256 a = _mm256_loadu_ps(g + i);
  return res ? _mm256_add_ps(a, _mm256_loadu_ps(res + i)) : a;
}

/* ---------------------------------------------------------- tiny buckets
 * A bucket whose values all lie below about 2^-90 has a scale exponent s of
 * SQ_QUANT_TINY_S or more (127 at most): its decode multiplier 2^-s is tiny
 * (at s = 127 itself subnormal), and so are many products code * 2^-s and,
 * once the residuals are that small, many inputs a. Some cores multiply
 * such operands at a fraction of the normal rate (the 2-core EPYC KVM
 * machines: fp8 on data around 1e-38 encoded 3x and decoded 3.6x slower
 * than on uniform data, the all-reduce ran 2x slower). Every product these
 * loops form with a power of two is exact (on float's grid: codec_math.h),
 * so in such buckets they are formed on the exponent and significand
 * fields instead of by a multiply: the same bits. Additions still meet
 * subnormals (the residual a - d is as small as the data); the cores
 * measured add them at full rate. */
#define SQ_QUANT_TINY_S 100

/* s of a decode multiplier inv = 2^-s (2^-127, the subnormal 0x00400000,
 * has exponent field 0, which gives 127 as well). */
static inline int exp_of_inv(float inv) { return 127 - (int)((sq_float_bits(inv) >> 23) & 0xffu); }

/* Whether the bucket of decode multiplier inv is a tiny one. */
static inline int tiny_bucket(float inv) { return exp_of_inv(inv) >= SQ_QUANT_TINY_S; }

/* v * 2^-s, s >= SQ_QUANT_TINY_S, v zero or a normal float whose product
 * is on float's grid (a code's value); kept as it is where not finite when
 * nonfinite != 0 (fp8's marker lanes). A normal product takes s off the
 * exponent field; a subnormal one's bits are the integer |v| * 2^(149 - s)
 * (its multiple of 2^-149, exact: below 2^23, on the grid), with v's sign.
 * sub_scale_inv = 2^(149 - s), a normal power of two: no operand of the
 * multiply is subnormal. */
static SQ_AVX2 SQ_INLINE __m256 scale_down(__m256 v, __m256i s23, __m256 sub_scale_inv, int nonfinite) {
  const __m256 signmask = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
  __m256 av = _mm256_andnot_ps(signmask, v);
  __m256 y = _mm256_mul_ps(av, sub_scale_inv);
  /* the lanes whose product is normal (or not finite) convert 2^23 instead
   * of an out-of-range y: no invalid-operation flag (min picks 2^23 for a
   * NaN y); the blend below drops them */
  __m256i yi = _mm256_cvttps_epi32(_mm256_min_ps(y, _mm256_set1_ps(0x1p23f)));
  __m256 sub = _mm256_or_ps(_mm256_castsi256_ps(yi), _mm256_and_ps(v, signmask));
  __m256 normal = _mm256_castsi256_ps(_mm256_sub_epi32(_mm256_castps_si256(v), s23));
  __m256 r = _mm256_blendv_ps(normal, sub, _mm256_cmp_ps(y, _mm256_set1_ps(0x1p23f), _CMP_LT_OQ));
  if (nonfinite) r = _mm256_blendv_ps(r, v, _mm256_cmp_ps(av, _mm256_set1_ps(__builtin_inff()), _CMP_NLT_UQ));
  return r;
}

/* a * 2^s, s >= SQ_QUANT_TINY_S, for the finite a of a bucket (whose
 * products are at most the format's limit): a normal a by adding s to its
 * exponent field, a subnormal one (or zero) as its significand times
 * sub_scale = 2^(s - 149), a normal power of two. Non-finite lanes give
 * some value: their codes are the marker. */
static SQ_AVX2 SQ_INLINE __m256 scale_up(__m256 a, __m256i s23, __m256 sub_scale) {
  __m256i b = _mm256_castps_si256(a);
  __m256i normal = _mm256_add_epi32(b, s23);
  __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(0x7fffff))), sub_scale);
  sub = _mm256_or_ps(sub, _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))));
  __m256i is_sub = _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
  return _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, _mm256_castsi256_ps(is_sub));
}

/* The scale of one bucket as the loops use it: p = 2^s and inv = 2^-s, or
 * in a tiny bucket s << 23, 2^(s - 149) and 2^(149 - s). */
typedef struct {
  __m256 p, inv, sub_scale, sub_scale_inv;
  __m256i s23;
  int tiny;
} qscale;

static SQ_AVX2 SQ_INLINE qscale qscale_of(float p, float inv) {
  int s = exp_of_inv(inv), tiny = tiny_bucket(inv); /* s < 0 in large buckets: no shift of it */
  qscale q = {_mm256_set1_ps(p), _mm256_set1_ps(inv), _mm256_set1_ps(tiny ? sq_pow2(s - 149) : 0.0f),
              _mm256_set1_ps(tiny ? sq_pow2(149 - s) : 0.0f), _mm256_set1_epi32(tiny ? s << 23 : 0), tiny};
  return q;
}

/* --------------------------------------------------------------- absmax */

/* The non-finite flags of a bucket (sq_quant_nf_flag over its a), for the
 * rare buckets that have some. */
static SQ_AVX2 SQ_INLINE uint32_t flags_loop(const float *g, const float *res, size_t m) {
  const __m256 pinf = _mm256_set1_ps(__builtin_inff()), ninf = _mm256_set1_ps(-__builtin_inff());
  __m256 fp = _mm256_setzero_ps(), fn = fp, fnan = fp;
  size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    __m256 a = load_a(g, res, i);
    fp = _mm256_or_ps(fp, _mm256_cmp_ps(a, pinf, _CMP_EQ_OQ));
    fn = _mm256_or_ps(fn, _mm256_cmp_ps(a, ninf, _CMP_EQ_OQ));
    fnan = _mm256_or_ps(fnan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  uint32_t flags = (_mm256_movemask_ps(fp) ? SQ_QUANT_NF_PINF : 0u) | (_mm256_movemask_ps(fn) ? SQ_QUANT_NF_NINF : 0u) |
                   (_mm256_movemask_ps(fnan) ? SQ_QUANT_NF_NAN : 0u);
  for (; i < m; i++) flags |= sq_quant_nf_flag(res ? g[i] + res[i] : g[i]);
  return flags;
}

static SQ_AVX2 SQ_INLINE uint32_t absmax_loop(const float *g, const float *res, size_t m, float *amax) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0, bad = m0;
  size_t i = 0;
/* |a| where finite, else 0 (and the lane marked bad): max over nonnegative
 * finite floats, whatever the order, is the scalar loop's value. */
#define SQ_ABSMAX_STEP(acc, off)                                  \
  do {                                                            \
    __m256 x = _mm256_and_ps(load_a(g, res, i + (off)), absmask); \
    __m256 fin = _mm256_cmp_ps(x, inf, _CMP_LT_OQ);               \
    acc = _mm256_max_ps(acc, _mm256_and_ps(x, fin));              \
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(x, inf, _CMP_NLT_UQ));  \
  } while (0)
  for (; i + 32 <= m; i += 32) {
    SQ_ABSMAX_STEP(m0, 0);
    SQ_ABSMAX_STEP(m1, 8);
    SQ_ABSMAX_STEP(m2, 16);
    SQ_ABSMAX_STEP(m3, 24);
  }
  for (; i + 8 <= m; i += 8) SQ_ABSMAX_STEP(m0, 0);
#undef SQ_ABSMAX_STEP
  __m256 mm = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(mm), _mm256_extractf128_ps(mm, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  float r = _mm_cvtss_f32(h);
  int nf = _mm256_movemask_ps(bad) != 0;
  for (; i < m; i++) {
    float a = res ? g[i] + res[i] : g[i];
    uint32_t b = sq_float_bits(a) & 0x7fffffffu;
    if (b < 0x7f800000u) {
      float x = sq_bits_float(b);
      r = x > r ? x : r;
    } else {
      nf = 1;
    }
  }
  *amax = r;
  return nf ? flags_loop(g, res, m) : 0u;
}

SQ_AVX2 uint32_t squall__qx_absmax(const float *g, const float *res, size_t m, float *amax) {
  return res ? absmax_loop(g, res, m, amax) : absmax_loop(g, NULL, m, amax);
}

/* --------------------------------------------------------------- encode */

/* Packs 4 x 8 int32 lanes (values that fit) into 32 bytes in lane order,
 * signed (int codes) or unsigned (fp8 codes 0..255) saturation. */
static SQ_AVX2 SQ_INLINE __m256i pack_bytes(__m256i v0, __m256i v1, __m256i v2, __m256i v3, int is_unsigned) {
  __m256i w01 = _mm256_packs_epi32(v0, v1), w23 = _mm256_packs_epi32(v2, v3);
  __m256i b = is_unsigned ? _mm256_packus_epi16(w01, w23) : _mm256_packs_epi16(w01, w23);
  /* the packs work per 128-bit half: dwords come out as v0lo v1lo v2lo v3lo v0hi ... */
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* a * p and v * inv, in a tiny bucket from the fields (same bits). */
static SQ_AVX2 SQ_INLINE __m256 times_p(__m256 a, const qscale *sc, int tiny) {
  return tiny ? scale_up(a, sc->s23, sc->sub_scale) : _mm256_mul_ps(a, sc->p);
}
static SQ_AVX2 SQ_INLINE __m256 times_inv(__m256 v, const qscale *sc, int tiny, int nonfinite) {
  return tiny ? scale_down(v, sc->s23, sc->sub_scale_inv, nonfinite) : _mm256_mul_ps(v, sc->inv);
}

/* encode_int_fast per lane: q = rne(a * p), *d = q * inv (the decode). */
static SQ_AVX2 SQ_INLINE __m256i quant_int8(__m256 a, const qscale *sc, int tiny, __m256 *d) {
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  __m256 q = _mm256_sub_ps(_mm256_add_ps(times_p(a, sc, tiny), magic), magic);
  *d = times_inv(q, sc, tiny, 0);
  return _mm256_cvttps_epi32(q); /* an integer of at most 127 in magnitude (finite a): exact */
}

/* encode_fp8_fast per lane: the e4m3 code of a * p, *d its decode. */
static SQ_AVX2 SQ_INLINE __m256i quant_fp8(__m256 a, const qscale *sc, int tiny, __m256 *d) {
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  __m256i b = _mm256_castps_si256(times_p(a, sc, tiny));
  __m256i sign = _mm256_and_si256(b, _mm256_set1_epi32((int)0x80000000u));
  __m256i ax = _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(ax, 20), _mm256_set1_epi32(1));
  __m256i rnd = _mm256_add_epi32(_mm256_add_epi32(ax, _mm256_set1_epi32(0x7ffff)), lsb);
  __m256 sub = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_castsi256_ps(ax), _mm256_set1_ps(512.0f)), magic),
                             magic);
  __m256i normal = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x3c800000 - 1)); /* ax < 2^31: signed is fine */
  __m256i code = _mm256_blendv_epi8(_mm256_cvttps_epi32(sub),
                                    _mm256_sub_epi32(_mm256_srli_epi32(rnd, 20), _mm256_set1_epi32(960)), normal);
  __m256 mag = _mm256_blendv_ps(_mm256_mul_ps(sub, _mm256_set1_ps(0.001953125f)),
                                _mm256_castsi256_ps(_mm256_and_si256(rnd, _mm256_set1_epi32((int)0xfff00000u))),
                                _mm256_castsi256_ps(normal));
  *d = times_inv(_mm256_or_ps(mag, _mm256_castsi256_ps(sign)), sc, tiny, 0);
  return _mm256_or_si256(code, _mm256_srli_epi32(sign, 24));
}

/* flagged: the bucket has non-finite values (sq_quant_encode_elem's first
 * branch): those lanes get the marker code and a residual of 0, the finite
 * ones what the fast path gives them (the same bits as the general path's,
 * the scale being above 2^-100). */

static SQ_AVX2 SQ_INLINE size_t encode_loop(sq_quant_kind k, const float *g, float *res, uint8_t *c, size_t m,
                                            float ps, float invs, int flagged, int tiny) {
  const qscale sc = qscale_of(ps, invs);
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  const __m256i marker = _mm256_set1_epi32(k == SQ_QUANT_INT8 ? -128 : k == SQ_QUANT_INT4 ? -8
                                                                                          : 0x7f);
  size_t i = 0;
  for (; i + 32 <= m; i += 32) {
    __m256i v[4];
    /* the next bucket's inputs, while this one computes from L1 (past the
     * last bucket a prefetch is harmless: it never faults; the address is
     * formed as an integer, since no pointer may point there) */
    sq_prefetch_lines2(g, 4 * (m + i)); /* p[m + i .. m + i + 32) */
    if (res) sq_prefetch_lines2(res, 4 * (m + i));
    for (int j = 0; j < 4; j++) {
      size_t o = i + 8 * (size_t)j;
      __m256 a = load_a(g, res, o), d;
      v[j] = k == SQ_QUANT_FP8 ? quant_fp8(a, &sc, tiny, &d) : quant_int8(a, &sc, tiny, &d);
      __m256 r = _mm256_sub_ps(a, d);
      if (flagged) {
        __m256 fin = _mm256_cmp_ps(_mm256_and_ps(a, absmask), inf, _CMP_LT_OQ);
        v[j] = _mm256_blendv_epi8(marker, v[j], _mm256_castps_si256(fin));
        r = _mm256_and_ps(r, fin);
      }
      if (res) _mm256_storeu_ps(res + o, r);
    }
    __m256i bytes = pack_bytes(v[0], v[1], v[2], v[3], k == SQ_QUANT_FP8);
    if (k != SQ_QUANT_INT4) {
      _mm256_storeu_si256((__m256i *)(c + i), bytes);
    } else {
      /* byte pairs (even, odd element) as 16-bit words: low nibble of the
       * even one, then the low nibble of the odd one above it */
      __m256i lo = _mm256_and_si256(bytes, _mm256_set1_epi16(0x000f));
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi16(0x00f0));
      __m256i w = _mm256_or_si256(lo, hi);
      _mm_storeu_si128((__m128i *)(c + i / 2),
                       _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
    }
  }
  return i;
}

#define SQ_ENCODE_RES(K, F, T) \
  return res ? encode_loop(K, g, res, c, m, p, inv, F, T) : encode_loop(K, g, NULL, c, m, p, inv, F, T)
#define SQ_ENCODE_CASE(K)                  \
  case K:                                  \
    if (tiny) {                            \
      if (flagged) SQ_ENCODE_RES(K, 1, 1); \
      SQ_ENCODE_RES(K, 0, 1);              \
    }                                      \
    if (flagged) SQ_ENCODE_RES(K, 1, 0);   \
    SQ_ENCODE_RES(K, 0, 0)

SQ_AVX2 size_t squall__qx_encode(sq_quant_kind k, const float *g, float *res, uint8_t *c, size_t m, float p,
                                 float inv, int flagged) {
  /* constant kind, residual, flag and scale path per instance: no
   * per-element tests */
  int tiny = tiny_bucket(inv);
  switch (k) {
    SQ_ENCODE_CASE(SQ_QUANT_INT8);
    SQ_ENCODE_CASE(SQ_QUANT_INT4);
  default:
    SQ_ENCODE_CASE(SQ_QUANT_FP8);
  }
}
#undef SQ_ENCODE_CASE
#undef SQ_ENCODE_RES

/* ----------------------------------------------------------------- copy */

SQ_AVX2 size_t squall__qx_copy_stream(float *dst, const float *src, size_t m) {
  size_t i = 0;
  for (; i + 8 <= m; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  return i;
}

/* --------------------------------------------------------------- decode */

/* 16 e4m3 codes times inv, the marker lanes mv. Every e4m3 value is a
 * float whose low 16 bits are zero (it has 3 mantissa bits), so the codes
 * become the top halves of their floats in 16-bit lanes, 16 at a time: the
 * exponent field e > 0 gives (e + 120) << 7 | m << 4 (sq_e4m3_to_f32's
 * float, shifted), e = 0 the top half of m * 2^-9 from a table; then the
 * sign, and the marker's value, whose low half is zero too (+-Inf, the NaN
 * 0x7fc00000). That value times inv is itself (inv = 2^-s > 0), which is
 * what the scalar paths give the marker, so it can be chosen before the
 * multiply. */
static SQ_AVX2 SQ_INLINE void e4m3_decode16(__m128i bytes, const qscale *sc, int tiny, __m256 mv, __m256 *v0,
                                            __m256 *v1) {
  /* qwords reordered 0 2 1 3: the unpacks below then give elements 0..7
   * and 8..15 (they interleave within 128-bit halves) */
  __m256i w = _mm256_permute4x64_epi64(_mm256_cvtepu8_epi16(bytes), 0xd8);
  __m256i mag7 = _mm256_and_si256(w, _mm256_set1_epi16(0x7f));
  __m256i normal = _mm256_add_epi16(_mm256_slli_epi16(mag7, 4), _mm256_set1_epi16(120 << 7));
  const __m256i sub_hi = _mm256_setr_epi8(0, 0x3b, 0x3b, 0x3b, 0x3c, 0x3c, 0x3c, 0x3c, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0x3b, 0x3b, 0x3b, 0x3c, 0x3c, 0x3c, 0x3c, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256i sub_lo = _mm256_setr_epi8(0, 0, (char)0x80, (char)0xc0, 0, 0x20, 0x40, 0x60, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0, 0, (char)0x80, (char)0xc0, 0, 0x20, 0x40, 0x60, 0, 0, 0, 0, 0, 0, 0, 0);
  __m256i m = _mm256_and_si256(w, _mm256_set1_epi16(7)); /* the high byte's index 0 looks up 0 */
  __m256i sub = _mm256_or_si256(_mm256_slli_epi16(_mm256_shuffle_epi8(sub_hi, m), 8), _mm256_shuffle_epi8(sub_lo, m));
  __m256i top = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi16(_mm256_set1_epi16(8), mag7));
  top = _mm256_or_si256(top, _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8));
  __m256i mvi = _mm256_castps_si256(mv);
  __m256i mv16 = _mm256_or_si256(mvi, _mm256_srli_epi32(mvi, 16)); /* its top half in both 16-bit lanes */
  top = _mm256_blendv_epi8(top, mv16, _mm256_cmpeq_epi16(mag7, _mm256_set1_epi16(0x7f)));
  __m256i zero = _mm256_setzero_si256();
  *v0 = times_inv(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, top)), sc, tiny, 1);
  *v1 = times_inv(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, top)), sc, tiny, 1);
}

/* The decodes of 16 codes from element i on, as two vectors: the code's
 * value at scale 1 times inv (code_table's entry times 2^-s), and the
 * marker's value for the bucket's flags where the code is the marker. With
 * no flags that value is the NaN 0x7fc00000, which is also what the
 * table's NaN times inv gives: one rule for both scalar paths. */
static SQ_AVX2 SQ_INLINE void decode16(sq_quant_kind k, const uint8_t *c, size_t i, const qscale *sc, int tiny,
                                       __m256 mv, __m256 *v0, __m256 *v1) {
  __m256i x0, x1, mk0, mk1;
  if (k == SQ_QUANT_INT4) {
    __m128i b = _mm_loadl_epi64((const __m128i *)(c + i / 2));
    __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0f));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
    __m128i n = _mm_unpacklo_epi8(lo, hi);                                  /* nibbles in element order */
    n = _mm_sub_epi8(_mm_xor_si128(n, _mm_set1_epi8(8)), _mm_set1_epi8(8)); /* sign-extend 4 bits */
    x0 = _mm256_cvtepi8_epi32(n);
    x1 = _mm256_cvtepi8_epi32(_mm_srli_si128(n, 8));
  } else {
    __m128i b = _mm_loadu_si128((const __m128i *)(c + i));
    if (k == SQ_QUANT_FP8) {
      e4m3_decode16(b, sc, tiny, mv, v0, v1);
      return;
    }
    x0 = _mm256_cvtepi8_epi32(b);
    x1 = _mm256_cvtepi8_epi32(_mm_srli_si128(b, 8));
  }
  const __m256i marker = _mm256_set1_epi32(k == SQ_QUANT_INT8 ? -128 : -8);
  mk0 = _mm256_cmpeq_epi32(x0, marker);
  mk1 = _mm256_cmpeq_epi32(x1, marker);
  *v0 = _mm256_blendv_ps(times_inv(_mm256_cvtepi32_ps(x0), sc, tiny, 0), mv, _mm256_castsi256_ps(mk0));
  *v1 = _mm256_blendv_ps(times_inv(_mm256_cvtepi32_ps(x1), sc, tiny, 0), mv, _mm256_castsi256_ps(mk1));
}

static SQ_AVX2 SQ_INLINE void store8(float *p, __m256 v, int stream) {
  if (stream) _mm256_stream_ps(p, v);
  else _mm256_storeu_ps(p, v);
}

static SQ_AVX2 SQ_INLINE size_t decode_loop(sq_quant_kind k, const uint8_t *c, float invs, float marker,
                                            float *out, size_t m, int accumulate, int stream, int tiny) {
  const qscale sc = qscale_of(1.0f, invs);
  const __m256 mv = _mm256_set1_ps(marker);
  size_t i = 0;
  for (; i + 16 <= m; i += 16) {
    __m256 d0, d1;
    decode16(k, c, i, &sc, tiny, mv, &d0, &d1);
    if (accumulate) {
      d0 = _mm256_add_ps(_mm256_loadu_ps(out + i), d0);
      d1 = _mm256_add_ps(_mm256_loadu_ps(out + i + 8), d1);
    }
    store8(out + i, d0, stream);
    store8(out + i + 8, d1, stream);
  }
  return i;
}

#define SQ_DECODE_TINY(K, A, S) \
  return tiny ? decode_loop(K, c, inv, marker, out, m, A, S, 1) : decode_loop(K, c, inv, marker, out, m, A, S, 0)
#define SQ_DECODE_CASE(K)                    \
  case K:                                    \
    if (accumulate) SQ_DECODE_TINY(K, 1, 0); \
    if (stream) SQ_DECODE_TINY(K, 0, 1);     \
    SQ_DECODE_TINY(K, 0, 0)

SQ_AVX2 size_t squall__qx_decode(sq_quant_kind k, const uint8_t *c, float inv, float marker, float *out, size_t m,
                                 int accumulate, int stream) {
  int tiny = tiny_bucket(inv);
  switch (k) {
    SQ_DECODE_CASE(SQ_QUANT_INT8);
    SQ_DECODE_CASE(SQ_QUANT_INT4);
  default:
    SQ_DECODE_CASE(SQ_QUANT_FP8);
  }
}
#undef SQ_DECODE_CASE
#undef SQ_DECODE_TINY

/* --------------------------------------------------------------- reduce */

/* One rank's decode of 16 elements, by the tiny bucket's path where its
 * scale needs it (the same for all of a bucket: a predictable branch). */
static SQ_AVX2 SQ_INLINE void decode16_any(sq_quant_kind k, const uint8_t *c, size_t i, const qscale *sc,
                                           __m256 mv, __m256 *v0, __m256 *v1) {
  if (sc->tiny)
    decode16(k, c, i, sc, 1, mv, v0, v1);
  else
    decode16(k, c, i, sc, 0, mv, v0, v1);
}

/* The sum stays in registers across the blocks: acc = d_0, acc = acc + d_r
 * (or acc = out, acc = acc + d_r), the scalar order, stored once. One
 * thing C leaves open, here as in the scalar loop: which NaN a sum of two
 * NaNs returns (x86 keeps the first operand's, and compilers commute the
 * operands of an addition freely). Two NaNs meet only where a rank's
 * marker meets the NaN of +Inf + -Inf; either way the element is NaN, and
 * re-encoding it sends the same bytes (the NaN flag and the marker). */
static SQ_AVX2 SQ_INLINE size_t reduce_loop(sq_quant_kind k, const uint8_t *const *codes, const float *inv,
                                            const float *marker, int nblocks, float *out, size_t m, int accumulate) {
  qscale sc[SQ_QX_REDUCE_MAX_BLOCKS];
  __m256 mv[SQ_QX_REDUCE_MAX_BLOCKS];
  for (int r = 0; r < nblocks; r++) {
    sc[r] = qscale_of(1.0f, inv[r]);
    mv[r] = _mm256_set1_ps(marker[r]);
  }
  size_t i = 0;
  for (; i + 16 <= m; i += 16) {
    __m256 a0, a1;
    int r = 0;
    if (accumulate) {
      a0 = _mm256_loadu_ps(out + i);
      a1 = _mm256_loadu_ps(out + i + 8);
    } else {
      decode16_any(k, codes[0], i, &sc[0], mv[0], &a0, &a1);
      r = 1;
    }
    for (; r < nblocks; r++) {
      __m256 d0, d1;
      decode16_any(k, codes[r], i, &sc[r], mv[r], &d0, &d1);
      a0 = _mm256_add_ps(a0, d0);
      a1 = _mm256_add_ps(a1, d1);
    }
    _mm256_storeu_ps(out + i, a0);
    _mm256_storeu_ps(out + i + 8, a1);
  }
  return i;
}

/* A tiny bucket that every rank scaled alike (tiny data does: its scale
 * exponent clamps at 127 on every rank): the codes' values are summed at
 * scale 1 and the sum takes the bit-level product by 2^-s once, where
 * reduce_loop would take it for every rank. The same bits: every code
 * value is a multiple of 2^-9 below 2^9 (int codes: integers below 2^7),
 * so a sum of at most SQ_QX_REDUCE_MAX_BLOCKS of them is below 2^23 units
 * of 2^-9 and exact at scale 1; times 2^-s (s <= 127) every partial sum is
 * still a multiple of 2^-149 below 2^23 of its units or a normal float
 * with 24 bits, exact too. Exact partial sums in both domains are the
 * same sums, scaled. Marker lanes carry their non-finite value through
 * both (the same operands in the same order), which scale_down keeps. */
static SQ_AVX2 SQ_INLINE size_t reduce_same_tiny_loop(sq_quant_kind k, const uint8_t *const *codes, float inv,
                                                      const float *marker, int nblocks, float *out, size_t m) {
  const qscale unit = qscale_of(1.0f, 1.0f), sc = qscale_of(1.0f, inv);
  __m256 mv[SQ_QX_REDUCE_MAX_BLOCKS];
  for (int r = 0; r < nblocks; r++) mv[r] = _mm256_set1_ps(marker[r]);
  size_t i = 0;
  for (; i + 16 <= m; i += 16) {
    __m256 a0, a1;
    decode16(k, codes[0], i, &unit, 0, mv[0], &a0, &a1);
    for (int r = 1; r < nblocks; r++) {
      __m256 d0, d1;
      decode16(k, codes[r], i, &unit, 0, mv[r], &d0, &d1);
      a0 = _mm256_add_ps(a0, d0);
      a1 = _mm256_add_ps(a1, d1);
    }
    _mm256_storeu_ps(out + i, scale_down(a0, sc.s23, sc.sub_scale_inv, 1));
    _mm256_storeu_ps(out + i + 8, scale_down(a1, sc.s23, sc.sub_scale_inv, 1));
  }
  return i;
}

/* Whether reduce_same_tiny_loop applies: one tiny scale for all ranks. */
static int same_tiny_scale(const float *inv, int nblocks) {
  for (int r = 1; r < nblocks; r++)
    if (sq_float_bits(inv[r]) != sq_float_bits(inv[0])) return 0;
  return nblocks > 0 && tiny_bucket(inv[0]);
}

#define SQ_REDUCE_CASE(K)                                                      \
  case K:                                                                      \
    if (!accumulate && same_tiny_scale(inv, nblocks))                          \
      return reduce_same_tiny_loop(K, codes, inv[0], marker, nblocks, out, m); \
    return accumulate ? reduce_loop(K, codes, inv, marker, nblocks, out, m, 1) \
                      : reduce_loop(K, codes, inv, marker, nblocks, out, m, 0)

SQ_AVX2 size_t squall__qx_reduce(sq_quant_kind k, const uint8_t *const *codes, const float *inv,
                                 const float *marker, int nblocks, float *out, size_t m, int accumulate) {
  switch (k) {
    SQ_REDUCE_CASE(SQ_QUANT_INT8);
    SQ_REDUCE_CASE(SQ_QUANT_INT4);
  default:
    SQ_REDUCE_CASE(SQ_QUANT_FP8);
  }
}
#undef SQ_REDUCE_CASE

/* --------------------------------------------------- 16-bit reduce */

/* 8 codes as floats: fp16 through F16C (as codec_half.c's decoder), bf16
 * by shifting into the top half of the float. */
static __attribute__((target("f16c,avx2"))) SQ_INLINE __m256 half8(sq_half_kind kind, const uint16_t *p) {
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  if (kind == SQ_HALF_FP16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* squall__half_decode's vector loop (d = code * inv, out = d, then
 * out = out + d rank by rank) with the sums in registers. */
static __attribute__((target("f16c,avx2"))) SQ_INLINE size_t half_reduce_loop(sq_half_kind kind,
                                                                              const uint16_t *blocks, int nblocks,
                                                                              size_t block_elems, float *out,
                                                                              size_t n, float invs) {
  const __m256 inv = _mm256_set1_ps(invs);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a0 = _mm256_mul_ps(half8(kind, blocks + i), inv);
    __m256 a1 = _mm256_mul_ps(half8(kind, blocks + i + 8), inv);
    const uint16_t *b = blocks + i;
    for (int r = 1; r < nblocks; r++) {
      b += block_elems;
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(half8(kind, b), inv));
      a1 = _mm256_add_ps(a1, _mm256_mul_ps(half8(kind, b + 8), inv));
    }
    _mm256_storeu_ps(out + i, a0);
    _mm256_storeu_ps(out + i + 8, a1);
  }
  return i;
}

__attribute__((target("f16c,avx2"))) size_t squall__qx_half_reduce(sq_half_kind kind, const uint16_t *blocks,
                                                                   int nblocks, size_t block_elems, float *out,
                                                                   size_t n, float inv) {
  return kind == SQ_HALF_FP16 ? half_reduce_loop(SQ_HALF_FP16, blocks, nblocks, block_elems, out, n, inv)
                              : half_reduce_loop(SQ_HALF_BF16, blocks, nblocks, block_elems, out, n, inv);
}
#endif /* SQ_QUANT_HAVE_AVX2 */

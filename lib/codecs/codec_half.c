/*
 * codec_half.c - the host 16-bit codec (fp16 and bf16) and the absolute
 * maximum that picks its scale. Every element goes through codec_math.h, so
 * the CUDA twin (cuda/half.cu) produces the same bits.
 *
 * Only codec.h and libc here: the standalone GPU self-test build compiles
 * this file without config.h or the logger.
 */
#include "codecs/codec.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define SQ_HAVE_F16C_PATH 1
#include <immintrin.h>

/* fp16 through the F16C instructions (bf16 through AVX2 integer rounding), 8 lanes at a time: the conversion is
 * IEEE round-to-nearest-even, the same rounding as sq_f32_to_f16, and with
 * a power-of-two scale the multiply by 1/scale gives the bits of the
 * division in sq_half_decode_elem. 7 ns -> about 1.3 ns per element on an
 * AVX2 machine. Lanes that are not finite take
 * the residual rule of sq_residual_after: 0. */
static int have_f16c(void) {
  static int cached = -1;
  if (cached < 0) {
    __builtin_cpu_init();
    cached = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  }
  return cached;
}

static int have_avx2(void) {
  static int cached = -1;
  if (cached < 0) {
    __builtin_cpu_init();
    cached = __builtin_cpu_supports("avx2");
  }
  return cached;
}

/* res = a - d where both are finite, else 0 (sq_residual_after, 8 lanes). */
__attribute__((target("avx"))) static inline void store_residual8(float *res, __m256 a, __m256 d) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  __m256 finite = _mm256_and_ps(_mm256_cmp_ps(_mm256_and_ps(a, absmask), inf, _CMP_LT_OQ),
                                _mm256_cmp_ps(_mm256_and_ps(d, absmask), inf, _CMP_LT_OQ));
  _mm256_storeu_ps(res, _mm256_and_ps(_mm256_sub_ps(a, d), finite));
}

/* bfloat16 rounding of 8 floats, as sq_f32_to_bf16: round to nearest even
 * by integer add, NaN quieted. Returns the codes in the low 16 bits. */
__attribute__((target("avx2"))) static inline __m256i bf16_round8(__m256 x) {
  __m256i xi = _mm256_castps_si256(x);
  __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(xi, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(xi, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(xi, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(xi, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, isnan);
}

__attribute__((target("avx2"))) static inline __m128i pack8(__m256i v) {
  return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

__attribute__((target("avx2"))) static inline __m256 bf16_load8(const uint16_t *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

__attribute__((target("avx2"))) static size_t encode_bf16_avx2(const float *g, float *res, uint16_t *out,
                                                                 size_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale), inv = _mm256_set1_ps(1.0f / scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(g + i);
    if (res) a = _mm256_add_ps(a, _mm256_loadu_ps(res + i));
    __m256i h = bf16_round8(_mm256_mul_ps(a, s));
    _mm_storeu_si128((__m128i *)(out + i), pack8(h));
    if (res) {
      __m256 d = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h, 16)), inv);
      store_residual8(res + i, a, d);
    }
  }
  return i;
}

__attribute__((target("avx2"))) static size_t decode_bf16_avx2(const uint16_t *in, float *out, size_t n,
                                                                 float scale, int accumulate) {
  const __m256 inv = _mm256_set1_ps(1.0f / scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 d = _mm256_mul_ps(bf16_load8(in + i), inv);
    if (accumulate) d = _mm256_add_ps(_mm256_loadu_ps(out + i), d);
    _mm256_storeu_ps(out + i, d);
  }
  return i;
}

__attribute__((target("avx2"))) static size_t sum_bf16_avx2(const uint16_t *a, uint16_t *b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(b + i), pack8(bf16_round8(_mm256_add_ps(bf16_load8(a + i), bf16_load8(b + i)))));
  return i;
}

/* The fast path needs 1/scale to be exact: a normal power of two whose
 * reciprocal is normal too. */
static int exact_reciprocal(float scale) {
  uint32_t b = sq_float_bits(scale);
  uint32_t e = (b >> 23) & 0xffu;
  return (b & 0x807fffffu) == 0 && e >= 2 && e <= 252;
}

__attribute__((target("f16c,avx"))) static size_t encode_f16c(const float *g, float *res, uint16_t *out,
                                                                size_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale), inv = _mm256_set1_ps(1.0f / scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(g + i);
    if (res) a = _mm256_add_ps(a, _mm256_loadu_ps(res + i));
    __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(a, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128((__m128i *)(out + i), h);
    if (res) {
      __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(h), inv);
      store_residual8(res + i, a, d);
    }
  }
  return i;
}

__attribute__((target("f16c,avx"))) static size_t decode_f16c(const uint16_t *in, float *out, size_t n,
                                                                float scale, int accumulate) {
  const __m256 inv = _mm256_set1_ps(1.0f / scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))), inv);
    if (accumulate) d = _mm256_add_ps(_mm256_loadu_ps(out + i), d);
    _mm256_storeu_ps(out + i, d);
  }
  return i;
}

/* Sum of two fp16 vectors, rounded back to fp16 (the MPI transport's op). */
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

float squall__absmax(const float *g, const float *res, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; i++) {
    float a = res ? g[i] + res[i] : g[i];
    if (!sq_isfinite(a)) continue; /* Inf and NaN are delivered as they are, never scaled for */
    float x = sq_bits_float(sq_float_bits(a) & 0x7fffffffu); /* |a| without libm */
    if (x > m) m = x;
  }
  return m;
}

void squall__half_encode(sq_half_kind kind, const float *g, float *res, uint16_t *out, size_t n,
                         float scale) {
  size_t i = 0;
#ifdef SQ_HAVE_F16C_PATH
  if (kind == SQ_HALF_FP16 && exact_reciprocal(scale) && have_f16c()) i = encode_f16c(g, res, out, n, scale);
  if (kind == SQ_HALF_BF16 && exact_reciprocal(scale) && have_avx2()) i = encode_bf16_avx2(g, res, out, n, scale);
#endif
  if (res) {
    for (; i < n; i++) out[i] = sq_half_encode_elem(kind, g[i], &res[i], scale);
  } else {
    for (; i < n; i++) out[i] = sq_half_encode_elem(kind, g[i], NULL, scale);
  }
}

void squall__half_decode(sq_half_kind kind, const uint16_t *in, float *out, size_t n, float scale,
                         int accumulate) {
  size_t i = 0;
#ifdef SQ_HAVE_F16C_PATH
  if (kind == SQ_HALF_FP16 && exact_reciprocal(scale) && have_f16c()) i = decode_f16c(in, out, n, scale, accumulate);
  if (kind == SQ_HALF_BF16 && exact_reciprocal(scale) && have_avx2()) i = decode_bf16_avx2(in, out, n, scale, accumulate);
#endif
  if (accumulate) {
    for (; i < n; i++) out[i] += sq_half_decode_elem(kind, in[i], scale);
  } else {
    for (; i < n; i++) out[i] = sq_half_decode_elem(kind, in[i], scale);
  }
}

void squall__half_sum(sq_half_kind kind, const uint16_t *a, uint16_t *b, size_t n) {
  size_t i = 0;
#ifdef SQ_HAVE_F16C_PATH
  if (kind == SQ_HALF_FP16 && have_f16c()) i = sum_f16c(a, b, n);
  if (kind == SQ_HALF_BF16 && have_avx2()) i = sum_bf16_avx2(a, b, n);
#endif
  for (; i < n; i++) b[i] = sq_half_from_f32(kind, sq_half_to_f32(kind, a[i]) + sq_half_to_f32(kind, b[i]));
}

/*
 * codec_half.c - the host 16-bit codec (fp16 and bf16) and the absolute
 * maximum that picks its scale. Every element goes through codec_math.h, so
 * the CUDA twin (cuda/half.cu) produces the same bits.
 *
 * Only codec.h and libc here: the standalone GPU self-test build compiles
 * this file without config.h or the logger.
 */
#include <string.h>

#include "codecs/codec.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define SQ_HAVE_F16C_PATH 1
#include <cpuid.h>
#include <immintrin.h>

/* fp16 through the F16C instructions (bf16 through AVX2 integer rounding),
 * 8 lanes at a time: the conversion is IEEE round-to-nearest-even, the same
 * rounding as sq_f32_to_f16, and with a power-of-two scale the multiply by
 * 1/scale gives the bits of the division in sq_half_decode_elem. Lanes that
 * are not finite take the residual rule of sq_residual_after: 0.
 *
 * The encoder and the absolute maximum run with the MXCSR flush-to-zero bit
 * set (restored on return): a subnormal result becomes a signed zero, which
 * is what sq_ftz does in the per-element definition, and no instruction
 * meets a subnormal it produced (x86 cores that take a microcode assist per
 * subnormal slowed whole calls 20x). Only FTZ, not DAZ: a subnormal input g
 * is used as it is, as the definition does.
 *
 * CPU features come from cpuid and xgetbv (squall__cpu_x86), not from
 * __builtin_cpu_supports, whose "f16c" name clang 14 does not know. */
static int have_f16c(void) { return squall__cpu_x86(SQ_CPU_F16C); }
static int have_avx2(void) { return squall__cpu_x86(SQ_CPU_AVX2); }

static int cpu_disabled; /* squall__cpu_x86_disable: tests run the scalar paths */

void squall__cpu_x86_disable(int feature_mask) { cpu_disabled = feature_mask; }

int squall__cpu_x86(int feature) {
  if (feature & cpu_disabled) return 0;
  static int cached = -1; /* bit set of features; a race writes the same value */
  if (cached < 0) {
    int set = 0;
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d) && ((c >> 27) & 1) /* OSXSAVE */ && ((c >> 28) & 1) /* AVX */) {
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      if ((lo & 6) == 6) { /* the OS saves the YMM state */
        set |= SQ_CPU_AVX;
        if ((c >> 29) & 1) set |= SQ_CPU_F16C;
        if (__get_cpuid_max(0, NULL) >= 7) {
          __cpuid_count(7, 0, a, b, c, d);
          if ((b >> 5) & 1) set |= SQ_CPU_AVX2;
        }
      }
    }
    cached = set;
  }
  return (cached & feature) == feature;
}

/* MXCSR with flush-to-zero (bit 15) for the duration of a hot loop. */
static inline unsigned ftz_begin(void) {
  unsigned old = _mm_getcsr();
  _mm_setcsr(old | 0x8000u);
  return old;
}
static inline void ftz_end(unsigned old) { _mm_setcsr(old); }

/* max(m, |a|) over the finite lanes of a (NaN and Inf are skipped). */
__attribute__((target("avx"))) static inline __m256 absmax8(__m256 m, __m256 a) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  __m256 x = _mm256_and_ps(a, absmask);
  return _mm256_max_ps(m, _mm256_and_ps(x, _mm256_cmp_ps(x, inf, _CMP_LT_OQ)));
}

__attribute__((target("avx"))) static size_t absmax_avx(const float *g, const float *res, size_t n, float *out) {
  __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  if (res) {
    for (; i + 32 <= n; i += 32) {
      m0 = absmax8(m0, _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(res + i)));
      m1 = absmax8(m1, _mm256_add_ps(_mm256_loadu_ps(g + i + 8), _mm256_loadu_ps(res + i + 8)));
      m2 = absmax8(m2, _mm256_add_ps(_mm256_loadu_ps(g + i + 16), _mm256_loadu_ps(res + i + 16)));
      m3 = absmax8(m3, _mm256_add_ps(_mm256_loadu_ps(g + i + 24), _mm256_loadu_ps(res + i + 24)));
    }
  } else {
    for (; i + 32 <= n; i += 32) {
      m0 = absmax8(m0, _mm256_loadu_ps(g + i));
      m1 = absmax8(m1, _mm256_loadu_ps(g + i + 8));
      m2 = absmax8(m2, _mm256_loadu_ps(g + i + 16));
      m3 = absmax8(m3, _mm256_loadu_ps(g + i + 24));
    }
  }
  __m256 m = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float r = 0.0f;
  for (int l = 0; l < 8; l++)
    if (lanes[l] > r) r = lanes[l];
  *out = r;
  return i;
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
                                                                 float scale, int accumulate, int nt) {
  const __m256 inv = _mm256_set1_ps(1.0f / scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 d = _mm256_mul_ps(bf16_load8(in + i), inv);
    if (accumulate) d = _mm256_add_ps(_mm256_loadu_ps(out + i), d);
    if (nt) _mm256_stream_ps(out + i, d);
    else _mm256_storeu_ps(out + i, d);
  }
  return i;
}

__attribute__((target("avx2"))) static size_t sum_bf16_avx2(const uint16_t *a, uint16_t *b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(b + i), pack8(bf16_round8(_mm256_add_ps(bf16_load8(a + i), bf16_load8(b + i)))));
  return i;
}

/* Outputs at least this large (elements) are written with non-temporal
 * stores: they exceed the caches anyway, and a store that skips the read
 * for ownership takes a third off a decode pass (measured: 0.40 -> 0.22
 * ns per element). */
#define SQ_NT_MIN_ELEMS ((size_t)1 << 22)

/* Elements before p reaches an `align`-byte boundary, or SIZE_MAX when it
 * never does (p not a multiple of elem: no streaming then). */
static size_t head_to_align(const void *p, size_t elem, size_t align) {
  uintptr_t a = (uintptr_t)p;
  if (a % elem) return (size_t)-1;
  return (size_t)(((align - (a & (align - 1))) & (align - 1)) / elem);
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
                                                                float scale, int accumulate, int nt) {
  const __m256 inv = _mm256_set1_ps(1.0f / scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))), inv);
    if (accumulate) d = _mm256_add_ps(_mm256_loadu_ps(out + i), d);
    if (nt) _mm256_stream_ps(out + i, d);
    else _mm256_storeu_ps(out + i, d);
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
#else
int squall__cpu_x86(int feature_mask) {
  (void)feature_mask;
  return 0;
}
void squall__cpu_x86_disable(int feature_mask) { (void)feature_mask; }
#endif

/* Unaligned-safe element access (a float* need not be 4-aligned). */
static inline float ldf(const float *p, size_t i) {
  float x;
  memcpy(&x, (const char *)p + 4 * i, sizeof x);
  return x;
}
static inline void stf(float *p, size_t i, float x) { memcpy((char *)p + 4 * i, &x, sizeof x); }
static inline uint16_t ld16(const uint16_t *p, size_t i) {
  uint16_t x;
  memcpy(&x, (const char *)p + 2 * i, sizeof x);
  return x;
}
static inline void st16(uint16_t *p, size_t i, uint16_t x) { memcpy((char *)p + 2 * i, &x, sizeof x); }

/* |a| over the finite a, with a as the encoder forms it: g + res flushed
 * to zero when subnormal (sq_half_encode_elem), or g. */
float squall__absmax(const float *g, const float *res, size_t n) {
  float m = 0.0f;
  size_t i = 0;
#ifdef SQ_HAVE_F16C_PATH
  unsigned csr = 0;
  int simd = squall__cpu_x86(SQ_CPU_AVX);
  if (simd) {
    csr = ftz_begin();
    i = absmax_avx(g, res, n, &m);
  }
#endif
  for (; i < n; i++) {
    float a = res ? sq_ftz(ldf(g, i) + ldf(res, i)) : ldf(g, i);
    if (!sq_isfinite(a)) continue; /* Inf and NaN are delivered as they are, never scaled for */
    float x = sq_bits_float(sq_float_bits(a) & 0x7fffffffu); /* |a| without libm */
    if (x > m) m = x;
  }
#ifdef SQ_HAVE_F16C_PATH
  if (simd) ftz_end(csr);
#endif
  return m;
}

void squall__half_encode(sq_half_kind kind, const float *g, float *res, uint16_t *out, size_t n,
                         float scale) {
  size_t i = 0;
#ifdef SQ_HAVE_F16C_PATH
  unsigned csr = ftz_begin();
  int f16 = kind == SQ_HALF_FP16 && exact_reciprocal(scale) && have_f16c();
  int b16 = kind == SQ_HALF_BF16 && exact_reciprocal(scale) && have_avx2();
  /* Plain stores for the codes: streaming them measured slower (0.55 ->
   * 0.72 ns per element), unlike the decoder's float output. */
  if (f16) i = encode_f16c(g, res, out, n, scale);
  if (b16) i = encode_bf16_avx2(g, res, out, n, scale);
#endif
  if (res) {
    for (; i < n; i++) {
      float r = ldf(res, i);
      st16(out, i, sq_half_encode_elem(kind, ldf(g, i), &r, scale));
      stf(res, i, r);
    }
  } else {
    for (; i < n; i++) st16(out, i, sq_half_encode_elem(kind, ldf(g, i), NULL, scale));
  }
#ifdef SQ_HAVE_F16C_PATH
  ftz_end(csr);
#endif
}

static inline void decode_one(sq_half_kind kind, const uint16_t *in, float *out, size_t i, float scale,
                              int accumulate) {
  float d = sq_half_decode_elem(kind, ld16(in, i), scale);
  stf(out, i, accumulate ? ldf(out, i) + d : d);
}

void squall__half_decode(sq_half_kind kind, const uint16_t *in, float *out, size_t n, float scale,
                         int accumulate) {
  size_t i = 0;
#ifdef SQ_HAVE_F16C_PATH
  int f16 = kind == SQ_HALF_FP16 && exact_reciprocal(scale) && have_f16c();
  int b16 = kind == SQ_HALF_BF16 && exact_reciprocal(scale) && have_avx2();
  if (f16 || b16) {
    size_t head = !accumulate && n >= SQ_NT_MIN_ELEMS ? head_to_align(out, 4, 32) : (size_t)-1;
    int nt = head < n;
    for (; nt && i < head; i++) decode_one(kind, in, out, i, scale, accumulate);
    i += f16 ? decode_f16c(in + i, out + i, n - i, scale, accumulate, nt)
             : decode_bf16_avx2(in + i, out + i, n - i, scale, accumulate, nt);
    if (nt) _mm_sfence();
  }
#endif
  for (; i < n; i++) decode_one(kind, in, out, i, scale, accumulate);
}

void squall__half_sum(sq_half_kind kind, const uint16_t *a, uint16_t *b, size_t n) {
  size_t i = 0;
#ifdef SQ_HAVE_F16C_PATH
  if (kind == SQ_HALF_FP16 && have_f16c()) i = sum_f16c(a, b, n);
  if (kind == SQ_HALF_BF16 && have_avx2()) i = sum_bf16_avx2(a, b, n);
#endif
  for (; i < n; i++) st16(b, i, sq_half_from_f32(kind, sq_half_to_f32(kind, ld16(a, i)) + sq_half_to_f32(kind, ld16(b, i))));
}

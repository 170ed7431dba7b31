/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * codec_half.c - the host 16-bit codec (fp16 and bf16) and the absolute
 * maximum that picks its scale. Every element goes through codec_math.h, so
 * the CUDA twin (lib/codecs/cuda/half.cu) produces the same bits.
 *
 * Only codec.h and libc here, and the CPU probe of lib/common/cpu.c: the
 * standalone builds of the codecs (tools/fuzz.sh) compile this file with
 * cpu.c, without config.h or the logger.
 */
#include <string.h>

#include "codecs/codec.h"
#include "codecs/prefetch.h"

/* How a decoder writes out: over it, onto it, or streamed past the cache
 * (out 32-byte aligned). */
enum { DECODE_SET,
       DECODE_ADD,
       DECODE_STREAM };

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define SQ_HAVE_F16C_PATH 1
#include <immintrin.h>

#include "common/halfmath_x86.h" /* the bf16 conversions, 8 lanes at a time */

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
 * is used as it is, as the definition does; so DAZ is cleared, and the
 * rounding mode set to nearest, whatever the application set.
 *
 * CPU features come from squall__cpu_x86 (common/cpu.c). */
static int have_f16c(void) { return squall__cpu_x86(SQ_CPU_F16C); }
static int have_avx2(void) { return squall__cpu_x86(SQ_CPU_AVX2); }

/* MXCSR with flush-to-zero (bit 15) for the duration of a hot loop, and
 * otherwise the default environment (squall__fp_default_begin). */
static inline unsigned ftz_begin(void) {
  unsigned old = _mm_getcsr();
  _mm_setcsr((old & ~SQ_MXCSR_FTZ_RC_DAZ) | SQ_MXCSR_MASK_ALL | 0x8000u);
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

/* The largest of 8 lanes that are each >= 0 (0 when all are). */
__attribute__((target("avx"))) static inline float hmax8(__m256 m) {
  float lanes[8], r = 0.0f;
  _mm256_storeu_ps(lanes, m);
  for (int l = 0; l < 8; l++)
    if (lanes[l] > r) r = lanes[l];
  return r;
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
  *out = hmax8(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
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

__attribute__((target("avx2"))) static size_t encode_bf16_avx2(const float *g, float *res, uint16_t *out,
                                                               size_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale), inv = _mm256_set1_ps(1.0f / scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(g + i);
    if (res) a = _mm256_add_ps(a, _mm256_loadu_ps(res + i));
    __m256i h = sq_bf16_round8(_mm256_mul_ps(a, s));
    _mm_storeu_si128((__m128i *)(out + i), sq_pack8(h));
    if (res) {
      __m256 d = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h, 16)), inv);
      store_residual8(res + i, a, d);
    }
  }
  return i;
}

/* The streaming loops ask for the line SQ_PREFETCH_AHEAD bytes ahead of
 * each stream they read: on the 2-core EPYC KVM machines the hardware
 * prefetcher alone left the encoder 16-19% above the memory floor, and
 * 1-6% with this (16M elements, 256 to 4096 bytes ahead alike). */
#define SQ_PREFETCH_AHEAD 1024
__attribute__((always_inline)) static inline void prefetch_ahead(const void *p) {
  sq_prefetch_line(p, SQ_PREFETCH_AHEAD);
}

__attribute__((target("avx"), always_inline)) static inline void decode_store8(float *out, __m256 d, int mode) {
  if (mode == DECODE_ADD) d = _mm256_add_ps(_mm256_loadu_ps(out), d);
  if (mode == DECODE_STREAM)
    _mm256_stream_ps(out, d);
  else
    _mm256_storeu_ps(out, d);
}

__attribute__((target("avx2"), always_inline)) static inline size_t decode_bf16_loop(const uint16_t *in, float *out,
                                                                                     size_t n, float scale, int mode) {
  const __m256 inv = _mm256_set1_ps(1.0f / scale);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) { /* a line of codes per step */
    prefetch_ahead(in + i);
    for (int k = 0; k < 32; k += 8) decode_store8(out + i + k, _mm256_mul_ps(sq_bf16_load8(in + i + k), inv), mode);
  }
  for (; i + 8 <= n; i += 8) decode_store8(out + i, _mm256_mul_ps(sq_bf16_load8(in + i), inv), mode);
  return i;
}

/* One loop per mode: the mode is not tested per step. */
__attribute__((target("avx2"))) static size_t decode_bf16_avx2(const uint16_t *in, float *out, size_t n,
                                                               float scale, int mode) {
  if (mode == DECODE_ADD) return decode_bf16_loop(in, out, n, scale, DECODE_ADD);
  if (mode == DECODE_STREAM) return decode_bf16_loop(in, out, n, scale, DECODE_STREAM);
  return decode_bf16_loop(in, out, n, scale, DECODE_SET);
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

__attribute__((target("f16c,avx"), always_inline)) static inline size_t decode_f16c_loop(const uint16_t *in, float *out,
                                                                                         size_t n, float scale,
                                                                                         int mode) {
  const __m256 inv = _mm256_set1_ps(1.0f / scale);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) { /* a line of codes per step */
    prefetch_ahead(in + i);
    for (int k = 0; k < 32; k += 8)
      decode_store8(out + i + k, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i + k))), inv),
                    mode);
  }
  for (; i + 8 <= n; i += 8)
    decode_store8(out + i, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))), inv), mode);
  return i;
}

__attribute__((target("f16c,avx"))) static size_t decode_f16c(const uint16_t *in, float *out, size_t n,
                                                              float scale, int mode) {
  if (mode == DECODE_ADD) return decode_f16c_loop(in, out, n, scale, DECODE_ADD);
  if (mode == DECODE_STREAM) return decode_f16c_loop(in, out, n, scale, DECODE_STREAM);
  return decode_f16c_loop(in, out, n, scale, DECODE_SET);
}

/* Codes of a * s in kind's format, 8 lanes; *d receives their decode.
 * finite: no lane of a * s is NaN (bf16 then skips its NaN lanes). */
__attribute__((target("f16c,avx2"))) static inline __m128i half_round8(sq_half_kind kind, __m256 a, __m256 s,
                                                                       __m256 inv, __m256 *d, int finite) {
  if (kind == SQ_HALF_FP16) {
    __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(a, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    *d = _mm256_mul_ps(_mm256_cvtph_ps(h), inv);
    return h;
  }
  __m256i h = finite ? sq_bf16_round8_finite(_mm256_mul_ps(a, s)) : sq_bf16_round8(_mm256_mul_ps(a, s));
  *d = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h, 16)), inv);
  return sq_pack8(h);
}

/* Decode of 8 codes in kind's format at 1/scale = inv. */
__attribute__((target("f16c,avx2"))) static inline __m256 half_load8(sq_half_kind kind, const uint16_t *p,
                                                                     __m256 inv) {
  __m256 x = kind == SQ_HALF_FP16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)) : sq_bf16_load8(p);
  return _mm256_mul_ps(x, inv);
}

/* The 8 codes at out: a non-temporal store where the caller said the codes
 * go cold (out is then 16-byte aligned). */
__attribute__((target("avx2"))) static inline void store_codes8(uint16_t *out, __m128i h, int cold) {
  if (cold)
    _mm_stream_si128((__m128i *)out, h);
  else
    _mm_storeu_si128((__m128i *)out, h);
}

/* Where squall__half_encode_guess copies the residual before it changes:
 * nowhere, with plain stores, or streamed past the cache (32-byte aligned). */
enum { BACKUP_NONE,
       BACKUP_PLAIN,
       BACKUP_STREAM };

/* One 8-lane step of squall__half_encode_guess: codes, and the residual
 * a - d as store_residual8 but a itself where a is finite and d is not
 * (the guess was too large a scale for a); the residual as it was goes to
 * backup first. Returns |a| where a is finite, else 0: the lanes' share of
 * the maximum. */
__attribute__((target("f16c,avx2"))) static inline __m256 encode_guess8(sq_half_kind kind, const float *g, float *res,
                                                                        uint16_t *out, float *backup, __m256 s,
                                                                        __m256 inv, __m256 safe, int cold,
                                                                        int backup_mode) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  __m256 r = _mm256_loadu_ps(res);
  if (backup_mode == BACKUP_STREAM) _mm256_stream_ps(backup, r);
  if (backup_mode == BACKUP_PLAIN) _mm256_storeu_ps(backup, r);
  __m256 a = _mm256_add_ps(_mm256_loadu_ps(g), r), d;
  __m256 abs_a = _mm256_and_ps(a, absmask);
  /* the common case: every lane finite and far from overflow, so d is
   * finite too, the residual is plainly a - d, and bf16 needs no NaN lanes */
  if (_mm256_movemask_ps(_mm256_cmp_ps(abs_a, safe, _CMP_LT_OQ)) == 0xff) {
    store_codes8(out, half_round8(kind, a, s, inv, &d, 1), cold);
    _mm256_storeu_ps(res, _mm256_sub_ps(a, d));
    return abs_a;
  }
  store_codes8(out, half_round8(kind, a, s, inv, &d, 0), cold);
  __m256 finite_a = _mm256_cmp_ps(abs_a, inf, _CMP_LT_OQ);
  __m256 finite_d = _mm256_cmp_ps(_mm256_and_ps(d, absmask), inf, _CMP_LT_OQ);
  _mm256_storeu_ps(res, _mm256_and_ps(_mm256_blendv_ps(a, _mm256_sub_ps(a, d), finite_d), finite_a));
  return _mm256_and_ps(abs_a, finite_a);
}

/* squall__half_encode_guess: the absolute maximum rides along with the
 * encoder's own loads (two chains of max). Inlined into one loop per
 * format, store kind and backup, so that none is tested per step. */
__attribute__((target("f16c,avx2"), always_inline)) static inline size_t
encode_guess_loop(sq_half_kind kind, const float *g, float *res, uint16_t *out, float *backup, size_t n, float scale,
                  float *absmax, int cold, int backup_mode) {
  const __m256 s = _mm256_set1_ps(scale), inv = _mm256_set1_ps(1.0f / scale);
  /* |a| below this cannot overflow at this scale, nor its decode: a * scale
   * < 2^15 for fp16 (largest 65504), a < 2^126 for bf16 (float's range) */
  float bound = (kind == SQ_HALF_FP16 ? 0x1p15f : 0x1p126f) / scale;
  const __m256 safe = _mm256_set1_ps(bound < 0x1p126f ? bound : 0x1p126f);
  __m256 m0 = _mm256_setzero_ps(), m1 = m0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(g + i);
    prefetch_ahead(res + i);
    m0 = _mm256_max_ps(m0, encode_guess8(kind, g + i, res + i, out + i, backup + i, s, inv, safe, cold, backup_mode));
    m1 = _mm256_max_ps(m1, encode_guess8(kind, g + i + 8, res + i + 8, out + i + 8, backup + i + 8, s, inv, safe, cold,
                                         backup_mode));
  }
  for (; i + 8 <= n; i += 8)
    m0 = _mm256_max_ps(m0, encode_guess8(kind, g + i, res + i, out + i, backup + i, s, inv, safe, cold, backup_mode));
  if (cold || backup_mode == BACKUP_STREAM) _mm_sfence(); /* the streamed stores are visible before what follows */
  *absmax = hmax8(_mm256_max_ps(m0, m1));
  return i;
}

#define SQ_GUESS_LOOP(K, C, B) encode_guess_loop(K, g, res, out, backup, n, scale, absmax, C, B)
#define SQ_GUESS_KIND(C, B) (kind == SQ_HALF_FP16 ? SQ_GUESS_LOOP(SQ_HALF_FP16, C, B) : SQ_GUESS_LOOP(SQ_HALF_BF16, C, B))
#define SQ_GUESS_BACKUP(C)                                         \
  (backup_mode == BACKUP_STREAM  ? SQ_GUESS_KIND(C, BACKUP_STREAM) \
   : backup_mode == BACKUP_PLAIN ? SQ_GUESS_KIND(C, BACKUP_PLAIN)  \
                                 : SQ_GUESS_KIND(C, BACKUP_NONE))
__attribute__((target("f16c,avx2"))) static size_t encode_guess_simd(sq_half_kind kind, const float *g, float *res,
                                                                     uint16_t *out, float *backup, size_t n,
                                                                     float scale, float *absmax, int cold,
                                                                     int backup_mode) {
  return cold ? SQ_GUESS_BACKUP(1) : SQ_GUESS_BACKUP(0);
}
#undef SQ_GUESS_BACKUP
#undef SQ_GUESS_KIND
#undef SQ_GUESS_LOOP

/* squall__half_rescale, 8 lanes at a time. */
__attribute__((target("f16c,avx2"))) static size_t rescale_simd(sq_half_kind kind, float *res, uint16_t *codes,
                                                                size_t n, float guess, float scale) {
  const __m256 inv_old = _mm256_set1_ps(1.0f / guess), s = _mm256_set1_ps(scale),
               inv = _mm256_set1_ps(1.0f / scale), zero = _mm256_setzero_ps();
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 d = half_load8(kind, codes + i, inv_old), r = _mm256_loadu_ps(res + i), d2;
    __m256 finite_d = _mm256_cmp_ps(_mm256_and_ps(d, absmask), inf, _CMP_LT_OQ);
    __m256 kept = _mm256_cmp_ps(_mm256_and_ps(r, absmask), zero, _CMP_NEQ_OQ); /* overflowed: a kept */
    __m256 a = _mm256_blendv_ps(_mm256_blendv_ps(d, r, kept), _mm256_add_ps(r, d), finite_d);
    _mm_storeu_si128((__m128i *)(codes + i), half_round8(kind, a, s, inv, &d2, 0));
    store_residual8(res + i, a, d2);
  }
  return i;
}
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

/* max(m, |a|) where a is finite; m where it is not (Inf and NaN are
 * delivered as they are, never scaled for). */
static inline float absmax_one(float m, float a) {
  if (!sq_isfinite(a)) return m;
  float x = sq_bits_float(sq_float_bits(a) & 0x7fffffffu); /* |a| without libm */
  return x > m ? x : m;
}

/* |a| over the finite a, with a as the encoder forms it: g + res flushed
 * to zero when subnormal (sq_half_encode_elem), or g. */
float squall__absmax(const float *g, const float *res, size_t n) {
  float m = 0.0f;
  size_t i = 0;
#ifdef SQ_HAVE_F16C_PATH
  unsigned csr = ftz_begin();
  if (squall__cpu_x86(SQ_CPU_AVX)) i = absmax_avx(g, res, n, &m);
#endif
  for (; i < n; i++) m = absmax_one(m, res ? sq_ftz(ldf(g, i) + ldf(res, i)) : ldf(g, i));
#ifdef SQ_HAVE_F16C_PATH
  ftz_end(csr);
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
   * 0.72 ns per element). This encoder's codes are sent chunk by chunk
   * right after it, still in the cache; the guessing encoder's, written
   * for a whole large tensor first, are streamed (SQ_CODES_COLD_BYTES). */
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

/* One element of squall__half_encode_guess; *m: the running maximum. */
static inline uint16_t encode_guess_one(sq_half_kind kind, float g, float *res, float guess, float *m) {
  float a = sq_ftz(g + *res);
  *m = absmax_one(*m, a);
  uint16_t h = sq_half_encode_a(kind, a, res, guess);
  if (sq_isfinite(a) && !sq_isfinite(sq_half_decode_elem(kind, h, guess))) *res = a;
  return h;
}

/* One element of squall__half_encode_guess, through its backup. */
static inline void encode_guess_elem(sq_half_kind kind, const float *g, float *res, uint16_t *out, float *backup,
                                     size_t i, float guess, float *m) {
  float r = ldf(res, i);
  if (backup) stf(backup, i, r);
  st16(out, i, encode_guess_one(kind, ldf(g, i), &r, guess, m));
  stf(res, i, r);
}

float squall__half_encode_guess(sq_half_kind kind, const float *g, float *res, uint16_t *out, size_t n,
                                float guess, int cold, float *backup) {
  float m = 0.0f;
  size_t i = 0;
#ifdef SQ_HAVE_F16C_PATH
  unsigned csr = ftz_begin();
  int simd = exact_reciprocal(guess) && (kind == SQ_HALF_FP16 ? have_f16c() && have_avx2() : have_avx2());
  if (simd) {
    /* streamed codes need 16-byte alignment: the few elements before it
     * go through the scalar step (codes at an odd address are not streamed) */
    uintptr_t at = (uintptr_t)out;
    size_t head = cold && at % 2 == 0 ? (16 - at % 16) % 16 / 2 : 0;
    if (head > n) head = n;
    for (; i < head; i++) encode_guess_elem(kind, g, res, out, backup, i, guess, &m);
    /* the backup is only read after a failure: streamed where it is
     * 32-byte aligned from here on (the engine places it so) */
    int backup_mode = !backup                             ? BACKUP_NONE
                      : (uintptr_t)(backup + i) % 32 == 0 ? BACKUP_STREAM
                                                          : BACKUP_PLAIN;
    float ms = 0.0f;
    float *to = backup ? backup + i : res + i; /* without a backup, never written: no offsets from NULL */
    i += encode_guess_simd(kind, g + i, res + i, out + i, to, n - i, guess, &ms, cold && at % 2 == 0, backup_mode);
    if (ms > m) m = ms;
  }
#else
  (void)cold;
#endif
  for (; i < n; i++) encode_guess_elem(kind, g, res, out, backup, i, guess, &m);
#ifdef SQ_HAVE_F16C_PATH
  ftz_end(csr);
#endif
  return m;
}

int squall__half_guess_missed(sq_half_kind kind, float guess, float absmax, float scale) {
  if (sq_float_bits(guess) != sq_float_bits(scale)) return 1;
  /* rounding is monotonic: an element overflowed iff the largest did */
  uint16_t h = sq_half_from_f32(kind, sq_ftz(absmax * guess));
  return !sq_isfinite(sq_half_decode_elem(kind, h, guess));
}

void squall__half_rescale(sq_half_kind kind, float *res, uint16_t *codes, size_t n, float guess, float scale) {
  size_t i = 0;
#ifdef SQ_HAVE_F16C_PATH
  unsigned csr = ftz_begin();
  int simd = exact_reciprocal(guess) && exact_reciprocal(scale) &&
             (kind == SQ_HALF_FP16 ? have_f16c() && have_avx2() : have_avx2());
  if (simd) i = rescale_simd(kind, res, codes, n, guess, scale);
#endif
  for (; i < n; i++) {
    float d = sq_half_decode_elem(kind, ld16(codes, i), guess), r = ldf(res, i);
    float a = sq_isfinite(d) ? sq_ftz(r + d) : r != 0.0f ? r
                                                         : d; /* r: a itself where the code overflowed */
    st16(codes, i, sq_half_encode_a(kind, a, &r, scale));
    stf(res, i, r);
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

/* Whether the decoder's vector loops run for this format and scale. */
static int decode_simd(sq_half_kind kind, float scale) {
#ifdef SQ_HAVE_F16C_PATH
  return exact_reciprocal(scale) && (kind == SQ_HALF_FP16 ? have_f16c() : have_avx2());
#else
  (void)kind, (void)scale;
  return 0;
#endif
}

static void half_decode(sq_half_kind kind, const uint16_t *in, float *out, size_t n, float scale, int mode) {
  int accumulate = mode == DECODE_ADD;
  size_t i = 0;
  /* every rank decodes the same codes: the same bits whatever its own
   * rounding mode, flush-to-zero or denormals-are-zero */
  const unsigned fp = squall__fp_default_begin();
#ifdef SQ_HAVE_F16C_PATH
  int f16 = kind == SQ_HALF_FP16 && decode_simd(kind, scale);
  int b16 = kind == SQ_HALF_BF16 && decode_simd(kind, scale);
  if (mode == DECODE_STREAM && (f16 || b16)) {
    /* streamed stores need 32-byte alignment: the elements before it go
     * through the scalar step (an output at an odd address is not streamed) */
    uintptr_t at = (uintptr_t)out;
    size_t head = at % 4 == 0 ? (32 - at % 32) % 32 / 4 : n;
    for (; i < head && i < n; i++) decode_one(kind, in, out, i, scale, 0);
  }
  if (mode == DECODE_STREAM && i == n) mode = DECODE_SET;
  if (f16) i += decode_f16c(in + i, out + i, n - i, scale, mode);
  if (b16) i += decode_bf16_avx2(in + i, out + i, n - i, scale, mode);
  if (mode == DECODE_STREAM) _mm_sfence(); /* the streamed stores are ordered before what follows */
#endif
  for (; i < n; i++) decode_one(kind, in, out, i, scale, accumulate);
  squall__fp_default_end(fp);
}

void squall__half_decode(sq_half_kind kind, const uint16_t *in, float *out, size_t n, float scale,
                         int accumulate) {
  half_decode(kind, in, out, n, scale, accumulate ? DECODE_ADD : DECODE_SET);
}

void squall__half_decode_cold(sq_half_kind kind, const uint16_t *in, float *out, size_t n, float scale) {
  /* only the vector loops stream, from a float-aligned output on */
  sq_cold_trial t = squall__cold_stores_begin(SQ_COLD_HALF, n, (uintptr_t)out % 4 == 0 && decode_simd(kind, scale));
  half_decode(kind, in, out, n, scale, t.kind == SQ_STORE_STREAM ? DECODE_STREAM : DECODE_SET);
  squall__cold_stores_end(SQ_COLD_HALF, &t, n);
}

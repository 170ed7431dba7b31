/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * codec_quant.c - the host quantised codecs (int8, int4, fp8 e4m3) with one
 * power-of-two scale per bucket, and the rank-ordered fp32 reductions the
 * two-phase all-reduce runs on what it receives (quantised buckets or
 * 16-bit codes). Every element goes through codec_math.h, so the CUDA twin
 * (lib/codecs/cuda/quant.cu) produces the same bits.
 *
 * On x86 CPUs with AVX2 each bucket's leading whole vectors run in
 * codec_quant_avx2.c (same bits, lane by lane: test_quant compares the two
 * paths); the scalar code here finishes each bucket, encodes the rare
 * buckets whose scale is near FLT_MAX's (exponent -100 and below), and is
 * all there is elsewhere.
 *
 * Only codec.h and libc here, like codec_half.c: the standalone GPU
 * self-test compiles this file too.
 */
#include "codecs/codec.h"
#include "codecs/codec_quant_simd.h"

#ifdef SQ_QUANT_HAVE_AVX2
#include <immintrin.h>
#endif
/* IEEE arithmetic for the duration of a call (squall__fp_default_begin
 * around each entry point): the definition, like the CUDA twin, rounds to
 * nearest and flushes nothing, and an application's denormals-are-zero or
 * flush-to-zero (-ffast-math, torch.set_flush_denormal) would flush in the
 * multiplies of the scalar code while the vector loops' tiny buckets,
 * which form those products on the bits, would not: within a bucket, or
 * between ranks with and without AVX2, the bits would differ. */

/* Whether the AVX2 loops may run (once per call: tests switch it off). */
static int use_avx2(void) {
#ifdef SQ_QUANT_HAVE_AVX2
  return squall__cpu_x86(SQ_CPU_AVX2);
#else
  return 0;
#endif
}

size_t squall__quant_bytes(sq_quant_kind k, size_t bucket, size_t n) {
  return (n + bucket - 1) / bucket * sq_quant_bucket_bytes(k, bucket);
}

/* Largest |a| over the finite a = g + res of a bucket, and the flags of
 * the others. The encode computes a the same way, so the scale covers
 * exactly what is encoded. */
static float scan_bucket(const float *g, const float *res, size_t m, uint32_t *flags) {
  float amax = 0.0f;
  uint32_t nf = 0;
  for (size_t i = 0; i < m; i++) {
    float a = res ? g[i] + res[i] : g[i];
    uint32_t b = sq_float_bits(a) & 0x7fffffffu;
    if (b < 0x7f800000u) {
      float x = sq_bits_float(b);
      amax = x > amax ? x : amax;
    } else {
      nf |= sq_quant_nf_flag(a);
    }
  }
  *flags = nf;
  return amax;
}

/* The integer codes of a finite bucket whose decodes cannot overflow
 * (s > -100): sq_quant_encode_elem without its two rare branches, in a
 * loop the compiler vectorises. Same bits (test_arrays_match_per_element). */
static void encode_int_fast(sq_quant_kind k, const float *g, float *res, uint8_t *c, size_t i0, size_t m,
                            float p, float inv) {
  if (k == SQ_QUANT_INT8) {
    for (size_t i = i0; i < m; i++) {
      float a = res ? g[i] + res[i] : g[i];
      float q = sq_rne_int(a * p);
      if (res) res[i] = a - q * inv;
      c[i] = (uint8_t)(int8_t)(int32_t)q;
    }
    return;
  }
  for (size_t i = i0; i + 1 < m; i += 2) { /* i0 is even */
    float a0 = res ? g[i] + res[i] : g[i], a1 = res ? g[i + 1] + res[i + 1] : g[i + 1];
    float q0 = sq_rne_int(a0 * p), q1 = sq_rne_int(a1 * p);
    if (res) {
      res[i] = a0 - q0 * inv;
      res[i + 1] = a1 - q1 * inv;
    }
    c[i / 2] = (uint8_t)(((uint32_t)(int32_t)q0 & 0xfu) | (((uint32_t)(int32_t)q1 & 0xfu) << 4));
  }
  if (m & 1) {
    float a = res ? g[m - 1] + res[m - 1] : g[m - 1];
    float q = sq_rne_int(a * p);
    if (res) res[m - 1] = a - q * inv;
    c[m / 2] = (uint8_t)((uint32_t)(int32_t)q & 0xfu);
  }
}

/* The e4m3 codes of a finite bucket with s > -100: sq_f32_to_e4m3 and
 * sq_e4m3_to_f32 as selects instead of branches (the normal range rounds
 * by integer addition on the float bits, the subnormal range by
 * sq_rne_int on |x| * 2^9), so the compiler vectorises it. Same bits. */
static void encode_fp8_fast(const float *g, float *res, uint8_t *c, size_t i0, size_t m, float p, float inv) {
  for (size_t i = i0; i < m; i++) {
    float a = res ? g[i] + res[i] : g[i];
    uint32_t b = sq_float_bits(a * p);
    uint32_t sign = b & 0x80000000u, ax = b & 0x7fffffffu;
    uint32_t r = ax + 0x7ffffu + ((ax >> 20) & 1u);     /* round to 3 mantissa bits, ties to even */
    float sub = sq_rne_int(sq_bits_float(ax) * 512.0f); /* subnormal: a multiple of 2^-9 */
    int normal = ax >= 0x3c800000u;
    uint32_t code = normal ? (r >> 20) - 960u : (uint32_t)sub;
    float mag = normal ? sq_bits_float(r & 0xfff00000u) : sub * 0.001953125f;
    float d = sq_bits_float(sq_float_bits(mag) | sign) * inv;
    if (res) res[i] = a - d;
    c[i] = (uint8_t)(code | (sign >> 24));
  }
}

/* One bucket of m <= bucket elements. */
static void encode_bucket(sq_quant_kind k, const float *g, float *res, uint8_t *o, size_t m, int simd) {
  uint32_t flags = 0;
  float amax;
  size_t i0 = 0;
#ifdef SQ_QUANT_HAVE_AVX2
  if (simd) flags = squall__qx_absmax(g, res, m, &amax);
  else
#endif
    amax = scan_bucket(g, res, m, &flags);
  int s = sq_quant_exp(k, amax);
  float p = sq_pow2(s), inv = sq_quant_inv_pow2(s);
  o[0] = (uint8_t)(int8_t)s;
  o[1] = (uint8_t)flags;
  uint8_t *c = o + SQ_QUANT_HEADER_BYTES;
  int fast = flags == 0 && s > -100;
#ifdef SQ_QUANT_HAVE_AVX2
  /* non-finite values too: the vector loops give them the general path's
   * marker and residual 0 */
  if (simd && s > -100) i0 = squall__qx_encode(k, g, res, c, m, p, inv, flags != 0);
#endif
  if (k != SQ_QUANT_FP8 && fast) {
    encode_int_fast(k, g, res, c, i0, m, p, inv);
  } else if (fast) {
    encode_fp8_fast(g, res, c, i0, m, p, inv);
  } else if (k == SQ_QUANT_INT4) {
    for (size_t i = i0; i < m; i += 2) { /* i0 is even */
      uint32_t pair = 0;
      for (size_t j = i; j < i + 2 && j < m; j++) {
        float a = res ? g[j] + res[j] : g[j], d;
        pair |= sq_quant_encode_elem(k, a, p, inv, &d) << (4 * (j - i));
        if (res) res[j] = sq_quant_residual(a, d);
      }
      c[i / 2] = (uint8_t)pair;
    }
  } else {
    for (size_t i = i0; i < m; i++) {
      float a = res ? g[i] + res[i] : g[i], d;
      c[i] = (uint8_t)sq_quant_encode_elem(k, a, p, inv, &d);
      if (res) res[i] = sq_quant_residual(a, d);
    }
  }
}

/* backup[0..m) = res[0..m): streamed where backup is aligned (it is only
 * read after a failure), and the bucket's residual stays in the cache for
 * the encoder that reads it next. Returns whether it streamed. */
static int backup_bucket(float *backup, const float *res, size_t m, int simd) {
  size_t i = 0;
#ifdef SQ_QUANT_HAVE_AVX2
  if (simd && (uintptr_t)backup % 32 == 0) i = squall__qx_copy_stream(backup, res, m);
#else
  (void)simd;
#endif
  memcpy(backup + i, res + i, (m - i) * sizeof(float));
  return i > 0;
}

void squall__quant_encode_backup(sq_quant_kind k, size_t bucket, const float *g, float *res, uint8_t *out,
                                 size_t n, float *backup) {
  size_t stride = sq_quant_bucket_bytes(k, bucket);
  int simd = use_avx2(), streamed = 0;
  if (res == NULL) backup = NULL;
  unsigned csr = squall__fp_default_begin();
  for (size_t b0 = 0; b0 < n; b0 += bucket, out += stride) {
    size_t m = n - b0 < bucket ? n - b0 : bucket;
    if (m < bucket) memset(out, 0, stride); /* the padding of the last bucket is defined */
    if (backup) streamed |= backup_bucket(backup + b0, res + b0, m, simd);
    encode_bucket(k, g + b0, res ? res + b0 : NULL, out, m, simd);
  }
#ifdef SQ_QUANT_HAVE_AVX2
  if (streamed) __builtin_ia32_sfence(); /* the backup is whole before what follows */
#endif
  squall__fp_default_end(csr);
}

void squall__quant_encode(sq_quant_kind k, size_t bucket, const float *g, float *res, uint8_t *out,
                          size_t n) {
  squall__quant_encode_backup(k, bucket, g, res, out, n, NULL);
}

/* Values of every code at scale 1, the marker as NaN: a bucket without
 * non-finite flags decodes as table[c] * 2^-s, which is
 * sq_quant_decode_elem's result (NaN * x is NaN). */
static void code_table(sq_quant_kind k, float *tab) {
  unsigned nc = k == SQ_QUANT_INT4 ? 16 : 256;
  for (unsigned c = 0; c < nc; c++)
    tab[c] = sq_quant_is_marker(k, c) ? sq_quant_marker_value(0) : sq_quant_code_value(k, c);
}

/* out[i0..m) = (or +=) the decode of elements i0..m-1 of one bucket (in:
 * its header; i0 even), scalar. */
static void decode_range(sq_quant_kind k, const float *tab, const uint8_t *in, float *out, size_t i0,
                         size_t m, int accumulate) {
  float inv = sq_quant_inv_pow2((int)(int8_t)in[0]);
  uint32_t flags = in[1];
  const uint8_t *c = in + SQ_QUANT_HEADER_BYTES;
  if (flags != 0) {
    for (size_t i = i0; i < m; i++) {
      uint32_t code = k == SQ_QUANT_INT4 ? (c[i / 2] >> (4 * (i & 1))) & 0xfu : c[i];
      float d = sq_quant_decode_elem(k, code, inv, flags);
      out[i] = accumulate ? out[i] + d : d;
    }
  } else if (k == SQ_QUANT_INT4) {
    for (size_t i = i0; i + 1 < m; i += 2) {
      float d0 = tab[c[i / 2] & 0xfu] * inv, d1 = tab[c[i / 2] >> 4] * inv;
      out[i] = accumulate ? out[i] + d0 : d0;
      out[i + 1] = accumulate ? out[i + 1] + d1 : d1;
    }
    if ((m & 1) && m > i0) {
      float d = tab[c[m / 2] & 0xfu] * inv;
      out[m - 1] = accumulate ? out[m - 1] + d : d;
    }
  } else if (accumulate) {
    for (size_t i = i0; i < m; i++) out[i] += tab[c[i]] * inv;
  } else {
    for (size_t i = i0; i < m; i++) out[i] = tab[c[i]] * inv;
  }
}

/* out[0..m) = (or +=) the decode of one bucket; simd: the AVX2 loops take
 * the leading whole vectors (stream: with non-temporal stores, out 64-byte
 * aligned: see quant_can_stream). */
static void decode_bucket(sq_quant_kind k, const float *tab, const uint8_t *in, float *out, size_t m,
                          int accumulate, int simd, int stream) {
  size_t i0 = 0;
#ifdef SQ_QUANT_HAVE_AVX2
  if (simd)
    i0 = squall__qx_decode(k, in + SQ_QUANT_HEADER_BYTES, sq_quant_inv_pow2((int)(int8_t)in[0]),
                           sq_quant_marker_value(in[1]), out, m, accumulate, stream);
#else
  (void)simd;
  (void)stream;
#endif
  decode_range(k, tab, in, out, i0, m, accumulate);
}

/* stream: with non-temporal stores where the vector loops write (cold
 * outputs; squall__quant_decode_cold). */
static void quant_decode(sq_quant_kind k, size_t bucket, const uint8_t *in, float *out, size_t n, int accumulate,
                         int stream) {
  size_t stride = sq_quant_bucket_bytes(k, bucket);
  float tab[256];
  code_table(k, tab);
  int simd = use_avx2();
  int nt = simd && !accumulate && stream;
  unsigned csr = squall__fp_default_begin();
  for (size_t b0 = 0; b0 < n; b0 += bucket, in += stride)
    decode_bucket(k, tab, in, out + b0, n - b0 < bucket ? n - b0 : bucket, accumulate, simd,
                  nt && (uintptr_t)(out + b0) % 32 == 0);
#ifdef SQ_QUANT_HAVE_AVX2
  if (nt) __builtin_ia32_sfence(); /* the streamed stores are ordered before what follows */
#endif
  squall__fp_default_end(csr);
}

void squall__quant_decode(sq_quant_kind k, size_t bucket, const uint8_t *in, float *out, size_t n,
                          int accumulate) {
  quant_decode(k, bucket, in, out, n, accumulate, 0);
}

/* Whether the vector loops can stream out. Only whole lines: a bucket is
 * decoded on its own, so the scalar ends of buckets that do not start on a
 * line would share their lines with streamed stores, and a partly streamed
 * line costs memory a read and a write (streaming measured 3x slower than
 * plain stores so, against a third faster for the 16-bit decoder, whose
 * one range per call has such a line at its ends only). So the output
 * starts on a line, and buckets are whole lines of 16 floats. */
static int quant_can_stream(const float *out, size_t bucket) {
  return use_avx2() && (uintptr_t)out % 64 == 0 && bucket % 16 == 0;
}

void squall__quant_decode_cold(sq_quant_kind k, size_t bucket, const uint8_t *in, float *out, size_t n) {
  sq_cold_trial t = squall__cold_stores_begin(SQ_COLD_QUANT, n, quant_can_stream(out, bucket));
  quant_decode(k, bucket, in, out, n, 0, t.kind == SQ_STORE_STREAM);
  squall__cold_stores_end(SQ_COLD_QUANT, &t, n);
}

#ifdef SQ_QUANT_HAVE_AVX2
/* One bucket of the reduce through the AVX2 loops: the sum of 16 elements
 * stays in registers over the ranks, in rank order, groups of ranks each
 * adding onto the last group's sums. */
static void reduce_bucket_avx2(sq_quant_kind k, const float *tab, const uint8_t *first, int nblocks,
                               size_t block_bytes, float *out, size_t m) {
  enum { GROUP = SQ_QX_REDUCE_MAX_BLOCKS };
  size_t i0 = 0;
  for (int r0 = 0; r0 < nblocks; r0 += GROUP) {
    int nr = nblocks - r0 < GROUP ? nblocks - r0 : GROUP;
    const uint8_t *codes[GROUP];
    float inv[GROUP], marker[GROUP];
    for (int r = 0; r < nr; r++) {
      const uint8_t *h = first + (size_t)(r0 + r) * block_bytes;
      codes[r] = h + SQ_QUANT_HEADER_BYTES;
      inv[r] = sq_quant_inv_pow2((int)(int8_t)h[0]);
      marker[r] = sq_quant_marker_value(h[1]);
    }
    i0 = squall__qx_reduce(k, codes, inv, marker, nr, out, m, r0 > 0);
  }
  /* the bucket's last few elements, rank by rank */
  for (int r = 0; r < nblocks; r++) decode_range(k, tab, first + (size_t)r * block_bytes, out, i0, m, r > 0);
}
#endif

void squall__quant_reduce(sq_quant_kind k, size_t bucket, const uint8_t *blocks, int nblocks,
                          size_t block_bytes, float *out, size_t n) {
  size_t stride = sq_quant_bucket_bytes(k, bucket);
  float tab[256];
  code_table(k, tab);
#ifdef SQ_QUANT_HAVE_AVX2
  int simd = use_avx2() && nblocks > 0;
#endif
  /* Bucket by bucket, all ranks in order: the partial sums stay in cache. */
  unsigned csr = squall__fp_default_begin();
  for (size_t b0 = 0, j = 0; b0 < n; b0 += bucket, j++) {
    size_t m = n - b0 < bucket ? n - b0 : bucket;
    const uint8_t *first = blocks + j * stride;
#ifdef SQ_QUANT_HAVE_AVX2
    if (simd) {
      reduce_bucket_avx2(k, tab, first, nblocks, block_bytes, out + b0, m);
      continue;
    }
#endif
    for (int r = 0; r < nblocks; r++) decode_range(k, tab, first + (size_t)r * block_bytes, out + b0, 0, m, r > 0);
  }
  squall__fp_default_end(csr);
}

#ifdef SQ_QUANT_HAVE_AVX2
/* The vector loops need 1 / scale exact: a normal power of two whose
 * reciprocal is normal too (as codec_half.c's decoder). */
static int exact_reciprocal(float scale) {
  uint32_t b = sq_float_bits(scale);
  uint32_t e = (b >> 23) & 0xffu;
  return (b & 0x807fffffu) == 0 && e >= 2 && e <= 252;
}
#endif

void squall__half_reduce(sq_half_kind kind, const uint16_t *blocks, int nblocks, size_t block_elems,
                         float *out, size_t n, float scale) {
  /* out = d_0, then out += d_r in rank order: per element the arithmetic of
   * acc = d_0; acc = acc + d_r, as squall__half_decode computes it (whose
   * vector loops the fused one repeats, sums kept in registers). */
  size_t i0 = 0;
  const unsigned fp = squall__fp_default_begin();
#ifdef SQ_QUANT_HAVE_AVX2
  int cpu = squall__cpu_x86(kind == SQ_HALF_FP16 ? SQ_CPU_AVX2 | SQ_CPU_F16C : SQ_CPU_AVX2);
  if (cpu && nblocks > 0 && exact_reciprocal(scale))
    i0 = squall__qx_half_reduce(kind, blocks, nblocks, block_elems, out, n, 1.0f / scale);
#endif
  for (int r = 0; r < nblocks; r++)
    squall__half_decode(kind, blocks + (size_t)r * block_elems + i0, out + i0, n - i0, scale, r > 0);
  squall__fp_default_end(fp);
}

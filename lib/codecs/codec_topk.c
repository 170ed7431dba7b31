/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * codec_topk.c - the host top-k encoder: exact selection of the k entries of
 * largest |a|, written as one slot of ascending u32 indices and fp32 or
 * scaled fp16 values. Two modes:
 *  - the selection (squall__topk_select) only reads the residual: the
 *    engine updates it after the exchange (squall__topk_finish,
 *    codec_sparse.c), so that nothing has to be backed up and restored
 *    when the exchange fails;
 *  - the encode (squall__topk_encode) also updates the residual, in the
 *    same pass: the engine's choice where no failure can return.
 * The CUDA twin (cuda/topk.cu here) selects the same entries and writes the
 * same bytes; both take keys, rounding and the residual from codec_math.h.
 *
 * Two ways to the same answer:
 *  - the sampled path (large n, k well below n): a sample of the keys gives
 *    a bound v that the k-th largest key very likely reaches; one fused
 *    pass forms a = g + res (storing it into res when encoding) and
 *    collects the entries with key > v (list A, with their a) and the first
 *    k with key == v (list B: ties at the bound, lowest index first, which
 *    is the tie rule); the exact selection then runs over the candidates
 *    only.
 *  - the full path: radix select over every key (two 16-bit histogram
 *    passes), then one pass that writes the slot. It runs for small n and
 *    when the sample misleads: too few candidates (the bound was above the
 *    k-th key) or more than fit (it was far below). When encoding, the
 *    output residual then already holds a, and the full path reads a from
 *    there.
 * Either way the selected set is the k largest keys, ties to the lower
 * index, and the bytes are the same.
 *
 * Buffers may sit at any address (a float* need not be 4-aligned): every
 * access goes through memcpy or unaligned SIMD loads.
 *
 * Only codec.h and libc here: the standalone GPU self-test build compiles
 * this file without config.h or the logger.
 */
#include <float.h>
#include <string.h>

#include "codecs/codec.h"
#include "codecs/prefetch.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define SQ_TOPK_AVX2 1
#include <immintrin.h>
#endif

/* Bins of one radix pass: 16 bits of the key at a time. A key is |a| as
 * bits, so its top bit is 0 and the first pass uses only the lower half. */
#define TOPK_BINS 65536u
/* Keys the sampled path draws, and the smallest n it runs for. */
#define TOPK_SAMPLE 8192u
#define TOPK_SAMPLED_MIN_N (8u * TOPK_SAMPLE)
/* Draws of the sample in flight: each one's lines are asked for this many
 * draws before it is read. */
#define SAMPLE_AHEAD 16

/* Unaligned-safe element access. */
static inline float ldf(const float *p, size_t i) {
  float x;
  memcpy(&x, (const char *)p + 4 * i, sizeof x);
  return x;
}
static inline void stf(float *p, size_t i, float x) { memcpy((char *)p + 4 * i, &x, sizeof x); }
static inline void st32(char *p, size_t i, uint32_t x) { memcpy(p + 4 * i, &x, sizeof x); }

/* stf into a residual the fused pass streamed past the cache (p 4-byte
 * aligned): the selection's writes land about k/n of the buffer apart, and
 * with a streaming store on x86 none of them waits for its line to be read
 * in first. The caller fences once they are done. */
static inline void stf_cold(float *p, size_t i, float x) {
#ifdef SQ_TOPK_AVX2
  int bits;
  memcpy(&bits, &x, sizeof bits);
  _mm_stream_si32((int *)((char *)p + 4 * i), bits);
#else
  stf(p, i, x);
#endif
}

/* One element of the written residual: streamed where cold, else stored. */
static inline void put_res(float *p, size_t i, float x, int cold) {
  if (cold) stf_cold(p, i, x);
  else stf(p, i, x);
}

size_t squall__topk_k(size_t count, double ratio) {
  if (count == 0) return 0;
  if (!(ratio > 0.0)) return 1; /* also NaN */
  if (ratio >= 1.0) return count;
  const unsigned fp = squall__fp_default_begin(); /* every rank's k, whatever its rounding mode */
  double x = ratio * (double)count;               /* < count <= 2^64, so the cast below is defined */
  size_t m = (size_t)x;                           /* floor; x - m is exact (truncating a double is a double) */
  double frac = x - (double)m;
  /* ratio is the double nearest a decimal (0.07 is 0.07000000000000000666...),
   * so ratio*count can land a few ulps above an integer that the user meant
   * exactly: 0.07*100 == 7.000000000000001. A fraction within 4 ulps of x is
   * that rounding, not a real remainder, and does not take one more entry. */
  size_t k = frac > 4.0 * DBL_EPSILON * x ? m + 1 : m;
  squall__fp_default_end(fp);
  if (k < 1) k = 1;
  if (k > count) k = count;
  return k;
}

size_t squall__topk_slot_bytes(size_t k, squallValueType_t values) {
  if (values == squallValueFp16) return (squall__slot_scale_offset(k) + sizeof(float) + 7) & ~(size_t)7;
  return 8 * k; /* 4-byte index + 4-byte value: already a multiple of 8 */
}

/* The keys (full path) or the candidate lists (sampled path) come first,
 * padded to 8 bytes, then one histogram. */
static size_t keys_bytes(size_t n) { return (4 * n + 7) & ~(size_t)7; }

size_t squall__topk_workspace_bytes(size_t n) {
  return keys_bytes(n) + TOPK_BINS * sizeof(uint32_t);
}

/* Largest bin b whose count, added to everything above it, reaches want;
 * *above receives the count of the bins above b. The caller guarantees the
 * bins hold at least want >= 1 entries, so the loop stops at b >= 0. */
static uint32_t find_bin(const uint32_t *hist, uint32_t top, size_t want, size_t *above) {
  size_t cum = 0;
  uint32_t b = top;
  for (;; b--) {
    if (cum + hist[b] >= want) break;
    cum += hist[b];
  }
  *above = cum;
  return b;
}

/* The k-th largest of keys[0..m) (1 <= k <= m) by two radix passes;
 * *above receives how many keys are strictly larger. */
static uint32_t radix_select(const uint32_t *keys, size_t m, size_t k, uint32_t *hist, size_t *above) {
  size_t above_hi, above_lo;
  memset(hist, 0, TOPK_BINS * sizeof *hist);
  for (size_t i = 0; i < m; i++) hist[keys[i] >> 16]++;
  uint32_t hi = find_bin(hist, (TOPK_BINS >> 1) - 1, k, &above_hi);
  size_t need = k - above_hi; /* 1 <= need <= entries in bin hi */
  memset(hist, 0, TOPK_BINS * sizeof *hist);
  for (size_t i = 0; i < m; i++)
    if ((keys[i] >> 16) == hi) hist[keys[i] & 0xffffu]++;
  uint32_t lo = find_bin(hist, TOPK_BINS - 1, need, &above_lo);
  *above = above_hi + above_lo;
  return (hi << 16) | lo;
}

/* What one selected entry puts in the slot (entry j), and in the residual
 * when encoding (out_res: the residual written, res itself or another
 * buffer; NULL for the selection; cold: as put_res takes it). */
static inline void emit(char *idx_out, char *val_out, size_t j, uint32_t i, float a, int fp16,
                        float scale, int flush, float *out_res, int cold) {
  st32(idx_out, j, i);
  if (fp16) {
    /* As sq_half_encode_elem forms a (the CUDA twin calls that): flushed
     * when there is a residual (squall__topk_finish encodes the same a for
     * the residual). Same code either way. */
    float r;
    uint16_t h = sq_half_encode_a(SQ_HALF_FP16, flush ? sq_ftz(a) : a, out_res ? &r : NULL, scale);
    memcpy(val_out + 2 * j, &h, sizeof h);
    if (out_res) put_res(out_res, i, r, cold);
  } else {
    memcpy(val_out + 4 * j, &a, sizeof a);
    if (out_res) put_res(out_res, i, sq_residual_after(a, a), cold); /* 0: sent whole */
  }
}

/* The full path. a = g + res, or a = out_res when a_in_res (the encoding
 * sampled path has already stored a there), or g when res is NULL. */
static void full_path(const float *g, const float *res, float *out_res, int a_in_res, size_t n, size_t k,
                      int fp16, float scale, char *idx_out, char *val_out, void *workspace) {
  uint32_t *keys = (uint32_t *)workspace;
  uint32_t *hist = (uint32_t *)((char *)workspace + keys_bytes(n));
#define A_OF(i) (a_in_res ? ldf(out_res, i) : res ? ldf(g, i) + ldf(res, i) \
                                                  : ldf(g, i))
  /* Threshold T: the k-th largest key. 'above' keys are > T; the remaining
   * k - above selections are keys equal to T, lowest index first. */
  uint32_t thr = 0;
  size_t above = 0;
  if (k > 0) {
    for (size_t i = 0; i < n; i++) keys[i] = sq_topk_key(A_OF(i));
    thr = radix_select(keys, n, k, hist, &above);
  }
  size_t ties = k - above, j = 0;
  for (size_t i = 0; i < n; i++) {
    float a = A_OF(i);
    int take = 0;
    if (j < k) {
      uint32_t key = keys[i];
      if (key > thr) {
        take = 1;
      } else if (key == thr && ties > 0) {
        take = 1;
        ties--;
      }
    }
    if (take) emit(idx_out, val_out, j++, (uint32_t)i, a, fp16, scale, res != NULL, out_res, 0);
    else if (out_res) stf(out_res, i, sq_residual_keep(a));
  }
#undef A_OF
}

/* ------------------------------------------------------------ sampled path */

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/* The element of rank r (0 = largest) of x[0..m), by quickselect (x is
 * reordered). */
static uint32_t select_desc(uint32_t *x, size_t m, size_t r) {
  long long lo = 0, hi = (long long)m - 1, rr = (long long)r;
  while (lo < hi) {
    uint32_t pivot = x[lo + (hi - lo) / 2];
    long long i = lo, j = hi;
    while (i <= j) {
      while (x[i] > pivot) i++;
      while (x[j] < pivot) j--;
      if (i <= j) {
        uint32_t t = x[i];
        x[i] = x[j];
        x[j] = t;
        i++;
        j--;
      }
    }
    /* now x[lo..j] >= pivot, x[i..hi] <= pivot, and between them == pivot */
    if (rr <= j) hi = j;
    else if (rr >= i) lo = i;
    else return x[rr];
  }
  return x[rr];
}

/* The position of the sample's draw from stratum j. */
static size_t sample_at(size_t j, size_t stride) {
  return j * stride + (size_t)(mix64(j + 0x746f706bu) % stride);
}

/* A key bound v: of TOPK_SAMPLE keys drawn one per stratum (at a hashed
 * position in it, so that periodic data does not fool a fixed stride), the
 * one of rank k/n * s plus four standard deviations and a little. The
 * count of keys >= v then reaches k unless the data is far from what the
 * sample saw; the caller checks, and the full path covers the rest. */
static uint32_t sample_bound(const float *g, const float *res, size_t n, size_t k, uint32_t *scratch) {
  const size_t s = TOPK_SAMPLE, stride = n / s;
  /* Each draw misses the cache: its lines are asked for SAMPLE_AHEAD
   * draws before it is read (a ring keeps the positions hashed once). */
  size_t ring[SAMPLE_AHEAD];
  for (size_t j = 0; j < s + SAMPLE_AHEAD; j++) {
    size_t slot = j % SAMPLE_AHEAD;
    if (j >= SAMPLE_AHEAD) {
      size_t i = ring[slot];
      scratch[j - SAMPLE_AHEAD] = sq_topk_key(res ? ldf(g, i) + ldf(res, i) : ldf(g, i));
    }
    if (j < s) {
      ring[slot] = sample_at(j, stride);
      sq_prefetch_line(g, 4 * ring[slot]);
      if (res) sq_prefetch_line(res, 4 * ring[slot]);
    }
  }
  double q = (double)k / (double)n * (double)s;
  double sd = 1.0; /* sqrt(q) by Newton's method: no libm in the standalone GPU build */
  for (int it = 0; it < 30 && q > 0.0; it++) sd = 0.5 * (sd + q / sd);
  double r = q + 4.0 * sd + 8.0;
  size_t rank = r >= (double)(s - 1) ? s - 1 : (size_t)r;
  return select_desc(scratch, s, rank);
}

/* The candidates the fused pass collects. */
typedef struct {
  uint32_t *a_idx;  /* list A: key > v, index order */
  uint32_t *a_bits; /* their a */
  size_t na, cap_a; /* na counts past cap_a (then the path gives up) */
  uint32_t *b_idx;  /* list B: key == v, the first k in index order */
  size_t nb, cap_b; /* nb counts every tie */
  int streamed;     /* the fused pass streamed out_res past the cache */
} cands;

static inline void take_lane(cands *c, uint32_t i, float a, uint32_t v) {
  uint32_t bits = sq_float_bits(a), key = bits & 0x7fffffffu;
  if (key > v) {
    if (c->na < c->cap_a) {
      c->a_idx[c->na] = i;
      c->a_bits[c->na] = bits;
    }
    c->na++;
  } else if (key == v) {
    if (c->nb < c->cap_b) c->b_idx[c->nb] = i;
    c->nb++;
  }
}

/* One pass: a = g + res (or g), stored into out_res when encoding, and the
 * candidates for v; res as it was into backup first (NULL: none; res is
 * then non-NULL). */
static void fused_scalar(const float *g, const float *res, float *out_res, float *backup, size_t from, size_t n,
                         uint32_t v, cands *c) {
  for (size_t i = from; i < n; i++) {
    float a = ldf(g, i);
    if (backup) stf(backup, i, ldf(res, i));
    if (res) a += ldf(res, i);
    if (out_res) stf(out_res, i, a);
    if ((sq_float_bits(a) & 0x7fffffffu) >= v) take_lane(c, (uint32_t)i, a, v);
  }
}

#ifdef SQ_TOPK_AVX2
/* Left-packing: entry m lists the set lanes of the 8-bit mask m, lowest
 * first, one byte each (unused bytes 0). */
/* clang-format off */
static const uint64_t pack_lanes[256] = {
    0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000001ull, 0x0000000000000100ull,
    0x0000000000000002ull, 0x0000000000000200ull, 0x0000000000000201ull, 0x0000000000020100ull,
    0x0000000000000003ull, 0x0000000000000300ull, 0x0000000000000301ull, 0x0000000000030100ull,
    0x0000000000000302ull, 0x0000000000030200ull, 0x0000000000030201ull, 0x0000000003020100ull,
    0x0000000000000004ull, 0x0000000000000400ull, 0x0000000000000401ull, 0x0000000000040100ull,
    0x0000000000000402ull, 0x0000000000040200ull, 0x0000000000040201ull, 0x0000000004020100ull,
    0x0000000000000403ull, 0x0000000000040300ull, 0x0000000000040301ull, 0x0000000004030100ull,
    0x0000000000040302ull, 0x0000000004030200ull, 0x0000000004030201ull, 0x0000000403020100ull,
    0x0000000000000005ull, 0x0000000000000500ull, 0x0000000000000501ull, 0x0000000000050100ull,
    0x0000000000000502ull, 0x0000000000050200ull, 0x0000000000050201ull, 0x0000000005020100ull,
    0x0000000000000503ull, 0x0000000000050300ull, 0x0000000000050301ull, 0x0000000005030100ull,
    0x0000000000050302ull, 0x0000000005030200ull, 0x0000000005030201ull, 0x0000000503020100ull,
    0x0000000000000504ull, 0x0000000000050400ull, 0x0000000000050401ull, 0x0000000005040100ull,
    0x0000000000050402ull, 0x0000000005040200ull, 0x0000000005040201ull, 0x0000000504020100ull,
    0x0000000000050403ull, 0x0000000005040300ull, 0x0000000005040301ull, 0x0000000504030100ull,
    0x0000000005040302ull, 0x0000000504030200ull, 0x0000000504030201ull, 0x0000050403020100ull,
    0x0000000000000006ull, 0x0000000000000600ull, 0x0000000000000601ull, 0x0000000000060100ull,
    0x0000000000000602ull, 0x0000000000060200ull, 0x0000000000060201ull, 0x0000000006020100ull,
    0x0000000000000603ull, 0x0000000000060300ull, 0x0000000000060301ull, 0x0000000006030100ull,
    0x0000000000060302ull, 0x0000000006030200ull, 0x0000000006030201ull, 0x0000000603020100ull,
    0x0000000000000604ull, 0x0000000000060400ull, 0x0000000000060401ull, 0x0000000006040100ull,
    0x0000000000060402ull, 0x0000000006040200ull, 0x0000000006040201ull, 0x0000000604020100ull,
    0x0000000000060403ull, 0x0000000006040300ull, 0x0000000006040301ull, 0x0000000604030100ull,
    0x0000000006040302ull, 0x0000000604030200ull, 0x0000000604030201ull, 0x0000060403020100ull,
    0x0000000000000605ull, 0x0000000000060500ull, 0x0000000000060501ull, 0x0000000006050100ull,
    0x0000000000060502ull, 0x0000000006050200ull, 0x0000000006050201ull, 0x0000000605020100ull,
    0x0000000000060503ull, 0x0000000006050300ull, 0x0000000006050301ull, 0x0000000605030100ull,
    0x0000000006050302ull, 0x0000000605030200ull, 0x0000000605030201ull, 0x0000060503020100ull,
    0x0000000000060504ull, 0x0000000006050400ull, 0x0000000006050401ull, 0x0000000605040100ull,
    0x0000000006050402ull, 0x0000000605040200ull, 0x0000000605040201ull, 0x0000060504020100ull,
    0x0000000006050403ull, 0x0000000605040300ull, 0x0000000605040301ull, 0x0000060504030100ull,
    0x0000000605040302ull, 0x0000060504030200ull, 0x0000060504030201ull, 0x0006050403020100ull,
    0x0000000000000007ull, 0x0000000000000700ull, 0x0000000000000701ull, 0x0000000000070100ull,
    0x0000000000000702ull, 0x0000000000070200ull, 0x0000000000070201ull, 0x0000000007020100ull,
    0x0000000000000703ull, 0x0000000000070300ull, 0x0000000000070301ull, 0x0000000007030100ull,
    0x0000000000070302ull, 0x0000000007030200ull, 0x0000000007030201ull, 0x0000000703020100ull,
    0x0000000000000704ull, 0x0000000000070400ull, 0x0000000000070401ull, 0x0000000007040100ull,
    0x0000000000070402ull, 0x0000000007040200ull, 0x0000000007040201ull, 0x0000000704020100ull,
    0x0000000000070403ull, 0x0000000007040300ull, 0x0000000007040301ull, 0x0000000704030100ull,
    0x0000000007040302ull, 0x0000000704030200ull, 0x0000000704030201ull, 0x0000070403020100ull,
    0x0000000000000705ull, 0x0000000000070500ull, 0x0000000000070501ull, 0x0000000007050100ull,
    0x0000000000070502ull, 0x0000000007050200ull, 0x0000000007050201ull, 0x0000000705020100ull,
    0x0000000000070503ull, 0x0000000007050300ull, 0x0000000007050301ull, 0x0000000705030100ull,
    0x0000000007050302ull, 0x0000000705030200ull, 0x0000000705030201ull, 0x0000070503020100ull,
    0x0000000000070504ull, 0x0000000007050400ull, 0x0000000007050401ull, 0x0000000705040100ull,
    0x0000000007050402ull, 0x0000000705040200ull, 0x0000000705040201ull, 0x0000070504020100ull,
    0x0000000007050403ull, 0x0000000705040300ull, 0x0000000705040301ull, 0x0000070504030100ull,
    0x0000000705040302ull, 0x0000070504030200ull, 0x0000070504030201ull, 0x0007050403020100ull,
    0x0000000000000706ull, 0x0000000000070600ull, 0x0000000000070601ull, 0x0000000007060100ull,
    0x0000000000070602ull, 0x0000000007060200ull, 0x0000000007060201ull, 0x0000000706020100ull,
    0x0000000000070603ull, 0x0000000007060300ull, 0x0000000007060301ull, 0x0000000706030100ull,
    0x0000000007060302ull, 0x0000000706030200ull, 0x0000000706030201ull, 0x0000070603020100ull,
    0x0000000000070604ull, 0x0000000007060400ull, 0x0000000007060401ull, 0x0000000706040100ull,
    0x0000000007060402ull, 0x0000000706040200ull, 0x0000000706040201ull, 0x0000070604020100ull,
    0x0000000007060403ull, 0x0000000706040300ull, 0x0000000706040301ull, 0x0000070604030100ull,
    0x0000000706040302ull, 0x0000070604030200ull, 0x0000070604030201ull, 0x0007060403020100ull,
    0x0000000000070605ull, 0x0000000007060500ull, 0x0000000007060501ull, 0x0000000706050100ull,
    0x0000000007060502ull, 0x0000000706050200ull, 0x0000000706050201ull, 0x0000070605020100ull,
    0x0000000007060503ull, 0x0000000706050300ull, 0x0000000706050301ull, 0x0000070605030100ull,
    0x0000000706050302ull, 0x0000070605030200ull, 0x0000070605030201ull, 0x0007060503020100ull,
    0x0000000007060504ull, 0x0000000706050400ull, 0x0000000706050401ull, 0x0000070605040100ull,
    0x0000000706050402ull, 0x0000070605040200ull, 0x0000070605040201ull, 0x0007060504020100ull,
    0x0000000706050403ull, 0x0000070605040300ull, 0x0000070605040301ull, 0x0007060504030100ull,
    0x0000070605040302ull, 0x0007060504030200ull, 0x0007060504030201ull, 0x0706050403020100ull,
};
/* clang-format on */

/* One group of 8 lanes of the fused pass, a (formed by the caller) against
 * v. Lanes above v (about 1 in 70 for k = n/100) are left-packed into
 * list A without a branch: every step stores 8 indices and 8 values at the
 * list's end and advances it by the number of lanes that qualified (the
 * lists have 8 words of slack). A branch per candidate mispredicts often
 * enough to cost a third of the pass. Ties with v (rare, or all of them
 * for constant data: predictable either way) go through take_lane. */
__attribute__((target("avx2"))) static inline size_t take8(__m256 a, __m256i idx, size_t i, size_t na, uint32_t v,
                                                           cands *c) {
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  const __m256i vv = _mm256_set1_epi32((int)v);
  __m256i key = _mm256_and_si256(_mm256_castps_si256(a), absmask);
  /* keys and v are below 2^31: the signed compares are unsigned ones */
  unsigned gt = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, vv)));
  unsigned eq = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(key, vv)));
  if (na <= c->cap_a) { /* past it only counted: the path gives up anyway */
    __m256i perm = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)&pack_lanes[gt]));
    _mm256_storeu_si256((__m256i *)(c->a_idx + na), _mm256_permutevar8x32_epi32(idx, perm));
    _mm256_storeu_si256((__m256i *)(c->a_bits + na), _mm256_permutevar8x32_epi32(_mm256_castps_si256(a), perm));
  }
  na += (size_t)__builtin_popcount(gt);
  if (eq) {
    if (c->nb >= c->cap_b) { /* ties past the first k: only counted */
      c->nb += (size_t)__builtin_popcount(eq);
    } else {
      float lanes[8];
      _mm256_storeu_ps(lanes, a);
      while (eq) {
        int b = __builtin_ctz(eq);
        eq &= eq - 1;
        take_lane(c, (uint32_t)(i + (size_t)b), lanes[b], v);
      }
    }
  }
  return na;
}

/* backup[i..i+8) = res[i..i+8) (the second load of res hits L1). */
__attribute__((target("avx2"), always_inline)) static inline void copy8(float *backup, const float *res, size_t i,
                                                                        int stream) {
  __m256 r = _mm256_loadu_ps((const float *)((const char *)res + 4 * i));
  float *to = (float *)((char *)backup + 4 * i);
  if (stream)
    _mm256_stream_ps(to, r);
  else
    _mm256_storeu_ps(to, r);
}

/* The fused pass over g and res; returns where it stopped. backup as in
 * fused_scalar, streamed past the cache where it is 32-byte aligned (it is
 * read only after a failure); so is out_res where it is not res (a buffer
 * only written: streaming saves reading each line in first). */
__attribute__((target("avx2"))) static size_t fused_avx2(const float *g, const float *res, float *out_res,
                                                         float *backup, size_t n, uint32_t v, cands *c) {
  const int stream = backup && (uintptr_t)backup % 32 == 0;
  const int stream_out = out_res && out_res != res && (uintptr_t)out_res % 32 == 0;
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  /* key >= v as one signed compare: v - 1 is -1 for v == 0, below every key */
  const __m256i vm1 = _mm256_set1_epi32((int)v - 1);
  const __m256i step = _mm256_set1_epi32(8);
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  size_t i = 0, na = c->na;
#define LOAD_A(j)                                                                           \
  (res ? _mm256_add_ps(_mm256_loadu_ps((const float *)((const char *)g + 4 * (i + (j)))),   \
                       _mm256_loadu_ps((const float *)((const char *)res + 4 * (i + (j))))) \
       : _mm256_loadu_ps((const float *)((const char *)g + 4 * (i + (j)))))
  /* Most groups of 32 lanes hold no candidate (about 6 in 10 for k = n/100):
   * one test skips them. */
  for (; i + 32 <= n; i += 32) {
    sq_prefetch_lines2(g, 4 * i + 1024); /* 1 KiB ahead: p[i + 256 .. i + 288) */
    if (res) sq_prefetch_lines2(res, 4 * i + 1024);
    if (backup)
      for (int j = 0; j < 32; j += 8) copy8(backup, res, i + (size_t)j, stream);
    __m256 a0 = LOAD_A(0), a1 = LOAD_A(8), a2 = LOAD_A(16), a3 = LOAD_A(24);
    if (stream_out) {
      float *o = (float *)((char *)out_res + 4 * i);
      _mm256_stream_ps(o, a0);
      _mm256_stream_ps(o + 8, a1);
      _mm256_stream_ps(o + 16, a2);
      _mm256_stream_ps(o + 24, a3);
    } else if (out_res) {
      float *o = (float *)((char *)out_res + 4 * i);
      _mm256_storeu_ps(o, a0);
      _mm256_storeu_ps(o + 8, a1);
      _mm256_storeu_ps(o + 16, a2);
      _mm256_storeu_ps(o + 24, a3);
    }
    __m256i any = _mm256_or_si256(
        _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(a0), absmask), vm1),
                        _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(a1), absmask), vm1)),
        _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(a2), absmask), vm1),
                        _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(a3), absmask), vm1)));
    if (!_mm256_testz_si256(any, any)) {
      na = take8(a0, idx, i, na, v, c);
      na = take8(a1, _mm256_add_epi32(idx, step), i + 8, na, v, c);
      na = take8(a2, _mm256_add_epi32(idx, _mm256_set1_epi32(16)), i + 16, na, v, c);
      na = take8(a3, _mm256_add_epi32(idx, _mm256_set1_epi32(24)), i + 24, na, v, c);
    }
    idx = _mm256_add_epi32(idx, _mm256_set1_epi32(32));
  }
  for (; i + 8 <= n; i += 8, idx = _mm256_add_epi32(idx, step)) {
    if (backup) copy8(backup, res, i, stream);
    __m256 a = LOAD_A(0);
    if (out_res) _mm256_storeu_ps((float *)((char *)out_res + 4 * i), a);
    na = take8(a, idx, i, na, v, c);
  }
#undef LOAD_A
  if (stream || stream_out) _mm_sfence(); /* the streamed stores are visible before what follows */
  c->na = na;
  c->streamed = stream_out;
  return i;
}
#endif

/* The k-th largest key is above v: select among A. Its keys are its bits
 * without the sign; both radix passes read them from a_bits. */
static void select_among_a(const cands *c, uint32_t *hist, const float *res, float *out_res, size_t k, int fp16,
                           float scale, char *idx_out, char *val_out, int cold) {
  size_t j = 0;
  size_t above_hi, above_lo;
  memset(hist, 0, TOPK_BINS * sizeof *hist);
  for (size_t t = 0; t < c->na; t++) hist[(c->a_bits[t] & 0x7fffffffu) >> 16]++;
  uint32_t hi = find_bin(hist, (TOPK_BINS >> 1) - 1, k, &above_hi);
  size_t need = k - above_hi; /* 1 <= need <= entries in bin hi */
  memset(hist, 0, TOPK_BINS * sizeof *hist);
  for (size_t t = 0; t < c->na; t++) {
    uint32_t key = c->a_bits[t] & 0x7fffffffu;
    if ((key >> 16) == hi) hist[key & 0xffffu]++;
  }
  uint32_t lo = find_bin(hist, TOPK_BINS - 1, need, &above_lo);
  uint32_t thr = (hi << 16) | lo;
  size_t above = above_hi + above_lo;
  size_t ties = k - above;
  for (size_t t = 0; t < c->na; t++) {
    /* The residual writes land about 1/k of the buffer apart, each on a
     * cache line the fused pass has long evicted: ask for them early. */
    if (out_res && !cold && t + 16 < c->na) __builtin_prefetch((const char *)out_res + 4 * (size_t)c->a_idx[t + 16], 1);
    uint32_t key = c->a_bits[t] & 0x7fffffffu;
    float a = sq_bits_float(c->a_bits[t]);
    int take = 0;
    if (j < k) {
      if (key > thr) {
        take = 1;
      } else if (key == thr && ties > 0) {
        take = 1;
        ties--;
      }
    }
    if (take) emit(idx_out, val_out, j++, c->a_idx[t], a, fp16, scale, res != NULL, out_res, cold);
    else if (out_res && !sq_isfinite(a)) put_res(out_res, c->a_idx[t], 0.0f, cold); /* finite: out_res holds a already */
  }
}

/* All of A, and the first k - na ties at v: merge the two index lists.
 * Entries of B are finite (v <= the largest finite key). */
static void merge_with_ties(const cands *c, const float *g, const float *res, float *out_res, size_t k, int fp16,
                            float scale, char *idx_out, char *val_out, int cold) {
  size_t j = 0;
  size_t need = k - c->na, ta = 0, tb = 0;
  while (ta < c->na || tb < need) {
    if (out_res && !cold && ta + 16 < c->na) __builtin_prefetch((const char *)out_res + 4 * (size_t)c->a_idx[ta + 16], 1);
    if (tb >= need || (ta < c->na && c->a_idx[ta] < c->b_idx[tb])) {
      emit(idx_out, val_out, j++, c->a_idx[ta], sq_bits_float(c->a_bits[ta]), fp16, scale, res != NULL,
           out_res, cold);
      ta++;
    } else {
      uint32_t idx = c->b_idx[tb++];
      /* a tie's a: read back where the pass stored it in place; formed
       * again, to the same bits, where it went into a buffer of its own,
       * whose lines the streamed writes here would evict between two
       * reads of one line (constant data: 200 against 76 ms a call) */
      float a = out_res && out_res == res ? ldf(out_res, idx) : res ? ldf(g, idx) + ldf(res, idx)
                                                                    : ldf(g, idx);
      emit(idx_out, val_out, j++, idx, a, fp16, scale, res != NULL, out_res, cold);
    }
  }
}

/* Writes the slot from the candidates; returns 0, or -1 when they do not
 * decide the selection (the caller takes the full path). */
static int sampled_path(const float *g, const float *res, float *out_res, float *backup, size_t n, size_t k, int fp16,
                        float scale, char *idx_out, char *val_out, void *workspace, uint32_t v) {
  uint32_t *ws = (uint32_t *)workspace;
  uint32_t *hist = (uint32_t *)((char *)workspace + keys_bytes(n));
  /* Non-finite keys must all land in list A (they rank above every finite
   * one), so v stays at or below the largest finite key. */
  if (v > 0x7f7fffffu) v = 0x7f7fffffu;

  /* Workspace words: B (k), then A's indices and bits (cap_a each). */
  cands c;
  /* A's two arrays carry 8 words of slack each for the SIMD stores. */
  c.cap_b = k;
  c.b_idx = ws;
  c.cap_a = (keys_bytes(n) / 4 - k - 16) / 2;
  c.a_idx = ws + k;
  c.a_bits = c.a_idx + c.cap_a + 8;
  c.na = c.nb = 0;
  c.streamed = 0;
  size_t i = 0;
#ifdef SQ_TOPK_AVX2
  if (squall__cpu_x86(SQ_CPU_AVX2)) i = fused_avx2(g, res, out_res, backup, n, v, &c);
#endif
  fused_scalar(g, res, out_res, backup, i, n, v, &c);

  /* From here on, when encoding, a lives in out_res. Where the fused pass
   * streamed it (a buffer of its own, not res), the writes below go past
   * the cache too, without the prefetches that would otherwise read their
   * lines in first (4 ranks on 2 cores: 41.7 against 38 ms per encode of
   * 16M floats, medians); elsewhere they are prefetched and stored. */
  if (c.na > c.cap_a || c.na + c.nb < k) return -1;
  const int cold = c.streamed;
  if (c.na >= k) select_among_a(&c, hist, res, out_res, k, fp16, scale, idx_out, val_out, cold);
  else merge_with_ties(&c, g, res, out_res, k, fp16, scale, idx_out, val_out, cold);
#ifdef SQ_TOPK_AVX2
  if (cold) _mm_sfence(); /* the streamed writes are visible before what follows */
#endif
  return 0;
}

/* Both paths behind one entry; bound is the sampled path's v, or
 * SQ_TOPK_SAMPLE_BOUND to draw it from the data. out_res: where the
 * updated residual goes when encoding (res itself, or a buffer of its own
 * that leaves res as it was), NULL to select only; backup (encoding in
 * place only): where res as it was goes before anything changes it, NULL
 * for none. */
static int topk_run(const float *g, const float *res, float *out_res, float *backup, size_t n, size_t k,
                    squallValueType_t values, float scale, void *slot, void *workspace, uint64_t bound,
                    int *path) {
  /* Indices are u32, and a histogram bin counts in u32. Nothing has
   * changed when this fails. */
  if (k > n || (uint64_t)n > UINT32_MAX) return -1;
  if (!out_res || !res) backup = NULL; /* nothing to back up */
  /* a = g + res, the fp16 values and the residual as the definition and
   * the CUDA twin form them, whatever the application's rounding mode,
   * flush-to-zero or denormals-are-zero */
  const unsigned fp = squall__fp_default_begin();
  const int fp16 = values == squallValueFp16;
  char *idx_out = (char *)slot;
  char *val_out = idx_out + 4 * k;
  int taken = SQ_TOPK_PATH_FULL;

  /* Padding is zeroed so that a slot's bytes are a function of its content
   * (the lossless stage compresses them; all ranks compare nothing else). */
  size_t used = k * (fp16 ? 6 : 8);
  memset(idx_out + used, 0, squall__topk_slot_bytes(k, values) - used);
  if (fp16) memcpy(idx_out + squall__slot_scale_offset(k), &scale, sizeof scale);

  /* The sampled path needs room for its lists (k ties plus a candidate
   * list of a useful size, both inside the keys' space) and a sample much
   * smaller than n. */
  if (k > 0 && n >= TOPK_SAMPLED_MIN_N && k <= n / 8) {
    uint32_t v = bound == SQ_TOPK_SAMPLE_BOUND
                     ? sample_bound(g, res, n, k, (uint32_t *)((char *)workspace + keys_bytes(n)))
                     : (uint32_t)(bound > 0x7fffffffu ? 0x7fffffffu : bound);
    /* the fused pass completes the backup whatever the sample says */
    if (sampled_path(g, res, out_res, backup, n, k, fp16, scale, idx_out, val_out, workspace, v) == 0) {
      taken = SQ_TOPK_PATH_SAMPLED;
    } else {
      taken = SQ_TOPK_PATH_FALLBACK; /* when encoding, out_res holds a now */
      full_path(g, res, out_res, out_res != NULL, n, k, fp16, scale, idx_out, val_out, workspace);
    }
  } else {
    if (backup) memcpy(backup, res, n * sizeof(float));
    full_path(g, res, out_res, 0, n, k, fp16, scale, idx_out, val_out, workspace);
  }
  squall__fp_default_end(fp);
  if (path) *path = taken;
  return 0;
}

int squall__topk_select_bound(const float *g, const float *res, size_t n, size_t k,
                              squallValueType_t values, float scale, void *slot, void *workspace,
                              uint64_t bound, int *path) {
  return topk_run(g, res, NULL, NULL, n, k, values, scale, slot, workspace, bound, path);
}

int squall__topk_select(const float *g, const float *res, size_t n, size_t k, squallValueType_t values,
                        float scale, void *slot, void *workspace) {
  return topk_run(g, res, NULL, NULL, n, k, values, scale, slot, workspace, SQ_TOPK_SAMPLE_BOUND, NULL);
}

int squall__topk_encode_bound(const float *g, float *res, size_t n, size_t k, squallValueType_t values,
                              float scale, void *slot, void *workspace, uint64_t bound, int *path) {
  return topk_run(g, res, res, NULL, n, k, values, scale, slot, workspace, bound, path);
}

int squall__topk_encode(const float *g, float *res, size_t n, size_t k, squallValueType_t values,
                        float scale, void *slot, void *workspace) {
  return topk_run(g, res, res, NULL, n, k, values, scale, slot, workspace, SQ_TOPK_SAMPLE_BOUND, NULL);
}

int squall__topk_encode_backup_bound(const float *g, float *res, size_t n, size_t k, squallValueType_t values,
                                     float scale, void *slot, void *workspace, float *backup, uint64_t bound,
                                     int *path) {
  return topk_run(g, res, res, backup, n, k, values, scale, slot, workspace, bound, path);
}

int squall__topk_encode_backup(const float *g, float *res, size_t n, size_t k, squallValueType_t values,
                               float scale, void *slot, void *workspace, float *backup) {
  return topk_run(g, res, res, backup, n, k, values, scale, slot, workspace, SQ_TOPK_SAMPLE_BOUND, NULL);
}

int squall__topk_encode_to_bound(const float *g, const float *res, float *out_res, size_t n, size_t k,
                                 squallValueType_t values, float scale, void *slot, void *workspace,
                                 uint64_t bound, int *path) {
  return topk_run(g, res, out_res, NULL, n, k, values, scale, slot, workspace, bound, path);
}

int squall__topk_encode_to(const float *g, const float *res, float *out_res, size_t n, size_t k,
                           squallValueType_t values, float scale, void *slot, void *workspace) {
  return topk_run(g, res, out_res, NULL, n, k, values, scale, slot, workspace, SQ_TOPK_SAMPLE_BOUND, NULL);
}

/*
 * codec_topk.c - the host top-k encoder: exact selection of the k entries of
 * largest |a|, written as one slot of ascending u32 indices and fp32 or
 * scaled fp16 values, with the error-feedback residual update. The CUDA
 * twin (cuda/topk.cu) selects the same entries and writes the same bytes;
 * both take keys, rounding and the residual from codec_math.h.
 *
 * Two ways to the same answer:
 *  - the sampled path (large n, k well below n): a sample of the keys gives
 *    a bound v that the k-th largest key very likely reaches; one fused
 *    pass forms a = g + res, stores a into res and collects the entries
 *    with key > v (list A, with their a) and the first k with key == v
 *    (list B: ties at the bound, lowest index first, which is the tie rule);
 *    the exact selection then runs over the candidates only. One streaming
 *    pass over g and res, about the cost of res += g.
 *  - the full path: radix select over every key (two 16-bit histogram
 *    passes), then one pass that writes the slot. It runs for small n and
 *    when the sample misleads: too few candidates (the bound was above the
 *    k-th key) or more than fit (it was far below). Then res already holds
 *    a, and the full path reads a from there.
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
#include <math.h>
#include <string.h>

#include "codecs/codec.h"

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

/* Unaligned-safe element access. */
static inline float ldf(const float *p, size_t i) {
  float x;
  memcpy(&x, (const char *)p + 4 * i, sizeof x);
  return x;
}
static inline void stf(float *p, size_t i, float x) { memcpy((char *)p + 4 * i, &x, sizeof x); }
static inline void st32(char *p, size_t i, uint32_t x) { memcpy(p + 4 * i, &x, sizeof x); }

size_t squall__topk_k(size_t count, double ratio) {
  if (count == 0) return 0;
  if (!(ratio > 0.0)) return 1; /* also NaN */
  if (ratio >= 1.0) return count;
  double x = ratio * (double)count; /* < count <= 2^64, so the cast below is defined */
  size_t m = (size_t)x;             /* floor; x - m is exact (truncating a double is a double) */
  double frac = x - (double)m;
  /* ratio is the double nearest a decimal (0.07 is 0.07000000000000000666...),
   * so ratio*count can land a few ulps above an integer that the user meant
   * exactly: 0.07*100 == 7.000000000000001. A fraction within 4 ulps of x is
   * that rounding, not a real remainder, and does not take one more entry. */
  size_t k = frac > 4.0 * DBL_EPSILON * x ? m + 1 : m;
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

/* What one selected entry puts in the slot (entry j) and leaves in res. */
static inline void emit(char *idx_out, char *val_out, size_t j, uint32_t i, float a, int fp16,
                        float scale, float *res) {
  st32(idx_out, j, i);
  if (fp16) {
    float r;
    uint16_t h = sq_half_encode_a(SQ_HALF_FP16, a, res ? &r : NULL, scale);
    memcpy(val_out + 2 * j, &h, sizeof h);
    if (res) stf(res, i, r);
  } else {
    memcpy(val_out + 4 * j, &a, sizeof a);
    if (res) stf(res, i, sq_residual_after(a, a)); /* 0: sent whole */
  }
}

/* The full path. a = g + res, or a = res when a_in_res (the sampled path
 * has already stored a there), or g when res is NULL. */
static void full_path(const float *g, float *res, int a_in_res, size_t n, size_t k, int fp16,
                      float scale, char *idx_out, char *val_out, void *workspace) {
  uint32_t *keys = (uint32_t *)workspace;
  uint32_t *hist = (uint32_t *)((char *)workspace + keys_bytes(n));
#define A_OF(i) (a_in_res ? ldf(res, i) : res ? ldf(g, i) + ldf(res, i) : ldf(g, i))
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
    if (take) {
      emit(idx_out, val_out, j++, (uint32_t)i, a, fp16, scale, res);
    } else if (res) {
      stf(res, i, sq_residual_keep(a));
    }
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

/* A key bound v: of TOPK_SAMPLE keys drawn one per stratum (at a hashed
 * position in it, so that periodic data does not fool a fixed stride), the
 * one of rank k/n * s plus four standard deviations and a little. The
 * count of keys >= v then reaches k unless the data is far from what the
 * sample saw; the caller checks, and the full path covers the rest. */
static uint32_t sample_bound(const float *g, const float *res, size_t n, size_t k, uint32_t *scratch) {
  const size_t s = TOPK_SAMPLE, stride = n / s;
  for (size_t j = 0; j < s; j++) {
    size_t i = j * stride + (size_t)(mix64(j + 0x746f706bu) % stride);
    scratch[j] = sq_topk_key(res ? ldf(g, i) + ldf(res, i) : ldf(g, i));
  }
  double q = (double)k / (double)n * (double)s;
  double r = q + 4.0 * sqrt(q) + 8.0;
  size_t rank = r >= (double)(s - 1) ? s - 1 : (size_t)r;
  return select_desc(scratch, s, rank);
}

/* The candidates the fused pass collects. */
typedef struct {
  uint32_t *a_idx;   /* list A: key > v, index order */
  uint32_t *a_bits;  /* their a */
  size_t na, cap_a;  /* na counts past cap_a (then the path gives up) */
  uint32_t *b_idx;   /* list B: key == v, the first k in index order */
  size_t nb, cap_b;  /* nb counts every tie */
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

/* One pass: a = g + res (or g), res = a, and the candidates for v. */
static void fused_scalar(const float *g, float *res, size_t from, size_t n, uint32_t v, cands *c) {
  for (size_t i = from; i < n; i++) {
    float a = ldf(g, i);
    if (res) {
      a += ldf(res, i);
      stf(res, i, a);
    }
    if ((sq_float_bits(a) & 0x7fffffffu) >= v) take_lane(c, (uint32_t)i, a, v);
  }
}

#ifdef SQ_TOPK_AVX2
/* The fused pass, 8 lanes at a time; lanes at or above v (about 1 in 70
 * for k = n/100) go through take_lane. Returns where it stopped. */
__attribute__((target("avx2"))) static size_t fused_avx2(const float *g, float *res, size_t n, uint32_t v,
                                                       cands *c) {
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  const __m256i vv = _mm256_set1_epi32((int)v);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps((const float *)((const char *)g + 4 * i));
    if (res) {
      a = _mm256_add_ps(a, _mm256_loadu_ps((const float *)((const char *)res + 4 * i)));
      _mm256_storeu_ps((float *)((char *)res + 4 * i), a);
    }
    __m256i key = _mm256_and_si256(_mm256_castps_si256(a), absmask);
    /* keys and v are below 2^31: the signed compares are unsigned ones */
    unsigned gt = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, vv)));
    unsigned eq = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(key, vv)));
    if ((gt | eq) == 0) continue;
    if (eq && c->nb >= c->cap_b && !gt) { /* ties past the first k: only counted */
      c->nb += (size_t)__builtin_popcount(eq);
      continue;
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, a);
    unsigned m = gt | eq;
    while (m) {
      int b = __builtin_ctz(m);
      m &= m - 1;
      take_lane(c, (uint32_t)(i + (size_t)b), lanes[b], v);
    }
  }
  return i;
}
#endif

/* Writes the slot from the candidates; returns 0, or -1 when they do not
 * decide the selection (the caller takes the full path). */
static int sampled_path(const float *g, float *res, size_t n, size_t k, int fp16, float scale,
                        char *idx_out, char *val_out, void *workspace, uint32_t v) {
  uint32_t *ws = (uint32_t *)workspace;
  uint32_t *hist = (uint32_t *)((char *)workspace + keys_bytes(n));
  /* Non-finite keys must all land in list A (their residual becomes 0
   * below), so v stays at or below the largest finite key. */
  if (v > 0x7f7fffffu) v = 0x7f7fffffu;

  /* Workspace words: B (k), then A's indices and bits (cap_a each). */
  cands c;
  c.cap_b = k;
  c.b_idx = ws;
  c.cap_a = (keys_bytes(n) / 4 - k) / 2;
  c.a_idx = ws + k;
  c.a_bits = c.a_idx + c.cap_a;
  c.na = c.nb = 0;
  size_t i = 0;
#ifdef SQ_TOPK_AVX2
  if (squall__cpu_x86(SQ_CPU_AVX2)) i = fused_avx2(g, res, n, v, &c);
#endif
  fused_scalar(g, res, i, n, v, &c);

  /* From here on a lives in res (or g when res is NULL). */
  if (c.na > c.cap_a || c.na + c.nb < k) return -1;
  const float *abuf = res ? res : g;
  size_t j = 0;
  if (c.na >= k) {
    /* The k-th largest key is above v: select among A. Its keys are its
     * bits without the sign; both radix passes read them from a_bits. */
    size_t above_hi, above_lo;
    memset(hist, 0, TOPK_BINS * sizeof *hist);
    for (size_t t = 0; t < c.na; t++) hist[(c.a_bits[t] & 0x7fffffffu) >> 16]++;
    uint32_t hi = find_bin(hist, (TOPK_BINS >> 1) - 1, k, &above_hi);
    size_t need = k - above_hi; /* 1 <= need <= entries in bin hi */
    memset(hist, 0, TOPK_BINS * sizeof *hist);
    for (size_t t = 0; t < c.na; t++) {
      uint32_t key = c.a_bits[t] & 0x7fffffffu;
      if ((key >> 16) == hi) hist[key & 0xffffu]++;
    }
    uint32_t lo = find_bin(hist, TOPK_BINS - 1, need, &above_lo);
    uint32_t thr = (hi << 16) | lo;
    size_t above = above_hi + above_lo;
    size_t ties = k - above;
    for (size_t t = 0; t < c.na; t++) {
      uint32_t key = c.a_bits[t] & 0x7fffffffu;
      float a = sq_bits_float(c.a_bits[t]);
      int take = 0;
      if (j < k) {
        if (key > thr) {
          take = 1;
        } else if (key == thr && ties > 0) {
          take = 1;
          ties--;
        }
      }
      if (take) emit(idx_out, val_out, j++, c.a_idx[t], a, fp16, scale, res);
      else if (res) stf(res, c.a_idx[t], sq_residual_keep(a));
    }
  } else {
    /* All of A, and the first k - na ties at v: merge the two index
     * lists. Entries of B are finite (v <= the largest finite key). */
    size_t need = k - c.na, ta = 0, tb = 0;
    while (ta < c.na || tb < need) {
      if (tb >= need || (ta < c.na && c.a_idx[ta] < c.b_idx[tb])) {
        emit(idx_out, val_out, j++, c.a_idx[ta], sq_bits_float(c.a_bits[ta]), fp16, scale, res);
        ta++;
      } else {
        uint32_t idx = c.b_idx[tb++];
        emit(idx_out, val_out, j++, idx, ldf(abuf, idx), fp16, scale, res);
      }
    }
  }
  return 0;
}

/* Both paths behind one entry; bound is the sampled path's v, or
 * SQ_TOPK_SAMPLE_BOUND to draw it from the data. */
int squall__topk_encode_bound(const float *g, float *res, size_t n, size_t k, squallValueType_t values,
                              float scale, void *slot, void *workspace, uint64_t bound, int *path) {
  /* Indices are u32, and a histogram bin counts in u32. */
  if (k > n || (uint64_t)n > UINT32_MAX) return -1;
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
    if (sampled_path(g, res, n, k, fp16, scale, idx_out, val_out, workspace, v) == 0) {
      taken = SQ_TOPK_PATH_SAMPLED;
    } else {
      taken = SQ_TOPK_PATH_FALLBACK; /* res holds a now */
      full_path(g, res, res != NULL, n, k, fp16, scale, idx_out, val_out, workspace);
    }
  } else {
    full_path(g, res, 0, n, k, fp16, scale, idx_out, val_out, workspace);
  }
  if (path) *path = taken;
  return 0;
}

int squall__topk_encode(const float *g, float *res, size_t n, size_t k, squallValueType_t values,
                        float scale, void *slot, void *workspace) {
  return squall__topk_encode_bound(g, res, n, k, values, scale, slot, workspace, SQ_TOPK_SAMPLE_BOUND, NULL);
}

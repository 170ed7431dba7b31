/*
 * codec_topk.c - the host top-k encoder: exact selection of the k entries of
 * largest |a| by radix select (linear in n, no sort), written as one slot of
 * ascending u32 indices and fp32 or scaled fp16 values, with the
 * error-feedback residual update. The CUDA twin (cuda/topk.cu) selects the
 * same entries and writes the same bytes; both take keys, rounding and the
 * residual from codec_math.h.
 *
 * Only codec.h and libc here: the standalone GPU self-test build compiles
 * this file without config.h or the logger.
 */
#include <float.h>
#include <string.h>

#include "codecs/codec.h"

/* Bins of one radix pass: 16 bits of the key at a time. A key is |a| as
 * bits, so its top bit is 0 and the first pass uses only the lower half. */
#define TOPK_BINS 65536u

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

/* The keys come first, padded to 8 bytes, then one histogram. */
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

int squall__topk_encode(const float *g, float *res, size_t n, size_t k, squallValueType_t values,
                        float scale, void *slot, void *workspace) {
  /* Indices are u32, and a histogram bin counts in u32. */
  if (k > n || (uint64_t)n > UINT32_MAX) return -1;
  const int fp16 = values == squallValueFp16;
  char *idx_out = (char *)slot;
  char *val_out = idx_out + 4 * k;
  uint32_t *keys = (uint32_t *)workspace;
  uint32_t *hist = (uint32_t *)((char *)workspace + keys_bytes(n));

  /* Padding is zeroed so that a slot's bytes are a function of its content
   * (the lossless stage compresses them; all ranks compare nothing else). */
  size_t used = k * (fp16 ? 6 : 8);
  memset(idx_out + used, 0, squall__topk_slot_bytes(k, values) - used);
  if (fp16) memcpy(idx_out + squall__slot_scale_offset(k), &scale, sizeof scale);

  /* Threshold T: the k-th largest key. 'above' keys are > T; the remaining
   * k - above selections are keys equal to T, lowest index first. */
  uint32_t thr = 0;
  size_t above = 0;
  if (k > 0) {
    memset(hist, 0, TOPK_BINS * sizeof *hist);
    for (size_t i = 0; i < n; i++) {
      float a = res ? g[i] + res[i] : g[i];
      uint32_t key = sq_topk_key(a);
      keys[i] = key;
      hist[key >> 16]++;
    }
    size_t above_hi, above_lo;
    uint32_t hi = find_bin(hist, (TOPK_BINS >> 1) - 1, k, &above_hi);
    size_t need = k - above_hi; /* 1 <= need <= entries in bin hi */
    memset(hist, 0, TOPK_BINS * sizeof *hist);
    for (size_t i = 0; i < n; i++)
      if ((keys[i] >> 16) == hi) hist[keys[i] & 0xffffu]++;
    uint32_t lo = find_bin(hist, TOPK_BINS - 1, need, &above_lo);
    thr = (hi << 16) | lo;
    above = above_hi + above_lo;
  }

  size_t ties = k - above, j = 0;
  for (size_t i = 0; i < n; i++) {
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
    if (!take) {
      if (res) res[i] = sq_residual_keep(g[i] + res[i]);
      continue;
    }
    uint32_t index = (uint32_t)i;
    memcpy(idx_out + 4 * j, &index, sizeof index);
    if (fp16) {
      /* a = g + res, code = round(a*scale), res = a - decode(code). */
      uint16_t h = sq_half_encode_elem(SQ_HALF_FP16, g[i], res ? &res[i] : NULL, scale);
      memcpy(val_out + 2 * j, &h, sizeof h);
    } else {
      float a = res ? g[i] + res[i] : g[i];
      memcpy(val_out + 4 * j, &a, sizeof a);
      if (res) res[i] = sq_residual_after(a, a); /* 0: sent whole */
    }
    j++;
  }
  return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fuzz_sparse.c - the sparse decoder (squall__sparse_decode) on the slots
 * of every rank, which come from the network.
 *
 * Input: FLAGS NRANKS K(u16) N(u16) REST. FLAGS bit 0: fp16 values; bit 1:
 * REST gives index gaps (mostly valid slots) instead of raw slot bytes;
 * bit 2 (where bit 1 is clear): REST gives each rank's slot as one packed
 * part (squall__topk_slot_put_packed, topk_parts.c), and N counts in units
 * of 37 elements, so that parts span several 65536-element pages.
 * NRANKS is -1..8, K 0..256, N 0..8191.
 * Invariants:
 *   - the decoder accepts exactly the slots whose indices are below n and
 *     strictly ascending (checked here independently), with nranks >= 0;
 *   - refused: dense is all +0.0, never a partial sum;
 *   - accepted: dense is bit for bit the rank-ordered sum of the slots'
 *     values (fp16 through codec_math.h's decode), +0.0 elsewhere;
 *   - nothing outside the slots and dense is touched (exact-size blocks);
 *   - packed parts: a part is accepted exactly when its page counts add up
 *     to K; a refused one writes nothing into its slot; an accepted one
 *     rebuilds entry j's index as page << 16 | low half, and goes through
 *     the same validation as a raw slot.
 */
#include "codecs/codec.h"
#include "fuzz/fuzz.h"

static int slot_ok(const char *slot, size_t k, size_t n) {
  for (size_t j = 0; j < k; j++) {
    uint32_t v, prev;
    memcpy(&v, slot + 4 * j, 4);
    if (v >= n) return 0;
    if (j) {
      memcpy(&prev, slot + 4 * (j - 1), 4);
      if (v <= prev) return 0;
    }
  }
  return 1;
}

static float value_at(const char *slot, size_t k, size_t j, int fp16) {
  if (!fp16) {
    float v;
    memcpy(&v, slot + 4 * k + 4 * j, 4);
    return v;
  }
  float scale;
  uint16_t h;
  memcpy(&scale, slot + squall__slot_scale_offset(k), 4);
  memcpy(&h, slot + 4 * k + 2 * j, 2);
  return sq_half_decode_elem(SQ_HALF_FP16, h, scale);
}

static int same_float(float a, float b) {
  if (a != a && b != b) return 1; /* NaN: any payload */
  return sq_float_bits(a) == sq_float_bits(b);
}

/* Slots from gaps: each gap one byte, or three when its top bit is set, so
 * that indices mostly ascend and sometimes run past n. */
static void fill_from_gaps(char *slots, int nranks, size_t k, size_t sb, fuzz_reader *r) {
  for (int rk = 0; rk < nranks; rk++) {
    char *slot = slots + (size_t)rk * sb;
    uint32_t next = 0;
    for (size_t j = 0; j < k; j++) {
      uint32_t gap = fuzz_take(r, 1);
      if (gap & 0x80) gap = (gap & 0x7f) | (fuzz_take(r, 2) << 7);
      uint32_t v = next + gap;
      memcpy(slot + 4 * j, &v, 4);
      next = v + 1;
    }
    for (size_t i = 4 * k; i < sb; i++) slot[i] = (char)fuzz_take(r, 1);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_reader r = {data, size};
  uint32_t flags = fuzz_take(&r, 1);
  const int fp16 = flags & 1;
  const squallValueType_t vt = fp16 ? squallValueFp16 : squallValueFp32;
  const int nranks = (int)(fuzz_take(&r, 1) % 10) - 1;
  const size_t k = fuzz_take(&r, 2) % 257;
  const int packed = (flags & 6) == 4;
  const size_t n = (fuzz_take(&r, 2) & 0x1fff) * (packed ? 37 : 1);
  const size_t sb = squall__topk_slot_bytes(k, vt);
  const size_t total = nranks > 0 ? (size_t)nranks * sb : 0;

  char *slots = fuzz_alloc(total);
  if (flags & 2) {
    fill_from_gaps(slots, nranks, k, sb, &r);
  } else if (packed) {
    const size_t pb = squall__topk_part_packed_bytes(k, n, vt);
    if (pb == 0) { /* not a size that is ever packed */
      free(slots);
      return 0;
    }
    char *part = fuzz_alloc(pb), *before = fuzz_alloc(sb);
    for (int rk = 0; rk < nranks; rk++) {
      char *slot = slots + (size_t)rk * sb;
      size_t m = r.left < pb ? r.left : pb;
      memset(part, 0, pb);
      memcpy(part, r.p, m);
      r.p += m;
      r.left -= m;
      memcpy(before, slot, sb);
      /* the counts, as the format defines them: one u32 per 65536 elements */
      uint64_t sum = 0;
      const size_t pages = (n + 65535) / 65536;
      for (size_t q = 0; q < pages; q++) {
        uint32_t count;
        memcpy(&count, part + 4 * q, 4);
        sum += count;
      }
      int ret = squall__topk_slot_put_packed(part, k, n, slot, k, 0, vt);
      FUZZ_CHECK(ret == (sum == k ? 0 : -1), "rank %d: counts add up to %llu of %zu, put returned %d", rk,
                 (unsigned long long)sum, k, ret);
      if (ret != 0) {
        FUZZ_CHECK(memcmp(before, slot, sb) == 0, "a refused packed part wrote into rank %d's slot", rk);
        continue;
      }
      /* accepted: entry j's index is its page's number over its low half */
      size_t j = 0;
      for (size_t q = 0; q < pages; q++) {
        uint32_t count;
        memcpy(&count, part + 4 * q, 4);
        for (uint32_t e = 0; e < count; e++, j++) {
          uint16_t low;
          uint32_t idx;
          memcpy(&low, part + 4 * pages + 2 * j, 2);
          memcpy(&idx, slot + 4 * j, 4);
          FUZZ_CHECK(idx == (uint32_t)(q << 16 | low), "rank %d entry %zu: index %u, the part says page %zu low %u",
                     rk, j, idx, q, low);
        }
      }
    }
    free(part);
    free(before);
  } else {
    size_t m = r.left < total ? r.left : total;
    memcpy(slots, r.p, m);
  }
  float *dense = fuzz_alloc(n * sizeof *dense);
  memset(dense, 0x7f, n * sizeof *dense); /* anything but zero: the decoder must clear it */

  int valid = nranks >= 0;
  for (int rk = 0; valid && rk < nranks; rk++) valid = slot_ok(slots + (size_t)rk * sb, k, n);

  int ret = squall__sparse_decode(slots, nranks, k, vt, dense, n);
  if (!valid) {
    FUZZ_CHECK(ret == -1, "invalid slots accepted (nranks=%d k=%zu n=%zu)", nranks, k, n);
    for (size_t i = 0; i < n; i++)
      FUZZ_CHECK(sq_float_bits(dense[i]) == 0, "refused, but dense[%zu] is not +0", i);
  } else {
    FUZZ_CHECK(ret == 0, "valid slots refused (nranks=%d k=%zu n=%zu)", nranks, k, n);
    float *ref = fuzz_alloc(n * sizeof *ref);
    for (int rk = 0; rk < nranks; rk++) {
      const char *slot = slots + (size_t)rk * sb;
      for (size_t j = 0; j < k; j++) {
        uint32_t idx;
        memcpy(&idx, slot + 4 * j, 4);
        ref[idx] += value_at(slot, k, j, fp16);
      }
    }
    for (size_t i = 0; i < n; i++)
      FUZZ_CHECK(same_float(dense[i], ref[i]), "dense[%zu] = %a, the rank-ordered sum is %a", i,
                 (double)dense[i], (double)ref[i]);
    free(ref);
  }
  free(dense);
  free(slots);
  return 0;
}

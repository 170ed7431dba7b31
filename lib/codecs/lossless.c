/* lossless.c - varint gaps + zstd for top-k slots. Sorted indices at 1%
 * density have gaps near 100, so one or two varint bytes replace four. */
#include "common/internal.h"

#include <string.h>
#include <zstd.h>

#include "codecs/codec.h"
#include "codecs/lossless.h"

static size_t value_bytes(size_t k, squallValueType_t values) {
  return squall__topk_slot_bytes(k, values) - 4 * k; /* values, scale and padding */
}

/* Raw (pre-zstd) size: at most 5 varint bytes per index, then the value part. */
static size_t raw_bound(size_t k, squallValueType_t values) { return 5 * k + value_bytes(k, values); }

size_t squall__lossless_bound(size_t k, squallValueType_t values) {
  return ZSTD_compressBound(raw_bound(k, values));
}

size_t squall__lossless_scratch_bytes(size_t k, squallValueType_t values) {
  return raw_bound(k, values);
}

size_t squall__lossless_encode(const void *slot, size_t k, squallValueType_t values, int level,
                               void *out, size_t capacity, void *scratch) {
  const uint32_t *idx = squall__slot_indices(slot);
  unsigned char *raw = scratch, *p = raw;
  uint32_t prev = 0;
  for (size_t i = 0; i < k; i++) {
    uint32_t gap = idx[i] - (i ? prev + 1 : 0); /* ascending: gaps are >= 0 */
    prev = idx[i];
    while (gap >= 0x80) {
      *p++ = (unsigned char)(gap | 0x80);
      gap >>= 7;
    }
    *p++ = (unsigned char)gap;
  }
  size_t vb = value_bytes(k, values);
  memcpy(p, (const char *)slot + 4 * k, vb);
  p += vb;
  size_t z = ZSTD_compress(out, capacity, raw, (size_t)(p - raw), level);
  return ZSTD_isError(z) ? 0 : z;
}

int squall__lossless_decode(const void *in, size_t size, size_t k, squallValueType_t values, size_t n,
                            void *slot, void *scratch) {
  size_t cap = raw_bound(k, values);
  unsigned long long content = ZSTD_getFrameContentSize(in, size);
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN || content > cap)
    return -1;
  size_t got = ZSTD_decompress(scratch, cap, in, size);
  if (ZSTD_isError(got) || got != content) return -1;
  const unsigned char *p = scratch, *end = p + got;
  uint32_t *idx = (uint32_t *)slot;
  uint64_t next = 0; /* smallest index the next entry may take */
  for (size_t i = 0; i < k; i++) {
    uint64_t gap = 0;
    int shift = 0;
    for (;;) {
      if (p >= end || shift > 28) return -1;
      unsigned char b = *p++;
      gap |= (uint64_t)(b & 0x7f) << shift;
      shift += 7;
      if (!(b & 0x80)) break;
    }
    uint64_t v = next + gap;
    if (v >= n) return -1;
    idx[i] = (uint32_t)v;
    next = v + 1;
  }
  size_t vb = value_bytes(k, values);
  if ((size_t)(end - p) != vb) return -1;
  memcpy((char *)slot + 4 * k, p, vb);
  return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * topk_parts.c - a round's part of a top-k slot (entries [from, from + m)
 * of a k-entry slot), as it goes on the wire: raw, an m-entry slot of its
 * own, or packed, with 16-bit indices.
 *
 * Packed: the dense vector falls into pages of 65536 elements. A part
 * holds one u32 count of its entries per page, then the low 16 bits of
 * each index, then the values (and fp16's scale) as a raw part has them:
 * 6 bytes an entry for fp32 values against 8, and 4 against 6 for fp16.
 * The counts cost 4 bytes per page, so a part is packed only where they
 * cost less than the 2 bytes per entry saved, which the density decides
 * (squall__topk_part_packed_bytes). The size is a function of m, n and
 * the value type alone, so that every rank's part of a round has the
 * same size.
 *
 * Only codec.h and libc here.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "codecs/codec.h"

#define PAGE_BITS 16

static size_t pages_of(size_t n) { return (n + ((size_t)1 << PAGE_BITS) - 1) >> PAGE_BITS; }

void squall__topk_slot_cut(const void *slot, size_t k, size_t from, size_t m, squallValueType_t values,
                           void *part) {
  const size_t w = squall__slot_value_bytes(values);
  const char *s = slot;
  char *d = part;
  memcpy(d, s + 4 * from, 4 * m);
  memcpy(d + 4 * m, s + 4 * k + w * from, w * m);
  size_t used = (4 + w) * m;
  memset(d + used, 0, squall__topk_slot_bytes(m, values) - used); /* no stray bytes on the wire */
  if (w == 2) memcpy(d + squall__slot_scale_offset(m), s + squall__slot_scale_offset(k), sizeof(float));
}

void squall__topk_slot_put(const void *part, size_t m, void *slot, size_t k, size_t from,
                           squallValueType_t values) {
  const size_t w = squall__slot_value_bytes(values);
  const char *s = part;
  char *d = slot;
  memcpy(d + 4 * from, s, 4 * m);
  memcpy(d + 4 * k + w * from, s + 4 * m, w * m);
  if (w == 2) memcpy(d + squall__slot_scale_offset(k), s + squall__slot_scale_offset(m), sizeof(float));
}

/* Byte offsets inside a packed part: counts, low halves, values, scale. */
typedef struct {
  size_t pages, low, values, scale, bytes;
} packed_layout;

static packed_layout packed(size_t m, size_t n, squallValueType_t values) {
  packed_layout L;
  L.pages = pages_of(n);
  L.low = 4 * L.pages;
  L.values = (L.low + 2 * m + 3) & ~(size_t)3;
  L.scale = L.values + squall__slot_value_bytes(values) * m;
  if (values == squallValueFp16) L.scale = (L.scale + 3) & ~(size_t)3;
  L.bytes = (L.scale + (values == squallValueFp16 ? sizeof(float) : 0) + 7) & ~(size_t)7;
  return L;
}

size_t squall__topk_part_packed_bytes(size_t m, size_t n, squallValueType_t values) {
  if (m == 0 || n == 0 || (uint64_t)n > UINT32_MAX) return 0;
  packed_layout L = packed(m, n, values);
  return L.bytes < squall__topk_slot_bytes(m, values) ? L.bytes : 0;
}

void squall__topk_slot_cut_packed(const void *slot, size_t k, size_t from, size_t m, size_t n,
                                  squallValueType_t values, void *part) {
  const packed_layout L = packed(m, n, values);
  const size_t w = squall__slot_value_bytes(values);
  const char *s = slot;
  char *d = part;
  memset(d, 0, L.bytes); /* the counts start at 0, and no stray bytes on the wire */
  for (size_t j = 0; j < m; j++) {
    uint32_t idx, count;
    memcpy(&idx, s + 4 * (from + j), sizeof idx);
    /* an index of this rank's own slot: below n, so its page is one of L.pages */
    char *at = d + 4 * (size_t)(idx >> PAGE_BITS);
    memcpy(&count, at, sizeof count);
    count++;
    memcpy(at, &count, sizeof count);
    uint16_t low = (uint16_t)(idx & 0xffffu);
    memcpy(d + L.low + 2 * j, &low, sizeof low);
  }
  memcpy(d + L.values, s + 4 * k + w * from, w * m);
  if (w == 2) memcpy(d + L.scale, s + squall__slot_scale_offset(k), sizeof(float));
}

int squall__topk_slot_put_packed(const void *part, size_t m, size_t n, void *slot, size_t k, size_t from,
                                 squallValueType_t values) {
  const packed_layout L = packed(m, n, values);
  const size_t w = squall__slot_value_bytes(values);
  const char *s = part;
  char *d = slot;
  /* The counts came from the network: they must add up to m exactly
   * before any index is written (at most 2^16 pages of u32 counts: their
   * 64-bit total cannot wrap). */
  uint64_t total = 0;
  for (size_t p = 0; p < L.pages; p++) {
    uint32_t count;
    memcpy(&count, s + 4 * p, sizeof count);
    total += count;
  }
  if (total != m) return -1;
  size_t j = 0;
  for (size_t p = 0; p < L.pages; p++) {
    uint32_t count;
    memcpy(&count, s + 4 * p, sizeof count);
    for (uint32_t c = 0; c < count; c++, j++) {
      uint16_t low;
      memcpy(&low, s + L.low + 2 * j, sizeof low);
      uint32_t idx = (uint32_t)(p << PAGE_BITS) | low;
      memcpy(d + 4 * (from + j), &idx, sizeof idx);
    }
  }
  memcpy(d + 4 * k + w * from, s + L.values, w * m);
  if (w == 2) memcpy(d + squall__slot_scale_offset(k), s + L.scale, sizeof(float));
  return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fuzz_lossless.c - the lossless stage's decoder (squall__lossless_decode)
 * on payloads from a peer that may be corrupt, and its round trip.
 *
 * Input: FLAGS K(u16) N(u32) REST. FLAGS bit 0: fp16 values; bit 1: build
 * a valid slot from REST (gaps, then value bytes) instead of decoding REST.
 * Invariants:
 *   - decoding never touches memory outside the slot and scratch it was
 *     given (exact-size heap blocks: the address sanitizer watches);
 *   - a decoded slot has k indices below n, strictly ascending;
 *   - a decoded slot re-encodes to a payload that decodes to the same bytes;
 *   - that payload is refused with one byte missing, or with n no larger
 *     than its last index;
 *   - a slot built from REST survives encode and decode bit for bit.
 */
#include "codecs/codec.h"
#include "codecs/lossless.h"
#include "fuzz/fuzz.h"

typedef struct {
  size_t k, n;
  squallValueType_t vt;
  size_t slot_bytes;
  void *scratch;
} params;

static uint32_t index_at(const void *slot, size_t i) {
  uint32_t v;
  memcpy(&v, (const char *)slot + 4 * i, sizeof v);
  return v;
}

static void check_indices(const params *p, const void *slot) {
  for (size_t i = 0; i < p->k; i++) {
    uint32_t v = index_at(slot, i);
    FUZZ_CHECK(v < p->n, "index %u at %zu is not below n=%zu", v, i, p->n);
    if (i) FUZZ_CHECK(v > index_at(slot, i - 1), "indices do not ascend at %zu", i);
  }
}

/* slot is valid: encodes, decodes to the same bytes, and the payload is
 * refused when cut short or when n leaves out its last index. */
static void check_round_trip(const params *p, const void *slot, int level) {
  size_t cap = squall__lossless_bound(p->k, p->vt);
  void *enc = fuzz_alloc(cap), *back = fuzz_alloc(p->slot_bytes);
  size_t z = squall__lossless_encode(slot, p->k, p->vt, level, enc, cap, p->scratch);
  FUZZ_CHECK(z > 0 && z <= cap, "encode of a valid slot (k=%zu) gave %zu of %zu", p->k, z, cap);
  void *exact = fuzz_dup(enc, z);
  FUZZ_CHECK(squall__lossless_decode(exact, z, p->k, p->vt, p->n, back, p->scratch) == 0,
             "own payload of %zu bytes refused (k=%zu n=%zu)", z, p->k, p->n);
  FUZZ_CHECK(memcmp(back, slot, p->slot_bytes) == 0, "round trip changed the slot (k=%zu)", p->k);
  free(exact);
  exact = fuzz_dup(enc, z - 1);
  FUZZ_CHECK(squall__lossless_decode(exact, z - 1, p->k, p->vt, p->n, back, p->scratch) != 0,
             "a payload one byte short decoded");
  if (p->k > 0) {
    size_t last = index_at(slot, p->k - 1);
    FUZZ_CHECK(squall__lossless_decode(enc, z, p->k, p->vt, last, back, p->scratch) != 0,
               "index %zu accepted with n=%zu", last, last);
  }
  free(exact);
  free(enc);
  free(back);
}

/* A valid slot from the input: each gap is one byte, or four when the top
 * bit is set; indices stop at n (k shrinks to what fits). */
static void build_and_round_trip(params *p, fuzz_reader *r) {
  int level = 1 + (int)(fuzz_take(r, 1) % 19);
  size_t want = p->k;
  uint32_t *idx = fuzz_alloc(4 * (want ? want : 1));
  uint64_t next = 0;
  size_t k = 0;
  for (; k < want; k++) {
    uint32_t gap = fuzz_take(r, 1);
    if (gap & 0x80) gap = (gap & 0x7f) | (fuzz_take(r, 3) << 7);
    uint64_t v = next + gap;
    if (v >= p->n) break;
    idx[k] = (uint32_t)v;
    next = v + 1;
  }
  p->k = k;
  free(p->scratch); /* exact for the new k, so that overruns show */
  p->scratch = fuzz_alloc(squall__lossless_scratch_bytes(k, p->vt));
  p->slot_bytes = squall__topk_slot_bytes(k, p->vt);
  char *slot = fuzz_alloc(p->slot_bytes);
  memcpy(slot, idx, 4 * k);
  for (size_t i = 4 * k; i < p->slot_bytes; i++) slot[i] = (char)fuzz_take(r, 1);
  check_round_trip(p, slot, level);
  free(slot);
  free(idx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_reader r = {data, size};
  uint32_t flags = fuzz_take(&r, 1);
  params p;
  p.vt = (flags & 1) ? squallValueFp16 : squallValueFp32;
  p.k = fuzz_take(&r, 2) & 0x0fff; /* up to 4095 entries: slots stay small, runs fast */
  p.n = fuzz_take(&r, 4);
  p.slot_bytes = squall__topk_slot_bytes(p.k, p.vt);
  p.scratch = fuzz_alloc(squall__lossless_scratch_bytes(p.k, p.vt));

  if (flags & 2) {
    build_and_round_trip(&p, &r);
  } else {
    void *payload = fuzz_dup(r.p, r.left);
    void *slot = fuzz_alloc(p.slot_bytes);
    if (squall__lossless_decode(payload, r.left, p.k, p.vt, p.n, slot, p.scratch) == 0) {
      check_indices(&p, slot);
      check_round_trip(&p, slot, 1);
    }
    free(slot);
    free(payload);
  }
  free(p.scratch);
  return 0;
}

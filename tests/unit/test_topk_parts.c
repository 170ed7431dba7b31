/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_topk_parts.c - a round's part of a top-k slot on the wire
 * (topk_parts.c): the packed part (16-bit indices under per-page counts)
 * rebuilds the entries and fp16's scale exactly as the raw part does, at
 * the size the format gives, only where smaller than raw; and counts that
 * do not add up are refused before anything is written.
 */
#include "check_util.h"
#include "codecs/codec.h"

#define PAGE 65536u

/* A k-entry slot over n elements, indices strictly ascending, drawn so
 * that pages are crowded, empty, or hit at their first and last element;
 * fp32 values as any bits, fp16 codes and a scale. */
static void make_slot(tu_rng *r, unsigned char *slot, size_t k, size_t n, squallValueType_t values,
                      unsigned char padding) {
  size_t sb = squall__topk_slot_bytes(k, values);
  memset(slot, padding, sb); /* garbage the parts must not carry */
  uint32_t *idx = malloc(k * sizeof *idx);
  /* k distinct indices: every n/k-th from a random start, then nudged
   * toward page edges now and then without breaking the order */
  size_t step = n / k;
  for (size_t j = 0; j < k; j++) idx[j] = (uint32_t)(j * step + (step > 1 ? tu_below(r, step) : 0));
  for (size_t j = 0; j < k; j++) {
    uint32_t lo = j > 0 ? idx[j - 1] + 1 : 0, hi = j + 1 < k ? idx[j + 1] - 1 : (uint32_t)(n - 1);
    uint32_t edge = (idx[j] / PAGE) * PAGE; /* first of its page */
    if (tu_below(r, 4) == 0 && edge >= lo && edge <= hi) idx[j] = edge;
    else if (tu_below(r, 4) == 0 && edge + PAGE - 1 >= lo && edge + PAGE - 1 <= hi) idx[j] = edge + PAGE - 1;
  }
  for (size_t j = 0; j < k; j++) {
    memcpy(slot + 4 * j, &idx[j], 4);
    if (values == squallValueFp16) {
      uint16_t h = (uint16_t)tu_u32(r);
      memcpy(slot + 4 * k + 2 * j, &h, 2);
    } else {
      uint32_t bits = tu_u32(r);
      memcpy(slot + 4 * k + 4 * j, &bits, 4);
    }
  }
  if (values == squallValueFp16) {
    float scale = 0x1p-7f;
    memcpy(slot + squall__slot_scale_offset(k), &scale, 4);
  }
  free(idx);
}

/* The packed size from the format's definition: counts, low halves
 * (to a 4-byte boundary), values, fp16's scale (4-aligned), to 8 bytes. */
static size_t packed_size(size_t m, size_t n, squallValueType_t values) {
  size_t pages = (n + PAGE - 1) / PAGE, at = 4 * pages + 2 * m;
  at = (at + 3) & ~(size_t)3;
  if (values == squallValueFp16) at = ((at + 2 * m + 3) & ~(size_t)3) + 4;
  else at += 4 * m;
  return (at + 7) & ~(size_t)7;
}

/* Every round of every slot through the packed part gives back the
 * entries and the scale that the raw part gives, at the defined size. */
START_TEST(test_packed_matches_raw) {
  static const size_t ns[] = {1000, PAGE, PAGE + 1, 3 * PAGE - 5, 16u << 20, 5000000};
  static const double ratios[] = {0.01, 0.2, 0.001};
  tu_rng r = {0x7061636bu + (uint64_t)_i};
  const squallValueType_t values = _i ? squallValueFp16 : squallValueFp32;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (size_t b = 0; b < sizeof ratios / sizeof ratios[0]; b++) {
      size_t n = ns[a], k = squall__topk_k(n, ratios[b]), sb = squall__topk_slot_bytes(k, values);
      unsigned char *slot = malloc(sb), *raw = calloc(1, sb), *got = calloc(1, sb), *part = malloc(sb + 64);
      make_slot(&r, slot, k, n, values, 0xa5);
      int packed_rounds = 0;
      for (size_t rounds = 1; rounds <= 16; rounds *= 4) {
        memset(raw, 0, sb);
        memset(got, 0, sb);
        for (size_t j = 0; j < rounds; j++) {
          size_t from = j * k / rounds, m = (j + 1) * k / rounds - from;
          squall__topk_slot_cut(slot, k, from, m, values, part);
          squall__topk_slot_put(part, m, raw, k, from, values);
          size_t bytes = squall__topk_part_packed_bytes(m, n, values), want = packed_size(m, n, values);
          ck_assert_uint_eq(bytes, want < squall__topk_slot_bytes(m, values) ? want : 0);
          if (bytes == 0) {
            squall__topk_slot_put(part, m, got, k, from, values);
            continue;
          }
          packed_rounds++;
          memset(part, 0x5a, sb + 64);
          squall__topk_slot_cut_packed(slot, k, from, m, n, values, part);
          for (size_t x = bytes; x < sb + 64 && x < bytes + 64; x++) ck_assert_uint_eq(part[x], 0x5a); /* no overrun */
          ck_assert_int_eq(squall__topk_slot_put_packed(part, m, n, got, k, from, values), 0);
        }
        size_t used = (values == squallValueFp16 ? 6 : 8) * k;
        ck_assert_msg(memcmp(got, raw, used) == 0, "n=%zu k=%zu rounds=%zu: packed entries differ from raw", n, k,
                      rounds);
        ck_assert_msg(memcmp(got, slot, used) == 0, "n=%zu k=%zu rounds=%zu: entries not rebuilt", n, k, rounds);
        if (values == squallValueFp16)
          ck_assert(memcmp(got + squall__slot_scale_offset(k), slot + squall__slot_scale_offset(k), 4) == 0);
      }
      /* 1% of 16M elements: what the benchmark sends, packed */
      if (n == 16u << 20 && ratios[b] == 0.01) ck_assert_int_gt(packed_rounds, 0);
      free(slot);
      free(raw);
      free(got);
      free(part);
    }
}
END_TEST

/* The same entries in two slots with different garbage in their padding,
 * cut into part buffers holding different garbage: the same bytes on the
 * wire (a part's bytes are a function of its entries), with the fields
 * where the format puts them. */
START_TEST(test_packed_bytes_are_a_function_of_the_entries) {
  size_t n = 2 * PAGE + 100, k = 4000, m = 1000, from = 1500;
  for (int v = 0; v < 2; v++) {
    squallValueType_t values = v ? squallValueFp16 : squallValueFp32;
    size_t sb = squall__topk_slot_bytes(k, values), bytes = squall__topk_part_packed_bytes(m, n, values);
    ck_assert_uint_gt(bytes, 0);
    unsigned char *s1 = malloc(sb), *s2 = malloc(sb), *p1 = malloc(bytes), *p2 = malloc(bytes);
    tu_rng r1 = {77}, r2 = {77};
    make_slot(&r1, s1, k, n, values, 0x00);
    make_slot(&r2, s2, k, n, values, 0xff);
    memset(p1, 0x11, bytes);
    memset(p2, 0xee, bytes);
    squall__topk_slot_cut_packed(s1, k, from, m, n, values, p1);
    squall__topk_slot_cut_packed(s2, k, from, m, n, values, p2);
    ck_assert(memcmp(p1, p2, bytes) == 0);
    /* the layout: 3 page counts, m low halves, the values, fp16's scale */
    uint32_t counts[3], sum = 0;
    memcpy(counts, p1, sizeof counts);
    for (int q = 0; q < 3; q++) sum += counts[q];
    ck_assert_uint_eq(sum, m);
    for (size_t j = 0; j < m; j++) {
      uint32_t idx;
      uint16_t low;
      memcpy(&idx, s1 + 4 * (from + j), 4);
      memcpy(&low, p1 + 12 + 2 * j, 2);
      ck_assert_uint_eq(low, idx & 0xffffu);
    }
    size_t w = v ? 2 : 4, at = (12 + 2 * m + 3) & ~(size_t)3;
    ck_assert(memcmp(p1 + at, s1 + 4 * k + w * from, w * m) == 0);
    if (v) ck_assert(memcmp(p1 + ((at + 2 * m + 3) & ~(size_t)3), s1 + squall__slot_scale_offset(k), 4) == 0);
    free(s1);
    free(s2);
    free(p1);
    free(p2);
  }
}
END_TEST

/* Where the counts would cost more than the 16-bit indices save, or the
 * indices are not u32, the part stays raw. */
START_TEST(test_packed_only_where_smaller) {
  ck_assert_uint_eq(squall__topk_part_packed_bytes(0, 1000, squallValueFp32), 0);
  ck_assert_uint_eq(squall__topk_part_packed_bytes(10, 0, squallValueFp32), 0);
  /* 65536 pages: 256 KiB of counts against 2 bytes saved per entry */
  ck_assert_uint_eq(squall__topk_part_packed_bytes(1000, (size_t)UINT32_MAX, squallValueFp32), 0);
  ck_assert_uint_gt(squall__topk_part_packed_bytes(200000, (size_t)UINT32_MAX, squallValueFp32), 0);
#if SIZE_MAX > UINT32_MAX
  ck_assert_uint_eq(squall__topk_part_packed_bytes(1u << 20, (size_t)UINT32_MAX + 1, squallValueFp32), 0);
#endif
  /* one page, one entry: 4 + 2 (+2) + 4 = 12 -> 16 bytes against 8 raw */
  ck_assert_uint_eq(squall__topk_part_packed_bytes(1, 100, squallValueFp32), 0);
  /* one page: 5 entries pack into 40 bytes, as many as raw (stays raw);
   * 6 into 40 against 48 */
  ck_assert_uint_eq(squall__topk_part_packed_bytes(5, 100, squallValueFp32), 0);
  ck_assert_uint_eq(squall__topk_part_packed_bytes(6, 100, squallValueFp32), 40);
  /* 10486 entries of 16M elements (1%, 16 rounds): 6 bytes an entry and 1 KiB of counts */
  ck_assert_uint_eq(squall__topk_part_packed_bytes(10486, 16u << 20, squallValueFp32), 1024 + 6 * 10486 + 4);
}
END_TEST

/* Counts from the network that do not add up to m (too few, too many, or
 * so many that a 32-bit sum would wrap to m) are refused, and the slot is
 * left as it was. Counts that add up but put an index past n or out of
 * order pass here and are caught with the slot's indices. */
START_TEST(test_packed_corrupt_counts) {
  tu_rng r = {99};
  /* the last page short (an index rebuilt past n is caught too), fp32 and fp16 */
  size_t n = 3 * PAGE - 5, k = 3000, m = 3000;
  squallValueType_t values = _i ? squallValueFp16 : squallValueFp32;
  size_t sb = squall__topk_slot_bytes(k, values), bytes = squall__topk_part_packed_bytes(m, n, values);
  unsigned char *slot = malloc(sb), *part = malloc(bytes), *bad = malloc(bytes), *got = malloc(sb),
                *before = malloc(sb);
  make_slot(&r, slot, k, n, values, 0xa5);
  squall__topk_slot_cut_packed(slot, k, 0, m, n, values, part);
  uint32_t c[3];
  memcpy(c, part, sizeof c);
  const uint32_t spoilt[][3] = {{c[0], c[1], c[2] - 1},
                                {c[0] + 1, c[1], c[2]},
                                {0xffffffffu, c[0] + c[1] + 1, c[2]}, /* wraps to m in 32 bits */
                                {0xffffffffu, 0xffffffffu, 0xffffffffu}};
  for (size_t s = 0; s < sizeof spoilt / sizeof spoilt[0]; s++) {
    memcpy(bad, part, bytes);
    memcpy(bad, spoilt[s], sizeof spoilt[s]);
    memset(got, 0x3c, sb);
    memcpy(before, got, sb);
    ck_assert_int_eq(squall__topk_slot_put_packed(bad, m, n, got, k, 0, values), -1);
    ck_assert_msg(memcmp(got, before, sb) == 0, "case %zu: a refused part wrote into the slot", s);
  }
  /* the counts add up, but one entry moves to the page before: the
   * indices no longer ascend, which the slot's validation refuses */
  if (c[1] > 0) {
    memcpy(bad, part, bytes);
    uint32_t moved[3] = {c[0] + 1, c[1] - 1, c[2]};
    memcpy(bad, moved, sizeof moved);
    ck_assert_int_eq(squall__topk_slot_put_packed(bad, m, n, got, k, 0, values), 0);
    squall_topk_finisher f;
    ck_assert_int_eq(squall__topk_finish_begin(&f, NULL, NULL, n, got, 1, 0, k, values, NULL), 0);
    ck_assert_int_eq(squall__topk_finish_accept(&f, k), -1);
  }
  /* the counts add up, but the last entry's low half points past the end
   * of the short last page: rebuilt past n */
  {
    ck_assert_uint_gt(c[2], 0);
    memcpy(bad, part, bytes);
    uint16_t low = 0xfffeu; /* 2 * PAGE + 0xfffe >= n = 3 * PAGE - 5 */
    memcpy(bad + 12 + 2 * (m - 1), &low, 2);
    ck_assert_int_eq(squall__topk_slot_put_packed(bad, m, n, got, k, 0, values), 0);
    uint32_t last;
    memcpy(&last, got + 4 * (k - 1), 4);
    ck_assert_uint_ge(last, n);
    squall_topk_finisher f;
    ck_assert_int_eq(squall__topk_finish_begin(&f, NULL, NULL, n, got, 1, 0, k, values, NULL), 0);
    ck_assert_int_eq(squall__topk_finish_accept(&f, k), -1);
  }
  free(slot);
  free(part);
  free(bad);
  free(got);
  free(before);
}
END_TEST

static Suite *parts_suite(void) {
  Suite *s = suite_create("topk_parts");
  TCase *tc = tcase_create("packed");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_packed_matches_raw, 0, 2);
  tcase_add_test(tc, test_packed_bytes_are_a_function_of_the_entries);
  tcase_add_test(tc, test_packed_only_where_smaller);
  tcase_add_loop_test(tc, test_packed_corrupt_counts, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(parts_suite()); }

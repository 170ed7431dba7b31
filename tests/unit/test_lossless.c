/* SPDX-License-Identifier: BSD-3-Clause */
/* test_lossless.c - the zstd stage: round trips, and corrupt or truncated
 * payloads from a peer are errors, never crashes or out-of-bounds writes. */
#include <stdlib.h>
#include <string.h>

#include "check_util.h"

#include "codecs/codec.h"
#include "codecs/lossless.h"

/* A valid slot of k ascending indices below n. */
static void *make_slot(size_t n, size_t k, squallValueType_t vt, unsigned seed) {
  size_t sb = squall__topk_slot_bytes(k, vt);
  char *slot = calloc(1, sb + 64);
  uint32_t *idx = (uint32_t *)slot;
  srand(seed);
  size_t next = 0;
  for (size_t i = 0; i < k; i++) {
    size_t room = n - next - (k - i); /* leave space for the rest */
    next += room ? (size_t)rand() % (room / (k - i) + 1) : 0;
    idx[i] = (uint32_t)next++;
  }
  for (size_t i = 4 * k; i < sb; i++) slot[i] = (char)rand();
  return slot;
}

START_TEST(test_round_trip) {
  size_t ns[] = {1, 100, 100000, 1 << 22};
  for (size_t a = 0; a < 4; a++)
    for (int v = 0; v < 2; v++) {
      size_t n = ns[a], k = squall__topk_k(n, 0.01);
      squallValueType_t vt = v ? squallValueFp16 : squallValueFp32;
      size_t sb = squall__topk_slot_bytes(k, vt);
      void *slot = make_slot(n, k, vt, (unsigned)(a * 2 + v));
      size_t cap = squall__lossless_bound(k, vt);
      void *enc = malloc(cap), *scratch = malloc(squall__lossless_scratch_bytes(k, vt)), *dec = calloc(1, sb);
      size_t z = squall__lossless_encode(slot, k, vt, 1, enc, cap, scratch);
      ck_assert_uint_gt(z, 0);
      ck_assert_int_eq(squall__lossless_decode(enc, z, k, vt, n, dec, scratch), 0);
      ck_assert(memcmp(dec, slot, sb) == 0);
      /* sorted gaps: indices cost well under their 4 raw bytes */
      if (k > 1000) ck_assert_uint_lt(z, sb - k);
      free(slot);
      free(enc);
      free(scratch);
      free(dec);
    }
}
END_TEST

START_TEST(test_corrupt_payloads_fail_cleanly) {
  size_t n = 50000, k = 500;
  squallValueType_t vt = squallValueFp32;
  size_t sb = squall__topk_slot_bytes(k, vt);
  void *slot = make_slot(n, k, vt, 7);
  size_t cap = squall__lossless_bound(k, vt);
  unsigned char *enc = malloc(cap), *bad = malloc(cap);
  void *scratch = malloc(squall__lossless_scratch_bytes(k, vt));
  /* a guard zone after the slot catches out-of-bounds writes */
  unsigned char *dec = malloc(sb + 256);
  size_t z = squall__lossless_encode(slot, k, vt, 3, enc, cap, scratch);
  ck_assert_uint_gt(z, 0);
  int failures = 0;
  /* truncations */
  for (size_t len = 0; len < z; len += 1 + len / 8) {
    memset(dec + sb, 0xA5, 256);
    failures += squall__lossless_decode(enc, len, k, vt, n, dec, scratch) != 0;
    for (int i = 0; i < 256; i++) ck_assert_uint_eq(dec[sb + i], 0xA5);
  }
  ck_assert_int_gt(failures, 0);
  /* single-byte flips anywhere: decode must fail or yield valid indices */
  srand(3);
  for (int t = 0; t < 2000; t++) {
    memcpy(bad, enc, z);
    bad[(size_t)rand() % z] ^= (unsigned char)(1 + rand() % 255);
    memset(dec + sb, 0xA5, 256);
    if (squall__lossless_decode(bad, z, k, vt, n, dec, scratch) == 0) {
      const uint32_t *idx = (const uint32_t *)dec;
      for (size_t i = 0; i < k; i++) {
        ck_assert_uint_lt(idx[i], n);
        if (i) ck_assert_uint_gt(idx[i], idx[i - 1]);
      }
    }
    for (int i = 0; i < 256; i++) ck_assert_uint_eq(dec[sb + i], 0xA5);
  }
  /* garbage, and a valid frame for a smaller n (indices out of range) */
  for (size_t i = 0; i < z; i++) bad[i] = (unsigned char)rand();
  ck_assert_int_ne(squall__lossless_decode(bad, z, k, vt, n, dec, scratch), 0);
  ck_assert_int_ne(squall__lossless_decode(enc, z, k, vt, 10, dec, scratch), 0);
  /* the wrong k: the content size does not match */
  ck_assert_int_ne(squall__lossless_decode(enc, z, k - 1, vt, n, dec, scratch), 0);
  free(slot);
  free(enc);
  free(bad);
  free(scratch);
  free(dec);
}
END_TEST

/* One TCase per feature, so that CK_RUN_CASE=<name> runs just that one. */
static Suite *lossless_suite(void) {
  Suite *s = suite_create("lossless");
  TCase *tc = tcase_create("round-trip");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_round_trip);
  suite_add_tcase(s, tc);
  tc = tcase_create("corrupt");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_corrupt_payloads_fail_cleanly);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(lossless_suite()); }

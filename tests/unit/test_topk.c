/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_topk.c - the host top-k encoder against a sort-based reference
 * (qsort by key descending, index ascending), on many input shapes, sizes
 * and k; the residual invariant decode + res' == a; fp16 values with their
 * scale; the choice of k; slot sizes.
 */
#include <float.h>
#include <math.h>

#include "check_util.h"
#include "codecs/codec.h"

/* ---------------------------------------------------------- reference */

static const uint32_t *ref_keys; /* qsort has no context argument */

static int by_key_desc_index_asc(const void *pa, const void *pb) {
  uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
  if (ref_keys[a] != ref_keys[b]) return ref_keys[a] > ref_keys[b] ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* order[0..n): indices by |a| descending (NaN above Inf, -0 == +0), ties by
 * index. The first k are the entries top-k must send. */
static void ref_order(const float *a, size_t n, uint32_t *keys, uint32_t *order) {
  for (size_t i = 0; i < n; i++) {
    keys[i] = tu_bits(a[i]) & 0x7fffffffu; /* written out, not sq_topk_key */
    order[i] = (uint32_t)i;
  }
  ref_keys = keys;
  qsort(order, n, sizeof *order, by_key_desc_index_asc);
}

/* ----------------------------------------------------------- inputs */

enum {
  P_RANDOM,   /* wide exponents, random signs */
  P_EQUAL,    /* one value everywhere: all ties */
  P_ASC,      /* sorted ascending by magnitude */
  P_DESC,     /* sorted descending */
  P_ZEROS,    /* +0 and -0 mixed, a few nonzeros */
  P_NANINF,   /* random with NaNs and infinities sprinkled in */
  P_DUPS,     /* five distinct magnitudes: many ties across the threshold */
  P_SAMEHIGH, /* keys that share their top 16 bits: the second radix pass decides */
  P_BITS,     /* random bit patterns: subnormals, NaN payloads, everything */
  P_COUNT
};

static const char *pattern_name[P_COUNT] = {"random", "equal", "asc", "desc", "zeros",
                                            "naninf", "dups", "samehigh", "bits"};

static void make_input(int pattern, size_t n, tu_rng *r, float *g) {
  for (size_t i = 0; i < n; i++) {
    switch (pattern) {
    case P_RANDOM: g[i] = tu_float_exp(r, -30, 10); break;
    case P_EQUAL: g[i] = (i & 1) ? 0.75f : -0.75f; break;
    case P_ASC: g[i] = ((float)i * 0.5f + 1.0f) * ((i & 1) ? -1.0f : 1.0f); break;
    case P_DESC: g[i] = (float)(n - i) * ((i & 1) ? -1.0f : 1.0f); break;
    case P_ZEROS: g[i] = (tu_below(r, 50) == 0) ? tu_float_unit(r) : ((tu_next(r) & 1) ? 0.0f : -0.0f); break;
    case P_NANINF: {
      uint64_t c = tu_below(r, 20);
      g[i] = c == 0 ? NAN : c == 1 ? -NAN
                        : c == 2   ? INFINITY
                        : c == 3   ? -INFINITY
                                   : tu_float_exp(r, -10, 10);
      break;
    }
    case P_DUPS: {
      static const float v[] = {1.0f, 2.0f, 0.5f, 3.0f, 0.0f};
      g[i] = v[tu_below(r, 5)] * ((tu_next(r) & 1) ? -1.0f : 1.0f);
      break;
    }
    case P_SAMEHIGH: g[i] = tu_float(0x3f800000u | (uint32_t)tu_below(r, 300) * 37u) * ((tu_next(r) & 1) ? -1.0f : 1.0f); break;
    default: g[i] = tu_float(tu_u32(r)); break;
    }
  }
}

/* ---------------------------------------------------------- checking */

typedef struct {
  size_t n;
  float *g, *res0, *a, *res;
  uint32_t *keys, *order;
  unsigned char *sel;
  void *ws, *slot;
  float *dense;
} bench;

static void bench_alloc(bench *b, size_t n) {
  size_t m = n ? n : 1;
  b->n = n;
  b->g = malloc(m * sizeof(float));
  b->res0 = malloc(m * sizeof(float));
  b->a = malloc(m * sizeof(float));
  b->res = malloc(m * sizeof(float));
  b->keys = malloc(m * sizeof(uint32_t));
  b->order = malloc(m * sizeof(uint32_t));
  b->sel = malloc(m);
  b->ws = malloc(squall__topk_workspace_bytes(n));
  b->slot = malloc(squall__topk_slot_bytes(n, squallValueFp32) + squall__topk_slot_bytes(n, squallValueFp16) + 64);
  b->dense = malloc(m * sizeof(float));
  ck_assert(b->g && b->res0 && b->a && b->res && b->keys && b->order && b->sel && b->ws && b->slot && b->dense);
}

static void bench_free(bench *b) {
  free(b->g);
  free(b->res0);
  free(b->a);
  free(b->res);
  free(b->keys);
  free(b->order);
  free(b->sel);
  free(b->ws);
  free(b->slot);
  free(b->dense);
}

/* decode + res' == a: exact, or, where a - decode is subnormal, res' is a
 * zero and the pair misses a by less than 2^-126 (sq_half_encode_a flushes
 * subnormal residuals). */
static int ef_ok(float d, float rr, float a) {
  return tu_same_value(d + rr, a) ||
         ((tu_bits(rr) & 0x7fffffffu) == 0 && fabs((double)a - (double)d) < 0x1p-126);
}

/* The sampled path's key bound check_one passes (the sample's own unless a
 * test forces one), and the path the last encode took. */
static uint64_t forced_bound = SQ_TOPK_SAMPLE_BOUND;
static int last_path = -1;

/* Runs the encoder once (with or without a residual) and checks the slot,
 * the residual and the per-element invariant against the reference order
 * already in b->order for a = b->a. */
static void check_one(bench *b, size_t k, squallValueType_t values, int with_res, const char *what) {
  const size_t n = b->n;
  const int fp16 = values == squallValueFp16;
  float scale = fp16 ? sq_pow2_scale(squall__absmax(b->g, with_res ? b->res0 : NULL, n), SQ_F16_MAX) : 1.0f;
  size_t sb = squall__topk_slot_bytes(k, values);
  memset(b->slot, 0xa5, sb + 64); /* garbage, and a guard past the end */
  if (with_res) memcpy(b->res, b->res0, n * sizeof(float));
  int rc = squall__topk_encode_bound(b->g, with_res ? b->res : NULL, n, k, values, scale, b->slot, b->ws,
                                     forced_bound, &last_path);
  ck_assert_msg(rc == 0, "%s: encode returned %d", what, rc);

  const unsigned char *bytes = b->slot;
  for (size_t i = sb; i < sb + 64; i++)
    TU_CHECK(bytes[i] == 0xa5, "%s: encode wrote byte %zu past the slot of %zu", what, i, sb);
  memset(b->sel, 0, n);
  for (size_t j = 0; j < k; j++) b->sel[b->order[j]] = 1;

  /* Indices: exactly the reference's first k, ascending. */
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    if (!b->sel[i]) continue;
    uint32_t idx;
    memcpy(&idx, bytes + 4 * j, 4);
    TU_CHECK(idx == i, "%s: slot entry %zu is index %u, reference %zu (key 0x%08x vs 0x%08x)", what,
             j, idx, i, idx < n ? b->keys[idx] : 0u, b->keys[i]);
    float a = b->a[i];
    float d;
    if (fp16) {
      uint16_t h;
      memcpy(&h, bytes + 4 * k + 2 * j, 2);
      uint16_t want = sq_f32_to_f16(a * scale);
      TU_CHECK(h == want || (tu_isnan(a) && (h & 0x7fffu) > 0x7c00u), "%s: fp16 value of %a is 0x%04x, want 0x%04x",
               what, (double)a, h, want);
      d = sq_f16_to_f32(h) / scale;
    } else {
      memcpy(&d, bytes + 4 * k + 4 * j, 4);
      TU_CHECK(tu_bits(d) == tu_bits(a), "%s: fp32 value at %zu is %a, want %a", what, i, (double)d, (double)a);
    }
    if (with_res) {
      float rr = b->res[i];
      TU_CHECK(tu_isfinite(rr), "%s: residual at %zu is %a", what, i, (double)rr);
      if (tu_isfinite(a) && tu_isfinite(d)) {
        TU_CHECK(ef_ok(d, rr, a), "%s: sent %zu: %a + %a != %a", what, i, (double)d, (double)rr, (double)a);
        if (!fp16) TU_CHECK(tu_bits(rr) == 0, "%s: fp32 residual of a sent entry is %a", what, (double)rr);
      } else {
        TU_CHECK(tu_bits(rr) == 0, "%s: non-finite %a sent, residual %a", what, (double)a, (double)rr);
      }
    }
    j++;
  }
  ck_assert_uint_eq(j, k);
  if (fp16) {
    float s;
    memcpy(&s, bytes + squall__slot_scale_offset(k), 4);
    ck_assert_msg(tu_bits(s) == tu_bits(scale), "%s: stored scale %a, want %a", what, (double)s, (double)scale);
    for (size_t p = 6 * k; p < squall__slot_scale_offset(k); p++) ck_assert_uint_eq(bytes[p], 0);
    for (size_t p = squall__slot_scale_offset(k) + 4; p < sb; p++) ck_assert_uint_eq(bytes[p], 0);
  }
  if (!with_res) return;
  /* Unsent entries keep a (finite) whole. */
  for (size_t i = 0; i < n; i++) {
    if (b->sel[i]) continue;
    float a = b->a[i], rr = b->res[i];
    TU_CHECK(tu_bits(rr) == (tu_isfinite(a) ? tu_bits(a) : 0u), "%s: unsent %zu: residual %a, a %a", what, i,
             (double)rr, (double)a);
  }
  /* And through the real decoder: dense + res' == a everywhere a and its
   * delivered value are finite. */
  ck_assert_int_eq(squall__sparse_decode(b->slot, 1, k, values, b->dense, n), 0);
  for (size_t i = 0; i < n; i++) {
    float a = b->a[i], d = b->dense[i];
    if (!tu_isfinite(a) || !tu_isfinite(d)) continue;
    TU_CHECK(ef_ok(d, b->res[i], a), "%s: decoded %zu: %a + %a != %a", what, i, (double)d,
             (double)b->res[i], (double)a);
  }
}

/* All checks for one input shape and size, several k, both value types,
 * with and without a prior residual. */
static void check_shape(int pattern, size_t n, uint64_t seed) {
  bench b;
  bench_alloc(&b, n);
  tu_rng r = {seed};
  make_input(pattern, n, &r, b.g);
  for (size_t i = 0; i < n; i++) b.res0[i] = (tu_next(&r) & 3) ? tu_float_exp(&r, -40, -2) : 0.0f;
  size_t ks[5] = {1, n, 1 + (n ? tu_below(&r, n) : 0), squall__topk_k(n, 0.01), n > 1 ? n - 1 : 1};
  char what[96];
  for (int with_res = 0; with_res <= 1; with_res++) {
    for (size_t i = 0; i < n; i++) b.a[i] = with_res ? b.g[i] + b.res0[i] : b.g[i];
    ref_order(b.a, n, b.keys, b.order);
    for (size_t ki = 0; ki < 5; ki++) {
      if (ks[ki] > n) continue;
      for (int v = 0; v <= 1; v++) {
        snprintf(what, sizeof what, "%s n=%zu k=%zu %s%s", pattern_name[pattern], n, ks[ki], v ? "fp16" : "fp32",
                 with_res ? " +res" : "");
        check_one(&b, ks[ki], v ? squallValueFp16 : squallValueFp32, with_res, what);
      }
    }
  }
  bench_free(&b);
}

static const size_t small_sizes[] = {1, 2, 3, 17, 1000, 65537};

START_TEST(test_against_sort_small) {
  int pattern = _i;
  for (size_t s = 0; s < sizeof small_sizes / sizeof small_sizes[0]; s++)
    check_shape(pattern, small_sizes[s], 1000u * (uint64_t)pattern + s);
}
END_TEST

START_TEST(test_against_sort_1m) { check_shape(_i, (size_t)1 << 20, 424242u + (uint64_t)_i); }
END_TEST

START_TEST(test_random_k_many) {
  /* Many random (n, k) pairs on mixed data with heavy ties. */
  tu_rng r = {31337};
  for (int rep = 0; rep < 300; rep++) {
    size_t n = 1 + tu_below(&r, 5000);
    bench b;
    bench_alloc(&b, n);
    int pattern = (int)tu_below(&r, P_COUNT);
    make_input(pattern, n, &r, b.g);
    for (size_t i = 0; i < n; i++) b.a[i] = b.g[i];
    ref_order(b.a, n, b.keys, b.order);
    size_t k = tu_below(&r, n + 1);
    char what[64];
    snprintf(what, sizeof what, "rep %d %s n=%zu", rep, pattern_name[pattern], n);
    check_one(&b, k, (rep & 1) ? squallValueFp16 : squallValueFp32, 0, what);
    bench_free(&b);
  }
}
END_TEST

START_TEST(test_ties_lower_index) {
  /* 9 and 5 are the two largest; six entries tie at |2| for the last two
   * places, and the two lowest indices (1 and 2) win. */
  float g[10] = {1, -2, 2, 0, -2, 2, 5, 2, -2, 9};
  float res[10] = {0};
  const uint32_t want[4] = {1, 2, 6, 9};
  void *ws = malloc(squall__topk_workspace_bytes(10)), *slot = malloc(squall__topk_slot_bytes(4, squallValueFp32));
  ck_assert_int_eq(squall__topk_encode(g, res, 10, 4, squallValueFp32, 1.0f, slot, ws), 0);
  const uint32_t *idx = squall__slot_indices(slot);
  for (int j = 0; j < 4; j++) ck_assert_uint_eq(idx[j], want[j]);
  const float *val = squall__slot_values(slot, 4);
  ck_assert_float_eq(val[0], -2.0f);
  ck_assert_float_eq(val[1], 2.0f);
  ck_assert_float_eq(val[2], 5.0f);
  ck_assert_float_eq(val[3], 9.0f);
  ck_assert_float_eq(res[4], -2.0f); /* tied but later: kept */
  ck_assert_float_eq(res[1], 0.0f);
  free(ws);
  free(slot);
}
END_TEST

START_TEST(test_edges) {
  void *ws = malloc(squall__topk_workspace_bytes(8));
  unsigned char slot[64];
  float g[8] = {1, 2, 3, 4, 5, 6, 7, 8}, res[8] = {0};
  /* k > n is refused. */
  ck_assert_int_eq(squall__topk_encode(g, NULL, 8, 9, squallValueFp32, 1.0f, slot, ws), -1);
  /* n = 0, k = 0. */
  ck_assert_int_eq(squall__topk_encode(g, res, 0, 0, squallValueFp32, 1.0f, slot, ws), 0);
  /* k = 0 sends nothing and keeps everything. */
  float res2[8] = {0.5f, 0, 0, 0, 0, 0, 0, -0.5f};
  memset(slot, 0x5a, sizeof slot);
  ck_assert_int_eq(squall__topk_encode(g, res2, 8, 0, squallValueFp16, 4.0f, slot, ws), 0);
  ck_assert_float_eq(res2[0], 1.5f);
  ck_assert_float_eq(res2[7], 7.5f);
  ck_assert_float_eq(res2[3], 4.0f);
  float s;
  memcpy(&s, slot + squall__slot_scale_offset(0), 4);
  ck_assert_float_eq(s, 4.0f);
  ck_assert_uint_eq(slot[4], 0);    /* padding to 8 */
  ck_assert_uint_eq(slot[8], 0x5a); /* untouched past the slot */
  free(ws);
}
END_TEST

START_TEST(test_fp16_scale_values) {
  /* fp16 values are round(a*scale); decoding divides the scale back out. */
  float g[6] = {1000.0f, -3.0f, 0.1f, 70000.0f, -0.001f, 2.5f};
  float res[6] = {0};
  void *ws = malloc(squall__topk_workspace_bytes(6));
  unsigned char slot[64];
  float scale = sq_pow2_scale(squall__absmax(g, res, 6), SQ_F16_MAX);
  ck_assert_float_eq(scale, 0.5f); /* 70000 * 0.5 = 35000 <= 65504 */
  ck_assert_int_eq(squall__topk_encode(g, res, 6, 3, squallValueFp16, scale, slot, ws), 0);
  const uint32_t *idx = squall__slot_indices(slot);
  ck_assert_uint_eq(idx[0], 0);
  ck_assert_uint_eq(idx[1], 1);
  ck_assert_uint_eq(idx[2], 3);
  uint16_t h[3];
  memcpy(h, squall__slot_values(slot, 3), sizeof h);
  ck_assert_uint_eq(h[0], sq_f32_to_f16(500.0f));
  ck_assert_uint_eq(h[1], sq_f32_to_f16(-1.5f));
  ck_assert_uint_eq(h[2], sq_f32_to_f16(35000.0f));
  /* 35000 is not an fp16 value: the rounding stays in the residual. */
  ck_assert_float_eq(sq_f16_to_f32(h[2]) / scale + res[3], 70000.0f);
  ck_assert_float_ne(res[3], 0.0f);
  ck_assert_float_eq(res[2], 0.1f);
  float dense[6];
  ck_assert_int_eq(squall__sparse_decode(slot, 1, 3, squallValueFp16, dense, 6), 0);
  ck_assert_float_eq(dense[0], 1000.0f);
  ck_assert_float_eq(dense[1], -3.0f);
  ck_assert_float_eq(dense[2], 0.0f);
  ck_assert_float_eq(dense[3] + res[3], 70000.0f);
  free(ws);
}
END_TEST

/* ---------------------------------------------------------------- k */

START_TEST(test_k_choice) {
  ck_assert_uint_eq(squall__topk_k(0, 0.5), 0);
  ck_assert_uint_eq(squall__topk_k(0, 1.0), 0);
  ck_assert_uint_eq(squall__topk_k(100, 0.01), 1);
  ck_assert_uint_eq(squall__topk_k(100, 0.07), 7); /* 0.07*100 == 7.000000000000001 in double */
  ck_assert_uint_eq(squall__topk_k(100, 0.29), 29);
  ck_assert_uint_eq(squall__topk_k(100, 0.57), 57);
  ck_assert_uint_eq(squall__topk_k(1000, 0.001), 1);
  ck_assert_uint_eq(squall__topk_k(1001, 0.001), 2);
  ck_assert_uint_eq(squall__topk_k(10, 1e-9), 1);
  ck_assert_uint_eq(squall__topk_k(10, 1.0), 10);
  ck_assert_uint_eq(squall__topk_k(10, 2.0), 10);
  ck_assert_uint_eq(squall__topk_k(10, 0.0), 1);
  ck_assert_uint_eq(squall__topk_k(10, -1.0), 1);
  ck_assert_uint_eq(squall__topk_k(10, NAN), 1);
  ck_assert_uint_eq(squall__topk_k(1, 0.5), 1);
  ck_assert_uint_eq(squall__topk_k(3, 1.0 / 3), 1);
  ck_assert_uint_eq(squall__topk_k((size_t)1 << 30, 0.001), 1073742);
  ck_assert_uint_eq(squall__topk_k(1000000000, 0.001), 1000000);
  ck_assert_uint_eq(squall__topk_k(3000000000000ull, 0.3), 900000000000ull);
  ck_assert_uint_eq(squall__topk_k(SIZE_MAX, 1.0), SIZE_MAX);
  /* Every decimal ratio p/10^d against exact integer arithmetic: the
   * double nearest p/10^d times count, rounded up, must be the exact
   * ceil(p*count/10^d). */
  static const uint64_t dens[] = {100, 1000, 10000};
  for (size_t di = 0; di < 3; di++) {
    uint64_t den = dens[di];
    for (uint64_t p = 1; p <= den; p += (den == 10000 ? 7 : 1))
      for (uint64_t count = 1; count <= 3000; count += (count < 300 ? 1 : 17)) {
        uint64_t want = (p * count + den - 1) / den;
        size_t got = squall__topk_k(count, (double)p / (double)den);
        TU_CHECK(got == want, "k(%llu, %llu/%llu) = %zu, want %llu", (unsigned long long)count,
                 (unsigned long long)p, (unsigned long long)den, got, (unsigned long long)want);
      }
  }
  /* Random large counts (below 2^36: there a 1/1000 fraction is still far
   * above the double rounding the formula forgives). */
  tu_rng r = {2718};
  for (int i = 0; i < 200000; i++) {
    uint64_t count = 1 + tu_below(&r, 1ull << 36), p = 1 + tu_below(&r, 999);
    uint64_t want = (p * count + 999) / 1000;
    size_t got = squall__topk_k(count, (double)p / 1000.0);
    TU_CHECK(got == want, "k(%llu, %llu/1000) = %zu, want %llu", (unsigned long long)count, (unsigned long long)p,
             got, (unsigned long long)want);
  }
  /* Dyadic ratios are exact: plain ceil. */
  for (uint64_t count = 1; count < 5000; count += 3)
    for (int e = 1; e < 12; e++) {
      double ratio = ldexp(1.0, -e) * 3 > 1 ? ldexp(1.0, -e) : ldexp(1.0, -e) * 3;
      uint64_t want = (uint64_t)ceil(ratio * (double)count);
      TU_CHECK(squall__topk_k(count, ratio) == want, "k(%llu, %a)", (unsigned long long)count, ratio);
    }
}
END_TEST

START_TEST(test_slot_bytes) {
  ck_assert_uint_eq(squall__topk_slot_bytes(0, squallValueFp32), 0);
  ck_assert_uint_eq(squall__topk_slot_bytes(1, squallValueFp32), 8);
  ck_assert_uint_eq(squall__topk_slot_bytes(1000, squallValueFp32), 8000);
  ck_assert_uint_eq(squall__topk_slot_bytes(0, squallValueFp16), 8);  /* the scale alone, padded */
  ck_assert_uint_eq(squall__topk_slot_bytes(1, squallValueFp16), 16); /* 4+2, pad, scale at 8 */
  ck_assert_uint_eq(squall__topk_slot_bytes(2, squallValueFp16), 16); /* 8+4, scale at 12 */
  ck_assert_uint_eq(squall__topk_slot_bytes(3, squallValueFp16), 24); /* 12+6, scale at 20 */
  ck_assert_uint_eq(squall__topk_slot_bytes(4, squallValueFp16), 32); /* 16+8, scale at 24 */
  ck_assert_uint_eq(squall__slot_scale_offset(3), 20);
  for (size_t k = 0; k < 5000; k++) {
    size_t sb = squall__topk_slot_bytes(k, squallValueFp16), off = squall__slot_scale_offset(k);
    TU_CHECK(sb % 8 == 0 && off % 4 == 0 && off >= 6 * k && off < 6 * k + 4 && off + 4 <= sb && sb < off + 12,
             "k=%zu: slot %zu bytes, scale at %zu", k, sb, off);
    TU_CHECK(squall__topk_slot_bytes(k, squallValueFp32) == 8 * k, "k=%zu fp32", k);
  }
  /* The workspace holds n keys and a 2^16-bin histogram. */
  ck_assert_uint_ge(squall__topk_workspace_bytes(1000), 4 * 1000 + 65536 * 4);
}
END_TEST

/* ------------------------------------------------ sampled path, misled */

/* Inputs that try to mislead a sample, beyond make_input's. */
enum { Q_FEWHUGE,
       Q_PERIODIC,
       Q_MANYNAN,
       Q_SPARSE,
       Q_TINY,
       Q_COUNT };
static const char *q_name[Q_COUNT] = {"fewhuge", "periodic", "manynan", "sparse", "tiny"};

static void make_input2(int q, size_t n, tu_rng *r, float *g) {
  for (size_t i = 0; i < n; i++) {
    switch (q) {
    case Q_FEWHUGE: /* a handful of huge values that no sample sees */
      g[i] = tu_below(r, 20000) == 0 ? 1e30f : tu_float_unit(r);
      break;
    case Q_PERIODIC: /* large values on a power-of-two period: a fixed stride would alias */
      g[i] = (i % 64) == 0 ? 100.0f + (float)(i % 7) : tu_float_unit(r) * 0.01f;
      break;
    case Q_MANYNAN: /* more non-finite entries than k */
      g[i] = tu_below(r, 20) == 0 ? ((i & 1) ? NAN : -INFINITY) : tu_float_unit(r);
      break;
    case Q_SPARSE: /* 99% zeros: ties at zero straddle k */
      g[i] = tu_below(r, 100) == 0 ? tu_float_unit(r) : 0.0f;
      break;
    default: /* around 1e-38, subnormals among them */
      g[i] = tu_float_unit(r) * 2e-38f;
      break;
    }
  }
}

/* Every bound the sampled path can be handed gives the reference's answer:
 * the sample's own, zero (everything a candidate), the exact k-th key and
 * its neighbours, and above every finite key (no candidates). */
static void check_bounds(bench *b, const char *name, int must_sample) {
  const size_t n = b->n;
  size_t ks[] = {1, 2, squall__topk_k(n, 0.01), n / 8, n / 8 + 1, n};
  char what[128];
  for (int with_res = 0; with_res <= 1; with_res++) {
    for (size_t i = 0; i < n; i++) b->a[i] = with_res ? b->g[i] + b->res0[i] : b->g[i];
    ref_order(b->a, n, b->keys, b->order);
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
      size_t k = ks[ki];
      uint32_t thr = b->keys[b->order[k - 1]];
      uint64_t bounds[] = {SQ_TOPK_SAMPLE_BOUND, 0, thr, thr ? thr - 1 : 0, thr + 1u, 0x7f7fffffu, 0x7fffffffu};
      for (size_t bi = 0; bi < sizeof bounds / sizeof bounds[0]; bi++)
        for (int v = 0; v <= 1; v++) {
          forced_bound = bounds[bi];
          snprintf(what, sizeof what, "%s n=%zu k=%zu bound=%s0x%08llx %s%s", name, n, k,
                   bi == 0 ? "sample/" : "", (unsigned long long)(bi == 0 ? 0 : bounds[bi]),
                   v ? "fp16" : "fp32", with_res ? " +res" : "");
          check_one(b, k, v ? squallValueFp16 : squallValueFp32, with_res, what);
          if (k > n / 8) TU_CHECK(last_path == SQ_TOPK_PATH_FULL, "%s: path %d, want full", what, last_path);
          /* The exact k-th key as the bound always decides (unless it is
           * non-finite: the bound stops below those). */
          if (k <= n / 8 && bi == 2 && thr < 0x7f800000u)
            TU_CHECK(last_path == SQ_TOPK_PATH_SAMPLED, "%s: path %d, want sampled", what, last_path);
          /* A realistic input with k = 1% must not need the fallback. */
          if (must_sample && bi == 0 && k == squall__topk_k(n, 0.01))
            TU_CHECK(last_path == SQ_TOPK_PATH_SAMPLED, "%s: the sample misled (path %d)", what, last_path);
        }
    }
  }
  forced_bound = SQ_TOPK_SAMPLE_BOUND;
}

START_TEST(test_sampled_bounds) {
  /* _i < P_COUNT: make_input's shapes; then the misleading ones. */
  const size_t n = (size_t)1 << 17;
  bench b;
  bench_alloc(&b, n);
  tu_rng r = {777u + (uint64_t)_i};
  int must_sample;
  const char *name;
  if (_i < P_COUNT) {
    make_input(_i, n, &r, b.g);
    name = pattern_name[_i];
    must_sample = _i != P_NANINF; /* 20% non-finite: all of them are candidates */
  } else {
    make_input2(_i - P_COUNT, n, &r, b.g);
    name = q_name[_i - P_COUNT];
    must_sample = _i - P_COUNT != Q_MANYNAN;
  }
  for (size_t i = 0; i < n; i++) b.res0[i] = (tu_next(&r) & 3) ? tu_float_exp(&r, -40, -2) : 0.0f;
  check_bounds(&b, name, must_sample);
  bench_free(&b);
}
END_TEST

/* Buffers at odd addresses (a float* one byte off) give the same slot and
 * residual bytes as aligned ones, on both paths. */
START_TEST(test_unaligned_buffers) {
  const size_t sizes[] = {1000, (size_t)1 << 17};
  for (size_t si = 0; si < 2; si++)
    for (int v = 0; v <= 1; v++) {
      size_t n = sizes[si], k = squall__topk_k(n, 0.01);
      squallValueType_t vt = v ? squallValueFp16 : squallValueFp32;
      size_t sb = squall__topk_slot_bytes(k, vt);
      float *g = malloc(n * 4), *res = malloc(n * 4);
      char *gu = malloc(n * 4 + 1), *ru = malloc(n * 4 + 1), *su = malloc(sb + 1);
      void *slot = malloc(sb), *ws = malloc(squall__topk_workspace_bytes(n));
      ck_assert(g && res && gu && ru && su && slot && ws);
      tu_rng r = {99 + si};
      make_input(P_RANDOM, n, &r, g);
      for (size_t i = 0; i < n; i++) res[i] = (tu_next(&r) & 1) ? tu_float_exp(&r, -20, -2) : 0.0f;
      memcpy(gu + 1, g, n * 4);
      memcpy(ru + 1, res, n * 4);
      float scale = v ? 0x1p-10f : 1.0f;
      ck_assert_int_eq(squall__topk_encode(g, res, n, k, vt, scale, slot, ws), 0);
      ck_assert_int_eq(squall__topk_encode((const float *)(gu + 1), (float *)(ru + 1), n, k, vt, scale, su + 1, ws), 0);
      ck_assert_msg(memcmp(slot, su + 1, sb) == 0, "n=%zu %s: unaligned slot differs", n, v ? "fp16" : "fp32");
      ck_assert_msg(memcmp(res, ru + 1, n * 4) == 0, "n=%zu %s: unaligned residual differs", n, v ? "fp16" : "fp32");
      /* and the decoder reads an unaligned slot */
      float *d1 = malloc(n * 4);
      char *d2 = malloc(n * 4 + 1);
      ck_assert_int_eq(squall__sparse_decode(slot, 1, k, vt, d1, n), 0);
      ck_assert_int_eq(squall__sparse_decode(su + 1, 1, k, vt, (float *)(d2 + 1), n), 0);
      ck_assert(memcmp(d1, d2 + 1, n * 4) == 0);
      free(d1);
      free(d2);
      free(g);
      free(res);
      free(gu);
      free(ru);
      free(su);
      free(slot);
      free(ws);
    }
}
END_TEST

/* Many steps of error feedback on the sampled path: each step's slot and
 * residual are exactly those of the full path (radix select everywhere). */
START_TEST(test_sampled_matches_full_over_steps) {
  const size_t n = (size_t)1 << 17;
  for (int q = 0; q < 3; q++) {
    size_t k = squall__topk_k(n, 0.01), sb = squall__topk_slot_bytes(k, squallValueFp32);
    float *g = malloc(n * 4), *r1 = calloc(n, 4), *r2 = calloc(n, 4);
    void *s1 = malloc(sb), *s2 = malloc(sb), *ws = malloc(squall__topk_workspace_bytes(n));
    tu_rng r = {4242u + (uint64_t)q};
    int sampled = 0;
    for (int step = 0; step < 20; step++) {
      if (q == 0) make_input(P_RANDOM, n, &r, g);
      else if (q == 1) make_input(P_EQUAL, n, &r, g); /* ties, then the residual breaks them */
      else make_input2(Q_SPARSE, n, &r, g);
      int p1, p2;
      ck_assert_int_eq(squall__topk_encode_bound(g, r1, n, k, squallValueFp32, 1.0f, s1, ws, SQ_TOPK_SAMPLE_BOUND, &p1), 0);
      /* bound above every key: the sampled path finds nothing and falls back */
      ck_assert_int_eq(squall__topk_encode_bound(g, r2, n, k, squallValueFp32, 1.0f, s2, ws, 0x7fffffffu, &p2), 0);
      sampled += p1 == SQ_TOPK_PATH_SAMPLED;
      ck_assert_int_eq(p2, SQ_TOPK_PATH_FALLBACK);
      ck_assert_msg(memcmp(s1, s2, sb) == 0, "q=%d step %d: slots differ", q, step);
      ck_assert_msg(memcmp(r1, r2, n * 4) == 0, "q=%d step %d: residuals differ", q, step);
    }
    ck_assert_msg(sampled >= 18, "q=%d: the sampled path ran only %d of 20 steps", q, sampled);
    free(g);
    free(r1);
    free(r2);
    free(s1);
    free(s2);
    free(ws);
  }
}
END_TEST

/* One TCase per feature, so that CK_RUN_CASE=<name> runs just that one.
 * Timeouts leave room for a loaded machine (Check's default is 4 s). */
static Suite *topk_suite(void) {
  Suite *s = suite_create("topk");
  TCase *tc = tcase_create("against-sort");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_against_sort_small, 0, P_COUNT);
  tcase_add_loop_test(tc, test_against_sort_1m, 0, P_COUNT);
  tcase_add_test(tc, test_random_k_many);
  suite_add_tcase(s, tc);
  tc = tcase_create("ties");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_ties_lower_index);
  suite_add_tcase(s, tc);
  tc = tcase_create("edges");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_edges);
  suite_add_tcase(s, tc);
  tc = tcase_create("fp16-values");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_fp16_scale_values);
  suite_add_tcase(s, tc);
  tc = tcase_create("sizes");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_k_choice);
  tcase_add_test(tc, test_slot_bytes);
  suite_add_tcase(s, tc);
  return s;
}

/* A CPU without AVX2 takes the scalar fused pass: same bytes. */
START_TEST(test_scalar_fused_pass) {
  const size_t n = (size_t)1 << 17;
  for (int q = 0; q < 4; q++) {
    size_t k = squall__topk_k(n, 0.01), sb = squall__topk_slot_bytes(k, squallValueFp16);
    float *g = malloc(n * 4), *r1 = malloc(n * 4), *r2 = malloc(n * 4);
    void *s1 = malloc(sb), *s2 = malloc(sb), *ws = malloc(squall__topk_workspace_bytes(n));
    tu_rng r = {31u + (uint64_t)q};
    if (q < 2) make_input(q == 0 ? P_RANDOM : P_NANINF, n, &r, g);
    else make_input2(q == 2 ? Q_SPARSE : Q_TINY, n, &r, g);
    for (size_t i = 0; i < n; i++) r1[i] = r2[i] = (tu_next(&r) & 1) ? tu_float_exp(&r, -30, -3) : 0.0f;
    int p1, p2;
    squall__cpu_x86_disable(0);
    ck_assert_int_eq(squall__topk_encode_bound(g, r1, n, k, squallValueFp16, 0x1p-3f, s1, ws, SQ_TOPK_SAMPLE_BOUND, &p1), 0);
    squall__cpu_x86_disable(SQ_CPU_AVX | SQ_CPU_AVX2 | SQ_CPU_F16C);
    ck_assert_int_eq(squall__topk_encode_bound(g, r2, n, k, squallValueFp16, 0x1p-3f, s2, ws, SQ_TOPK_SAMPLE_BOUND, &p2), 0);
    squall__cpu_x86_disable(0);
    ck_assert_int_eq(p1, p2);
    ck_assert_msg(memcmp(s1, s2, sb) == 0, "q=%d: scalar slot differs", q);
    ck_assert_msg(memcmp(r1, r2, n * 4) == 0, "q=%d: scalar residual differs", q);
    free(g);
    free(r1);
    free(r2);
    free(s1);
    free(s2);
    free(ws);
  }
}
END_TEST

/* fp16 values: each sent entry's code and residual are, bit for bit, what
 * sq_half_encode_elem gives for (g, prior residual), the function the CUDA
 * twin calls; negative subnormal sums included (the sign of a zero). */
START_TEST(test_fp16_sent_matches_elem) {
  const size_t sizes[] = {1000, (size_t)1 << 17};
  for (size_t si = 0; si < 2; si++) {
    size_t n = sizes[si], k = n / 10;
    size_t sb = squall__topk_slot_bytes(k, squallValueFp16);
    float *g = malloc(n * 4), *r0 = malloc(n * 4), *r = malloc(n * 4);
    void *slot = malloc(sb), *ws = malloc(squall__topk_workspace_bytes(n));
    tu_rng rng = {1212 + si};
    for (size_t i = 0; i < n; i++) {
      /* |g| < 2^-127 and |r0| < 2^-128: every sum, sent ones too, is subnormal */
      g[i] = tu_float(tu_u32(&rng) & 0x803fffffu);
      r0[i] = r[i] = (tu_next(&rng) & 1) ? -tu_float(tu_u32(&rng) & 0x001fffffu) : 0.0f;
    }
    float scale = 0x1p100f;
    ck_assert_int_eq(squall__topk_encode(g, r, n, k, squallValueFp16, scale, slot, ws), 0);
    const unsigned char *bytes = slot;
    for (size_t j = 0; j < k; j++) {
      uint32_t idx;
      uint16_t h;
      memcpy(&idx, bytes + 4 * j, 4);
      memcpy(&h, bytes + 4 * k + 2 * j, 2);
      float want_r = r0[idx];
      uint16_t want_h = sq_half_encode_elem(SQ_HALF_FP16, g[idx], &want_r, scale);
      TU_CHECK(h == want_h && tu_bits(r[idx]) == tu_bits(want_r), "n=%zu entry %zu (index %u): 0x%04x/%a, elem 0x%04x/%a",
               n, j, idx, h, (double)r[idx], want_h, (double)want_r);
    }
    free(g);
    free(r0);
    free(r);
    free(slot);
    free(ws);
  }
}
END_TEST

/* The two encoders that write a second buffer beside the residual,
 * against squall__topk_encode (the same slot and residual, bit for bit):
 *  - squall__topk_encode_backup (to = 0) updates the residual in place and
 *    copies it as it was into the buffer;
 *  - squall__topk_encode_to (to = 1) writes the updated residual into the
 *    buffer and leaves the residual as it was (its fallback reads a back
 *    from the buffer).
 * On every path (sampled, its fallback, the full path of small n and of
 * k > n/8), fp32 and fp16 values, a streamed (aligned) and a plain
 * (misaligned) buffer, with AVX2 and without. The buffer starts as NaN,
 * so an element it missed shows; nothing is written past its end. */
static void check_second_buffer(int to) {
  const size_t sizes[] = {((size_t)1 << 17) + 29, 3001};         /* + 29: the 8-lane and the scalar tails too */
  const uint64_t bounds[] = {SQ_TOPK_SAMPLE_BOUND, 0x7fffffffu}; /* the second misleads: fallback */
  for (size_t si = 0; si < 2; si++)
    for (int dense = 0; dense < 2; dense++)
      for (int b = 0; b < 2; b++)
        for (int fp16 = 0; fp16 < 2; fp16++)
          for (int off = 0; off < 2; off++)
            for (int avx = 0; avx < 2; avx++) {
              size_t n = sizes[si], k = dense ? n / 4 : squall__topk_k(n, 0.01);
              squallValueType_t vt = fp16 ? squallValueFp16 : squallValueFp32;
              size_t sb = squall__topk_slot_bytes(k, vt);
              float *g = malloc(n * 4), *r1 = malloc(n * 4), *r2 = malloc(n * 4), *before = malloc(n * 4);
              /* C11: a size that is a multiple of the alignment */
              float *block = aligned_alloc(64, ((n + 32) * 4 + 63) / 64 * 64), *buf = block + off;
              void *s1 = malloc(sb), *s2 = malloc(sb), *ws = malloc(squall__topk_workspace_bytes(n));
              tu_rng r = {(to ? 1900u : 900u) + si * 64 + (uint64_t)dense * 16 + (uint64_t)b * 8 +
                          (uint64_t)fp16 * 4 + (uint64_t)off * 2 + (uint64_t)avx};
              make_input(b ? P_RANDOM : P_NANINF, n, &r, g); /* non-finite keys would satisfy any bound */
              for (size_t i = 0; i < n; i++)
                before[i] = r1[i] = r2[i] = (tu_next(&r) & 1) ? tu_float_exp(&r, -30, -3) : 0.0f;
              for (size_t i = 0; i < n; i++) buf[i] = NAN;
              for (size_t i = n; i < n + 32 - (size_t)off; i++) buf[i] = -7.0f; /* a canary past the end */
              int p1, p2;
              squall__cpu_x86_disable(avx ? 0 : SQ_CPU_AVX | SQ_CPU_AVX2 | SQ_CPU_F16C);
              ck_assert_int_eq(squall__topk_encode_bound(g, r1, n, k, vt, 0x1p-3f, s1, ws, bounds[b], &p1), 0);
              if (to)
                ck_assert_int_eq(squall__topk_encode_to_bound(g, r2, buf, n, k, vt, 0x1p-3f, s2, ws, bounds[b], &p2), 0);
              else
                ck_assert_int_eq(squall__topk_encode_backup_bound(g, r2, n, k, vt, 0x1p-3f, s2, ws, buf, bounds[b], &p2),
                                 0);
              squall__cpu_x86_disable(0);
              const char *what = si ? "n=3001" : "n=2^17+29";
              ck_assert_int_eq(p1, p2);
              if (!dense && si == 0) ck_assert_int_eq(p2, (b ? SQ_TOPK_PATH_FALLBACK : SQ_TOPK_PATH_SAMPLED));
              if (dense || si == 1) ck_assert_int_eq(p2, SQ_TOPK_PATH_FULL);
              ck_assert_msg(memcmp(s1, s2, sb) == 0, "%s to %d dense %d bound %d fp16 %d: slots differ", what, to, dense,
                            b, fp16);
              /* to: buf is the updated residual and r2 the old; backup: the other way round */
              const float *updated = to ? buf : r2, *old = to ? r2 : buf;
              for (size_t i = 0; i < n; i++) {
                TU_CHECK(tu_bits(updated[i]) == tu_bits(r1[i]), "%s to %d dense %d bound %d fp16 %d off %d avx %d: "
                                                                "residual[%zu] %a, in place %a",
                         what, to, dense, b, fp16, off, avx, i, (double)updated[i],
                         (double)r1[i]);
                TU_CHECK(tu_bits(old[i]) == tu_bits(before[i]), "%s to %d off %d avx %d: the old residual[%zu] %a, was %a",
                         what, to, off, avx, i, (double)old[i], (double)before[i]);
              }
              for (size_t i = n; i < n + 32 - (size_t)off; i++)
                TU_CHECK(buf[i] == -7.0f, "%s to %d: written past the buffer's end at %zu", what, to, i);
              free(g);
              free(r1);
              free(r2);
              free(before);
              free(block);
              free(s1);
              free(s2);
              free(ws);
            }
}

START_TEST(test_encode_backup) { check_second_buffer(0); }
END_TEST

/* squall__topk_encode_to, as above, and on the sampled path's tie merge. */
START_TEST(test_encode_to) {
  check_second_buffer(1);
  /* The sampled path's other branch: fewer candidates above the bound
   * than k, the rest ties at it (+-0.75, 99% of the input, with no
   * residual to break them), merged by index. */
  for (int fp16 = 0; fp16 < 2; fp16++)
    for (int off = 0; off < 2; off++)
      for (int avx = 0; avx < 2; avx++) {
        size_t n = ((size_t)1 << 17) + 29, k = squall__topk_k(n, 0.02), nonzero = 0;
        squallValueType_t vt = fp16 ? squallValueFp16 : squallValueFp32;
        size_t sb = squall__topk_slot_bytes(k, vt);
        float *g = malloc(n * 4), *r1 = calloc(n, 4), *r2 = calloc(n, 4);
        float *out_block = aligned_alloc(64, ((n + 32) * 4 + 63) / 64 * 64), *out = out_block + off;
        void *s1 = malloc(sb), *s2 = malloc(sb), *ws = malloc(squall__topk_workspace_bytes(n));
        tu_rng r = {2900u + (uint64_t)fp16 * 4 + (uint64_t)off * 2 + (uint64_t)avx};
        for (size_t i = 0; i < n; i++) g[i] = tu_below(&r, 100) == 0 ? 2.0f + tu_float_unit(&r) : (i & 1) ? 0.75f
                                                                                                          : -0.75f;
        for (size_t i = 0; i < n; i++) nonzero += fabsf(g[i]) > 0.75f;
        ck_assert_uint_lt(nonzero, k); /* ties at 0.75 decide the rest */
        for (size_t i = 0; i < n; i++) out[i] = NAN;
        int p1, p2;
        squall__cpu_x86_disable(avx ? 0 : SQ_CPU_AVX | SQ_CPU_AVX2 | SQ_CPU_F16C);
        ck_assert_int_eq(squall__topk_encode_bound(g, r1, n, k, vt, 0x1p-3f, s1, ws, SQ_TOPK_SAMPLE_BOUND, &p1), 0);
        ck_assert_int_eq(squall__topk_encode_to_bound(g, r2, out, n, k, vt, 0x1p-3f, s2, ws, SQ_TOPK_SAMPLE_BOUND, &p2),
                         0);
        squall__cpu_x86_disable(0);
        ck_assert_int_eq(p1, SQ_TOPK_PATH_SAMPLED);
        ck_assert_int_eq(p2, SQ_TOPK_PATH_SAMPLED);
        ck_assert_msg(memcmp(s1, s2, sb) == 0, "ties fp16 %d off %d avx %d: slots differ", fp16, off, avx);
        for (size_t i = 0; i < n; i++) {
          TU_CHECK(tu_bits(out[i]) == tu_bits(r1[i]), "ties fp16 %d off %d avx %d: out[%zu] %a, in place %a", fp16,
                   off, avx, i, (double)out[i], (double)r1[i]);
          TU_CHECK(tu_bits(r2[i]) == 0, "ties: the residual read changed at %zu", i);
        }
        free(g);
        free(r1);
        free(r2);
        free(out_block);
        free(s1);
        free(s2);
        free(ws);
      }
}
END_TEST

/* The sampled path and its fallbacks (a suite of its own, added last). */
static Suite *with_sampled(Suite *s) {
  TCase *tc = tcase_create("sampled");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_sampled_bounds, 0, P_COUNT + Q_COUNT);
  tcase_add_test(tc, test_unaligned_buffers);
  tcase_add_test(tc, test_sampled_matches_full_over_steps);
  tcase_add_test(tc, test_scalar_fused_pass);
  tcase_add_test(tc, test_fp16_sent_matches_elem);
  tcase_add_test(tc, test_encode_backup);
  tcase_add_test(tc, test_encode_to);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(with_sampled(topk_suite())); }

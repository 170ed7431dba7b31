/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_sparse.c - the host sparse decoder: the rank-ordered sum of every
 * rank's slot against a reference, fp16 slots with their own scales,
 * round trips through the top-k encoder, and corrupt payloads; and
 * squall__topk_finish (residual update and decode in one pass) against the
 * definition of both.
 */
#include <math.h>

#include "check_util.h"
#include "codecs/codec.h"

/* fp16 value from the format definition (independent of codec_math.h). */
static float ref_f16(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24)
                                                     : ldexp(1024 + m, e - 25);
  return (float)((h & 0x8000u) ? -v : v);
}

/* Writes one slot by hand, byte by byte as the format says: k u32 indices,
 * then k values (f32 bits or fp16 codes), then for fp16 the scale. */
static void put_slot(unsigned char *slot, size_t k, squallValueType_t values, const uint32_t *idx,
                     const float *vf, const uint16_t *vh, float scale) {
  size_t sb = squall__topk_slot_bytes(k, values);
  memset(slot, 0, sb);
  for (size_t j = 0; j < k; j++) {
    memcpy(slot + 4 * j, &idx[j], 4);
    if (values == squallValueFp16) memcpy(slot + 4 * k + 2 * j, &vh[j], 2);
    else memcpy(slot + 4 * k + 4 * j, &vf[j], 4);
  }
  if (values == squallValueFp16) memcpy(slot + squall__slot_scale_offset(k), &scale, 4);
}

/* k distinct indices below n, ascending (selection sampling). */
static void pick_indices(tu_rng *r, size_t n, size_t k, uint32_t *out) {
  size_t need = k, j = 0;
  for (size_t i = 0; i < n && need; i++)
    if (tu_below(r, n - i) < need) {
      out[j++] = (uint32_t)i;
      need--;
    }
}

typedef struct {
  int nranks;
  size_t n, k, sb;
  squallValueType_t values;
  unsigned char *slots;
  uint32_t *idx; /* nranks * k */
  float *vf;     /* nranks * k */
  uint16_t *vh;  /* nranks * k */
  float *scale;  /* nranks */
} payload;

static void payload_make(payload *p, tu_rng *r, int nranks, size_t n, size_t k, squallValueType_t values) {
  p->nranks = nranks;
  p->n = n;
  p->k = k;
  p->values = values;
  p->sb = squall__topk_slot_bytes(k, values);
  p->slots = malloc(p->sb * (size_t)nranks + 1);
  p->idx = malloc((k * (size_t)nranks + 1) * sizeof *p->idx);
  p->vf = malloc((k * (size_t)nranks + 1) * sizeof *p->vf);
  p->vh = malloc((k * (size_t)nranks + 1) * sizeof *p->vh);
  p->scale = malloc((size_t)nranks * sizeof *p->scale + 1);
  static const float scales[] = {1.0f, 0x1p-3f, 0x1p7f, 0x1p15f, 3.0f};
  for (int q = 0; q < nranks; q++) {
    size_t o = (size_t)q * k;
    pick_indices(r, n, k, p->idx + o);
    p->scale[q] = scales[tu_below(r, 5)];
    for (size_t j = 0; j < k; j++) {
      p->vf[o + j] = tu_float_exp(r, -20, 20);
      uint16_t h = (uint16_t)tu_u32(r);
      if ((h & 0x7c00u) == 0x7c00u) h &= 0xbfffu; /* keep codes finite */
      p->vh[o + j] = h;
    }
    put_slot(p->slots + (size_t)q * p->sb, k, values, p->idx + o, p->vf + o, p->vh + o, p->scale[q]);
  }
}

static void payload_free(payload *p) {
  free(p->slots);
  free(p->idx);
  free(p->vf);
  free(p->vh);
  free(p->scale);
}

/* Reference: zero, then rank 0's entries, then rank 1's, ... */
static void payload_reference(const payload *p, float *dense) {
  memset(dense, 0, p->n * sizeof *dense);
  for (int q = 0; q < p->nranks; q++)
    for (size_t j = 0; j < p->k; j++) {
      size_t o = (size_t)q * p->k + j;
      float v = p->values == squallValueFp16 ? ref_f16(p->vh[o]) / p->scale[q] : p->vf[o];
      dense[p->idx[o]] += v;
    }
}

static void check_payload(int nranks, size_t n, size_t k, squallValueType_t values, uint64_t seed) {
  tu_rng r = {seed};
  payload p;
  payload_make(&p, &r, nranks, n, k, values);
  float *got = malloc((n + 1) * sizeof *got), *want = malloc((n + 1) * sizeof *want);
  for (size_t i = 0; i < n; i++) got[i] = 12345.0f; /* must be overwritten */
  payload_reference(&p, want);
  ck_assert_int_eq(squall__sparse_decode(p.slots, nranks, k, values, got, n), 0);
  for (size_t i = 0; i < n; i++)
    TU_CHECK(tu_bits(got[i]) == tu_bits(want[i]), "P=%d n=%zu k=%zu %s: dense[%zu] = %a, want %a", nranks, n, k,
             values == squallValueFp16 ? "fp16" : "fp32", i, (double)got[i], (double)want[i]);
  free(got);
  free(want);
  payload_free(&p);
}

START_TEST(test_rank_order_sum) {
  tu_rng r = {8080};
  for (int rep = 0; rep < 200; rep++) {
    int nranks = 1 + (int)tu_below(&r, 8);
    size_t n = 1 + tu_below(&r, 3000);
    size_t k = tu_below(&r, n + 1);
    check_payload(nranks, n, k, (rep & 1) ? squallValueFp16 : squallValueFp32, 1000u + (uint64_t)rep);
  }
  /* Dense overlap: every rank sends everything. */
  check_payload(5, 777, 777, squallValueFp32, 1);
  check_payload(5, 777, 777, squallValueFp16, 2);
  /* A large one. */
  check_payload(8, 1 << 20, 10000, squallValueFp32, 3);
  check_payload(8, 1 << 20, 10000, squallValueFp16, 4);
}
END_TEST

START_TEST(test_order_matters) {
  /* (1e8 + 1) - 1e8 is 0 in float; any other order gives 1 or -1e8+... The
   * decoder must add in rank order on every rank. */
  unsigned char slots[3 * 8];
  const uint32_t idx = 0;
  const float v[3] = {1e8f, 1.0f, -1e8f};
  for (int q = 0; q < 3; q++) put_slot(slots + 8 * q, 1, squallValueFp32, &idx, &v[q], NULL, 1.0f);
  float dense[2] = {7, 7};
  ck_assert_int_eq(squall__sparse_decode(slots, 3, 1, squallValueFp32, dense, 2), 0);
  ck_assert_uint_eq(tu_bits(dense[0]), 0);
  ck_assert_uint_eq(tu_bits(dense[1]), 0);
}
END_TEST

START_TEST(test_fp16_per_rank_scale) {
  /* The same code means different values under different ranks' scales. */
  size_t sb = squall__topk_slot_bytes(2, squallValueFp16);
  unsigned char *slots = malloc(3 * sb);
  const uint32_t idx[2] = {1, 4};
  const uint16_t code[2] = {0x3c00 /* 1 */, 0xc000 /* -2 */};
  put_slot(slots, 2, squallValueFp16, idx, NULL, code, 1.0f);
  put_slot(slots + sb, 2, squallValueFp16, idx, NULL, code, 0.25f);
  put_slot(slots + 2 * sb, 2, squallValueFp16, idx, NULL, code, 1024.0f);
  float dense[5];
  ck_assert_int_eq(squall__sparse_decode(slots, 3, 2, squallValueFp16, dense, 5), 0);
  ck_assert_float_eq(dense[1], 1.0f + 4.0f + 1.0f / 1024);
  ck_assert_float_eq(dense[4], -2.0f - 8.0f - 2.0f / 1024);
  ck_assert_float_eq(dense[0], 0.0f);
  ck_assert_float_eq(dense[2], 0.0f);
  free(slots);
}
END_TEST

START_TEST(test_roundtrip_encoder) {
  /* P ranks encode their own gradients; the decoded sum is the rank-ordered
   * sum of what each sent (a for fp32), and with the residuals it accounts
   * for every input. */
  enum { P = 4,
         N = 5000 };
  static float g[P][N], res[P][N], dense[N], want[N];
  tu_rng r = {4242};
  for (int v = 0; v <= 1; v++) {
    squallValueType_t values = v ? squallValueFp16 : squallValueFp32;
    size_t k = squall__topk_k(N, 0.05);
    size_t sb = squall__topk_slot_bytes(k, values);
    unsigned char *slots = malloc(P * sb);
    void *ws = malloc(squall__topk_workspace_bytes(N));
    memset(want, 0, sizeof want);
    for (int q = 0; q < P; q++) {
      for (size_t i = 0; i < N; i++) {
        g[q][i] = (float)((int32_t)(tu_u32(&r) >> 20) - 2048) * 0x1p-10f; /* dyadic, small */
        res[q][i] = 0.0f;
      }
      float scale = v ? sq_pow2_scale(squall__absmax(g[q], res[q], N), SQ_F16_MAX) : 1.0f;
      ck_assert_int_eq(squall__topk_encode(g[q], res[q], N, k, values, scale, slots + q * sb, ws), 0);
      const uint32_t *idx = squall__slot_indices(slots + q * sb);
      for (size_t j = 0; j < k; j++) want[idx[j]] += g[q][idx[j]] - res[q][idx[j]];
    }
    ck_assert_int_eq(squall__sparse_decode(slots, P, k, values, dense, N), 0);
    for (size_t i = 0; i < N; i++) {
      ck_assert_msg(tu_same_value(dense[i], want[i]), "%s elt %zu: %a, want %a", v ? "fp16" : "fp32", i,
                    (double)dense[i], (double)want[i]);
      /* Exact bookkeeping on dyadic data: decoded + residuals == inputs. */
      float sum_g = 0.0f, sum_res = 0.0f;
      for (int q = 0; q < P; q++) {
        sum_g += g[q][i];
        sum_res += res[q][i];
      }
      ck_assert_msg(dense[i] + sum_res == sum_g, "elt %zu: %a + %a != %a", i, (double)dense[i], (double)sum_res,
                    (double)sum_g);
    }
    free(slots);
    free(ws);
  }
}
END_TEST

/* A corrupt payload returns -1, zeroes dense and writes nothing outside. */
static void check_corrupt(squallValueType_t values, int bad_rank, size_t bad_pos, uint32_t bad_index,
                          const char *what) {
  enum { P = 3,
         K = 6,
         N = 50,
         GUARD = 16 };
  tu_rng r = {99};
  payload p;
  payload_make(&p, &r, P, N, K, values);
  unsigned char *slot = p.slots + (size_t)bad_rank * p.sb;
  memcpy(slot + 4 * bad_pos, &bad_index, 4);
  float buf[N + 2 * GUARD];
  for (size_t i = 0; i < N + 2 * GUARD; i++) buf[i] = 99.0f;
  float *dense = buf + GUARD;
  ck_assert_msg(squall__sparse_decode(p.slots, P, K, values, dense, N) == -1, "%s: not detected", what);
  for (size_t i = 0; i < N; i++) ck_assert_msg(tu_bits(dense[i]) == 0, "%s: dense[%zu] = %a", what, i, (double)dense[i]);
  for (size_t i = 0; i < GUARD; i++) {
    ck_assert_msg(buf[i] == 99.0f, "%s: wrote before dense", what);
    ck_assert_msg(buf[GUARD + N + i] == 99.0f, "%s: wrote past dense", what);
  }
  payload_free(&p);
}

START_TEST(test_corrupt) {
  for (int v = 0; v <= 1; v++) {
    squallValueType_t values = v ? squallValueFp16 : squallValueFp32;
    check_corrupt(values, 2, 5, 50, "index == n in the last rank");
    check_corrupt(values, 0, 0, 1000, "index > n in the first rank");
    check_corrupt(values, 1, 5, UINT32_MAX, "index UINT32_MAX");
    check_corrupt(values, 1, 3, 0, "non-ascending");
  }
  /* Duplicates: two equal indices in one slot. */
  unsigned char slot[16];
  const uint32_t dup[2] = {3, 3}, desc[2] = {4, 3}, ok[2] = {3, 4};
  const float val[2] = {1.0f, 2.0f};
  float dense[5];
  put_slot(slot, 2, squallValueFp32, dup, val, NULL, 1.0f);
  ck_assert_int_eq(squall__sparse_decode(slot, 1, 2, squallValueFp32, dense, 5), -1);
  put_slot(slot, 2, squallValueFp32, desc, val, NULL, 1.0f);
  ck_assert_int_eq(squall__sparse_decode(slot, 1, 2, squallValueFp32, dense, 5), -1);
  put_slot(slot, 2, squallValueFp32, ok, val, NULL, 1.0f);
  ck_assert_int_eq(squall__sparse_decode(slot, 1, 2, squallValueFp32, dense, 5), 0);
  ck_assert_float_eq(dense[3], 1.0f);
  ck_assert_float_eq(dense[4], 2.0f);
  /* Indices that ascend in one slot but restart in the next are fine. */
  unsigned char two[32];
  put_slot(two, 2, squallValueFp32, ok, val, NULL, 1.0f);
  put_slot(two + 16, 2, squallValueFp32, ok, val, NULL, 1.0f);
  ck_assert_int_eq(squall__sparse_decode(two, 2, 2, squallValueFp32, dense, 5), 0);
  ck_assert_float_eq(dense[3], 2.0f);
  /* n = 0 with k > 0: every index is out of range. */
  ck_assert_int_eq(squall__sparse_decode(two, 1, 2, squallValueFp32, dense, 0), -1);
}
END_TEST

START_TEST(test_k_zero) {
  float dense[4] = {1, 2, 3, 4};
  unsigned char slots[32];
  memset(slots, 0xff, sizeof slots); /* the fp16 slot is its scale alone */
  ck_assert_int_eq(squall__sparse_decode(slots, 3, 0, squallValueFp32, dense, 4), 0);
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(tu_bits(dense[i]), 0);
  for (int i = 0; i < 4; i++) dense[i] = 5;
  ck_assert_int_eq(squall__sparse_decode(slots, 3, 0, squallValueFp16, dense, 4), 0);
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(tu_bits(dense[i]), 0);
  /* No ranks at all: zeros. */
  for (int i = 0; i < 4; i++) dense[i] = 5;
  ck_assert_int_eq(squall__sparse_decode(slots, 0, 2, squallValueFp32, dense, 4), 0);
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(tu_bits(dense[i]), 0);
}
END_TEST

START_TEST(test_nonfinite_values) {
  /* NaN and Inf are delivered and propagate through the sum. */
  unsigned char slots[2 * 16];
  const uint32_t idx[2] = {0, 1};
  const float a[2] = {INFINITY, NAN}, b[2] = {-INFINITY, 1.0f};
  put_slot(slots, 2, squallValueFp32, idx, a, NULL, 1.0f);
  put_slot(slots + 16, 2, squallValueFp32, idx, b, NULL, 1.0f);
  float dense[3];
  ck_assert_int_eq(squall__sparse_decode(slots, 2, 2, squallValueFp32, dense, 3), 0);
  ck_assert(tu_isnan(dense[0])); /* Inf + -Inf */
  ck_assert(tu_isnan(dense[1]));
  ck_assert_float_eq(dense[2], 0.0f);
  const uint16_t h[2] = {0x7c00, 0xfe00};
  unsigned char s16[16];
  put_slot(s16, 2, squallValueFp16, idx, NULL, h, 0.5f);
  ck_assert_int_eq(squall__sparse_decode(s16, 1, 2, squallValueFp16, dense, 3), 0);
  ck_assert_uint_eq(tu_bits(dense[0]), 0x7f800000u);
  ck_assert(tu_isnan(dense[1]));
}
END_TEST

/* ------------------------------------------------------ squall__topk_finish */

/* Gradients and residuals with everything a finish must carry through:
 * signed zeros, subnormals, Inf, NaN, and values of every size. */
static float finish_value(tu_rng *r) {
  switch (tu_below(r, 16)) {
  case 0: return tu_below(r, 2) ? -0.0f : 0.0f;
  case 1: return tu_float(tu_u32(r) & 0x807fffffu); /* subnormal */
  case 2: return tu_below(r, 50) ? tu_float_exp(r, -10, 10) : (tu_below(r, 2) ? INFINITY : NAN);
  default: return tu_float_exp(r, -30, 30);
  }
}

/* P ranks select from their own g and res; each rank's finish must leave
 * the residual the definition gives (a - decode(value) where it sent, a
 * where not, non-finite never kept) and the decoder's exact bits in dense,
 * also when dense is g itself; and the one-pass encode must agree. */
static void check_finish(int P, size_t n, double ratio, squallValueType_t values, int in_place) {
  tu_rng r = {(uint64_t)(7 + P * 131 + n + (size_t)values * 17 + (size_t)in_place)};
  size_t k = squall__topk_k(n, ratio), sb = squall__topk_slot_bytes(k, values);
  int fp16 = values == squallValueFp16;
  float *g = malloc(sizeof(float) * n * (size_t)P), *res = malloc(sizeof(float) * n * (size_t)P);
  float *res0 = malloc(sizeof(float) * n), *dense = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n);
  float *enc = malloc(sizeof(float) * n);
  unsigned char *slots = malloc(sb * (size_t)P + 1), *enc_slot = malloc(sb + 1);
  void *ws = malloc(squall__topk_workspace_bytes(n));
  for (size_t i = 0; i < n * (size_t)P; i++) {
    g[i] = finish_value(&r);
    res[i] = finish_value(&r);
  }
  for (int q = 0; q < P; q++) {
    float *gq = g + (size_t)q * n, *rq = res + (size_t)q * n, scale = 0x1p-8f;
    memcpy(res0, rq, sizeof(float) * n);
    ck_assert_int_eq(squall__topk_select(gq, rq, n, k, values, scale, slots + (size_t)q * sb, ws), 0);
    ck_assert_msg(memcmp(res0, rq, sizeof(float) * n) == 0, "select wrote the residual");
  }
  ck_assert_int_eq(squall__sparse_decode(slots, P, k, values, want, n), 0);
  for (int q = 0; q < P; q++) {
    float *gq = g + (size_t)q * n, *rq = res + (size_t)q * n;
    const unsigned char *mine = slots + (size_t)q * sb;
    float scale = 1.0f;
    if (fp16) memcpy(&scale, mine + squall__slot_scale_offset(k), 4);
    memcpy(res0, rq, sizeof(float) * n);
    /* the one-pass encode: the same slot, and (below) the same residual */
    memcpy(enc, rq, sizeof(float) * n);
    ck_assert_int_eq(squall__topk_encode(gq, enc, n, k, values, 0x1p-8f, enc_slot, ws), 0);
    ck_assert_msg(memcmp(enc_slot, mine, sb) == 0, "encode and select wrote different slots");
    float *gin = gq, *out = dense;
    if (in_place) { /* the output overwrites the gradient it reads */
      memcpy(dense, gq, sizeof(float) * n);
      gin = out = dense;
    }
    ck_assert_int_eq(squall__topk_finish(gin, rq, n, slots, P, q, k, values, out), 0);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
      float a = gq[i] + res0[i], expect;
      if (j < k && squall__slot_indices(mine)[j] == i) {
        uint16_t h;
        if (fp16) {
          memcpy(&h, mine + 4 * k + 2 * j, 2);
          float d = sq_half_decode_elem(SQ_HALF_FP16, h, scale);
          expect = tu_isfinite(a) && tu_isfinite(d) ? sq_ftz(sq_ftz(a) - d) : 0.0f;
        } else {
          expect = 0.0f;
        }
        j++;
      } else {
        expect = tu_isfinite(a) ? a : 0.0f;
      }
      /* ck_abort_msg only on a mismatch: every ck_assert writes a mark to
       * Check's pipe, millions of system calls over 4M elements */
      if (tu_bits(rq[i]) != tu_bits(expect))
        ck_abort_msg("P=%d n=%zu %s rank %d elt %zu: res %a, want %a", P, n, fp16 ? "fp16" : "fp32", q, i,
                     (double)rq[i], (double)expect);
      if (tu_bits(enc[i]) != tu_bits(expect))
        ck_abort_msg("P=%d n=%zu rank %d elt %zu: encode's res %a, want %a", P, n, q, i, (double)enc[i],
                     (double)expect);
      if (tu_bits(out[i]) != tu_bits(want[i]))
        ck_abort_msg("P=%d n=%zu rank %d elt %zu: dense %a, decoder %a", P, n, q, i, (double)out[i],
                     (double)want[i]);
    }
  }
  free(g);
  free(res);
  free(res0);
  free(dense);
  free(want);
  free(enc);
  free(enc_slot);
  free(slots);
  free(ws);
}

START_TEST(test_finish_definition) {
  for (int v = 0; v <= 1; v++) {
    squallValueType_t values = v ? squallValueFp16 : squallValueFp32;
    for (int in_place = 0; in_place <= 1; in_place++) {
      check_finish(1, 1000, 0.1, values, in_place);
      check_finish(3, 5003, 0.01, values, in_place);  /* not a whole number of tiles */
      check_finish(4, 70001, 0.01, values, in_place); /* the sampled selection */
      check_finish(2, 257, 1.0, values, in_place);    /* everything sent */
    }
    check_finish(300, 40, 0.1, values, 0); /* more ranks than the pass keeps cursors for */
  }
  /* past the caches: the output is streamed (non-temporal), after a head
   * that brings it to 32 bytes */
  check_finish(2, ((size_t)1 << 22) + 3, 0.001, squallValueFp32, 0);
}
END_TEST

/* The selection alone takes the same paths as the encode, with the same
 * forced bounds: a bound above every key (too few candidates), 0 (too
 * many), the sampled one; on data with many ties at the threshold too. It
 * writes the encode's slot, leaves the residual, and select + finish leave
 * the encode's residual. */
START_TEST(test_select_paths) {
  enum { N = 100000 };
  static float g[N], res[N], enc[N], fin[N];
  const uint64_t bounds[] = {SQ_TOPK_SAMPLE_BOUND, 0, 0x7fffffffu, 0x3f000000u};
  for (int ties = 0; ties <= 1; ties++)
    for (int v = 0; v <= 1; v++) {
      squallValueType_t values = v ? squallValueFp16 : squallValueFp32;
      size_t k = squall__topk_k(N, 0.01), sb = squall__topk_slot_bytes(k, values);
      tu_rng r = {(uint64_t)(31 + ties * 2 + v)};
      for (size_t i = 0; i < N; i++) {
        /* ties: a few distinct magnitudes, so thousands tie at the threshold */
        g[i] = ties ? (float)(1 + tu_below(&r, 4)) * (tu_below(&r, 2) ? 1.0f : -1.0f) : tu_float_unit(&r);
        res[i] = ties ? 0.0f : tu_float_unit(&r) * 0.5f;
      }
      unsigned char *s1 = malloc(sb), *s2 = malloc(sb);
      void *ws = malloc(squall__topk_workspace_bytes(N));
      for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
        int p1 = -1, p2 = -1;
        memcpy(enc, res, sizeof res);
        memcpy(fin, res, sizeof res);
        ck_assert_int_eq(squall__topk_encode_bound(g, enc, N, k, values, 0x1p-2f, s1, ws, bounds[b], &p1), 0);
        ck_assert_int_eq(squall__topk_select_bound(g, fin, N, k, values, 0x1p-2f, s2, ws, bounds[b], &p2), 0);
        ck_assert_int_eq(p1, p2);
        ck_assert_msg(memcmp(s1, s2, sb) == 0, "bound %zu ties %d: select and encode wrote different slots", b, ties);
        ck_assert_msg(memcmp(fin, res, sizeof res) == 0, "bound %zu ties %d: the selection wrote the residual", b,
                      ties);
        ck_assert_int_eq(squall__topk_finish(g, fin, N, s2, 1, 0, k, values, NULL), 0);
        ck_assert_msg(memcmp(fin, enc, sizeof res) == 0, "bound %zu ties %d: residuals differ", b, ties);
      }
      free(s1);
      free(s2);
      free(ws);
    }
}
END_TEST

/* A corrupt slot anywhere: -1, the residual untouched, dense zeroed. */
START_TEST(test_finish_corrupt) {
  enum { P = 3,
         N = 600 };
  for (int v = 0; v <= 1; v++) {
    squallValueType_t values = v ? squallValueFp16 : squallValueFp32;
    size_t k = 12, sb = squall__topk_slot_bytes(k, values);
    tu_rng r = {55};
    float g[N], res[N], res0[N], dense[N];
    unsigned char *slots = malloc(P * sb);
    void *ws = malloc(squall__topk_workspace_bytes(N));
    for (size_t i = 0; i < N; i++) {
      g[i] = tu_float_unit(&r);
      res[i] = res0[i] = tu_float_unit(&r);
    }
    for (int q = 0; q < P; q++)
      ck_assert_int_eq(squall__topk_select(g, res, N, k, values, 1.0f, slots + q * sb, ws), 0);
    uint32_t bad = N;
    memcpy(slots + 2 * sb + 4 * 7, &bad, 4); /* the last rank's, past the first tiles */
    for (size_t i = 0; i < N; i++) dense[i] = 5.0f;
    ck_assert_int_eq(squall__topk_finish(g, res, N, slots, P, 0, k, values, dense), -1);
    ck_assert_msg(memcmp(res, res0, sizeof res) == 0, "the residual changed");
    for (size_t i = 0; i < N; i++) ck_assert_uint_eq(tu_bits(dense[i]), 0);
    /* an own rank outside the slots is refused before anything is written */
    ck_assert_int_eq(squall__topk_finish(g, res, N, slots, 2, 2, k, values, NULL), -1);
    ck_assert_msg(memcmp(res, res0, sizeof res) == 0, "the residual changed");
    free(slots);
    free(ws);
  }
}
END_TEST

/* ---------------------------------------------- the finish in rounds */

/* The slots arrive in rounds (cut from each rank's slot and put into the
 * receiver's, as the exchange does), each accepted and run to a point at
 * random: the residual and the output must be bit for bit the one-shot
 * finish's, whatever the rounds, in place or not. */
static void check_rounds(int P, size_t n, double ratio, squallValueType_t values, int with_res, int in_place,
                         int rounds) {
  tu_rng r = {(uint64_t)(101 + P * 7 + n + (size_t)values * 3 + (size_t)with_res * 5 + (size_t)rounds)};
  size_t k = squall__topk_k(n, ratio), sb = squall__topk_slot_bytes(k, values);
  float *g = malloc(sizeof(float) * n * (size_t)P), *res = malloc(sizeof(float) * n);
  float *res1 = malloc(sizeof(float) * n), *res2 = malloc(sizeof(float) * n);
  float *out1 = malloc(sizeof(float) * n), *out2 = malloc(sizeof(float) * n);
  unsigned char *sent = malloc(sb * (size_t)P), *got = malloc(sb * (size_t)P), *part = malloc(sb + 8);
  void *ws = malloc(squall__topk_workspace_bytes(n));
  for (size_t i = 0; i < n * (size_t)P; i++) g[i] = finish_value(&r);
  for (size_t i = 0; i < n; i++) res[i] = finish_value(&r);
  for (int q = 0; q < P; q++)
    ck_assert_int_eq(squall__topk_select(g + (size_t)q * n, q == 0 ? res : NULL, n, k, values, 0x1p-6f,
                                         sent + (size_t)q * sb, ws),
                     0);
  /* one shot: rank 0's view */
  memcpy(res1, res, sizeof(float) * n);
  memcpy(out1, g, sizeof(float) * n);
  ck_assert_int_eq(squall__topk_finish(in_place ? out1 : g, with_res ? res1 : NULL, n, sent, P, 0, k, values,
                                       out1),
                   0);
  /* in rounds */
  memcpy(res2, res, sizeof(float) * n);
  memcpy(out2, g, sizeof(float) * n);
  /* what a reused buffer holds before a round arrives: zeros, indices
   * below anything of the round before (the finisher must not read them) */
  memset(got, 0, sb * (size_t)P);
  squall_topk_finisher f;
  ck_assert_int_eq(squall__topk_finish_begin(&f, in_place ? out2 : g, with_res ? res2 : NULL, n, got, P, 0, k,
                                             values, out2),
                   0);
  for (int j = 0; j < rounds; j++) {
    size_t from = j * k / (size_t)rounds, to = (j + 1) * k / (size_t)rounds;
    for (int q = 0; q < P; q++) {
      squall__topk_slot_cut(sent + (size_t)q * sb, k, from, to - from, values, part);
      squall__topk_slot_put(part, to - from, got + (size_t)q * sb, k, from, values);
    }
    ck_assert_int_eq(squall__topk_finish_accept(&f, to), 0);
    /* the bound: every element below it has all its entries, and it is
     * as high as that allows (the lowest last entry, plus one) */
    size_t want = to == k ? n : SIZE_MAX;
    for (int q = 0; q < P && to < k; q++) {
      const uint32_t *idx = squall__slot_indices(sent + (size_t)q * sb);
      if (to > 0 && idx[to - 1] + (size_t)1 < want) want = idx[to - 1] + (size_t)1;
    }
    if (to == 0 && k > 0) want = 0;
    ck_assert_uint_eq(f.bound, want);
    squall__topk_finish_run(&f, tu_below(&r, 2) ? f.bound : tu_below(&r, (uint32_t)f.bound + 1));
    ck_assert(f.done <= f.bound);
  }
  squall__topk_finish_run(&f, n);
  ck_assert_uint_eq(f.done, n);
  /* the entries and fp16's scale (the padding between is no one's) */
  size_t used = (values == squallValueFp16 ? 6 : 8) * k;
  for (int q = 0; q < P; q++) {
    const unsigned char *a = got + (size_t)q * sb, *b = sent + (size_t)q * sb;
    ck_assert_msg(memcmp(a, b, used) == 0, "P=%d n=%zu rank %d: the rounds did not rebuild the entries", P, n, q);
    if (values == squallValueFp16)
      ck_assert_msg(memcmp(a + squall__slot_scale_offset(k), b + squall__slot_scale_offset(k), 4) == 0,
                    "P=%d n=%zu rank %d: the rounds lost the scale", P, n, q);
  }
  for (size_t i = 0; i < n; i++) {
    if (tu_bits(out1[i]) != tu_bits(out2[i]))
      ck_abort_msg("P=%d n=%zu rounds=%d elt %zu: dense %a, one shot %a", P, n, rounds, i, (double)out2[i],
                   (double)out1[i]);
    if (with_res && tu_bits(res1[i]) != tu_bits(res2[i]))
      ck_abort_msg("P=%d n=%zu rounds=%d elt %zu: res %a, one shot %a", P, n, rounds, i, (double)res2[i],
                   (double)res1[i]);
  }
  free(g);
  free(res);
  free(res1);
  free(res2);
  free(out1);
  free(out2);
  free(sent);
  free(got);
  free(part);
  free(ws);
}

START_TEST(test_finish_rounds) {
  for (int v = 0; v <= 1; v++) {
    squallValueType_t values = v ? squallValueFp16 : squallValueFp32;
    for (int w = 0; w <= 1; w++) {
      check_rounds(4, 70001, 0.01, values, w, 0, 7);
      check_rounds(3, 5003, 0.05, values, w, 1, 3);
      check_rounds(2, 257, 1.0, values, w, w, 4);    /* everything sent: every element in some slot */
      check_rounds(1, 4099, 0.01, values, w, 0, 41); /* one entry per round, near enough */
    }
  }
  /* streamed output (past the caches), tiles cut where the rounds end */
  check_rounds(4, ((size_t)1 << 22) + 5, 0.001, squallValueFp32, 0, 0, 16);
}
END_TEST

/* fp16: every round carries the slot's scale again; a round whose scale
 * differs from the first round's is corrupt. */
START_TEST(test_finish_rounds_scale_changes) {
  enum { P = 2,
         N = 20000 };
  size_t k = 200, sb = squall__topk_slot_bytes(k, squallValueFp16);
  static float g[N], dense[N];
  tu_rng r = {78};
  for (size_t i = 0; i < N; i++) g[i] = tu_float_unit(&r);
  unsigned char *slots = malloc(P * sb);
  void *ws = malloc(squall__topk_workspace_bytes(N));
  for (int q = 0; q < P; q++)
    ck_assert_int_eq(squall__topk_select(g, NULL, N, k, squallValueFp16, 0x1p-3f, slots + q * sb, ws), 0);
  squall_topk_finisher f;
  ck_assert_int_eq(squall__topk_finish_begin(&f, g, NULL, N, slots, P, 0, k, squallValueFp16, dense), 0);
  ck_assert_int_eq(squall__topk_finish_accept(&f, 100), 0);
  float other = 0x1p-4f; /* the second round brings another scale for rank 1 */
  memcpy(slots + sb + squall__slot_scale_offset(k), &other, 4);
  ck_assert_int_eq(squall__topk_finish_accept(&f, k), -1);
  free(slots);
  free(ws);
}
END_TEST

/* A round ending exactly on a tile's end (tiles of 256 elements with two
 * ranks): that tile is finished, and the entries of the next round, not
 * in place yet (stale: index 0, value 7), must not be read, nor skipped
 * once they come. */
START_TEST(test_finish_rounds_tile_edge) {
  enum { N = 4096,
         K = 8,
         P = 2 };
  static const uint32_t idx[P][K] = {{10, 100, 200, 255, 300, 400, 1000, 2000},
                                     {5, 260, 270, 280, 500, 600, 700, 4000}};
  size_t sb = squall__topk_slot_bytes(K, squallValueFp32);
  unsigned char sent[P * 64], got[P * 64], part[64];
  ck_assert_uint_le(sb, 64);
  for (int q = 0; q < P; q++)
    for (int j = 0; j < K; j++) {
      float v = (float)(q * 10 + j + 1);
      memcpy(sent + q * sb + 4 * j, &idx[q][j], 4);
      memcpy(sent + q * sb + 4 * K + 4 * j, &v, 4);
    }
  static float want[N], dense[N];
  ck_assert_int_eq(squall__topk_finish(NULL, NULL, N, sent, P, 0, K, squallValueFp32, want), 0);
  float stale = 7.0f;
  for (int q = 0; q < P; q++)
    for (int j = 0; j < K; j++) {
      memset(got + q * sb + 4 * j, 0, 4);
      memcpy(got + q * sb + 4 * K + 4 * j, &stale, 4);
    }
  squall_topk_finisher f;
  ck_assert_int_eq(squall__topk_finish_begin(&f, NULL, NULL, N, got, P, 0, K, squallValueFp32, dense), 0);
  for (int round = 0; round < 2; round++) {
    for (int q = 0; q < P; q++) {
      squall__topk_slot_cut(sent + q * sb, K, 4 * (size_t)round, 4, squallValueFp32, part);
      squall__topk_slot_put(part, 4, got + q * sb, K, 4 * (size_t)round, squallValueFp32);
    }
    ck_assert_int_eq(squall__topk_finish_accept(&f, 4 * (size_t)(round + 1)), 0);
    if (round == 0) ck_assert_uint_eq(f.bound, 256); /* rank 0's last entry so far is 255 */
    squall__topk_finish_run(&f, N);
    if (round == 0) ck_assert_uint_eq(f.done, 256);
  }
  ck_assert_msg(memcmp(dense, want, sizeof dense) == 0, "the rounds' sum differs from the one-shot finish");
}
END_TEST

/* A round whose entries do not continue its slot (an index at or below
 * the previous round's last, or past n): -1 and a zeroed result. */
START_TEST(test_finish_rounds_corrupt) {
  enum { P = 3,
         N = 20000 };
  for (int how = 0; how <= 1; how++) {
    size_t k = 200, sb = squall__topk_slot_bytes(k, squallValueFp32);
    static float g[N], dense[N];
    tu_rng r = {77};
    for (size_t i = 0; i < N; i++) g[i] = tu_float_unit(&r);
    unsigned char *slots = malloc(P * sb);
    void *ws = malloc(squall__topk_workspace_bytes(N));
    for (int q = 0; q < P; q++)
      ck_assert_int_eq(squall__topk_select(g, NULL, N, k, squallValueFp32, 1.0f, slots + q * sb, ws), 0);
    uint32_t bad = how ? N : squall__slot_indices(slots + sb)[99]; /* rank 1, first entry of round 2 */
    memcpy(slots + sb + 4 * 100, &bad, 4);
    for (size_t i = 0; i < N; i++) dense[i] = 5.0f;
    squall_topk_finisher f;
    ck_assert_int_eq(squall__topk_finish_begin(&f, g, NULL, N, slots, P, 0, k, squallValueFp32, dense), 0);
    ck_assert_int_eq(squall__topk_finish_accept(&f, 100), 0);
    squall__topk_finish_run(&f, N);
    ck_assert_int_eq(squall__topk_finish_accept(&f, k), -1);
    for (size_t i = 0; i < N; i++) ck_assert_uint_eq(tu_bits(dense[i]), 0);
    free(slots);
    free(ws);
  }
}
END_TEST

/* One TCase per feature, so that CK_RUN_CASE=<name> runs just that one.
 * Timeouts leave room for a loaded machine (Check's default is 4 s). */
static Suite *sparse_suite(void) {
  Suite *s = suite_create("sparse");
  TCase *tc = tcase_create("rank-order");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_rank_order_sum);
  tcase_add_test(tc, test_order_matters);
  suite_add_tcase(s, tc);
  tc = tcase_create("fp16-scale");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_fp16_per_rank_scale);
  suite_add_tcase(s, tc);
  tc = tcase_create("roundtrip");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_roundtrip_encoder);
  suite_add_tcase(s, tc);
  tc = tcase_create("corrupt");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_corrupt);
  suite_add_tcase(s, tc);
  tc = tcase_create("edges");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_k_zero);
  tcase_add_test(tc, test_nonfinite_values);
  suite_add_tcase(s, tc);
  tc = tcase_create("finish");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_finish_definition);
  tcase_add_test(tc, test_finish_corrupt);
  tcase_add_test(tc, test_select_paths);
  tcase_add_test(tc, test_finish_rounds);
  tcase_add_test(tc, test_finish_rounds_corrupt);
  tcase_add_test(tc, test_finish_rounds_tile_edge);
  tcase_add_test(tc, test_finish_rounds_scale_changes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(sparse_suite()); }

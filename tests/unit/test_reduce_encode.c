/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_reduce_encode.c - the owner's step of the 16-bit two-phase
 * all-reduce in one pass (squall__half_reduce_encode) gives the bits of the
 * two passes it replaces: the rank-ordered reduce into a buffer, then the
 * encode of that buffer with the residual. Codes and residuals are
 * compared bit for bit, with and without a residual, with the vector loops
 * on and off, for lengths around the in-cache tile (SQ_REDUCE_TILE), scales
 * that take the vector and the scalar paths, and inputs whose sums meet
 * infinities and NaN.
 */
#include <float.h>
#include <math.h>

#include "check_util.h"
#include "codecs/codec.h"

enum { NMAX = 20000,
       PMAX = 5 };

/* Values over many binades with zeros, subnormals, values near FLT_MAX
 * and, where `nonfinite`, a few NaN and infinities: what ranks send. */
static float gen_value(tu_rng *r, int nonfinite) {
  uint32_t u = tu_u32(r) % 512;
  if (nonfinite && u == 0) return NAN;
  if (nonfinite && u == 1) return tu_next(r) & 1 ? INFINITY : -INFINITY;
  if (u < 8) return tu_float(tu_u32(r) & 0x807fffffu); /* subnormal or zero */
  if (u < 10) return (tu_next(r) & 1 ? -1.0f : 1.0f) * (FLT_MAX - ldexpf((float)tu_below(r, 64), 100));
  return tu_float_exp(r, -30, 30);
}

/* A residual as the encoders leave it: small beside the values, often 0. */
static float gen_residual(tu_rng *r) {
  uint32_t u = tu_u32(r) % 4;
  return u == 0 ? 0.0f : u == 1 ? -0.0f
                                : ldexpf(tu_float_unit(r), -12);
}

static uint32_t disabled_sets[] = {0, SQ_CPU_AVX | SQ_CPU_AVX2 | SQ_CPU_F16C};

START_TEST(test_half_matches_two_passes) {
  static const int ranks[] = {1, 2, 5};
  static const size_t lens[] = {1, 17, SQ_REDUCE_TILE - 1, SQ_REDUCE_TILE, SQ_REDUCE_TILE + 1,
                                3 * SQ_REDUCE_TILE + 31, 12345};
  static const float scales[] = {1.0f, 0x1p-20f, 0x1p10f, 3.0f}; /* 3: not a power of two, the scalar path */
  static uint16_t blocks[PMAX * (NMAX + 3)], c1[NMAX], c2[NMAX];
  static float sum[NMAX], res0[NMAX], res1[NMAX], res2[NMAX];
  tu_rng r = {91};
  for (int kind = 0; kind < 2; kind++)
    for (size_t di = 0; di < 2; di++)
      for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
          for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
            for (int with_res = 0; with_res < 2; with_res++) {
              int p = ranks[ri];
              size_t n = lens[li], be = n + 3; /* blocks further apart than n */
              float s = scales[si];
              /* each rank's codes: its values encoded at s (some overflow
               * the format: the sums meet infinities), and 1 in 64 runs of
               * raw random codes (NaN payloads among them) */
              for (int q = 0; q < p; q++) {
                for (size_t i = 0; i < n; i++) sum[i] = gen_value(&r, 1);
                squall__half_encode((sq_half_kind)kind, sum, NULL, blocks + (size_t)q * be, n, s);
                if (tu_below(&r, 64) == 0)
                  for (size_t i = 0; i < n; i++) blocks[(size_t)q * be + i] = (uint16_t)tu_u32(&r);
              }
              for (size_t i = 0; i < n; i++) res0[i] = gen_residual(&r);
              memcpy(res1, res0, n * 4);
              memcpy(res2, res0, n * 4);
              memset(c1, 0xa5, n * 2); /* poison: an element left unwritten shows */
              memset(c2, 0x5a, n * 2);
              squall__cpu_x86_disable((int)disabled_sets[di]);
              squall__half_reduce((sq_half_kind)kind, blocks, p, be, sum, n, s);
              squall__half_encode((sq_half_kind)kind, sum, with_res ? res1 : NULL, c1, n, s);
              squall__half_reduce_encode((sq_half_kind)kind, blocks, p, be, with_res ? res2 : NULL, c2, n, s);
              squall__cpu_x86_disable(0);
              for (size_t i = 0; i < n; i++) {
                TU_CHECK(c1[i] == c2[i], "kind %d simd-off %zu p %d n %zu scale %a res %d elem %zu: code %04x, two passes %04x",
                         kind, di, p, n, (double)s, with_res, i, c2[i], c1[i]);
                TU_CHECK(tu_bits(res1[i]) == tu_bits(res2[i]),
                         "kind %d simd-off %zu p %d n %zu scale %a elem %zu: residual %a, two passes %a", kind, di, p,
                         n, (double)s, i, (double)res2[i], (double)res1[i]);
              }
            }
}
END_TEST

static Suite *reduce_encode_suite(void) {
  Suite *s = suite_create("reduce_encode");
  TCase *tc = tcase_create("owner");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_half_matches_two_passes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(reduce_encode_suite()); }

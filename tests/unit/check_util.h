/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * check_util.h - helpers shared by the Check unit tests: a seeded random
 * generator (runs are reproducible), float bit access, a cheap assertion for
 * hot loops, and the main() body that runs a suite.
 */
#ifndef SQUALL_CHECK_UTIL_H
#define SQUALL_CHECK_UTIL_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ck_assert* records a mark point on every success, which in fork mode
 * costs a write each time; loops over millions of elements test with this
 * instead and only report on failure. */
#define TU_CHECK(cond, ...)                 \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

/* splitmix64: small, fast, and good enough to drive test inputs. */
typedef struct {
  uint64_t s;
} tu_rng;

static inline uint64_t tu_next(tu_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline uint32_t tu_u32(tu_rng *r) { return (uint32_t)(tu_next(r) >> 32); }

/* Uniform in [0, bound), bound > 0 (the modulo bias is irrelevant here). */
static inline uint64_t tu_below(tu_rng *r, uint64_t bound) { return tu_next(r) % bound; }

static inline uint32_t tu_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float tu_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline int tu_isnan(float f) { return (tu_bits(f) & 0x7fffffffu) > 0x7f800000u; }
static inline int tu_isfinite(float f) { return (tu_bits(f) & 0x7f800000u) != 0x7f800000u; }

/* The same number: identical bits, or two zeros (0 + -0 is +0 in IEEE
 * arithmetic, so a sum cannot reproduce the sign of a zero). */
static inline int tu_same_value(float x, float y) {
  return tu_bits(x) == tu_bits(y) || ((tu_bits(x) | tu_bits(y)) & 0x7fffffffu) == 0;
}

/* A random normal float with exponent in [emin, emax] (unbiased), random
 * sign and mantissa: spreads inputs over many binades. */
static inline float tu_float_exp(tu_rng *r, int emin, int emax) {
  uint32_t e = (uint32_t)(emin + (int)tu_below(r, (uint64_t)(emax - emin + 1)) + 127);
  uint32_t sign = (uint32_t)(tu_next(r) & 1u) << 31;
  return tu_float(sign | (e << 23) | (tu_u32(r) & 0x7fffffu));
}

/* A random float in [-1, 1) with 24 random bits (dyadic, exact). */
static inline float tu_float_unit(tu_rng *r) {
  return (float)((int32_t)(tu_u32(r) >> 8) - (1 << 23)) * (1.0f / (1 << 23));
}

/* Runs the suite in Check's default (fork) mode; the exit status says
 * whether everything passed, as automake's test driver expects.
 * CK_RUN_CASE=<name> runs one TCase; a name that matches none would run
 * nothing and pass, so that is a failure here. */
static inline int tu_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY=verbose lists every test */
  int failed = srunner_ntests_failed(sr), ran = srunner_ntests_run(sr);
  srunner_free(sr);
  if (ran == 0) {
    const char *c = getenv("CK_RUN_CASE");
    fprintf(stderr, "no test ran: CK_RUN_CASE='%s' names no TCase of this program (CK_VERBOSITY=verbose lists them)\n",
            c ? c : "");
    return EXIT_FAILURE;
  }
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif

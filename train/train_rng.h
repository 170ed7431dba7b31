/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_rng.h - the training program's random numbers: splitmix64, seeded
 * explicitly, so that the data set and the initial weights are the same bits
 * on every rank and every run (libc's rand() is neither portable nor
 * per-stream).
 */
#ifndef SQUALL_TRAIN_RNG_H
#define SQUALL_TRAIN_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
  uint64_t s;
} train_rng;

/* A stream per (seed, purpose): streams with different purposes never
 * overlap in practice. */
static inline train_rng train_rng_make(uint64_t seed, uint64_t purpose) {
  train_rng r = {seed * 0x9e3779b97f4a7c15ull ^ (purpose + 1) * 0xd1b54a32d192ed03ull};
  return r;
}

static inline uint64_t train_rng_next(train_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double train_rng_uniform(train_rng *r) {
  return (double)(train_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; the bias is
 * below 2^-40 for the sizes used here). */
static inline uint32_t train_rng_below(train_rng *r, uint32_t n) {
  return (uint32_t)(((train_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* Standard normal (Box-Muller, one value per call: simpler than caching the
 * twin, and the cost is irrelevant next to training). */
static inline double train_rng_normal(train_rng *r) {
  double u = 1.0 - train_rng_uniform(r); /* (0, 1]: log(u) is finite */
  double v = train_rng_uniform(r);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif

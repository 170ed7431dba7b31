/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_data.c - the gradients the benchmark feeds in, and the exact sum
 * they should produce.
 *
 * Every value is a pure function of (seed, rank, iteration, index), so any
 * rank can recompute any other rank's input: the exact sum needs no extra
 * communication and no stored copies. The values look a little like
 * gradients: each coordinate has a fixed magnitude (2^0 .. 2^-7, the same
 * on every rank and every step, so that some coordinates stay large as in
 * training), times a component shared by all ranks (the "true" gradient of
 * this step) plus per-rank noise. Both components change every iteration,
 * so error feedback sees new data each call, not one gradient replayed.
 */
#include <math.h>
#include <string.h>

#include "bench.h"

/* splitmix64's finaliser: a bijection that spreads every input bit. */
static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/* Roughly N(0, 1): the sum of four 16-bit uniforms (Irwin-Hall), scaled.
 * Integer work only, so the same bits come out wherever it runs. */
static inline float normalish(uint64_t h) {
  uint32_t s = (uint32_t)(h & 0xffff) + (uint32_t)((h >> 16) & 0xffff) +
               (uint32_t)((h >> 32) & 0xffff) + (uint32_t)(h >> 48);
  /* mean 4 * 65535/2, standard deviation 65536 * sqrt(4/12) */
  return ((float)s - 131070.0f) * (1.0f / 37837.23f);
}

/* 2^-e with e in 0..7, a fixed function of the index: the top 3 bits of
 * a multiplicative (Fibonacci) hash, one multiply instead of a mix64. */
static inline float magnitude(uint64_t i) {
  uint32_t e = (uint32_t)((uint32_t)i * 0x9e3779b1u) >> 29;
  uint32_t bits = (127 - e) << 23;
  float m;
  memcpy(&m, &bits, sizeof m);
  return m;
}

static const char *const dist_names[BENCH_NUM_DISTS] = {
    "uniform", "normal", "lognormal", "constant", "tiny", "sparse", "nonfinite"};

const char *bench_dist_name(bench_dist d) { return dist_names[d]; }

int bench_dist_parse(const char *name, bench_dist *d) {
  for (int i = 0; i < BENCH_NUM_DISTS; i++)
    if (!strcmp(name, dist_names[i])) {
      *d = (bench_dist)i;
      return 0;
    }
  return -1;
}

static inline float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Heavy-tailed magnitude with a random sign: 2^(4z) for z ~ N(0, 1) (the
 * exponent rounded, clamped to +-60), times a mantissa in [1, 2). Integer
 * work only, like the rest. */
static inline float lognormalish(uint64_t h) {
  float z = normalish(h);
  int e = (int)(z * 4.0f + (z < 0 ? -0.5f : 0.5f));
  if (e > 60) e = 60;
  if (e < -60) e = -60;
  uint32_t h2 = (uint32_t)(mix64(h) >> 32);
  return from_bits((h2 & 0x80000000u) | ((uint32_t)(127 + e) << 23) | (h2 & 0x7fffffu));
}

void bench_fill(bench_dist dist, uint64_t seed, int rank, int iter, size_t off, size_t n, float *out) {
  uint64_t kshared = mix64(seed + mix64(0x5348415245440000ull + (uint64_t)(uint32_t)iter));
  uint64_t krank = mix64(kshared ^ mix64(((uint64_t)(uint32_t)rank << 32) | 0x52414e4bu));
  switch (dist) {
  case BENCH_DIST_UNIFORM:
    for (size_t j = 0; j < n; j++) {
      uint64_t i = off + j;
      float m = magnitude(i + seed);
      out[j] = m * (0.5f * normalish(mix64(kshared + i)) + normalish(mix64(krank + i)));
    }
    break;
  case BENCH_DIST_NORMAL: /* the same components without the fixed magnitudes */
    for (size_t j = 0; j < n; j++) {
      uint64_t i = off + j;
      out[j] = 0.5f * normalish(mix64(kshared + i)) + normalish(mix64(krank + i));
    }
    break;
  case BENCH_DIST_LOGNORMAL:
    for (size_t j = 0; j < n; j++) {
      uint64_t i = off + j;
      out[j] = 0.5f * lognormalish(mix64(kshared + i)) + lognormalish(mix64(krank + i));
    }
    break;
  case BENCH_DIST_CONSTANT: /* every entry ties: top-k's worst case for thresholds */
    for (size_t j = 0; j < n; j++) out[j] = 0.5f;
    break;
  case BENCH_DIST_TINY: /* around 1e-38: the float subnormal boundary (2^-126 = 1.18e-38) */
    for (size_t j = 0; j < n; j++) {
      uint64_t i = off + j;
      out[j] = 1e-38f * (2.0f + 0.5f * normalish(mix64(kshared + i)) + normalish(mix64(krank + i)));
    }
    break;
  case BENCH_DIST_SPARSE: /* 99% exact zeros (per rank), the rest as uniform */
    for (size_t j = 0; j < n; j++) {
      uint64_t i = off + j, h = mix64(krank + i);
      out[j] = h % 100 == 0 ? magnitude(i + seed) * (0.5f * normalish(mix64(kshared + i)) + normalish(mix64(h)))
                            : 0.0f;
    }
    break;
  case BENCH_DIST_NONFINITE: /* uniform, with one entry in 4096 NaN, +Inf or -Inf */
    for (size_t j = 0; j < n; j++) {
      uint64_t i = off + j, h = mix64(krank + i);
      out[j] = magnitude(i + seed) * (0.5f * normalish(mix64(kshared + i)) + normalish(h));
      uint64_t pick = mix64(h ^ 0x4e414e5fu);
      if ((pick & 4095) == 0) {
        uint32_t which = (uint32_t)(pick >> 40) % 3;
        out[j] = which == 0 ? from_bits(0x7fc00000u) : which == 1 ? from_bits(0x7f800000u)
                                                                  : from_bits(0xff800000u);
      }
    }
    break;
  default:
    memset(out, 0, n * sizeof *out);
    break;
  }
}

#define CHUNK 2048

void bench_error_sums(bench_dist dist, uint64_t seed, bench_dtype t, int nranks, int iter, int avg,
                      const float *out, size_t off, size_t n, double *err2, double *ref2) {
  float g[CHUNK];
  double exact[CHUNK];
  double e2 = 0.0, r2 = 0.0;
  for (size_t c = 0; c < n; c += CHUNK) {
    size_t m = n - c < CHUNK ? n - c : CHUNK;
    memset(exact, 0, m * sizeof *exact);
    for (int r = 0; r < nranks; r++) {
      bench_fill(dist, seed, r, iter, off + c, m, g); /* the very values rank r sent, in its type */
      for (size_t j = 0; j < m; j++) exact[j] += (double)bench_round_to(t, g[j]);
    }
    for (size_t j = 0; j < m; j++) {
      double x = avg ? exact[j] / nranks : exact[j];
      /* A non-finite sum must come out non-finite; it takes no part in
       * the norms (nonfinite data). */
      if (!isfinite(x)) {
        if (isfinite(out[c + j])) e2 = INFINITY;
        continue;
      }
      double d = (double)out[c + j] - x;
      e2 += d * d;
      r2 += x * x;
    }
  }
  *err2 = e2;
  *ref2 = r2;
}

uint64_t bench_hash(const void *p, size_t bytes) {
  const unsigned char *b = p;
  uint64_t h = 0x9e3779b97f4a7c15ull ^ bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = mix64(h ^ w) + i;
  }
  for (; i < bytes; i++) h = mix64(h ^ b[i]);
  return h;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hierarchy_model.h - an independent model of what squall's top-k must
 * return, flat and two-level, for the hierarchy tests (MPI and NCCL), from
 * inputs any rank can regenerate:
 *   flat:      every rank's top k over n, summed in rank order;
 *   two-level: shard i (s = ceil(n/L) entries, zero-padded) of each node's
 *              exact sum; each node's top k of it, summed in node order.
 * Top k: the k entries of largest magnitude, ties to the lower index, added
 * in ascending index order as the decoder does. Inputs are dyadic (integers
 * in [-64, 64] times 1/8), so every node sum is exact in any order.
 */
#ifndef SQUALL_TESTS_HIERARCHY_MODEL_H
#define SQUALL_TESTS_HIERARCHY_MODEL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hm_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static float hm_gen(uint64_t seed, int r, size_t i) {
  return (float)((int)(hm_mix(seed * 1000003u + (uint64_t)r * 7919u + i) % 129) - 64) / 8.0f;
}

static void hm_fill(float *x, size_t n, uint64_t seed, int r) {
  for (size_t i = 0; i < n; i++) x[i] = hm_gen(seed, r, i);
}

typedef struct {
  uint32_t key, idx;
} hm_ranked;

static int hm_by_key_desc(const void *a, const void *b) {
  const hm_ranked *x = a, *y = b;
  if (x->key != y->key) return x->key > y->key ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static void hm_add_topk(const float *v, size_t m, size_t k, float *dense) {
  hm_ranked *rk = malloc(m * sizeof *rk + 1);
  for (size_t i = 0; i < m; i++) {
    uint32_t bits;
    memcpy(&bits, &v[i], 4);
    rk[i].key = bits & 0x7fffffffu;
    rk[i].idx = (uint32_t)i;
  }
  qsort(rk, m, sizeof *rk, hm_by_key_desc);
  char *take = calloc(m + 1, 1);
  for (size_t j = 0; j < k && j < m; j++) take[rk[j].idx] = 1;
  for (size_t i = 0; i < m; i++)
    if (take[i]) dense[i] += v[i];
  free(take);
  free(rk);
}

/* topk_k: the codec's k for a count (squall__topk_k). */
static void hm_model_flat(size_t (*topk_k)(size_t, double), int nranks, uint64_t seed, size_t n, double ratio,
                          float *out) {
  float *g = malloc(n * 4 + 4);
  memset(out, 0, n * 4);
  for (int r = 0; r < nranks; r++) {
    hm_fill(g, n, seed, r);
    hm_add_topk(g, n, topk_k(n, ratio), out);
  }
  free(g);
}

static void hm_model_two_level(size_t (*topk_k)(size_t, double), int nranks, int L, uint64_t seed, size_t n,
                               double ratio, float *out) {
  int nodes = nranks / L;
  size_t s = (n + (size_t)L - 1) / (size_t)L, k = topk_k(s, ratio);
  float *sum = malloc(s * 4), *acc = malloc(s * 4);
  for (int i = 0; i < L; i++) {
    memset(acc, 0, s * 4);
    for (int node = 0; node < nodes; node++) {
      for (size_t j = 0; j < s; j++) {
        size_t e = (size_t)i * s + j;
        sum[j] = 0;
        for (int l = 0; l < L && e < n; l++) sum[j] += hm_gen(seed, node * L + l, e);
      }
      hm_add_topk(sum, s, k, acc);
    }
    for (size_t j = 0; j < s && (size_t)i * s + j < n; j++) out[(size_t)i * s + j] = acc[j];
  }
  free(sum);
  free(acc);
}

#endif

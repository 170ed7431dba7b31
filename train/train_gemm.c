/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_gemm.c - a small register-blocked matrix product, fast enough that a
 * 1M-parameter MLP trains in seconds on two cores without a BLAS.
 *
 * NR-column panels of B are packed contiguously, a group at a time, and an
 * MR x NR tile of C lives in vector registers while k runs. GCC/Clang vector extensions keep this portable:
 * the 8-float type becomes one AVX register or two SSE2 registers, whatever
 * the target flags allow, with no intrinsics and no -march assumptions.
 */
#include "train_gemm.h"

#include <stdlib.h>
#include <string.h>

typedef float v8f __attribute__((vector_size(32)));
/* The same vector at any float's address (unaligned, may alias float). */
typedef float v8f_u __attribute__((vector_size(32), aligned(4), may_alias));

/* On x86-64, a second copy of the tiles for AVX2+FMA machines, picked at
 * load time (ifunc): 2.6x faster on 32x1024x1024 and 3.9x on 1024x1024x32
 * here (17 -> 47 and 18 -> 72 GFLOPS, one core), while the binary still runs
 * on any x86-64. FMA rounds once where mul+add rounds twice, so the two
 * copies differ in the last bits; all ranks of a run share one machine type. */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TRAIN_CLONES __attribute__((target_clones("fma", "default")))
#endif
#endif
#ifndef TRAIN_CLONES
#define TRAIN_CLONES
#endif

#define MR 4 /* rows of C per tile: 4 x 2 SSE accumulators + B + broadcast fit 16 registers */
#define NR 8 /* columns of C per tile: one v8f */

#define LOAD8(p) ((v8f)(*(const v8f_u *)(p)))
#define STORE8(p, v) (*(v8f_u *)(p) = (v))

/* C[MR rows x NR] (+)= A[MR x k] * panel[k x NR]. */
TRAIN_CLONES static void tile_full(int k, const float *a, int lda, const float *panel, float *c, int ldc,
                                   int accumulate) {
  v8f c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * (size_t)lda, *a3 = a + 3 * (size_t)lda;
  for (int p = 0; p < k; p++) {
    v8f b = LOAD8(panel + (size_t)p * NR);
    c0 += a0[p] * b;
    c1 += a1[p] * b;
    c2 += a2[p] * b;
    c3 += a3[p] * b;
  }
  v8f acc[MR] = {c0, c1, c2, c3};
  for (int r = 0; r < MR; r++) {
    float *row = c + (size_t)r * ldc;
    STORE8(row, accumulate ? LOAD8(row) + acc[r] : acc[r]);
  }
}

/* The edges: up to MR rows and up to NR valid columns of the panel. */
TRAIN_CLONES static void tile_edge(int rows, int cols, int k, const float *a, int lda, const float *panel,
                                   float *c, int ldc, int accumulate) {
  for (int r = 0; r < rows; r++) {
    const float *ar = a + (size_t)r * lda;
    v8f acc = {0};
    for (int p = 0; p < k; p++) acc += ar[p] * LOAD8(panel + (size_t)p * NR);
    float out[NR];
    STORE8(out, acc);
    float *row = c + (size_t)r * ldc;
    for (int j = 0; j < cols; j++) row[j] = accumulate ? row[j] + out[j] : out[j];
  }
}

/* Packs columns [j0, j0 + NR) of B (k rows) into panel, zero-padded. */
static void pack_panel(int k, int cols, const float *b, int ldb, float *panel) {
  for (int p = 0; p < k; p++) {
    const float *src = b + (size_t)p * ldb;
    float *dst = panel + (size_t)p * NR;
    int j = 0;
    for (; j < cols; j++) dst[j] = src[j];
    for (; j < NR; j++) dst[j] = 0.0f; /* padding never reaches C */
  }
}

/* Packed panels per group: a group (~256 KiB) stays in L2 while every row
 * tile of A passes over it, and each row tile (MR rows of A, in L1) is used
 * against every panel of the group. One loop order then serves both shapes
 * of the training step: a short A against a wide B (forward) and a tall A
 * against a narrow B (the backward products). */
#define GROUP_BYTES (256u << 10)

int train_gemm(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
               int ldc, int accumulate) {
  if (m <= 0 || n <= 0) return 0;
  if (k <= 0) {
    if (!accumulate)
      for (int i = 0; i < m; i++) memset(c + (size_t)i * ldc, 0, (size_t)n * sizeof *c);
    return 0;
  }
  size_t panel_floats = (size_t)k * NR;
  int npanels = (n + NR - 1) / NR;
  int group = (int)(GROUP_BYTES / (panel_floats * sizeof(float)));
  if (group < 1) group = 1;
  if (group > npanels) group = npanels;
  float *packed = malloc((size_t)group * panel_floats * sizeof *packed);
  if (packed == NULL) return -1;
  for (int g0 = 0; g0 < npanels; g0 += group) {
    int g1 = g0 + group < npanels ? g0 + group : npanels;
    for (int q = g0; q < g1; q++) {
      int j0 = q * NR, cols = n - j0 < NR ? n - j0 : NR;
      pack_panel(k, cols, b + j0, ldb, packed + (size_t)(q - g0) * panel_floats);
    }
    for (int i0 = 0; i0 < m; i0 += MR) {
      int rows = m - i0 < MR ? m - i0 : MR;
      const float *ai = a + (size_t)i0 * lda;
      for (int q = g0; q < g1; q++) {
        int j0 = q * NR, cols = n - j0 < NR ? n - j0 : NR;
        const float *panel = packed + (size_t)(q - g0) * panel_floats;
        float *ci = c + (size_t)i0 * ldc + j0;
        if (rows == MR && cols == NR) tile_full(k, ai, lda, panel, ci, ldc, accumulate);
        else tile_edge(rows, cols, k, ai, lda, panel, ci, ldc, accumulate);
      }
    }
  }
  free(packed);
  return 0;
}

void train_transpose(int rows, int cols, const float *src, float *dst) {
  enum { T = 32 }; /* blocks keep both sides' cache lines live */
  for (int i0 = 0; i0 < rows; i0 += T)
    for (int j0 = 0; j0 < cols; j0 += T) {
      int i1 = i0 + T < rows ? i0 + T : rows, j1 = j0 + T < cols ? j0 + T : cols;
      for (int i = i0; i < i1; i++)
        for (int j = j0; j < j1; j++) dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
    }
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_gemm.h - the one matrix product the training program needs, on
 * row-major float matrices. Every element of C is summed over k in
 * ascending order, so the result does not depend on the tiling.
 */
#ifndef SQUALL_TRAIN_GEMM_H
#define SQUALL_TRAIN_GEMM_H

/* C[m x n] = (accumulate ? C : 0) + A[m x k] * B[k x n]. lda, ldb, ldc are
 * row strides in elements. Returns 0, or -1 when out of memory for the
 * packed panel (C is then unchanged). */
int train_gemm(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
               int ldc, int accumulate);

/* dst[cols x rows] = transpose of src[rows x cols] (both dense). */
void train_transpose(int rows, int cols, const float *src, float *dst);

#endif

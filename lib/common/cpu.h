/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * cpu.h - the x86 features squall's SIMD loops use (codecs, and the MPI
 * transport's 16-bit sum in halfmath.c), from cpuid and xgetbv; 0
 * elsewhere. Tests deny features to run the scalar paths a CPU without
 * them takes.
 */
#ifndef SQUALL_COMMON_CPU_H
#define SQUALL_COMMON_CPU_H

#ifdef __cplusplus
extern "C" {
#endif

enum { SQ_CPU_AVX = 1,
       SQ_CPU_F16C = 2,
       SQ_CPU_AVX2 = 4 };

/* 1 when the CPU (and the OS, for the YMM state) has every feature of the
 * mask and none of them is denied. */
int squall__cpu_x86(int feature_mask);

/* Makes squall__cpu_x86 deny these features from now on (0: none), so that
 * tests can run the scalar paths a CPU without them takes. Not for use
 * while other threads encode. */
void squall__cpu_x86_disable(int feature_mask);

#ifdef __cplusplus
}
#endif
#endif /* SQUALL_COMMON_CPU_H */

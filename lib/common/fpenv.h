/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fpenv.h - the floating-point environment squall's arithmetic assumes, for
 * the duration of a call: round to nearest, no flush-to-zero, no
 * denormals-are-zero, no exception traps. An application may set any of
 * them (fesetround, -ffast-math, torch.set_flush_denormal, feenableexcept),
 * and on one rank only: where every rank forms the same value (the top-k
 * sum, a decoded result, an average, the 16-bit scale's limit), other
 * settings would give other bits, and the codecs would no longer match
 * their definitions and CUDA twins. squall__fp_default_begin returns what
 * squall__fp_default_end restores (the caller's settings and its sticky
 * flags).
 *
 * Header only, libc and compiler intrinsics: the codecs' standalone GPU
 * self-test build includes it too. Not for device code.
 */
#ifndef SQUALL_FPENV_H
#define SQUALL_FPENV_H

#if defined(__CUDACC__)
/* device code has its own, fixed environment */
#elif defined(__x86_64__)
#include <xmmintrin.h>
/* MXCSR: flush-to-zero (bit 15), rounding control (13-14),
 * denormals-are-zero (6); the exception masks (7-12) */
#define SQ_MXCSR_FTZ_RC_DAZ 0xe040u
#define SQ_MXCSR_MASK_ALL 0x1f80u
static inline unsigned squall__fp_default_begin(void) {
  unsigned old = _mm_getcsr();
  _mm_setcsr((old & ~SQ_MXCSR_FTZ_RC_DAZ) | SQ_MXCSR_MASK_ALL);
  return old;
}
static inline void squall__fp_default_end(unsigned old) { _mm_setcsr(old); }
#else
#include <fenv.h>
static inline unsigned squall__fp_default_begin(void) {
  int old = fegetround();
  if (old != FE_TONEAREST) fesetround(FE_TONEAREST);
  return (unsigned)old;
}
static inline void squall__fp_default_end(unsigned old) {
  if ((int)old != FE_TONEAREST) fesetround((int)old);
}
#endif

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * cpu.c - x86 features from cpuid and xgetbv (cpu.h), not from
 * __builtin_cpu_supports, whose "f16c" name clang 14 does not know.
 *
 * libc and compiler intrinsics only: tools/fuzz.sh compiles the codecs
 * with this file alone, without config.h or the logger.
 */
#include "common/cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#include <cpuid.h>
#include <stddef.h>

static int cpu_disabled; /* squall__cpu_x86_disable: tests run the scalar paths */

void squall__cpu_x86_disable(int feature_mask) { cpu_disabled = feature_mask; }

int squall__cpu_x86(int feature) {
  if (feature & cpu_disabled) return 0;
  static int cached = -1; /* bit set of features; a race writes the same value */
  if (cached < 0) {
    int set = 0;
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d) && ((c >> 27) & 1) /* OSXSAVE */ && ((c >> 28) & 1) /* AVX */) {
      unsigned lo, hi;
      __asm__ volatile("xgetbv"
                       : "=a"(lo), "=d"(hi)
                       : "c"(0));
      if ((lo & 6) == 6) { /* the OS saves the YMM state */
        set |= SQ_CPU_AVX;
        if ((c >> 29) & 1) set |= SQ_CPU_F16C;
        if (__get_cpuid_max(0, NULL) >= 7) {
          __cpuid_count(7, 0, a, b, c, d);
          if ((b >> 5) & 1) set |= SQ_CPU_AVX2;
        }
      }
    }
    cached = set;
  }
  return (cached & feature) == feature;
}
#else
int squall__cpu_x86(int feature_mask) {
  (void)feature_mask;
  return 0;
}
void squall__cpu_x86_disable(int feature_mask) { (void)feature_mask; }
#endif

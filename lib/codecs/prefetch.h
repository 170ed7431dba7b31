/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * prefetch.h - software prefetches for the host codecs' streaming loops:
 * the hardware prefetcher of the 2-core EPYC KVM machines falls behind two
 * read streams (codec_half.c, codec_quant_avx2.c, codec_topk.c).
 */
#ifndef SQUALL_CODECS_PREFETCH_H
#define SQUALL_CODECS_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

/* The cache line `bytes` past p, toward L1. The address is formed as an
 * integer: it may lie past the end of p's buffer, where a prefetch never
 * faults but no pointer may point. always_inline: GCC finds a function
 * that only prefetches free of side effects and deletes the calls it has
 * not inlined by then (it once left codec_half.c's avx2 loops with none;
 * tests/tree/prefetch-kept.sh checks every codec's object). */
__attribute__((always_inline)) static inline void sq_prefetch_line(const void *p, size_t bytes) {
  __builtin_prefetch((const void *)((uintptr_t)p + bytes), 0, 3);
}

/* The two lines (128 bytes) `bytes` past p: what a loop over 32 floats a
 * step reads of one stream. */
__attribute__((always_inline)) static inline void sq_prefetch_lines2(const void *p, size_t bytes) {
  sq_prefetch_line(p, bytes);
  sq_prefetch_line(p, bytes + 64);
}

#endif

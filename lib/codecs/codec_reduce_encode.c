/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * codec_reduce_encode.c - the owner's step of the 16-bit two-phase
 * all-reduce in one pass: the rank-ordered sum of its shard's blocks,
 * re-encoded at once with its residual, tile by tile through a buffer that
 * stays in L1.
 *
 * Why: done as two passes (squall__half_reduce into the call's output,
 * then squall__half_encode from it), the sums go out to memory and come
 * back, and the output lines are read for ownership and written back, only
 * to be overwritten when the gathered codes are decoded. Here they never
 * leave the core. The function is the two-pass composition applied to
 * tiles: every element's arithmetic is the same, so the bits are too. (The
 * quantised codecs' encoder is compute-bound; fusing it measured no
 * faster, so they keep the two passes.)
 */
#include "common/internal.h"

#include "codecs/codec.h"

/* Whole vectors per tile: every tile but the last is split between the
 * vector loops and the scalar tail as a whole-array call would split it. */
_Static_assert(SQ_REDUCE_TILE % 32 == 0, "a tile must be whole vectors");

void squall__half_reduce_encode(sq_half_kind kind, const uint16_t *blocks, int nblocks, size_t block_elems,
                                float *res, uint16_t *codes, size_t n, float scale) {
  float tile[SQ_REDUCE_TILE];
  for (size_t i = 0; i < n; i += SQ_REDUCE_TILE) {
    size_t m = n - i < SQ_REDUCE_TILE ? n - i : SQ_REDUCE_TILE;
    squall__half_reduce(kind, blocks + i, nblocks, block_elems, tile, m, scale);
    squall__half_encode(kind, tile, res ? res + i : NULL, codes + i, m, scale);
  }
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * twophase.h - the two-phase compressed all-reduce: reduce-scatter by
 * exchange, then all-gather, with the sum taken in fp32.
 *
 *   1. Every rank encodes a = g + e (e: its residual, e' = a - decode) and
 *      sends shard r of the codes to rank r (all-to-all).
 *   2. Rank r decodes the P copies of its shard and sums them in fp32, in
 *      rank order: S = sum_q decode(code_q).
 *   3. Rank r encodes b = S + e[shard r] (its own residual, which becomes
 *      b - decode: the error of this second encode stays on the owner and
 *      is sent again by the next call's first encode) and all-gathers it.
 *   4. Every rank decodes all shards: the same bits on every rank.
 * Conservation: out + sum of all residuals after the call equals sum of g
 * + sum of residuals before it, exactly wherever fp32 sums are exact.
 * Wire bytes per rank: 2 (P-1) blocks of ceil(n/P) codes, 16-bit shards
 * rounded up to whole lines of 64.
 * One rank (SQUALL_MIN_RANKS=1) on host memory runs steps 1 and 4 only,
 * chunk by chunk: its sum is its own contribution, whose re-encode with e'
 * gives the same codes and leaves e' as it is.
 *
 * Pipelining (host transports with non-blocking collectives): every shard
 * is cut into chunks of the same number of elements, and chunk j of the
 * call is chunk j of every shard. Each element keeps its owner, its bucket
 * and its codes, so the result and the residuals are bit for bit those of
 * one chunk; only the order of the work changes. While chunk j is being
 * exchanged, chunk j+1 is encoded and chunk j-1 decoded, with three sets
 * of buffers in turn.
 *
 * Codecs: the quantised ones (per-bucket scales; shards are whole
 * buckets), and fp16/bf16 under one global power-of-two scale chosen for
 * |sum| <= max/2 (the sum is re-encoded in 16 bits).
 *
 * The global scale needs every rank's absolute maximum before the first
 * code leaves, which costs a pass over g and the residual of its own.
 * Where the kernels can (half_encode_guess) and the tensor's previous
 * scale is known, the whole call is encoded at that scale in the pass
 * that finds the maximum, and each chunk is re-encoded (half_rescale), in
 * its turn in the pipeline, only where the agreed scale turns out
 * different (or an element overflowed at the guess): the same codes,
 * except where a first encode flushed a residual below 2^-126 (codec.h),
 * and one pass fewer wherever the power-of-two scale holds from call to
 * call (it changes when the maximum crosses a power of two).
 */
#ifndef SQUALL_TWOPHASE_H
#define SQUALL_TWOPHASE_H

#include "kernels/kernels.h"
#include "squall.h"
#include "transports/transport.h"

typedef struct {
  int quant; /* 1: quantised buckets (qkind); 0: 16-bit codes (hkind) */
  sq_quant_kind qkind;
  sq_half_kind hkind;
  size_t bucket;      /* elements per bucket (quantised) */
  size_t chunk_bytes; /* fp32 bytes per pipeline chunk (all shards together); 0: one
                          chunk (also where the transport has no non-blocking calls) */
  int guess;          /* 16-bit: room for encoding the whole call at a guessed scale */
  int alone;          /* one rank encodes and decodes only (host kernels; see run_alone) */
  int scatter;        /* the reduce-scatter: steps 1 and 2 only (below) */
} squall_twophase_codec;

/* 1 when the configuration runs the two-phase path for this element type
 * (int8/int4/fp8; fp16/bf16 with SQUALL_HALF_ACCUM=fp32), with *cd filled. */
int squall__twophase_select(const squallConfig_t *cfg, int dtype, squall_twophase_codec *cd);

/* The reduce-scatter (cd->scatter): the all-reduce's first half. Shards
 * are MPI_Reduce_scatter_block's, n / p elements each (n must divide, and
 * a shard may end in part of a bucket, or start off a line of 64); step 1
 * as above, with every rank's residual over the whole of g; step 2's fp32
 * sum, in rank order, is the result, out holding this rank's shard only.
 * Nothing is re-encoded or gathered, so the owner's residual keeps only
 * its first encode's error: per element decode + e' == g + e. Every codec
 * the all-reduce encodes, fp16/bf16 whatever SQUALL_HALF_ACCUM says (the
 * sum is fp32 either way). */
int squall__twophase_select_scatter(const squallConfig_t *cfg, squall_twophase_codec *cd);

/* Shard geometry: elements per shard and bytes per exchanged block. */
void squall__twophase_geometry(const squall_twophase_codec *cd, size_t n, int p, size_t *shard_elems,
                               size_t *block_bytes);

/* Pipeline chunks of an n-element call over p ranks (1: no pipelining). */
size_t squall__twophase_chunks(const squall_twophase_codec *cd, size_t n, int p);

/* Kernel-memory scratch the call needs. */
size_t squall__twophase_scratch_bytes(const squall_twophase_codec *cd, size_t n, int p);

/* Runs the all-reduce of g (+ res; res may be NULL: no error feedback)
 * into out (n floats; may equal g: g is read before out is written), or
 * with cd->scatter the reduce-scatter into out (this rank's n / p floats;
 * may equal g, at its start: the MPI_IN_PLACE layout).
 * scalars: kernel memory, [0] absmax, [1] scale and [3] this rank's
 * absmax of the 16-bit codecs; absmax_ws: the kernels' absmax workspace;
 * scratch: the bytes above. last_scale (host memory, NULL: none): the
 * tensor's previous 16-bit scale, 0 when unknown, set to this call's;
 * used where cd->guess and res are set. stream: the call's stream (NULL
 * on the host). backup (n floats, NULL: none) receives res as it was:
 * in the encoding pass where the scale is guessed (the residual is read
 * there anyway), by the quantised encoder block by block as it encodes
 * (the kernel set's quant_encode_backup; after a failure the blocks it
 * had not reached, unchanged, are copied then), else by a copy before
 * anything changes res; *backed_up becomes 1 once it holds all of it.
 * Adds the codec seconds and the wire bytes this rank sent. */
squallResult_t squall__twophase_allreduce(const squall_transport *tr, const squall_kernels *k,
                                          const squall_twophase_codec *cd, void *stream, const float *g,
                                          float *res, float *out, size_t n, float *scalars,
                                          void *absmax_ws, void *scratch, float *last_scale, float *backup,
                                          int *backed_up, double *codec_s, uint64_t *wire);

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * topk_rounds.h - top-k's exchange in rounds, on host transports with a
 * non-blocking all-gather, so that finishing the call overlaps the wire.
 *
 * Each rank's slot goes out in R rounds of entries: round j carries
 * entries [j k / R, (j+1) k / R) of every slot, as a slot of its own
 * (codec.h, squall__topk_slot_cut) or packed with 16-bit indices where
 * that is smaller (squall__topk_slot_cut_packed: 6 bytes an entry against
 * 8 for fp32 values), in one all-gather; two rounds are in
 * flight while the last one to arrive is finished. The slots ascend by
 * index, so once round j is in, every element below the lowest last index
 * any slot has reached has all its entries: those are finished (the
 * rank-ordered sum into the output) while later rounds are on the wire
 * (squall_topk_finisher). The result is bit for bit that of one exchange;
 * only the order of the work changes.
 *
 * Rounds cut the slots by entry position, the same on every rank, so that
 * raw and packed rounds keep fixed sizes. With the lossless stage each
 * round is coded on its own and sent in a block as large as the largest
 * any rank has for that round (8 bytes of size, the frame, zeros): one
 * small all-reduce agrees those sizes before the first round leaves, so a
 * round costs every rank one fixed-size all-gather and the padding is a
 * few percent.
 *
 * The residual is never touched here: rounds run only where the encoder
 * has already updated it (into a spare swapped in on success, or a backup
 * restores it after a failure, or failures are fatal) or where there is
 * none, because a failure in a late round must leave nothing half done.
 * Knows the transport interface and the host codecs; the engine decides
 * whether a call runs in rounds.
 */
#ifndef SQUALL_TOPK_ROUNDS_H
#define SQUALL_TOPK_ROUNDS_H

#include <stddef.h>
#include <stdint.h>

#include "squall.h"
#include "transports/transport.h"

/* Rounds for an n-element call of k entries per slot: one per chunk_bytes
 * of fp32 input, at most SQ_TOPK_ROUNDS_MAX, each of at least
 * SQ_TOPK_ROUND_MIN entries; 1 (one exchange) with chunk_bytes 0, a
 * transport without non-blocking all-gather, or more ranks than the
 * finisher decodes in its pass. The same on every rank. */
#define SQ_TOPK_ROUNDS_MAX 64
#define SQ_TOPK_ROUND_MIN 4096
size_t squall__topk_rounds(const squall_transport *tr, size_t n, size_t k, size_t chunk_bytes);

/* Bytes one rank sends in the rounds of a call without the lossless
 * stage (packed or raw), for the cost model. */
uint64_t squall__topk_rounds_wire(size_t n, size_t k, squallValueType_t values, int p, size_t rounds);

/* For the tests only: 0 sends every round without the lossless stage raw,
 * even where packed would be smaller. Raw rounds otherwise need so many
 * pages per entry (one count per 65536 elements against 2 bytes saved per
 * entry: hundreds of millions of elements) that the engine's tests could
 * not reach them. Set it alike on every rank, between calls. */
extern int squall__topk_rounds_pack;

/* Host bytes the rounds of a call need (buffers of every round). */
size_t squall__topk_rounds_host_bytes(size_t n, size_t k, squallValueType_t values, int p, size_t rounds,
                                      int lossless);

typedef struct {
  const squall_transport *tr;
  size_t n, k, rounds;
  squallValueType_t values;
  int zstd_level;   /* 0: raw rounds */
  const void *mine; /* this rank's slot */
  void *slots;      /* every rank's slot, rebuilt here */
  const float *g;   /* the finish's input (may be out, in place) */
  float *out;       /* the rank-ordered sum */
  void *host;       /* squall__topk_rounds_host_bytes of host memory */
} squall_topk_rounds_call;

/* Exchanges and finishes the call. On failure nothing stays in flight
 * and out is undefined, as after any failed call (squall(7)). codec_s and
 * wire grow by the codec's time and this rank's bytes sent. */
squallResult_t squall__topk_rounds_run(const squall_topk_rounds_call *c, double *codec_s, uint64_t *wire);

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kernels.h - the kernel-set interface: the codec kernels and memory
 * operations the engine runs, in one memory space, and what each set can
 * do (its abilities, as fields). Per-call scalars such as the scale live in
 * that memory space too, so that a device path never waits on the host.
 *
 * lib/kernels/, the kernel sets side by side (below the engine, above the
 * codecs; they include codecs and common only):
 *   kernels.h              this interface, and the two sets' entry points
 *   kernels_host.c         the host set: thin wrappers over lib/codecs/codec_*.c
 *   kernels_host_quant.c   its quantised and two-phase entries
 *   kernels_cuda.cu        the device set: the CUDA twins in lib/codecs/cuda/
 *                          plus the element-wise kernels the engine needs
 *   kernels_cuda_quant.cu  its quantised and two-phase entries
 *   timer_host.c           the host set's timer (clock readings)
 *
 * Every function takes the call's stream (a cudaStream_t for the device
 * set, ignored by the host set) as its first argument: the stream travels
 * with the call (squall_call.stream), never through shared state, so two
 * calls on one communicator from different streams cannot mix them up.
 */
#ifndef SQUALL_KERNELS_KERNELS_H
#define SQUALL_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "codecs/codec_math.h"
#include "squall.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types the engine compresses. */
typedef enum { SQ_DT_F32 = 0,
               SQ_DT_F16 = 1,
               SQ_DT_BF16 = 2 } squall_dtype;

static inline size_t squall__dtype_size(squall_dtype t) { return t == SQ_DT_F32 ? 4 : 2; }

/* The 16-bit format of a 16-bit element type (fp16 for SQ_DT_F16). */
SQ_HD sq_half_kind squall__dtype_half_kind(int t) { return t == SQ_DT_BF16 ? SQ_HALF_BF16 : SQ_HALF_FP16; }

typedef struct squall_kernels {
  const char *name; /* "host" or "cuda": for messages; never tested */
  /* ---- abilities: what the engine may ask of this set, declared here
   * rather than inferred from its name. */
  /* Kernel memory is host memory and every function's work is done when
   * it returns: the engine reads a result back without synchronising, so
   * it exchanges the call header on every call. */
  int on_host;
  /* Top-k's exchange may go in rounds whose finish overlaps the wire
   * (engine/topk_rounds.h): the slots and workspace are the host codecs',
   * which topk_rounds.c finishes itself. */
  int topk_in_rounds;
  /* A two-phase call on one rank encodes and decodes each chunk straight
   * away, with no exchange (engine/twophase.c, run_alone). The device set
   * keeps the exchange: one GPU's checks run one rank, and it is their only
   * way to run NCCL's all-to-all and all-gather. */
  int twophase_alone;
  /* The most elements top-k's kernels take (their indices' width): a
   * larger call takes top-k's dense route, decided before the header
   * from the kernel set, which is the same on every rank of an engine. */
  size_t topk_max_elems;
  void *(*alloc)(void *stream, size_t bytes); /* zeroed; NULL on failure */
  void (*free)(void *stream, void *p);
  squallResult_t (*zero)(void *stream, void *p, size_t bytes);
  /* Copies kernel memory to host memory (waits for the data). */
  squallResult_t (*to_host)(void *stream, void *dst, const void *src, size_t bytes);
  /* a[i] = g[i] + res[i] and res[i] = 0 (res may be NULL: a copy of g):
   * the dense fallback sends everything, so nothing is left behind. */
  squallResult_t (*flush)(void *stream, const float *g, float *res, float *a, size_t n);
  /* dst[i] = scalar * (float)src[i]; scalar 1 is an exact copy. */
  squallResult_t (*widen)(void *stream, squall_dtype t, const void *src, float *dst, size_t n,
                          float scalar);
  /* dst[i] = src[i] / divisor, rounded to t (divisor 1: plain rounding). */
  squallResult_t (*narrow)(void *stream, squall_dtype t, const float *src, void *dst, size_t n,
                           float divisor);
  size_t (*absmax_workspace_bytes)(size_t n);
  squallResult_t (*absmax)(void *stream, const float *g, const float *res, size_t n, float *out,
                           void *ws);
  /* *scale = min(sq_pow2_scale(*absmax, limit), max_scale), in kernel memory. */
  squallResult_t (*pow2_scale)(void *stream, const float *absmax, float limit, float max_scale,
                               float *scale);
  squallResult_t (*half_encode)(void *stream, sq_half_kind kind, const float *g, float *res,
                                uint16_t *out, size_t n, const float *scale);
  /* cold: the whole call's output is SQ_OUT_COLD_BYTES or more (a hint:
   * the bits are the same). */
  squallResult_t (*half_decode)(void *stream, sq_half_kind kind, const uint16_t *in, float *out,
                                size_t n, const float *scale, int cold);
  size_t (*topk_workspace_bytes)(size_t n, size_t k);
  /* The selection and the residual update in one go (squall__topk_encode):
   * for where nothing has to be restored without a backup. */
  squallResult_t (*topk_encode)(void *stream, const float *g, float *res, size_t n, size_t k,
                                squallValueType_t values, const float *scale, void *slot,
                                void *ws);
  /* The selection: writes this rank's slot, leaves res as it is, and
   * leaves in ws what topk_finish needs (squall__topk_select). */
  squallResult_t (*topk_select)(void *stream, const float *g, const float *res, size_t n, size_t k,
                                squallValueType_t values, const float *scale, void *slot,
                                void *ws);
  /* After the exchange, with the same g, res, ws and slot `own` among
   * the nranks slots: the residual update (res may be NULL) and the
   * rank-ordered sum into dense, which may be g (squall__topk_finish). A
   * corrupt slot leaves res as it was and dense zeroed: the host set
   * returns squallRemoteError; the device set, which cannot tell without
   * waiting, sets *flag (an int of kernel memory, zeroed by the caller
   * first) to nonzero instead, which the engine reads back when it may
   * synchronise. */
  squallResult_t (*topk_finish)(void *stream, const float *g, float *res, size_t n, size_t k,
                                squallValueType_t values, void *ws, const void *slots, int nranks,
                                int own, float *dense, int *flag);
  /* ---- quantised codecs and the two-phase reductions:
   * the codec.h functions of the same names, in this memory space. */
  squallResult_t (*quant_encode)(void *stream, sq_quant_kind k, size_t bucket, const float *g,
                                 float *res, uint8_t *out, size_t n);
  squallResult_t (*quant_decode)(void *stream, sq_quant_kind k, size_t bucket, const uint8_t *in,
                                 float *out, size_t n, int cold);
  squallResult_t (*quant_reduce)(void *stream, sq_quant_kind k, size_t bucket, const uint8_t *blocks,
                                 int nblocks, size_t block_bytes, float *out, size_t n);
  squallResult_t (*half_reduce)(void *stream, sq_half_kind kind, const uint16_t *blocks, int nblocks,
                                size_t block_elems, float *out, size_t n, const float *scale);
  /* ---- optional (NULL: absmax, then half_encode at the agreed scale).
   * squall__half_encode_guess, with *absmax = max(*absmax, the maximum);
   * res is never NULL; cold: the codes go cold before they are read (a
   * hint: the bits are the same); backup (may be NULL) receives res as it
   * was. It cannot fail (host memory only): a backup made in its pass is
   * whole once the encoding pass is. */
  squallResult_t (*half_encode_guess)(void *stream, sq_half_kind kind, const float *g, float *res,
                                      uint16_t *out, size_t n, float guess, float *absmax, int cold,
                                      float *backup);
  /* Where squall__half_guess_missed(kind, guess, *absmax, *scale) (absmax:
   * the maximum half_encode_guess found): squall__half_rescale. */
  squallResult_t (*half_rescale)(void *stream, sq_half_kind kind, float *res, uint16_t *codes, size_t n,
                                 float guess, const float *absmax, const float *scale);
  /* The owner's reduce and re-encode in one pass: half_reduce into out,
   * then half_encode of out with res into codes, except that out is left
   * unspecified (the host set never writes the sums out:
   * squall__half_reduce_encode). NULL: the two kernels. */
  squallResult_t (*half_reduce_encode)(void *stream, sq_half_kind kind, const uint16_t *blocks, int nblocks,
                                       size_t block_elems, float *out, float *res, uint16_t *codes, size_t n,
                                       const float *scale);
  /* quant_encode that copies res as it was into backup first, bucket by
   * bucket (squall__quant_encode_backup). It cannot fail (host memory
   * only), so the part of a call it has encoded is always backed up.
   * NULL: the caller copies the residual in a pass of its own. */
  squallResult_t (*quant_encode_backup)(void *stream, sq_quant_kind k, size_t bucket, const float *g, float *res,
                                        uint8_t *out, size_t n, float *backup);
  /* topk_encode that copies res as it was into backup first, in its fused
   * pass where it takes one (squall__topk_encode_backup). It fails only
   * before anything changed, so on success the backup is whole. Where
   * topk_encode_to has a spare to write into, that goes first. NULL (and
   * no spare): where a failure must restore the residual, topk_select now
   * and topk_finish after the exchange. */
  squallResult_t (*topk_encode_backup)(void *stream, const float *g, float *res, size_t n, size_t k,
                                       squallValueType_t values, const float *scale, void *slot, void *ws,
                                       float *backup);
  /* topk_encode that writes the updated residual into out_res and leaves
   * res as it was (squall__topk_encode_to): the engine swaps out_res in
   * once the call has succeeded, where a backup would cost a copy. NULL:
   * the backup, or topk_select and topk_finish. */
  squallResult_t (*topk_encode_to)(void *stream, const float *g, const float *res, float *out_res, size_t n,
                                   size_t k, squallValueType_t values, const float *scale, void *slot, void *ws);
  /* ---- optional (NULL where work on one stream is done when it returns,
   * as on the host). Calls on one communicator share its scratch, but may
   * come on different streams: a call on another stream than the last
   * compressed call's must not touch the scratch before that call's work
   * (an exchange still reading its send buffer) is done. fence_record
   * marks the end of a call's work on stream in *fence (made on first
   * use); fence_wait makes stream wait for the mark; fence_free drops it. */
  squallResult_t (*fence_record)(void **fence, void *stream);
  squallResult_t (*fence_wait)(void *fence, void *stream);
  void (*fence_free)(void *fence);
  /* ---- optional (NULL: this set times nothing): the whole-call times the
   * device cost model weighs (engine/costing_device.c), read without
   * waiting for the stream. timer_record marks the point the stream has
   * reached in *mark (made on first use, kept for reuse); timer_elapsed
   * gives the seconds between two recorded marks once both are reached:
   * 1 and *seconds, 0 while not yet (never a wait), -1 on an error;
   * timer_free drops a mark. Never inside a graph capture. */
  squallResult_t (*timer_record)(void **mark, void *stream);
  int (*timer_elapsed)(void *start, void *end, double *seconds);
  void (*timer_free)(void *mark);
} squall_kernels;

/* The host set's timer (timer_host.c): clock readings, ready at once. */
squallResult_t squall__host_timer_record(void **mark, void *stream);
int squall__host_timer_elapsed(void *start, void *end, double *seconds);
void squall__host_timer_free(void *mark);

/* The host entries of the quantised codecs (kernels_host_quant.c). */
squallResult_t squall__host_quant_encode(void *stream, sq_quant_kind k, size_t bucket, const float *g,
                                         float *res, uint8_t *out, size_t n);
squallResult_t squall__host_quant_encode_backup(void *stream, sq_quant_kind k, size_t bucket, const float *g,
                                                float *res, uint8_t *out, size_t n, float *backup);
squallResult_t squall__host_quant_decode(void *stream, sq_quant_kind k, size_t bucket,
                                         const uint8_t *in, float *out, size_t n, int cold);
squallResult_t squall__host_quant_reduce(void *stream, sq_quant_kind k, size_t bucket,
                                         const uint8_t *blocks, int nblocks, size_t block_bytes,
                                         float *out, size_t n);
squallResult_t squall__host_half_reduce(void *stream, sq_half_kind kind, const uint16_t *blocks,
                                        int nblocks, size_t block_elems, float *out, size_t n,
                                        const float *scale);
squallResult_t squall__host_half_reduce_encode(void *stream, sq_half_kind kind, const uint16_t *blocks,
                                               int nblocks, size_t block_elems, float *out, float *res,
                                               uint16_t *codes, size_t n, const float *scale);

/* The host kernel set (kernels_host.c). */
extern const squall_kernels squall__kernels_host;

#ifdef HAVE_CUDA
/* The device kernel set (kernels_cuda.cu). */
extern const squall_kernels squall__kernels_cuda;

/* The device entries of the quantised codecs (kernels_cuda_quant.cu). */
squallResult_t squall__dev_quant_encode(void *stream, sq_quant_kind k, size_t bucket, const float *g,
                                        float *res, uint8_t *out, size_t n);
squallResult_t squall__dev_quant_decode(void *stream, sq_quant_kind k, size_t bucket,
                                        const uint8_t *in, float *out, size_t n, int cold);
squallResult_t squall__dev_quant_reduce(void *stream, sq_quant_kind k, size_t bucket,
                                        const uint8_t *blocks, int nblocks, size_t block_bytes,
                                        float *out, size_t n);
squallResult_t squall__dev_half_reduce(void *stream, sq_half_kind kind, const uint16_t *blocks,
                                       int nblocks, size_t block_elems, float *out, size_t n,
                                       const float *scale);

/* 1 when p is device (or managed) memory; 0 for host memory, and when no
 * CUDA driver is present (the error is cleared). */
int squall__cuda_is_device_pointer(const void *p);
#endif

#ifdef __cplusplus
}
#endif
#endif /* SQUALL_KERNELS_KERNELS_H */

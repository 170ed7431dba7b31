/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * codec_cuda.h - the device twins of the host codecs in lib/codecs/codec.h.
 *
 * lib/codecs/cuda/, the codecs' CUDA twins (part of the codecs layer: they
 * include codecs and common only; the device kernel set that runs them is
 * lib/kernels/kernels_cuda.cu):
 *   codec_cuda.h   this interface
 *   cuda_check.h   error propagation and grid sizes for the kernels here
 *   half.cu        16-bit: absmax, power-of-two scale, encode, decode
 *   topk.cu        top-k selection (radix select, stable compaction)
 *   sparse.cu      the rank-ordered sparse decode and its checks
 *   quant.cu       the quantised codecs and the two-phase reductions
 *
 * Each function enqueues kernels on `stream` and returns at once: no host
 * synchronisation, no allocation (scratch comes from the caller's
 * workspace), output sizes fixed by the arguments, so every sequence can be
 * captured in a CUDA graph. Every pointer is a device pointer. Per element
 * the kernels run the arithmetic of lib/codecs/codec_math.h, so they produce the
 * same bits as their host twins (NaN payloads aside: GPU arithmetic returns
 * the canonical NaN where x86 keeps the operand's payload).
 *
 * Return value: cudaSuccess, cudaErrorInvalidValue for arguments outside
 * the documented range (nothing is then enqueued), or the launch error.
 * Errors from the kernels themselves surface at the caller's next
 * synchronisation, as for any CUDA work.
 */
#ifndef SQUALL_CODECS_CUDA_CODEC_CUDA_H
#define SQUALL_CODECS_CUDA_CODEC_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "squall.h"
#include "codecs/codec_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- 16-bit */

/* Bytes of workspace squall__cuda_absmax() needs for n elements (small and
 * bounded: one float per block of the first reduction stage). */
size_t squall__cuda_absmax_workspace_bytes(size_t n);

/* *d_absmax = the largest |g[i] + res[i]| over the finite values (res may be
 * NULL: |g[i]|), 0 when there are none; as squall__absmax(). ws must hold
 * squall__cuda_absmax_workspace_bytes(n) bytes, 4-byte aligned. */
cudaError_t squall__cuda_absmax(const float *g, const float *res, size_t n, float *d_absmax,
                                void *ws, size_t ws_bytes, cudaStream_t stream);

/* *d_scale = sq_pow2_scale(*d_absmax, limit): one thread, so the scale never
 * visits the host. */
cudaError_t squall__cuda_pow2_scale(const float *d_absmax, float limit, float *d_scale,
                                    cudaStream_t stream);

/* As squall__half_encode(), with the scale read from *d_scale. res may be
 * NULL (no error feedback). */
cudaError_t squall__cuda_half_encode(sq_half_kind kind, const float *g, float *res, uint16_t *out,
                                     size_t n, const float *d_scale, cudaStream_t stream);

/* As squall__half_decode(): out[i] = in[i] / *d_scale, or += when
 * accumulate is non-zero. */
cudaError_t squall__cuda_half_decode(sq_half_kind kind, const uint16_t *in, float *out, size_t n,
                                     const float *d_scale, int accumulate, cudaStream_t stream);

/* ----------------------------------------------------------------- top-k */

/* Bytes of workspace squall__cuda_topk_encode() needs: about 4n + n/512 +
 * 48 KiB. Pure arithmetic, valid without a device. k is accepted for
 * future use and does not change the size today. */
size_t squall__cuda_topk_workspace_bytes(size_t n, size_t k);

/* As squall__topk_encode(): the exact k entries of largest sq_topk_key(a),
 * a = g + res (res may be NULL), ties to the lower index, written as one
 * slot (squall__topk_slot_bytes(k, values) bytes, padding zeroed) with the
 * indices ascending; res' as the host twin. d_scale is read for fp16 values
 * only (may be NULL for fp32). Requires k <= n <= INT_MAX, slot 4-byte
 * aligned, ws 16-byte aligned with ws_bytes >= the workspace size.
 * Exact radix select on the composite key (key, ~index), which has no ties,
 * then a stable compaction: linear in n, no sort, no host synchronisation. */
cudaError_t squall__cuda_topk_encode(const float *g, float *res, size_t n, size_t k,
                                     squallValueType_t values, const float *d_scale, void *slot,
                                     void *ws, size_t ws_bytes, cudaStream_t stream);

/* The two halves of squall__cuda_topk_encode, as squall__topk_select and
 * the residual part of squall__topk_finish: select writes the slot and
 * leaves res alone; commit, later on the same stream with the same g, res
 * and untouched ws, updates res, unless d_skip (may be NULL) points at a
 * nonzero int. */
cudaError_t squall__cuda_topk_select(const float *g, const float *res, size_t n, size_t k,
                                     squallValueType_t values, const float *d_scale, void *slot,
                                     void *ws, size_t ws_bytes, cudaStream_t stream);
cudaError_t squall__cuda_topk_commit(const float *g, float *res, size_t n, size_t k,
                                     squallValueType_t values, const float *d_scale, const void *ws,
                                     size_t ws_bytes, const int *d_skip, cudaStream_t stream);

/* As squall__sparse_decode(): dense[0..n) = 0, then the nranks slots
 * (squall__topk_slot_bytes(k, values) bytes apart) are added in rank order,
 * so every rank computes the same bits. *d_error becomes 0, or 1 when a slot
 * holds an index >= n or indices that do not ascend; dense is then zeroed,
 * as the host twin does. Requires nranks >= 0, slots 4-byte aligned. */
cudaError_t squall__cuda_sparse_decode(const void *slots, int nranks, size_t k,
                                       squallValueType_t values, float *dense, size_t n,
                                       int *d_error, cudaStream_t stream);

/* The checks of squall__cuda_sparse_decode alone: *d_error becomes 0, or 1
 * for a corrupt slot; nothing else is written. */
cudaError_t squall__cuda_sparse_validate(const void *slots, int nranks, size_t k,
                                         squallValueType_t values, size_t n, int *d_error,
                                         cudaStream_t stream);

/* ------------------------------------------------- quantised (quant.cu) */

/* As squall__quant_encode(): one block per bucket; padding zeroed. */
cudaError_t squall__cuda_quant_encode(sq_quant_kind k, size_t bucket, const float *g, float *res,
                                      uint8_t *out, size_t n, cudaStream_t stream);

/* As squall__quant_decode() with accumulate 0. */
cudaError_t squall__cuda_quant_decode(sq_quant_kind k, size_t bucket, const uint8_t *in, float *out,
                                      size_t n, cudaStream_t stream);

/* As squall__quant_reduce(): fp32 sums in rank order. */
cudaError_t squall__cuda_quant_reduce(sq_quant_kind k, size_t bucket, const uint8_t *blocks,
                                      int nblocks, size_t block_bytes, float *out, size_t n,
                                      cudaStream_t stream);

/* As squall__half_reduce(), the scale read from *d_scale. */
cudaError_t squall__cuda_half_reduce(sq_half_kind kind, const uint16_t *blocks, int nblocks,
                                     size_t block_elems, float *out, size_t n, const float *d_scale,
                                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* SQUALL_CODECS_CUDA_CODEC_CUDA_H */

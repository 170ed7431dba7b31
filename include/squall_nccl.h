/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * squall_nccl.h - compressed all-reduce and reduce-scatter with
 * ncclAllReduce's and ncclReduceScatter's signatures.
 *
 * squallAllReduce() is a drop-in for ncclAllReduce(), squallReduceScatter()
 * for ncclReduceScatter(), on a communicator the caller created with NCCL.
 * This header needs nccl.h (and CUDA's headers, which nccl.h includes) on
 * the include path; squall.h alone needs neither.
 */
#ifndef SQUALL_NCCL_H
#define SQUALL_NCCL_H

#include <nccl.h>
#include "squall.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ncclAllReduce's contract: device buffers, enqueued on stream, returns
 * before completion. Eligible calls (float32/float16/bfloat16, ncclSum,
 * ncclAvg or a PreMulSum op with a host scalar, at least SQUALL_MIN_BYTES,
 * SQUALL_MIN_RANKS ranks, configuration agreed) are compressed with no
 * allocation in the steady state, and with no host wait except top-k's
 * check of its decode flag (squall(7), FAILURE POLICY); all others go to
 * ncclAllReduce unchanged. Host buffers work too (host codecs), with an
 * NCCL that accepts them. Not for use between ncclGroupStart and
 * ncclGroupEnd (the interposer passes grouped calls on). */
SQUALL_API ncclResult_t squallAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream);

/* ncclReduceScatter's contract: sendbuff holds recvcount elements for
 * each rank in rank order, recvbuff gets this rank's block of the sum (or
 * mean); in place where recvbuff is sendbuff + rank * recvcount. Eligible
 * calls (float32, ncclSum or ncclAvg, codec fp16, bf16, int8, int4 or fp8,
 * the rest as for squallAllReduce) are compressed with error feedback:
 * each rank encodes its block for every owner, the owner sums in fp32 in
 * rank order. Compressed whatever SQUALL_COLLECTIVES holds (that switch
 * is the interposers'); all others go to ncclReduceScatter unchanged.
 * recvbuff overlapping sendbuff elsewhere, or recvcount times the ranks
 * overflowing size_t, is ncclInvalidArgument (squallGetLastError says
 * why). */
SQUALL_API ncclResult_t squallReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                            cudaStream_t stream);

/* Frees squall's state for comm: call before ncclCommDestroy (the
 * LD_PRELOAD interposer does it for you). */
SQUALL_API ncclResult_t squallCommForget(ncclComm_t comm);

/* Zeroes every error-feedback residual kept for comm (stream-ordered on
 * the device path: enqueued on the stream of the last call). */
SQUALL_API ncclResult_t squallResetResiduals(ncclComm_t comm);

#ifdef __cplusplus
}
#endif
#endif /* SQUALL_NCCL_H */

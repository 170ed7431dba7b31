/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * api_nccl.h - the NCCL side of squall shared by the direct API
 * (squallAllReduce and squallReduceScatter, api_nccl_direct.c) and the
 * LD_PRELOAD interposer: per-communicator state, PreMulSum op tracking,
 * and the all-reduce and reduce-scatter that plan through the engine and
 * fall back to the real ncclAllReduce or ncclReduceScatter through the
 * given table.
 */
#ifndef SQUALL_API_NCCL_H
#define SQUALL_API_NCCL_H

#include "transports/nccl_table.h"
#include "squall.h"

/* ncclAllReduce's contract. group_why: NULL, or the call is inside a
 * user's ncclGroupStart/End that squall cannot compress, and why (the
 * interposer's words, "mixes ncclAllReduce with ncclSend"): it passes
 * through unchanged (reason in_group) into NCCL's group. A failure is
 * logged and returned as NCCL's code, never hidden by passing the call
 * through (squall(7), FAILURE POLICY). *raised (where not NULL) says
 * whose a failure is: 1 squall's own (squallGetLastError says why), 0
 * NCCL's (a call squall passed to it failed). */
ncclResult_t squall__nccl_allreduce(const squall_nccl_api *api, const void *sendbuff, void *recvbuff,
                                    size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                                    ncclComm_t comm, cudaStream_t stream, const char *group_why, int interposed,
                                    int *raised);

/* ncclReduceScatter's contract, as squall__nccl_allreduce's (group_why,
 * raised the same): sendbuff holds recvcount elements per rank, recvbuff
 * gets this rank's block of the sum; in place where recvbuff is sendbuff's
 * block of this rank (NCCL's rule). Any other overlap of the two, or a
 * recvcount whose total overflows size_t, is ncclInvalidArgument.
 * interposed (here and for the all-reduce): 1 for the LD_PRELOAD
 * interposer's calls, which SQUALL_COLLECTIVES may leave to NCCL (reason
 * collective_off); 0 for a direct call, which names its collective. */
ncclResult_t squall__nccl_reduce_scatter(const squall_nccl_api *api, const void *sendbuff, void *recvbuff,
                                         size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream, const char *group_why, int interposed, int *raised);

/* The test hook (not exported: the tests link libsquall_core.la), NCCL's
 * twin of squall__mpi_get_scatter_residual: copies the error-feedback
 * residual of the tensor last reduce-scattered on comm from sendbuff with
 * this recvcount and datatype into out (recvcount times the ranks floats,
 * host memory). ncclInvalidArgument where squall keeps none. */
ncclResult_t squall__nccl_get_scatter_residual(ncclComm_t comm, const void *sendbuff, size_t recvcount,
                                               ncclDataType_t datatype, float *out);

/* The interposer runs a group of calls (all-reduces on comm) through squall
 * (after NCCL's group closed): said once per communicator at INFO. */
void squall__nccl_note_group(ncclComm_t comm, int calls);

/* Records a PreMulSum op made by ncclRedOpCreatePreMulSum, so that calls
 * with it count as sums of scalar * input. scalar points to a value of
 * datatype in host memory (ncclScalarHostImmediate: copied now) or device
 * memory (ncclScalarDevice: read at call time). */
void squall__nccl_premul_add(ncclComm_t comm, ncclRedOp_t op, const void *scalar,
                             ncclDataType_t datatype, ncclScalarResidence_t residence);
void squall__nccl_premul_remove(ncclComm_t comm, ncclRedOp_t op);

/* Every all-reduce on comm passes through (a non-blocking communicator). */
void squall__nccl_mark_nonblocking(ncclComm_t comm);

/* Whether comm was marked so (a split without a config inherits it). */
int squall__nccl_is_nonblocking(ncclComm_t comm);

/* Frees all squall state of comm (destroy, abort, finalize, revoke). Safe
 * for communicators squall never saw. */
void squall__nccl_comm_forget(ncclComm_t comm);

#endif /* SQUALL_API_NCCL_H */

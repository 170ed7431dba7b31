/* SPDX-License-Identifier: BSD-3-Clause */
/* nccl_linked.c - the NCCL table of libsquall, which links -lnccl: NCCL's
 * profiling names, so that an NCCL interposer loaded beside libsquall never
 * sees squall's own collectives. */
#include "common/internal.h"

#include "transports/nccl_table.h"
#include "api/api_nccl.h"
#include "transports/transport_nccl.h"
#include "squall_nccl.h"

static const squall_nccl_api linked = {
    .caller = "squallAllReduce",
    .allReduce = pncclAllReduce,
    .allGather = pncclAllGather,
    .commCount = pncclCommCount,
    .commUserRank = pncclCommUserRank,
    .commCuDevice = pncclCommCuDevice,
    .commGetAsyncError = pncclCommGetAsyncError,
    .groupStart = pncclGroupStart,
    .groupEnd = pncclGroupEnd,
    .send = pncclSend,
    .recv = pncclRecv,
    /* two-level all-reduce */
    .reduceScatter = pncclReduceScatter,
    .commSplit = pncclCommSplit,
    .commDestroy = pncclCommDestroy,
    .getErrorString = pncclGetErrorString,
};

const squall_nccl_api *squall__nccl_api_linked(void) { return &linked; }

ncclResult_t squallAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  int raised = 1;
  ncclResult_t r = squall__nccl_allreduce(&linked, sendbuff, recvbuff, count, datatype, op, comm, stream, 0, &raised);
  /* ncclGetLastError is NCCL's, squallGetLastError the caller's one place
   * to look: a failure of the call passed to NCCL goes there too, not an
   * older message of squall's */
  if (!raised && r != ncclSuccess && r != ncclInProgress)
    squall__nccl_result(&linked, r, "ncclAllReduce (squallAllReduce passed the call through)");
  return r;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/* api_nccl_direct.c - squallAllReduce() and squallReduceScatter(),
 * ncclAllReduce's and ncclReduceScatter's signatures for a program linked
 * with -lsquall: api_nccl.c's collectives over libsquall's own NCCL table
 * (transports/nccl_table_linked.c, NCCL's profiling names). */
#include "common/internal.h"

#include "api/api_nccl.h"
#include "squall_nccl.h"
#include "transports/nccl_table.h"
#include "transports/transport_nccl.h" /* squall__nccl_result */

ncclResult_t squallAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const squall_nccl_api *linked = squall__nccl_api_linked();
  int raised = 1;
  ncclResult_t r = squall__nccl_allreduce(linked, sendbuff, recvbuff, count, datatype, op, comm, stream, NULL, 0, &raised);
  /* ncclGetLastError is NCCL's, squallGetLastError the caller's one place
   * to look: a failure of the call passed to NCCL goes there too, not an
   * older message of squall's */
  if (!raised && r != ncclSuccess && r != ncclInProgress)
    squall__nccl_result(linked, r, "ncclAllReduce (squallAllReduce passed the call through)");
  return r;
}

/* Compressed whatever SQUALL_COLLECTIVES holds: the caller asked for it by
 * name (the switch is the interposers'). */
ncclResult_t squallReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const squall_nccl_api *linked = squall__nccl_api_linked();
  int raised = 1;
  ncclResult_t r =
      squall__nccl_reduce_scatter(linked, sendbuff, recvbuff, recvcount, datatype, op, comm, stream, NULL, 0, &raised);
  if (!raised && r != ncclSuccess && r != ncclInProgress)
    squall__nccl_result(linked, r, "ncclReduceScatter (squallReduceScatter passed the call through)");
  return r;
}

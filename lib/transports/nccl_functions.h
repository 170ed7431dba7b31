/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nccl_functions.h - the NCCL functions squall itself calls, written once:
 *
 *   X(field, Name, req, core, ret, params)
 *
 *   field   its member of squall_nccl_api (nccl_table.h)
 *   Name    NCCL's name without the prefix: ncclName, and pncclName, the
 *           profiling name squall calls so that no interposer counts it
 *   req     1 where every NCCL release squall supports has it; 0 where an
 *           older one may not (the interposer then answers a call of it
 *           ncclInvalidUsage instead of ncclSystemError)
 *   core    1 where squall compresses nothing without it (the interposer
 *           passes every all-reduce through when the loaded NCCL lacks
 *           one); 0 where only a route stays off (send/recv: two-phase;
 *           reduceScatter, commSplit, commDestroy: two-level) or a message
 *           is plainer (getErrorString)
 *   ret, params  its type: return type and parenthesised parameter types
 *
 * From this list come the table's members (nccl_table.h), libsquall's
 * table of profiling names (nccl_table_linked.c), and the interposer's
 * lookups by dlsym and the table it fills (interpose/preload_nccl.c, which
 * adds the functions it only intercepts).
 */
#ifndef SQUALL_TRANSPORTS_NCCL_FUNCTIONS_H
#define SQUALL_TRANSPORTS_NCCL_FUNCTIONS_H

#include <nccl.h>

#define SQ_NCCL_FUNCTIONS(X)                                                                               \
  X(allReduce, AllReduce, 1, 1, ncclResult_t,                                                              \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))                 \
  X(allGather, AllGather, 1, 1, ncclResult_t,                                                              \
    (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))                              \
  X(commCount, CommCount, 1, 1, ncclResult_t, (const ncclComm_t, int *))                                   \
  X(commUserRank, CommUserRank, 1, 1, ncclResult_t, (const ncclComm_t, int *))                             \
  X(commCuDevice, CommCuDevice, 1, 1, ncclResult_t, (const ncclComm_t, int *))                             \
  X(commGetAsyncError, CommGetAsyncError, 1, 1, ncclResult_t, (ncclComm_t, ncclResult_t *))                \
  X(groupStart, GroupStart, 1, 1, ncclResult_t, (void))                                                    \
  X(groupEnd, GroupEnd, 1, 1, ncclResult_t, (void))                                                        \
  /* the all-to-all of the two-phase all-reduce (NCCL 2.7) */                                              \
  X(send, Send, 0, 0, ncclResult_t, (const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)) \
  X(recv, Recv, 0, 0, ncclResult_t, (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))       \
  /* the two-level all-reduce (transports/topology_nccl.c; ncclCommSplit: NCCL 2.18) */                    \
  X(reduceScatter, ReduceScatter, 1, 0, ncclResult_t,                                                      \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))                 \
  X(commSplit, CommSplit, 0, 0, ncclResult_t, (ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *))        \
  X(commDestroy, CommDestroy, 1, 0, ncclResult_t, (ncclComm_t))                                            \
  /* messages */                                                                                           \
  X(getErrorString, GetErrorString, 0, 0, const char *, (ncclResult_t))

#endif /* SQUALL_TRANSPORTS_NCCL_FUNCTIONS_H */

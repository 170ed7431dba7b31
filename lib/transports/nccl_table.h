/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nccl_api.h - the NCCL functions squall itself calls, as a table. The
 * direct API (libsquall, linked with -lnccl) fills it with NCCL's profiling
 * names; the LD_PRELOAD interposer, which must not link NCCL and whose own
 * ncclX symbols shadow the real ones, fills it with dlsym results. Either
 * way squall's internal collectives never re-enter an interposer.
 */
#ifndef SQUALL_NCCL_API_H
#define SQUALL_NCCL_API_H

#include <nccl.h>

typedef struct squall_nccl_api {
  const char *caller; /* the all-reduce the application called, as messages name it */
  ncclResult_t (*allReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*allGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*commCount)(const ncclComm_t, int *);
  ncclResult_t (*commUserRank)(const ncclComm_t, int *);
  ncclResult_t (*commCuDevice)(const ncclComm_t, int *);
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*groupStart)(void);
  ncclResult_t (*groupEnd)(void);
  /* the all-to-all of the two-phase all-reduce */
  ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  /* ---- two-level all-reduce (transports/topology_nccl.c). NULL where the
   * loaded NCCL lacks them (ncclCommSplit: NCCL < 2.18): calls stay flat. */
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*commSplit)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
  ncclResult_t (*commDestroy)(ncclComm_t);
  const char *(*getErrorString)(ncclResult_t); /* messages; NULL where missing */
} squall_nccl_api;

/* The table of the NCCL that libsquall was linked with (profiling names). */
const squall_nccl_api *squall__nccl_api_linked(void);

#endif

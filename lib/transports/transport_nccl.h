/* SPDX-License-Identifier: BSD-3-Clause */
/* transport_nccl.h - the engine's transport over NCCL, through a table of
 * real NCCL functions, on the stream each call brings. Device memory
 * normally; host memory with the test-only host NCCL. NCCL is built only
 * with CUDA, so this side always has the CUDA runtime. */
#ifndef SQUALL_TRANSPORT_NCCL_H
#define SQUALL_TRANSPORT_NCCL_H

#include "transports/nccl_table.h"
#include "transports/transport.h"

typedef struct {
  const squall_nccl_api *api;
  ncclComm_t comm;
  int device_memory; /* buffers live on the GPU */
} squall_nccl_ctx;

squallResult_t squall__transport_nccl_init(squall_transport *tr, squall_nccl_ctx *ctx);

/* NCCL result -> squall result, with a detail naming the call and NCCL's
 * text for r. */
squallResult_t squall__nccl_result(const squall_nccl_api *api, ncclResult_t r, const char *what);

/* The same for an operation on comm, after waiting out ncclInProgress: a
 * non-blocking communicator may answer it while NCCL enqueues (or, for a
 * new one, initialises), and nothing else may be called on it until
 * ncclCommGetAsyncError says the operation is done. squall settles each of
 * its own operations before the next, so that every step it enqueues is
 * ordered after the last; a communicator that never settles waits, as a
 * blocking one would (a watchdog that aborts it ends the wait). */
squallResult_t squall__nccl_settle(const squall_nccl_api *api, ncclComm_t comm, ncclResult_t r, const char *what);

#endif

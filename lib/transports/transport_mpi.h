/* SPDX-License-Identifier: BSD-3-Clause */
/* transport_mpi.h - the engine's transport over MPI on host memory. Uses
 * the PMPI_ names so that an MPI interposer never sees squall's own calls. */
#ifndef SQUALL_TRANSPORT_MPI_H
#define SQUALL_TRANSPORT_MPI_H

#include <mpi.h>
#include "transports/transport.h"

/* Fills *tr for comm. ctx must stay alive (and hold comm) while tr is used. */
typedef struct {
  MPI_Comm comm;
  uint64_t *sizes; /* nranks each: the all-gather-v's bookkeeping, allocated */
  int *counts;     /* up front so that no call can fail alone halfway */
} squall_mpi_ctx;

squallResult_t squall__transport_mpi_init(squall_transport *tr, squall_mpi_ctx *ctx, MPI_Comm comm);
/* Frees what init allocated; accepts a zeroed ctx. */
void squall__transport_mpi_fini(squall_mpi_ctx *ctx);

/* rc as squall's result: squallSuccess for MPI_SUCCESS; otherwise the
 * failure, named by `what` and MPI's text, and rc kept for the entry point
 * (squall__transport_mpi_take_error), so that the caller sees MPI's own
 * error class whichever of squall's MPI calls failed. */
squallResult_t squall__transport_mpi_result(int rc, const char *what);

/* The code of the last MPI call of this thread's transport that failed
 * (MPI_SUCCESS when none since the last take), and clears it: the MPI
 * entry point returns MPI's own error class for a failed collective. */
int squall__transport_mpi_take_error(void);

/* Blocks above this many bytes (INT_MAX: MPI's counts are int) go in
 * pieces of at most this many (and 1 GiB), by broadcasts or pairwise
 * all-to-all-v. Tests lower it to run that path on small buffers. */
extern size_t squall__transport_mpi_big_bytes;

#endif

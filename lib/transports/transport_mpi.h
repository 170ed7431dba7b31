/* transport_mpi.h - the engine's transport over MPI on host memory. Uses
 * the PMPI_ names so that an MPI interposer never sees squall's own calls. */
#ifndef SQUALL_TRANSPORT_MPI_H
#define SQUALL_TRANSPORT_MPI_H

#include <mpi.h>
#include "transports/transport.h"

/* Fills *tr for comm. ctx must stay alive (and hold comm) while tr is used. */
typedef struct {
  MPI_Comm comm;
} squall_mpi_ctx;

squallResult_t squall__transport_mpi_init(squall_transport *tr, squall_mpi_ctx *ctx, MPI_Comm comm);

#endif

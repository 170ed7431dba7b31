/* SPDX-License-Identifier: BSD-3-Clause */
/* topology_mpi.h - the MPI transport's operations for the two-level
 * all-reduce: node discovery, sub-communicators, reduce-scatter. */
#ifndef SQUALL_TOPOLOGY_MPI_H
#define SQUALL_TOPOLOGY_MPI_H

#include "transports/transport_mpi.h"

/* Sets the two-level operations of an MPI transport (ctx a squall_mpi_ctx). */
void squall__topology_mpi_attach(squall_transport *tr);

#endif

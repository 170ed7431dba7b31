/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * preload_mpi.c - libsquall-preload-mpi.so, the MPI interposer, through the
 * standard PMPI profiling interface: the library defines MPI_Allreduce,
 * MPI_Reduce_scatter_block, MPI_Reduce_scatter and MPI_Comm_free, and MPI
 * itself keeps their PMPI_ names. Loaded with LD_PRELOAD, it makes an
 * unmodified MPI program's float sums compressed (lib/api/api_mpi.c
 * decides, as for squallMpiAllreduce and squallMpiReduceScatterBlock, and
 * calls the PMPI_ collective the program called for everything it passes
 * through, also what SQUALL_COLLECTIVES leaves out). Everything else is
 * MPI's own.
 *
 * No re-entry guard is needed here, unlike the NCCL side: squall reaches MPI
 * only through PMPI_ names and functions this library does not define.
 */
#include "common/internal.h"

#include "api/api_mpi.h"
#include "squall_mpi.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                         MPI_Op op, MPI_Comm comm) {
  /* squallMpiAllreduce's, marked as the interposer's (SQUALL_COLLECTIVES) */
  return squall__mpi_allreduce_interposed(sendbuf, recvbuf, count, datatype, op, comm);
}

/* squallMpiReduceScatterBlock's, marked as the interposer's
 * (SQUALL_COLLECTIVES: reducescatter) */
EXPORT int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
                                    MPI_Op op, MPI_Comm comm) {
  return squall__mpi_reduce_scatter_block_interposed(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

/* Equal counts: the block call; uneven ones: MPI's, with a reason
 * (lib/api/api_mpi.c decides) */
EXPORT int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype,
                              MPI_Op op, MPI_Comm comm) {
  return squall__mpi_reduce_scatter_interposed(sendbuf, recvbuf, recvcounts, datatype, op, comm);
}

/* squall's state first, while the communicator is still valid (MPI also
 * frees it through the attribute's delete callback; this keeps the order
 * explicit and independent of MPI's). Bad arguments are MPI's to report. */
EXPORT int MPI_Comm_free(MPI_Comm *comm) {
  if (comm != NULL && *comm != MPI_COMM_NULL && *comm != MPI_COMM_WORLD && *comm != MPI_COMM_SELF)
    squallMpiCommFree(*comm);
  return PMPI_Comm_free(comm);
}

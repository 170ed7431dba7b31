/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * squall_mpi.h - compressed all-reduce and reduce-scatter of host buffers
 * over MPI.
 *
 * squallMpiAllreduce() is a drop-in for MPI_Allreduce(): same arguments,
 * same contract, MPI_IN_PLACE accepted. Eligible calls (MPI_FLOAT, MPI_SUM,
 * at least SQUALL_MIN_BYTES, more than one rank, the same configuration on
 * every rank) are compressed as configured; every other call goes to
 * PMPI_Allreduce unchanged. Returns an MPI error code.
 */
#ifndef SQUALL_MPI_H
#define SQUALL_MPI_H

#include <mpi.h>
#include "squall.h"

#ifdef __cplusplus
extern "C" {
#endif

SQUALL_API int squallMpiAllreduce(const void *sendbuf, void *recvbuf, int count,
                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);

/* A drop-in for MPI_Reduce_scatter_block(): same arguments, same contract
 * (host buffers; sendbuf may be MPI_IN_PLACE, the input then being
 * recvbuf's recvcount times the ranks elements). Eligible calls (as for
 * squallMpiAllreduce, SQUALL_MIN_BYTES counting the whole send buffer)
 * run the two-phase path's first half with fp16, bf16, int8, int4 or fp8:
 * each rank's contribution to each shard is encoded, the owner sums the
 * decoded copies in fp32 in rank order, and each rank keeps an
 * error-feedback residual over its whole send buffer. Top-k selects
 * ceil(ratio * recvcount) entries in each owner's block and sends each
 * owner one slot (an all-to-all); the owner sums the slots in fp32 in rank
 * order. Returns an MPI error code. */
SQUALL_API int squallMpiReduceScatterBlock(const void *sendbuf, void *recvbuf, int recvcount,
                                           MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);

/* Zeroes every error-feedback residual kept for comm (for example after
 * loading a checkpoint). Warm-up counts are kept: a tensor past its
 * SQUALL_WARMUP calls stays compressed. Local: no communication. */
SQUALL_API int squallMpiResetResiduals(MPI_Comm comm);

/* Frees all squall state kept for comm (residuals, scratch, agreement).
 * Call before MPI_Comm_free(); the MPI interposer does it for you.
 * Collective, like MPI_Comm_free: on every rank of comm at the same point
 * of the call sequence (a rank with new state exchanges call headers that
 * the others may skip). */
SQUALL_API int squallMpiCommFree(MPI_Comm comm);

#ifdef __cplusplus
}
#endif
#endif /* SQUALL_MPI_H */

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * api_mpi.h - what lib/api/api_mpi.c offers besides the public
 * squall_mpi.h: the test hooks that read a tensor's residual, and the
 * MPI interposer's entries. None is exported (libsquall.so's version
 * script lets only squall[A-Z]* out): the tests link the convenience
 * library libsquall_core.la, the interposer this layer, which have them.
 */
#ifndef SQUALL_API_MPI_H
#define SQUALL_API_MPI_H

#include <mpi.h>

/* Copies the error-feedback residual of the tensor last all-reduced on comm
 * from sendbuf (the receive buffer for MPI_IN_PLACE) with this count and
 * datatype into out (count floats): on the two-level path the sum of the
 * flat and the per-shard residuals, each the one last sent from sendbuf.
 * Returns MPI_ERR_ARG when squall keeps none for it. */
int squall__mpi_get_residual(MPI_Comm comm, const void *sendbuf, int count, MPI_Datatype datatype, float *out);

/* The same for the tensor last reduce-scattered on comm from sendbuf with
 * this recvcount: its residual covers the whole send buffer, recvcount
 * times the ranks floats. */
int squall__mpi_get_scatter_residual(MPI_Comm comm, const void *sendbuf, int recvcount, MPI_Datatype datatype,
                                     float *out);

/* squallMpiAllreduce for the MPI interposer (lib/interpose/preload_mpi.c,
 * which links this layer statically): the call is marked interposed, so
 * that SQUALL_COLLECTIVES decides whether squall takes it (reason
 * collective_off where it leaves allreduce out). */
int squall__mpi_allreduce_interposed(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                     MPI_Comm comm);

/* squallMpiReduceScatterBlock for the MPI interposer's
 * MPI_Reduce_scatter_block, marked interposed as above (collective_off
 * where SQUALL_COLLECTIVES leaves reducescatter out). */
int squall__mpi_reduce_scatter_block_interposed(const void *sendbuf, void *recvbuf, int recvcount,
                                                MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);

/* The MPI interposer's MPI_Reduce_scatter: where every recvcounts[i] is
 * the same (the array is the same on every rank, as MPI requires), the
 * block call of that count, interposed; otherwise PMPI_Reduce_scatter,
 * counted as uneven_counts and logged at INFO once per communicator. A
 * call passed through is always MPI's own PMPI_Reduce_scatter. */
int squall__mpi_reduce_scatter_interposed(const void *sendbuf, void *recvbuf, const int recvcounts[],
                                          MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);

#endif

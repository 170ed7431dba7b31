/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_backend_mpi_half.h - the host backend's half and bfloat16 calls
 * (squallColl over the benchmark's communicator), used by
 * bench_backend_mpi.c for those types.
 */
#ifndef SQUALL_BENCH_BACKEND_MPI_HALF_H
#define SQUALL_BENCH_BACKEND_MPI_HALF_H

#include "bench_backend.h"

int bench_mpi_half_setup(MPI_Comm comm, FILE *err);
void bench_mpi_half_teardown(void);
/* plain: the 16-bit MPI sum itself; else through squallCollAllReduce.
 * 0, or -1 with why. */
int bench_mpi_half_allreduce(const void *send, void *recv, size_t count, bench_dtype t, bench_op op, int plain,
                             char *why, size_t len);
int bench_mpi_half_reset(void);
int bench_mpi_half_free_state(void);

#endif

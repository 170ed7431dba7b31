/* SPDX-License-Identifier: BSD-3-Clause */
/* nccl_comm.h - a communicator of the test NCCL over MPI_COMM_WORLD, for
 * the tests that drive squallAllReduce or the interposer. */
#ifndef SQUALL_TESTS_NCCL_COMM_H
#define SQUALL_TESTS_NCCL_COMM_H

#include <mpi.h>
#include <nccl.h>
#include <stdio.h>

/* Every rank calls it; a failure ends the job (the test cannot run). */
static inline ncclComm_t test_nccl_comm(int rank, int nranks) {
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) {
    fprintf(stderr, "ncclCommInitRank failed: is the host NCCL in LD_LIBRARY_PATH?\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return comm;
}

#endif

/*
 * topology_mpi.c - what the two-level all-reduce needs from MPI (see
 * engine/hierarchy.c): the node a rank is on (MPI_Comm_split_type with
 * MPI_COMM_TYPE_SHARED), sub-communicators (MPI_Comm_split) and a dense
 * reduce-scatter. PMPI_ names throughout, so that squall's MPI interposer
 * never sees these as user calls.
 */
#include "common/internal.h"

#include <limits.h>
#include <stdlib.h>

#include "transports/topology_mpi.h"

static squallResult_t fail_mpi(int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  PMPI_Error_string(rc, msg, &len);
  return squall__fail(squallSystemError, "%s failed: %s", what, msg);
}

static squallResult_t mpi_reduce_scatter_f32(void *ctx, const float *send, float *recv, size_t recvcount) {
  squall_mpi_ctx *c = ctx;
  SQ_RETURN_ERROR_IF(recvcount > INT_MAX, squallInvalidUsage,
                     "reduce-scatter block of %zu floats exceeds MPI's int count", recvcount);
  int rc = PMPI_Reduce_scatter_block(send, recv, (int)recvcount, MPI_FLOAT, MPI_SUM, c->comm);
  return rc == MPI_SUCCESS ? squallSuccess : fail_mpi(rc, "MPI_Reduce_scatter_block");
}

/* The node's identity: the lowest rank of this communicator that shares
 * memory with this one. */
static squallResult_t mpi_node_key(void *ctx, uint64_t *key) {
  squall_mpi_ctx *c = ctx;
  int rank, lowest, rc;
  MPI_Comm local;
  PMPI_Comm_rank(c->comm, &rank);
  rc = PMPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  rc = PMPI_Allreduce(&rank, &lowest, 1, MPI_INT, MPI_MIN, local);
  PMPI_Comm_free(&local);
  if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Allreduce (node key)");
  *key = (uint64_t)lowest;
  return squallSuccess;
}

typedef struct {
  squall_mpi_ctx mpi; /* first: the transport functions take it as their ctx */
} sub_ctx;

static void mpi_destroy(void *ctx) {
  sub_ctx *s = ctx;
  int done = 0;
  PMPI_Finalized(&done);
  if (!done) PMPI_Comm_free(&s->mpi.comm);
  free(s);
}

static squallResult_t mpi_split(void *ctx, int color, int key, squall_transport *sub) {
  squall_mpi_ctx *c = ctx;
  sub_ctx *s = calloc(1, sizeof *s);
  SQ_RETURN_ERROR_IF(s == NULL, squallSystemError, "out of memory for a node communicator");
  MPI_Comm comm;
  int rc = PMPI_Comm_split(c->comm, color, key, &comm);
  if (rc != MPI_SUCCESS) {
    free(s);
    return fail_mpi(rc, "MPI_Comm_split (node communicators)");
  }
  squallResult_t r = squall__transport_mpi_init(sub, &s->mpi, comm);
  if (r != squallSuccess) {
    PMPI_Comm_free(&comm);
    free(s);
    return r;
  }
  sub->destroy = mpi_destroy;
  return squallSuccess;
}

void squall__topology_mpi_attach(squall_transport *tr) {
  tr->reduce_scatter_f32 = mpi_reduce_scatter_f32;
  tr->node_key = mpi_node_key;
  tr->split = mpi_split;
  tr->destroy = NULL; /* set by mpi_split on the transports it makes */
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * topology_mpi.c - what the two-level all-reduce needs from MPI (see
 * engine/hierarchy.c): the node a rank is on (MPI_Comm_split_type with
 * MPI_COMM_TYPE_SHARED), sub-communicators (MPI_Comm_split) and a dense
 * reduce-scatter. PMPI_ names throughout, so that squall's MPI interposer
 * never sees these as user calls.
 */
#include "common/internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/fpenv.h"
#include "transports/topology_mpi.h"

/* MPI's own code goes back to the caller (transport_mpi.h). */
#define fail_mpi squall__transport_mpi_result

/* squall's own communicators return their errors to squall, which hands
 * them to the caller's communicator's error handler as it is at the call
 * (api_mpi.c): a split keeps the handler its parent had then, and a
 * program may set another one afterwards. */
static int errors_return(MPI_Comm comm) { return PMPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN); }

static squallResult_t mpi_reduce_scatter_f32(void *ctx, void *stream, const float *send, float *recv, size_t recvcount) {
  (void)stream; /* host memory */
  squall_mpi_ctx *c = ctx;
  SQ_RETURN_ERROR_IF(recvcount > INT_MAX, squallInvalidUsage,
                     "reduce-scatter block of %zu floats exceeds MPI's int count", recvcount);
  const unsigned fp = squall__fp_default_begin(); /* MPI sums in the caller's environment */
  int rc = PMPI_Reduce_scatter_block(send, recv, (int)recvcount, MPI_FLOAT, MPI_SUM, c->comm);
  squall__fp_default_end(fp);
  return rc == MPI_SUCCESS ? squallSuccess : fail_mpi(rc, "MPI_Reduce_scatter_block");
}

/* The node's identity: the lowest rank of this communicator that shares
 * memory with this one. */
static squallResult_t mpi_node_key(void *ctx, void *stream, uint64_t *key) {
  (void)stream;
  squall_mpi_ctx *c = ctx;
  int rank, lowest, rc;
  MPI_Comm local;
  PMPI_Comm_rank(c->comm, &rank);
  rc = PMPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  rc = errors_return(local);
  if (rc == MPI_SUCCESS) rc = PMPI_Allreduce(&rank, &lowest, 1, MPI_INT, MPI_MIN, local);
  PMPI_Comm_free(&local);
  if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Allreduce (node key)");
  *key = (uint64_t)lowest;
  return squallSuccess;
}

typedef struct {
  squall_mpi_ctx mpi; /* first: the transport functions take it as their ctx */
  float *ring;        /* 2 blocks for the ring reduce-scatter, kept for the next call */
  size_t ring_count;
} sub_ctx;

static void mpi_destroy(void *ctx) {
  sub_ctx *s = ctx;
  int done = 0;
  PMPI_Finalized(&done);
  if (!done) PMPI_Comm_free(&s->mpi.comm);
  squall__transport_mpi_fini(&s->mpi);
  free(s->ring);
  free(s);
}

/* MPI counts are int: blocks go in pieces. */
#define RING_CHUNK ((size_t)1 << 30)

/* The node's reduce-scatter as a ring: p-1 steps, each passing one block's
 * partial sum to the next rank, which adds its own. Open MPI's
 * MPI_Reduce_scatter_block took 4 to 10 times longer over shared memory
 * (it reduces to one rank, then scatters). Each block is summed on one
 * rank, in ring order from the rank after its owner, and then all-gathered,
 * so every rank still ends with the same bits. */
static squallResult_t ring_reduce_scatter_f32(void *ctx, void *stream, const float *send, float *recv, size_t s) {
  (void)stream;
  sub_ctx *c = ctx;
  int r, p;
  PMPI_Comm_rank(c->mpi.comm, &r);
  PMPI_Comm_size(c->mpi.comm, &p);
  if (p == 1) {
    memmove(recv, send, s * sizeof(float));
    return squallSuccess;
  }
  /* reserved before the call header (ring_reserve): allocating here, in
   * the middle of the collective, could leave this rank's peers waiting */
  SQ_RETURN_ERROR_IF(c->ring_count < s, squallInternalError,
                     "node reduce-scatter of %zu floats: only %zu reserved", s, c->ring_count);
  float *in = c->ring, *acc = c->ring + s;
  int next = (r + 1) % p, prev = (r + p - 1) % p, blk = prev;
  const float *out = send + (size_t)blk * s;
  for (int step = 1; step < p; step++) {
    for (size_t off = 0; off < s; off += RING_CHUNK) {
      int m = (int)(s - off < RING_CHUNK ? s - off : RING_CHUNK);
      int rc = PMPI_Sendrecv(out + off, m, MPI_FLOAT, next, 0x5a11, in + off, m, MPI_FLOAT, prev, 0x5a11,
                             c->mpi.comm, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Sendrecv (node reduce-scatter)");
    }
    blk = (blk + p - 1) % p;
    const float *mine = send + (size_t)blk * s;
    float *dst = step == p - 1 ? recv : acc;        /* the last block is this rank's */
    const unsigned fp = squall__fp_default_begin(); /* the definition's sums, whatever the caller set */
    for (size_t i = 0; i < s; i++) dst[i] = in[i] + mine[i];
    squall__fp_default_end(fp);
    out = acc;
  }
  return squallSuccess;
}

/* The ring's 2 blocks, grown here only: kept for the next call. The new
 * blocks come first, so a failure keeps the old ones. */
static squallResult_t ring_reserve(void *ctx, size_t s) {
  sub_ctx *c = ctx;
  if (c->ring_count >= s) return squallSuccess;
  SQ_RETURN_ERROR_IF(s > SIZE_MAX / (2 * sizeof(float)), squallInvalidArgument,
                     "node reduce-scatter of %zu floats overflows size_t", s);
  float *ring = malloc(2 * s * sizeof(float));
  SQ_RETURN_ERROR_IF(ring == NULL, squallSystemError, "out of memory for a %zu-float node reduce-scatter", s);
  free(c->ring);
  c->ring = ring;
  c->ring_count = s;
  return squallSuccess;
}

static squallResult_t mpi_split(void *ctx, void *stream, int color, int key, squall_transport *sub) {
  (void)stream;
  squall_mpi_ctx *c = ctx;
  /* The split first: it is collective, so no local failure may skip it
   * (the engine agrees on every rank's outcome afterwards). */
  MPI_Comm comm;
  int rc = PMPI_Comm_split(c->comm, color, key, &comm);
  if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Comm_split (node communicators)");
  rc = errors_return(comm);
  if (rc != MPI_SUCCESS) {
    PMPI_Comm_free(&comm);
    return fail_mpi(rc, "MPI_Comm_set_errhandler (node communicators)");
  }
  sub_ctx *s = calloc(1, sizeof *s);
  if (s == NULL) {
    PMPI_Comm_free(&comm);
    return squall__fail(squallSystemError, "out of memory for a node communicator");
  }
  squallResult_t r = squall__transport_mpi_init(sub, &s->mpi, comm);
  if (r != squallSuccess) {
    PMPI_Comm_free(&comm);
    free(s);
    return r;
  }
  sub->reduce_scatter_f32 = ring_reduce_scatter_f32; /* needs the scratch of sub_ctx */
  sub->reserve_reduce_scatter = ring_reserve;
  sub->destroy = mpi_destroy;
  return squallSuccess;
}

void squall__topology_mpi_attach(squall_transport *tr) {
  tr->reduce_scatter_f32 = mpi_reduce_scatter_f32;
  tr->reserve_reduce_scatter = NULL; /* MPI_Reduce_scatter_block: MPI's own memory */
  tr->node_key = mpi_node_key;
  tr->split = mpi_split;
  tr->destroy = NULL; /* set by mpi_split on the transports it makes */
}

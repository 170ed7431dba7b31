/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_backend_mpi.c - the host-memory backend: buffers from malloc,
 * all-reduce by squallMpiAllreduce (MPI_Allreduce's signature), plain by
 * PMPI_Allreduce. It runs anywhere MPI does, one rank per core. Half and
 * bfloat16, which MPI has no type for, go through squallColl over the
 * same communicator (bench_backend_mpi_half.c). The reduce-scatter:
 * squallMpiReduceScatterBlock, plain PMPI_Reduce_scatter_block.
 */
#include <stdlib.h>
#include <string.h>

#include "bench_backend.h"
#include "bench_backend_mpi_half.h"
#include "squall_mpi.h"

static int mpi_usable(char *why, size_t len) { return 1; }

/* squallMpiAllreduce compresses MPI_FLOAT, squallColl half and bfloat16;
 * double would pass through untouched, so there would be nothing to
 * compare. */
static int mpi_supports(bench_dtype t) { return t == BENCH_F32 || t == BENCH_F16 || t == BENCH_BF16; }

static int mpi_setup(MPI_Comm comm, FILE *err) { return bench_mpi_half_setup(comm, err); }
static void mpi_teardown(void) { bench_mpi_half_teardown(); }

static void *mpi_alloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }
static void mpi_release(void *p) { free(p); }

typedef int (*mpi_allreduce_fn)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);

static int run(mpi_allreduce_fn fn, const char *name, const void *send, void *recv, size_t count, bench_op op,
               MPI_Comm comm, char *why, size_t len) {
  int rc = fn(send, recv, (int)count, MPI_FLOAT, MPI_SUM, comm);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    /* squall's detail belongs to squall's call; after the plain one it
     * would be some earlier, unrelated text */
    int ours = fn == squallMpiAllreduce;
    snprintf(why, len, "%s(count=%zu) failed: %s%s%s%s", name, count, bench_mpi_error_text(rc, msg, sizeof msg),
             ours ? " (" : "", ours ? squallGetLastError() : "", ours ? ")" : "");
    return -1;
  }
  /* MPI has no average op: sum, then divide here, inside the timed call, as
   * a caller of MPI_Allreduce would. */
  if (op == BENCH_AVG) {
    int p = 1;
    MPI_Comm_size(comm, &p);
    float *r = recv, d = (float)p;
    for (size_t i = 0; i < count; i++) r[i] /= d;
  }
  return 0;
}

static int mpi_allreduce(const void *send, void *recv, size_t count, bench_dtype t, bench_op op, MPI_Comm comm,
                         char *why, size_t len) {
  if (t != BENCH_F32) return bench_mpi_half_allreduce(send, recv, count, t, op, 0, why, len);
  return run(squallMpiAllreduce, "squallMpiAllreduce", send, recv, count, op, comm, why, len);
}

static int mpi_plain_allreduce(const void *send, void *recv, size_t count, bench_dtype t, bench_op op,
                               MPI_Comm comm, char *why, size_t len) {
  if (t != BENCH_F32) return bench_mpi_half_allreduce(send, recv, count, t, op, 1, why, len);
  return run(PMPI_Allreduce, "PMPI_Allreduce", send, recv, count, op, comm, why, len);
}

/* --coll reducescatter: count is the send buffer's floats, a multiple
 * of the ranks (bench_coll_sizes); each rank receives count/P. */
typedef int (*mpi_rs_fn)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);

static int run_rs(mpi_rs_fn fn, const char *name, const void *send, void *recv, size_t count, bench_op op,
                  MPI_Comm comm, char *why, size_t len) {
  int p = 1;
  MPI_Comm_size(comm, &p);
  size_t rc = count / (size_t)p;
  int err = fn(send, recv, (int)rc, MPI_FLOAT, MPI_SUM, comm);
  if (err != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int ours = fn == squallMpiReduceScatterBlock;
    snprintf(why, len, "%s(recvcount=%zu) failed: %s%s%s%s", name, rc, bench_mpi_error_text(err, msg, sizeof msg),
             ours ? " (" : "", ours ? squallGetLastError() : "", ours ? ")" : "");
    return -1;
  }
  if (op == BENCH_AVG) { /* as run(): sum, then divide, inside the timed call */
    float *r = recv, d = (float)p;
    for (size_t i = 0; i < rc; i++) r[i] /= d;
  }
  return 0;
}

static int mpi_reduce_scatter(const void *send, void *recv, size_t count, bench_dtype t, bench_op op, MPI_Comm comm,
                              char *why, size_t len) {
  return run_rs(squallMpiReduceScatterBlock, "squallMpiReduceScatterBlock", send, recv, count, op, comm, why, len);
}

static int mpi_plain_reduce_scatter(const void *send, void *recv, size_t count, bench_dtype t, bench_op op,
                                    MPI_Comm comm, char *why, size_t len) {
  return run_rs(PMPI_Reduce_scatter_block, "PMPI_Reduce_scatter_block", send, recv, count, op, comm, why, len);
}

/* squallMpiReduceScatterBlock compresses MPI_FLOAT only (squall_mpi.h), and
 * squallColl has no reduce-scatter: 16-bit types would pass through. */
static int mpi_supports_reduce_scatter(bench_dtype t) { return t == BENCH_F32; }

/* Both entry points' state: squallMpiAllreduce's on the communicator,
 * squallColl's of the 16-bit types. */
static int mpi_reset_residuals(MPI_Comm comm) {
  int a = squallMpiResetResiduals(comm), b = bench_mpi_half_reset();
  return a == MPI_SUCCESS && b == 0 ? 0 : -1;
}

static int mpi_free_state(MPI_Comm comm) {
  int a = squallMpiCommFree(comm), b = bench_mpi_half_free_state();
  return a == MPI_SUCCESS && b == 0 ? 0 : -1;
}

const bench_backend bench_backend_mpi = {
    .name = "mpi",
    .memory = "host memory",
    .usable = mpi_usable,
    .supports = mpi_supports,
    .setup = mpi_setup,
    .teardown = mpi_teardown,
    .alloc = mpi_alloc,
    .release = mpi_release,
    .host_accessible = 1,
    .upload = NULL,
    .download = NULL,
    .allreduce = mpi_allreduce,
    .plain_allreduce = mpi_plain_allreduce,
    .reduce_scatter = mpi_reduce_scatter,
    .plain_reduce_scatter = mpi_plain_reduce_scatter,
    .supports_reduce_scatter = mpi_supports_reduce_scatter,
    .reset_residuals = mpi_reset_residuals,
    .free_state = mpi_free_state,
};

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_backend_mpi_half.c - half and bfloat16 on the host-memory backend.
 * MPI has no 16-bit float type, so squallMpiAllreduce takes MPI_FLOAT
 * only; squall compresses 16-bit tensors on the host through squallColl
 * instead, here over the benchmark's own MPI communicator (its profiling
 * entry points, so that an interposer does not catch them). The plain
 * all-reduce of 16-bit values is MPI_UINT16_T with a user-defined sum
 * that adds in float and rounds each partial sum back to the type, as
 * NCCL's 16-bit sum does.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_backend_mpi_half.h"
#include "squall_coll.h"

static MPI_Comm half_comm = MPI_COMM_NULL;
static squallColl_t coll;
static MPI_Op sum_f16 = MPI_OP_NULL, sum_bf16 = MPI_OP_NULL;

/* in and inout are `*len` 16-bit codes of the type. */
static void sum16(bench_dtype t, const void *in, void *inout, int n) {
  float a[256], b[256];
  for (int i = 0; i < n; i += 256) {
    int m = n - i < 256 ? n - i : 256;
    bench_from_type(t, (const uint16_t *)in + i, a, (size_t)m);
    bench_from_type(t, (uint16_t *)inout + i, b, (size_t)m);
    for (int j = 0; j < m; j++) b[j] += a[j];
    bench_to_type(t, b, (uint16_t *)inout + i, (size_t)m);
  }
}

static void op_f16(void *in, void *inout, int *len, MPI_Datatype *dt) { sum16(BENCH_F16, in, inout, *len); }
static void op_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) { sum16(BENCH_BF16, in, inout, *len); }

/* recv /= p in the type (MPI has no average op). */
static void divide(void *recv, size_t count, bench_dtype t, int p) {
  float v[256];
  size_t es = bench_dtype_size(t);
  for (size_t i = 0; i < count; i += 256) {
    size_t m = count - i < 256 ? count - i : 256;
    char *at = (char *)recv + i * es;
    bench_from_type(t, at, v, m);
    for (size_t j = 0; j < m; j++) v[j] /= (float)p;
    bench_to_type(t, v, at, m);
  }
}

/* The plain all-reduce of count elements of a 16-bit type t. */
static int plain16(const void *send, void *recv, size_t count, bench_dtype t, bench_op op) {
  if (count > INT_MAX) return MPI_ERR_COUNT;
  int rc = PMPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_UINT16_T,
                          t == BENCH_F16 ? sum_f16 : sum_bf16, half_comm);
  if (rc == MPI_SUCCESS && op == BENCH_AVG) {
    int p = 1;
    MPI_Comm_size(half_comm, &p);
    divide(recv, count, t, p);
  }
  return rc;
}

/* squallColl's collectives over half_comm: what squall asks for (float32
 * sum and max, 16-bit sums, int64 min for its call header) and a passed
 * call's own type and op. */
static int coll_allreduce(void *ctx, const void *send, void *recv, size_t count, squallDataType_t type,
                          squallRedOp_t op, void *stream) {
  if (type == squallFloat16 || type == squallBfloat16) {
    if (op != squallSum && op != squallAvg) return MPI_ERR_OP;
    return plain16(send, recv, count, type == squallFloat16 ? BENCH_F16 : BENCH_BF16,
                   op == squallAvg ? BENCH_AVG : BENCH_SUM);
  }
  if (count > INT_MAX) return MPI_ERR_COUNT;
  MPI_Datatype dt = type == squallInt64 ? MPI_INT64_T : MPI_FLOAT;
  MPI_Op mop = op == squallMax ? MPI_MAX : op == squallMin ? MPI_MIN
                                                           : MPI_SUM;
  int rc = PMPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, dt, mop, half_comm);
  if (rc == MPI_SUCCESS && op == squallAvg && type == squallFloat32) {
    int p = 1;
    MPI_Comm_size(half_comm, &p);
    for (size_t i = 0; i < count; i++) ((float *)recv)[i] /= (float)p;
  }
  return rc;
}

static int coll_allgather(void *ctx, const void *send, void *recv, size_t bytes, void *stream) {
  if (bytes > INT_MAX) return MPI_ERR_COUNT;
  int rank = 0;
  MPI_Comm_rank(half_comm, &rank);
  int in_place = send == (const char *)recv + (size_t)rank * bytes;
  return PMPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                        half_comm);
}

static int coll_alltoall(void *ctx, const void *send, void *recv, size_t bytes, void *stream) {
  if (bytes > INT_MAX) return MPI_ERR_COUNT;
  return PMPI_Alltoall(send == recv ? MPI_IN_PLACE : send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                       half_comm);
}

static int create_coll(FILE *err) {
  squallCollectives_t c = SQUALL_COLLECTIVES_INIT;
  MPI_Comm_rank(half_comm, &c.rank);
  MPI_Comm_size(half_comm, &c.nranks);
  c.allReduce = coll_allreduce;
  c.allGather = coll_allgather;
  c.allToAll = coll_alltoall;
  /* config NULL: the process's, which the driver sets per codec */
  if (squallCollCreate(&c, NULL, &coll) != squallSuccess) {
    if (err) fprintf(err, "squall-bench: squallCollCreate failed: %s\n", squallGetLastError());
    return -1;
  }
  return 0;
}

int bench_mpi_half_setup(MPI_Comm comm, FILE *err) {
  half_comm = comm;
  if (MPI_Op_create(op_f16, 1, &sum_f16) != MPI_SUCCESS || MPI_Op_create(op_bf16, 1, &sum_bf16) != MPI_SUCCESS) {
    if (err) fprintf(err, "squall-bench: MPI_Op_create of the 16-bit sums failed\n");
    return -1;
  }
  return create_coll(err);
}

void bench_mpi_half_teardown(void) {
  squallCollDestroy(coll);
  coll = NULL;
  if (sum_f16 != MPI_OP_NULL) MPI_Op_free(&sum_f16);
  if (sum_bf16 != MPI_OP_NULL) MPI_Op_free(&sum_bf16);
  half_comm = MPI_COMM_NULL;
}

int bench_mpi_half_allreduce(const void *send, void *recv, size_t count, bench_dtype t, bench_op op, int plain,
                             char *why, size_t len) {
  if (plain) {
    int rc = plain16(send, recv, count, t, op);
    if (rc == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING];
    snprintf(why, len, "PMPI_Allreduce(count=%zu, 16-bit sum) failed: %s", count,
             bench_mpi_error_text(rc, msg, sizeof msg));
    return -1;
  }
  squallResult_t r = squallCollAllReduce(coll, send, recv, count, t == BENCH_F16 ? squallFloat16 : squallBfloat16,
                                         op == BENCH_AVG ? squallAvg : squallSum, NULL, NULL);
  if (r == squallSuccess) return 0;
  snprintf(why, len, "squallCollAllReduce(count=%zu, %s) failed: %s", count, bench_dtype_name(t),
           squallGetLastError());
  return -1;
}

int bench_mpi_half_reset(void) { return squallCollResetResiduals(coll) == squallSuccess ? 0 : -1; }

/* squallColl keeps no per-size state apart from its engine: a new one
 * starts the next size afresh, as squallMpiCommFree does for MPI_FLOAT. */
int bench_mpi_half_free_state(void) {
  squallCollDestroy(coll);
  coll = NULL;
  return create_coll(stderr);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * coll.c - collectives and PreMulSum operators, on host buffers.
 *
 * Every collective completes before it returns; the stream is ignored.
 * Reductions gather all contributions and combine them locally in rank
 * order (reduce.c), so all ranks hold bit-identical results, as with NCCL,
 * whatever algorithm MPI picks. That costs nranks times the memory, which
 * is fine at test sizes. Argument checks follow NCCL's order: comm, revoked,
 * ready, root, datatype, operator.
 */
#include "fakenccl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ncclResult_t coll_check(const struct ncclComm *comm, const char *fn) {
  ncclResult_t r = fake__comm_check(comm, fn);
  if (r != ncclSuccess) return r;
  if (comm->revoked) return fake__error(ncclInvalidUsage, "%s: comm %p was revoked", fn, (const void *)comm);
  if (comm->finalized) return fake__error(ncclInvalidUsage, "%s: comm %p is finalized", fn, (const void *)comm);
  return fake__comm_ready(comm, fn);
}

static ncclResult_t root_check(const struct ncclComm *comm, int root, const char *fn) {
  if (root < 0 || root >= comm->nranks)
    return fake__error(ncclInvalidArgument, "%s: root %d (accepted: 0..%d)", fn, root, comm->nranks - 1);
  return ncclSuccess;
}

static ncclResult_t type_check(ncclDataType_t t, const char *fn) {
  if (!fake__type_size(t))
    return fake__error(ncclInvalidArgument, "%s: datatype %d is not a ncclDataType_t (accepted: 0..%d)", fn, (int)t,
                       ncclNumTypes - 1);
  return ncclSuccess;
}

/* MPI counts are int: one rank's share must fit. */
static ncclResult_t share_bytes(size_t count, ncclDataType_t t, const char *fn, int *bytes) {
  size_t b = count * fake__type_size(t);
  if (count > (size_t)INT_MAX || b > (size_t)INT_MAX)
    return fake__error(ncclInvalidArgument, "%s: count %zu of %s is over the test NCCL's limit of %d bytes", fn,
                       count, fake__type_name(t), INT_MAX);
  *bytes = (int)b;
  return ncclSuccess;
}

static ncclResult_t buf_check(const void *p, const char *name, const char *fn) {
  if (!p) return fake__error(ncclInvalidArgument, "%s: %s is NULL", fn, name);
  return ncclSuccess;
}

static ncclResult_t mpi_check(int err, const char *call, const char *fn) {
  if (err == MPI_SUCCESS) return ncclSuccess;
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(err, msg, &len);
  return fake__error(ncclSystemError, "%s: %s failed: %s", fn, call, msg);
}

#define TRY(call)                             \
  do {                                        \
    ncclResult_t try_r_ = (call);             \
    if (try_r_ != ncclSuccess) return try_r_; \
  } while (0)

/* The caller's own contribution, pre-multiplied when the operator says so
 * (into *scratch, which the caller frees). */
static ncclResult_t own_input(const void *sendbuff, size_t count, ncclDataType_t t, const fake_redop *ro,
                              void **scratch, const void **mine, const char *fn) {
  *scratch = NULL;
  *mine = sendbuff;
  if (!ro->premul) return ncclSuccess;
  *scratch = malloc(count * fake__type_size(t));
  if (!*scratch) return fake__error(ncclSystemError, "%s: out of memory", fn);
  fake__scale(*scratch, sendbuff, count, t, ro->scalar);
  *mine = *scratch;
  return ncclSuccess;
}

/* Fault injection for squall's failure-policy tests: FAKENCCL_FAULT set to
 * "fail:N" or "corrupt:N" makes the N-th all-reduce or all-gather of this
 * process, counted from when the variable last changed value, complete on
 * every rank as usual and then either return ncclSystemError or overwrite
 * what it received with 0xff bytes (out-of-range indices, NaN values).
 * Completing first keeps the ranks in step, as a real failure detected
 * after the transfer would. FAKENCCL_FAULT_RANK=r limits it to one rank. */
static ncclResult_t inject_fault(const struct ncclComm *comm, ncclResult_t r, void *recv, size_t bytes) {
  static char armed[64];
  static long seen;
  const char *v = getenv("FAKENCCL_FAULT");
  if (v == NULL) v = "";
  if (strncmp(v, armed, sizeof armed - 1) != 0) { /* a new setting: count from zero */
    snprintf(armed, sizeof armed, "%s", v);
    seen = 0;
  }
  if (r != ncclSuccess || !armed[0]) return r;
  const char *only = getenv("FAKENCCL_FAULT_RANK");
  if (only && *only && atoi(only) != comm->rank) return r;
  long at = 0;
  int corrupt = !strncmp(armed, "corrupt:", 8);
  if (!corrupt && strncmp(armed, "fail:", 5)) return r;
  at = atol(strchr(armed, ':') + 1);
  if (++seen != at) return r;
  if (corrupt) {
    memset(recv, 0xff, bytes);
    return ncclSuccess;
  }
  return fake__error(ncclSystemError, "injected failure (FAKENCCL_FAULT=%s)", armed);
}

FAKE_API ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const char *fn = "ncclAllReduce";
  fake_redop ro;
  int bytes;
  (void)stream;
  TRY(coll_check(comm, fn));
  TRY(fake__redop_resolve(comm, op, datatype, fn, &ro));
  TRY(share_bytes(count, datatype, fn, &bytes));
  if (count == 0) return ncclSuccess;
  TRY(buf_check(sendbuff, "sendbuff", fn));
  TRY(buf_check(recvbuff, "recvbuff", fn));
  void *scratch;
  const void *mine;
  TRY(own_input(sendbuff, count, datatype, &ro, &scratch, &mine, fn));
  char *all = malloc((size_t)comm->nranks * (size_t)bytes);
  ncclResult_t r = all ? ncclSuccess : fake__error(ncclSystemError, "%s: out of memory", fn);
  if (r == ncclSuccess)
    r = mpi_check(MPI_Allgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, comm->mpi), "MPI_Allgather", fn);
  if (r == ncclSuccess) fake__combine(recvbuff, all, (size_t)bytes, comm->nranks, count, datatype, &ro);
  if (r == ncclSuccess) r = fake__link_delay(2.0 * (comm->nranks - 1) / comm->nranks * bytes); /* a ring's */
  free(all);
  free(scratch);
  return fake__call_result(comm, inject_fault(comm, r, recvbuff, (size_t)bytes));
}
FAKE_ALIAS(ncclAllReduce);

FAKE_API ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  const char *fn = "ncclReduce";
  fake_redop ro;
  int bytes;
  (void)stream;
  TRY(coll_check(comm, fn));
  TRY(root_check(comm, root, fn));
  TRY(fake__redop_resolve(comm, op, datatype, fn, &ro));
  TRY(share_bytes(count, datatype, fn, &bytes));
  if (count == 0) return ncclSuccess;
  TRY(buf_check(sendbuff, "sendbuff", fn));
  if (comm->rank == root) TRY(buf_check(recvbuff, "recvbuff", fn)); /* used on the root only */
  void *scratch;
  const void *mine;
  TRY(own_input(sendbuff, count, datatype, &ro, &scratch, &mine, fn));
  char *all = comm->rank == root ? malloc((size_t)comm->nranks * (size_t)bytes) : NULL;
  ncclResult_t r = all || comm->rank != root ? ncclSuccess : fake__error(ncclSystemError, "%s: out of memory", fn);
  if (r == ncclSuccess)
    r = mpi_check(MPI_Gather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, root, comm->mpi), "MPI_Gather", fn);
  if (r == ncclSuccess && all) fake__combine(recvbuff, all, (size_t)bytes, comm->nranks, count, datatype, &ro);
  free(all);
  free(scratch);
  return r;
}
FAKE_ALIAS(ncclReduce);

FAKE_API ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  const char *fn = "ncclReduceScatter";
  fake_redop ro;
  int bytes;
  (void)stream;
  TRY(coll_check(comm, fn));
  TRY(fake__redop_resolve(comm, op, datatype, fn, &ro));
  TRY(share_bytes(recvcount, datatype, fn, &bytes));
  if (recvcount == 0) return ncclSuccess;
  TRY(buf_check(sendbuff, "sendbuff", fn));
  TRY(buf_check(recvbuff, "recvbuff", fn));
  void *scratch;
  const void *mine;
  TRY(own_input(sendbuff, recvcount * (size_t)comm->nranks, datatype, &ro, &scratch, &mine, fn));
  /* Block r of every rank's input goes to rank r; in place (recvbuff is
   * block `rank` of sendbuff) is safe because all input is read first. */
  char *mine_blocks = malloc((size_t)comm->nranks * (size_t)bytes);
  ncclResult_t r = mine_blocks ? ncclSuccess : fake__error(ncclSystemError, "%s: out of memory", fn);
  if (r == ncclSuccess)
    r = mpi_check(MPI_Alltoall(mine, bytes, MPI_BYTE, mine_blocks, bytes, MPI_BYTE, comm->mpi), "MPI_Alltoall", fn);
  if (r == ncclSuccess)
    fake__combine(recvbuff, mine_blocks, (size_t)bytes, comm->nranks, recvcount, datatype, &ro);
  if (r == ncclSuccess) r = fake__link_delay((double)(comm->nranks - 1) * bytes);
  free(mine_blocks);
  free(scratch);
  return fake__call_result(comm, r);
}
FAKE_ALIAS(ncclReduceScatter);

FAKE_API ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                     ncclComm_t comm, cudaStream_t stream) {
  const char *fn = "ncclAllGather";
  int bytes;
  (void)stream;
  TRY(coll_check(comm, fn));
  TRY(type_check(datatype, fn));
  TRY(share_bytes(sendcount, datatype, fn, &bytes));
  if (sendcount == 0) return ncclSuccess;
  TRY(buf_check(sendbuff, "sendbuff", fn));
  TRY(buf_check(recvbuff, "recvbuff", fn));
  /* In place, as NCCL defines it: sendbuff is this rank's block of recvbuff. */
  const void *src = sendbuff == (char *)recvbuff + (size_t)comm->rank * (size_t)bytes ? MPI_IN_PLACE : sendbuff;
  ncclResult_t r = mpi_check(MPI_Allgather(src, bytes, MPI_BYTE, recvbuff, bytes, MPI_BYTE, comm->mpi),
                             "MPI_Allgather", fn);
  if (r == ncclSuccess) r = fake__link_delay((double)(comm->nranks - 1) * bytes);
  return fake__call_result(comm, inject_fault(comm, r, recvbuff, (size_t)bytes * (size_t)comm->nranks));
}
FAKE_ALIAS(ncclAllGather);

FAKE_API ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                     int root, ncclComm_t comm, cudaStream_t stream) {
  const char *fn = "ncclBroadcast";
  int bytes;
  (void)stream;
  TRY(coll_check(comm, fn));
  TRY(root_check(comm, root, fn));
  TRY(type_check(datatype, fn));
  TRY(share_bytes(count, datatype, fn, &bytes));
  if (count == 0) return ncclSuccess;
  if (comm->rank == root) TRY(buf_check(sendbuff, "sendbuff", fn)); /* read on the root only */
  TRY(buf_check(recvbuff, "recvbuff", fn));
  if (comm->rank == root && sendbuff != recvbuff) memmove(recvbuff, sendbuff, (size_t)bytes);
  return mpi_check(MPI_Bcast(recvbuff, bytes, MPI_BYTE, root, comm->mpi), "MPI_Bcast", fn);
}
FAKE_ALIAS(ncclBroadcast);

/* Like NCCL, the legacy in-place form calls the exported ncclBroadcast:
 * an interposer sees that re-entry, as it would with the real library. */
FAKE_API ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
FAKE_ALIAS(ncclBcast);

/* ---------------------------------------------------------------- PreMulSum */
FAKE_API ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                                ncclScalarResidence_t residence, ncclComm_t comm) {
  const char *fn = "ncclRedOpCreatePreMulSum";
  TRY(fake__comm_ready(comm, fn));
  TRY(buf_check(op, "op", fn));
  TRY(buf_check(scalar, "scalar", fn));
  TRY(type_check(datatype, fn));
  if (datatype == ncclFloat8e4m3 || datatype == ncclFloat8e5m2)
    return fake__error(ncclInvalidArgument, "%s: datatype %s: fp8 reductions are not implemented by the test NCCL",
                       fn, fake__type_name(datatype));
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return fake__error(ncclInvalidArgument, "%s: residence %d (accepted: ncclScalarDevice, ncclScalarHostImmediate)",
                       fn, (int)residence);
  int ix = 0;
  while (ix < comm->nops && comm->ops[ix].in_use) ix++; /* reuse a destroyed slot */
  if (ix == comm->nops) {
    fake_premul *grown = realloc(comm->ops, (size_t)(comm->nops + 1) * sizeof *grown);
    if (!grown) return fake__error(ncclSystemError, "%s: out of memory", fn);
    comm->ops = grown;
    comm->nops++;
  }
  fake_premul *p = &comm->ops[ix];
  memset(p, 0, sizeof *p);
  p->in_use = 1;
  p->datatype = datatype;
  p->residence = residence;
  if (residence == ncclScalarHostImmediate)
    memcpy(p->value, scalar, fake__type_size(datatype)); /* copied now: the caller may reuse it */
  else
    p->ptr = scalar; /* read at every call */
  *op = (ncclRedOp_t)((int)ncclNumOps + ix);
  return ncclSuccess;
}
FAKE_ALIAS(ncclRedOpCreatePreMulSum);

FAKE_API ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char *fn = "ncclRedOpDestroy";
  if ((int)op >= 0 && (int)op < (int)ncclNumOps)
    return fake__error(ncclInvalidArgument, "%s: operation %d is built in and cannot be destroyed", fn, (int)op);
  if ((int)op < 0 || op > ncclMaxRedOp)
    return fake__error(ncclInvalidArgument, "%s: operation %d is invalid (accepted: %d..%d)", fn, (int)op,
                       (int)ncclNumOps, (int)ncclMaxRedOp);
  TRY(fake__comm_check(comm, fn));
  int ix = (int)op - (int)ncclNumOps;
  if (ix >= comm->nops || !comm->ops[ix].in_use)
    return fake__error(ncclInvalidArgument, "%s: operation %d is unknown to communicator %p", fn, (int)op,
                       (void *)comm);
  comm->ops[ix].in_use = 0;
  return ncclSuccess;
}
FAKE_ALIAS(ncclRedOpDestroy);

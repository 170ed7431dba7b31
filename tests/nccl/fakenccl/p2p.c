/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * p2p.c - ncclSend/ncclRecv for the test NCCL. Unlike the collectives,
 * point-to-point calls cannot run as soon as they are called (every rank
 * sending first would wait forever on a peer that has not reached its
 * receive), so inside a group they are queued and posted together, as
 * non-blocking MPI operations, when the outermost ncclGroupEnd runs
 * (group.c calls fake__p2p_flush). MPI keeps the order of messages between
 * two ranks, as NCCL does. Outside a group a call is posted and waited for
 * at once.
 */
#include "fakenccl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P2P_TAG 0x5a11

typedef struct {
  int is_send, peer, bytes;
  void *buf;
  struct ncclComm *comm;
} p2p_op;

static _Thread_local p2p_op *queue;
static _Thread_local int queued, queue_cap;

/* Fault injection for exchanges built of send/recv (squall's all-to-all):
 * FAKENCCL_FAULT set to "p2p-fail:N" or "p2p-corrupt:N" makes the N-th
 * batch of this process (a group's send/recv, posted at its end, or one
 * call outside a group), counted from when the variable last changed
 * value, complete on every rank and then return ncclSystemError, or
 * overwrite what it received with 0xff bytes. FAKENCCL_FAULT_RANK=r limits
 * it to one rank. The collectives' "fail:N" and "corrupt:N" (coll.c) count
 * apart, and neither counts the other's. */
static ncclResult_t inject_p2p_fault(p2p_op *ops, int n) {
  static char armed[64];
  static long seen;
  const char *v = getenv("FAKENCCL_FAULT");
  if (v == NULL) v = "";
  if (strncmp(v, armed, sizeof armed - 1) != 0) {
    snprintf(armed, sizeof armed, "%s", v);
    seen = 0;
  }
  int corrupt = !strncmp(armed, "p2p-corrupt:", 12);
  if (!corrupt && strncmp(armed, "p2p-fail:", 9)) return ncclSuccess;
  const char *only = getenv("FAKENCCL_FAULT_RANK");
  if (only && *only && atoi(only) != ops[0].comm->rank) return ncclSuccess;
  if (++seen != atol(strchr(armed, ':') + 1)) return ncclSuccess;
  if (!corrupt) return fake__error(ncclSystemError, "injected send/recv failure (FAKENCCL_FAULT=%s)", armed);
  for (int i = 0; i < n; i++)
    if (!ops[i].is_send) memset(ops[i].buf, 0xff, (size_t)ops[i].bytes);
  return ncclSuccess;
}

static ncclResult_t post_all(p2p_op *ops, int n) {
  if (n == 0) return ncclSuccess;
  MPI_Request *req = malloc(sizeof *req * (size_t)n);
  if (req == NULL) return fake__error(ncclSystemError, "ncclGroupEnd: out of memory for %d send/recv", n);
  int err = MPI_SUCCESS;
  for (int i = 0; i < n; i++) {
    req[i] = MPI_REQUEST_NULL;
    if (err != MPI_SUCCESS) continue;
    err = ops[i].is_send ? MPI_Isend(ops[i].buf, ops[i].bytes, MPI_BYTE, ops[i].peer, P2P_TAG, ops[i].comm->mpi, &req[i])
                         : MPI_Irecv(ops[i].buf, ops[i].bytes, MPI_BYTE, ops[i].peer, P2P_TAG, ops[i].comm->mpi, &req[i]);
  }
  int werr = MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
  free(req);
  double sent = 0;
  for (int i = 0; i < n; i++) sent += ops[i].is_send && ops[i].peer != ops[i].comm->rank ? ops[i].bytes : 0;
  ncclResult_t r = fake__link_delay(sent);
  if (err != MPI_SUCCESS || werr != MPI_SUCCESS)
    return fake__error(ncclSystemError, "send/recv: MPI_Isend/MPI_Irecv/MPI_Waitall failed");
  if (r == ncclSuccess) r = inject_p2p_fault(ops, n);
  if (r != ncclSuccess) return r;
  /* in progress where any communicator says so */
  for (int i = 0; i < n; i++)
    if (fake__call_result(ops[i].comm, ncclSuccess) == ncclInProgress) r = ncclInProgress;
  return r;
}

ncclResult_t fake__p2p_flush(void) {
  ncclResult_t r = post_all(queue, queued);
  queued = 0;
  return r;
}

static ncclResult_t p2p(int is_send, void *buf, size_t count, ncclDataType_t datatype, int peer,
                        ncclComm_t comm, const char *fn) {
  ncclResult_t r = fake__comm_ready(comm, fn);
  if (r != ncclSuccess) return r;
  size_t es = fake__type_size(datatype);
  if (es == 0) return fake__error(ncclInvalidArgument, "%s: invalid datatype %d", fn, (int)datatype);
  if (peer < 0 || peer >= comm->nranks)
    return fake__error(ncclInvalidArgument, "%s: peer %d is not a rank of a %d-rank communicator", fn, peer,
                       comm->nranks);
  if (count > (size_t)INT_MAX / es)
    return fake__error(ncclInvalidArgument, "%s: %zu elements exceed the test NCCL's %d-byte limit", fn, count,
                       INT_MAX);
  if (count > 0 && buf == NULL) return fake__error(ncclInvalidArgument, "%s: buffer is NULL", fn);
  p2p_op op = {is_send, peer, (int)(count * es), buf, comm};
  if (fake__group_depth() == 0) return post_all(&op, 1);
  if (queued == queue_cap) {
    int cap = queue_cap ? 2 * queue_cap : 64;
    p2p_op *q = realloc(queue, sizeof *q * (size_t)cap);
    if (q == NULL) return fake__error(ncclSystemError, "%s: out of memory queueing the operation", fn);
    queue = q;
    queue_cap = cap;
  }
  queue[queued++] = op;
  return ncclSuccess;
}

FAKE_API ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return p2p(1, (void *)sendbuff, count, datatype, peer, comm, "ncclSend");
}
FAKE_ALIAS(ncclSend);

FAKE_API ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return p2p(0, recvbuff, count, datatype, peer, comm, "ncclRecv");
}
FAKE_ALIAS(ncclRecv);

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * dev_coll.c - the collectives, send/receive and groups of the
 * device-memory test NCCL. Each call checks its arguments, then goes on
 * the stream (dev_stream.c) with a staging layout that keeps NCCL's
 * in-place forms in place. Collectives inside a group are issued at once
 * (every rank issues them in the same order); sends and receives wait for
 * the outermost ncclGroupEnd and go as one exchange per communicator, in
 * which every rank of that communicator must take part (as in squall's
 * all-to-all); a send or receive outside a group is a group of its own.
 * FAKENCCL_FAULT and FAKENCCL_NS_PER_BYTE act as xchg.h says.
 */
#include "devnccl.h"

#include <stdint.h>
#include <stdlib.h>

#define TRY(call)                             \
  do {                                        \
    ncclResult_t try_r_ = (call);             \
    if (try_r_ != ncclSuccess) return try_r_; \
  } while (0)

static dev_task *task_new(struct ncclComm *comm, const char *fn, int nin, int nout) {
  dev_task *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->comm = comm;
  t->fn = fn;
  t->in = calloc((size_t)nin + 1, sizeof *t->in);
  t->out = calloc((size_t)nout + 1, sizeof *t->out);
  if (!t->in || !t->out) {
    free(t->in), free(t->out), free(t);
    return NULL;
  }
  return t;
}

/* ------------------------------------------------------------ collectives */
static void setup_coll(dev_task *t, char *base) {
  t->op.in = base + t->in[0].off;
  t->op.out = base + t->out[0].off;
}

/* A collective moving in_bytes from d_in to stage + in_off, and out_bytes
 * from stage + out_off to d_out. */
static ncclResult_t collective(struct ncclComm *comm, cudaStream_t stream, dnx_op op, const char *fn,
                               const void *d_in, size_t in_off, size_t in_bytes, void *d_out, size_t out_off,
                               size_t out_bytes, size_t stage) {
  char err[512];
  int pr = dnx_prepare(comm->seg, &op, err, sizeof err);
  if (pr == DNX_EINVAL) return dev__error(ncclInvalidArgument, "%s: %s", fn, err);
  dev_task *t = task_new(comm, fn, 1, 1);
  if (!t) return dev__error(ncclSystemError, "%s: out of memory", fn);
  t->op = op;
  t->nin = t->nout = 1;
  t->in[0] = (dev_copy){(void *)d_in, in_off, in_bytes};
  t->out[0] = (dev_copy){d_out, out_off, out_bytes};
  TRY(dev__enqueue(t, stage, stream, setup_coll));
  /* an injected failure: the call ran on every rank, and now fails */
  return pr == DNX_OK ? ncclSuccess : dev__error((ncclResult_t)pr, "%s: %s", fn, err);
}

/* Checks shared by the collectives; the bytes of count elements in *bytes. */
static ncclResult_t coll_args(const struct ncclComm *comm, size_t count, ncclDataType_t type, int blocks,
                              const char *fn, size_t *bytes) {
  TRY(dev__comm_ready(comm, fn));
  size_t es = dnx_type_size((int)type);
  if (es == 0)
    return dev__error(ncclInvalidArgument, "%s: datatype %d (the device test NCCL has 0..%d)", fn, (int)type,
                      DNX_NUM_TYPES - 1);
  if (count > SIZE_MAX / es / (size_t)blocks)
    return dev__error(ncclInvalidArgument, "%s: count %zu of %zu-byte elements overflows", fn, count, es);
  *bytes = count * es;
  return ncclSuccess;
}

static ncclResult_t bufs(const void *a, const void *b, const char *fn) {
  if (!a || !b) return dev__error(ncclInvalidArgument, "%s: %s is NULL", fn, !a ? "sendbuff" : "recvbuff");
  return ncclSuccess;
}

DEV_API ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const char *fn = "ncclAllReduce";
  size_t b;
  TRY(coll_args(comm, count, datatype, 1, fn, &b));
  if (count == 0) return ncclSuccess;
  TRY(bufs(sendbuff, recvbuff, fn));
  dnx_op o = {.kind = DNX_ALLREDUCE, .type = (int)datatype, .op = (int)op, .count = count};
  return collective(comm, stream, o, fn, sendbuff, 0, b, recvbuff, 0, b, b);
}
DEV_ALIAS(ncclAllReduce);

DEV_API ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                    ncclComm_t comm, cudaStream_t stream) {
  const char *fn = "ncclAllGather";
  size_t b;
  TRY(dev__comm_ready(comm, fn)); /* before comm->nranks is read */
  TRY(coll_args(comm, sendcount, datatype, comm->nranks, fn, &b));
  if (sendcount == 0) return ncclSuccess;
  TRY(bufs(sendbuff, recvbuff, fn));
  size_t all = b * (size_t)comm->nranks, mine = b * (size_t)comm->rank;
  dnx_op o = {.kind = DNX_ALLGATHER, .type = (int)datatype, .count = sendcount};
  return collective(comm, stream, o, fn, sendbuff, mine, b, recvbuff, 0, all, all);
}
DEV_ALIAS(ncclAllGather);

DEV_API ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  const char *fn = "ncclReduceScatter";
  size_t b;
  TRY(dev__comm_ready(comm, fn)); /* before comm->nranks is read */
  TRY(coll_args(comm, recvcount, datatype, comm->nranks, fn, &b));
  if (recvcount == 0) return ncclSuccess;
  TRY(bufs(sendbuff, recvbuff, fn));
  size_t all = b * (size_t)comm->nranks, mine = b * (size_t)comm->rank;
  dnx_op o = {.kind = DNX_REDUCESCATTER, .type = (int)datatype, .op = (int)op, .count = recvcount};
  return collective(comm, stream, o, fn, sendbuff, 0, all, recvbuff, mine, b, all);
}
DEV_ALIAS(ncclReduceScatter);

DEV_API ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                    int root, ncclComm_t comm, cudaStream_t stream) {
  const char *fn = "ncclBroadcast";
  size_t b;
  TRY(coll_args(comm, count, datatype, 1, fn, &b));
  if (root < 0 || root >= comm->nranks)
    return dev__error(ncclInvalidArgument, "%s: root %d (0..%d)", fn, root, comm->nranks - 1);
  if (count == 0) return ncclSuccess;
  int is_root = comm->rank == root;
  TRY(bufs(is_root ? sendbuff : recvbuff, recvbuff, fn));
  dnx_op o = {.kind = DNX_BROADCAST, .type = (int)datatype, .root = root, .count = count};
  return collective(comm, stream, o, fn, sendbuff, 0, is_root ? b : 0, recvbuff, 0, b, b);
}
DEV_ALIAS(ncclBroadcast);

/* ------------------------------------------------------------ groups */
typedef struct {
  struct ncclComm *comm;
  cudaStream_t stream;
  int is_send, peer;
  void *buf;
  size_t bytes;
  const char *fn;
} pending;

static _Thread_local int depth;
static _Thread_local ncclResult_t group_error;
static _Thread_local pending *queue;
static _Thread_local int queued, queue_cap;

void dev__group_note(ncclResult_t code) {
  if (depth > 0 && group_error == ncclSuccess && code != ncclSuccess && code != ncclInProgress) group_error = code;
}

/* Sends get their staging filled from the device first, receives are
 * copied out after: in and out list them in the order of op.p2p. */
static void setup_p2p(dev_task *t, char *base) {
  int si = 0, ri = 0;
  for (int k = 0; k < t->op.np2p; k++)
    t->op.p2p[k].buf = base + (t->op.p2p[k].is_send ? t->in[si++].off : t->out[ri++].off);
}

/* The queued sends and receives of comm (from index first on) as one task. */
static ncclResult_t flush_comm(struct ncclComm *comm, int first) {
  int n = 0;
  for (int i = first; i < queued; i++) n += queue[i].comm == comm;
  dev_task *t = task_new(comm, "ncclGroupEnd (send/recv)", n, n);
  dnx_p2p *ops = calloc((size_t)n, sizeof *ops);
  if (!t || !ops) {
    free(ops);
    if (t) free(t->in), free(t->out), free(t);
    return dev__error(ncclSystemError, "ncclGroupEnd: out of memory for %d send/recv", n);
  }
  t->op = (dnx_op){.kind = DNX_GROUP_P2P, .p2p = ops, .np2p = n};
  size_t off = 0;
  cudaStream_t stream = queue[first].stream;
  for (int i = first, k = 0; i < queued; i++) {
    const pending *q = &queue[i];
    if (q->comm != comm) continue;
    if (q->stream != stream) {
      free(ops), free(t->in), free(t->out), free(t);
      return dev__error(ncclInvalidUsage, "ncclGroupEnd: sends and receives of one communicator on two streams; "
                                          "the device test NCCL takes one stream per communicator and group");
    }
    ops[k++] = (dnx_p2p){q->is_send, q->peer, NULL, q->bytes};
    if (q->is_send) t->in[t->nin++] = (dev_copy){q->buf, off, q->bytes};
    else t->out[t->nout++] = (dev_copy){q->buf, off, q->bytes};
    off += (q->bytes + 63) & ~(size_t)63;
  }
  char err[512];
  if (dnx_prepare(comm->seg, &t->op, err, sizeof err) != DNX_OK) {
    free(ops), free(t->in), free(t->out), free(t);
    return dev__error(ncclInvalidArgument, "ncclGroupEnd: %s", err);
  }
  return dev__enqueue(t, off, stream, setup_p2p);
}

static ncclResult_t flush_all(void) {
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < queued && r == ncclSuccess; i++) {
    int seen = 0;
    for (int j = 0; j < i; j++) seen |= queue[j].comm == queue[i].comm;
    if (!seen) r = flush_comm(queue[i].comm, i);
  }
  queued = 0;
  return r;
}

static ncclResult_t p2p(int is_send, void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                        cudaStream_t stream, const char *fn) {
  size_t b;
  TRY(coll_args(comm, count, type, 1, fn, &b));
  if (peer < 0 || peer >= comm->nranks)
    return dev__error(ncclInvalidArgument, "%s: peer %d of a %d-rank communicator", fn, peer, comm->nranks);
  if (count > 0 && !buf) return dev__error(ncclInvalidArgument, "%s: buffer is NULL", fn);
  if (queued == queue_cap) {
    int cap = queue_cap ? 2 * queue_cap : 64;
    pending *q = realloc(queue, sizeof *q * (size_t)cap);
    if (!q) return dev__error(ncclSystemError, "%s: out of memory queueing it", fn);
    queue = q;
    queue_cap = cap;
  }
  queue[queued++] = (pending){comm, stream, is_send, peer, buf, b, fn};
  return depth > 0 ? ncclSuccess : flush_all();
}

DEV_API ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                               cudaStream_t stream) {
  return p2p(1, (void *)sendbuff, count, datatype, peer, comm, stream, "ncclSend");
}
DEV_ALIAS(ncclSend);

DEV_API ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                               cudaStream_t stream) {
  return p2p(0, recvbuff, count, datatype, peer, comm, stream, "ncclRecv");
}
DEV_ALIAS(ncclRecv);

DEV_API ncclResult_t pncclGroupStart(void) {
  depth++;
  return ncclSuccess;
}
DEV_ALIAS(ncclGroupStart);

DEV_API ncclResult_t pncclGroupEnd(void) {
  if (depth == 0) return dev__error(ncclInvalidUsage, "ncclGroupEnd: not inside ncclGroupStart");
  if (--depth > 0) return ncclSuccess;
  ncclResult_t r = flush_all(), ret = group_error != ncclSuccess ? group_error : r;
  group_error = ncclSuccess;
  return ret;
}
DEV_ALIAS(ncclGroupEnd);

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * transport_coll.c - the engine's collectives on the caller's functions.
 * No node communicators (two levels need a split the caller's functions
 * do not offer: calls run flat, with the reason in the statistics) and no
 * non-blocking calls (no pipelining).
 */
#include "common/internal.h"

#include <string.h>

#include "transports/transport_coll.h"

static squallResult_t failed(const char *what, int rc) {
  return squall__fail(squallSystemError, "the caller's %s failed (returned %d)", what, rc);
}

static squallResult_t coll_allreduce(void *ctx, const void *send, void *recv, size_t n, squallDataType_t type,
                                     squallRedOp_t op, void *stream) {
  const squallCollectives_t *c = ctx;
  int rc = c->allReduce(c->ctx, send, recv, n, type, op, stream);
  return rc == 0 ? squallSuccess : failed("allReduce", rc);
}

static squallResult_t allreduce_half(void *ctx, void *stream, uint16_t *buf, size_t n, sq_half_kind kind) {
  return coll_allreduce(ctx, buf, buf, n, kind == SQ_HALF_BF16 ? squallBfloat16 : squallFloat16, squallSum, stream);
}

static squallResult_t allreduce_max_f32(void *ctx, void *stream, float *buf, size_t n) {
  return coll_allreduce(ctx, buf, buf, n, squallFloat32, squallMax, stream);
}

static squallResult_t allreduce_sum_f32(void *ctx, void *stream, const float *send, float *recv, size_t n) {
  return coll_allreduce(ctx, send, recv, n, squallFloat32, squallSum, stream);
}

static squallResult_t allreduce_min_i64_host(void *ctx, void *stream, int64_t *buf, size_t n) {
  return coll_allreduce(ctx, buf, buf, n, squallInt64, squallMin, stream);
}

static squallResult_t allgather(void *ctx, void *stream, const void *send, void *recv, size_t bytes) {
  const squallCollectives_t *c = ctx;
  int rc = c->allGather(c->ctx, send, recv, bytes, stream);
  return rc == 0 ? squallSuccess : failed("allGather", rc);
}

static squallResult_t alltoall(void *ctx, void *stream, const void *send, void *recv, size_t bytes) {
  const squallCollectives_t *c = ctx;
  int rc = c->allToAll(c->ctx, send, recv, bytes, stream);
  return rc == 0 ? squallSuccess : failed("allToAll", rc);
}

squallResult_t squall__transport_coll_init(squall_transport *tr, const squallCollectives_t *c) {
  memset(tr, 0, sizeof *tr);
  tr->ctx = (void *)c;
  tr->rank = c->rank;
  tr->nranks = c->nranks;
  tr->allreduce_half = allreduce_half;
  tr->allreduce_max_f32 = allreduce_max_f32;
  tr->allreduce_sum_f32 = allreduce_sum_f32;
  tr->allreduce_min_i64_host = allreduce_min_i64_host;
  tr->allgather = allgather;
  tr->alltoall = c->allToAll ? alltoall : NULL;
  return squallSuccess;
}

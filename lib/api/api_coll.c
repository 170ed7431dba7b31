/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * api_coll.c - squallColl*(): the engine over the caller's own
 * collectives (squall_coll.h), host memory and the host codecs. An
 * all-reduce the engine passes through runs the caller's allReduce with
 * the call's own type and op, carrying its tensor's residual where it may
 * (fold); a reduce-scatter, the caller's reduceScatter.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/stats.h"
#include "engine/engine.h"
#include "engine/entry.h"
#include "kernels/kernels.h"
#include "squall_coll.h"
#include "transports/transport_coll.h"

struct squallColl {
  squallCollectives_t coll; /* the caller's, as copied */
  squall_engine *engine;
};

/* The caller's table as this library knows it: its first `size` bytes,
 * the rest (fields a newer header appended) left NULL. */
static squallResult_t copy_collectives(const squallCollectives_t *in, squallCollectives_t *out) {
  SQ_RETURN_ERROR_IF(in == NULL, squallInvalidArgument, "squallCollCreate: collectives is NULL");
  SQ_RETURN_ERROR_IF(in->size < offsetof(squallCollectives_t, allToAll), squallInvalidArgument,
                     "squallCollCreate: collectives->size is %zu, below the %zu bytes every version has "
                     "(set it with SQUALL_COLLECTIVES_INIT)",
                     in->size, offsetof(squallCollectives_t, allToAll));
  memset(out, 0, sizeof *out);
  memcpy(out, in, in->size < sizeof *out ? in->size : sizeof *out);
  out->size = sizeof *out;
  SQ_RETURN_ERROR_IF(out->nranks < 1 || out->rank < 0 || out->rank >= out->nranks, squallInvalidArgument,
                     "squallCollCreate: rank %d of %d ranks is out of range", out->rank, out->nranks);
  SQ_RETURN_ERROR_IF(out->memory != squallMemoryHost, squallInvalidArgument,
                     "squallCollCreate: memory kind %d is not supported (squallMemoryHost is)", (int)out->memory);
  SQ_RETURN_ERROR_IF(out->allReduce == NULL, squallInvalidArgument, "squallCollCreate: allReduce is NULL");
  SQ_RETURN_ERROR_IF(out->allGather == NULL, squallInvalidArgument, "squallCollCreate: allGather is NULL");
  return squallSuccess;
}

squallResult_t squallCollCreate(const squallCollectives_t *collectives, const squallConfig_t *config,
                                squallColl_t *coll) {
  SQ_RETURN_ERROR_IF(coll == NULL, squallInvalidArgument, "squallCollCreate: coll is NULL");
  *coll = NULL;
  struct squallColl *s = calloc(1, sizeof *s);
  SQ_RETURN_ERROR_IF(s == NULL, squallSystemError, "squallCollCreate: out of memory");
  squallResult_t r = copy_collectives(collectives, &s->coll);
  squall_transport tr;
  if (r == squallSuccess) r = squall__transport_coll_init(&tr, &s->coll);
  if (r == squallSuccess && (s->engine = squall__engine_create(&tr, &squall__kernels_host)) == NULL)
    r = squall__fail(squallSystemError, "squallCollCreate: out of memory");
  if (r == squallSuccess && config) r = squall__engine_set_config(s->engine, config);
  if (r != squallSuccess) {
    squallCollDestroy(s);
    return r;
  }
  squall__stats_set_rank(s->coll.rank, s->coll.nranks, 0); /* may name the SQUALL_STATS file (stats.h) */
  *coll = s;
  return squallSuccess;
}

static int dtype_of(squallDataType_t t) {
  return t == squallFloat32 ? SQ_DT_F32 : t == squallFloat16 ? SQ_DT_F16
                                      : t == squallBfloat16  ? SQ_DT_BF16
                                                             : -1;
}

static size_t size_of(squallDataType_t t) { return t == squallFloat32 ? 4 : t == squallInt64 ? 8
                                                                                             : 2; }

/* The arguments of a call as the caller made it (count: a
 * reduce-scatter's recvcount), for its plain collective. */
typedef struct {
  const squallCollectives_t *c;
  const void *send;
  void *recv;
  size_t count;
  squallDataType_t type;
  squallRedOp_t op;
  void *stream;
} plain_args;

/* The caller's plain all-reduce of a call the engine passed through (a
 * fold's g + residual instead of send), with the call's own type and op. */
static int plain_allreduce(void *ctx, const squall_decision *d) {
  const plain_args *a = ctx;
  return a->c->allReduce(a->c->ctx, d->fold ? (const void *)d->fold : a->send, a->recv, a->count, a->type, a->op,
                         a->stream);
}

/* The call through the engine (engine/entry.h), its plain collective
 * (`name` in the caller's table) run where the engine passes it. */
static squallResult_t through_engine(struct squallColl *s, squall_call *call, int (*plain)(void *, const squall_decision *),
                                     plain_args *a, uint64_t bytes, const char *name) {
  squall_entry x = {.plain = plain, .ctx = a, .bytes = bytes};
  int rc = 0;
  SQ_FORWARD_IF_ERROR(squall__engine_call(s->engine, call, &x, &rc)); /* the engine logged it */
  SQ_RETURN_ERROR_IF(rc != 0, squallSystemError, "the caller's %s failed (returned %d)", name, rc);
  return squallSuccess;
}

squallResult_t squallCollAllReduce(squallColl_t s, const void *send, void *recv, size_t count, squallDataType_t type,
                                   squallRedOp_t op, const void *key, void *stream) {
  SQ_RETURN_ERROR_IF(s == NULL, squallInvalidArgument, "squallCollAllReduce: coll is NULL");
  SQ_RETURN_ERROR_IF((unsigned)type >= squallNumDataTypes, squallInvalidArgument,
                     "squallCollAllReduce: type %d is not a squallDataType_t", (int)type);
  SQ_RETURN_ERROR_IF((unsigned)op >= squallNumRedOps, squallInvalidArgument,
                     "squallCollAllReduce: op %d is not a squallRedOp_t", (int)op);
  SQ_RETURN_ERROR_IF(count > 0 && (send == NULL || recv == NULL), squallInvalidArgument,
                     "squallCollAllReduce: %s is NULL for %zu elements", recv == NULL ? "recv" : "send", count);
  squall_call call = {
      .send = send,
      .recv = recv,
      .count = count,
      .dtype = dtype_of(type),
      .elsize = size_of(type),
      .op = op == squallSum ? SQ_OP_SUM : op == squallAvg ? SQ_OP_AVG
                                                          : SQ_OP_OTHER,
      .premul = 1.0f,
      .key = key,
      .can_fold = 1, /* host memory, and the engine's own rule for the rest */
  };
  plain_args a = {&s->coll, send, recv, count, type, op, stream};
  return through_engine(s, &call, plain_allreduce, &a, (uint64_t)count * size_of(type), "allReduce");
}

/* ------------------------------------------------------- reduce-scatter */

/* The caller's plain reduce-scatter of a call the engine passed through
 * (a fold's g + residual instead of send); its time feeds the cost model's
 * reduce-scatter figures (bytes: the send buffer's). */
static int plain_reduce_scatter(void *ctx, const squall_decision *d) {
  const plain_args *a = ctx;
  return a->c->reduceScatter(a->c->ctx, d->fold ? (const void *)d->fold : a->send, a->recv, a->count, a->type, a->op,
                             a->stream);
}

/* What the reduce-scatter's arguments break (NULL: nothing): recv may be
 * this rank's own block of send and overlap nothing else of it. */
static const char *rs_argument_problem(const struct squallColl *s, const void *send, const void *recv,
                                       size_t recvcount, squallDataType_t type, size_t *count) {
  if (s->coll.reduceScatter == NULL) return "the collectives have no reduceScatter (squall_coll.h)";
  if ((unsigned)type >= squallNumDataTypes) return "type is not a squallDataType_t";
  if (recvcount > SIZE_MAX / size_of(type) / (size_t)s->coll.nranks)
    return "recvcount times the number of ranks overflows the address space";
  *count = recvcount * (size_t)s->coll.nranks;
  if (recvcount == 0) return NULL;
  if (send == NULL || recv == NULL) return recv == NULL ? "recv is NULL" : "send is NULL";
  size_t bytes = recvcount * size_of(type);
  uintptr_t a = (uintptr_t)send, b = (uintptr_t)recv, own = a + (uintptr_t)s->coll.rank * bytes;
  if (b != own && b < a + *count * size_of(type) && a < b + bytes)
    return "recv overlaps send other than at this rank's own block (send + rank * recvcount)";
  return NULL;
}

squallResult_t squallCollReduceScatter(squallColl_t s, const void *send, void *recv, size_t recvcount,
                                       squallDataType_t type, squallRedOp_t op, const void *key, void *stream) {
  size_t count = 0;
  SQ_RETURN_ERROR_IF(s == NULL, squallInvalidArgument, "squallCollReduceScatter: coll is NULL");
  SQ_RETURN_ERROR_IF((unsigned)op >= squallNumRedOps, squallInvalidArgument,
                     "squallCollReduceScatter: op %d is not a squallRedOp_t", (int)op);
  const char *why = rs_argument_problem(s, send, recv, recvcount, type, &count);
  SQ_RETURN_ERROR_IF(why != NULL, squallInvalidArgument, "squallCollReduceScatter(recvcount=%zu): %s", recvcount,
                     why);
  squall_call call = {
      .send = send,
      .recv = recv,
      .count = count,
      .coll = SQ_COLL_REDUCE_SCATTER,
      .dtype = dtype_of(type),
      .elsize = size_of(type),
      .op = op == squallSum ? SQ_OP_SUM : SQ_OP_OTHER, /* an average passes through: squall's sums are sums */
      .premul = 1.0f,
      .key = key,
      .can_fold = 1, /* as the all-reduce's */
  };
  plain_args a = {&s->coll, send, recv, recvcount, type, op, stream};
  return through_engine(s, &call, plain_reduce_scatter, &a, (uint64_t)count * size_of(type), "reduceScatter");
}

squallResult_t squallCollSetConfig(squallColl_t s, const squallConfig_t *config) {
  SQ_RETURN_ERROR_IF(s == NULL || config == NULL, squallInvalidArgument, "squallCollSetConfig: %s is NULL",
                     s == NULL ? "coll" : "config");
  return squall__engine_set_config(s->engine, config);
}

squallResult_t squallCollGetResidual(squallColl_t s, const void *key, size_t count, squallDataType_t type,
                                     float *out) {
  SQ_RETURN_ERROR_IF(s == NULL || key == NULL || out == NULL, squallInvalidArgument,
                     "squallCollGetResidual: %s is NULL", s == NULL ? "coll" : key == NULL ? "key"
                                                                                           : "out");
  squallResult_t r = squall__engine_get_residual(s->engine, key, count, dtype_of(type), 0, out);
  if (r == squallInvalidArgument && squall__engine_get_scatter_residual(s->engine, key, count, dtype_of(type), out) ==
                                        squallSuccess)
    return squallSuccess; /* a reduce-scatter's tensor */
  return r;
}

squallResult_t squallCollResetResiduals(squallColl_t s) {
  SQ_RETURN_ERROR_IF(s == NULL, squallInvalidArgument, "squallCollResetResiduals: coll is NULL");
  return squall__engine_reset_residuals(s->engine);
}

squallResult_t squallCollStats(squallColl_t s, squallStats_t *stats) {
  SQ_RETURN_ERROR_IF(s == NULL, squallInvalidArgument, "squallCollStats: coll is NULL");
  return squall__stats_out(stats, squall__engine_stats(s->engine), "squallCollStats");
}

squallResult_t squallCollDestroy(squallColl_t s) {
  if (s == NULL) return squallSuccess;
  squall__engine_free(s->engine);
  free(s);
  return squallSuccess;
}

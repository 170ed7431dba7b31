/*
 * topology_nccl.c - what the two-level all-reduce needs from NCCL (see
 * engine/hierarchy.c), through the table of real NCCL functions so that an
 * interposer never counts these as user calls: ncclReduceScatter, and
 * ncclCommSplit into node communicators. Nodes are found by the engine's
 * default (a hash of hostname and boot id, all-gathered), so node_key stays
 * NULL here.
 *
 * A communicator made by split runs on the stream of the communicator it
 * came from: its transport copies the parent's current stream before each
 * operation, so the caller still sets one stream per call.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "transports/topology_nccl.h"

static squallResult_t nccl_reduce_scatter_f32(void *ctx, const float *send, float *recv, size_t recvcount) {
  squall_nccl_ctx *c = ctx;
  return squall__nccl_result(
      c->api->reduceScatter(send, recv, recvcount, ncclFloat32, ncclSum, c->comm, c->stream),
      "ncclReduceScatter (node sum)");
}

typedef struct {
  squall_nccl_ctx nccl;          /* first: the sub-communicator's own context */
  const squall_nccl_ctx *parent; /* whose stream every operation takes */
  squall_transport base;         /* the plain NCCL transport over nccl */
} sub_ctx;

static squall_nccl_ctx *synced(void *ctx) {
  sub_ctx *s = ctx;
  s->nccl.stream = s->parent->stream;
  return &s->nccl;
}

#define BASE(ctx) (((sub_ctx *)(ctx))->base)

static squallResult_t sub_allreduce_half(void *ctx, uint16_t *buf, size_t n, sq_half_kind kind) {
  return BASE(ctx).allreduce_half(synced(ctx), buf, n, kind);
}
static squallResult_t sub_allreduce_max_f32(void *ctx, float *buf, size_t n) {
  return BASE(ctx).allreduce_max_f32(synced(ctx), buf, n);
}
static squallResult_t sub_allgather(void *ctx, const void *send, void *recv, size_t bytes) {
  return BASE(ctx).allgather(synced(ctx), send, recv, bytes);
}
static squallResult_t sub_allreduce_sum_f32(void *ctx, const float *send, float *recv, size_t n) {
  return BASE(ctx).allreduce_sum_f32(synced(ctx), send, recv, n);
}
static squallResult_t sub_allgather_host(void *ctx, const void *send, void *recv, size_t bytes) {
  return BASE(ctx).allgather_host(synced(ctx), send, recv, bytes);
}
static squallResult_t sub_reduce_scatter_f32(void *ctx, const float *send, float *recv, size_t recvcount) {
  return nccl_reduce_scatter_f32(synced(ctx), send, recv, recvcount);
}

static void sub_destroy(void *ctx) {
  sub_ctx *s = ctx;
  s->nccl.api->commDestroy(s->nccl.comm);
  free(s);
}

static squallResult_t nccl_split(void *ctx, int color, int key, squall_transport *sub) {
  squall_nccl_ctx *c = ctx;
  sub_ctx *s = calloc(1, sizeof *s);
  SQ_RETURN_ERROR_IF(s == NULL, squallSystemError, "out of memory for a node communicator");
  ncclComm_t comm = NULL;
  /* No config: the child inherits the parent's (blocking, as squall's are). */
  squallResult_t r = squall__nccl_result(c->api->commSplit(c->comm, color, key, &comm, NULL),
                                         "ncclCommSplit (node communicators)");
  if (r == squallSuccess && comm == NULL)
    r = squall__fail(squallInternalError, "ncclCommSplit returned no communicator for color %d", color);
  if (r != squallSuccess) {
    free(s);
    return r;
  }
  s->nccl = (squall_nccl_ctx){.api = c->api, .comm = comm, .stream = c->stream, .device_memory = c->device_memory};
  s->parent = c;
  r = squall__transport_nccl_init(&s->base, &s->nccl);
  if (r != squallSuccess) {
    c->api->commDestroy(comm);
    free(s);
    return r;
  }
  *sub = s->base;
  sub->ctx = s;
  sub->allreduce_half = sub_allreduce_half;
  sub->allreduce_max_f32 = sub_allreduce_max_f32;
  sub->allgather = sub_allgather;
  sub->allgatherv = NULL; /* as on the parent: fixed sizes */
  sub->allreduce_sum_f32 = sub_allreduce_sum_f32;
  sub->allgather_host = sub_allgather_host;
  sub->reduce_scatter_f32 = sub_reduce_scatter_f32;
  sub->node_key = NULL;
  sub->split = NULL; /* one level of splitting is all the engine makes */
  sub->destroy = sub_destroy;
  return squallSuccess;
}

void squall__topology_nccl_attach(squall_transport *tr, squall_nccl_ctx *ctx) {
  const squall_nccl_api *api = ctx->api;
  tr->reduce_scatter_f32 = api->reduceScatter ? nccl_reduce_scatter_f32 : NULL;
  tr->node_key = NULL;
  tr->split = api->reduceScatter && api->commSplit && api->commDestroy ? nccl_split : NULL;
  tr->destroy = NULL;
}

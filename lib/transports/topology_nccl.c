/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * topology_nccl.c - what the two-level all-reduce needs from NCCL (see
 * engine/hierarchy.c), through the table of real NCCL functions so that an
 * interposer never counts these as user calls: ncclReduceScatter, and
 * ncclCommSplit into node communicators. Nodes are found by the default
 * (node_id.c: a hash of hostname and boot id, all-gathered), so node_key
 * stays NULL here.
 *
 * A communicator made by split is a plain NCCL transport over the new
 * communicator: the stream travels with every call, so the node
 * communicators run on the caller's stream like the parent does.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "transports/topology_nccl.h"

static squallResult_t nccl_reduce_scatter_f32(void *ctx, void *stream, const float *send, float *recv,
                                              size_t recvcount) {
  squall_nccl_ctx *c = ctx;
  return squall__nccl_settle(
      c->api, c->comm, c->api->reduceScatter(send, recv, recvcount, ncclFloat32, ncclSum, c->comm, (cudaStream_t)stream),
      "ncclReduceScatter (node sum)");
}

static void sub_destroy(void *ctx) {
  squall_nccl_ctx *s = ctx;
  s->api->commDestroy(s->comm);
  free(s);
}

static squallResult_t nccl_split(void *ctx, void *stream, int color, int key, squall_transport *sub) {
  (void)stream; /* ncclCommSplit is collective over the communicator, not enqueued */
  squall_nccl_ctx *c = ctx;
  /* The split first: it is collective, so no local failure may skip it
   * (the engine agrees on every rank's outcome afterwards). No config: the
   * child inherits the parent's; a non-blocking child is settled (polled
   * until its initialisation is done) like every operation squall makes. */
  ncclComm_t comm = NULL;
  ncclResult_t made = c->api->commSplit(c->comm, color, key, &comm, NULL);
  squallResult_t r = made == ncclInProgress && comm != NULL
                         ? squall__nccl_settle(c->api, comm, made, "ncclCommSplit (node communicators)")
                         : squall__nccl_result(c->api, made, "ncclCommSplit (node communicators)");
  if (r == squallSuccess && comm == NULL)
    r = squall__fail(squallInternalError, "ncclCommSplit returned no communicator for color %d", color);
  if (r != squallSuccess) return r;
  squall_nccl_ctx *s = calloc(1, sizeof *s);
  if (s == NULL) {
    c->api->commDestroy(comm);
    return squall__fail(squallSystemError, "out of memory for a node communicator");
  }
  *s = (squall_nccl_ctx){.api = c->api, .comm = comm, .device_memory = c->device_memory};
  r = squall__transport_nccl_init(sub, s);
  if (r != squallSuccess) {
    c->api->commDestroy(comm);
    free(s);
    return r;
  }
  sub->split = NULL; /* one level of splitting is all the engine makes */
  sub->reserve_reduce_scatter = NULL;
  sub->destroy = sub_destroy;
  return squallSuccess;
}

void squall__topology_nccl_attach(squall_transport *tr, squall_nccl_ctx *ctx) {
  const squall_nccl_api *api = ctx->api;
  tr->reduce_scatter_f32 = api->reduceScatter ? nccl_reduce_scatter_f32 : NULL;
  tr->reserve_reduce_scatter = NULL; /* ncclReduceScatter needs no memory of squall's */
  tr->node_key = NULL;
  tr->split = api->reduceScatter && api->commSplit && api->commDestroy ? nccl_split : NULL;
  tr->destroy = NULL;
}

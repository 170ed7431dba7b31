/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hierarchy.h - the two-level all-reduce: only what crosses the node
 * boundary is compressed. Inside a node, a dense fp32 reduce-scatter leaves
 * local rank i with the node's sum of shard i (ceil(n/L) elements, the last
 * padded with zeros); across nodes, the ranks with the same local index run
 * the ordinary compressed all-reduce on their shard (a second engine bound
 * to the inter-node transport, with its own per-shard residuals); a dense
 * all-gather inside the node puts the shards back together. Every rank ends
 * with the same bits.
 *
 * A reduce-scatter runs two-level too (hierarchy_scatter.c): its input
 * re-laid out so that the node reduce-scatter leaves local rank l with the
 * node's sum of the blocks whose owners have local index l, then the
 * compressed reduce-scatter of those blocks across nodes leaves every rank
 * with its own block, in the caller's rank order; no all-gather.
 *
 * Nodes are found once per engine, at its first eligible call: every rank's
 * node key (the transport's, a hash of hostname and boot id, or rank / R
 * with SQUALL_RANKS_PER_NODE=R) is all-gathered, so all ranks derive the
 * same verdict from the same table. Two-level needs >= 2 nodes, >= 2 ranks
 * per node and the same number of ranks on every node; anything else runs
 * flat, with the reason logged and counted.
 *
 * Memory: everything a two-level call needs (its scratch, the node
 * reduce-scatter's, the inner engine's scratch, shard residual and backup)
 * is allocated by squall__hier_prepare, before the call header, so that
 * one rank's failure makes every rank pass the call through together.
 *
 * Residuals: a tensor's shard residual lives in the inner engine. A new
 * SQUALL_RANKS_PER_NODE drops them all (logged): other shards on other
 * ranks. A flat residual the tensor held before it ran two-level (the
 * first compressed call prepares the flat route; SQUALL_HIERARCHY=flat
 * before auto) stays in the outer engine, unused, until the engine is
 * freed or the tensor runs flat again.
 */
#ifndef SQUALL_HIERARCHY_H
#define SQUALL_HIERARCHY_H

#include "common/stats.h"
#include "engine/engine.h"

typedef struct squall_hier squall_hier;

/* State for an engine's transport and kernels (both must outlive it).
 * NULL when out of memory. */
squall_hier *squall__hier_create(const squall_transport *tr, const squall_kernels *k);
/* Frees the node communicators and the inner engine; accepts NULL. */
void squall__hier_free(squall_hier *h);

/* Whether an agreed configuration runs two-level, from what every rank
 * holds alike: 1 two-level (nodes known, node communicators made), 0 flat,
 * -1 the nodes are not known yet for it (squall__hier_route must run). */
int squall__hier_known(const squall_hier *h, const squallConfig_t *cfg);

/* 1 when the nodes are known for cfg and all ranks are on one node (the
 * same answer on every rank: the node keys were all-gathered), else 0. */
int squall__hier_one_node(const squall_hier *h, const squallConfig_t *cfg);

/* For a call that every rank compresses, after the call header (collective:
 * every rank calls it at the same call, never under graph capture): finds
 * the nodes and makes the node communicators on first need. *flat_reason
 * is -1 when calls run two-level, else a squallFlatReason_t. */
squallResult_t squall__hier_route(squall_hier *h, const squallConfig_t *cfg, void *stream, int *flat_reason);

/* The functions below that take rc hand it to the inner engine's shard
 * call (squall_shard): the configuration the outer call runs with, so
 * that the shard never takes a snapshot of its own. */

/* Allocates (locally, before the call header) everything a two-level run
 * of c needs: its scratch, the node reduce-scatter's, and the inner
 * engine's scratch, shard residual and backup, so that nothing allocates
 * once the call is collective. */
squallResult_t squall__hier_prepare(squall_hier *h, const squall_call *c, const squallConfig_t *rc);

/* 1 when a two-level run of c needs more memory than any call ran with
 * before (the same answer on every rank): a device engine must then
 * exchange the header, so that a rank's failure to grow is shared. */
int squall__hier_grows(squall_hier *h, const squall_call *c, const squallConfig_t *rc);

/* What a two-level call sent and spent: bytes across and inside the node,
 * host time in codecs (the inner engine's included). */
typedef struct {
  uint64_t inter, intra;
  double codec_s;
  uint64_t chunks; /* the chunks the shard's call ran in (pipelining), 1 or 0 where it ran in one */
} squall_hier_figures;

/* Runs a call two-level (prepared by squall__hier_prepare). On failure
 * the shard residual is as before the call; the caller records it. */
squallResult_t squall__hier_allreduce(squall_hier *h, const squall_call *c, const squallConfig_t *rc,
                                      squall_hier_figures *f);

/* 1 when this rank's ring neighbour is on another node, or the nodes are
 * not known yet (its flat bytes then count as crossing). */
int squall__hier_crosses(const squall_hier *h);

/* Records how a call's wire bytes split at the node boundary: path 1 a
 * flat compressed call (with flat_reason). A flat ring sends only to the
 * next rank, so the bytes cross when that rank is on another node, or
 * when the nodes are not known yet. */
void squall__hier_record(const squall_hier *h, squallStats_t *local, int path, int flat_reason,
                         uint64_t wire);

/* For CUDA graph capture: 1 when a two-level run of c needs no allocation
 * and no host synchronisation, else 0; from the plan, the same on every
 * rank (the residual aside, which is per tensor, as on the flat path). */
int squall__hier_ready(squall_hier *h, const squall_call *c, const squallConfig_t *rc);

/* Zeroes the per-shard residuals. */
squallResult_t squall__hier_reset(squall_hier *h);

/* The inner engine's slot that carries c's shard residual on this rank
 * into a plain call (squall__engine_carrier_slot), or NULL: it covers the
 * s elements of c from *first on (those below c->count). */
struct squall_tensor *squall__hier_shard_slot(squall_hier *h, const squall_call *c, size_t *first, size_t *s);

/* Adds this rank's shard residual of the tensor (key, count, dtype) into
 * out (count host floats) at the shard's place; when have is 0, out is
 * zeroed first. *found says whether a shard residual exists. */
squallResult_t squall__hier_get_residual(squall_hier *h, const void *key, size_t count, int dtype,
                                         float *out, int have, int *found);

/* The same for a reduce-scatter's tensor (count: its send buffer's), its
 * shard residual placed back at the blocks it belongs to. */
squallResult_t squall__hier_get_scatter_residual(squall_hier *h, const void *key, size_t count, int dtype,
                                                 float *out, int have, int *found);

#endif

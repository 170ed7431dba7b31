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
 * Nodes are found once per engine, at its first eligible call: every rank's
 * node key (the transport's, a hash of hostname and boot id, or rank / R
 * with SQUALL_RANKS_PER_NODE=R) is all-gathered, so all ranks derive the
 * same verdict from the same table. Two-level needs >= 2 nodes, >= 2 ranks
 * per node and the same number of ranks on every node; anything else runs
 * flat, with the reason logged and counted.
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

/* For an eligible call, after configuration agreement (collective: every
 * rank calls it at the same call): finds the nodes and makes the node
 * communicators on first need. *flat_reason is -1 when the call runs
 * two-level, else a squallFlatReason_t. */
squallResult_t squall__hier_route(squall_hier *h, const squallConfig_t *cfg, int *flat_reason);

/* Runs an eligible call two-level and records it in *local and the
 * process statistics. */
squallResult_t squall__hier_allreduce(squall_hier *h, const squall_call *c, const squallConfig_t *cfg,
                                      squallStats_t *local);

/* Records how a call's wire bytes split at the node boundary: path 0 a
 * pass-through, 1 a flat compressed call (with flat_reason). A flat ring
 * sends only to the next rank, so the bytes cross when that rank is on
 * another node, or when the nodes are not known yet. */
void squall__hier_record(const squall_hier *h, squallStats_t *local, int path, int flat_reason,
                         uint64_t wire);

/* For CUDA graph capture: -1 when the call would run flat (the engine
 * decides), else 1 when the two-level run needs no allocation and no host
 * synchronisation, 0 when it does. */
int squall__hier_ready(squall_hier *h, const squall_call *c, const squallConfig_t *cfg);

/* Zeroes the per-shard residuals. */
squallResult_t squall__hier_reset(squall_hier *h);

/* Adds this rank's shard residual of the tensor (key, count, dtype) into
 * out (count host floats) at the shard's place; when have is 0, out is
 * zeroed first. *found says whether a shard residual exists. */
squallResult_t squall__hier_get_residual(squall_hier *h, const void *key, size_t count, int dtype,
                                         float *out, int have, int *found);

#endif

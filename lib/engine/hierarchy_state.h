/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hierarchy_state.h - the two-level state that hierarchy.c (the nodes, the
 * node communicators, the all-reduce) and hierarchy_scatter.c (the
 * reduce-scatter) share. Nothing else includes it: the engine sees only
 * hierarchy.h.
 */
#ifndef SQUALL_HIERARCHY_STATE_H
#define SQUALL_HIERARCHY_STATE_H

#include "engine/engine.h"
#include "engine/graph_memory.h"
#include "engine/hierarchy.h"

struct squall_hier {
  const squall_transport *tr; /* the engine's, over all ranks */
  const squall_kernels *k;
  /* the nodes, from the all-gathered keys */
  int known;   /* discovery ran */
  int rpn;     /* SQUALL_RANKS_PER_NODE it ran with */
  int verdict; /* -1: two-level possible; else a squallFlatReason_t */
  int nodes, local_size, node, local_rank;
  int *node_of;  /* node index of every rank */
  int *local_of; /* local rank of every rank (its place on its node) */
  /* the node communicators, made on the first two-level call */
  int split_state;  /* 0 not tried, 1 made, 2 failed or impossible */
  int split_reason; /* squallFlatReason_t when split_state is 2 */
  squall_transport intra, inter;
  squall_engine *inner; /* the compressed all-reduce across nodes, on shards */
  void *buf;            /* kernel memory: padded fp32 data, then the shard */
  size_t buf_bytes;
  squall_graph_memory graphs; /* buf replaced after a capture: kept for the graphs */
  /* The largest two-level memory (buf, the inner engine's scratch) that
   * calls ran with: a call ran two-level only after every rank prepared
   * it, so these are the same on every rank and at most what each holds.
   * Growth beyond them needs the header (squall__hier_grows). */
  size_t planned_buf, planned_inner;
};

/* A two-level call's geometry: n elements, in shards of s (padded: s
 * times the node size); whether the caller's buffers serve as the padded
 * data; the kernel memory it needs (buf: the padded data, then the shard). */
typedef struct {
  size_t n, s, padded;
  int direct_in, direct_out;
  size_t need;
} squall_hier_shape;

/* hierarchy.c: the inner engine's call on the shard of c (s floats at
 * shard), run with the outer call's configuration rc (sh: where its
 * squall_shard is kept). */
squall_call squall__hier_shard_call(const squall_call *c, const squallConfig_t *rc, float *shard, size_t s,
                                    squall_shard *sh);

/* hierarchy_scatter.c: a reduce-scatter's geometry (no padding: its count
 * is the ranks times the block). */
void squall__hier_scatter_shape(const squall_hier *h, const squall_call *c, squall_hier_shape *sh);

/* hierarchy_scatter.c: the reduce-scatter's steps between the outer
 * call's checks and its undo (full, shard: carved from buf). *inner_done
 * becomes 1 once the shard's compressed call succeeded (its residual
 * moved on). */
squallResult_t squall__hier_scatter_steps(squall_hier *h, const squall_call *c, const squallConfig_t *rc,
                                          const squall_hier_shape *sh, float *full, float *shard,
                                          squall_hier_figures *f, int *inner_done);

#endif

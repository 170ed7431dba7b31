/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hierarchy_scatter.c - the two-level reduce-scatter (hierarchy.h): dense
 * inside the node, compressed only across nodes, and every rank ends with
 * exactly its block of MPI's and NCCL's rank order, with no all-gather.
 *
 * P ranks on N nodes of L; the result of rank r is block r (b elements)
 * of the input; rank r sits on node node_of[r] as its local rank
 * local_of[r] (the node table: ranks need not fill their nodes in order).
 *   1. The input is re-laid out: local rank l's chunk (N blocks, s = N b
 *      elements) holds, in node order, the blocks of the ranks whose local
 *      index is l; block r goes to chunk local_of[r], place node_of[r].
 *   2. A dense fp32 reduce-scatter inside the node (the intra transport's)
 *      leaves local rank l with its node's sum of its chunk.
 *   3. The ranks with local index l (one per node, inter rank = node) run
 *      the ordinary compressed reduce-scatter of that chunk (the inner
 *      engine, as the all-reduce's shard call, with the shard's residual
 *      and error feedback): inter rank n receives place n of the chunk,
 *      which is the block of the rank on node n with local index l, its
 *      own.
 * Error feedback (per element i of the chunk, node m, its rank with local
 * index l): S_m[i] + e_m[i] = d_m[i] + e'_m[i], S_m the node's exact-order
 * fp32 sum of its ranks' inputs, e_m the shard residual, d_m what the
 * codec sends; the owner's result is the fp32 sum of d_m in node order.
 * Over calls: the results plus every rank's residual (placed back at its
 * blocks, squall__hier_get_scatter_residual) equal the sum of all inputs,
 * wherever the fp32 sums are exact.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "engine/hierarchy_state.h"

void squall__hier_scatter_shape(const squall_hier *h, const squall_call *c, squall_hier_shape *sh) {
  sh->n = sh->padded = c->count; /* P blocks of b: the node size divides it */
  sh->s = c->count / (size_t)h->local_size;
  sh->direct_in = sh->direct_out = 0; /* the input is always re-laid out */
  sh->need = squall__align_up(sh->n * sizeof(float)) + squall__align_up(sh->s * sizeof(float));
}

/* Step 1: block r of in to chunk local_of[r], place node_of[r], of full
 * (a copy per block: device memory has no strided copy in the kernel set). */
static squallResult_t relayout(const squall_hier *h, void *stream, const float *in, float *full, size_t b) {
  size_t N = (size_t)h->nodes;
  for (int r = 0; r < h->tr->nranks; r++) {
    float *dst = full + ((size_t)h->local_of[r] * N + (size_t)h->node_of[r]) * b;
    SQ_FORWARD_IF_ERROR(h->k->widen(stream, SQ_DT_F32, in + (size_t)r * b, dst, b, 1.0f));
  }
  return squallSuccess;
}

squallResult_t squall__hier_scatter_steps(squall_hier *h, const squall_call *c, const squallConfig_t *rc,
                                          const squall_hier_shape *sh, float *full, float *shard,
                                          squall_hier_figures *f, int *inner_done) {
  void *stream = c->stream;
  int p = h->tr->nranks;
  size_t b = c->count / (size_t)p;
  SQ_RETURN_ERROR_IF(sh->s != b * (size_t)h->nodes, squallInternalError,
                     "two-level reduce-scatter of %zu elements: a shard of %zu is not %d blocks of %zu", c->count,
                     sh->s, h->nodes, b);
  double t0 = squall__now();
  squallResult_t r = relayout(h, stream, (const float *)c->send, full, b);
  f->codec_s += squall__now() - t0;
  if (r == squallSuccess) {
    r = h->intra.reduce_scatter_f32(h->intra.ctx, stream, full, shard, sh->s);
    f->intra += (uint64_t)(h->local_size - 1) * sh->s * sizeof(float); /* dense, and no all-gather */
  }
  if (r == squallSuccess) { /* straight into the caller's buffer: the input was copied in step 1 */
    squall_shard shd;
    squall_call ic = squall__hier_shard_call(c, rc, shard, sh->s, &shd);
    squall_decision d;
    r = squall__engine_allreduce(h->inner, &ic, &d);
    if (r == squallSuccess && d.route == SQ_ROUTE_PASS)
      r = squall__fail(squallInternalError, "the inter-node engine passed a reduce-scatter shard through (%s)",
                       squallPassReasonName(d.reason));
    *inner_done = r == squallSuccess;
  }
  if (r == squallSuccess && c->op == SQ_OP_AVG) { /* the inner engine summed over nodes: divide by all ranks */
    double t1 = squall__now();
    r = h->k->narrow(stream, SQ_DT_F32, (const float *)c->recv, c->recv, b, (float)p);
    f->codec_s += squall__now() - t1;
  }
  return r;
}

squallResult_t squall__hier_get_scatter_residual(squall_hier *h, const void *key, size_t count, int dtype,
                                                 float *out, int have, int *found) {
  *found = 0;
  if (h == NULL || h->inner == NULL || count == 0) return squallSuccess;
  int p = h->tr->nranks;
  if (count % (size_t)p) return squallSuccess; /* no reduce-scatter of this count ran */
  size_t b = count / (size_t)p, s = b * (size_t)h->nodes;
  float *mine = malloc(s * sizeof(float) + 1);
  SQ_RETURN_ERROR_IF(mine == NULL, squallSystemError, "out of memory reading a reduce-scatter shard residual");
  if (squall__engine_get_scatter_residual(h->inner, key, s, dtype, mine) != squallSuccess) {
    free(mine);
    return squallSuccess; /* no shard residual for this tensor */
  }
  if (!have) memset(out, 0, count * sizeof(float));
  /* place n of this rank's chunk is the block of the rank on node n with this local index */
  for (int r = 0; r < p; r++) {
    if (h->local_of[r] != h->local_rank) continue;
    const float *from = mine + (size_t)h->node_of[r] * b;
    for (size_t j = 0; j < b; j++) out[(size_t)r * b + j] += from[j];
  }
  free(mine);
  *found = 1;
  return squallSuccess;
}

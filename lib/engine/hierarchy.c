/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hierarchy.c - the two-level all-reduce (see hierarchy.h): node discovery
 * (from the transport's node keys, or transports/node_id.c's), the node
 * communicators, and the reduce-scatter / compressed shard all-reduce /
 * all-gather run; the common frame of a two-level reduce-scatter, whose
 * own steps are hierarchy_scatter.c's.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "engine/hierarchy.h"
#include "engine/hierarchy_state.h"
#include "transports/node_id.h" /* the default node key */

squall_hier *squall__hier_create(const squall_transport *tr, const squall_kernels *k) {
  squall_hier *h = calloc(1, sizeof *h);
  if (h == NULL) return NULL;
  h->tr = tr;
  h->k = k;
  return h;
}

static void drop_split(squall_hier *h) {
  squall__engine_free(h->inner);
  h->inner = NULL;
  if (h->intra.destroy) h->intra.destroy(h->intra.ctx);
  if (h->inter.destroy) h->inter.destroy(h->inter.ctx);
  memset(&h->intra, 0, sizeof h->intra);
  memset(&h->inter, 0, sizeof h->inter);
  if (h->buf) h->k->free(NULL, h->buf);
  squall__graph_memory_free(&h->graphs, h->k); /* the node communicators are gone: so are the graphs' calls */
  h->buf = NULL;
  h->buf_bytes = 0;
  h->planned_buf = h->planned_inner = 0;
  h->split_state = 0;
}

void squall__hier_free(squall_hier *h) {
  if (h == NULL) return;
  drop_split(h);
  free(h->node_of);
  free(h->local_of);
  free(h);
}

/* ------------------------------------------------------------ discovery */
static const char *flat_doc(int reason) {
  switch (reason) {
#define FLAT_DOC(name, key, doc) \
  case name:                     \
    return doc;
    SQUALL_FLAT_REASON_TABLE(FLAT_DOC)
#undef FLAT_DOC
  default:
    return "unknown";
  }
}

static squallResult_t discover(squall_hier *h, const squallConfig_t *cfg, void *stream) {
  const squall_transport *tr = h->tr;
  int p = tr->nranks;
  uint64_t key = 0;
  int64_t *keys = malloc(sizeof(int64_t) * (size_t)p);
  int *node_of = malloc(sizeof(int) * (size_t)p), *count = calloc((size_t)p, sizeof(int));
  int *local_of = malloc(sizeof(int) * (size_t)p);
  if (keys == NULL || node_of == NULL || count == NULL || local_of == NULL) {
    free(keys);
    free(node_of);
    free(count);
    free(local_of);
    return squall__fail(squallSystemError, "out of memory finding the nodes of %d ranks", p);
  }
  if (cfg->ranksPerNode > 0) {
    key = (uint64_t)(tr->rank / cfg->ranksPerNode);
  } else if (tr->node_key == NULL || tr->node_key(tr->ctx, stream, &key) != squallSuccess) {
    if (tr->node_key) SQ_WARN("cannot find this rank's node (%s); using its hostname and boot id", squallGetLastError());
    key = squall__node_id();
  }
  /* Each rank's key may come from a different source; the verdict comes
   * from the one table that every rank holds, so all ranks agree on it. */
  /* An all-gather as a minimum: every slot but one's own is INT64_MAX, and
   * keys keep 62 bits, so that no key equals the filler. */
  for (int i = 0; i < p; i++) keys[i] = INT64_MAX;
  keys[tr->rank] = (int64_t)(key & 0x3fffffffffffffffULL);
  squallResult_t r = tr->allreduce_min_i64_host(tr->ctx, stream, keys, (size_t)p);
  if (r != squallSuccess) {
    free(keys);
    free(node_of);
    free(count);
    free(local_of);
    return r;
  }
  int nodes = 0;
  for (int i = 0; i < p; i++) {
    int j = 0;
    while (j < i && keys[j] != keys[i]) j++;
    node_of[i] = j < i ? node_of[j] : nodes++;
    local_of[i] = count[node_of[i]]++;
  }
  int uneven = 0;
  for (int n = 1; n < nodes; n++) uneven |= count[n] != count[0];
  free(h->node_of);
  free(h->local_of);
  h->node_of = node_of;
  h->local_of = local_of;
  h->local_rank = local_of[tr->rank];
  h->nodes = nodes;
  h->node = node_of[tr->rank];
  h->local_size = count[h->node];
  h->verdict = nodes < 2 ? squallFlatOneNode : uneven     ? squallFlatUneven
                                           : count[0] < 2 ? squallFlatOneRankPerNode
                                                          : -1;
  h->known = 1;
  h->rpn = cfg->ranksPerNode;
  if (h->verdict < 0)
    SQ_INFO("rank %d/%d: %d nodes of %d ranks (node %d, local rank %d)%s: two-level all-reduce",
            tr->rank, p, nodes, count[0], h->node, h->local_rank,
            cfg->ranksPerNode > 0 ? " by SQUALL_RANKS_PER_NODE" : "");
  else if (h->verdict == squallFlatUneven)
    SQ_INFO("rank %d/%d: %d nodes, node 0 has %d ranks but not every node has as many: flat all-reduce",
            tr->rank, p, nodes, count[0]);
  else
    SQ_INFO("rank %d/%d: %d nodes: flat all-reduce (%s)", tr->rank, p, nodes, flat_doc(h->verdict));
  free(keys);
  free(count);
  return squallSuccess;
}

/* Makes the intra-node and inter-node transports and the inner engine.
 * Every rank calls both splits whatever happened to the first, then all
 * ranks exchange whether they succeeded, so all keep them or none does. */
static squallResult_t make_split(squall_hier *h, void *stream) {
  const squall_transport *tr = h->tr;
  if (tr->split == NULL || tr->reduce_scatter_f32 == NULL) {
    h->split_state = 2;
    h->split_reason = squallFlatNoSplit;
    SQ_WARN("rank %d: %d nodes of %d ranks, but this transport cannot make node communicators "
            "(no ncclCommSplit: NCCL < 2.18?); every call runs flat",
            tr->rank, h->nodes, h->local_size);
    return squallSuccess;
  }
  char why[256] = "";
  squallResult_t r1 = tr->split(tr->ctx, stream, h->node, h->local_rank, &h->intra);
  if (r1 != squallSuccess) snprintf(why, sizeof why, "%s", squallGetLastError());
  squallResult_t r2 = tr->split(tr->ctx, stream, h->local_rank, h->node, &h->inter);
  if (r2 != squallSuccess && !why[0]) snprintf(why, sizeof why, "%s", squallGetLastError());
  int ok = r1 == squallSuccess && r2 == squallSuccess;
  if (ok && (h->intra.nranks != h->local_size || h->intra.rank != h->local_rank ||
             h->inter.nranks != h->nodes || h->inter.rank != h->node || h->intra.reduce_scatter_f32 == NULL)) {
    snprintf(why, sizeof why, "the node communicators came out as rank %d/%d and %d/%d, expected %d/%d and %d/%d",
             h->intra.rank, h->intra.nranks, h->inter.rank, h->inter.nranks, h->local_rank, h->local_size,
             h->node, h->nodes);
    ok = 0;
  }
  if (ok && (h->inner = squall__engine_create(&h->inter, h->k)) == NULL) {
    snprintf(why, sizeof why, "out of memory for the inter-node engine");
    ok = 0;
  }
  int64_t all_ok = ok;
  squallResult_t r = tr->allreduce_min_i64_host(tr->ctx, stream, &all_ok, 1);
  if (r == squallSuccess && all_ok == 1) {
    h->split_state = 1;
    return squallSuccess;
  }
  drop_split(h);
  h->split_state = 2;
  h->split_reason = squallFlatSplitFailed;
  SQ_WARN("rank %d: cannot make the node communicators (%s); every call runs flat",
          tr->rank, why[0] ? why : "another rank failed");
  return r;
}

int squall__hier_known(const squall_hier *h, const squallConfig_t *cfg) {
  if (h == NULL) return 0;
  /* found even when flat is configured: the statistics split the bytes at
   * the node boundary */
  if (!h->known || h->rpn != cfg->ranksPerNode) return -1;
  if (cfg->hierarchy == squallHierarchyFlat || h->verdict >= 0) return 0;
  if (h->split_state == 0) return -1;
  return h->split_state == 1;
}

int squall__hier_one_node(const squall_hier *h, const squallConfig_t *cfg) {
  return h != NULL && h->known && h->rpn == cfg->ranksPerNode && h->verdict == squallFlatOneNode;
}

squallResult_t squall__hier_route(squall_hier *h, const squallConfig_t *cfg, void *stream, int *flat_reason) {
  *flat_reason = squallFlatConfigured;
  if (h == NULL) return squallSuccess;
  if (!h->known || h->rpn != cfg->ranksPerNode) { /* first call, or new SQUALL_RANKS_PER_NODE */
    /* Shards of another node size hold other elements on other ranks:
     * carrying their residuals over would take a collective exchange for
     * a setting that changes once, if ever. They are dropped, and said so. */
    if (h->inner && squall__engine_stats(h->inner)->calls)
      SQ_WARN("rank %d: SQUALL_RANKS_PER_NODE changed from %d to %d: the two-level shard residuals are dropped "
              "(what they held back is never sent; error feedback restarts from zero)",
              h->tr->rank, h->rpn, cfg->ranksPerNode);
    drop_split(h);
    SQ_FORWARD_IF_ERROR(discover(h, cfg, stream));
  }
  if (cfg->hierarchy == squallHierarchyFlat) return squallSuccess;
  if (h->verdict >= 0) {
    *flat_reason = h->verdict;
    return squallSuccess;
  }
  if (h->split_state == 0) SQ_FORWARD_IF_ERROR(make_split(h, stream));
  *flat_reason = h->split_state == 1 ? -1 : h->split_reason;
  return squallSuccess;
}

/* ------------------------------------------------------------ the run */

static void shape_of(const squall_hier *h, const squall_call *c, squall_hier_shape *sh) {
  if (c->coll == SQ_COLL_REDUCE_SCATTER) return squall__hier_scatter_shape(h, c, sh);
  size_t L = (size_t)h->local_size;
  sh->n = c->count;
  sh->s = (c->count + L - 1) / L;
  sh->padded = sh->s * L;
  sh->direct_in = c->dtype == SQ_DT_F32 && c->premul == 1.0f && sh->padded == sh->n;
  sh->direct_out = c->dtype == SQ_DT_F32 && c->op == SQ_OP_SUM && sh->padded == sh->n;
  sh->need = (sh->direct_in && sh->direct_out ? 0 : squall__align_up(sh->padded * sizeof(float))) +
             squall__align_up(sh->s * sizeof(float));
}

/* A reduce-scatter's shard is reduce-scattered across nodes, straight
 * into the caller's receive buffer (hierarchy_scatter.c); an all-reduce's
 * is all-reduced in place. */
squall_call squall__hier_shard_call(const squall_call *c, const squallConfig_t *rc, float *shard, size_t s,
                                    squall_shard *sh) {
  *sh = (squall_shard){.cfg = rc, .key = c->send, .key_recv = c->recv, .whole = c};
  int scatter = c->coll == SQ_COLL_REDUCE_SCATTER;
  squall_call ic = {
      .send = shard,
      .recv = scatter ? c->recv : shard,
      .count = s,
      .coll = c->coll,
      .dtype = SQ_DT_F32,
      .elsize = 4,
      .op = SQ_OP_SUM,
      .premul = 1.0f,
      .stream = c->stream,
      .capturing = c->capturing,
      .shard = sh,
  };
  return ic;
}

/* The inner engine's scratch for the shard of c. */
static size_t inner_bytes(const squall_hier *h, const squall_call *c, const squallConfig_t *rc, const squall_hier_shape *sh) {
  size_t bytes = 0;
  squall_shard shd;
  squall_call ic = squall__hier_shard_call(c, rc, (float *)h->buf, sh->s, &shd);
  squall__engine_prepare_shard(h->inner, &ic, 0, &bytes);
  return bytes;
}

int squall__hier_grows(squall_hier *h, const squall_call *c, const squallConfig_t *rc) {
  if (h == NULL || h->split_state != 1) return 0;
  squall_hier_shape sh;
  shape_of(h, c, &sh);
  return sh.need > h->planned_buf || inner_bytes(h, c, rc, &sh) > h->planned_inner;
}

int squall__hier_ready(squall_hier *h, const squall_call *c, const squallConfig_t *rc) {
  if (h == NULL || h->split_state != 1) return 0;
  squall_hier_shape sh;
  shape_of(h, c, &sh);
  /* the plan, the same on every rank, not this rank's allocations */
  if (sh.need > h->planned_buf || inner_bytes(h, c, rc, &sh) > h->planned_inner) return 0;
  squall_shard shd;
  squall_call ic = squall__hier_shard_call(c, rc, (float *)h->buf, sh.s, &shd);
  return squall__engine_ready(h->inner, &ic);
}

squallResult_t squall__hier_prepare(squall_hier *h, const squall_call *c, const squallConfig_t *rc) {
  const squall_kernels *k = h->k;
  const char *coll = c->coll == SQ_COLL_REDUCE_SCATTER ? "reduce-scatter" : "all-reduce"; /* both come here */
  SQ_RETURN_ERROR_IF(h->split_state != 1 || h->inner == NULL, squallInternalError,
                     "two-level %s prepared without node communicators", coll);
  squall_hier_shape sh;
  shape_of(h, c, &sh);
  if (sh.need > h->buf_bytes) {
    /* the new one first: on failure the old one stays */
    size_t bytes = sh.need;
    void *p = squall__graph_memory_replace(&h->graphs, k, c->stream, h->buf, h->buf_bytes, &bytes);
    SQ_RETURN_ERROR_IF(p == NULL, squallSystemError,
                       "cannot allocate %zu bytes of %s scratch for the two-level %s", sh.need, k->name, coll);
    h->buf = p;
    h->buf_bytes = bytes;
  }
  /* Everything the run will need, now, before the outer header: the node
   * reduce-scatter's own memory, and the inner engine's scratch, shard
   * residual and its backup. A failure here is shared by the header and
   * every rank passes the call through; after it, nothing allocates. */
  if (h->intra.reserve_reduce_scatter)
    SQ_FORWARD_IF_ERROR(h->intra.reserve_reduce_scatter(h->intra.ctx, sh.s));
  squall_shard shd;
  squall_call ic = squall__hier_shard_call(c, rc, (float *)h->buf, sh.s, &shd);
  return squall__engine_prepare_shard(h->inner, &ic, 1, NULL);
}

/* The all-reduce's steps: node reduce-scatter, the shard's compressed
 * all-reduce across nodes, node all-gather. */
static squallResult_t allreduce_steps(squall_hier *h, const squall_call *c, const squallConfig_t *rc,
                                      const squall_hier_shape *sh, float *full, float *shard, squall_hier_figures *f,
                                      int *inner_done) {
  const squall_kernels *k = h->k;
  void *stream = c->stream;
  squallResult_t r = squallSuccess;
  const float *in = (const float *)c->send;
  double t0 = squall__now();
  if (!sh->direct_in) {
    r = k->widen(stream, (squall_dtype)c->dtype, c->send, full, sh->n, c->premul);
    if (r == squallSuccess && sh->padded > sh->n)
      r = k->zero(stream, full + sh->n, (sh->padded - sh->n) * sizeof(float));
    in = full;
  }
  f->codec_s += squall__now() - t0;
  if (r == squallSuccess) {
    r = h->intra.reduce_scatter_f32(h->intra.ctx, stream, in, shard, sh->s);
    /* dense: reduce-scatter (+ all-gather below) of s floats per rank inside the node */
    f->intra += (uint64_t)(h->local_size - 1) * sh->s * sizeof(float);
  }
  if (r == squallSuccess) {
    squall_shard shd;
    squall_call ic = squall__hier_shard_call(c, rc, shard, sh->s, &shd);
    squall_decision d;
    r = squall__engine_allreduce(h->inner, &ic, &d);
    if (r == squallSuccess && d.route == SQ_ROUTE_PASS)
      r = squall__fail(squallInternalError, "the inter-node engine passed a shard through (%s)",
                       squallPassReasonName(d.reason));
    *inner_done = r == squallSuccess;
  }
  float *out = sh->direct_out ? (float *)c->recv : full;
  if (r == squallSuccess) {
    r = h->intra.allgather(h->intra.ctx, stream, shard, out, sh->s * sizeof(float));
    f->intra += (uint64_t)(h->local_size - 1) * sh->s * sizeof(float);
  }
  if (r == squallSuccess && !sh->direct_out) {
    double t1 = squall__now();
    float div = c->op == SQ_OP_AVG ? (float)h->tr->nranks : 1.0f;
    r = k->narrow(stream, (squall_dtype)c->dtype, full, c->recv, sh->n, div);
    f->codec_s += squall__now() - t1;
  }
  return r;
}

squallResult_t squall__hier_allreduce(squall_hier *h, const squall_call *c, const squallConfig_t *rc,
                                      squall_hier_figures *f) {
  squall_hier_shape sh;
  shape_of(h, c, &sh);
  SQ_RETURN_ERROR_IF(sh.need > h->buf_bytes, squallInternalError,
                     "two-level scratch of %zu bytes not prepared (%zu)", sh.need, h->buf_bytes);
  if (c->capturing) h->graphs.captured = 1; /* buf is the graph's now */
  /* Every rank runs this call two-level, so every rank prepared it: the
   * plan grows alike everywhere. */
  size_t inner = inner_bytes(h, c, rc, &sh);
  if (sh.need > h->planned_buf) h->planned_buf = sh.need;
  if (inner > h->planned_inner) h->planned_inner = inner;
  int need_full = !(sh.direct_in && sh.direct_out);
  float *full = (float *)h->buf;
  float *shard = (float *)((char *)h->buf + (need_full ? squall__align_up(sh.padded * sizeof(float)) : 0));
  const squallStats_t *is = squall__engine_stats(h->inner);
  uint64_t wire0 = is->bytesWire, chunks0 = is->pipelineChunks;
  double codec0 = is->codecSeconds;
  memset(f, 0, sizeof *f);
  int inner_done = 0;
  squallResult_t r = c->coll == SQ_COLL_REDUCE_SCATTER
                         ? squall__hier_scatter_steps(h, c, rc, &sh, full, shard, f, &inner_done)
                         : allreduce_steps(h, c, rc, &sh, full, shard, f, &inner_done);
  if (r != squallSuccess && inner_done) {
    /* The shard's residual moved on with a call that now fails: put it
     * back, so that the residuals hold what they held before the call. */
    char why[512];
    snprintf(why, sizeof why, "%s", squallGetLastError());
    if (squall__engine_undo_shard(h->inner, c->stream) != squallSuccess)
      SQ_WARN("restoring a shard residual after a failure failed too: %s", squallGetLastError());
    squall__fail(r, "%s", why);
  }
  f->inter = is->bytesWire - wire0;
  f->chunks = is->pipelineChunks - chunks0;
  f->codec_s += is->codecSeconds - codec0;
  return r;
}

/* Nodes not known yet (no compressed call so far) count as crossing: the
 * inter-node bytes are never less than what crossed (squall(7)). */
int squall__hier_crosses(const squall_hier *h) {
  int p = h ? h->tr->nranks : 1;
  if (!(h && h->known && p > 1)) return 1;
  int me = h->tr->rank;
  return h->node_of[(me + 1) % p] != h->node_of[me];
}

void squall__hier_record(const squall_hier *h, squallStats_t *local, int path, int flat_reason, uint64_t wire) {
  int crosses = squall__hier_crosses(h);
  squall__stats_record_path(local, path, flat_reason, crosses ? wire : 0, crosses ? 0 : wire);
}

squallResult_t squall__hier_reset(squall_hier *h) {
  return h && h->inner ? squall__engine_reset_residuals(h->inner) : squallSuccess;
}

struct squall_tensor *squall__hier_shard_slot(squall_hier *h, const squall_call *c, size_t *first, size_t *s) {
  /* a reduce-scatter's shard residual is not one run of c's elements
   * (hierarchy_scatter.c): it waits for the tensor's next compressed call */
  if (h == NULL || h->inner == NULL || c->count == 0 || c->coll == SQ_COLL_REDUCE_SCATTER) return NULL;
  size_t L = (size_t)h->local_size;
  *s = (c->count + L - 1) / L;
  *first = (size_t)h->local_rank * *s;
  squall_shard shd;
  squall_call ic = squall__hier_shard_call(c, NULL, NULL, *s, &shd); /* only its residual's key and kind */
  return squall__engine_carrier_slot(h->inner, &ic);
}

squallResult_t squall__hier_get_residual(squall_hier *h, const void *key, size_t count, int dtype, float *out,
                                         int have, int *found) {
  *found = 0;
  if (h == NULL || h->inner == NULL || count == 0) return squallSuccess;
  size_t L = (size_t)h->local_size, s = (count + L - 1) / L;
  float *mine = malloc(s * sizeof(float));
  SQ_RETURN_ERROR_IF(mine == NULL, squallSystemError, "out of memory reading a shard residual");
  if (squall__engine_get_residual(h->inner, key, s, dtype, count, mine) != squallSuccess) {
    free(mine);
    return squallSuccess; /* no shard residual for this tensor */
  }
  if (!have) memset(out, 0, count * sizeof(float));
  size_t first = (size_t)h->local_rank * s;
  for (size_t j = 0; j < s && first + j < count; j++) out[first + j] += mine[j];
  free(mine);
  *found = 1;
  return squallSuccess;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * route_topk_scatter.c - top-k for the reduce-scatter: a sparse
 * reduce-scatter whose bytes per rank do not grow with the rank count.
 *
 * The send buffer is p blocks of recvcount (rc) floats, block j owned by
 * rank j. Each rank forms a = g + residual and selects, within each
 * owner's block on its own, the top k_b = squall__topk_k(rc, ratio)
 * entries (the kernel set's top-k, run on the block as a vector of rc
 * elements: the same selection and tie rule as the all-reduce's, indices
 * local to the block). Every owner so receives exactly one slot of k_b
 * entries from each rank: a fixed-size all-to-all of one slot per peer.
 * The owner adds the p slots into its dense fp32 shard in rank order (its
 * own included; the kernel set's rank-ordered sparse sum), which is the
 * result. The encoder leaves in the residual exactly what was not sent
 * (a - the sent value as it travelled), so that per element decode + new
 * residual == a bit for bit, and mass is conserved over steps.
 *
 * Nothing here depends on SQUALL_CHUNK_BYTES or on buffer addresses: the
 * same call gives the same shard and residual on a rerun, pipelined or
 * not. The residual's way back is the engine's (prepare.c): a spare the
 * host encoder writes into, a copy before the route runs, or nothing
 * where every failure ends the process.
 */
#include "common/internal.h"

#include "codecs/codec.h"
#include "engine/plan.h"

/* Elements per owner's block (MPI_Reduce_scatter_block's recvcount). */
static size_t block_elems(const squall_engine *e, const squall_call *c) {
  return e->tr.nranks > 0 ? c->count / (size_t)e->tr.nranks : c->count;
}

/* mine: one slot per owner (what this rank sends); slots: one per
 * sender (what this rank receives); the workspace of one block. */
static void tks_layout(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, scratch_layout *L,
                       size_t *off) {
  size_t rc = block_elems(e, c), p = (size_t)e->tr.nranks;
  L->k = squall__topk_k(rc, cfg->topkRatio);
  L->sb = squall__topk_slot_bytes(L->k, cfg->topkValues);
  L->rounds = 1;
#define PLACE(field, bytes) (L->field = *off, *off += squall__align_up(bytes))
  PLACE(mine, p * L->sb);
  PLACE(slots, p * L->sb);
  PLACE(topk_ws, e->k.topk_workspace_bytes(rc, L->k));
#undef PLACE
}

static int tks_carve(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  const scratch_layout *L = &plan->L;
  size_t p = (size_t)e->tr.nranks;
  st->mine = squall__carve(e, L->mine, p * L->sb);
  st->slots = squall__carve(e, L->slots, p * L->sb);
  st->topk_ws = squall__carve(e, L->topk_ws, e->k.topk_workspace_bytes(block_elems(e, c), L->k));
  return !st->mine || !st->slots || !st->topk_ws;
}

/* Block j's selection into its slot, and the residual's update where the
 * guard allows: into the spare (the host), or in place (the engine made a
 * copy first, or failures are fatal). Without a residual, the selection
 * alone. */
static squallResult_t select_block(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st,
                                   size_t j) {
  size_t rc = block_elems(e, c), k = plan->L.k, lo = j * rc;
  squallValueType_t vt = plan->rc.topkValues;
  void *slot = (char *)st->mine + j * plan->L.sb;
  const float *scale = &st->scalars[1];
  if (st->res == NULL)
    return e->k.topk_select(c->stream, st->g + lo, NULL, rc, k, vt, scale, slot, st->topk_ws);
  if (st->guard == SQ_GUARD_SPARE)
    return e->k.topk_encode_to(c->stream, st->g + lo, st->res + lo, st->spare + lo, rc, k, vt, scale, slot,
                               st->topk_ws);
  SQ_RETURN_ERROR_IF(st->guard != SQ_GUARD_COPY && st->guard != SQ_GUARD_IN_PLACE, squallInternalError,
                     "top-k reduce-scatter: residual guard %d has no encoder here", (int)st->guard);
  return e->k.topk_encode(c->stream, st->g + lo, st->res + lo, rc, k, vt, scale, slot, st->topk_ws);
}

/* fp16 values: one power-of-two scale for the whole call, from a's
 * absolute maximum (each slot carries it), as the all-reduce's top-k. */
static squallResult_t encode_all(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  if (plan->rc.topkValues == squallValueFp16) {
    SQ_FORWARD_IF_ERROR(e->k.absmax(c->stream, st->g, st->res, c->count, &st->scalars[0], st->absmax_ws));
    SQ_FORWARD_IF_ERROR(e->k.pow2_scale(c->stream, &st->scalars[0], SQ_F16_MAX, sq_pow2(100), &st->scalars[1]));
  }
  for (size_t j = 0; j < (size_t)e->tr.nranks; j++) SQ_FORWARD_IF_ERROR(select_block(e, c, plan, st, j));
  return squallSuccess;
}

/* The owner's shard: the p slots summed in rank order into out (rc
 * floats), every slot validated first. The device set flags a corrupt
 * slot in kernel memory: read back where the call may wait (not under
 * graph capture), as the all-reduce's top-k does. */
static squallResult_t decode_shard(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st,
                                   float *out) {
  int *flag = (int *)&st->scalars[2];
  SQ_FORWARD_IF_ERROR(e->k.zero(c->stream, flag, sizeof *flag));
  SQ_FORWARD_IF_ERROR(e->k.topk_finish(c->stream, NULL, NULL, block_elems(e, c), plan->L.k, plan->rc.topkValues,
                                       st->topk_ws, st->slots, e->tr.nranks, e->tr.rank, out, flag));
  if (e->header_every_call || c->capturing) return squallSuccess; /* host: returned directly */
  int bad = 0;
  SQ_FORWARD_IF_ERROR(e->k.to_host(c->stream, &bad, flag, sizeof bad));
  SQ_RETURN_ERROR_IF(bad != 0, squallRemoteError,
                     "a peer's top-k reduce-scatter slot is corrupt (index out of range or not ascending)");
  return squallSuccess;
}

/* Select every block, exchange one slot per owner, sum the own shard.
 * The input is read in full before out (which may be its start: the
 * in-place layout) is written. */
static squallResult_t tks_run(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  int p = e->tr.nranks;
  SQ_RETURN_ERROR_IF(e->tr.alltoall == NULL, squallInternalError, /* plan.c routes no such call here */
                     "top-k reduce-scatter on a transport without an all-to-all");
  double t0 = squall__now();
  SQ_FORWARD_IF_ERROR(encode_all(e, c, plan, st));
  st->codec_s += squall__now() - t0;
  SQ_FORWARD_IF_ERROR(e->tr.alltoall(e->tr.ctx, c->stream, st->mine, st->slots, plan->L.sb));
  st->wire += (uint64_t)(p - 1) * plan->L.sb; /* fp16's scale is each sender's own, in its slots */
  double t1 = squall__now();
  float *out = squall__fp32_out(c, st);
  SQ_FORWARD_IF_ERROR(decode_shard(e, c, plan, st, out));
  SQ_FORWARD_IF_ERROR(squall__finish(e, c, out));
  st->codec_s += squall__now() - t1;
  return squallSuccess;
}

/* One all-to-all of (p - 1) slots per rank; the selection is not
 * pipelined (one chunk). */
static int tks_cost(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, const scratch_layout *L,
                    squall_cost_call *cc) {
  (void)c, (void)cfg;
  cc->wire = (uint64_t)(e->tr.nranks - 1) * L->sb;
  cc->collectives = 1;
  return 1;
}

const squall_route_ops squall__route_topk_scatter = {
    .name = "top-k reduce-scatter",
    .layout = tks_layout,
    .carve = tks_carve,
    .run = tks_run,
    .cost = tks_cost,
};

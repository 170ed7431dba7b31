/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * route_twophase.c - int8/int4/fp8, and fp16/bf16 summed in fp32
 * (twophase.h): encode -> all-to-all -> fp32 sum of the own shard ->
 * re-encode -> all-gather -> decode. A reduce-scatter (its layout's
 * tp.scatter) is the same route stopping after the sum.
 */
#include "common/internal.h"

#include <string.h>

#include "engine/plan.h"

static void twophase_layout(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                            scratch_layout *L, size_t *off) {
  int p = e->tr.nranks;
  if (c->coll == SQ_COLL_REDUCE_SCATTER) squall__twophase_select_scatter(cfg, &L->tp);
  else squall__twophase_select(cfg, c->dtype, &L->tp);
  L->tp.guess = cfg->errorFeedback && e->k.half_encode_guess != NULL; /* the tensor keeps its last scale */
  L->tp.alone = p == 1 && e->k.twophase_alone;
  /* chunks overlap only where the transport has non-blocking calls */
  if (!e->tr.ialltoall || !e->tr.iallgather || !e->tr.wait) L->tp.chunk_bytes = 0;
  L->twophase = *off;
  *off += squall__align_up(squall__twophase_scratch_bytes(&L->tp, c->count, p));
}

static int twophase_carve(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  const scratch_layout *L = &plan->L;
  st->twophase = squall__carve(e, L->twophase, squall__twophase_scratch_bytes(&L->tp, c->count, e->tr.nranks));
  return !st->twophase;
}

/* The residual's copy, where its guard wants one, is made in the encoding
 * pass (SQ_GUARD_FUSED: st->backup). */
static squallResult_t twophase_run(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  float *out = squall__fp32_out(c, st);
  SQ_FORWARD_IF_ERROR(squall__twophase_allreduce(&e->tr, &e->k, &plan->L.tp, c->stream, st->g, st->res, out,
                                                 c->count, st->scalars, st->absmax_ws, st->twophase,
                                                 st->res ? &st->slot->last_scale : NULL, st->backup, &st->backed_up,
                                                 &st->codec_s, &st->wire));
  return squall__finish(e, c, out);
}

static int twophase_cost(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                         const scratch_layout *L, squall_cost_call *cc) {
  (void)cfg;
  size_t n = c->count, se, bb;
  int p = e->tr.nranks;
  squall__twophase_geometry(&L->tp, n, p, &se, &bb);
  cc->wire = (L->tp.scatter ? 1 : 2) * (uint64_t)(p - 1) * bb;
  if (L->tp.alone) { /* one rank: the max of the 16-bit scale, nothing exchanged, nothing pipelined */
    cc->collectives = L->tp.quant ? 0 : 1;
  } else {
    cc->chunks = squall__twophase_chunks(&L->tp, n, p);
    cc->collectives = (L->tp.scatter ? 1 : 2) * (int)cc->chunks + (L->tp.quant ? 0 : 1);
  }
  return 1;
}

const squall_route_ops squall__route_twophase = {
    .name = "two-phase",
    .layout = twophase_layout,
    .carve = twophase_carve,
    .run = twophase_run,
    .cost = twophase_cost,
};

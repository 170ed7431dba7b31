/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * route_half.c - the 16-bit route: global max |a| -> power-of-two scale ->
 * encode -> 16-bit all-reduce -> decode.
 */
#include "common/internal.h"

#include "codecs/codec.h"
#include "engine/plan.h"

static void half_layout(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, scratch_layout *L,
                        size_t *off) {
  (void)e, (void)cfg;
  L->codes = *off;
  *off += squall__align_up(c->count * sizeof(uint16_t));
}

static int half_carve(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  st->codes = squall__carve(e, plan->L.codes, c->count * sizeof(uint16_t));
  return !st->codes;
}

static squallResult_t half_run(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  const squallConfig_t *cfg = &plan->rc;
  sq_half_kind kind = cfg->codec == squallCodecBf16   ? SQ_HALF_BF16
                      : cfg->codec == squallCodecFp16 ? SQ_HALF_FP16
                                                      : squall__dtype_half_kind(c->dtype);
  size_t n = c->count;
  int p = e->tr.nranks;
  void *s = c->stream;
  double t0 = squall__now();
  SQ_FORWARD_IF_ERROR(e->k.absmax(s, st->g, st->res, n, &st->scalars[0], st->absmax_ws));
  double t1 = squall__now();
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_max_f32(e->tr.ctx, s, &st->scalars[0], 1));
  /* The sum of p codes must stay finite: scale the global max to limit/p. */
  unsigned fp = squall__fp_default_begin(); /* every rank's limit, whatever its rounding mode */
  float limit = (kind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX) / (float)p;
  squall__fp_default_end(fp);
  float max_scale = kind == SQ_HALF_FP16 ? sq_pow2(100) : 1.0f; /* bf16: range is float's */
  double t2 = squall__now();
  SQ_FORWARD_IF_ERROR(e->k.pow2_scale(s, &st->scalars[0], limit, max_scale, &st->scalars[1]));
  SQ_FORWARD_IF_ERROR(e->k.half_encode(s, kind, st->g, st->res, st->codes, n, &st->scalars[1]));
  double t3 = squall__now();
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_half(e->tr.ctx, s, st->codes, n, kind));
  double t4 = squall__now();
  float *out = squall__fp32_out(c, st);
  int cold = n * sizeof(float) >= SQ_OUT_COLD_BYTES;
  SQ_FORWARD_IF_ERROR(e->k.half_decode(s, kind, st->codes, out, n, &st->scalars[1], cold));
  SQ_FORWARD_IF_ERROR(squall__finish(e, c, out));
  st->codec_s += (t1 - t0) + (t3 - t2) + (squall__now() - t4);
  st->wire += squall__ring_allreduce_wire(2 * (uint64_t)n, p) + squall__ring_allreduce_wire(4, p);
  return squallSuccess;
}

static int half_cost(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, const scratch_layout *L,
                     squall_cost_call *cc) {
  (void)cfg, (void)L;
  cc->wire = squall__ring_allreduce_wire(2 * (uint64_t)c->count, e->tr.nranks);
  cc->collectives = 2;
  return 1;
}

const squall_route_ops squall__route_half = {
    .name = "16-bit",
    .layout = half_layout,
    .carve = half_carve,
    .run = half_run,
    .cost = half_cost,
};

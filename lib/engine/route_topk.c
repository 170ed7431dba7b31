/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * route_topk.c - top-k: encode a fixed-size slot -> all-gather (or, on a
 * host transport with SQUALL_ZSTD, a lossless-coded all-gather-v; or in
 * rounds that overlap the finish with the wire) -> rank-ordered sparse
 * decode, bit-identical on every rank. And its dense fallback, where the
 * all-gather would send more than the plain all-reduce: the all-reduce of
 * a = g + e, which also empties the residual (for a reduce-scatter, where
 * the slots per owner would send more than the fp32 blocks, the
 * reduce-scatter of a: plan.c, topk_scatter_route).
 */
#include "common/internal.h"

#include <string.h>

#include "codecs/codec.h"
#include "codecs/lossless.h"
#include "engine/plan.h"
#include "engine/topk_rounds.h"

static void topk_layout(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, scratch_layout *L,
                        size_t *off) {
  size_t n = c->count;
  L->k = squall__topk_k(n, cfg->topkRatio);
  L->sb = squall__topk_slot_bytes(L->k, cfg->topkValues);
#define PLACE(field, bytes) (L->field = *off, *off += squall__align_up(bytes))
  PLACE(mine, L->sb);
  PLACE(slots, (size_t)e->tr.nranks * L->sb);
  PLACE(topk_ws, e->k.topk_workspace_bytes(n, L->k));
#undef PLACE
  /* in rounds, the finish overlaps the wire; where the residual is only
   * updated after the exchange, a failed late round would leave it half
   * done, so those calls (no backup: the device's route) take one. The
   * host's encoder updates it first: in place where failures are fatal,
   * into the spare, or where the backup restores it */
  L->rounds = 1;
  if ((!cfg->errorFeedback || L->has_backup) && e->k.topk_in_rounds)
    L->rounds = squall__topk_rounds(&e->tr, n, L->k, cfg->chunkBytes);
}

static size_t lossless_host_bytes(int p, size_t k, squallValueType_t vt) {
  size_t bound = squall__lossless_bound(k, vt), scratch = squall__lossless_scratch_bytes(k, vt);
  return squall__align_up(bound) + squall__align_up((size_t)p * bound) + squall__align_up(scratch) +
         2 * sizeof(size_t) * (size_t)p;
}

/* Host memory for the rounds or the lossless stage. */
static squallResult_t topk_prepare(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  (void)st;
  const squallConfig_t *cfg = &plan->rc;
  const scratch_layout *L = &plan->L;
  if (L->rounds > 1)
    return squall__host_reserve(e, squall__topk_rounds_host_bytes(c->count, L->k, cfg->topkValues, e->tr.nranks,
                                                                  L->rounds, squall__use_lossless(e, cfg)));
  if (squall__use_lossless(e, cfg))
    return squall__host_reserve(e, lossless_host_bytes(e->tr.nranks, L->k, cfg->topkValues));
  return squallSuccess;
}

static int topk_carve(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  const scratch_layout *L = &plan->L;
  st->mine = squall__carve(e, L->mine, L->sb);
  st->slots = squall__carve(e, L->slots, (size_t)e->tr.nranks * L->sb);
  st->topk_ws = squall__carve(e, L->topk_ws, e->k.topk_workspace_bytes(c->count, L->k));
  return !st->mine || !st->slots || !st->topk_ws;
}

/* All-gather of the raw slots into st->slots. */
static squallResult_t exchange_raw(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  SQ_FORWARD_IF_ERROR(e->tr.allgather(e->tr.ctx, c->stream, st->mine, st->slots, plan->L.sb));
  st->wire += (uint64_t)(e->tr.nranks - 1) * plan->L.sb;
  return squallSuccess;
}

/* All-gather of the lossless-coded slots; decodes them into st->slots. */
static squallResult_t exchange_lossless(squall_engine *e, const squall_call *c, const squall_plan *plan,
                                        run_state *st) {
  const squallConfig_t *cfg = &plan->rc;
  int p = e->tr.nranks;
  size_t k = plan->L.k, sb = plan->L.sb;
  squallValueType_t vt = cfg->topkValues;
  size_t bound = squall__lossless_bound(k, vt), scratch = squall__lossless_scratch_bytes(k, vt);
  /* topk_prepare() reserved it: carve the same layout */
  char *send = e->host, *recv = send + squall__align_up(bound), *raw = recv + squall__align_up((size_t)p * bound);
  size_t *sizes = (size_t *)(raw + squall__align_up(scratch));
  size_t *displs = sizes + p;
  double t0 = squall__now();
  /* zstd allocates inside: when it fails here, this rank still joins the
   * all-gather, with an empty payload that every peer rejects, so that all
   * ranks fail this call together instead of waiting for this one. */
  size_t z = squall__lossless_encode(st->mine, k, vt, cfg->zstdLevel, send, bound, raw);
  st->codec_s += squall__now() - t0;
  SQ_FORWARD_IF_ERROR(e->tr.allgatherv(e->tr.ctx, c->stream, send, z, recv, (size_t)p * bound, sizes, displs));
  SQ_RETURN_ERROR_IF(z == 0, squallInternalError, "zstd failed to compress a %zu-entry slot", k);
  double t2 = squall__now();
  for (int r = 0; r < p; r++)
    SQ_RETURN_ERROR_IF(squall__lossless_decode(recv + displs[r], sizes[r], k, vt, c->count,
                                               (char *)st->slots + (size_t)r * sb, raw) != 0,
                       squallRemoteError,
                       "rank %d sent a corrupt or truncated compressed top-k payload (%zu bytes)", r,
                       sizes[r]);
  st->codec_s += squall__now() - t2;
  st->wire += (uint64_t)(p - 1) * (z + sizeof(uint64_t));
  return squallSuccess;
}

/* The device decoder flags a corrupt payload in kernel memory: read it
 * back (a synchronisation) unless the stream is being captured, where no
 * host wait is possible; see squall(7), FAILURE POLICY. */
static squallResult_t check_decode_flag(squall_engine *e, const squall_call *c, run_state *st) {
  if (e->k.on_host || c->capturing) return squallSuccess; /* host: returned directly */
  int flag = 0;
  SQ_FORWARD_IF_ERROR(e->k.to_host(c->stream, &flag, &st->scalars[2], sizeof flag));
  SQ_RETURN_ERROR_IF(flag != 0, squallRemoteError,
                     "a peer's top-k payload is corrupt (index out of range or not ascending)");
  return squallSuccess;
}

/* The selection, and with it the residual's update where its guard
 * allows (prepare.c, residual_guard): into the spare, copying the old one
 * as it reads it, or in place. Otherwise (SQ_GUARD_LATE) the residual is
 * only read here and written after everything that can fail
 * (topk_finish), so that a failed call leaves it as it was. */
static squallResult_t encode(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  const squallConfig_t *cfg = &plan->rc;
  size_t n = c->count, k = plan->L.k;
  void *s = c->stream;
  squallValueType_t vt = cfg->topkValues;
  if (vt == squallValueFp16) {
    SQ_FORWARD_IF_ERROR(e->k.absmax(s, st->g, st->res, n, &st->scalars[0], st->absmax_ws));
    SQ_FORWARD_IF_ERROR(e->k.pow2_scale(s, &st->scalars[0], SQ_F16_MAX, sq_pow2(100), &st->scalars[1]));
  }
  switch (st->guard) {
  case SQ_GUARD_SPARE:
    return e->k.topk_encode_to(s, st->g, st->res, st->spare, n, k, vt, &st->scalars[1], st->mine, st->topk_ws);
  case SQ_GUARD_FUSED:
    SQ_FORWARD_IF_ERROR(e->k.topk_encode_backup(s, st->g, st->res, n, k, vt, &st->scalars[1], st->mine, st->topk_ws,
                                                st->backup));
    st->backed_up = 1; /* whole: the kernel fails only before anything changed */
    return squallSuccess;
  case SQ_GUARD_COPY:
  case SQ_GUARD_IN_PLACE:
    return e->k.topk_encode(s, st->g, st->res, n, k, vt, &st->scalars[1], st->mine, st->topk_ws);
  default: /* no residual, or SQ_GUARD_LATE */
    return e->k.topk_select(s, st->g, st->res, n, k, vt, &st->scalars[1], st->mine, st->topk_ws);
  }
}

static squallResult_t topk_run(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  const squallConfig_t *cfg = &plan->rc;
  size_t n = c->count, k = plan->L.k;
  int res_done = st->res && st->guard != SQ_GUARD_LATE; /* by the encoder */
  double t0 = squall__now();
  SQ_FORWARD_IF_ERROR(encode(e, c, plan, st));
  st->codec_s += squall__now() - t0;
  float *out = squall__fp32_out(c, st);
  if (plan->L.rounds > 1) { /* the residual is done (topk_layout): the exchange and the finish, overlapped */
    squall_topk_rounds_call rc = {
        .tr = &e->tr,
        .n = n,
        .k = k,
        .rounds = plan->L.rounds,
        .values = cfg->topkValues,
        .zstd_level = squall__use_lossless(e, cfg) ? cfg->zstdLevel : 0,
        .mine = st->mine,
        .slots = st->slots,
        .g = st->g,
        .out = out,
        .host = e->host,
    };
    SQ_RETURN_ERROR_IF(st->res && !res_done, squallInternalError, "top-k in rounds with the residual still to update");
    SQ_FORWARD_IF_ERROR(squall__topk_rounds_run(&rc, &st->codec_s, &st->wire));
  } else {
    if (squall__use_lossless(e, cfg)) SQ_FORWARD_IF_ERROR(exchange_lossless(e, c, plan, st));
    else SQ_FORWARD_IF_ERROR(exchange_raw(e, c, plan, st));
    double t1 = squall__now();
    SQ_FORWARD_IF_ERROR(e->k.zero(c->stream, &st->scalars[2], sizeof(int)));
    SQ_FORWARD_IF_ERROR(e->k.topk_finish(c->stream, st->g, res_done ? NULL : st->res, n, k, cfg->topkValues,
                                         st->topk_ws, st->slots, e->tr.nranks, e->tr.rank, out,
                                         (int *)&st->scalars[2]));
    SQ_FORWARD_IF_ERROR(check_decode_flag(e, c, st));
    st->codec_s += squall__now() - t1;
  }
  double t2 = squall__now();
  SQ_FORWARD_IF_ERROR(squall__finish(e, c, out));
  st->codec_s += squall__now() - t2;
  return squallSuccess;
}

/* rounds without the lossless stage go packed where smaller; a lossless
 * call is weighed at its raw size */
static int topk_cost(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, const scratch_layout *L,
                     squall_cost_call *cc) {
  int p = e->tr.nranks, lossless = squall__use_lossless(e, cfg);
  cc->wire = L->rounds > 1 && !lossless ? squall__topk_rounds_wire(c->count, L->k, cfg->topkValues, p, L->rounds)
                                        : (uint64_t)(p - 1) * L->sb;
  /* (rounds overlap the finish only, not the selection: no chunks here) */
  cc->collectives = (int)L->rounds + (lossless ? 1 : 0);
  return 1;
}

const squall_route_ops squall__route_topk = {
    .name = "top-k",
    .layout = topk_layout,
    .prepare = topk_prepare,
    .carve = topk_carve,
    .run = topk_run,
    .cost = topk_cost,
};

/* ------------------------------------------------- the dense fallback */

static void dense_layout(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, scratch_layout *L,
                         size_t *off) {
  (void)e, (void)c, (void)cfg, (void)L, (void)off; /* the common pieces suffice */
}

static int dense_carve(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  (void)e, (void)c, (void)plan, (void)st;
  return 0;
}

static squallResult_t dense_run(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  (void)plan;
  size_t n = c->count;
  int p = e->tr.nranks, scatter = c->coll == SQ_COLL_REDUCE_SCATTER;
  double t0 = squall__now();
  SQ_FORWARD_IF_ERROR(e->k.flush(c->stream, st->g, st->res, st->work, n));
  double t1 = squall__now();
  if (scatter) /* out is this rank's block of n / p floats; plan.c checked the transport has it */
    SQ_FORWARD_IF_ERROR(e->tr.reduce_scatter_f32(e->tr.ctx, c->stream, st->work, squall__fp32_out(c, st),
                                                 n / (size_t)p));
  else SQ_FORWARD_IF_ERROR(e->tr.allreduce_sum_f32(e->tr.ctx, c->stream, st->work, squall__fp32_out(c, st), n));
  double t2 = squall__now();
  SQ_FORWARD_IF_ERROR(squall__finish(e, c, squall__fp32_out(c, st)));
  st->codec_s += (t1 - t0) + (squall__now() - t2);
  /* a ring reduce-scatter sends half of what a ring all-reduce does */
  st->wire += squall__ring_allreduce_wire(4 * (uint64_t)n, p) / (scatter ? 2 : 1);
  return squallSuccess;
}

/* the dense fallback is itself the plain all-reduce's bytes: not weighed */
static int dense_cost(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, const scratch_layout *L,
                      squall_cost_call *cc) {
  (void)e, (void)c, (void)cfg, (void)L, (void)cc;
  return 0;
}

const squall_route_ops squall__route_dense = {
    .name = "dense",
    .layout = dense_layout,
    .carve = dense_carve,
    .run = dense_run,
    .cost = dense_cost,
};

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * engine.c - runs one compressed all-reduce. A call goes through these
 * phases (allreduce() below reads as the list):
 *   1. the call alone, or the configuration the ranks last agreed on,
 *      passes it through without anything collective of squall's;
 *   2. plan: decide() fills an immutable plan from the call and one
 *      snapshot of the configuration (plan.c): route, variant, layout,
 *      whether a header is needed;
 *   3. prepare: everything the plan needs (scratch, residual, the way back
 *      of the residual) is allocated and laid out, locally, before
 *      anything collective happens (prepare.c);
 *   4. agree: the header (header.c) tells every rank whether all ranks
 *      prepared, hold the same configuration and passed the same
 *      arguments, and carries the cost model's figures (costing.c);
 *   5. confirm: the plan stands, or becomes the pass-through every rank
 *      agrees on (a pass-through for the configuration carries its
 *      tensor's residual: fold.c);
 *   6. nodes: the first compressed call finds them, collectively, and may
 *      turn the plan into a two-level one;
 *   7. run: the route (route_*.c); on failure the residual is restored
 *      from its way back and the error is returned.
 * The routes are a table (plan.h): 16-bit, top-k and its dense fallback,
 * two-phase, two-level.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/stats.h"
#include "engine/plan.h"

const squallStats_t *squall__engine_stats(const squall_engine *e) { return &e->stats; }

uint64_t squall__ring_allreduce_wire(uint64_t bytes, int p) {
  return p > 1 ? 2 * (uint64_t)(p - 1) * bytes / (uint64_t)p : 0;
}

uint64_t squall__ring_wire(squall_coll coll, uint64_t bytes, int p) {
  return squall__ring_allreduce_wire(bytes, p) / (coll == SQ_COLL_REDUCE_SCATTER ? 2 : 1);
}

squall_engine *squall__engine_create(const squall_transport *tr, const squall_kernels *k) {
  squall_engine *e = calloc(1, sizeof *e);
  if (e == NULL) return NULL;
  e->tr = *tr;
  e->k = *k;
  e->header_every_call = k->on_host;
  squall__devcost_init(&e->dev, &e->k);
  if (e->dev.on && k->on_host) e->header_every_call = 0; /* the test switch: as on device memory */
  e->residuals = squall__residuals_create(&e->k);
  e->hier = squall__hier_create(&e->tr, &e->k); /* two-level all-reduce */
  if (e->residuals == NULL || e->hier == NULL) {
    squall__residuals_free(e->residuals);
    squall__hier_free(e->hier);
    free(e);
    return NULL;
  }
  return e;
}

void squall__engine_free(squall_engine *e) {
  if (e == NULL) return;
  if (e->stats.calls) {
    const squallStats_t *s = &e->stats;
    SQ_INFO("communicator rank %d/%d: %llu calls, %llu compressed, %llu passed through, "
            "%llu call headers, %llu bytes in, %llu bytes on the wire (%.1fx), %.3f s in codecs (host time)",
            e->tr.rank, e->tr.nranks, (unsigned long long)s->calls,
            (unsigned long long)s->compressedCalls, (unsigned long long)s->passthroughCalls,
            (unsigned long long)s->headers,
            (unsigned long long)s->bytesIn, (unsigned long long)s->bytesWire,
            s->bytesWire ? (double)s->bytesIn / (double)s->bytesWire : 0.0, s->codecSeconds);
  }
  squall__residuals_free(e->residuals);
  squall__hier_free(e->hier); /* two-level: node communicators, inner engine */
  if (e->scratch) e->k.free(NULL, e->scratch);
  squall__graph_memory_free(&e->graphs, &e->k);
  if (e->fence && e->k.fence_free) e->k.fence_free(e->fence);
  squall__devcost_free(&e->dev, &e->k);
  free(e->host);
  free(e->fold_buf);
  free(e);
}

/* In log lines. */
static const char *coll_name(const squall_call *c) {
  return c->coll == SQ_COLL_REDUCE_SCATTER ? "reduce-scatter" : "all-reduce";
}

/* ----------------------------------------------------------------- run */
/* Puts the result, now fp32 in `out` (recv itself for fp32 data, the work
 * buffer otherwise), into recv: average and narrowing in one pass. */
squallResult_t squall__finish(squall_engine *e, const squall_call *c, float *out) {
  float div = c->op == SQ_OP_AVG ? (float)e->tr.nranks : 1.0f;
  size_t n_out = c->coll == SQ_COLL_REDUCE_SCATTER ? c->count / (size_t)e->tr.nranks : c->count;
  if (c->dtype == SQ_DT_F32 && div == 1.0f) return squallSuccess;
  return e->k.narrow(c->stream, (squall_dtype)c->dtype, out, c->recv, n_out, div);
}

/* fp32 data lands in recv directly; narrower data in the work buffer first. */
float *squall__fp32_out(const squall_call *c, run_state *st) {
  return c->dtype == SQ_DT_F32 ? (float *)c->recv : st->work;
}

/* A flat route: the gradient in fp32, the residual's copy where its guard
 * wants one (prepare.c, residual_guard), the route, and on failure the
 * residual put back. */
squallResult_t squall__run(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  if (plan->route == SQ_ROUTE_TWOLEVEL) return plan->ops->run(e, c, plan, st); /* the hierarchy's own steps */
  size_t n = c->count;
  double t0 = squall__now();
  if (c->dtype == SQ_DT_F32 && c->premul == 1.0f) {
    st->g = c->send;
  } else {
    SQ_FORWARD_IF_ERROR(e->k.widen(c->stream, (squall_dtype)c->dtype, c->send, st->work, n, c->premul));
    st->g = st->work;
  }
  if (st->slot && st->res) st->slot->unsent = 1; /* what the codec leaves, until a fold empties it */
  st->backed_up = 0;
  if (st->guard == SQ_GUARD_COPY) {
    SQ_FORWARD_IF_ERROR(e->k.widen(c->stream, SQ_DT_F32, st->res, st->backup, n, 1.0f));
    st->backed_up = 1;
  }
  st->codec_s += squall__now() - t0;
  squallResult_t r = plan->ops->run(e, c, plan, st);
  if (r != squallSuccess && st->res && st->backed_up) {
    char why[512];
    snprintf(why, sizeof why, "%s", squallGetLastError());
    if (e->k.widen(c->stream, SQ_DT_F32, st->backup, st->res, n, 1.0f) != squallSuccess)
      SQ_WARN("restoring a %zu-element residual after a failure failed too: %s", n, squallGetLastError());
    squall__fail(r, "%s", why); /* keep the first failure as the detail */
  }
  if (r == squallSuccess && st->spare && squall__residuals_take_spare(e->residuals, st->slot) != 0)
    r = squall__fail(squallInternalError, "the %zu-element residual's spare went missing during the call", n);
  if (r == squallSuccess && c->shard && st->backed_up) { /* the outer call may still fail: keep the way back */
    e->undo_res = st->res;
    e->undo_backup = st->backup;
    e->undo_n = n;
  }
  return r;
}

/* ------------------------------------------------------ phase 1: no plan */
/* Calls that need no header. squallSetConfig is collective (squall(7)):
 * every rank calls it between the same two calls of each communicator,
 * so every rank sees the generation move at the same call, and that call
 * exchanges a header, where the ranks agree on the new configuration.
 * While the generation stays where the ranks last agreed, this rank's
 * configuration is the agreed one, and what it passes through whatever
 * the others say (compression off, below the size threshold, fewer ranks
 * than SQUALL_MIN_RANKS) costs nothing more than the plain call. */
static int agreed(const squall_engine *e, uint64_t gen) {
  return e->agreed_valid && e->agreed_gen == gen && e->agreed_ok;
}

static int agreed_pass(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, uint64_t gen,
                       squallPassReason_t *why) {
  if (c->shard || !agreed(e, gen)) return 0;
  if (e->tr.nranks < cfg->minRanks) *why = squallPassSingleRank;
  else if (cfg->codec == squallCodecNone) *why = squallPassDisabled;
  else if (squall__collective_off(c, cfg)) *why = squallPassCollectiveOff;
  else if (c->count * c->elsize < cfg->minBytes) *why = squallPassSmall;
  else return 0;
  if (e->agreed_nonblocking) *why = squallPassNonblocking; /* decide()'s order */
  return 1;
}

/* Agreed pass-throughs that are never compressed while the configuration
 * stands (below SQUALL_MIN_BYTES, fewer ranks than SQUALL_MIN_RANKS): the
 * cost model has no use for their plain call's time. Compression off keeps
 * its timings: a job may turn it on, and squall-bench's warm-ups time plain
 * so. From the reason alone, the same on every rank: the model's plain
 * counts steer its probes, which every rank must choose alike. */
static int untimed(squallPassReason_t why) {
  return why == squallPassSmall || why == squallPassSingleRank || why == squallPassCollectiveOff;
}


/* An agreed pass-through (agreed_pass() said so): whether its plain call is
 * timed, and the fold of what its tensor holds. */
static void pass_agreed(squall_engine *e, const squall_call *c, squall_decision *d);

/* A call of a size class the cost model has settled as not paying
 * (squall__settled_plain): its bookkeeping, and the fold of what its
 * tensor holds. */
static void pass_settled(squall_engine *e, const squall_call *c, const squallConfig_t *cfg, squall_decision *d) {
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  d->reason = squallPassNotPaying;
  squall__cost_declined(squall__cost_of(e, c), bytes_in); /* counts toward the next exploration */
  squall__cost_judged(squall__cost_of(e, c), bytes_in, 1);
  if (squall__can_fold(e, c)) squall__fold_into_plain(e, c, NULL, NULL, d); /* marks the tensor as used too */
  else if (cfg->errorFeedback) squall__residuals_touch(e->residuals, squall__hint_of(c), c->count, squall__kind_of(c));
}

/* Calls that pass through before any plan: the agreed configuration's, and
 * size classes the cost model has settled as not paying. */
static int passes_unplanned(squall_engine *e, const squall_call *c, const squallConfig_t *cfg, uint64_t gen,
                            squall_decision *d) {
  if (agreed_pass(e, c, cfg, gen, &d->reason)) { /* (squall__engine_passes takes these first) */
    pass_agreed(e, c, d);
    return 1;
  }
  if (!squall__settled_plain(e, c, (uint64_t)c->count * c->elsize)) return 0;
  pass_settled(e, c, cfg, d);
  return 1;
}

/* ------------------------------------------------- phases 3 to 6 */

/* A call that passes through as non-blocking prepares nothing (no
 * scratch, no residual charged to SQUALL_EF_MAX_BYTES): where the header
 * decides, when this rank's communicator is non-blocking or the last
 * header found one (then it says "not ready", which passes through too
 * should the mode have changed); without a header, when the last one
 * found one, which decides then. */
static int skips_prepare(const squall_engine *e, const squall_call *c, const squall_plan *plan) {
  return e->agreed_nonblocking || (plan->headed && c->nonblocking); /* agreed_nonblocking: 0 before any header */
}

static squallResult_t prepare_plan(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  if (plan->grow_hier) st->fresh = 1; /* new memory: not timed */
  if (plan->route == SQ_ROUTE_PASS || skips_prepare(e, c, plan)) return squallSuccess;
  return squall__prepare(e, c, plan, st);
}

/* A shard: the outer call exchanged the header, so a failure now is an
 * error, and the plan is the one every rank runs. */
static squallResult_t run_shard(squall_engine *e, const squall_call *c, const squall_plan *plan, squallResult_t prep,
                                squall_decision *d, run_state *st) {
  if (prep != squallSuccess) return prep;
  d->route = plan->route;
  d->reason = plan->reason;
  if (d->route == SQ_ROUTE_PASS) return squallSuccess; /* the outer call's error (hierarchy.c) */
  SQ_FORWARD_IF_ERROR(squall__run(e, c, plan, st));
  st->chunks = squall__call_chunks(e, c, &plan->rc, plan->route, &plan->L); /* the outer call records them */
  return squallSuccess;
}

/* What every rank knows of the call: from its header, or, on a device call
 * without one, from the last header (the local failure cannot be shared
 * without a synchronisation, so it is returned: the communicator must
 * then be aborted, as after any NCCL error). */
static squallResult_t agree(squall_engine *e, const squall_call *c, const squall_plan *plan, squallResult_t prep,
                            squall_decision *d, squall_agreement *ag, squall_cost_verdict *v) {
  memset(v, 0, sizeof *v);
  v->model_pays = 1;
  *ag = (squall_agreement){.agreed = 1, .all_ok = 1, .foreign = c->foreign, .pays = 1};
  if (prep != squallSuccess)
    SQ_WARN("rank %d: cannot prepare a %zu-element %s: %s", e->tr.rank, c->count, coll_name(c), squallGetLastError());
  if (plan->headed) {
    if (plan->dev) squall__devcost_vote(e, c, plan, v);
    else squall__cost_vote(e, c, plan, v);
    double th = squall__now();
    SQ_FORWARD_IF_ERROR(squall__header(e, c, plan, prep == squallSuccess && !skips_prepare(e, c, plan), ag, v));
    /* A plain call's whole time, which the model compares with compressed
     * ones (header included), leaves the header out: once the model has
     * declined a size class its calls skip it (squall__cost_settled), and
     * on 4 ranks over 2 cores it took 0.2-0.3 ms of a 0.5 ms call at 64 KiB,
     * which made compressing look faster than it was. */
    d->t_start += squall__now() - th;
    ag->pays = plan->dev ? squall__devcost_agree(e, c, plan, ag, v) : squall__cost_agree(e, c, plan, v);
    if (plan->grow && ag->agreed && ag->all_ok) e->scratch_planned = plan->L.total; /* every rank has it */
  } else {
    if (prep != squallSuccess) return prep;
    ag->agreed = e->agreed_ok;
  }
  ag->nonblocking = e->agreed_nonblocking;
  ag->count = e->residuals;
  return squallSuccess;
}

/* The agreed pass-through: its tensor's residual rides along where the
 * configuration passes it. */
static squallResult_t pass_planned(squall_engine *e, const squall_call *c, const squall_plan *plan,
                                   squall_decision *d, run_state *st) {
  if (plan->reason == squallPassError)
    SQ_WARN("rank %d: a rank could not prepare a %zu-element %s: every rank passes it through", e->tr.rank,
            c->count, coll_name(c));
  if (squall__folds_for(plan->reason)) squall__fold_into_plain(e, c, st->work, st->slot, d);
  if (plan->one_node) squall__say_one_node(e);
  if (plan->dev_plain && plan->reason == squallPassNotPaying) /* the caller's plain call: timed */
    d->dev_timing = squall__devcost_start(e, c, plan, -1);
  return squallSuccess;
}

/* The nodes. The first compressed call with this node setting finds
 * them: every rank is here at the same call (the decision is the same
 * everywhere), so the nodes can be found and the node communicators
 * made, collectively. The flat route was prepared; where the nodes allow
 * two levels the call runs two-level instead, if every rank could
 * allocate its memory (later calls prepare two-level before their
 * header). */
static squallResult_t find_nodes(squall_engine *e, const squall_call *c, squall_plan *plan, run_state *st) {
  if (plan->two_level == 0) {
    squall__hier_route(e->hier, &plan->cfg, c->stream, &st->flat_reason); /* known: only the reason */
    if (plan->variant & SQ_VARIANT_FLAT) st->flat_reason = squallFlatSlower;
  }
  if (plan->two_level >= 0) return squallSuccess;
  SQ_FORWARD_IF_ERROR(squall__hier_route(e->hier, &plan->cfg, c->stream, &st->flat_reason));
  plan->two_level = squall__hier_known(e->hier, &plan->cfg);
  if ((plan->one_node = squall__device_on_one_node(e, &plan->cfg, c))) {
    /* nothing has run yet: every rank passes this call through too */
    plan->route = SQ_ROUTE_PASS;
    plan->reason = squallPassNotPaying;
    plan->ops = NULL;
    squall__say_one_node(e);
    return squallSuccess;
  }
  if (plan->two_level != 1) return squallSuccess;
  squallResult_t hp = squall__hier_prepare(e->hier, c, &plan->rc);
  if (hp != squallSuccess)
    SQ_WARN("rank %d: cannot prepare the two-level path: %s", e->tr.rank, squallGetLastError());
  int64_t ok = hp == squallSuccess;
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_min_i64_host(e->tr.ctx, c->stream, &ok, 1));
  if (ok) {
    plan->route = SQ_ROUTE_TWOLEVEL;
    plan->ops = &squall__route_twolevel;
  }
  return squallSuccess;
}

/* -------------------------------------------------------------- the call */

/* The configuration the call runs with: one snapshot for the whole call
 * (the engine's own, or the process's), or a shard's, handed down by its
 * outer call. */
static void snapshot(const squall_engine *e, const squall_call *c, squallConfig_t *cfg, uint64_t *gen) {
  if (c->shard) {
    *cfg = *c->shard->cfg;
    *gen = 0;
  } else if (e->own_gen) {
    *cfg = e->own_cfg;
    *gen = e->own_gen;
  } else {
    squall__config_get(cfg, gen);
  }
}

uint64_t squall__engine_generation(const squall_engine *e) {
  return e->own_gen ? e->own_gen : squall__config_generation();
}

squallResult_t squall__engine_set_config(squall_engine *e, const squallConfig_t *cfg) {
  SQ_FORWARD_IF_ERROR(squall__config_take(cfg, &e->own_cfg, "squallCollSetConfig"));
  e->agreed_valid = 0; /* the next call exchanges a header: its generation may equal one the process's had */
  e->own_gen++;
  return squallSuccess;
}

static squallResult_t allreduce(squall_engine *e, const squall_call *c, squall_decision *d, run_state *st) {
  squallConfig_t cfg;
  uint64_t gen;
  squall_plan plan;
  squall_agreement ag;
  squall_cost_verdict v;
  e->last_stream = c->stream;
  d->route = SQ_ROUTE_PASS;
  if (c->shard) e->undo_res = NULL; /* set again when this shard's residual moves */
  /* 1. a pass-through goes to the library unchanged, whatever its count */
  if (squall__call_pass_reason(c, &d->reason)) return squallSuccess;
  SQ_RETURN_ERROR_IF(c->count > SQ_MAX_COUNT, squallInvalidArgument,
                     "count %zu is too large (at most %zu elements)", c->count, (size_t)SQ_MAX_COUNT);
  snapshot(e, c, &cfg, &gen);
  if (passes_unplanned(e, c, &cfg, gen, d)) return squallSuccess;
  /* 2. */
  squall__plan_make(e, c, &cfg, gen, &plan);
  if (c->capturing && !squall__capture_ready(e, c, &plan)) {
    d->reason = squallPassCapture;
    return squallSuccess;
  }
  if (c->capturing && plan.route != SQ_ROUTE_PASS) e->graphs.captured = 1; /* its scratch is the graph's now */
  squall__devcost_count(e, c, &plan);
  st->flat_reason = squallFlatConfigured;
  /* 3. */
  squallResult_t prep = prepare_plan(e, c, &plan, st);
  if (c->shard) return run_shard(e, c, &plan, prep, d, st);
  /* 4. and 5. */
  SQ_FORWARD_IF_ERROR(agree(e, c, &plan, prep, d, &ag, &v));
  squall__plan_confirm(&plan, c, &ag);
  if (!plan.dev) squall__cost_after(e, c, &plan, &v, ag.agreed); /* the device schedule keeps its own */
  d->reason = plan.reason;
  if (plan.route == SQ_ROUTE_PASS) return pass_planned(e, c, &plan, d, st);
  /* 6. */
  SQ_FORWARD_IF_ERROR(find_nodes(e, c, &plan, st));
  d->route = plan.route;
  d->reason = plan.reason;
  if (plan.route == SQ_ROUTE_PASS) return squallSuccess;
  /* 7. */
  double t0 = squall__now();
  int timing = squall__devcost_start(e, c, &plan, squall__cost_kind(&plan.rc, plan.route));
  squallResult_t r = squall__run(e, c, &plan, st);
  squall__devcost_stop(e, timing, c->stream, r == squallSuccess, st->fresh);
  SQ_FORWARD_IF_ERROR(r);
  squall__cost_learn(e, c, &plan, st, squall__now() - t0);
  return squallSuccess;
}

static void pass_agreed(squall_engine *e, const squall_call *c, squall_decision *d) {
  d->untimed = untimed(d->reason);
  squall__fold_into_plain(e, c, NULL, NULL, d); /* this rank's own affair: the collective is plain either way */
}

int squall__engine_never_compresses(const squall_call *c) {
  squallPassReason_t why;
  return squall__call_pass_reason(c, &why);
}

/* A decision to pass c through, before its reason (t_start 0: the plain
 * call's own start, a clock read saved), and its record once decided. */
static void pass_decision(const squall_call *c, squall_decision *d) {
  memset(d, 0, sizeof *d);
  d->route = SQ_ROUTE_PASS;
  d->coll = c->coll;
}

static void record_pass(squall_engine *e, const squall_call *c, squall_decision *d) {
  run_state st;
  memset(&st, 0, sizeof st);
  squall__record(e, c, d, squallSuccess, &st);
}

int squall__engine_passes(squall_engine *e, const squall_call *c, squall_decision *d) {
  pass_decision(c, d);
  int pass = squall__call_pass_reason(c, &d->reason);
  /* while the generation stands where the ranks agreed, this rank's
   * configuration is the one they agreed on: no snapshot needed */
  if (!pass && c->count <= SQ_MAX_COUNT && e->agreed_valid &&
      agreed_pass(e, c, &e->agreed_cfg, squall__engine_generation(e), &d->reason)) {
    pass = 1;
    pass_agreed(e, c, d);
    d->t_start = 0; /* the plain call's own start: the fold, before it, is left out */
  }
  if (!pass) return 0;
  record_pass(e, c, d);
  return 1;
}

int squall__engine_passes_settled(squall_engine *e, const squall_call *c, squall_decision *d) {
  /* the agreed configuration is this rank's while the generation stands
   * where the ranks agreed: no snapshot, which copies the whole
   * configuration (22 cache lines read and written, a quarter of what a
   * settled class's call touched in all; on 4 ranks over 2 cores each
   * line costs the rank that shares the core) */
  if (c->count > SQ_MAX_COUNT || !agreed(e, squall__engine_generation(e)) ||
      !squall__settled_plain(e, c, (uint64_t)c->count * c->elsize))
    return 0;
  pass_decision(c, d);
  d->t_start = squall__now(); /* the whole call, as a planned call is timed */
  pass_settled(e, c, &e->agreed_cfg, d);
  record_pass(e, c, d);
  return 1;
}

squallResult_t squall__engine_allreduce(squall_engine *e, const squall_call *c, squall_decision *d) {
  run_state st;
  memset(&st, 0, sizeof st);
  st.t_start = squall__now();
  d->t_start = st.t_start;
  d->coll = c->coll;
  d->fold = NULL;
  d->dev_timing = 0;
  d->fold_slot = d->fold_shard_slot = NULL;
  d->untimed = 0;
  squallResult_t r = squallSuccess;
  /* The scratch may still be in use by the last compressed call's work on
   * another stream (not under capture: a graph's launches are ordered by
   * whoever launches them, and a capturing stream may not wait on an
   * event recorded outside it). */
  if (e->fence && c->stream != e->fence_stream && e->k.fence_wait && !c->capturing)
    r = e->k.fence_wait(e->fence, c->stream);
  if (r == squallSuccess) {
    r = allreduce(e, c, d, &st);
  } else {
    d->route = SQ_ROUTE_PASS;
    d->reason = squallPassError;
  }
  if (r == squallSuccess && d->route != SQ_ROUTE_PASS && e->k.fence_record && !c->capturing) {
    r = e->k.fence_record(&e->fence, c->stream);
    e->fence_stream = c->stream;
  }
  if (r != squallSuccess)
    SQ_WARN("rank %d: %s of %zu elements failed: %s: %s", e->tr.rank, coll_name(c), c->count,
            squallGetErrorString(r), squallGetLastError());
  squall__record(e, c, d, r, &st);
  return r;
}

squallResult_t squall__engine_reset_residuals(squall_engine *e) {
  SQ_FORWARD_IF_ERROR(squall__hier_reset(e->hier)); /* two-level: per-shard residuals */
  return squall__residuals_reset(e->residuals, e->last_stream);
}

squallResult_t squall__engine_undo_shard(squall_engine *e, void *stream) {
  if (e->undo_res == NULL) return squallSuccess; /* no residual: nothing moved */
  return e->k.widen(stream, SQ_DT_F32, e->undo_backup, e->undo_res, e->undo_n, 1.0f);
}

squallResult_t squall__engine_get_residual(squall_engine *e, const void *key, size_t count, int dtype,
                                           size_t whole, float *out) {
  squall_tensor *t = squall__residuals_latest_from(e->residuals, key, count, squall__residual_kind(dtype, whole));
  int flat = t != NULL && t->residual != NULL, shard = 0;
  if (flat) SQ_FORWARD_IF_ERROR(e->k.to_host(e->last_stream, out, t->residual, count * sizeof(float)));
  /* two-level all-reduce: this rank's shard residual, in its place */
  SQ_FORWARD_IF_ERROR(squall__hier_get_residual(e->hier, key, count, dtype, out, flat, &shard));
  SQ_RETURN_ERROR_IF(!flat && !shard, squallInvalidArgument,
                     "no residual is kept for the tensor at %p (%zu elements)", key, count);
  return squallSuccess;
}

squallResult_t squall__engine_get_scatter_residual(squall_engine *e, const void *key, size_t count, int dtype,
                                                   float *out) {
  squall_tensor *t =
      squall__residuals_latest_from(e->residuals, key, count, squall__residual_kind(dtype, 0) | SQ_KIND_SCATTER);
  int flat = t != NULL && t->residual != NULL, shard = 0;
  if (flat) SQ_FORWARD_IF_ERROR(e->k.to_host(e->last_stream, out, t->residual, count * sizeof(float)));
  /* two-level reduce-scatter: this rank's shard residual, at its blocks */
  SQ_FORWARD_IF_ERROR(squall__hier_get_scatter_residual(e->hier, key, count, dtype, out, flat, &shard));
  SQ_RETURN_ERROR_IF(!flat && !shard, squallInvalidArgument,
                     "no reduce-scatter residual is kept for the tensor at %p (%zu elements)", key, count);
  return squallSuccess;
}

squallResult_t squall__engine_prepare_shard(squall_engine *e, const squall_call *c, int alloc, size_t *bytes) {
  squall_plan plan;
  squall__plan_make(e, c, c->shard->cfg, 0, &plan); /* as the shard call will */
  if (bytes) *bytes = plan.L.total;
  if (!alloc) return squallSuccess; /* a plan only: a slot looked up for the run stays */
  e->shard_slot = NULL;
  if (plan.route == SQ_ROUTE_PASS) return squallSuccess;
  run_state st;
  memset(&st, 0, sizeof st);
  SQ_FORWARD_IF_ERROR(squall__prepare(e, c, &plan, &st));
  e->shard_slot = st.slot; /* the shard call's prepare() takes it instead of a second lookup */
  return squallSuccess;
}

/* For CUDA graph capture: whether the shard call runs without allocating
 * or waiting. */
int squall__engine_ready(squall_engine *e, const squall_call *c) {
  squall_plan plan;
  squall__plan_make(e, c, c->shard->cfg, 0, &plan);
  return squall__capture_ready(e, c, &plan);
}

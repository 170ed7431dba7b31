/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * costing.c - the cost model's part of a call (costmodel.h holds the
 * model): this rank's predictions and variant times for the header, the
 * verdict from the header's maxima, and what a finished call teaches it.
 * All-reduces and reduce-scatters keep figures of their own (two models,
 * squall__cost_of): a plain reduce-scatter sends half of what a ring
 * all-reduce does and takes its own time (Open MPI's reduces to one rank
 * and scatters), and its compressed call stops after the two-phase
 * route's sum, so neither collective's times tell the other's.
 */
#include "common/internal.h"

#include <string.h>

#include "common/stats.h"
#include "engine/plan.h"

/* Seconds as header nanoseconds: bounded, so that negating them is safe. */
static int64_t to_ns(double s) { return s > 0 ? (s < 1e9 ? (int64_t)(s * 1e9) : (int64_t)1e18) : 0; }

/* The cost model's slots of a codec's calls: one per route it weighs,
 * and two for top-k sent without the lossless stage (flat, and two-level
 * with raw shard slots), which time differently. Each slot has a number
 * of its own, so that no two routes' figures meet in one (the all-reduce
 * routes keep their route's number); a kind is codec x slot. */
typedef enum {
  SLOT_PASS = SQ_ROUTE_PASS, /* none of its own: a plain call's figures are kind -1 */
  SLOT_HALF = SQ_ROUTE_HALF,
  SLOT_TOPK = SQ_ROUTE_TOPK,
  SLOT_DENSE = SQ_ROUTE_DENSE,
  SLOT_TWOPHASE = SQ_ROUTE_TWOPHASE,
  SLOT_TWOLEVEL = SQ_ROUTE_TWOLEVEL,
  SLOT_TOPK_RAW,
  SLOT_TWOLEVEL_RAW,
  SLOT_TOPK_SCATTER, /* raw or not: one slot (the variants' times of a reduce-scatter meet here) */
  SLOT_COUNT
} cost_slot;
_Static_assert(SLOT_COUNT == SQ_COST_SLOTS, "costmodel.h sizes the slots of a codec");
_Static_assert(squallCodecFp8 < SQ_COST_CODECS, "every codec's kinds lie below SQ_COST_KINDS");

static cost_slot slot_of(const squallConfig_t *cfg, squall_route route) {
  int raw = cfg->codec == squallCodecTopk && cfg->zstdLevel == 0;
  switch (route) {
  case SQ_ROUTE_PASS: return SLOT_PASS;
  case SQ_ROUTE_HALF: return SLOT_HALF;
  case SQ_ROUTE_TOPK: return raw ? SLOT_TOPK_RAW : SLOT_TOPK;
  case SQ_ROUTE_DENSE: return SLOT_DENSE;
  case SQ_ROUTE_TWOPHASE: return SLOT_TWOPHASE;
  case SQ_ROUTE_TWOLEVEL: return raw ? SLOT_TWOLEVEL_RAW : SLOT_TWOLEVEL;
  case SQ_ROUTE_TOPK_SCATTER: return SLOT_TOPK_SCATTER;
  }
  return SLOT_PASS; /* not a route (-Wswitch names a route without a slot) */
}

int squall__cost_kind(const squallConfig_t *cfg, squall_route route) {
  return (int)cfg->codec * SQ_COST_SLOTS + (int)slot_of(cfg, route);
}

/* The cost model runs on host engines, whose header every call exchanges
 * carries its figures; never on a shard (the outer call is what it weighs). */
int squall__model_runs(const squall_engine *e, const squallConfig_t *cfg, const squall_call *c) {
  return cfg->costModel && e->header_every_call && !c->shard;
}

/* The figures of c's collective: its size classes, plain times, link fit
 * and codec kinds are apart from the other collective's. */
static const squall_cost *model_of(const squall_engine *e, const squall_call *c) {
  return c->coll == SQ_COLL_REDUCE_SCATTER ? &e->cost_scatter : &e->cost;
}
squall_cost *squall__cost_of(squall_engine *e, const squall_call *c) {
  return c->coll == SQ_COLL_REDUCE_SCATTER ? &e->cost_scatter : &e->cost;
}

/* What a compressed call on `route` moves; 0 for a route the model does
 * not weigh (the route's cost() says which). */
static int cost_call(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, squall_route route,
                     const scratch_layout *L, squall_cost_call *cc) {
  memset(cc, 0, sizeof *cc);
  cc->kind = squall__cost_kind(cfg, route);
  cc->n = c->count;
  cc->bytes_in = (uint64_t)c->count * c->elsize;
  cc->plain_wire = squall__ring_wire(c->coll, cc->bytes_in, e->tr.nranks);
  cc->nranks = e->tr.nranks;
  cc->chunks = 1;
  const squall_route_ops *ops = squall__route_ops(route); /* dense and two-level weigh nothing here */
  if (ops == NULL || !ops->cost(e, c, cfg, L, cc)) return 0;
  return cc->kind < SQ_COST_KINDS;
}

/* This rank's predictions for the header. The model runs where the header
 * is exchanged on every call (host memory), so that the predictions, which
 * come from rank-local timings, are shared at no extra cost; a declined
 * size class is compressed now and then to keep the codec's figures
 * current (squall__cost_explore, the same on all ranks). */
void squall__cost_vote(squall_engine *e, const squall_call *c, const squall_plan *plan, squall_cost_verdict *v) {
  squall_cost_call cc;
  memset(v, 0, sizeof *v);
  v->forced = 1;
  if (squall__model_runs(e, &plan->rc, c) && cost_call(e, c, &plan->rc, plan->route, &plan->L, &cc)) {
    if (squall__cost_explore(model_of(e, c), cc.bytes_in)) {
      v->explored = 1;
    } else {
      double t_plain, t_comp;
      if (squall__cost_predict(model_of(e, c), &cc, plan->cfg.linkGbps, &t_plain, &t_comp)) {
        v->forced = 0;
        v->comp_ns = to_ns(t_comp);
        v->plain_ns = to_ns(t_plain);
        SQ_TRACE("rank %d: %zu elements: predicted %.3g s compressed, %.3g s plain", e->tr.rank, c->count, t_comp,
                 t_plain);
      }
    }
  }
  /* This rank's whole-call times of every allowed variant at this size. */
  unsigned allowed = plan->route == SQ_ROUTE_PASS ? 0 : plan->variants;
  squall_route flat_route = squall__plan_flat_route(e, c, &plan->cfg);
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  for (int i = 0; i < SQ_COST_VARIANTS; i++) {
    squallConfig_t vc = plan->cfg;
    if (i & SQ_VARIANT_RAW) vc.zstdLevel = 0;
    squall_route route = (allowed & SQ_VARIANT_FLAT) && !(i & SQ_VARIANT_FLAT) ? SQ_ROUTE_TWOLEVEL : flat_route;
    double t = squall__cost_call_seconds(model_of(e, c), squall__cost_kind(&vc, route), bytes_in);
    v->variant_ns[i] = (i & ~(int)allowed) == 0 && route != SQ_ROUTE_PASS && t > 0 ? to_ns(t) : SQ_NS_UNKNOWN;
    SQ_TRACE("rank %d: %zu elements: variant %d: %.3g s", e->tr.rank, c->count, i, t);
  }
}

/* After the header: the model's verdict from the largest predictions over
 * the ranks (the slowest rank sets a collective's time; a rank without
 * figures, or exploring, makes all compress), and whether this call is
 * borrowed for a plain probe. 1: compressing pays. */
int squall__cost_agree(squall_engine *e, const squall_call *c, const squall_plan *plan, squall_cost_verdict *v) {
  v->model_pays = v->forced || squall__cost_pays_class(model_of(e, c), (int)plan->cfg.codec,
                                                       (uint64_t)c->count * c->elsize, (double)v->comp_ns,
                                                       (double)v->plain_ns);
  /* the model would compress but cannot be sure (squall__cost_probe_plain): measure
   * plain (not where the link is given: whole calls do not overrule the model then) */
  if (v->model_pays && !v->forced && !(plan->cfg.linkGbps > 0) &&
      squall__cost_probe_plain(model_of(e, c), (uint64_t)c->count * c->elsize, (double)v->comp_ns * 1e-9,
                               (double)v->plain_ns * 1e-9)) {
    SQ_TRACE("rank %d: %zu elements: a plain probe", e->tr.rank, c->count);
    v->probing = 1;
    return 0;
  }
  return v->model_pays;
}

/* After the header: the agreed times, and (counted) the call counted
 * with the variant it runs. */
static void variant_agree(squall_cost *m, const squall_plan *plan, uint64_t bytes_in, const squall_cost_verdict *v,
                          int counted) {
  unsigned allowed = plan->variants;
  int codec = (int)plan->cfg.codec;
  for (int i = 0; i < SQ_COST_VARIANTS; i++)
    if ((i & ~(int)allowed) == 0 && v->variant_ns[i] < SQ_NS_UNKNOWN)
      squall__cost_variant_agree(m, codec, i, bytes_in, (double)v->variant_ns[i] * 1e-9);
  if (counted) squall__cost_variant_count(m, codec, allowed, plan->variant, bytes_in);
}

/* The model's bookkeeping once the call's route is confirmed. */
void squall__cost_after(squall_engine *e, const squall_call *c, const squall_plan *plan,
                        const squall_cost_verdict *v, int agreed) {
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  squall_route route = plan->route;
  squall_cost *m = squall__cost_of(e, c);
  int declined = route == SQ_ROUTE_PASS && plan->reason == squallPassNotPaying;
  int explored_ran = v->explored && route != SQ_ROUTE_PASS; /* an exploring call every rank compresses */
  double loss = !v->forced && v->plain_ns > 0 ? (double)v->comp_ns / (double)v->plain_ns : 0;
  if (plan->headed) squall__cost_header_verdict(m, bytes_in, declined && !v->model_pays, loss, explored_ran);
  /* the lean names this rank's codec: only where every rank holds the same one, or
   * ranks that disagreed would lean differently once they agree again */
  if (plan->headed && !v->forced && agreed)
    squall__cost_model_verdict(m, (int)plan->cfg.codec, bytes_in, !v->model_pays);
  if (plan->headed && agreed) squall__cost_count_restart(m, bytes_in, (int)plan->cfg.codec, explored_ran);
  if (declined) squall__cost_declined(m, bytes_in); /* counts toward the next exploration */
  if (squall__model_runs(e, &plan->cfg, c) && (declined || (route != SQ_ROUTE_PASS && route != SQ_ROUTE_TWOLEVEL)))
    squall__cost_judged(m, bytes_in, declined); /* for the plain probes */
  /* for the next call of this size; a flat variant the model declined, or one that some
   * rank could not prepare, counts too, or the rhythm would stand still on it. A plain
   * probe does not: the model chose the variant, the probe only borrowed the call, and a
   * variant's settling run lost to it came back later, among the calls it should spare */
  if (plan->variants &&
      (route != SQ_ROUTE_PASS || plan->reason == squallPassNotPaying || plan->reason == squallPassError))
    variant_agree(m, plan, bytes_in, v, !v->probing);
}

/* The chunks a compressed call ran in (top-k: the rounds of its exchange,
 * which pipeline the exchange but not the selection: the model's chunks,
 * which would overlap the whole codec, stay 1 there); 0 for a route the
 * model does not weigh. */
uint64_t squall__call_chunks(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                             squall_route route, const scratch_layout *L) {
  squall_cost_call cc;
  if (!cost_call(e, c, cfg, route, L, &cc)) return 0;
  return route == SQ_ROUTE_TOPK ? L->rounds : cc.chunks;
}

/* Feeds a finished compressed flat call's figures to the model: the
 * codec's time per element, and the exchange (the call's time less the
 * codec's; a pipelined call hides part of its exchange, which biases the
 * link fast and so towards plain, only near the crossover). Two-level
 * calls are weighed whole by their route. */
void squall__cost_learn(squall_engine *e, const squall_call *c, const squall_plan *plan, const run_state *st,
                        double seconds) {
  const squallConfig_t *cfg = &plan->rc;
  squall_route route = plan->route;
  squall_cost_call cc;
  squall_cost *m = squall__cost_of(e, c);
  if (route == SQ_ROUTE_TWOLEVEL) return;
  int weighed = cost_call(e, c, cfg, route, &plan->L, &cc);
  squall__stats_record_chunks(&e->stats, squall__call_chunks(e, c, cfg, route, &plan->L));
  if (plan->dev) return; /* the device schedule times whole calls on the stream (costing_device.c) */
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  if (st->fresh) {                                                            /* page faults of new memory: not what the next call will see */
    squall__cost_note_call(m, squall__cost_kind(cfg, route), bytes_in, -1.0); /* but its first call ran */
    return;
  }
  if (weighed) {
    squall__cost_note_codec(m, cc.kind, cc.n, st->codec_s);
    double xfer = seconds - st->codec_s;
    squall__cost_note_link(m, cc.collectives, st->wire, xfer > 0 ? xfer : 0);
  }
  /* the whole call, header and all: against plain, and against the call's other variants */
  squall__cost_note_call(m, squall__cost_kind(cfg, route), bytes_in, squall__now() - st->t_start);
}

/* Which variants of a call the cost model chooses between (SQ_VARIANT_*
 * bits), from inputs the same on every rank once the header agrees: two
 * levels or flat where the nodes allow two levels, and top-k's slots with
 * or without the lossless stage. Host engines only (the times travel in
 * the header); none until the nodes are known. */
unsigned squall__variants_allowed(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                                  int two_level) {
  if (!squall__model_runs(e, cfg, c) || two_level < 0) return 0;
  unsigned allowed = two_level == 1 ? SQ_VARIANT_FLAT : 0;
  if (cfg->codec == squallCodecTopk && squall__use_lossless(e, cfg)) allowed |= SQ_VARIANT_RAW;
  return allowed;
}

/* A host call of a size class that the agreed cost model has settled as
 * not paying (squall__cost_settled) passes through without its header.
 * Only past headers decide it, never this rank's configuration: a
 * squallSetConfig reaches the class at its next header (at most
 * SQ_COST_RECHECK << SQ_COST_RECHECK_SHIFTS calls on), where the digests
 * are compared, so that even
 * one made on some ranks only, against the rule, never meets a header
 * here. */
int squall__settled_plain(const squall_engine *e, const squall_call *c, uint64_t bytes_in) {
  return e->header_every_call && !c->shard && e->agreed_valid && e->agreed_ok &&
         squall__cost_settled(model_of(e, c), bytes_in);
}

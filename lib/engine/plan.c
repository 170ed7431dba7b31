/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * plan.c - decide(): THE decision point of a call. Every input is the same
 * on every rank (the call's arguments, which MPI and NCCL require alike,
 * the configuration the header agrees on, the nodes, the kernel set and
 * the transport), so every rank takes the same route. Buffer addresses,
 * allocation results and timing never enter here except through the
 * agreement, which is already the minimum over all ranks.
 *
 * A plan is made once, before the header, from this rank's own view (as
 * if every rank agreed and prepared); squall__plan_confirm() then applies
 * what the header found, in decide()'s order, and can only turn the route
 * into a pass-through.
 */
#include "common/internal.h"

#include <string.h>

#include "codecs/codec.h"
#include "engine/plan.h"
#include "engine/topk_rounds.h"

/* Reasons that follow from the call alone (identical on every rank: MPI
 * and NCCL require the same count, type, op and communicator). */
int squall__call_pass_reason(const squall_call *c, squallPassReason_t *why) {
  if (c->in_group) *why = squallPassInGroup;
  /* a reduce-scatter compresses fp32 only: its owner's sum is the result,
   * so narrower types would take a second rounding path of their own */
  else if (c->dtype < 0 || (c->coll == SQ_COLL_REDUCE_SCATTER && (c->dtype != SQ_DT_F32 || c->premul != 1.0f)))
    *why = squallPassType;
  else if (c->op == SQ_OP_OTHER) *why = squallPassOp;
  /* An intercommunicator's all-reduce sums the other group's data: none
   * of the codecs' collectives mean that. */
  else if (c->intercomm) *why = squallPassIntercomm;
  /* owners of shards of different sizes: no route of the engine lays
   * them out (every rank's counts are the same array, as MPI requires) */
  else if (c->uneven) *why = squallPassUnevenCounts;
  else if (c->count == 0) *why = squallPassSmall;
  else return 0;
  return 1;
}

/* The residual store's kind for c (residual.h): its type; a shard's is
 * the two-level call's type and count, so that a tensor of n elements and
 * one of n + 1 from the same buffer, whose shards have one size, keep
 * residuals of their own as on one node (a shared one would carry the
 * longer one's padding tail into the shorter one's, where nothing
 * delivers it). Counts stay far below 2^56. */
uint64_t squall__residual_kind(int dtype, size_t whole) { return (uint64_t)whole << 8 | (uint8_t)dtype; }
uint64_t squall__kind_of(const squall_call *c) {
  if (c->coll == SQ_COLL_REDUCE_SCATTER) return squall__residual_kind(c->dtype, 0) | SQ_KIND_SCATTER;
  return c->shard ? squall__residual_kind(c->shard->whole->dtype, c->shard->whole->count)
                  : squall__residual_kind(c->dtype, 0);
}

/* The residual's address hint: a shard's is the caller's tensor's. */
squall_tensor_key squall__hint_of(const squall_call *c) {
  squall_tensor_key k = {c->send, c->recv, 0};
  if (c->shard) k = (squall_tensor_key){c->shard->key, c->shard->key_recv, 0};
  else if (c->key) k = (squall_tensor_key){c->key, c->key, 1};
  return k;
}

int squall__use_lossless(const squall_engine *e, const squallConfig_t *cfg) {
  return cfg->zstdLevel > 0 && e->tr.allgatherv != NULL;
}

const char *squall__route_name(squall_route r) {
  static const char *const names[] = {"pass", "16-bit", "top-k",
                                      "dense", "two-phase", "two-level",
                                      "top-k reduce-scatter"};
  return (unsigned)r < SQ_ARRAY_SIZE(names) ? names[r] : "?";
}

/* The table of routes: one row each. */
const squall_route_ops *squall__route_ops(squall_route r) {
  switch (r) {
  case SQ_ROUTE_HALF: return &squall__route_half;
  case SQ_ROUTE_TOPK: return &squall__route_topk;
  case SQ_ROUTE_DENSE: return &squall__route_dense;
  case SQ_ROUTE_TWOPHASE: return &squall__route_twophase;
  case SQ_ROUTE_TWOLEVEL: return &squall__route_twolevel;
  case SQ_ROUTE_TOPK_SCATTER: return &squall__route_topk_scatter;
  default: return NULL;
  }
}

/* Every rank of a device communicator is on one node: NCCL all-reduces
 * over NVLink, PCIe or shared memory, and over NVLink the codec's kernels
 * alone (0.4 ms on one H200 for 16M floats sent as fp16) cost about what
 * a whole plain all-reduce of those 64 MiB takes. The cost model's device
 * schedule (costing_device.c) passes such calls through as not paying
 * while their size class is unmeasured (the measuring calls aside); once
 * measured, whole-call times decide, so PCIe-only nodes, or a node whose
 * GPUs talk over a NIC (NCCL_P2P_DISABLE and NCCL_SHM_DISABLE), may
 * compress. The nodes were all-gathered and the configuration agreed: the
 * same on every rank. Never a shard (a shard's outer call decided). One
 * rank (SQUALL_MIN_RANKS=1) compresses: it is there to prove the path. */
int squall__device_on_one_node(const squall_engine *e, const squallConfig_t *cfg, const squall_call *c) {
  return cfg->costModel && !e->header_every_call && !c->shard && e->tr.nranks > 1 &&
         squall__hier_one_node(e->hier, cfg);
}

/* ------------------------------------------------------ decide()'s stages */

/* Non-blocking communicators pass through (a call must be able to return
 * ncclInProgress); the mode is each rank's own, so it counts where the
 * header has combined it over the ranks. */
static int agreement_reason(const squall_agreement *ag, squallPassReason_t *why) {
  if (ag->nonblocking) *why = squallPassNonblocking;
  else if (ag->foreign) *why = squallPassDeviceMemory;
  else if (!ag->agreed) *why = squallPassMismatch;
  else return 0;
  return 1;
}

/* SQUALL_COLLECTIVES is the interposers' switch: a call made by one
 * (c->interposed, the same on every rank: each rank's job calls the same
 * collective through the same way in) passes through where the agreed
 * configuration leaves its collective out. */
int squall__collective_off(const squall_call *c, const squallConfig_t *cfg) {
  int bit = c->coll == SQ_COLL_REDUCE_SCATTER ? squallCollectiveReduceScatter : squallCollectiveAllReduce;
  return c->interposed && !(cfg->collectives & bit);
}

static int config_reason(const squall_call *c, const squallConfig_t *cfg, int nranks, squallPassReason_t *why) {
  if (nranks < cfg->minRanks) *why = squallPassSingleRank;
  else if (cfg->codec == squallCodecNone) *why = squallPassDisabled;
  else if (squall__collective_off(c, cfg)) *why = squallPassCollectiveOff;
  else if (c->count * c->elsize < cfg->minBytes) *why = squallPassSmall;
  else return 0;
  return 1;
}

/* Counts the call for the warm-up where ag->count is set: only the
 * decision after the header does. */
static int ready_reason(const squall_call *c, const squallConfig_t *cfg, const squall_agreement *ag,
                        squallPassReason_t *why) {
  if (!ag->all_ok) *why = squallPassError;
  else if (ag->count && squall__residuals_count_call(ag->count, c->count, squall__kind_of(c)) < (uint64_t)cfg->warmup)
    *why = squallPassWarmup;
  else return 0;
  return 1;
}

/* Top-k, or its dense fallback where the all-gather would send more than
 * the ring all-reduce of the data in its own precision. */
static squall_route topk_route(const squall_call *c, const squallConfig_t *cfg, int p, size_t topk_max) {
  size_t k = squall__topk_k(c->count, cfg->topkRatio);
  uint64_t sb = squall__topk_slot_bytes(k, cfg->topkValues);
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  int pays = (uint64_t)(p - 1) * sb < squall__ring_allreduce_wire(bytes_in, p) ||
             p == 1;                                      /* one rank (SQUALL_MIN_RANKS=1): run the codec to prove it */
  if (pays && c->count <= topk_max) return SQ_ROUTE_TOPK; /* the slots' indices are u32, the kernels' may be less */
  return c->dtype == SQ_DT_F32 ? SQ_ROUTE_DENSE : SQ_ROUTE_HALF;
}

/* Top-k's reduce-scatter (route_topk_scatter.c), or its dense fallback
 * (the reduce-scatter of a = g + e, which empties the residual) where one
 * slot of k_b entries per peer would send more than the dense fp32
 * reduce-scatter of the block does, or the block is past the kernels'
 * indices, as topk_route() decides for the all-reduce. Without a dense
 * reduce-scatter in the transport such calls pass through. */
static squall_route topk_scatter_route(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                                       squallPassReason_t *why) {
  int p = e->tr.nranks;
  size_t rc = c->count / (size_t)p;
  uint64_t sb = squall__topk_slot_bytes(squall__topk_k(rc, cfg->topkRatio), cfg->topkValues);
  int pays = sb < (uint64_t)rc * sizeof(float) || p == 1; /* per peer: one slot against one fp32 block */
  if (pays && rc <= e->k.topk_max_elems && e->tr.alltoall != NULL) return SQ_ROUTE_TOPK_SCATTER;
  if (e->tr.reduce_scatter_f32 != NULL) return SQ_ROUTE_DENSE;
  *why = squallPassCodecUnsupported;
  return SQ_ROUTE_PASS;
}

/* A reduce-scatter: top-k's own route, or the two-phase route's first
 * half (twophase.h, scatter) for every codec it encodes. */
static squall_route scatter_route(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                                  squallPassReason_t *why) {
  squall_twophase_codec tp;
  if (cfg->codec == squallCodecTopk) return topk_scatter_route(e, c, cfg, why);
  if (squall__twophase_select_scatter(cfg, &tp) && e->tr.alltoall != NULL) return SQ_ROUTE_TWOPHASE;
  *why = squallPassCodecUnsupported;
  return SQ_ROUTE_PASS;
}

/* The codec's route for the call. */
static squall_route codec_route(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                                squallPassReason_t *why) {
  if (c->coll == SQ_COLL_REDUCE_SCATTER) return scatter_route(e, c, cfg, why);
  if (cfg->codec == squallCodecTopk) return topk_route(c, cfg, e->tr.nranks, e->k.topk_max_elems);
  squall_twophase_codec tp;
  if (squall__twophase_select(cfg, c->dtype, &tp)) {
    if (e->tr.alltoall != NULL) return SQ_ROUTE_TWOPHASE;
    if (tp.quant) { /* no 16-bit fallback means the same on the wire */
      *why = squallPassDisabled;
      return SQ_ROUTE_PASS;
    }
  }
  return SQ_ROUTE_HALF;
}

/* Whether a two-level call can carry c: an all-reduce always (every
 * codec has a route for its shard); a reduce-scatter only where its codec
 * has a reduce-scatter route, which the inner engine runs across nodes on
 * the same inputs (its transport is a split of this one). A codec without
 * one passes through below, as it would flat: never a two-level call whose
 * shard the inner engine would refuse. */
static int twolevel_carries(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg) {
  squallPassReason_t why;
  return c->coll != SQ_COLL_REDUCE_SCATTER || scatter_route(e, c, cfg, &why) != SQ_ROUTE_PASS;
}

/* A shard runs the codec's route: the outer call decided to compress, on
 * the same inputs everywhere, and counted the warm-up (a pass-through
 * here is the outer call's error). */
static squall_route decide(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, int two_level,
                           int one_node, const squall_agreement *ag, squallPassReason_t *why, squall_stage *stage) {
  *stage = SQ_STAGE_NONE;
  if (squall__call_pass_reason(c, why)) return SQ_ROUTE_PASS;
  if (!c->shard) {
    if (agreement_reason(ag, why)) *stage = SQ_STAGE_AGREEMENT;
    else if (config_reason(c, cfg, e->tr.nranks, why)) *stage = SQ_STAGE_CONFIG;
    else if (ready_reason(c, cfg, ag, why)) *stage = SQ_STAGE_READY;
    /* (a host engine's model never declines two levels: it weighs them
     * against flat, squall__cost_variant; the device schedule may) */
    else if (!ag->pays || one_node) {
      *why = squallPassNotPaying;
      *stage = SQ_STAGE_PAYS;
    } else if (two_level == 1 && twolevel_carries(e, c, cfg)) return SQ_ROUTE_TWOLEVEL;
    if (*stage != SQ_STAGE_NONE) return SQ_ROUTE_PASS;
  }
  squall_route r = codec_route(e, c, cfg, why);
  if (r == SQ_ROUTE_PASS) *stage = SQ_STAGE_ROUTE;
  return r;
}

/* ------------------------------------------------------------- the plan */

static void layout(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, squall_route route,
                   scratch_layout *L) {
  size_t n = c->count, off = 0;
  memset(L, 0, sizeof *L);
  const squall_route_ops *ops = squall__route_ops(route);
  if (route == SQ_ROUTE_TWOLEVEL) return; /* its scratch is the hierarchy's and the inner engine's */
#define PLACE(field, bytes) (L->field = off, off += squall__align_up(bytes))
  PLACE(scalars, 4 * sizeof(float));
  PLACE(work, n * sizeof(float));
  PLACE(absmax_ws, e->k.absmax_workspace_bytes(n));
  /* Room for the residual's backup. Top-k reserves it only where its
   * encoder can copy it as it reads it, or in a shard (residual_guard(),
   * prepare.c): n floats more of scratch, shared with the other routes,
   * and untouched pages until used. */
  L->has_backup = cfg->errorFeedback && (route != SQ_ROUTE_TOPK || c->shard || e->k.topk_encode_backup);
  PLACE(backup, L->has_backup ? n * sizeof(float) : 0);
#undef PLACE
  if (ops) ops->layout(e, c, cfg, L, &off); /* a pass-through's plan keeps the common pieces, as sizes went */
  L->total = off;
}

void squall__plan_layout(const squall_engine *e, const squall_call *c, squall_plan *plan) {
  layout(e, c, &plan->cfg, plan->route, &plan->L);
}

/* The variant (two levels or flat, top-k's slots lossless or raw) that
 * whole calls showed fastest at this size, from figures earlier headers
 * agreed (the same here on every rank), so that the call is prepared for
 * the right route. */
static void choose_variant(squall_engine *e, const squall_call *c, squall_plan *plan) {
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  plan->variants = squall__variants_allowed(e, c, &plan->cfg, plan->two_level);
  plan->variant =
      plan->variants ? squall__cost_variant(squall__cost_of(e, c), (int)plan->cfg.codec, plan->variants, bytes_in) : 0;
  if (plan->variants)
    SQ_TRACE("rank %d: %zu elements: runs variant %d of mask %u", e->tr.rank, c->count, plan->variant,
             plan->variants);
  if (plan->variant & SQ_VARIANT_FLAT) plan->two_level = 0;
  if (plan->variant & SQ_VARIANT_RAW) plan->rc.zstdLevel = 0; /* passed on to a two-level call's shards */
}

/* The cost model's kind of the call compressed, for the device schedule's
 * vote: the route decide() takes where the model lets it; -1 where none. */
static int compressed_kind(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                           const squall_plan *plan) {
  squall_route r = plan->route;
  if (r == SQ_ROUTE_PASS && plan->stage == SQ_STAGE_PAYS) {
    squall_agreement mine = {.agreed = 1, .all_ok = 1, .foreign = c->foreign, .pays = 1};
    squallPassReason_t why;
    squall_stage stage;
    r = decide(e, c, cfg, plan->two_level, 0, &mine, &why, &stage);
  }
  return r == SQ_ROUTE_PASS ? -1 : squall__cost_kind(&plan->rc, r);
}

void squall__plan_make(squall_engine *e, const squall_call *c, const squallConfig_t *cfg, uint64_t gen,
                       squall_plan *plan) {
  memset(plan, 0, sizeof *plan);
  plan->cfg = plan->rc = *cfg; /* a shard's is its outer call's run configuration */
  plan->gen = gen;
  plan->nranks = e->tr.nranks;
  plan->two_level = c->shard ? 0 : squall__hier_known(e->hier, cfg);
  plan->one_node = squall__device_on_one_node(e, cfg, c);
  plan->dev_kind = -1;
  squall__devcost_plan(e, c, cfg, plan); /* device memory: the schedule may pass the call through */
  choose_variant(e, c, plan);
  squall_agreement mine = {.agreed = 1, .all_ok = 1, .foreign = c->foreign, .pays = !plan->dev_plain};
  plan->route = decide(e, c, cfg, plan->two_level, plan->one_node, &mine, &plan->reason, &plan->stage);
  if (plan->dev) plan->dev_kind = compressed_kind(e, c, cfg, plan);
  plan->ops = squall__route_ops(plan->route);
  layout(e, c, cfg, plan->route, &plan->L);
  /* Growth beyond what every rank planned for needs the header (device
   * engines): decided from the plan, which is the same on every rank. */
  plan->grow_hier = plan->route == SQ_ROUTE_TWOLEVEL && squall__hier_grows(e->hier, c, &plan->rc);
  plan->grow = plan->route != SQ_ROUTE_PASS && (plan->L.total > e->scratch_planned || plan->grow_hier);
  plan->headed = !c->shard && (e->header_every_call || plan->grow || !e->agreed_valid || e->agreed_gen != gen ||
                               plan->dev_header);
}

static void pass(squall_plan *plan, squallPassReason_t why, squall_stage stage) {
  plan->route = SQ_ROUTE_PASS;
  plan->reason = why;
  plan->stage = stage;
  plan->ops = NULL;
}

void squall__plan_confirm(squall_plan *plan, const squall_call *c, const squall_agreement *ag) {
  squallPassReason_t why;
  if (c->shard) return; /* the outer call's header agreed */
  if (agreement_reason(ag, &why)) return pass(plan, why, SQ_STAGE_AGREEMENT);
  if (plan->route == SQ_ROUTE_PASS && plan->stage <= SQ_STAGE_CONFIG) return; /* its reason stands */
  if (ready_reason(c, &plan->cfg, ag, &why)) return pass(plan, why, SQ_STAGE_READY);
  if (plan->route == SQ_ROUTE_PASS || plan->route == SQ_ROUTE_TWOLEVEL) return;
  if (!ag->pays) pass(plan, squallPassNotPaying, SQ_STAGE_PAYS);
}

/* The route the call would take flat (the cost model's variants). */
squall_route squall__plan_flat_route(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg) {
  squall_agreement mine = {.agreed = 1, .all_ok = 1, .foreign = c->foreign, .pays = 1};
  squallPassReason_t why;
  squall_stage stage;
  return decide(e, c, cfg, 0, squall__device_on_one_node(e, cfg, c), &mine, &why, &stage);
}

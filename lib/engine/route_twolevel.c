/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * route_twolevel.c - where the ranks sit on >= 2 nodes of equal size
 * (hierarchy.c): dense reduce-scatter inside the node, one of the other
 * routes across nodes on the shard (an inner engine on the inter-node
 * transport, whose calls skip the header, the agreement and the warm-up:
 * the outer call did them, and hands down its configuration), dense
 * all-gather inside the node; a reduce-scatter stops after the nodes'
 * (hierarchy_scatter.c). Its memory is the hierarchy's and the inner
 * engine's, not the scratch.
 */
#include "common/internal.h"

#include "engine/plan.h"

static void twolevel_layout(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                            scratch_layout *L, size_t *off) {
  (void)e, (void)c, (void)cfg, (void)L, (void)off;
}

static squallResult_t twolevel_prepare(squall_engine *e, const squall_call *c, const squall_plan *plan,
                                       run_state *st) {
  (void)st;
  SQ_RETURN_ERROR_IF(squall__residuals_add_shape(e->residuals, c->count, squall__kind_of(c)) != 0, squallSystemError,
                     "out of memory for tensor state");
  return squall__hier_prepare(e->hier, c, &plan->rc);
}

static int twolevel_carve(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  (void)e, (void)c, (void)plan, (void)st;
  return 0;
}

static squallResult_t twolevel_run(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  SQ_FORWARD_IF_ERROR(squall__hier_allreduce(e->hier, c, &plan->rc, &st->hier));
  if (squall__model_runs(e, &plan->cfg, c)) /* whole calls, against flat ones (new memory: not timed), in
                                            * the figures of c's collective */
    squall__cost_note_call(squall__cost_of(e, c), squall__cost_kind(&plan->rc, SQ_ROUTE_TWOLEVEL),
                           (uint64_t)c->count * c->elsize, st->fresh ? -1.0 : squall__now() - st->t_start);
  return squallSuccess;
}

/* two-level calls are weighed whole, against flat ones (squall(7), COST MODEL) */
static int twolevel_cost(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                         const scratch_layout *L, squall_cost_call *cc) {
  (void)e, (void)c, (void)cfg, (void)L, (void)cc;
  return 0;
}

const squall_route_ops squall__route_twolevel = {
    .name = "two-level",
    .layout = twolevel_layout,
    .prepare = twolevel_prepare,
    .carve = twolevel_carve,
    .run = twolevel_run,
    .cost = twolevel_cost,
};

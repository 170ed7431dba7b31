/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * prepare.c - everything a call needs (scratch, residual, the way back of
 * the residual), allocated and laid out locally, before anything
 * collective happens; and, under CUDA graph capture, whether all of it is
 * in place already.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"

/* A piece of the scratch, checked against its size: a layout bug becomes
 * an internal error before anything collective, not a buffer overrun. */
void *squall__carve(const squall_engine *e, size_t off, size_t bytes) {
  if (off > e->scratch_bytes || bytes > e->scratch_bytes - off) return NULL;
  return (char *)e->scratch + off;
}

static squallResult_t scratch_reserve(squall_engine *e, size_t bytes, void *stream) {
  if (bytes <= e->scratch_bytes) return squallSuccess;
  /* the new one first: on failure the old one stays (scratch_bytes never
   * falls below what a header planned); the old one is kept while a graph
   * may use it (graph_memory.h) */
  void *p = squall__graph_memory_replace(&e->graphs, &e->k, stream, e->scratch, e->scratch_bytes, &bytes);
  SQ_RETURN_ERROR_IF(p == NULL, squallSystemError, "cannot allocate %zu bytes of %s scratch", bytes, e->k.name);
  e->scratch = p;
  e->scratch_bytes = bytes;
  return squallSuccess;
}

squallResult_t squall__host_reserve(squall_engine *e, size_t bytes) {
  if (bytes <= e->host_bytes) return squallSuccess;
  void *p = realloc(e->host, bytes);
  SQ_RETURN_ERROR_IF(p == NULL, squallSystemError, "cannot allocate %zu bytes of host scratch", bytes);
  e->host = p;
  e->host_bytes = bytes;
  return squallSuccess;
}

/* The residual's slot (and, for host top-k where a failure returns, the
 * spare its next value is written into). */
static squallResult_t prepare_residual(squall_engine *e, const squall_call *c, const squall_plan *plan,
                                       run_state *st) {
  const squallConfig_t *cfg = &plan->rc;
  if (!cfg->errorFeedback) { /* decide() counts the call per shape: the shape must exist */
    SQ_RETURN_ERROR_IF(squall__residuals_add_shape(e->residuals, c->count, squall__kind_of(c)) != 0,
                       squallSystemError, "out of memory for tensor state");
    return squallSuccess;
  }
  /* a shard prepared ahead (squall__engine_prepare_shard): its slot, looked up once */
  squall_tensor *ahead = e->shard_slot;
  e->shard_slot = NULL;
  squall_tensor_key key = squall__hint_of(c);
  uint64_t kind = squall__kind_of(c);
  st->slot = c->shard && ahead && squall__tensor_key_eq(ahead->key, key) && ahead->count == c->count &&
                     ahead->kind == kind
                 ? ahead
                 : squall__residuals_slot(e->residuals, key, c->count, kind);
  SQ_RETURN_ERROR_IF(st->slot == NULL, squallSystemError, "out of memory for tensor state");
  int new_residual = st->slot->residual == NULL;
  st->fresh |= new_residual;
  SQ_FORWARD_IF_ERROR(squall__residuals_ensure(e->residuals, st->slot, cfg->efMaxBytes, c->stream));
  st->res = st->slot->residual;
  if (c->capturing) st->slot->pinned = 1; /* the graph's now: replays never come back here */
  /* Host top-k where a failure returns: the next residual goes beside
   * the old one, which a failure then finds as it was, instead of a
   * backup copy made in the selection pass (an extra stream of n floats
   * written). A shard keeps its backup: the outer call may fail after
   * it, and undoes it from there (squall__engine_undo_shard). */
  int may_return = !(e->tr.failures_fatal && e->tr.failures_fatal(e->tr.ctx));
  int topk = plan->route == SQ_ROUTE_TOPK || plan->route == SQ_ROUTE_TOPK_SCATTER;
  if (topk && st->res && may_return && !c->shard && e->k.topk_encode_to) {
    int created;
    st->spare = squall__residuals_spare(e->residuals, st->slot, cfg->efMaxBytes, c->stream, &created);
    /* Memory first touched in a call makes its time untypical (fresh,
     * which the cost model skips). A new residual would only be read in
     * this call and first written a call later, as the spare: it is
     * touched here instead. */
    if (st->spare && new_residual) SQ_FORWARD_IF_ERROR(e->k.zero(c->stream, st->res, c->count * sizeof(float)));
    st->fresh |= created;
  }
  return squallSuccess;
}

/* Who keeps the residual's way back, in one place. The residual is backed
 * up before any encoder touches it and put back when anything fails: the
 * mass it holds is never lost, whatever step failed. Exact, unlike undoing
 * an encode. A copy costs a pass over n floats, a third of a host 16-bit
 * call's codec time; so only a failure that returns needs it: not where
 * every failure ends the process (failures_fatal: a failed MPI call does,
 * and the MPI entry points hand every error of theirs to the
 * communicator's error handler). The two-phase call makes the copy in its
 * encoding pass (where it guesses the scale; the quantised encoder block
 * by block as it encodes), and the host top-k encoder in its selection
 * pass, where it cannot write the next residual into the shape's spare
 * instead, which needs no backup at all. Top-k without those kernels
 * needs none: it writes the residual after everything that can fail
 * (route_topk.c). A shard's communicator is a split of the caller's, whose
 * error handler may have changed since, and the outer call may still fail
 * after the shard's: shards always keep the way back. */
static squall_guard residual_guard(const squall_engine *e, const squall_call *c, squall_route route,
                                   const run_state *st) {
  if (!st->res) return SQ_GUARD_NONE;
  if (st->spare) return SQ_GUARD_SPARE;
  int fatal = e->tr.failures_fatal && e->tr.failures_fatal(e->tr.ctx);
  int topk_fused = route == SQ_ROUTE_TOPK && e->k.topk_encode_backup != NULL;
  if (!(c->shard || (!fatal && (route != SQ_ROUTE_TOPK || topk_fused))))
    return route == SQ_ROUTE_TOPK && !fatal ? SQ_GUARD_LATE : SQ_GUARD_IN_PLACE;
  return route == SQ_ROUTE_TWOPHASE || topk_fused ? SQ_GUARD_FUSED : SQ_GUARD_COPY;
}

squallResult_t squall__prepare(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st) {
  const scratch_layout *L = &plan->L;
  if (plan->route == SQ_ROUTE_TWOLEVEL) return plan->ops->prepare(e, c, plan, st); /* the hierarchy's memory */
  st->fresh = L->total > e->scratch_bytes;                                         /* memory touched for the first time is slow */
  SQ_FORWARD_IF_ERROR(scratch_reserve(e, L->total, c->stream));
  if (plan->ops->prepare) SQ_FORWARD_IF_ERROR(plan->ops->prepare(e, c, plan, st));
  SQ_FORWARD_IF_ERROR(prepare_residual(e, c, plan, st));
  size_t n = c->count;
  st->scalars = squall__carve(e, L->scalars, 4 * sizeof(float));
  st->work = squall__carve(e, L->work, n * sizeof(float));
  st->absmax_ws = squall__carve(e, L->absmax_ws, e->k.absmax_workspace_bytes(n));
  st->backup = st->res && L->has_backup ? squall__carve(e, L->backup, n * sizeof(float)) : NULL;
  int bad = !st->scalars || !st->work || (n && !st->absmax_ws && e->k.absmax_workspace_bytes(n)) ||
            (st->res && L->has_backup && !st->backup);
  bad |= plan->ops->carve(e, c, plan, st);
  SQ_RETURN_ERROR_IF(bad, squallInternalError, "scratch layout of %zu bytes overruns the %zu-byte scratch",
                     L->total, e->scratch_bytes);
  st->guard = residual_guard(e, c, plan->route, st);
  if (st->guard != SQ_GUARD_COPY && st->guard != SQ_GUARD_FUSED) st->backup = NULL;
  return squallSuccess;
}

/* Under CUDA graph capture nothing may allocate or wait: the call runs only
 * when the header is not due and its memory is in place. */
int squall__capture_ready(squall_engine *e, const squall_call *c, const squall_plan *plan) {
  const squallConfig_t *cfg = &plan->cfg;
  if (!c->shard && (!e->agreed_valid || e->agreed_gen != plan->gen)) return 0; /* a shard: the outer header */
  if (plan->route == SQ_ROUTE_PASS || (!c->shard && !e->agreed_ok)) return 1;
  /* the nodes are found, and the node communicators made, outside capture */
  if (!c->shard && squall__hier_known(e->hier, cfg) < 0) return 0;
  if (plan->route == SQ_ROUTE_TWOLEVEL) return squall__hier_ready(e->hier, c, &plan->rc);
  /* the plan, the same on every rank (scratch_bytes, at least as large, is
   * rank-local); a shard's plan is the outer call's (squall__hier_ready) */
  if (plan->L.total > (c->shard ? e->scratch_bytes : e->scratch_planned)) return 0;
  if (!cfg->errorFeedback) return 1;
  squall_tensor *t = squall__residuals_find(e->residuals, squall__hint_of(c), c->count, squall__kind_of(c));
  return t && (t->residual || t->no_residual);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fold.c - a pass-through that carries its tensor's residual: where a
 * call passes through for its configuration, its plain all-reduce (or
 * reduce-scatter: summed element by element alike) sends g + residual,
 * and the residual is emptied once that call succeeded.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/fpenv.h"
#include "engine/plan.h"

/* Pass-throughs whose tensor may still hold a residual from earlier
 * compressed calls: the configuration's, not the call's own. */
int squall__folds_for(squallPassReason_t why) {
  return why == squallPassNotPaying || why == squallPassDisabled || why == squallPassSmall ||
         why == squallPassSingleRank || why == squallPassMismatch || why == squallPassCollectiveOff;
}

/* A call that passes through for its configuration (the cost model
 * declined its size class, compression is off or the call is below the
 * size threshold, the ranks disagree) would leave the tensor's residual to
 * wait for its next compressed call, which can be hundreds of calls away
 * or never come. The residual rides along instead where the caller can
 * send it (c->can_fold: a sum of floats on host memory): its
 * contribution becomes a = g + e, formed here (an all-reduce in place, in
 * the receive buffer; otherwise in `work` or the engine's fold buffer), and e is
 * emptied once the plain call succeeded. A two-level call's shard
 * residual, kept by the inner engine, is added at the shard's place. The
 * collective is the caller's plain one whether this rank folds or not, so
 * a choice made from this rank's residuals alone cannot make ranks
 * mismatch, and no header is needed: every such call of the tensor folds,
 * so what a compressed call leaves is delivered by the tensor's next call
 * that passes through (squall(7), ERROR FEEDBACK). */
int squall__can_fold(const squall_engine *e, const squall_call *c) {
  return c->can_fold && !c->foreign && e->header_every_call && !c->capturing && !c->shard && c->dtype == SQ_DT_F32 &&
         c->op == SQ_OP_SUM && c->premul == 1.0f && squall__residuals_process_bytes() != 0;
}

static int holds_mass(const squall_tensor *t) { return t && t->residual && t->unsent && !t->pinned; }

/* Where g + residual is formed: an all-reduce in place forms it in its
 * receive buffer, which the result overwrites whole; a reduce-scatter
 * never does (only this rank's block of it is the result's, and the
 * rest is the caller's: rank 0's NCCL-style in-place block is its send
 * buffer's start), so its plain call sends the fold buffer. */
static float *fold_buffer(squall_engine *e, const squall_call *c, float *work) {
  if (c->send == c->recv && c->coll != SQ_COLL_REDUCE_SCATTER) return (float *)c->recv;
  if (work) return work;
  size_t bytes = c->count * sizeof(float);
  if (e->fold_bytes < bytes) {
    float *b = malloc(bytes); /* failing only skips this fold: the mass waits for the next call */
    if (b == NULL) return NULL;
    free(e->fold_buf);
    e->fold_buf = b;
    e->fold_bytes = bytes;
  }
  return e->fold_buf;
}

void squall__fold_into_plain(squall_engine *e, const squall_call *c, float *work, squall_tensor *slot,
                             squall_decision *d) {
  if (!squall__can_fold(e, c) || c->send == NULL || c->recv == NULL) return;
  squall_tensor *t = slot ? slot : squall__engine_carrier_slot(e, c);
  size_t first = 0, s = 0;
  squall_tensor *sh = squall__hier_shard_slot(e->hier, c, &first, &s);
  if (!holds_mass(t)) t = NULL;
  if (!holds_mass(sh) || first >= c->count) sh = NULL;
  if (t == NULL && sh == NULL) return;
  if (c->on_device && c->on_device(c)) return; /* asked only here: a fold is due (a device check costs) */
  float *a = fold_buffer(e, c, work);
  if (a == NULL) return;
  const float *g = c->send;
  double t0 = squall__now();
  const unsigned fp = squall__fp_default_begin(); /* the sum every other path forms */
  if (t) {
    const float *r = t->residual;
    for (size_t i = 0; i < c->count; i++) a[i] = g[i] + r[i];
  } else if (a != g) {
    memcpy(a, g, c->count * sizeof(float));
  }
  if (sh) {
    size_t m = c->count - first < s ? c->count - first : s;
    for (size_t j = 0; j < m; j++) a[first + j] += sh->residual[j];
  }
  squall__fp_default_end(fp);
  /* the plain call's whole time, which the model compares with compressed
   * ones, leaves out this pass: only the first declined call after
   * compressed ones makes it */
  d->t_start += squall__now() - t0;
  d->fold = a;
  d->fold_slot = t;
  d->fold_shard_slot = sh;
  SQ_TRACE("rank %d: %zu elements: the residual rides along the plain call", e->tr.rank, c->count);
}

static void empty_residual(squall_engine *e, squall_tensor *t, size_t count) {
  if (t == NULL || t->residual == NULL) return;
  e->k.zero(NULL, t->residual, count * sizeof(float));
  t->unsent = 0;
}

void squall__fold_done(squall_engine *e, const squall_decision *d) {
  if (d->fold_slot) empty_residual(e, d->fold_slot, d->fold_slot->count);
  if (d->fold_shard_slot) empty_residual(e, d->fold_shard_slot, d->fold_shard_slot->count);
}

squall_tensor *squall__engine_carrier_slot(squall_engine *e, const squall_call *c) {
  return squall__residuals_carrier(e->residuals, squall__hint_of(c), c->count, squall__kind_of(c));
}

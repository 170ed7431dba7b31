/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * entry.c - a host entry point's call through the engine (entry.h): one
 * place for the order of its steps, so that the entry points keep only
 * their own plain collective and checks.
 */
#include "common/internal.h"

#include "common/stats.h"
#include "engine/entry.h"

/* The plain collective of a pass-through (d), timed unless d->untimed:
 * its time tells the cost model the link's speed, and a fold's residual
 * is emptied once it was delivered. */
static int run_plain(squall_engine *e, const squall_decision *d, const squall_entry *x) {
  double t0 = d->untimed ? 0.0 : squall__now();
  int rc = x->plain(x->ctx, d);
  squall__engine_plain_done(e, d, x->bytes, rc == 0, t0, d->untimed ? 0.0 : squall__now());
  return rc;
}

squallResult_t squall__engine_call(squall_engine *e, squall_call *c, const squall_entry *x, int *rc) {
  squall_decision d;
  *rc = 0;
  if (squall__engine_passes(e, c, &d)) {
    *rc = run_plain(e, &d, x);
    return squallSuccess;
  }
  if (x->check && (*rc = x->check(x->ctx, c)) != 0) return squallSuccess;
  if (squall__engine_passes_settled(e, c, &d)) { /* after the checks, which a planned call has too */
    *rc = run_plain(e, &d, x);
    return squallSuccess;
  }
  SQ_FORWARD_IF_ERROR(squall__engine_allreduce(e, c, &d)); /* the engine logged it */
  if (d.route == SQ_ROUTE_PASS) *rc = run_plain(e, &d, x);
  return squallSuccess;
}

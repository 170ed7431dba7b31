/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * costing_device.c - the cost model on engines whose header costs a host
 * synchronisation (device memory; costing_device.h has the schedule):
 * which side a call of a size class takes, when it exchanges a header,
 * the whole-call timings in flight, and the verdict the headers agree.
 * The host engines' model (costing.c) votes on every call instead.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"

static int64_t dev_ns(double s) { return s > 0 ? (s < 1e9 ? (int64_t)(s * 1e9) : (int64_t)1e18) : 0; }

void squall__devcost_init(squall_devcost *d, const squall_kernels *k) {
  memset(d, 0, sizeof *d);
  if (k->timer_record == NULL || k->timer_elapsed == NULL) return; /* a set that times nothing */
  /* Test only: a host engine runs the device schedule, its readings K
   * calls late (docs/design.md, "Deciding a call's path"). */
  const char *test = k->on_host ? getenv("SQUALL_TEST_DEVICE_SCHEDULE") : NULL;
  d->on = !k->on_host || (test && *test);
  if (test && *test) d->lag = atoi(test) > 0 ? atoi(test) : 0;
}

void squall__devcost_free(squall_devcost *d, const squall_kernels *k) {
  for (int i = 0; i < SQ_DEV_PENDING && k->timer_free; i++) {
    if (d->t[i].start) k->timer_free(d->t[i].start);
    if (d->t[i].end) k->timer_free(d->t[i].end);
  }
}

/* The schedule's answer for the call (plan->dev*), before the plan: a
 * function of the class's call count and its last verdict, both the same
 * on every rank. A captured call follows the verdict alone (no header, no
 * timing: it replays as captured). While a class is measured, the side
 * taken by default is plain where every rank is on one node (over NVLink a
 * plain all-reduce costs about what the codecs' kernels do) and
 * compressed otherwise; every other call takes the other side. */
void squall__devcost_plan(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                          squall_plan *plan) {
  /* one rank (SQUALL_MIN_RANKS=1) compresses: it is there to prove the path */
  if (!e->dev.on || !cfg->costModel || c->shard || c->coll != SQ_COLL_ALLREDUCE || e->tr.nranks < 2) return;
  int cls = squall__cost_class((uint64_t)c->count * c->elsize);
  uint64_t i = e->dev.calls[cls];
  int live = !c->capturing, one = squall__device_on_one_node(e, cfg, c);
  int other = live && i % SQ_DEV_OTHER_EVERY == SQ_DEV_HEADER_EVERY / 2;
  plan->dev = 1;
  plan->one_node = 0; /* the figures decide, once measured */
  switch (e->dev.verdict[cls]) {
  case SQ_DEV_COMPRESS:
    plan->dev_plain = other;
    plan->dev_header = live && i % SQ_DEV_HEADER_EVERY == 0;
    break;
  case SQ_DEV_PLAIN:
    plan->dev_plain = !other;
    plan->dev_header = live && i % SQ_DEV_HEADER_EVERY == 0;
    break;
  default: /* measuring: a header on every call, until every rank has its figures */
    plan->dev_plain = live && i % 2 == 1 ? !one : one;
    plan->dev_header = live;
    plan->one_node = plan->dev_plain && one; /* said once: pass_planned */
  }
}

/* Readings that are ready (never a wait); a start whose end was never
 * recorded (its caller's plain call failed, or was not reported) is
 * dropped: calls on one engine come one at a time. */
static void poll(squall_engine *e) {
  squall_devcost *d = &e->dev;
  for (int i = 0; i < SQ_DEV_PENDING; i++) {
    squall_dev_timing *t = &d->t[i];
    if (t->state == 1) t->state = 0;
    if (t->state != 2 || d->ticks < t->due) continue;
    double s = 0;
    int r = e->k.timer_elapsed(t->start, t->end, &s);
    if (r == 0) continue;
    if (r > 0) {
      squall__cost_note_call(&e->cost, t->kind, t->bytes_in, s);
      SQ_TRACE("rank %d: %llu bytes: %s call timed %.3g s", e->tr.rank, (unsigned long long)t->bytes_in,
               t->kind < 0 ? "plain" : "compressed", s);
    }
    t->state = 0;
  }
}

void squall__devcost_count(squall_engine *e, const squall_call *c, const squall_plan *plan) {
  if (!plan->dev || c->capturing) return;
  e->dev.calls[squall__cost_class((uint64_t)c->count * c->elsize)]++;
  e->dev.ticks++;
  poll(e);
}

/* This rank's whole-call figures for the header: forced (measure on)
 * until it has both sides' of the class. */
void squall__devcost_vote(squall_engine *e, const squall_call *c, const squall_plan *plan, squall_cost_verdict *v) {
  double tp, tc;
  memset(v, 0, sizeof *v);
  v->forced = 1;
  for (int i = 0; i < SQ_COST_VARIANTS; i++) v->variant_ns[i] = SQ_NS_UNKNOWN;
  if (plan->dev_kind >= 0 && squall__cost_whole(&e->cost, plan->dev_kind, (uint64_t)c->count * c->elsize, &tp, &tc)) {
    v->forced = 0;
    v->comp_ns = dev_ns(tc);
    v->plain_ns = dev_ns(tp);
  }
}

/* After the header: the class's verdict from the largest figures over the
 * ranks (forced while some rank lacks them), for the calls from the next
 * on; this call takes the side it was planned for. */
int squall__devcost_agree(squall_engine *e, const squall_call *c, const squall_plan *plan, const squall_agreement *ag,
                          squall_cost_verdict *v) {
  int cls = squall__cost_class((uint64_t)c->count * c->elsize);
  v->model_pays = v->forced || squall__cost_pays((double)v->comp_ns, (double)v->plain_ns);
  if (ag->agreed && !c->capturing) {
    uint8_t was = e->dev.verdict[cls];
    e->dev.verdict[cls] = v->forced ? SQ_DEV_MEASURING : v->model_pays ? SQ_DEV_COMPRESS
                                                                       : SQ_DEV_PLAIN;
    if (was != e->dev.verdict[cls])
      SQ_TRACE("rank %d: %zu elements: verdict %d -> %d (%.3g s compressed, %.3g s plain, largest over the ranks)",
               e->tr.rank, c->count, was, e->dev.verdict[cls], (double)v->comp_ns * 1e-9,
               (double)v->plain_ns * 1e-9);
  }
  return !plan->dev_plain;
}

/* ---------------------------------------------------------- timings */

int squall__devcost_start(squall_engine *e, const squall_call *c, const squall_plan *plan, int kind) {
  if (!plan->dev || c->capturing || kind >= SQ_COST_KINDS) return 0;
  for (int i = 0; i < SQ_DEV_PENDING; i++) {
    squall_dev_timing *t = &e->dev.t[i];
    if (t->state != 0) continue;
    if (e->k.timer_record(&t->start, c->stream) != squallSuccess) {
      SQ_TRACE("rank %d: a timer mark failed: %s (the call runs untimed)", e->tr.rank, squallGetLastError());
      return 0;
    }
    t->state = 1;
    t->kind = kind;
    t->bytes_in = (uint64_t)c->count * c->elsize;
    return i + 1;
  }
  return 0; /* all in flight: this call is not timed */
}

void squall__devcost_stop(squall_engine *e, int timing, void *stream, int ok, int fresh) {
  if (timing <= 0 || timing > SQ_DEV_PENDING) return;
  squall_dev_timing *t = &e->dev.t[timing - 1];
  if (t->state != 1) return;
  t->state = 0;
  if (!ok) return;
  if (fresh) { /* page faults of new memory: it ran, but its time is not typical */
    squall__cost_note_call(&e->cost, t->kind, t->bytes_in, -1.0);
    return;
  }
  if (e->k.timer_record(&t->end, stream) != squallSuccess) return;
  t->state = 2;
  t->due = e->dev.ticks + (uint64_t)e->dev.lag;
}

void squall__engine_plain_ran(squall_engine *e, const squall_decision *d, void *stream, int ok) {
  if (d->dev_timing) squall__devcost_stop(e, d->dev_timing, stream, ok, 0);
}

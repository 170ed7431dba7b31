/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * header.c - the call header: one tiny all-reduce(min) that tells every
 * rank whether all ranks prepared successfully, hold the same
 * configuration and passed the same arguments, and carries the cost
 * model's figures. Host engines exchange it on every call that could be
 * compressed, so nothing rank-local (a different SQUALL_MIN_RANKS, a
 * squallSetConfig landing between two calls on one rank only) can make
 * ranks take different collectives. Device engines exchange it only when
 * the configuration generation moved or scratch must grow (both the same
 * on every rank when squallSetConfig is called at the same point
 * everywhere), because reading it back synchronises the stream.
 */
#include "common/internal.h"

#include <string.h>

#include "codecs/codec.h"
#include "common/stats.h"
#include "engine/plan.h"

#define DESC_BYTES 512 /* the longest description (every field at its widest) is under 400 */

/* Everything that changes what goes on the wire or what the sum means:
 * the options the configuration table marks to agree (lib/common/config.c). */
static void describe(const squallConfig_t *c, char *out) { squall__config_describe(c, out, DESC_BYTES); }
static int64_t digest(const squallConfig_t *c) { return squall__config_digest(c); }

static const char *dtype_name(int t) {
  return t == SQ_DT_F32 ? "float32" : t == SQ_DT_F16 ? "float16"
                                  : t == SQ_DT_BF16  ? "bfloat16"
                                                     : "other";
}

/* The call's arguments every rank must pass alike (MPI and NCCL require
 * it; premul is per rank by design): the type and the operation. */
static int64_t call_signature(const squall_call *c) {
  return ((int64_t)c->coll * 64 + (int64_t)c->dtype) * 16 + (int64_t)c->op;
}

/* Step 2: one all-reduce(min) of [ok, digest, -digest], the cost model's
 * [-forced, -t_comp, -t_plain, -t_variant...] (maxima, through the
 * minimum), [count, -count, signature, -signature]: a rank that passed
 * another count, type or operation is found here, before anything has
 * changed, where otherwise the collectives that follow would mismatch
 * (a hang, a truncation error on some ranks only, or a silent wrong sum);
 * [-nonblocking]: a communicator's blocking mode is each rank's own
 * choice, and one non-blocking rank makes every rank pass through; and
 * [changes, -changes], the squallSetConfig calls this process has made:
 * ranks that made different numbers of them have broken its collective
 * rule (squall(7)), which is said, where this header could still meet;
 * [-foreign]: a rank whose buffers its kernels cannot read makes every
 * rank pass through. */
#define HEADER_FIXED 14
#define HEADER_WORDS (HEADER_FIXED + SQ_COST_VARIANTS)
squallResult_t squall__header(squall_engine *e, const squall_call *c, const squall_plan *plan, int ok,
                              squall_agreement *ag, squall_cost_verdict *v) {
  const squallConfig_t *cfg = &plan->cfg;
  uint64_t gen = plan->gen;
  int64_t d = digest(cfg), sig = call_signature(c), n = (int64_t)c->count;
  int64_t changes = (int64_t)(gen & INT64_MAX);
  int64_t h[HEADER_WORDS] = {ok ? 1 : 0, d, -d, -(int64_t)v->forced, -v->comp_ns, -v->plain_ns, n, -n, sig, -sig,
                             c->nonblocking ? -1 : 0, changes, -changes, c->foreign ? -1 : 0};
  for (int i = 0; i < SQ_COST_VARIANTS; i++) h[HEADER_FIXED + i] = -v->variant_ns[i];
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_min_i64_host(e->tr.ctx, c->stream, h, HEADER_WORDS));
  squall__stats_record_header(&e->stats);
  /* Every rank sees the same minima: all of them return this error (not
   * where the ok word is neither 0 nor 1: a header that came back garbled
   * says nothing about the arguments, and is not "all ok" below). */
  int formed = h[0] == 0 || h[0] == 1;
  SQ_RETURN_ERROR_IF(formed && h[6] != -h[7], squallInvalidArgument,
                     "ranks passed different counts to one call (from %lld to %lld elements; "
                     "this rank: %zu %s elements): nothing was changed",
                     (long long)h[6], (long long)-h[7], c->count, dtype_name(c->dtype));
  SQ_RETURN_ERROR_IF(formed && h[8] != -h[9], squallInvalidArgument,
                     "ranks passed different collectives, datatypes or operations to one %zu-element call "
                     "(this rank: %s, %s): nothing was changed",
                     c->count, dtype_name(c->dtype), c->op == SQ_OP_AVG ? "average" : "sum");
  ag->all_ok = h[0] == 1;
  ag->agreed = h[1] == -h[2];
  /* The slowest rank sets a collective's time: compare the largest
   * predictions; a rank without figures (or exploring) makes all compress. */
  v->forced = h[3] < 0;
  v->comp_ns = -h[4];
  v->plain_ns = -h[5];
  for (int i = 0; i < SQ_COST_VARIANTS; i++) v->variant_ns[i] = -h[HEADER_FIXED + i];
  if (formed && h[11] != -h[12] && !e->said_changes++)
    SQ_WARN("rank %d: the ranks have called squallSetConfig different numbers of times (from %lld to %lld; "
            "this rank: %lld): it is collective, to be called between the same two calls on every rank, "
            "or ranks that pass a call through without a header meet others that exchange one",
            e->tr.rank, (long long)h[11], (long long)-h[12], (long long)changes);
  e->agreed_nonblocking = formed && h[10] < 0; /* for device calls without a header, too */
  ag->foreign = formed && h[13] < 0;
  e->agreed_gen = gen;
  e->agreed_valid = 1;
  e->agreed_ok = ag->agreed;
  e->agreed_cfg = *cfg;
  if (!ag->agreed && !(e->warned_valid && e->warned_gen == gen)) {
    char mine[DESC_BYTES];
    describe(cfg, mine);
    SQ_WARN("ranks disagree on the squall configuration: calls on this communicator pass through "
            "until they agree; rank %d has '%s'",
            e->tr.rank, mine);
    e->warned_gen = gen;
    e->warned_valid = 1;
  }
  return squallSuccess;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * record.c - what a call leaves behind: its statistics, the cost model's
 * sample of a plain call, and the lines SQUALL_DEBUG=INFO and the default
 * level print about a call's path.
 */
#include "common/internal.h"

#include <stdlib.h>

#include "common/stats.h"
#include "engine/plan.h"

/* SQUALL_DEBUG=INFO: one line whenever the path of a size class (a power
 * of two of bytes) changes, with its reason: what a user looking for why
 * nothing (or everything) is compressed wants, without a line per call. */
static void say_path(squall_engine *e, const squall_call *c, const squall_decision *d, squallResult_t r) {
  squallPassReason_t own;
  if (squall__log_level() < squallLogInfo || c->shard || r != squallSuccess || squall__call_pass_reason(c, &own)) return;
  uint64_t bytes = (uint64_t)c->count * c->elsize;
  int cls = 0;
  while (cls < 63 && (bytes >> (cls + 1)) != 0) cls++;
  uint8_t path = (uint8_t)(d->route == SQ_ROUTE_PASS ? 0x80 | (unsigned)d->reason : 1 + (unsigned)d->route);
  if (e->last_path[cls] == path) return;
  e->last_path[cls] = path;
  if (d->route == SQ_ROUTE_PASS)
    SQ_INFO("rank %d/%d: calls of %llu bytes and up to twice that now pass through (%s)", e->tr.rank,
            e->tr.nranks, (unsigned long long)(1ull << cls), squallPassReasonName(d->reason));
  else
    SQ_INFO("rank %d/%d: calls of %llu bytes and up to twice that now run %s", e->tr.rank, e->tr.nranks,
            (unsigned long long)(1ull << cls), squall__route_name(d->route));
}

void squall__record(squall_engine *e, const squall_call *c, const squall_decision *d, squallResult_t r,
                    const run_state *st) {
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  say_path(e, c, d, r);
  if (c->shard) { /* two-level: the outer call counts it, with these figures */
    if (r != squallSuccess) return;
    if (st->chunks > 1) {
      e->stats.pipelinedCalls++;
      e->stats.pipelineChunks += st->chunks;
    }
    e->stats.calls++;
    e->stats.compressedCalls++;
    e->stats.bytesIn += bytes_in;
    e->stats.bytesWire += st->wire;
    e->stats.codecSeconds += st->codec_s;
    return;
  }
  if (d->route == SQ_ROUTE_TWOLEVEL) {
    uint64_t wire = st->hier.inter + st->hier.intra;
    squall__stats_record(&e->stats, r == squallSuccess ? -1 : squallPassError, bytes_in, wire,
                         st->hier.codec_s);
    if (r == squallSuccess) {
      squall__stats_record_path(&e->stats, 2, -1, st->hier.inter, st->hier.intra);
      squall__stats_record_chunks(&e->stats, st->hier.chunks); /* the shard's, across nodes */
    }
  } else if (r != squallSuccess) {
    squall__stats_record(&e->stats, squallPassError, bytes_in, st->wire, st->codec_s);
  } else if (d->route == SQ_ROUTE_PASS) {
    uint64_t wire = squall__ring_wire(c->coll, bytes_in, e->tr.nranks);
    int crosses = squall__hier_crosses(e->hier); /* two-level: bytes at the node boundary */
    squall__stats_record_pass(&e->stats, (int)d->reason, bytes_in, crosses ? wire : 0, crosses ? 0 : wire);
  } else {
    squall__stats_record(&e->stats, -1, bytes_in, st->wire, st->codec_s);
    squall__hier_record(e->hier, &e->stats, 1, st->flat_reason, st->wire); /* flat path, and why */
  }
}

/* Said once per communicator, by its rank 0 at the default log level: a
 * user who asked for a codec should learn why nothing is compressed. */
void squall__say_one_node(squall_engine *e) {
  if (e->said_one_node) return;
  e->said_one_node = 1;
  if (e->tr.rank == 0)
    SQ_WARN("rank 0/%d: all ranks are on one node: calls on device buffers pass through (would_not_pay) "
            "until the cost model has timed both paths at their size, since over NVLink a plain all-reduce "
            "costs about what the codecs' kernels do; then the times decide (SQUALL_COST_MODEL=off compresses "
            "them)",
            e->tr.nranks);
  const char *p2p = getenv("NCCL_P2P_DISABLE"), *shm = getenv("NCCL_SHM_DISABLE");
  if (p2p && shm && atoi(p2p) == 1 && atoi(shm) == 1)
    SQ_WARN("rank %d: NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 send this node's traffic over a network "
            "interface, where compressing may pay: SQUALL_COST_MODEL=off compresses these calls",
            e->tr.rank);
}

void squall__engine_plain_done(squall_engine *e, const squall_decision *d, uint64_t bytes, int ok, double t0,
                               double t1) {
  squall__engine_plain_ran(e, d, NULL, ok); /* host memory: the stream is not needed */
  if (!ok) return;
  if (!d->untimed && !e->dev.on) { /* the device schedule times its own (costing_device.c) */
    double seconds = t1 - t0, whole_seconds = t1 - (d->t_start > 0 ? d->t_start : t0);
    /* the collective's own figures: a reduce-scatter's plain call sends half */
    squall_cost *m = d->coll == SQ_COLL_REDUCE_SCATTER ? &e->cost_scatter : &e->cost;
    squall__cost_note_link(m, 1, squall__ring_wire(d->coll, bytes, e->tr.nranks), seconds);
    squall__cost_note_call(m, -1, bytes, whole_seconds);
    SQ_TRACE("rank %d: %llu bytes: plain call %.3g s (its collective %.3g s)", e->tr.rank, (unsigned long long)bytes,
             whole_seconds, seconds);
  }
  if (d->fold) squall__fold_done(e, d);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * engine.h - one compressed all-reduce: decide (pass through, or which
 * codec), then compress -> exchange -> decompress through a transport and
 * a kernel set. Knows nothing of MPI or NCCL types: entry points translate
 * into squall_call and run the plain collective themselves when told to.
 *
 * The failure policy (squall(7), FAILURE POLICY) lives here, the same for
 * every entry point:
 *   - a call passes through only when every rank takes the same decision
 *     from the same inputs, before anything changed;
 *   - once a residual was touched or a collective started, a failure is
 *     returned to the caller, never hidden by passing the call through;
 *   - the residual then holds exactly what it held before the call.
 */
#ifndef SQUALL_ENGINE_H
#define SQUALL_ENGINE_H

#include "kernels/kernels.h"
#include "squall.h"
#include "transports/transport.h"

typedef enum { SQ_OP_SUM = 0,
               SQ_OP_AVG = 1,
               SQ_OP_OTHER = 2 } squall_op;

struct squall_shard;

/* The collective a call asks for. A reduce-scatter's count is its send
 * buffer's (recvcount times the ranks), its recv holds count / nranks
 * elements: this rank's shard (MPI_Reduce_scatter_block's layout). */
typedef enum { SQ_COLL_ALLREDUCE = 0,
               SQ_COLL_REDUCE_SCATTER = 1 } squall_coll;

typedef struct squall_call {
  const void *send; /* may equal recv */
  void *recv;
  size_t count; /* elements of send (and of recv for an all-reduce) */
  squall_coll coll;
  int dtype;     /* a squall_dtype, or -1 for any other type */
  size_t elsize; /* bytes per element of the caller's type */
  squall_op op;
  float premul;                                  /* input multiplier (PreMulSum); 1 otherwise */
  int in_group;                                  /* inside a user's group call: pass through */
  int interposed;                                /* made by an LD_PRELOAD interposer: SQUALL_COLLECTIVES says whether
                       squall takes it (a direct call names its collective: always) */
  int intercomm;                                 /* an MPI intercommunicator: pass through */
  int uneven;                                    /* a reduce-scatter whose ranks receive different counts
                       (MPI_Reduce_scatter): pass through (the codecs' shards are equal) */
  int capturing;                                 /* CUDA graph capture: no allocation, no host wait */
  int can_fold;                                  /* the caller can send g + residual in its plain call (squall_decision.fold) */
  int foreign;                                   /* a buffer the engine's kernels cannot read (device memory on the MPI path):
                       passes through, and the header tells every rank (a rank-local fact) */
  int (*on_device)(const struct squall_call *c); /* the caller's check for device buffers, asked
                       only before a fold reads them (it costs); NULL: host memory */
  int nonblocking;                               /* this rank's NCCL communicator is non-blocking: such calls pass through,
                       and the header tells every rank (a rank-local fact: see decide()) */
  void *stream;                                  /* the caller's stream (cudaStream_t), NULL for host */
  const void *key;                               /* the tensor's identity where the caller knows it (a gradient bucket's index):
                       its residual follows the key, not the buffers; NULL: the buffers */
  /* one shard of a two-level call, across nodes (engine/hierarchy.c), or NULL */
  const struct squall_shard *shard;
} squall_call;

/* What makes a call a shard of a two-level all-reduce: the outer call has
 * exchanged the header, decided and counted the warm-up, and hands down
 * the configuration it runs with, so that a shard never reads a snapshot
 * of its own (a squallSetConfig between the two cannot part them); the
 * shard runs the route that configuration gives it, or fails, and never
 * passes through. */
typedef struct squall_shard {
  const squallConfig_t *cfg; /* the outer call's run configuration (raw top-k slots applied) */
  /* the residual's address hint: the caller's buffers, since every shard
     runs in the same scratch */
  const void *key, *key_recv;
  const struct squall_call *whole; /* the two-level call, whose count and type are the residual's
                                      shape (counts with one shard size differ) */
} squall_shard;

/* The route of one call, decided in one place (decide() in plan.c) from
 * inputs identical on every rank. */
typedef enum {
  SQ_ROUTE_PASS = 0, /* the caller runs the plain collective; nothing was changed */
  SQ_ROUTE_HALF,     /* 16-bit all-reduce */
  SQ_ROUTE_TOPK,     /* top-k all-gather */
  SQ_ROUTE_DENSE,    /* top-k's dense fallback: all-reduce (reduce-scatter) of g + residual */
  SQ_ROUTE_TWOPHASE, /* quantised or fp32-accumulated 16-bit: exchange, sum, all-gather */
  SQ_ROUTE_TWOLEVEL, /* node reduce-scatter, the compressed route across nodes on the
                        shard (an inner engine), node all-gather (engine/hierarchy.c) */
  SQ_ROUTE_TOPK_SCATTER /* top-k reduce-scatter: a slot per owner, all-to-all (route_topk_scatter.c) */
} squall_route;

typedef struct {
  squall_route route;
  squallPassReason_t reason; /* why, when route is SQ_ROUTE_PASS */
  double t_start;            /* when the engine took the call (squall__now()), moved on by the
                                time of the header and of a fold: what a plain call is timed from */
  /* A pass-through for the configuration (the cost model's verdict,
   * compression off, below the size threshold, disagreeing ranks) of a
   * tensor whose residual holds mass (call.can_fold only): the caller's
   * plain collective sends fold
   * (g + residual; an all-reduce's receive buffer itself when in place) instead of
   * its input, and calls squall__engine_plain_done once it ran. NULL
   * otherwise. */
  int untimed; /* a pass-through whose plain call the cost model has no use for (below
                  SQUALL_MIN_BYTES, or fewer ranks than SQUALL_MIN_RANKS, as the ranks agreed):
                  the caller need not time it (squall__engine_plain_done) */
  const float *fold;
  /* the device cost model times this plain call: the caller reports it
   * (squall__engine_plain_ran); 0: not timed */
  int dev_timing;
  struct squall_tensor *fold_slot, *fold_shard_slot; /* what fold carries: the tensor's residual, its
                                                       two-level shard residual (either may be NULL) */
  /* the call's collective: which of the cost model's figures its plain call feeds */
  squall_coll coll;
} squall_decision;

typedef struct squall_engine squall_engine;

/* An engine for one communicator. The transport and kernel structs are
 * copied; the transport's ctx must outlive the engine. NULL when out of
 * memory. */
squall_engine *squall__engine_create(const squall_transport *transport, const squall_kernels *kernels);

/* From now on the engine's calls run with cfg (checked, copied), not the
 * process's configuration: collective, as squallSetConfig. */
squallResult_t squall__engine_set_config(squall_engine *engine, const squallConfig_t *cfg);

/* Frees all state (residuals, scratch); logs the communicator's summary at
 * SQUALL_DEBUG=INFO. Accepts NULL. */
void squall__engine_free(squall_engine *engine);

/* 1 for a call the engine never compresses, from the call alone (its type,
 * op or communicator, a user's group, a count of 0): the same on every
 * rank, and no engine needed to say so. */
int squall__engine_never_compresses(const squall_call *call);

/* 1 when the call passes through without anything collective of
 * squall's: a call the engine never compresses (its type, op or
 * communicator), or one that the configuration the ranks agreed on
 * passes through (compression off, below the size threshold, fewer ranks
 * than SQUALL_MIN_RANKS), which may carry its tensor's residual (d->fold).
 * The same answer on every rank. Fills d and records the call as
 * squall__engine_allreduce would; the caller runs the plain collective
 * with the arguments as given (or d->fold), so that MPI's or NCCL's own
 * answer, errors included, is the caller's (d->t_start is 0: the whole
 * call is the plain one). 0: the caller makes its own checks of the
 * arguments, then squall__engine_passes_settled, then
 * squall__engine_allreduce. */
int squall__engine_passes(squall_engine *engine, const squall_call *call, squall_decision *d);

/* 1 when the call, which squall__engine_passes did not pass and the
 * caller's checks of its arguments found sound, is of a size class the
 * cost model has settled as not paying, while the configuration
 * generation stands where the ranks agreed: squall__engine_allreduce's
 * answer and bookkeeping for it (the count toward the next exploration,
 * the residual's fold), without its snapshot of the configuration. Fills
 * d and records the call; the caller runs the plain collective, timed
 * from d->t_start (the whole call). 0: squall__engine_allreduce. */
int squall__engine_passes_settled(squall_engine *engine, const squall_call *call, squall_decision *d);

/* Runs the call. squallSuccess with d->route == SQ_ROUTE_PASS: the caller
 * must run the plain collective itself (every rank got the same answer;
 * nothing was written and no residual changed, except a fold: d->fold,
 * which may be recv itself, holds g + residual for the plain call, and
 * the residual is emptied by squall__engine_plain_done once it succeeded). squallSuccess otherwise:
 * recv holds the result. Any other result: the call failed; recv is
 * undefined, the residuals are as before the call, and the caller must
 * return the error (never pass the call through). Every failure is logged.
 * Statistics are recorded here for every call. */
squallResult_t squall__engine_allreduce(squall_engine *engine, const squall_call *call,
                                        squall_decision *d);

/* Zeroes all residuals of this communicator (on the last call's stream). */
squallResult_t squall__engine_reset_residuals(squall_engine *engine);

/* Copies the residual of the tensor last sent from key (count floats,
 * kernel memory) into out (host memory); whole: 0, or for a shard's the
 * two-level call's count. squallInvalidArgument when none is kept. */
squallResult_t squall__engine_get_residual(squall_engine *engine, const void *key, size_t count,
                                           int dtype, size_t whole, float *out);

/* The same for a reduce-scatter's tensor (count: its send buffer's). */
squallResult_t squall__engine_get_scatter_residual(squall_engine *engine, const void *key, size_t count, int dtype,
                                                   float *out);

/* The engine's own counters (two-level: the inner engine's wire bytes). */
const squallStats_t *squall__engine_stats(const squall_engine *engine);

/* Puts back the residual of the last shard call (a two-level call that
 * failed after its shard all-reduce succeeded). */
squallResult_t squall__engine_undo_shard(squall_engine *engine, void *stream);

/* Two-level: the shard call c's scratch bytes (*bytes, may be NULL) and,
 * when alloc, everything it will need allocated now (scratch, residual
 * and its backup, lossless host memory), locally, before the outer call's
 * header, so that running c allocates nothing. The residual slot found
 * here serves c's run: its lookup counts once. */
squallResult_t squall__engine_prepare_shard(squall_engine *engine, const squall_call *call, int alloc,
                                            size_t *bytes);

/* For CUDA graph capture: 1 when the shard call c runs without allocation
 * or host synchronisation, else 0. */
int squall__engine_ready(squall_engine *engine, const squall_call *call);

/* x rounded up to 256 bytes: where the engine and its calls place the
 * pieces of their scratch, each on lines of its own. */
static inline size_t squall__align_up(size_t x) { return (x + 255) & ~(size_t)255; }

/* Bytes this rank sends in a ring all-reduce of `bytes` over p ranks. */
uint64_t squall__ring_allreduce_wire(uint64_t bytes, int p);
/* The bytes one rank sends in the plain collective coll of `bytes` by a
 * ring: a reduce-scatter sends half of what an all-reduce does. */
uint64_t squall__ring_wire(squall_coll coll, uint64_t bytes, int p);

/* The caller's plain all-reduce of a pass-through (d) of `bytes` ran,
 * from t0 to t1 (both 0 where d->untimed), and succeeded (ok) or not:
 * where it succeeded, its time is a sample of the link for the cost model
 * (the whole call since d->t_start too, which leaves out the call header,
 * which a size class the model declines soon skips, and the residual's
 * fold), and the residual it carried (d->fold) is delivered, and
 * emptied. */
void squall__engine_plain_done(squall_engine *engine, const squall_decision *d, uint64_t bytes, int ok, double t0,
                               double t1);

/* The caller's plain all-reduce of a pass-through (d) was enqueued on
 * stream (ok) or failed: the device cost model's timing of it ends there
 * (costing_device.c). Any caller of squall__engine_allreduce may call it;
 * squall__engine_plain_done does. */
void squall__engine_plain_ran(squall_engine *engine, const squall_decision *d, void *stream, int ok);

/* The slot that carries the residual of call c (a shard call: its shard
 * residual) into a plain call (squall__residuals_carrier), or NULL. */
struct squall_tensor *squall__engine_carrier_slot(squall_engine *engine, const squall_call *c);

#endif

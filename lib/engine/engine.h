/*
 * engine.h - one compressed all-reduce: plan (eligible? which path?), then
 * compress -> exchange -> decompress through a transport and a kernel set.
 * Knows nothing of MPI or NCCL types: entry points translate into
 * squall_call and run the plain collective themselves when told to.
 */
#ifndef SQUALL_ENGINE_H
#define SQUALL_ENGINE_H

#include "engine/kernels.h"
#include "squall.h"
#include "transports/transport.h"

typedef enum { SQ_OP_SUM = 0, SQ_OP_AVG = 1, SQ_OP_OTHER = 2 } squall_op;

typedef struct {
  const void *send; /* may equal recv */
  void *recv;
  size_t count;
  int dtype;        /* a squall_dtype, or -1 for any other type */
  size_t elsize;    /* bytes per element of the caller's type */
  squall_op op;
  float premul;     /* input multiplier (PreMulSum); 1 otherwise */
  int in_group;     /* inside a user's group call: pass through */
  /* ---- two-level all-reduce (engine/hierarchy.c) */
  int shard;        /* one shard of a two-level call, across nodes: the outer engine has
                       agreed, planned and warmed up; counted by the outer call */
  const void *key;  /* the residual's key when not send (a shard: the caller's tensor) */
} squall_call;

typedef struct squall_engine squall_engine;

/* An engine for one communicator. The transport and kernel structs are
 * copied; their ctx pointers must outlive the engine. NULL when out of
 * memory. */
squall_engine *squall__engine_create(const squall_transport *transport, const squall_kernels *kernels);

/* Frees all state (residuals, scratch); logs the communicator's summary at
 * SQUALL_DEBUG=INFO. Accepts NULL. */
void squall__engine_free(squall_engine *engine);

/* Runs the call. On return *pass_reason is -1 when the engine did the
 * all-reduce, or a squallPassReason_t when the caller must run the plain
 * collective itself (then nothing was written, and the call was counted
 * in the statistics as that collective).
 * An error after data started moving is returned as such. */
squallResult_t squall__engine_allreduce(squall_engine *engine, const squall_call *call,
                                        int *pass_reason);

/* 1 when the call would neither allocate nor synchronise with the host
 * (configuration agreed, tensor, residual and scratch in place): the
 * condition for running it inside CUDA graph capture. */
int squall__engine_ready(squall_engine *engine, const squall_call *call);

/* Zeroes all residuals of this communicator. */
squallResult_t squall__engine_reset_residuals(squall_engine *engine);

/* Copies a tensor's residual (count floats, kernel memory) into out (host
 * memory for the host kernels). squallInvalidArgument when none is kept. */
squallResult_t squall__engine_get_residual(squall_engine *engine, const void *key, size_t count,
                                           int dtype, float *out);

/* The engine's own counters (two-level: the inner engine's wire bytes). */
const squallStats_t *squall__engine_stats(const squall_engine *engine);

/* Bytes this rank sends in a ring all-reduce of `bytes` over p ranks. */
uint64_t squall__ring_allreduce_wire(uint64_t bytes, int p);

#endif

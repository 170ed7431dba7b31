/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * entry.h - the steps every host entry point takes with a call (the
 * squallColl* functions, squallMpiAllreduce and its reduce-scatter): ask
 * whether it passes through, else run the caller's own checks and the
 * engine, and run the caller's plain collective, timed for the cost model,
 * wherever the engine passed the call through. The caller supplies its
 * plain collective and checks as callbacks, so that the engine knows no
 * MPI or caller's table. (The NCCL entry points time their plain call on
 * the stream and set the CUDA device around the engine: they run the
 * steps themselves, lib/api/api_nccl.c.)
 */
#ifndef SQUALL_ENGINE_ENTRY_H
#define SQUALL_ENGINE_ENTRY_H

#include <stdint.h>

#include "engine/engine.h"

/* The caller's side of one call. Both callbacks return 0 (MPI_SUCCESS)
 * or the caller's own error code, which squall__engine_call hands back. */
typedef struct {
  /* the plain collective of a call the engine passed through, with the
   * arguments as given, or d->fold in place of the send buffer where set */
  int (*plain)(void *ctx, const squall_decision *d);
  /* the caller's checks of a call squall__engine_passes did not pass
   * through, and what they set in c (c->foreign), before the engine runs
   * it: a code other than 0 ends the call there (the callback logged it
   * and told whoever must be told); NULL: none */
  int (*check)(void *ctx, squall_call *c);
  void *ctx;
  uint64_t bytes; /* the plain call's bytes, for the cost model (squall__engine_plain_done) */
} squall_entry;

/* Runs call c: squall__engine_passes, or x->check and then
 * squall__engine_passes_settled or squall__engine_allreduce, then
 * x->plain, timed, where the call passed
 * through (squall__engine_plain_done). squallSuccess with *rc 0: the call
 * is done; with another *rc: the plain collective's or x->check's code,
 * for the caller to return. Any other result: the engine's error (logged),
 * which the caller returns, never passing the call through. */
squallResult_t squall__engine_call(squall_engine *engine, squall_call *c, const squall_entry *x, int *rc);

#endif

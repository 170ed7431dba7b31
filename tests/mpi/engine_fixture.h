/* SPDX-License-Identifier: BSD-3-Clause */
/* engine_fixture.h - an engine over its own duplicate of MPI_COMM_WORLD,
 * for the MPI tests that work below the entry points (the cost model's
 * state, a node table, injected transport faults). Its parts stay the
 * test's: between ef_open and ef_engine a test may wrap the transport's
 * functions or change the kernel set, which the engine then runs with.
 * Needs Check and the MPI transport. */
#ifndef SQUALL_TESTS_MPI_ENGINE_FIXTURE_H
#define SQUALL_TESTS_MPI_ENGINE_FIXTURE_H

#include <check.h>
#include <mpi.h>
#include <stddef.h>

#include "engine/engine.h"
#include "kernels/kernels.h"
#include "squall.h"
#include "transports/transport_mpi.h"

typedef struct {
  MPI_Comm comm;
  squall_mpi_ctx ctx;
  squall_transport tr;
  squall_kernels k; /* the host set until the test changes it */
  squall_engine *e;
} engine_fixture;

/* The communicator and the transport; no engine yet (ef_engine). */
static inline void ef_open(engine_fixture *f) {
  MPI_Comm_dup(MPI_COMM_WORLD, &f->comm);
  ck_assert_int_eq(squall__transport_mpi_init(&f->tr, &f->ctx, f->comm), squallSuccess);
  f->k = squall__kernels_host;
  f->e = NULL;
}

/* The engine, over f->tr and f->k as the test left them. */
static inline void ef_engine(engine_fixture *f) { ck_assert_ptr_nonnull(f->e = squall__engine_create(&f->tr, &f->k)); }

static inline void ef_close(engine_fixture *f) {
  squall__engine_free(f->e);
  squall__transport_mpi_fini(&f->ctx);
  MPI_Comm_free(&f->comm);
}

/* The process's configuration (its SQUALL_* variables) with spec on top. */
static inline squallConfig_t ef_config(const char *spec) {
  squallConfig_t c;
  squallGetConfig(&c);
  ck_assert_int_eq(squallConfigParse(&c, spec), squallSuccess);
  return c;
}

/* The engine's own configuration from now on: c (collective, as
 * squallCollSetConfig). */
static inline void ef_set(engine_fixture *f, const squallConfig_t *c) {
  ck_assert_int_eq(squall__engine_set_config(f->e, c), squallSuccess);
}

static inline void ef_use(engine_fixture *f, const char *spec) {
  squallConfig_t c = ef_config(spec);
  ef_set(f, &c);
}

/* One float32 call of the engine (coll SQ_COLL_ALLREDUCE, or
 * SQ_COLL_REDUCE_SCATTER with count the whole send buffer), which must
 * succeed: what it decided. */
static inline squall_decision ef_call(engine_fixture *f, int coll, const float *g, float *out, size_t count,
                                      squall_op op) {
  squall_call c = {.send = g, .recv = out, .count = count, .coll = coll, .dtype = SQ_DT_F32, .elsize = 4, .op = op,
                   .premul = 1.0f};
  squall_decision d;
  ck_assert_msg(squall__engine_allreduce(f->e, &c, &d) == squallSuccess, "%s", squallGetLastError());
  return d;
}

#endif

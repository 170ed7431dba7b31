/* SPDX-License-Identifier: BSD-3-Clause */
/* mpi_check.h - running Check suites on every MPI rank. Check's fork mode
 * cannot be used after MPI_Init, so suites run in-process (CK_NOFORK) on all
 * ranks in the same order; rank 0 prints, and the exit status is the
 * failure count summed over ranks. */
#ifndef SQUALL_TESTS_MPI_CHECK_H
#define SQUALL_TESTS_MPI_CHECK_H

#include <check.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "squall.h"

/* ck_assert* records a mark point on every success, a write to Check's
 * file each time in this mode; loops over many elements test with this
 * instead and only report on failure. */
#define MC_CHECK(cond, ...)                 \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

/* A case's configuration: the defaults with what the test runner sets in
 * the environment kept (debug, the cost model: off, so that every eligible
 * call is compressed; the statistics file), SQUALL_MIN_BYTES=0, then spec. */
static inline void mc_use_config(const char *spec) {
  squallConfig_t c, env;
  squallConfigDefault(&c);
  squallGetConfig(&env);
  c.costModel = env.costModel;
  c.debug = env.debug;
  memcpy(c.statsPath, env.statsPath, sizeof c.statsPath);
  ck_assert_int_eq(squallConfigParse(&c, "SQUALL_MIN_BYTES=0"), squallSuccess);
  ck_assert_msg(squallConfigParse(&c, spec) == squallSuccess, "bad spec %s: %s", spec, squallGetLastError());
  ck_assert_int_eq(squallSetConfig(&c), squallSuccess);
}

/* A thread that calls squallSetConfig again and again while the test's
 * calls run, each rank at its own moments: the configuration as
 * mc_flip_start found it, with specs[(i + offset) % nspecs] applied in
 * turn, pause_ns apart. It breaks squallSetConfig's collective rule on
 * purpose; every spec must compress the test's calls (a configuration
 * that passes them through without a header would let ranks meet with
 * different collectives: test_engine_mpi's set_config_collective covers
 * that). */
typedef struct {
  const char *const *specs;
  unsigned nspecs, offset;
  long pause_ns;
  squallConfig_t base;
  int running;
  pthread_t thread;
} mc_flipper;

static void *mc_flip_loop(void *arg) {
  mc_flipper *f = arg;
  for (unsigned i = 0; __atomic_load_n(&f->running, __ATOMIC_RELAXED); i++) {
    squallConfig_t c = f->base;
    squallConfigParse(&c, f->specs[(i + f->offset) % f->nspecs]);
    squallSetConfig(&c);
    struct timespec ts = {f->pause_ns / 1000000000, f->pause_ns % 1000000000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static inline void mc_flip_start(mc_flipper *f) {
  squallGetConfig(&f->base);
  __atomic_store_n(&f->running, 1, __ATOMIC_RELAXED);
  ck_assert_int_eq(pthread_create(&f->thread, NULL, mc_flip_loop, f), 0);
}

static inline void mc_flip_stop(mc_flipper *f) {
  __atomic_store_n(&f->running, 0, __ATOMIC_RELAXED);
  pthread_join(f->thread, NULL);
}

static inline int mpi_check_run(Suite *s) {
  int rank, failed, total;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
  failed = srunner_ntests_failed(sr);
  if (failed && rank != 0) srunner_print(sr, CK_NORMAL); /* a rank's own failures */
  srunner_free(sr);
  MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

#endif

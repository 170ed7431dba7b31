/* SPDX-License-Identifier: BSD-3-Clause */
/* mpi_check.h - running Check suites on every MPI rank. Check's fork mode
 * cannot be used after MPI_Init, so suites run in-process (CK_NOFORK) on all
 * ranks in the same order; rank 0 prints, and the exit status is 1 on
 * every rank where any rank had a failure, else 0. mc_main is a suite program's whole
 * main(): each program describes its cases and any setup. */
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

/* What a suite's main() is made of, so that each program says only what
 * it runs and what it sets up around it. A case is a TCase:
 * CK_RUN_CASE=<name> runs just that one. */
#define MC_NO_TIMEOUT (-1.0) /* a case's timeout: none */
#define MC_RUN (-1)          /* what a setup returns to run the suite */

/* The tests of a case (Check's TTest pointers), in order. */
#define MC_TESTS(...) ((const TTest *const[]){__VA_ARGS__, NULL})
/* The cases of a suite, in order. */
#define MC_CASES(...) ((const mc_case[]){__VA_ARGS__, {NULL, 0, NULL}})

typedef struct {
  const char *name;
  double timeout;            /* tcase_set_timeout's seconds; 0: Check's default; MC_NO_TIMEOUT */
  const TTest *const *tests; /* MC_TESTS(...) */
} mc_case;

/* A suite program. mc_main: MPI_Init (MPI_Init_thread asking
 * MPI_THREAD_MULTIPLE where thread_multiple is set: the setup can
 * MPI_Query_thread what MPI gave); *rank and *nranks set; MPI_ERRORS_RETURN
 * on MPI_COMM_WORLD where errors_return is set (the suite's error cases
 * return; communicators that the setup splits from it inherit it); the
 * setup, where set, which returns MC_RUN or an exit status that mc_main
 * returns at once, without MPI_Finalize; the cases; the teardown, where
 * set; MPI_Finalize. */
typedef struct {
  const char *name; /* the Suite's */
  int *rank, *nranks;
  int thread_multiple, errors_return;
  int (*setup)(void);
  void (*teardown)(void);
  const mc_case *cases; /* MC_CASES(...) */
} mc_suite;

static inline Suite *mc_build(const mc_suite *m) {
  Suite *s = suite_create(m->name);
  for (const mc_case *c = m->cases; c->name; c++) {
    TCase *tc = tcase_create(c->name);
    if (c->timeout != 0) tcase_set_timeout(tc, c->timeout < 0 ? 0 : c->timeout);
    for (const TTest *const *t = c->tests; *t; t++) tcase_add_test(tc, *t);
    suite_add_tcase(s, tc);
  }
  return s;
}

/* A suite's whole main(): 0 where no test failed on any rank, else 1. */
static inline int mc_main(int argc, char **argv, const mc_suite *m) {
  if (m->thread_multiple) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, m->rank);
  MPI_Comm_size(MPI_COMM_WORLD, m->nranks);
  if (m->errors_return) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rc = m->setup ? m->setup() : MC_RUN;
  if (rc != MC_RUN) return rc;
  int failed = mpi_check_run(mc_build(m));
  if (m->teardown) m->teardown();
  MPI_Finalize();
  return failed ? 1 : 0;
}

/* squall's node layout as SQUALL_RANKS_PER_NODE gives it (2 unless set:
 * runs.list sets it) into *rpn; whether nranks ranks make two levels
 * (whole nodes of two or more ranks, two or more nodes). */
static inline int mc_two_level(int nranks, int *rpn) {
  squallConfig_t env;
  squallGetConfig(&env);
  *rpn = env.ranksPerNode > 0 ? env.ranksPerNode : 2;
  return nranks % *rpn == 0 && nranks / *rpn >= 2 && *rpn >= 2;
}

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/* mpi_check.h - running Check suites on every MPI rank. Check's fork mode
 * cannot be used after MPI_Init, so suites run in-process (CK_NOFORK) on all
 * ranks in the same order; rank 0 prints, and the exit status is the
 * failure count summed over ranks. */
#ifndef SQUALL_TESTS_MPI_CHECK_H
#define SQUALL_TESTS_MPI_CHECK_H

#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "squall.h"

/* ck_assert* records a mark point on every success, a write to Check's
 * file each time in this mode; loops over many elements test with this
 * instead and only report on failure. */
#define MC_CHECK(cond, ...)                                                   \
  do {                                                                        \
    if (!(cond)) ck_abort_msg(__VA_ARGS__);                                   \
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

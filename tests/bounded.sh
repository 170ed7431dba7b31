#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# bounded.sh COMMAND [ARGS...]: the test driver's log compiler; runs one test
# with a time limit so that nothing in make check can hang it forever:
# SQUALL_TEST_LIMIT seconds (default 400, above run-mpi.sh's 300 s for one
# MPI job), then SIGTERM to the test and everything it started (timeout
# gives them a process group of their own), SIGKILL 10 s later.
limit=${SQUALL_TEST_LIMIT:-400}
# Tests that configure and build squall again (SQUALL_TEST_BUILDS, from
# Makefile.am) get SQUALL_TEST_BUILD_LIMIT seconds (default 1200): a build
# beside the rest of make check -j takes minutes.
for last in "$@"; do :; done
for t in ${SQUALL_TEST_BUILDS:-}; do
  case $last in "$t" | */"$t") limit=${SQUALL_TEST_BUILD_LIMIT:-1200} ;; esac
done
# A build configured --without-mpi skips the tests that need MPI
# (SQUALL_TEST_NEED_MPI, from Makefile.am), by the test's path.
if test "${SQUALL_TEST_HAVE_MPI:-yes}" = no; then
  for t in ${SQUALL_TEST_NEED_MPI:-}; do
    case $last in
      "$t" | */"$t")
        echo "SKIP: $t needs MPI, and this build was configured --without-mpi"
        exit 77 ;;
    esac
  done
fi
timeout -k 10 "$limit" "$@"
rc=$?
if test $rc -eq 124 || test $rc -eq 137; then
  echo "FAIL: bounded.sh: '$*' did not finish within $limit s (SQUALL_TEST_LIMIT); stopped"
  exit 124
fi
exit $rc

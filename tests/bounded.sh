#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# bounded.sh COMMAND [ARGS...]: the test driver's log compiler; runs one test
# with a time limit so that nothing in make check can hang it forever:
# SQUALL_TEST_LIMIT seconds (default 400, above run-mpi.sh's 300 s for one
# MPI job), then SIGTERM to the test and everything it started (timeout
# gives them a process group of their own), SIGKILL 10 s later.
limit=${SQUALL_TEST_LIMIT:-400}
timeout -k 10 "$limit" "$@"
rc=$?
if test $rc -eq 124 || test $rc -eq 137; then
  echo "FAIL: bounded.sh: '$*' did not finish within $limit s (SQUALL_TEST_LIMIT); stopped"
  exit 124
fi
exit $rc

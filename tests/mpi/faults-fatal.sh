#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# On a communicator whose errors are fatal (MPI's default), a corrupt top-k
# payload must end the job, not return: the engine keeps no way back for
# the residual there (transport.h, failures_fatal). The job must stop
# with an error that names the payload; exit 42 means the call returned,
# 124 that it hung.
out=$(SQUALL_TEST_FATAL=1 SQUALL_COMPRESS=topk:0.02 SQUALL_ZSTD=0 SQUALL_MIN_BYTES=0 SQUALL_TEST_TIMEOUT=120 "$SQUALL_BUILDDIR/tests/run-mpi.sh" 2 \
  "$SQUALL_BUILDDIR/tests/mpi/test_faults_mpi" 2>&1)
rc=$?
printf '%s\n' "$out" | tail -n 20
case $rc in
77) exit 77 ;;
0 | 42 | 124) echo "FAIL: exit $rc: a corrupt payload on a fatal communicator did not end the job"; exit 1 ;;
esac
if ! printf '%s\n' "$out" | grep -q "corrupt"; then
  echo "FAIL: the job ended (exit $rc) without naming the corrupt payload"
  exit 1
fi
echo "PASS: the job ended (exit $rc) at the corrupt payload"

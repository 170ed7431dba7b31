#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# squallAllReduce's failure policy on the test-only host NCCL with injected
# faults (FAKENCCL_FAULT), 2 and 3 ranks.
fake="$SQUALL_BUILDDIR/tests/fakenccl/.libs"
test -f "$fake/libnccl.so.2" || { echo "SKIP: host NCCL not built"; exit 77; }
LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
for np in 2 3; do
  "$SQUALL_BUILDDIR/tests/run-mpi.sh" $np -x LD_LIBRARY_PATH "$SQUALL_BUILDDIR/tests/test_nccl_faults" || exit 1
done

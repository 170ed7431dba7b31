#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The two-level all-reduce through squallAllReduce on the test-only host
# NCCL: 4 ranks as 2 nodes x 2, then 3 ranks (2 + 1: uneven, flat).
fake="$SQUALL_BUILDDIR/tests/fakenccl/.libs"
test -f "$fake/libnccl.so.2" || { echo "SKIP: host NCCL not built"; exit 77; }
LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
for np in 4 3; do
  "$SQUALL_BUILDDIR/tests/run-mpi.sh" $np -x LD_LIBRARY_PATH "$SQUALL_BUILDDIR/tests/test_hierarchy_nccl" || exit 1
done

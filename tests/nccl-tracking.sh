#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# What the NCCL interposer records about a communicator, when recording it
# runs out of memory (tests/test_nccl_tracking.c): 2 ranks on the host NCCL.
fake="$SQUALL_BUILDDIR/tests/fakenccl/.libs"
test -f "$fake/libnccl.so.2" || { echo "SKIP: host NCCL not built"; exit 77; }
LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 2 -x LD_LIBRARY_PATH "$SQUALL_BUILDDIR/tests/test_nccl_tracking"

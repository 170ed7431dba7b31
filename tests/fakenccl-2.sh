#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The test-only host-memory NCCL (tests/fakenccl) checked on 2 MPI ranks,
# twice: non-blocking init answering ncclSuccess, then ncclInProgress (the
# two answers real NCCL gives).
# Recipe for every test that runs against it: put its .libs first on
# LD_LIBRARY_PATH. That beats a DT_RUNPATH to /usr/local/cuda/lib64 (what
# -Wl,-rpath gives with this toolchain), not a DT_RPATH; test_fakenccl
# proves which library the process really mapped.
lib="$SQUALL_BUILDDIR/tests/fakenccl/.libs"
if ! test -e "$lib/libnccl.so.2"; then
  echo "SKIP: $lib/libnccl.so.2 was not built (needs nccl.h and shared libraries)" >&2
  exit 77
fi
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
"$SQUALL_BUILDDIR/tests/run-mpi.sh" 2 "$SQUALL_BUILDDIR/tests/test_fakenccl" || exit $?
FAKENCCL_NONBLOCKING_INIT=inprogress exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 2 "$SQUALL_BUILDDIR/tests/test_fakenccl"

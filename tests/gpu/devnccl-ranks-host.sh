#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# devnccl-ranks-host.sh - test_devnccl_ranks --host 2 4: the GPU program's
# own checks (the test NCCL itself, every codec with bit-identical ranks and
# conservation, faults, two-level, the slow link; not graphs) on host
# buffers, then its cost-model case (--cost on 2 ranks, the host engines on
# the device schedule), over the device-memory test NCCL built on host memory
# (tests/gpu/devnccl-host), so that they are known to hold before a GPU
# runs them on device buffers. Runs the program itself, not libtool's
# wrapper (which would put the CUDA build of the library first). Skips (77)
# where the program was not built as a shared-library client.
set -u
b=${SQUALL_BUILDDIR:?}
lib=$b/tests/gpu/devnccl-host/.libs
prog=$b/tests/gpu/.libs/test_devnccl_ranks
if ! test -x "$prog" || ! test -f "$lib/libnccl.so.2"; then
  echo "SKIP: $prog or $lib/libnccl.so.2 was not built (needs CUDA, NCCL and shared libraries)"
  exit 77
fi
LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} FAKENCCL_TIMEOUT=${FAKENCCL_TIMEOUT:-60}
export LD_LIBRARY_PATH FAKENCCL_TIMEOUT
"$prog" --host 2 4
rc=$?
echo "--- the cost model's device schedule over an emulated link (--cost, 2 ranks)"
"$prog" --host --cost 2 || exit $?
exit $rc

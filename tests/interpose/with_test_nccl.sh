# SPDX-License-Identifier: BSD-3-Clause
# with_test_nccl.sh NAME: sourced by the NCCL interposer's tests. Sets b
# (the build folder), lib (the interposer), fake (the host-memory test
# NCCL's folder, put first on LD_LIBRARY_PATH), tmp (a folder removed at
# exit, named after NAME) and failed=0; exits 77 (skipped) where the
# interposer or the test NCCL is not built.
b=$SQUALL_BUILDDIR
lib=$b/.libs/libsquall-preload.so
fake=$b/tests/nccl/fakenccl/.libs
test -f "$lib" || { echo "SKIP: $lib is not built (needs NCCL headers)"; exit 77; }
test -e "$fake/libnccl.so.2" || { echo "SKIP: the test NCCL $fake/libnccl.so.2 is not built"; exit 77; }
LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-$1.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

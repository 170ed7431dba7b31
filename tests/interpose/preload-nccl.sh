#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The NCCL interposer end to end: tests/interpose/test_preload_nccl, an NCCL program
# that knows nothing of squall, on the host-memory NCCL (tests/nccl/fakenccl),
# with no interposer (its own checks must hold), then under
# LD_PRELOAD=libsquall-preload.so with top-k on 2 and 3 ranks and the 16-bit
# codecs through squall-run. Each compressed run's SQUALL_STATS files are
# compared with what the program expected, and the interposer's INFO line
# must name the fake library and the RTLD_NEXT route.
set -u
. "$SQUALL_SRCDIR/tests/interpose/with_test_nccl.sh" preload-nccl
prog=$b/tests/interpose/test_preload_nccl
test -x "$prog" || { echo "SKIP: $prog is not built"; exit 77; }

# run NAME NP MODE [mpirun options, or a squall-run prefix...]
run() {
  name=$1 np=$2 mode=$3
  shift 3
  d=$tmp/$name
  mkdir -p "$d"
  echo "== $name: $np ranks, $mode: $*"
  "$b/tests/run-mpi.sh" "$np" "$@" "$prog" run "$mode" "$d" > "$d/log" 2>&1
  rc=$?
  grep -v ' squall INFO ' "$d/log"
  if test $rc != 0; then
    echo "FAIL: $name exited with $rc"
    failed=1
    return
  fi
  test "$mode" = plain && return
  "$prog" check "$d" "$np" || { echo "FAIL: $name (statistics)"; failed=1; }
  # Which NCCL the interposer forwards to, and how it found it.
  if grep -q "NCCL interposer: real NCCL .* from $fake/libnccl.so.2, found with dlsym(RTLD_NEXT)" "$d/log"; then
    echo "interposer: $(grep -m1 'NCCL interposer' "$d/log" | sed 's/.* squall INFO //')"
  else
    echo "FAIL: $name: no INFO line naming $fake/libnccl.so.2 and dlsym(RTLD_NEXT):"
    grep ' squall ' "$d/log"
    failed=1
  fi
  # Never a silent no-op: the grouped calls passed through, and rank 0 of
  # the communicator said why, once.
  n=$(grep -c "rank 0/$np: a ncclGroupStart/ncclGroupEnd group mixes ncclAllReduce with ncclBroadcast: its all-reduces on this communicator pass through uncompressed" "$d/log")
  if test "$n" != 1; then
    echo "FAIL: $name: the grouped-call warning was said $n times, expected once"
    failed=1
  fi
}

common="-x LD_LIBRARY_PATH -x SQUALL_MIN_BYTES=4K -x SQUALL_DEBUG=INFO"
run plain 2 plain -x LD_LIBRARY_PATH
run topk2 2 topk:0.01 $common -x LD_PRELOAD="$lib" -x SQUALL_COMPRESS=topk:0.01 \
  -x SQUALL_STATS="$tmp/topk2/stats.%r.json"
run topk3 3 topk:0.01 $common -x LD_PRELOAD="$lib" -x SQUALL_COMPRESS=topk:0.01 \
  -x SQUALL_STATS="$tmp/topk3/stats.%r.json"
run fp16 2 fp16 -x LD_LIBRARY_PATH "$b/tools/squall-run" --compress fp16 --min-bytes 4K --debug INFO \
  --stats "$tmp/fp16/stats.%r.json" --
run bf16 3 bf16 -x LD_LIBRARY_PATH "$b/tools/squall-run" --compress bf16 --min-bytes 4K --debug INFO \
  --stats "$tmp/bf16/stats.%r.json" --
test $failed = 0 && echo "PASS: the NCCL interposer on the test NCCL"
exit $failed

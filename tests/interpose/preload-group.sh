#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Grouped all-reduces under the NCCL interposer: tests/interpose/test_preload_group
# on the host-memory NCCL (tests/nccl/fakenccl), top-k, 2 and 3 ranks. A group of
# all-reduces alone is compressed at its ncclGroupEnd (the SQUALL_STATS counts);
# other groups pass through, and each communicator's rank 0 says why, once; a
# grouped call that fails inside squall fails its ncclGroupEnd.
set -u
. "$SQUALL_SRCDIR/tests/interpose/with_test_nccl.sh" preload-group
prog=$b/tests/interpose/test_preload_group
test -x "$prog" || { echo "SKIP: $prog is not built"; exit 77; }
fail() {
  echo "FAIL: $*"
  failed=1
}

# count PATTERN FILE: lines of FILE holding PATTERN
count() { grep -c -- "$1" "$2"; }

for np in 2 3; do
  d=$tmp/run$np
  mkdir -p "$d"
  echo "== run: $np ranks"
  "$b/tests/run-mpi.sh" "$np" -x LD_LIBRARY_PATH -x LD_PRELOAD="$lib" -x SQUALL_COMPRESS=topk:0.01 \
    -x SQUALL_MIN_BYTES=4K -x SQUALL_COST_MODEL=off -x SQUALL_DEBUG=INFO -x SQUALL_STATS="$d/stats.%r.json" \
    "$prog" run > "$d/log" 2>&1 || fail "run on $np ranks exited with $?"
  grep -v ' squall INFO ' "$d/log"
  set -- $(sed -n 's/^expect \([0-9]*\) \([0-9]*\)$/\1 \2/p' "$d/log" | head -n 1)
  test $# = 2 || { fail "no expectations from the program"; continue; }
  for r in $(seq 0 $((np - 1))); do
    json=$(cat "$d/stats.$r.json" 2>/dev/null)
    got_c=$(echo "$json" | sed -n 's/.*"compressed_calls": \([0-9]*\).*/\1/p')
    got_g=$(echo "$json" | sed -n 's/.*"in_group": \([0-9]*\).*/\1/p')
    test "$got_c" = "$1" || fail "rank $r: compressed_calls $got_c, expected $1"
    test "$got_g" = "$2" || fail "rank $r: in_group $got_g, expected $2"
  done
  # once per communicator, each with its group's reason
  for why in "mixes ncclAllReduce with ncclAllGather" "holds all-reduces on several communicators"; do
    n=$(count "rank 0/$np: a ncclGroupStart/ncclGroupEnd group $why: its all-reduces on this communicator pass through uncompressed" "$d/log")
    test "$n" = 1 || fail "$np ranks: the warning '$why' was said $n times, expected once"
  done
  n=$(count "pass through uncompressed (reason in_group)" "$d/log")
  test "$n" = 2 || fail "$np ranks: $n grouped-call warnings, expected 2 (one per communicator)"
  n=$(count "grouped all-reduces (3 in the first group) run through squall one by one" "$d/log")
  test "$n" = "$np" || fail "$np ranks: the INFO line on compressed groups was said $n times, expected $np"

  echo "== fault: $np ranks"
  "$b/tests/run-mpi.sh" "$np" -x LD_LIBRARY_PATH -x LD_PRELOAD="$lib" -x SQUALL_COMPRESS=topk:0.02 \
    -x SQUALL_MIN_BYTES=4K -x SQUALL_COST_MODEL=off "$prog" fault > "$d/fault.log" 2>&1 ||
    fail "fault on $np ranks exited with $?"
  grep -v ' squall INFO ' "$d/fault.log"
done
test $failed = 0 && echo "PASS: grouped all-reduces under the NCCL interposer"
exit $failed

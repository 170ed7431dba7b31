#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The two-level all-reduce through the NCCL interposer (LD_PRELOAD), on 4
# ranks as 2 nodes x 2 (SQUALL_RANKS_PER_NODE=2), fp16 on dyadic data so
# that every result is exact (tests/interpose/test_hierarchy_preload checks them):
#   - the test NCCL with ncclCommSplit: every call runs two-level;
#   - the test NCCL built without it (as NCCL before 2.18): every call runs
#     flat, counted under the reason no_split, with the reason logged once
#     by every rank, and nothing hangs (run-mpi.sh stops a hang).
# The path is read from each rank's SQUALL_STATS file.
set -u
b=$SQUALL_BUILDDIR
lib=$b/.libs/libsquall-preload.so
prog=$b/tests/interpose/test_hierarchy_preload
test -f "$lib" || { echo "SKIP: $lib is not built (needs NCCL headers)"; exit 77; }
test -x "$prog" || { echo "SKIP: $prog is not built"; exit 77; }
for v in fakenccl fakenccl-nosplit; do
  test -e "$b/tests/nccl/$v/.libs/libnccl.so.2" || { echo "SKIP: the test NCCL $v is not built"; exit 77; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-hier-preload.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
np=4 calls=4 failed=0

# json_field FILE KEY: the number after "KEY": (keys are unique in the file)
json_field() { sed -n "s/.*\"$2\": \([0-9]*\).*/\1/p" "$1"; }

# run NAME VARIANT TWO_LEVEL NO_SPLIT: the expected counts per rank
run() {
  name=$1 variant=$2 want_two=$3 want_nosplit=$4
  d=$tmp/$name
  mkdir -p "$d"
  echo "== $name: $np ranks on tests/nccl/$variant"
  LD_LIBRARY_PATH=$b/tests/nccl/$variant/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    "$b/tests/run-mpi.sh" $np -x LD_LIBRARY_PATH -x LD_PRELOAD="$lib" -x SQUALL_COMPRESS=fp16 \
    -x SQUALL_MIN_BYTES=0 -x SQUALL_RANKS_PER_NODE=2 -x SQUALL_DEBUG=INFO \
    -x SQUALL_STATS="$d/stats.%r.json" "$prog" > "$d/log" 2>&1
  rc=$?
  grep -v ' squall INFO ' "$d/log"
  if test $rc != 0; then
    echo "FAIL: $name exited with $rc"
    failed=1
    return
  fi
  # the interposer forwards to this variant, not to another libnccl.so.2
  if ! grep -q "NCCL interposer: real NCCL .* from $b/tests/nccl/$variant/.libs/libnccl.so.2" "$d/log"; then
    echo "FAIL: $name: the interposer did not name $b/tests/nccl/$variant/.libs/libnccl.so.2:"
    grep 'NCCL interposer' "$d/log"
    failed=1
  fi
  r=0
  while test $r -lt $np; do
    f=$d/stats.$r.json
    if ! test -s "$f"; then
      echo "FAIL: $name: rank $r wrote no statistics ($f)"
      failed=1
    else
      got="$(json_field "$f" compressed_calls) $(json_field "$f" two_level_calls) $(json_field "$f" flat_calls) $(json_field "$f" no_split)"
      want="$calls $want_two $((calls - want_two)) $want_nosplit"
      if test "$got" = "$want"; then
        echo "rank $r: compressed, two-level, flat, no_split: $got"
      else
        echo "FAIL: $name: rank $r: compressed, two-level, flat, no_split: $got, expected $want"
        cat "$f"
        failed=1
      fi
    fi
    r=$((r + 1))
  done
  warned=$(grep -c 'cannot make node communicators (no ncclCommSplit' "$d/log")
  if test "$want_nosplit" != 0 && test "$warned" != $np; then
    echo "FAIL: $name: $warned ranks logged that ncclCommSplit is missing, expected $np"
    failed=1
  elif test "$want_nosplit" = 0 && test "$warned" != 0; then
    echo "FAIL: $name: ncclCommSplit reported missing"
    failed=1
  fi
}

run split fakenccl $calls 0
run nosplit fakenccl-nosplit 0 $calls
test $failed = 0 && echo "PASS: the NCCL interposer with and without ncclCommSplit"
exit $failed

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# MPI_Reduce_scatter_block and MPI_Reduce_scatter under the MPI interposer
# (LD_PRELOAD=libsquall-preload-mpi.so) with SQUALL_COMPRESS=int8, on 2 and
# 4 ranks: tests/interpose/test_preload_mpi_rs, a program that knows
# nothing of squall, checks the shards (bit for bit against PMPI where
# they pass through); this script the SQUALL_STATS files. By default
# (SQUALL_COLLECTIVES=allreduce) the four equal-count calls of each step
# reach MPI unchanged as collective_off; with reducescatter in the set
# squall compresses them. The uneven MPI_Reduce_scatter passes through
# either way as uneven_counts, and each rank says so once at INFO.
set -u
b=$SQUALL_BUILDDIR
lib=$b/.libs/libsquall-preload-mpi.so
prog=$b/tests/interpose/test_preload_mpi_rs
test -f "$lib" || { echo "SKIP: $lib is not built"; exit 77; }
test -x "$prog" || { echo "SKIP: $prog is not built"; exit 77; }
# Under tools/sanitize.sh the program and the interposer are built with
# ASan, whose runtime must come first in the initial library list: preload
# it ahead of the interposer (the program links it anyway).
asan=$(ldd "$prog" 2>/dev/null | sed -n 's/^[[:space:]]*libasan[^ ]* => \([^ ]*\).*/\1/p' | head -n 1)
test -n "$asan" && lib=$asan:$lib
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-mpi-rs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
steps=5 # the program's STEPS
info='MPI_Reduce_scatter with unequal recvcounts'

# stat FILE KEY: the number after "KEY": in a one-line JSON file
stat() { sed -n "s/.*\"$2\": \([0-9]*\).*/\1/p" "$1"; }

# run NAME NP MODE COMPRESSED COLLECTIVE_OFF [SQUALL_COLLECTIVES]
run() {
  name=$1 np=$2 mode=$3 want_comp=$4 want_off=$5 colls=${6:-}
  d=$tmp/$name
  mkdir -p "$d"
  set -- -x LD_PRELOAD="$lib" -x SQUALL_COMPRESS=int8 -x SQUALL_MIN_BYTES=4K -x SQUALL_COST_MODEL=off \
    -x SQUALL_DEBUG=INFO -x SQUALL_STATS="$d/stats.%r.json"
  test -n "$colls" && set -- "$@" -x SQUALL_COLLECTIVES="$colls"
  echo "== $name: $np ranks, SQUALL_COLLECTIVES=${colls:-(default)}"
  "$b/tests/run-mpi.sh" "$np" "$@" "$prog" "$mode" > "$d/log" 2>&1
  rc=$?
  grep -v 'squall INFO' "$d/log"
  if test $rc != 0; then
    cat "$d/log"
    echo "FAIL: $name exited with $rc"
    failed=1
    return
  fi
  r=0
  while test $r -lt "$np"; do
    f=$d/stats.$r.json
    comp=$(stat "$f" compressed_calls) off=$(stat "$f" collective_off) unev=$(stat "$f" uneven_counts)
    if test "$comp" != "$want_comp" || test "$off" != "$want_off" || test "$unev" != "$steps"; then
      echo "FAIL: $name rank $r: compressed $comp (expected $want_comp), collective_off $off" \
        "(expected $want_off), uneven_counts $unev (expected $steps): $(cat "$f" 2>&1)"
      failed=1
    fi
    r=$((r + 1))
  done
  # never silent, never noisy: each rank's INFO line about the uneven
  # counts, once for its communicator although every step made the call
# (rank 0's exit summary names the reason too, with its fix: not counted)
  n=$(grep -c "squall INFO .*$info" "$d/log")
  if test "$n" != "$np"; then
    echo "FAIL: $name: $n lines '$info' (expected $np, one per rank):"
    grep "squall INFO .*$info" "$d/log"
    failed=1
  fi
}

eq=$((4 * steps)) # the equal-count calls
run default-2 2 plain 0 $eq
# rank 0's exit summary names both reasons, each with its fix
for why in "collective_off (an interposed collective" "uneven_counts (MPI_Reduce_scatter with unequal recvcounts"; do
  grep -q "squall WARN .*$why" "$tmp/default-2/log" || { echo "FAIL: default-2: no exit summary naming $why"; failed=1; }
done
run opted-in-2 2 int8 $eq 0 allreduce,reducescatter
run default-4 4 plain 0 $eq
run opted-in-4 4 int8 $eq 0 allreduce,reducescatter
test $failed = 0 && echo "PASS: MPI_Reduce_scatter_block and MPI_Reduce_scatter under the MPI interposer"
exit $failed

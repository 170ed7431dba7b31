#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ncclReduceScatter under the NCCL interposer (LD_PRELOAD) on the test NCCL:
# tests/interpose/test_preload_reducescatter, a program that knows nothing
# of squall, with SQUALL_COMPRESS=int8. By default (SQUALL_COLLECTIVES=
# allreduce) its reduce-scatters reach NCCL unchanged, counted as
# collective_off, and rank 0's exit summary names the reason; with
# reducescatter (or all) in the set squall compresses them. Either way
# the grouped reduce-scatter passes through (in_group) and the all-reduce
# is compressed. The MPI interposer's MPI_Allreduce follows the same switch.
# The program checks the results; this script the SQUALL_STATS files.
set -u
. "$SQUALL_SRCDIR/tests/interpose/with_test_nccl.sh" preload-reducescatter
prog=$b/tests/interpose/test_preload_reducescatter
test -x "$prog" || { echo "SKIP: $prog is not built"; exit 77; }

# stat FILE KEY: the number after "KEY": in a one-line JSON file
stat() { sed -n "s/.*\"$2\": \([0-9]*\).*/\1/p" "$1"; }

# run NAME NP MODE COMPRESSED COLLECTIVE_OFF [SQUALL_COLLECTIVES]
run() {
  name=$1 np=$2 mode=$3 want_comp=$4 want_off=$5 colls=${6:-}
  d=$tmp/$name
  mkdir -p "$d"
  set -- -x LD_LIBRARY_PATH -x LD_PRELOAD="$lib" -x SQUALL_COMPRESS=int8 -x SQUALL_MIN_BYTES=4K \
    -x SQUALL_COST_MODEL=off -x SQUALL_STATS="$d/stats.%r.json"
  test -n "$colls" && set -- "$@" -x SQUALL_COLLECTIVES="$colls"
  echo "== $name: $np ranks, SQUALL_COLLECTIVES=${colls:-(default)}"
  "$b/tests/run-mpi.sh" "$np" "$@" "$prog" "$mode" > "$d/log" 2>&1
  rc=$?
  cat "$d/log"
  if test $rc != 0; then
    echo "FAIL: $name exited with $rc"
    failed=1
    return
  fi
  r=0
  while test $r -lt "$np"; do
    f=$d/stats.$r.json
    comp=$(stat "$f" compressed_calls) off=$(stat "$f" collective_off) grp=$(stat "$f" in_group)
    if test "$comp" != "$want_comp" || test "$off" != "$want_off" || test "$grp" != 1; then
      echo "FAIL: $name rank $r: compressed $comp (expected $want_comp), collective_off $off" \
        "(expected $want_off), in_group $grp (expected 1): $(cat "$f")"
      failed=1
    fi
    r=$((r + 1))
  done
}

# default: 5 reduce-scatters left to NCCL (collective_off), the all-reduce compressed
run default 2 plain 1 5
# never silent: the exit summary names the reason and the switch
if ! grep -q "collective_off (an interposed collective that SQUALL_COLLECTIVES leaves out" "$tmp/default/log"; then
  echo "FAIL: default: rank 0's exit summary does not name collective_off"
  failed=1
fi
run opted-in 2 int8 6 0 allreduce,reducescatter
run all 3 int8 6 0 all
# only reduce-scatters: the all-reduce is left to NCCL
run rs-only 3 int8 5 1 reducescatter

# The MPI interposer's MPI_Allreduce follows the same switch: left to MPI
# where the set holds no allreduce, compressed by default.
mpilib=$b/.libs/libsquall-preload-mpi.so
for c in default:5:0 reducescatter:0:5; do
  colls=${c%%:*} want=${c#*:}
  d=$tmp/mpi-$colls
  mkdir -p "$d"
  set -- -x LD_LIBRARY_PATH -x LD_PRELOAD="$mpilib" -x SQUALL_COMPRESS=int8 -x SQUALL_MIN_BYTES=4K \
    -x SQUALL_COST_MODEL=off -x SQUALL_STATS="$d/stats.%r.json"
  test "$colls" = default || set -- "$@" -x SQUALL_COLLECTIVES="$colls"
  echo "== MPI_Allreduce: 2 ranks, SQUALL_COLLECTIVES=$colls"
  if ! "$b/tests/run-mpi.sh" 2 "$@" "$prog" mpi > "$d/log" 2>&1; then
    cat "$d/log"
    echo "FAIL: the MPI interposer's run with SQUALL_COLLECTIVES=$colls"
    failed=1
    continue
  fi
  cat "$d/log"
  for r in 0 1; do
    f=$d/stats.$r.json
    got="$(stat "$f" compressed_calls):$(stat "$f" collective_off)"
    test "$got" = "$want" || { echo "FAIL: MPI $colls rank $r: compressed:collective_off $got, expected $want: $(cat "$f")"; failed=1; }
  done
done
test $failed = 0 && echo "PASS: ncclReduceScatter under the NCCL interposer, MPI_Allreduce under the MPI one"
exit $failed

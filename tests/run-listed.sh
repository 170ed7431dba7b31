#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# run-listed.sh - the multi-rank runs of a layer's table (tests/mpi/runs.list,
# tests/nccl/runs.list): one row per run, NAME PROGRAM [ENVIRONMENT...].
#   run-listed.sh --row LIST FOLDER/NAME.mpi
#       prints LIST's row NAME, which make writes to FOLDER/NAME.mpi (the
#       test's file); fails where LIST has no such row
#   run-listed.sh FOLDER/NAME.mpi
#       runs the row written there: the test driver's log compiler for .mpi
#       tests, under tests/bounded.sh like every test. NAME ends in -N: the
#       job runs on N ranks through tests/run-mpi.sh (its time limit, exit
#       77 without mpiexec). Each VAR=VALUE is set for the job and passed
#       to its ranks with -x VAR. The word fakenccl puts the test NCCL
#       (tests/nccl/fakenccl/.libs) first on LD_LIBRARY_PATH, passed with
#       -x too, and skips (77) where it was not built: a first
#       LD_LIBRARY_PATH entry beats a DT_RUNPATH to the real NCCL (what
#       -Wl,-rpath gives with this toolchain), not a DT_RPATH;
#       tests/nccl/test_fakenccl checks which library the process mapped.
#       The word devnccl-host does the same with the device-memory test
#       NCCL built on host memory (tests/gpu/devnccl-host/.libs).
# Exit status: the job's; 99 for a malformed row.
set -u
if test "${1:-}" = --row; then
  list=$2 name=${3##*/}
  name=${name%.mpi}
  case $name in '' | *[!a-z0-9-]* | *[!0-9] | *-) echo "run-listed.sh: '$3' is not FOLDER/NAME-RANKS.mpi (NAME of a-z, 0-9 and -)" >&2; exit 1 ;; esac
  row=$(sed -n "s/^\($name\)[[:space:]]/\1 /p" "$list") || exit 99
  if test -z "$row"; then
    echo "run-listed.sh: $list has no row $name (for $3)" >&2
    exit 1
  fi
  printf '%s\n' "$row"
  exit 0
fi
: "${SQUALL_BUILDDIR:?}"
row=$(sed -n '1p' "$1")
bad() { echo "ERROR: run-listed.sh: $1: row '$row'" >&2; exit 99; }
set -f
# shellcheck disable=SC2086
set -- $row
set +f
test $# -ge 2 || bad "no program"
name=$1 prog=$2
shift 2
ranks=${name##*-}
case $ranks in '' | *[!0-9]*) bad "the name does not end in -RANKS" ;; esac
x=
for w in "$@"; do
  case $w in
  fakenccl | devnccl-host)
    lib=$SQUALL_BUILDDIR/tests/nccl/fakenccl/.libs
    test "$w" = fakenccl || lib=$SQUALL_BUILDDIR/tests/gpu/devnccl-host/.libs
    test -f "$lib/libnccl.so.2" || { echo "SKIP: $lib/libnccl.so.2 was not built (needs nccl.h and shared libraries)"; exit 77; }
    LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
    x="$x -x LD_LIBRARY_PATH"
    ;;
  [A-Za-z_]*=*)
    # shellcheck disable=SC2163 # w is VAR=VALUE
    export "$w" || bad "cannot set $w"
    x="$x -x ${w%%=*}"
    ;;
  *) bad "'$w' is neither VAR=VALUE, fakenccl nor devnccl-host" ;;
  esac
done
echo "run-listed.sh: $name: tests/run-mpi.sh $ranks$x $prog"
# shellcheck disable=SC2086
exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" "$ranks" $x "$SQUALL_BUILDDIR/$prog"

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# An independent, real MPI client under the MPI interposer: Debian's mpi4py
# (python3-mpi4py, python3-numpy) calling comm.Allreduce, started with
# mpirun -x LD_PRELOAD=libsquall-preload-mpi.so, and once through squall-run.
# tests/interpose/preload_mpi4py.py checks the results; its "check" step compares the
# SQUALL_STATS files with the calls the script made.
set -u
b=$SQUALL_BUILDDIR
s=$SQUALL_SRCDIR
lib=$b/.libs/libsquall-preload-mpi.so
test -f "$lib" || { echo "SKIP: $lib is not built"; exit 77; }

# configure's python3 may be another interpreter (pyenv, venv) than the one
# Debian's packages install into.
py=
for c in ${PYTHON3:-} /usr/bin/python3 python3; do
  if "$c" -c 'import mpi4py, numpy' >/dev/null 2>&1; then py=$c; break; fi
done
if test -z "$py"; then
  echo "SKIP: no python3 can import mpi4py and numpy (Debian: apt-get install python3-mpi4py python3-numpy)"
  exit 77
fi
echo "python: $py (mpi4py $("$py" -c 'import mpi4py; print(mpi4py.__version__)'))"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-mpi4py.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

# run NAME NP MODE [mpirun options, or a squall-run prefix...]: runs the
# client in $tmp/NAME; checks MODE's results, then the statistics unless
# MODE is plain.
run() {
  name=$1 np=$2 mode=$3
  shift 3
  mkdir -p "$tmp/$name"
  echo "== $name: $np ranks, $mode: $*"
  if ! "$b/tests/run-mpi.sh" "$np" "$@" "$py" "$s/tests/interpose/preload_mpi4py.py" run "$mode" "$tmp/$name"; then
    echo "FAIL: $name"
    failed=1
    return
  fi
  if test "$mode" != plain && ! "$py" "$s/tests/interpose/preload_mpi4py.py" check "$tmp/$name" "$np"; then
    echo "FAIL: $name (statistics)"
    failed=1
  fi
}

# The script itself, without squall: everything exact.
run plain 2 plain
# Top-k at 1%, with the zstd stage (the default) and without, on 2 and 3 ranks.
run topk2 2 topk:0.01 -x LD_PRELOAD="$lib" -x SQUALL_COMPRESS=topk:0.01 -x SQUALL_MIN_BYTES=4K \
  -x SQUALL_STATS="$tmp/topk2/stats.%r.json"
run topk3 3 topk:0.01 -x LD_PRELOAD="$lib" -x SQUALL_COMPRESS=topk:0.01 -x SQUALL_MIN_BYTES=4K \
  -x SQUALL_ZSTD=0 -x SQUALL_STATS="$tmp/topk3/stats.%r.json"
# FP16 through the launcher, inside the mpirun command line.
run fp16 2 fp16 "$b/tools/squall-run" --mpi --compress fp16 --min-bytes 4K \
  --stats "$tmp/fp16/stats.%r.json" --
test $failed = 0 && echo "PASS: mpi4py under the MPI interposer"
exit $failed

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Two builds of libsquall.so, before and after one change, alternating run
# by run, N runs each, of one squall-bench command (4 ranks on this
# machine: shared memory). Leaves AFTER.so in place.
#   ab.sh BEFORE.so AFTER.so OUTDIR N SQUALL-BENCH-ARGS...
set -eu
before=$(realpath "${1:?usage: ab.sh BEFORE.so AFTER.so OUTDIR N ARGS...}") after=$(realpath "${2:?}")
out=$(realpath -m "${3:?}") n=${4:?}
shift 4
here=$(cd "$(dirname "$0")" && pwd)
lib="$here/../../../../build/.libs/libsquall.so.5.0.0"
cd "$here/../../../../build"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
{ date -u; uptime; git -C .. log --oneline -1; lscpu | grep -E "Model name|^CPU\(s\)"; echo "args: $*"; } >"$out/machine.txt"
for i in $(seq "$n"); do
  for v in before after; do
    if [ $v = before ]; then cp "$before" "$lib"; else cp "$after" "$lib"; fi
    mpirun -n 4 ./squall-bench --coll reducescatter "$@" --no-progress -J "$out/$v-$i.json" >/dev/null 2>&1
  done
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
cp "$after" "$lib"

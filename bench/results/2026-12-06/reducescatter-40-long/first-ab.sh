#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A class's first calls only (measure.sh's `first` set, 64 KiB), before and
# after one library change, alternating run by run, N runs each: finer
# interleaving and more runs than ab.sh, for a set whose single runs
# spread by 20 points. Leaves AFTER.so in place.
set -eu
before=$(realpath "${1:?usage: first-ab.sh BEFORE.so AFTER.so OUTDIR [N]}") after=$(realpath "${2:?}")
out=$(realpath -m "${3:?}") n=${4:-40}
here=$(cd "$(dirname "$0")" && pwd)
lib="$here/../../../../build/.libs/libsquall.so.5.0.0"
cd "$here/../../../../build"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
{ date -u; uptime; git -C .. log --oneline -1; lscpu | grep -E "Model name|^CPU\(s\)"; } >"$out/machine.txt"
for i in $(seq "$n"); do
  for v in before after; do
    if [ $v = before ]; then cp "$before" "$lib"; else cp "$after" "$lib"; fi
    mpirun -n 4 ./squall-bench --coll reducescatter -b 64K -e 64K -n 20 -w 100 --alternate 4 \
      -C none,fp16,int8,topk:0.01 -S "COST_MODEL=on" --no-progress -J "$out/$v-$i.json" >/dev/null 2>&1
  done
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
cp "$after" "$lib"

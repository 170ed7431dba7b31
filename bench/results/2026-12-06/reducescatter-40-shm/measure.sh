#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Issue 40's shared-memory target: reduce-scatters the cost model declines,
# against plain, 4 ranks on one machine. The first set repeats
# ../reducescatter-40/measure.sh's shared-memory command (100 warm-up calls,
# 4 alternating blocks of 20); the second lets a class reach the cost
# model's steady rhythm first (500 warm-up calls, 8 blocks of 40).
set -u
out=$(realpath -m "${1:?usage: measure.sh OUTDIR}")
cd "$(dirname "$0")/../../../../build" || exit 2 # the checkout's build folder
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
{ date -u; uptime; git -C .. log --oneline -1; lscpu | grep -E "Model name|^CPU\(s\)"; } >"$out/machine.txt"
for i in 1 2 3; do
  echo "== short run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
  mpirun -n 4 ./squall-bench --coll reducescatter -b 64K -e 16M -n 20 -w 100 --alternate 4 -C none,fp16,int8,topk:0.01 \
    -S "COST_MODEL=on" --no-progress -J "$out/rs-shm-$i.json" >"$out/rs-shm-$i.txt" 2>&1
done
for i in 1 2 3; do
  echo "== steady run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
  mpirun -n 4 ./squall-bench --coll reducescatter -b 64K -e 1M -n 40 -w 500 --alternate 8 \
    -C none,fp16,bf16,int8,int4,fp8,topk:0.01 -S "COST_MODEL=on" --no-progress -J "$out/rs-steady-$i.json" \
    >"$out/rs-steady-$i.txt" 2>&1
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Issue 40's shared-memory target ("never more than 5% slower than plain")
# with less noise than ../reducescatter-40-shm/measure.sh: 4 ranks on one
# machine, the reduce-scatters the cost model declines (64-256 KiB) against
# plain MPI_Reduce_scatter_block blocks interleaved with them.
#   first: a size class's first calls, that script's short set (100 warm-up
#          calls, 4 alternating blocks of 20), in 7 fresh runs, not 3;
#   long:  after 500 warm-up calls, 100 alternating blocks of 20 (2000
#          calls through squall a row, with the explorations and rechecks
#          they hold), in 5 runs; the JSON's block means count those.
set -u
out=$(realpath -m "${1:?usage: measure.sh OUTDIR}")
cd "$(dirname "$0")/../../../../build" || exit 2 # the checkout's build folder
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
{ date -u; uptime; git -C .. log --oneline -1; lscpu | grep -E "Model name|^CPU\(s\)"; } >"$out/machine.txt"
for i in 1 2 3 4 5 6 7; do
  echo "== first run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
  mpirun -n 4 ./squall-bench --coll reducescatter -b 64K -e 256K -n 20 -w 100 --alternate 4 \
    -C none,fp16,int8,topk:0.01 -S "COST_MODEL=on" --no-progress -J "$out/first-$i.json" >"$out/first-$i.txt" 2>&1
done
for i in 1 2 3 4 5; do
  echo "== long run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
  mpirun -n 4 ./squall-bench --coll reducescatter -b 64K -e 256K -n 20 -w 500 --alternate 100 \
    -C none,fp16,bf16,int8,int4,fp8,topk:0.01 -S "COST_MODEL=on" --no-progress -J "$out/long-$i.json" \
    >"$out/long-$i.txt" 2>&1
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

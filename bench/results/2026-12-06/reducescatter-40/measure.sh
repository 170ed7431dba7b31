#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Issue 40's figures: reduce-scatter, 4 ranks, 64 MiB fp32 per rank.
set -u
out=$(realpath -m "${1:?usage: measure.sh OUTDIR}")
cd "$(dirname "$0")/../../../../build" || exit 2  # the checkout's build folder
mkdir -p $out
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
{ date -u; uptime; git -C .. log --oneline -1; lscpu | grep -E "Model name|^CPU\(s\)"; } > $out/machine.txt
for i in 1 2 3; do
  echo "== 1gbit run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/machine.txt
  ../tools/ethernet.sh --rate 1gbit -- mpirun -n 4 ./squall-bench --coll reducescatter -b 64M -e 64M -n 3 -w 1 \
    -C none,fp16,int8,int4,fp8,topk:0.01 --no-progress -J $out/rs-1gbit-$i.json > $out/rs-1gbit-$i.txt 2>&1
done
for i in 1 2 3; do
  for h in flat auto; do
    echo "== cluster $h run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/machine.txt
    ../tools/cluster.sh --nodes 2 --ranks-per-node 2 --rate 250mbit -- ./squall-bench --coll reducescatter -b 64M -e 64M -n 3 -w 1 \
      -C none,fp16,int8,int4,fp8,topk:0.01 --no-progress -S "HIERARCHY=$h" -J $out/rs-cluster-$h-$i.json > $out/rs-cluster-$h-$i.txt 2>&1
  done
done
for i in 1 2 3; do
  echo "== shm run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/machine.txt
  mpirun -n 4 ./squall-bench --coll reducescatter -b 64K -e 16M -n 20 -w 100 --alternate 4 -C none,fp16,int8,topk:0.01 \
    -S "COST_MODEL=on" --no-progress -J $out/rs-shm-$i.json > $out/rs-shm-$i.txt 2>&1
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/machine.txt

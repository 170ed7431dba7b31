#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Issue 40's shared-memory target at squall-bench's own lengths (5 warm-up
# calls, 20 timed, per size and codec): reduce-scatters on 4 ranks on one
# machine, each codec's speedup against plain MPI_Reduce_scatter_block
# (the none row), with the cost model on as the library ships it, and
# the same for all-reduce. Three runs of each.
set -u
out=$(realpath -m "${1:?usage: measure.sh OUTDIR}")
cd "$(dirname "$0")/../../../../build" || exit 2 # the checkout's build folder
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
{ date -u; uptime; git -C .. log --oneline -1; lscpu | grep -E "Model name|^CPU\(s\)"; } >"$out/machine.txt"
for coll in reducescatter allreduce; do
  for i in 1 2 3; do
    echo "== $coll run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
    mpirun -n 4 ./squall-bench --coll $coll -b 64K -e 1M -C none,fp16,bf16,int8,int4,fp8,topk:0.01 \
      --no-progress -J "$out/$coll-$i.json" >"$out/$coll-$i.txt" 2>&1
  done
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

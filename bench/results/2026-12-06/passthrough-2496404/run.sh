#!/bin/sh
# issue 43 measurements: alternating blocks, squall vs PMPI_Allreduce
out=${1:?usage: run.sh OUTDIR (run in build/)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
for run in 1 2 3; do
  for np in 2 4; do
    uptime > $out/small-np$np-run$run.txt
    mpirun -n $np --oversubscribe ./squall-bench -b 4 -e 64K -f 4 -w 200 -n 2000 --alternate 8 -C none,fp16 \
      -S MIN_BYTES=1M --no-progress -J $out/small-np$np-run$run.json >> $out/small-np$np-run$run.txt 2>&1
  done
  uptime > $out/small-np16-run$run.txt
  mpirun -n 16 --oversubscribe ./squall-bench -b 4 -e 64K -f 16 -w 100 -n 300 --alternate 8 -C none,fp16 \
    -S MIN_BYTES=1M --no-progress -J $out/small-np16-run$run.json >> $out/small-np16-run$run.txt 2>&1
  uptime > $out/declined-run$run.txt
  mpirun -n 4 --oversubscribe ./squall-bench -b 1M -e 16M -f 4 -w 200 -n 40 --alternate 8 \
    -C none,fp16,bf16,int8,int4,fp8,topk:0.01 --no-progress -J $out/declined-run$run.json >> $out/declined-run$run.txt 2>&1
done
echo ALL-DONE > $out/done

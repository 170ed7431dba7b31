#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# torch-study.sh [--seeds N] [--epochs E] [--ranks R] [--out DIR]: the accuracy
# study of issue 39 on real data with real PyTorch. A small CNN learns
# Fashion-MNIST under DDP on R CPU processes (gloo), its gradients through
# squall's comm hook with each codec (dense: DDP's own all-reduce), each
# with N seeds; prints the test accuracy and loss per codec (mean, min, max)
# and draws the training loss (gnuplot, where installed). Run from the
# source tree after a build (./build), as:
#   train/torch-study.sh --seeds 3 --epochs 1
# Needs Debian's python3-torch and dataset-fashion-mnist.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
seeds=3 epochs=1 ranks=4 out=
while [ $# -gt 0 ]; do
  case $1 in
  --seeds) seeds=$2; shift 2 ;;
  --epochs) epochs=$2; shift 2 ;;
  --ranks) ranks=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  *) echo "torch-study.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
out=${out:-torch-study-$(date +%Y%m%d-%H%M)}
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "torch-study.sh: no PyTorch for $py (apt-get install python3-torch)" >&2; exit 77; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  { echo "torch-study.sh: no Fashion-MNIST (apt-get install dataset-fashion-mnist)" >&2; exit 77; }
export PYTHONPATH="$top/python" SQUALL_LIBRARY="${SQUALL_LIBRARY:-$top/build/.libs/libsquall.so}"
mkdir -p "$out"
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/machine.txt"
for run in "dense 1" "fp16 1" "int8 1" "int4 1" "topk:0.01 1" "topk:0.01 0" "topk:0.001 1"; do
  set -- $run
  for s in $(seq "$seeds"); do
    json="$out/$(echo "$1" | tr : -)-ef$2-seed$s.json"
    [ -f "$json" ] && continue # done by an earlier, interrupted study in the same folder
    for try in 1 2; do
      $py "$top/tests/torch/launch.py" "$ranks" "$top/train/torch_fashion.py" --codec "$1" --ef "$2" --seed "$s" \
        --epochs "$epochs" --out "$json" && break
      echo "torch-study.sh: $1 ef=$2 seed=$s failed (try $try)" | tee -a "$out/failures.txt"
      [ "$try" = 2 ] && exit 1
    done
  done
done
$py - "$out" <<'PY'
import glob, json, os, subprocess, sys
out = sys.argv[1]
runs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, "*.json")))]
keys = []
for r in runs:
    k = (r["codec"], r["ef"])
    if k not in keys:
        keys.append(k)
dense = [r["test_accuracy"] for r in runs if r["codec"] == "dense"]
base = sum(dense) / len(dense) if dense else None
lines = ["| codec | error feedback | test accuracy, mean (min, max) | vs dense | test loss | seeds | s per run |",
         "|---|---|---|---|---|---|---|"]
for k in keys:
    rs = [r for r in runs if (r["codec"], r["ef"]) == k]
    acc = [r["test_accuracy"] * 100 for r in rs]
    m = sum(acc) / len(acc)
    loss = sum(r["test_loss"] for r in rs) / len(rs)
    secs = sorted(r["train_seconds"] for r in rs)[len(rs) // 2]
    vs = "%+.2f" % (m - base * 100) if base is not None else "-"
    lines.append("| %s | %s | %.2f%% (%.2f, %.2f) | %s | %.4f | %d | %.0f |" % (
        k[0], "-" if k[0] == "dense" else ("on" if k[1] else "off"), m, min(acc), max(acc), vs, loss, len(rs), secs))
table = "\n".join(lines)
print(table)
open(os.path.join(out, "table.md"), "w").write(table + "\n")
# the training loss of seed 1 per codec, for gnuplot
data = os.path.join(out, "curves.dat")
with open(data, "w") as f:
    for k in keys:
        r = [r for r in runs if (r["codec"], r["ef"]) == k][0]
        f.write('"%s%s"\n' % (k[0], "" if k[0] == "dense" else (" EF" if k[1] else " no EF")))
        for s, l in r["curve"]:
            f.write("%d %.5f\n" % (s, l))
        f.write("\n\n")
plot = ('set terminal pngcairo size 900,540; set output "%s"; set xlabel "step (of each rank)"; '
        'set ylabel "training loss (mean over ranks)"; set logscale y; set key top right; '
        'set title "Fashion-MNIST, small CNN, DDP on 4 CPU processes through squall (seed 1)"; '
        'plot for [i=0:%d] "%s" index i using 1:2 with lines title columnheader(1)'
        % (os.path.join(out, "loss.png"), len(keys) - 1, data))
try:
    subprocess.run(["gnuplot", "-e", plot], check=True)
except (OSError, subprocess.CalledProcessError) as e:
    print("torch-study.sh: no plot (%s)" % e)
PY

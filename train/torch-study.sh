#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# torch-study.sh [--task fashion|charlm] [--seeds N] [--epochs E] [--steps S]
# [--ranks R] [--runs LIST] [--out DIR] [-- TRAINER-ARGS]: the accuracy studies of issue
# 39 on real data with real PyTorch, under DDP on R CPU processes (gloo),
# the gradients through squall's comm hook with each codec (dense: DDP's own
# all-reduce), each with N seeds. Tasks:
#   fashion: a small CNN learns Fashion-MNIST for E epochs
#            (train/torch_fashion.py); reports the test accuracy and loss;
#   charlm:  a small character-level transformer learns Debian's fortunes
#            for S steps (train/torch_charlm.py); reports the validation
#            loss in nats and bits per character, and its change vs dense
#            (200 steps: about 2.5 minutes a run on 2 idle cores).
# train/torch_study_report.py writes the table (mean, min, max per codec)
# and draws seed 1's loss curves (gnuplot, where installed). Run from the
# source tree after a build (./build), as:
#   train/torch-study.sh --seeds 3 --epochs 1
#   train/torch-study.sh --task charlm --seeds 3
# Arguments after -- go to every run of the trainer, e.g. a smoke run:
#   train/torch-study.sh --task charlm --seeds 1 --steps 10 -- --evals 1 --val-windows 64
# --runs picks the runs, CODEC,EF items separated by spaces (default: every
# codec of the study), e.g. top-k with its density warm-up beside dense:
#   train/torch-study.sh --task charlm --runs 'dense,1 topk:0.01,1' -- --warmup-steps 50
# (--warmup-steps and --warmup-start go to top-k's runs only).
# Needs Debian's python3-torch, and dataset-fashion-mnist or fortunes.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
task=fashion seeds=3 epochs= steps= ranks=4 out= extra=
runs="dense,1 fp16,1 int8,1 int4,1 topk:0.01,1 topk:0.01,0 topk:0.001,1"
while [ $# -gt 0 ]; do
  case $1 in
  --task) task=$2; shift 2 ;;
  --seeds) seeds=$2; shift 2 ;;
  --epochs) epochs=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --ranks) ranks=$2; shift 2 ;;
  --runs) runs=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --) shift; extra="$*"; break ;;
  *) echo "torch-study.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
out=${out:-torch-study-$(date +%Y%m%d-%H%M)}
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "torch-study.sh: no PyTorch for $py (apt-get install python3-torch)" >&2; exit 77; }
case $task in
fashion)
  [ -z "$steps" ] || { echo "torch-study.sh: --steps is for --task charlm (fashion counts --epochs)" >&2; exit 2; }
  [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "torch-study.sh: no Fashion-MNIST (apt-get install dataset-fashion-mnist)" >&2; exit 77; }
  trainer=torch_fashion.py length="--epochs ${epochs:-1}" ;;
charlm)
  [ -z "$epochs" ] || { echo "torch-study.sh: --epochs is for --task fashion (charlm counts --steps)" >&2; exit 2; }
  [ -f /usr/share/games/fortunes/fortunes ] ||
    { echo "torch-study.sh: no fortunes text (apt-get install fortunes)" >&2; exit 77; }
  trainer=torch_charlm.py length="--steps ${steps:-200}" ;;
*) echo "torch-study.sh: unknown task '$task' (fashion or charlm)" >&2; exit 2 ;;
esac
export PYTHONPATH="$top/python" SQUALL_LIBRARY="${SQUALL_LIBRARY:-$top/build/.libs/libsquall.so}"
# launch.py's limit per run: a language-model run takes minutes, more on a
# machine shared with other work
export SQUALL_TEST_TIMEOUT="${SQUALL_TEST_TIMEOUT:-2400}"
mkdir -p "$out"
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/machine.txt"
for run in $runs; do
  case $run in
  *,[01]) ;;
  *) echo "torch-study.sh: --runs item '$run' is not CODEC,EF (EF 0 or 1)" >&2; exit 2 ;;
  esac
  set -- "${run%,*}" "${run##*,}"
  # dense is DDP's own all-reduce: top-k's warm-up is not its
  args=$extra
  [ "$1" != dense ] || args=$(echo " $extra " | sed 's/ --warmup-\(steps\|start\) [^ ]*//g')
  for s in $(seq "$seeds"); do
    json="$out/$(echo "$1" | tr : -)-ef$2-seed$s.json"
    [ -f "$json" ] && continue # done by an earlier, interrupted study in the same folder
    for try in 1 2; do
      $py "$top/tests/torch/launch.py" "$ranks" "$top/train/$trainer" --codec "$1" --ef "$2" --seed "$s" \
        $length $args --out "$json" && break
      echo "torch-study.sh: $1 ef=$2 seed=$s failed (try $try)" | tee -a "$out/failures.txt"
      [ "$try" = 2 ] && exit 1
    done
  done
done
$py "$top/train/torch_study_report.py" "$task" "$out"

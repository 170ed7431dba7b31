#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# run-gpu-checks.sh - every GPU check of tests/gpu in one command, on a
# machine with an NVIDIA GPU, nvcc's runtime, Python with PyTorch and the
# pip NCCL (no autotools, MPI or zstd needed there):
#   1 selftest  each CUDA codec against its host twin, bit for bit
#   2 direct    squallAllReduce on device buffers, one rank, real NCCL, every
#               codec x type x op, several steps, and in a CUDA graph (a, b)
#   3 preload   a plain NCCL program under squall-run (LD_PRELOAD interposer),
#               one run per codec, statistics checked afterwards (d)
#   4 ddp       a one-process PyTorch DDP run under squall-run --compress
#               topk:0.01 --min-bytes 0: compressed calls and a falling loss (c)
#   5 hook      the PyTorch DDP comm hook (python/squall) on CUDA buckets:
#               one process with the NCCL group, then 2 processes on the one
#               GPU with gloo; identical parameters, compressed calls, a
#               falling loss, DDP's own bits where it passes through
#   6 bench     device_bench: what a compressed call costs on the device path
#               against plain NCCL, each codec, 4 and 64 MiB (figures; fails
#               only where a call errs or was not compressed)
#   7 ranks     squallAllReduce on device buffers on 2 and 4 ranks of this one
#               GPU, over the device-memory test NCCL (tests/gpu/devnccl, its
#               own libnccl.so.2, never the real one): every codec, the same
#               bits on every rank, conservation, FAKENCCL_FAULT, two-level
#               (ncclCommSplit), CUDA graphs; squallReduceScatter, every
#               codec, conservation per shard (test_devnccl_ranks)
#   8 cost      the cost model on device buffers, 2 ranks of this GPU over the
#               same test NCCL, timed with CUDA events: over an emulated
#               latency (FAKENCCL_NS_PER_CALL) int8 ends up passing through,
#               over an emulated slow link (FAKENCCL_NS_PER_BYTE) top-k ends
#               up compressed, every rank on the same path at every call
#               (test_devnccl_ranks --cost)
# Every step runs the bundle that `make gpu-bundle` (or the wrapper
# tests/gpu/build-for-device.sh) builds into tests/gpu/build/dist on a
# machine without a GPU: carry that folder along. Without it every step
# fails and says so (there is no autotools build here to make it).
#
# Logs go to ${OUT:-tests/gpu/build/out}: summary.txt, env.log, selftest.log,
# direct.log, preload.log, ddp.log, ddp-stats.0.json, ddp-loss.json, hook.log,
# bench.log, ranks.log, cost.log.
# Exit status: 0 all passed, 1 a check failed, 77 no GPU here (nothing ran).
# The time limits add up to under 600 s, the device machine's limit per
# command, even with a hang in every step: 80 + 65 + 4 x 25 + 65 + 20 +
# 2 x 35 + 15 + 70 + 28 s (steps 1-8; on an H200 steps 1-6 took 91 s in
# all, preload 14 of them, bench 1), 2 s more each to kill, and 10 + 20 +
# 20 s for the machine's description (nvidia-smi, two Python imports of
# PyTorch), 2 s more each to kill: 513 + 26 + 56 = 595 s. Left out,
# unlimited but quick: nvidia-smi -L, ldd, and the four reads of the
# statistics (test_nccl_device check). The steps take a few
# seconds to a minute each when nothing hangs.
# Environment: SQUALL_GPU_BUNDLE (the bundle; default tests/gpu/build/dist),
# SELFTEST_ARGS (default: 1 1000 1048579 16777216), DDP_STEPS (300), PYTHON
# (python3), NCCL_LIBDIR (where libnccl.so.2 is; default: the one PyTorch
# loads).
set -u
cd "$(dirname "$0")/../.." || exit 2
root=$(pwd)
dist=${SQUALL_GPU_BUNDLE:-$root/tests/gpu/build/dist}
out=${OUT:-$root/tests/gpu/build/out}
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
orig_ld_path=${LD_LIBRARY_PATH-} # PyTorch gets it back (it may point at the driver)
t_start=$SECONDS

rows=()   # "step|result|seconds|detail"
add_row() { rows+=("$1|$2|$3|$4"); }

summary() {
  {
    printf '\n== summary (%s, %d s in all)\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" $((SECONDS - t_start))
    printf '%-9s %-6s %6s  %s\n' step result s detail
    for r in "${rows[@]}"; do
      IFS='|' read -r s res secs detail <<<"$r"
      printf '%-9s %-6s %6s  %s\n' "$s" "$res" "$secs" "$detail"
    done
  } | tee "$out/summary.txt"
}

# The last "N passed, N failed" line of a log, or its last line.
detail_of() {
  local d
  d=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" 2>/dev/null | tail -n 1)
  [ -n "$d" ] || d=$(grep -v '^\s*$' "$1" 2>/dev/null | tail -n 1 | cut -c1-100)
  printf '%s' "$d"
}

# run_cmd LOG LIMIT CMD...: runs CMD with a time limit, its output appended
# to LOG and shown; sets RC, RES (PASS, FAIL or SKIP), SECS and DETAIL.
run_cmd() {
  local log=$1 limit=$2 t0=$SECONDS
  shift 2
  echo "== $*" | tee -a "$log"
  timeout -k 2 "$limit" "$@" 2>&1 | tee -a "$log"
  RC=${PIPESTATUS[0]}
  SECS=$((SECONDS - t0))
  DETAIL=$(detail_of "$log")
  case $RC in
    0) RES=PASS ;;
    77) RES=SKIP ;;
    124|137) RES=FAIL; DETAIL="timed out after ${limit} s; $DETAIL" ;;
    *) RES=FAIL; DETAIL="exit $RC; $DETAIL" ;;
  esac
  echo "== $RES (exit $RC, $SECS s)" | tee -a "$log"
}

# ------------------------------------------------------------------ is there a GPU?
gpu=no
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  gpu=yes
elif [ -e /dev/nvidia0 ]; then
  gpu=yes
fi
if [ $gpu = no ]; then
  why="no NVIDIA GPU here (nvidia-smi lists none, no /dev/nvidia0)"
  echo "run-gpu-checks.sh: SKIP: $why" | tee "$out/env.log"
  for s in selftest direct preload ddp hook bench ranks cost; do add_row $s SKIP 0 "$why"; done
  summary
  exit 77
fi

# ------------------------------------------------------------------ the machine
{
  echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), $(uname -srm)"
  timeout -k 2 10 nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv 2>&1 || true
  command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 2
  echo "== the bundle ($dist)"
  if [ -f "$dist/BUILD-INFO" ]; then cat "$dist/BUILD-INFO"; else echo "missing: run make gpu-bundle (or tests/gpu/build-for-device.sh) on the build machine and carry tests/gpu/build/dist"; fi
  echo "== Python"
  timeout -k 2 20 "$py" - <<'EOF' 2>&1
import sys
print("python", sys.version.split()[0], sys.executable)
try:
    import torch
    v = torch.cuda.nccl.version() if torch.cuda.is_available() else None
    print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "nccl", v)
except Exception as e:
    print("torch: not importable:", e)
EOF
} > "$out/env.log" 2>&1

# The NCCL PyTorch loads: the test programs link libnccl.so.2 and find it here.
nccl_dir=${NCCL_LIBDIR:-}
if [ -z "$nccl_dir" ]; then
  nccl_dir=$(timeout -k 2 20 "$py" - <<'EOF' 2>/dev/null
import glob, os, sys
try:
    import torch  # loads the NCCL it was built for (the pip package)
    torch.cuda.nccl.version()
    for line in open("/proc/self/maps"):
        p = line.split()[-1]
        if "/libnccl.so" in p:
            print(os.path.dirname(p)); sys.exit(0)
except Exception:
    pass
for d in sys.path:
    for f in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnccl.so.2")):
        print(os.path.dirname(f)); sys.exit(0)
EOF
)
fi
if [ -z "$nccl_dir" ]; then # the system's, if any
  nccl_dir=$(ldconfig -p 2>/dev/null | sed -n 's|.*libnccl\.so\.2 .*=> \(.*\)/libnccl\.so\.2$|\1|p' | head -n 1)
fi
{
  echo "== libnccl.so.2 for the test programs: ${nccl_dir:-not found (set NCCL_LIBDIR)}"
  [ -n "$nccl_dir" ] && ls -l "$nccl_dir"/libnccl.so* 2>&1
  for f in "$dist"/bin/test_nccl_device "$dist"/bin/test_nccl_device_direct "$dist"/bin/device_bench \
    "$dist"/bin/test_devnccl_ranks "$dist"/lib/libsquall-preload.so; do
    [ -e "$f" ] && { echo "-- $f"; LD_LIBRARY_PATH=${nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ldd "$f" 2>&1; }
  done
} >> "$out/env.log" 2>&1
cat "$out/env.log"
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=${nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
have_bundle=yes
for f in bin/selftest bin/test_nccl_device_direct bin/test_nccl_device bin/device_bench bin/squall-run \
  lib/libsquall-preload.so bin/test_devnccl_ranks devnccl/libnccl.so.2; do
  [ -e "$dist/$f" ] || have_bundle=no
done
no_bundle="no bundle in $dist: run make gpu-bundle (or tests/gpu/build-for-device.sh) on the build machine and carry tests/gpu/build/dist"

# ------------------------------------------------------------------ 1 self-test
: > "$out/selftest.log"
if [ -x "$dist/bin/selftest" ]; then
  # shellcheck disable=SC2086
  run_cmd "$out/selftest.log" 80 "$dist/bin/selftest" ${SELFTEST_ARGS:-1 1000 1048579 16777216}
  add_row selftest "$RES" "$SECS" "$DETAIL"
else
  echo "$no_bundle" | tee -a "$out/selftest.log"
  add_row selftest FAIL 0 "$no_bundle"
fi

# nccl_step NAME LIMIT PROGRAM: one bundle program that calls NCCL, its
# output in NAME.log, its row in the summary.
nccl_step() {
  local name=$1 limit=$2 prog=$3
  : > "$out/$name.log"
  if [ $have_bundle = yes ] && [ -n "$nccl_dir" ]; then
    run_cmd "$out/$name.log" "$limit" "$dist/bin/$prog"
    add_row "$name" "$RES" "$SECS" "$DETAIL"
  else
    echo "${no_bundle}, or no libnccl.so.2 found" | tee -a "$out/$name.log"
    add_row "$name" FAIL 0 "$no_bundle, or no libnccl.so.2"
  fi
}

# ------------------------------------------------------------------ 2 direct API
nccl_step direct 65 test_nccl_device_direct

# ------------------------------------------------------------------ 3 the interposer
# One run per codec (SQUALL_MIN_BYTES=4096 is what the program assumes),
# then its statistics against what it expected.
: > "$out/preload.log"
if [ $have_bundle = yes ] && [ -n "$nccl_dir" ]; then
  t0=$SECONDS n_ok=0 n_skip=0 bad_list=
  for spec in fp16 bf16 topk:0.01 topk:0.01/fp16; do
    codec=${spec%/*} values=fp32
    [ "$spec" != "$codec" ] && values=${spec#*/}
    d=$(mktemp -d "${TMPDIR:-/tmp}/squall-preload.XXXXXX")
    run_cmd "$d/log" 25 env SQUALL_MIN_RANKS=1 SQUALL_PRELOAD_LIB="$dist/lib/libsquall-preload.so" \
      "$dist/bin/squall-run" --compress "$codec" --values "$values" --min-bytes 4096 --debug INFO \
      --stats "$d/stats.%r.json" -- "$dist/bin/test_nccl_device" run "$d"
    ok=$RES
    if [ "$ok" = PASS ]; then
      "$dist/bin/test_nccl_device" check "$d" >> "$d/log" 2>&1 || ok=FAIL
      tail -n 2 "$d/log"
      if ! grep -q 'NCCL interposer: real NCCL' "$d/log"; then
        echo "FAIL: no INFO line from the interposer naming the real NCCL" | tee -a "$d/log"
        ok=FAIL
      fi
    fi
    { echo "==== $spec: $ok"; cat "$d/log"; } >> "$out/preload.log"
    rm -rf "$d"
    case $ok in
      PASS) n_ok=$((n_ok + 1)) ;;
      SKIP) n_skip=$((n_skip + 1)) ;;
      *) bad_list="$bad_list $spec" ;;
    esac
  done
  res=PASS
  [ $n_skip = 4 ] && res=SKIP
  [ -n "$bad_list" ] && res=FAIL
  add_row preload $res $((SECONDS - t0)) \
    "$n_ok of 4 codecs passed${bad_list:+; failed:$bad_list}$([ $n_skip = 0 ] || echo "; $n_skip skipped")"
else
  echo "${no_bundle}, or no libnccl.so.2 found" | tee -a "$out/preload.log"
  add_row preload FAIL 0 "$no_bundle, or no libnccl.so.2"
fi

# ------------------------------------------------------------------ 4 PyTorch DDP
: > "$out/ddp.log"
if [ $have_bundle = yes ]; then
  t0=$SECONDS
  rm -f "$out"/ddp-stats.*.json "$out/ddp-loss.json"
  # PyTorch finds its own NCCL: the environment's LD_LIBRARY_PATH, without ours.
  run_cmd "$out/ddp.log" 65 env LD_LIBRARY_PATH="$orig_ld_path" SQUALL_MIN_RANKS=1 PYTHONUNBUFFERED=1 \
    SQUALL_PRELOAD_LIB="$dist/lib/libsquall-preload.so" "$dist/bin/squall-run" --compress topk:0.01 \
    --min-bytes 0 --debug INFO --stats "$out/ddp-stats.%r.json" -- \
    "$py" tests/gpu/ddp_squall.py train --steps "${DDP_STEPS:-300}" --out "$out/ddp-loss.json"
  if [ "$RES" = PASS ]; then
    run_cmd "$out/ddp.log" 20 "$py" tests/gpu/ddp_squall.py check "$out/ddp-stats.0.json" "$out/ddp-loss.json"
  fi
  add_row ddp "$RES" $((SECONDS - t0)) "$DETAIL"
  grep -h 'NCCL interposer: real NCCL' "$out/ddp.log" | head -n 1
else
  echo "$no_bundle" | tee -a "$out/ddp.log"
  add_row ddp FAIL 0 "$no_bundle"
fi

# ------------------------------------------------------------------ 5 the DDP comm hook
: > "$out/hook.log"
if [ $have_bundle = yes ]; then
  t0=$SECONDS
  hook_env=(env LD_LIBRARY_PATH="$orig_ld_path" PYTHONPATH="$root/python" SQUALL_LIBRARY="$dist/lib/libsquall.so"
    PYTHONUNBUFFERED=1)
  run_cmd "$out/hook.log" 35 "${hook_env[@]}" "$py" tests/gpu/hook_cuda.py nccl
  res=$RES detail="nccl: $RES"
  run_cmd "$out/hook.log" 35 "${hook_env[@]}" SQUALL_TEST_TIMEOUT=33 "$py" tests/torch/launch.py 2 tests/gpu/hook_cuda.py gloo
  [ "$RES" = PASS ] || res=$RES
  add_row hook "$res" $((SECONDS - t0)) "$detail; gloo on 2 processes: $RES"
else
  echo "$no_bundle" | tee -a "$out/hook.log"
  add_row hook FAIL 0 "$no_bundle"
fi

# ------------------------------------------------------------------ 6 device figures
nccl_step bench 15 device_bench

# ------------------------------------------------------------------ 7 several ranks on one GPU
# The program loads the bundle's devnccl/libnccl.so.2 through its RPATH
# (before LD_LIBRARY_PATH) and checks that it did; each rank waits 20 s at
# most for a peer, so a stuck rank ends as an error inside the limit.
: > "$out/ranks.log"
if [ $have_bundle = yes ]; then
  run_cmd "$out/ranks.log" 70 env FAKENCCL_TIMEOUT=20 "$dist/bin/test_devnccl_ranks" 2 4
  add_row ranks "$RES" "$SECS" "$DETAIL"
else
  echo "$no_bundle" | tee -a "$out/ranks.log"
  add_row ranks FAIL 0 "$no_bundle"
fi

# ------------------------------------------------------------------ 8 the cost model on several ranks
# About 10 s: 112 calls a side at 40 ms an operation, then 112 over a link
# where a plain 4 MiB call waits 0.2 s; a peer waits 10 s at most.
: > "$out/cost.log"
if [ $have_bundle = yes ]; then
  run_cmd "$out/cost.log" 28 env FAKENCCL_TIMEOUT=10 "$dist/bin/test_devnccl_ranks" --cost 2
  add_row cost "$RES" "$SECS" "$DETAIL"
else
  echo "$no_bundle" | tee -a "$out/cost.log"
  add_row cost FAIL 0 "$no_bundle"
fi

summary
status=0
for r in "${rows[@]}"; do
  case $r in *"|FAIL|"*) status=1 ;; esac
done
skips=0
for r in "${rows[@]}"; do case $r in *"|SKIP|"*) skips=$((skips + 1)) ;; esac; done
[ $status = 0 ] && [ $skips = ${#rows[@]} ] && status=77
exit $status

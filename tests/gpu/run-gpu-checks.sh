#!/usr/bin/env bash
# run-gpu-checks.sh - everything a GPU machine should run, in one go: a GPU
# summary, the standalone build of the self-test (tests/gpu/Makefile; needs
# only nvcc, cc and make) and the self-test itself. Everything is also
# written to "${OUT:-.}/gpu-selftest.log". Exit status: the self-test's
# (0 pass, 1 fail, 77 no GPU), or make's when the build fails.
# Set ARCH (e.g. "80 90 100") to override the SM detected with nvidia-smi.
set -u
cd "$(dirname "$0")/../.." || exit 2
out=${OUT:-.}
mkdir -p "$out" || exit 2
log=$out/gpu-selftest.log

main() {
  echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
  echo "== GPU"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
      --format=csv || nvidia-smi
  else
    echo "nvidia-smi not found"
  fi
  local arch=${ARCH:-}
  if [ -z "$arch" ] && command -v nvidia-smi >/dev/null 2>&1; then
    # "9.0" -> 90; the distinct SMs of all GPUs, SASS for each.
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .' | sort -u | tr '\n' ' ')
  fi
  [ -n "$arch" ] && export ARCH="$arch" # the Makefile's ARCH ?= yields to it
  echo "== build"
  make -s -C tests/gpu info
  make -C tests/gpu -j"$(nproc 2>/dev/null || echo 4)" || return
  echo "== self-test"
  local t0=$SECONDS
  ./tests/gpu/build/selftest
  local rc=$?
  echo "== self-test exit status $rc after $((SECONDS - t0)) s"
  return $rc
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"

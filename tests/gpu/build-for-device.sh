#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# build-for-device.sh - on a machine without a GPU, builds the bundle that
# tests/gpu/run-gpu-checks.sh runs on a GPU machine: configures the tree in
# tests/gpu/build/obj (ignored by git) for the GPU's SMs and runs
# `make gpu-bundle` there, which links the GPU checks from the library's own
# objects into tests/gpu/build/dist and checks that they will load on a
# machine without MPI, zstd or Check (tests/gpu/check-bundle.sh).
# With a build tree already configured, `make gpu-bundle` in it does the same.
# Then carry tests/gpu/build/dist to the GPU machine and run
# `bash tests/gpu/run-gpu-checks.sh` there.
# Needs what configure needs (autotools, MPI, zstd; nvcc and NCCL for the
# GPU parts) plus libzstd.a and CUDA's libcudart_static.a.
# Environment: ARCH (comma-separated SMs to build SASS for; default 90, the
# H100/H200), CONFIGURE_FLAGS (more configure options, e.g. --with-nccl=DIR),
# JOBS (make -j; default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$(pwd)
obj=$src/tests/gpu/build/obj
[ -x configure ] || autoreconf -fi
mkdir -p "$obj"
cd "$obj"
# shellcheck disable=SC2086
"$src/configure" --with-cuda-arch="${ARCH:-90}" ${CONFIGURE_FLAGS:-} > configure.log 2>&1 ||
  { tail -n 20 configure.log; echo "build-for-device.sh: configure failed (see $obj/configure.log)" >&2; exit 1; }
grep -q '^#define HAVE_NCCL 1' config.h ||
  { sed -n '/configuration summary/,$p' configure.log; echo "build-for-device.sh: configure found no CUDA or NCCL" >&2; exit 1; }
make -j"${JOBS:-2}" gpu-bundle

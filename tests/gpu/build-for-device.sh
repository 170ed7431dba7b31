#!/usr/bin/env bash
# build-for-device.sh - builds, on a machine without a GPU, everything that
# tests/gpu/run-gpu-checks.sh needs on a GPU machine, into tests/gpu/build/dist
# (ignored by git), and checks that it will load there:
#   - `make -C tests/gpu bundle` (CUDA runtime and zstd static, no MPI);
#   - shared libraries needed: libc's family and libstdc++, plus libnccl.so.2
#     for the two test programs only (the interposer must find NCCL itself);
#   - the interposer exports ncclX names and nothing else;
#   - the newest glibc symbol version (the GPU machine's glibc must have it);
#   - under 40 MiB in all;
#   - without a GPU here, every program exits 77 (skipped).
# Then carry tests/gpu/build/dist to the GPU machine and run
# `bash tests/gpu/run-gpu-checks.sh` there.
# Needs: nvcc (CUDA 13), cc, make, CUDA's libcudart_static.a, nccl.h and
# libnccl.so (NCCL_HOME, default CUDA_HOME), libzstd.a (ZSTD_A; Debian:
# libzstd-dev). ARCH: the SMs to build SASS for (default 90, the H100/H200).
set -euo pipefail
cd "$(dirname "$0")/../.."
gpu=tests/gpu
dist=$gpu/build/dist
arch=${ARCH:-90}
die() { echo "build-for-device.sh: $*" >&2; exit 1; }

info=$(make -s -C $gpu info ARCH="$arch")
echo "$info"
nvcc_bin=$(sed -n 's/^NVCC=\([^ ]*\).*/\1/p' <<<"$info")
nccl_home=$(sed -n 's/.*NCCL_HOME=\([^ ]*\).*/\1/p' <<<"$info")
rm -rf "$dist"
make -C $gpu -j"$(nproc 2>/dev/null || echo 2)" ARCH="$arch" bundle

# What each file may need at run time.
base=(libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2 libdl.so.2 libpthread.so.0 librt.so.1)
check_needed() { # FILE ALLOWED...
  local f=$1 n
  shift
  for n in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case " $* " in *" $n "*) ;; *) die "$f needs $n, which the GPU machine may not have (allowed: $*)" ;; esac
  done
}
elves=("$dist/bin/selftest" "$dist/bin/test_nccl_device" "$dist/bin/test_nccl_device_direct" "$dist/lib/libsquall-preload.so")
check_needed $dist/lib/libsquall-preload.so "${base[@]}"
check_needed $dist/bin/selftest "${base[@]}"
check_needed $dist/bin/test_nccl_device "${base[@]}" libnccl.so.2
check_needed $dist/bin/test_nccl_device_direct "${base[@]}" libnccl.so.2
for f in $dist/bin/test_nccl_device $dist/bin/test_nccl_device_direct; do
  readelf -d "$f" | grep -q 'NEEDED.*\[libnccl\.so\.2\]' || die "$f does not load libnccl.so.2 by that soname"
done
extra=$(nm -D --defined-only $dist/lib/libsquall-preload.so | awk '{print $3}' | grep -v '^nccl[A-Z]' || true)
[ -z "$extra" ] || die "the interposer exports more than ncclX: $extra"
glibc=$(objdump -T "${elves[@]}" | grep -o 'GLIBC_2\.[0-9.]*' | sort -uV | tail -n 1)

bytes=$(du -sb "$dist" | cut -f1)
[ "$bytes" -lt $((40 * 1024 * 1024)) ] || die "$dist holds $bytes bytes, over 40 MiB"

{
  echo "built $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -srm), $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null)"
  if rev=$(git rev-parse --short HEAD 2>/dev/null); then
    echo "commit $rev$(git diff --quiet HEAD -- 2>/dev/null || echo ' with local changes')"
  fi
  echo "$("$nvcc_bin" --version | grep -o 'release [0-9.]*, V[0-9.]*'), ARCH=$arch; $(cc --version | head -n 1)"
  echo "nccl.h $(sed -n 's/^#define NCCL_VERSION_CODE *\([0-9]*\).*/\1/p' "$nccl_home/include/nccl.h" 2>/dev/null) from $nccl_home"
  echo "needs glibc >= ${glibc#GLIBC_}; $(du -sh "$dist" | cut -f1) in all"
  for f in "$dist"/bin/* "$dist"/lib/*; do printf '%10d  %s\n' "$(stat -c %s "$f")" "${f#"$dist"/}"; done
} > "$dist/BUILD-INFO"
cat "$dist/BUILD-INFO"

# Without a GPU here, each program must skip (exit 77) and say why.
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
  expect77() {
    local rc=0
    "$@" > /tmp/build-for-device.$$ 2>&1 || rc=$?
    [ $rc = 77 ] || { cat /tmp/build-for-device.$$; rm -f /tmp/build-for-device.$$; die "'$*' exited $rc, expected 77 (no GPU)"; }
    echo "  exit 77: $(head -n 1 /tmp/build-for-device.$$)"
    rm -f /tmp/build-for-device.$$
  }
  echo "no GPU here: each program must skip"
  expect77 $dist/bin/selftest
  expect77 $dist/bin/test_nccl_device_direct
  expect77 env SQUALL_MIN_RANKS=1 SQUALL_PRELOAD_LIB=$dist/lib/libsquall-preload.so $dist/bin/squall-run \
    --compress topk:0.01 --min-bytes 4096 -- $dist/bin/test_nccl_device run /tmp
fi
echo "build-for-device.sh: ready; carry tests/gpu/build/dist and run: bash tests/gpu/run-gpu-checks.sh"

#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# check-bundle.sh DIST - does the GPU bundle that `make gpu-bundle` linked
# into DIST load on a GPU machine that has no MPI, zstd or Check? Checks:
#   - shared libraries needed: libc's family and libstdc++ only, plus
#     libnccl.so.2 for the programs that call NCCL (the interposer must find
#     NCCL itself, never through DT_NEEDED); test_devnccl_ranks finds the
#     device-memory test NCCL (devnccl/libnccl.so.2) through its RPATH, and
#     that library exports the NCCL API only;
#   - the interposer exports ncclX names and nothing else;
#   - the newest glibc symbol version (the GPU machine's glibc must have it);
#   - under 40 MiB in all;
#   - without a GPU here, every program exits 77 (skipped) and says why.
# Then writes DIST/BUILD-INFO (what built it, from which commit).
# Environment (make gpu-bundle sets them): NVCC, NVCCFLAGS, NCCL_INCLUDE
# (the folder of the nccl.h it built against), CC, SQUALL_SRCDIR (the
# source tree).
set -euo pipefail
dist=${1:?usage: check-bundle.sh DIST}
die() { echo "check-bundle.sh: $*" >&2; exit 1; }
for f in bin/selftest bin/test_nccl_device bin/test_nccl_device_direct bin/device_bench bin/squall-run \
  lib/libsquall-preload.so bin/test_devnccl_ranks devnccl/libnccl.so.2; do
  [ -e "$dist/$f" ] || die "$dist/$f is missing"
done

# What each file may need at run time.
base=(libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2 libdl.so.2 libpthread.so.0 librt.so.1)
check_needed() { # FILE ALLOWED...
  local f=$1 n
  shift
  for n in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case " $* " in *" $n "*) ;; *) die "$f needs $n, which the GPU machine may not have (allowed: $*)" ;; esac
  done
}
elves=("$dist/bin/selftest" "$dist/bin/test_nccl_device" "$dist/bin/test_nccl_device_direct" "$dist/bin/device_bench"
  "$dist/lib/libsquall-preload.so" "$dist/bin/test_devnccl_ranks" "$dist/devnccl/libnccl.so.2")
check_needed "$dist/lib/libsquall-preload.so" "${base[@]}"
check_needed "$dist/bin/selftest" "${base[@]}"
check_needed "$dist/bin/test_nccl_device" "${base[@]}" libnccl.so.2
check_needed "$dist/bin/test_nccl_device_direct" "${base[@]}" libnccl.so.2
check_needed "$dist/bin/device_bench" "${base[@]}" libnccl.so.2
check_needed "$dist/bin/test_devnccl_ranks" "${base[@]}" libnccl.so.2
check_needed "$dist/devnccl/libnccl.so.2" "${base[@]}"
for f in "$dist/bin/test_nccl_device" "$dist/bin/test_nccl_device_direct" "$dist/bin/device_bench" \
  "$dist/bin/test_devnccl_ranks"; do
  readelf -d "$f" | grep -q 'NEEDED.*\[libnccl\.so\.2\]' || die "$f does not load libnccl.so.2 by that soname"
done
echo "ok: shared libraries needed: libc's family only, libnccl.so.2 for the programs that call NCCL"
extra=$(nm -D --defined-only "$dist/lib/libsquall-preload.so" | awk '{print $3}' | grep -v '^nccl[A-Z]' || true)
[ -z "$extra" ] || die "the interposer exports more than ncclX: $extra"
nccl_exports=$(nm -D --defined-only "$dist/lib/libsquall-preload.so" | grep -c ' nccl[A-Z]' || true)
[ "$nccl_exports" -gt 0 ] || die "the interposer exports no ncclX name"
echo "ok: the interposer exports $nccl_exports ncclX names and nothing else"
# Every symbol it needs resolves at load time (it must not want NCCL's).
msg=$(LD_BIND_NOW=1 LD_PRELOAD="$(cd "$dist/lib" && pwd)/libsquall-preload.so" /bin/true 2>&1) ||
  die "the interposer does not load: $msg"
[ -z "$msg" ] || die "the interposer does not load: $msg"
echo "ok: the interposer loads with every symbol bound (LD_BIND_NOW)"
# The device-memory test NCCL: found first by its program, NCCL's names only.
# shellcheck disable=SC2016 # $ORIGIN is literal text in the RPATH
readelf -d "$dist/bin/test_devnccl_ranks" | grep -q '(RPATH).*\$ORIGIN/\.\./devnccl' ||
  die "$dist/bin/test_devnccl_ranks has no RPATH \$ORIGIN/../devnccl (an LD_LIBRARY_PATH to the real NCCL would win)"
extra=$(nm -D --defined-only "$dist/devnccl/libnccl.so.2" | awk '{print $3}' | grep -v '^p\?nccl[A-Z]' || true)
[ -z "$extra" ] || die "devnccl/libnccl.so.2 exports more than ncclX and pncclX: $extra"
msg=$(LD_BIND_NOW=1 LD_PRELOAD="$(cd "$dist/devnccl" && pwd)/libnccl.so.2" /bin/true 2>&1) ||
  die "devnccl/libnccl.so.2 does not load: $msg"
[ -z "$msg" ] || die "devnccl/libnccl.so.2 does not load: $msg"
echo "ok: test_devnccl_ranks loads devnccl/libnccl.so.2 through its RPATH; that exports NCCL's names only"
glibc=$(objdump -T "${elves[@]}" | grep -o 'GLIBC_2\.[0-9.]*' | sort -uV | tail -n 1)
echo "ok: needs glibc >= ${glibc#GLIBC_}"

bytes=$(du -sb "$dist" | cut -f1)
[ "$bytes" -lt $((40 * 1024 * 1024)) ] || die "$dist holds $bytes bytes, over 40 MiB"
echo "ok: $bytes bytes in all (limit 40 MiB)"

{
  echo "built $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -srm), $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null)"
  if rev=$(git -C "${SQUALL_SRCDIR:-.}" rev-parse --short HEAD 2>/dev/null); then
    echo "commit $rev$(git -C "${SQUALL_SRCDIR:-.}" diff --quiet HEAD -- 2>/dev/null || echo ' with local changes')"
  fi
  echo "$("${NVCC:-nvcc}" --version | grep -o 'release [0-9.]*, V[0-9.]*'); $(${CC:-cc} --version | head -n 1)"
  echo "nvcc flags: ${NVCCFLAGS:-?}"
  echo "nccl.h $(sed -n 's/^#define NCCL_VERSION_CODE *\([0-9]*\).*/\1/p' "${NCCL_INCLUDE:-/nonexistent}/nccl.h" 2>/dev/null) from ${NCCL_INCLUDE:-?}"
  echo "needs glibc >= ${glibc#GLIBC_}; $(du -sh "$dist" | cut -f1) in all"
  for f in "$dist"/bin/* "$dist"/lib/* "$dist"/devnccl/*; do printf '%10d  %s\n' "$(stat -c %s "$f")" "${f#"$dist"/}"; done
} > "$dist/BUILD-INFO"
cat "$dist/BUILD-INFO"

# Without a GPU here, each program must skip (exit 77) and say why.
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
  log=$(mktemp "${TMPDIR:-/tmp}/check-bundle.XXXXXX")
  trap 'rm -f "$log"' EXIT
  expect77() {
    local rc=0
    timeout -k 5 60 "$@" > "$log" 2>&1 || rc=$?
    [ $rc = 77 ] || { cat "$log"; die "'$*' exited $rc, expected 77 (no GPU)"; }
    echo "  exit 77: $(head -n 1 "$log")"
  }
  echo "no GPU here: each program must skip"
  expect77 "$dist/bin/selftest"
  expect77 "$dist/bin/test_nccl_device_direct"
  expect77 "$dist/bin/device_bench"
  expect77 "$dist/bin/test_devnccl_ranks"
  expect77 "$dist/bin/test_devnccl_ranks" --cost 2
  expect77 env SQUALL_MIN_RANKS=1 SQUALL_PRELOAD_LIB="$dist/lib/libsquall-preload.so" "$dist/bin/squall-run" \
    --compress topk:0.01 --min-bytes 4096 -- "$dist/bin/test_nccl_device" run "${TMPDIR:-/tmp}"
fi
echo "check-bundle.sh: $dist is ready; carry it to the GPU machine and run: bash tests/gpu/run-gpu-checks.sh"

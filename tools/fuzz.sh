#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# fuzz.sh - builds the fuzz targets (fuzz/fuzz_*.c) with clang's libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer, and runs each one.
#   tools/fuzz.sh [-o DIR] [--merge] [SECONDS [TARGET...]]
#       SECONDS per target (default 60); TARGETs among: config lossless sparse
#       -o DIR    build and work directory (default ./build-fuzz)
#       --merge   afterwards, add the new inputs that widen coverage to the
#                 committed corpus fuzz/corpus/TARGET (then commit them)
#   tools/fuzz.sh [-o DIR] --seeds   regenerates fuzz/corpus from fuzz/make-seeds.c
# Inputs found during a run go to DIR/corpus/TARGET, never into the source
# tree unless --merge says so; a crash or a broken invariant leaves
# DIR/crash-TARGET-* and fails. Without clang (Debian: clang,
# libclang-rt-14-dev) it exits 77. The targets are compiled from only the
# library files they need, so the rest of the library's compiler
# requirements do not apply to them.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build-fuzz
merge=0
seeds=0
while [ $# -gt 0 ]; do
  case $1 in
    -o) out=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    --seeds) seeds=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
seconds=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-config lossless sparse}
case $seconds in *[!0-9]*|'') echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;; esac

# The library files each target needs (nothing that needs MPI, CUDA or
# compiler extensions clang lacks).
sources() {
  case $1 in
    config) echo "lib/common/config.c lib/common/config_types.c lib/common/config_env.c lib/common/size.c lib/common/error.c lib/common/log.c lib/common/version.c" ;;
    lossless) echo "lib/codecs/lossless.c lib/codecs/codec_topk.c lib/codecs/codec_half.c lib/codecs/cold_stores.c lib/common/cpu.c" ;;
    sparse) echo "lib/codecs/codec_sparse.c lib/codecs/topk_parts.c lib/codecs/codec_topk.c lib/codecs/codec_half.c lib/codecs/cold_stores.c lib/common/cpu.c" ;;
    *) echo "fuzz.sh: unknown target '$1' (config, lossless or sparse)" >&2; exit 2 ;;
  esac
}

mkdir -p "$out"
cc_flags="-g -O1 -std=gnu11 -I$top/include -I$top/lib -I$top -DPACKAGE_VERSION=\"fuzz\" -pthread"
zstd_libs=$(pkg-config --libs libzstd 2>/dev/null || echo -lzstd)

if [ $seeds = 1 ]; then
  # The generator runs the real encoder: any C compiler will do.
  ${CC:-cc} $cc_flags -o "$out/make-seeds" "$top/fuzz/make-seeds.c" \
    "$top/lib/codecs/lossless.c" "$top/lib/codecs/codec_topk.c" "$top/lib/codecs/topk_parts.c" "$top/lib/codecs/codec_half.c" "$top/lib/codecs/cold_stores.c" "$top/lib/common/cpu.c" $zstd_libs
  rm -rf "$top/fuzz/corpus"
  "$out/make-seeds" "$top/fuzz/corpus"
  for t in config lossless sparse; do
    echo "fuzz.sh: fuzz/corpus/$t: $(ls "$top/fuzz/corpus/$t" | wc -l) seeds"
  done
  exit 0
fi

clang=${CLANG:-}
if [ -z "$clang" ]; then
  for c in clang clang-16 clang-15 clang-14; do
    if command -v "$c" >/dev/null 2>&1; then clang=$c; break; fi
  done
fi
if [ -z "$clang" ]; then
  echo "SKIP: no clang (Debian: apt-get install clang libclang-rt-14-dev)"
  exit 77
fi
san="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# Probe: libFuzzer's runtime is a separate Debian package.
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' > "$out/probe.c"
if ! "$clang" $san -o "$out/probe" "$out/probe.c" >"$out/probe.log" 2>&1; then
  echo "SKIP: $clang cannot link a libFuzzer program (Debian: libclang-rt-14-dev):"
  cat "$out/probe.log"
  exit 77
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=
for t in $targets; do
  src=$(sources "$t")
  echo "fuzz.sh: building fuzz_$t with $clang"
  # The library's files as the library is built (SQUALL_BUILDING_LIBRARY:
  # squall.h's sizing macros are for callers), the target as a caller.
  objs=
  for s in $src; do
    o="$out/$(echo "$s" | tr / _).o"
    # shellcheck disable=SC2086
    "$clang" $cc_flags $san -DSQUALL_BUILDING_LIBRARY -c -o "$o" "$top/$s" || exit 1
    objs="$objs $o"
  done
  # shellcheck disable=SC2086
  "$clang" $cc_flags $san -o "$out/fuzz_$t" "$top/fuzz/fuzz_$t.c" $objs $zstd_libs -lm
  mkdir -p "$out/corpus/$t"
  dict=
  [ -f "$top/fuzz/$t.dict" ] && dict="-dict=$top/fuzz/$t.dict"
  echo "fuzz.sh: fuzz_$t for $seconds s"
  # -rss_limit_mb and -timeout: a slow or growing input is a finding too.
  if "$out/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/crash-$t-" $dict "$out/corpus/$t" "$top/fuzz/corpus/$t" > "$out/fuzz_$t.log" 2>&1; then
    grep -E '^(stat::number_of_executed_units|stat::new_units_added|#[0-9]+.*DONE)' "$out/fuzz_$t.log" | sed "s/^/fuzz_$t: /"
  else
    echo "FAIL: fuzz_$t (input kept as $out/crash-$t-*):"
    tail -40 "$out/fuzz_$t.log"
    failed="$failed $t"
    continue
  fi
  if [ $merge = 1 ]; then
    "$out/fuzz_$t" -merge=1 $dict "$top/fuzz/corpus/$t" "$out/corpus/$t" > "$out/merge_$t.log" 2>&1 ||
      { echo "FAIL: merging into fuzz/corpus/$t:"; tail -20 "$out/merge_$t.log"; failed="$failed $t"; }
    echo "fuzz.sh: fuzz/corpus/$t now has $(ls "$top/fuzz/corpus/$t" | wc -l) inputs"
  fi
done
[ -z "$failed" ] || { echo "fuzz.sh: failed:$failed"; exit 1; }
echo "fuzz.sh: every target ran $seconds s with no crash and no broken invariant"

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# sanitize.sh - the sanitizer stage: builds squall with AddressSanitizer
# and UndefinedBehaviorSanitizer (the system C compiler, --without-cuda) in
# its own directory and runs `make check` there: the unit tests, the MPI
# suites and the fuzz corpus replays.
#   tools/sanitize.sh [-o DIR] [-j JOBS]     DIR defaults to ./build-asan
# Leaks: detected (LeakSanitizer), with only Open MPI's own allocations
# suppressed (tools/lsan-openmpi.supp); a canary that leaks from program
# code proves detection is live first. Undefined behaviour aborts the test.
# Not run here, with the reason:
#   tests/interpose/preload-mpi4py.sh, tests/interpose/preload-run.sh  LD_PRELOAD the interposer
#     into programs that are not instrumented (python3, sh): an ASan-linked
#     library cannot be preloaded unless libasan comes first in the initial
#     library list, and these tests set LD_PRELOAD themselves. The
#     interposer's code (lib/api, lib/engine) runs in the other suites.
#   tests/torch/{ddp,fsdp}-hook.sh, tests/torch/python-package.sh load libsquall into
#     python3, which is not instrumented: the ASan runtime would have to be
#     preloaded into the interpreter. The library's code they reach
#     (lib/api/api_coll.c, the engine) runs under ASan in tests/mpi/coll-*.mpi.
#   tests/train/train-short.sh  trains six MLPs; under ASan it runs past the test
#     time limit. The normal `make check` runs it.
#   tests/tree/timeouts.sh  times how fast a hung job is stopped; instrumented
#     ranks take longer to die than its bound. The normal `make check` runs it.
#   tests/tree/without-mpi.sh, tests/tree/build-mpich.sh  configure and build
#     squall again, uninstrumented: nothing of theirs would run under ASan.
#   tests/tree/consume.sh  builds programs against the installed library
#     without -fsanitize: an instrumented libsquall cannot load into them.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build-asan
jobs=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
  case $1 in
    -o) out=$2; shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "sanitize.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
# The widest MPI suites run uninstrumented only: under ASan each rank is
# 20-30 times slower, and on a slow 2-core host test_twophase_mpi took
# 20 minutes on 2 ranks and longer on 3 (2026-12-02), which would take the
# stage past CI's time. Their code runs instrumented on fewer ranks
# (twophase-2/3, hierarchy-4/3, reducescatter-2/3, reducescatter-twolevel-4/3),
# as the same paths with other shard counts.
skip="tests/interpose/preload-mpi4py.sh tests/interpose/preload-run.sh tests/train/train-short.sh tests/tree/timeouts.sh"
skip="$skip tests/mpi/twophase-4.mpi tests/mpi/hierarchy-6.mpi tests/torch/ddp-hook.sh tests/torch/fsdp-hook.sh tests/torch/python-package.sh"
skip="$skip tests/mpi/reducescatter-4.mpi tests/mpi/reducescatter-twolevel-6.mpi tests/tree/without-mpi.sh tests/tree/build-mpich.sh tests/tree/consume.sh"

san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
[ -x "$top/configure" ] || (cd "$top" && autoreconf -fi >/dev/null 2>&1)
mkdir -p "$out"
cd "$out"
if [ ! -f Makefile ]; then
  "$top/configure" --without-cuda CFLAGS="-O1 -g $san" LDFLAGS="$san" > configure.out 2>&1 ||
    { tail -30 configure.out; exit 1; }
fi
make -j"$jobs" >make.out 2>&1 || { tail -40 make.out; exit 1; }

# Runtime options for every instrumented process, MPI ranks included
# (local ranks inherit mpirun's environment).
asan="detect_leaks=1:check_initialization_order=1:strict_init_order=1"
export ASAN_OPTIONS="$asan"
export LSAN_OPTIONS="suppressions=$top/tools/lsan-openmpi.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Processes that run MPI (the .sh tests and the canary) unwind every
# allocation in full, so that a leak's stack reaches the Open MPI library
# the suppressions name; the fast unwinder stops at the first frame without
# a frame pointer. It costs several times the time per allocation, so the
# unit tests, which do not start MPI, keep the fast one.
asan_mpi="$asan:fast_unwind_on_malloc=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Instrumented code is slower: more time before a test counts as hung
# (run-mpi.sh's limit, and Check's per-test timeouts). The MPI suites run
# 20-30 times slower than uninstrumented (the full unwinding above), and
# two run at once on a 2-core machine: test_twophase_mpi on 2 ranks took
# 82 + 293 s for two of its three cases alone on a slow host (2026-12-02),
# past the 900 s this limit used to be while another suite ran beside it.
export SQUALL_TEST_TIMEOUT=${SQUALL_TEST_TIMEOUT:-2400}
export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-10}

# The canary: a leak in program code after MPI_Init must be reported with
# these suppressions, or the stage would pass while blind to leaks.
cat > canary.c <<'C'
#include <mpi.h>
#include <stdlib.h>
void *volatile sanitize_canary_sink;
__attribute__((noinline)) static void leak_from_program(void) {
  sanitize_canary_sink = malloc(4243);
  sanitize_canary_sink = NULL;
}
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  leak_from_program();
  MPI_Finalize();
  return 0;
}
C
mpi_cflags=$(sed -n 's/^MPI_CFLAGS = //p' Makefile)
mpi_libs=$(sed -n 's/^MPI_LIBS = //p' Makefile)
cc=$(sed -n 's/^CC = //p' Makefile)
# shellcheck disable=SC2086
${cc:-cc} -O1 -g $san $mpi_cflags -o canary canary.c $mpi_libs
if ASAN_OPTIONS=$asan_mpi tests/run-mpi.sh 1 ./canary > canary.out 2>&1 || ! grep -q "4243 byte(s)" canary.out ||
  ! grep -q leak_from_program canary.out; then
  echo "FAIL: LeakSanitizer did not report the canary's leak from program code:"
  tail -30 canary.out
  exit 1
fi
echo "sanitize.sh: leak detection is live (canary reported)"

# Every test of this build, less the skipped ones.
all=$(printf 'sanitize-print-tests:\n\t@echo $(TESTS)\n' | make -s -f Makefile -f - sanitize-print-tests)
tests=
for t in $all; do
  case " $skip " in *" $t "*) echo "sanitize.sh: not run under ASan: $t (see tools/sanitize.sh)" ;; *) tests="$tests $t" ;; esac
done
sh_log="${SHELL:-/bin/sh} $top/tests/bounded.sh env ASAN_OPTIONS=$asan_mpi ${SHELL:-/bin/sh}"
export SQUALL_TEST_LIMIT=${SQUALL_TEST_LIMIT:-2700}
if ! make -j"$jobs" check TESTS="$tests" SH_LOG_COMPILER="$sh_log" > check.out 2>&1; then
  grep -E '^(FAIL|XPASS|ERROR):' check.out || true
  for t in $(sed -n 's/^\(FAIL\|XPASS\|ERROR\): \([^ ]*\).*/\2/p' check.out); do
    echo "---- $t.log (last 60 lines)"
    tail -60 "$t.log" 2>/dev/null || true
  done
  exit 1
fi
grep -E '^(PASS|XFAIL|SKIP):' check.out
sed -n '/^# TOTAL/,/^# ERROR/p' check.out
echo "sanitize.sh: every test passed under ASan+UBSan"

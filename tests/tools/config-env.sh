#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The environment: a SQUALL_ variable that is no option (a typo) is named
# on stderr with the option it may have meant, once, and refused by
# squall's tools (squall-info, squall-bench), warned about by the library;
# the options and the variables of squall's own tools are not. INFO
# prints every setting of the table. And squall-info's option rules.
set -u
info="$SQUALL_BUILDDIR/squall-info"
# only the variables each case sets (the caller's SQUALL_ ones would count)
env() { command env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH-}" "$@"; }
fails=0
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }
# The typo policy (squall(7)): squall's own tools refuse a SQUALL_ variable
# that is no option, naming the option it may have meant; the library,
# loaded into someone else's job, warns once and goes on.
refused() { # VAR=VALUE MEANT: squall-info exits 1 and says so, once
  out=$(env "$1" "$info" -c 2>&1 >/dev/null)
  rc=$?
  [ $rc = 1 ] || bad "squall-info with $1: exit $rc, expected 1: '$out'"
  echo "$out" | grep -qF "squall-info: unknown variable ${1%%=*} ($2): squall's tools refuse" ||
    bad "squall-info with $1 did not refuse it naming '$2': '$out'"
  [ "$(echo "$out" | grep -c 'unknown variable')" = 1 ] || bad "$1 not named exactly once: '$out'"
}
refused SQUALL_COMPRES=fp16 "did you mean SQUALL_COMPRESS?"
# names from other libraries' words, too far from the option for a typo
refused SQUALL_CODEC=fp16 "did you mean SQUALL_COMPRESS?"
refused SQUALL_TOPK=0.01 "did you mean SQUALL_COMPRESS=topk:<ratio>?"
refused SQUALL_NOT_AN_OPTION=1 "squall-info -c lists the options"
refused SQUALL_STATS_INTERVALL=1 "did you mean SQUALL_STATS_INTERVAL?"
err=$(env SQUALL_COMPRESS=fp16 SQUALL_LINK=1gbit SQUALL_RANKS=4 SQUALL_PRELOAD_LIB=/x SQUALL_BENCH_LINK=y \
  SQUALL_RUN_MPI_TAG=1 SQUALL_TRAIN_SEED=1 SQUALL_CI_FUZZ_SECONDS=1 SQUALL_CLUSTER=2x2 SQUALL_CLUSTER_INSIDE=1 \
  SQUALL_STATS_INTERVAL=5 SQUALL_SUMMARY_INTERVAL=0 "$info" -c 2>&1 >/dev/null) ||
  bad "options or tools' variables refused: '$err'"
[ -z "$(echo "$err" | grep 'unknown variable')" ] || bad "options or tools' variables taken for typos: '$err'"
# squall-bench refuses too (every rank checks; rank 0 says it), before any run.
# (Under ASan, Open MPI's own allocations in its MCA components, unloaded by
# then and so unnamed, are reported as leaks of this early exit: the status
# is what is checked here, so leak detection is off for this one run.)
if [ -x "$SQUALL_BUILDDIR/squall-bench" ]; then
  out=$(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SQUALL_COMPRES=fp16 \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    "$SQUALL_BUILDDIR/tests/run-mpi.sh" 2 -x SQUALL_COMPRES -x ASAN_OPTIONS "$SQUALL_BUILDDIR/squall-bench" -b 1K -e 1K -n 1 -w 0 \
    -C fp16 --no-progress 2>&1)
  rc=$?
  if [ $rc = 77 ]; then
    echo "note: no MPI launcher: squall-bench's refusal is not checked"
  else
    [ $rc = 2 ] || bad "squall-bench with SQUALL_COMPRES: exit $rc, expected 2: '$out'"
    [ "$(echo "$out" | grep -cF "squall-bench: unknown variable SQUALL_COMPRES (did you mean SQUALL_COMPRESS?)")" = 1 ] ||
      bad "squall-bench did not refuse SQUALL_COMPRES once: '$out'"
  fi
fi
# the library alone (through the Python package's squall.config(), which
# reads the process-wide configuration) warns and goes on, compression off
lib=$SQUALL_BUILDDIR/.libs/libsquall.so
if command -v python3 >/dev/null && [ -f "$lib" ] && ! ldd "$lib" 2>/dev/null | grep -q libasan; then
  out=$(env PYTHONDONTWRITEBYTECODE=1 SQUALL_LIBRARY="$lib" PYTHONPATH="$SQUALL_SRCDIR/python" SQUALL_COMPRES=fp16 \
    python3 -c 'import ctypes, squall
b, o = squall.config(), ctypes.create_string_buffer(64)
squall.library().squallConfigCodecString(b, o, 64)
print("codec", o.value.decode())' 2>&1)
  rc=$?
  [ $rc = 0 ] || bad "the library refused SQUALL_COMPRES (exit $rc): '$out'"
  echo "$out" | grep -q 'squall WARN unknown variable SQUALL_COMPRES is ignored (did you mean SQUALL_COMPRESS?)' ||
    bad "the library did not warn of SQUALL_COMPRES: '$out'"
  echo "$out" | grep -q '^codec none$' || bad "the misspelt variable changed the library's configuration: '$out'"
  # SQUALL_DEBUG=INFO: every setting of the table at start (squall-info -c lists the table)
  want=$(env "$info" -c | grep -c '^SQUALL_[A-Z0-9_]* *= ')
  out=$(env PYTHONDONTWRITEBYTECODE=1 SQUALL_LIBRARY="$lib" PYTHONPATH="$SQUALL_SRCDIR/python" SQUALL_DEBUG=INFO SQUALL_STATS=/tmp/x \
    python3 -c 'import squall; squall.config()' 2>&1)
  got=$(echo "$out" | grep 'squall INFO squall .* settings ([0-9]*):' | tr ' ' '\n' | grep -c '^SQUALL_[A-Z0-9_]*=')
  [ "$want" -gt 18 ] && [ "$got" = "$want" ] || bad "INFO printed $got settings, the table has $want: '$out'"
else
  echo "note: no python3 or a sanitizer build: the library's warning and INFO settings are not checked"
fi
# squall-info's usage: -v and --man-environment print one thing each, so
# with -c or with each other they are refused (exit 2), not half-obeyed.
for args in "-cv" "-v --config" "-v --man-environment" "--man-environment -c"; do
  # shellcheck disable=SC2086
  out=$(env "$info" $args 2>&1)
  rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q 'prints only itself' || bad "squall-info $args: exit $rc: '$out'"
done
env "$info" -v -h | grep -q '^usage: squall-info' || bad "squall-info -v -h did not print the help"
[ $fails = 0 ] && echo "config env: 17 passed, 0 failed" && exit 0
exit 1

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The environment: a SQUALL_ variable that is no option (a typo) is named
# on stderr with the option it may have meant, once; the options and the
# variables of squall's own tools are not. And squall-info's option rules.
set -u
info="$SQUALL_BUILDDIR/squall-info"
# only the variables each case sets (the caller's SQUALL_ ones would count)
env() { command env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH-}" "$@"; }
fails=0
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }
err=$(env SQUALL_COMPRES=fp16 "$info" -c 2>&1 >/dev/null)
echo "$err" | grep -q 'unknown variable SQUALL_COMPRES is ignored (did you mean SQUALL_COMPRESS?)' ||
  bad "a misspelt SQUALL_COMPRESS went unnoticed: '$err'"
[ "$(echo "$err" | grep -c 'unknown variable')" = 1 ] || bad "not named exactly once: '$err'"
# names from other libraries' words, too far from the option for a typo
err=$(env SQUALL_CODEC=fp16 "$info" -c 2>&1 >/dev/null)
echo "$err" | grep -q 'unknown variable SQUALL_CODEC is ignored (did you mean SQUALL_COMPRESS?)' ||
  bad "SQUALL_CODEC was not pointed to SQUALL_COMPRESS: '$err'"
err=$(env SQUALL_TOPK=0.01 "$info" -c 2>&1 >/dev/null)
echo "$err" | grep -q 'unknown variable SQUALL_TOPK is ignored (did you mean SQUALL_COMPRESS=topk:<ratio>?)' ||
  bad "SQUALL_TOPK was not pointed to SQUALL_COMPRESS=topk:<ratio>: '$err'"
err=$(env SQUALL_NOT_AN_OPTION=1 "$info" -c 2>&1 >/dev/null)
echo "$err" | grep -q 'unknown variable SQUALL_NOT_AN_OPTION is ignored' || bad "an unknown variable went unnoticed: '$err'"
err=$(env SQUALL_COMPRESS=fp16 SQUALL_LINK=1gbit SQUALL_RANKS=4 SQUALL_PRELOAD_LIB=/x SQUALL_BENCH_LINK=y \
  SQUALL_RUN_MPI_TAG=1 SQUALL_TRAIN_SEED=1 SQUALL_CI_FUZZ_SECONDS=1 SQUALL_CLUSTER=2x2 SQUALL_CLUSTER_INSIDE=1 \
  "$info" -c 2>&1 >/dev/null)
[ -z "$(echo "$err" | grep 'unknown variable')" ] || bad "options or tools' variables taken for typos: '$err'"
env SQUALL_COMPRES=fp16 "$info" -c 2>/dev/null | grep -q '^SQUALL_COMPRESS *= none' ||
  bad "the misspelt variable changed the configuration"
# squall-info's usage: -v and --man-environment print one thing each, so
# with -c or with each other they are refused (exit 2), not half-obeyed.
for args in "-cv" "-v --config" "-v --man-environment" "--man-environment -c"; do
  # shellcheck disable=SC2086
  out=$(env "$info" $args 2>&1)
  rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q 'prints only itself' || bad "squall-info $args: exit $rc: '$out'"
done
env "$info" -v -h | grep -q '^usage: squall-info' || bad "squall-info -v -h did not print the help"
[ $fails = 0 ] && echo "config env: 12 passed, 0 failed" && exit 0
exit 1

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# timeouts.sh - nothing in make check can hang forever:
#   - every test goes through tests/bounded.sh (the log compilers for
#     programs, .sh scripts and .mpi runs; any other test extension would
#     not);
#   - no test script starts MPI except through tests/run-mpi.sh;
#   - every run of a tests/*/runs.list is a test of Makefile.am and every
#     .mpi test a row there, so that none is left out silently;
#   - run-mpi.sh stops a job that outlives SQUALL_TEST_TIMEOUT, ranks
#     included, and says so (exit 124);
#   - bounded.sh stops a test that outlives SQUALL_TEST_LIMIT, with the
#     processes it started.
# The Makefile passes SQUALL_TEST_LIST ($(TESTS)), SQUALL_LOG_COMPILER,
# SQUALL_SH_LOG_COMPILER, SQUALL_TEST_MPI_LOG_COMPILER and SQUALL_TEST_LISTED_RUNS
# (every .mpi test it names, enabled or not).
: "${SQUALL_SRCDIR:?}" "${SQUALL_BUILDDIR:?}"
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok:   $*"; }

# ---- every test is bounded
test -n "${SQUALL_TEST_LIST:-}" || bad "SQUALL_TEST_LIST is empty: the Makefile passes no test list"
case " ${SQUALL_LOG_COMPILER:-} " in *bounded.sh*) ok "programs run under bounded.sh" ;;
*) bad "LOG_COMPILER ('${SQUALL_LOG_COMPILER:-}') does not go through bounded.sh" ;; esac
case " ${SQUALL_SH_LOG_COMPILER:-} " in *bounded.sh*) ok "scripts run under bounded.sh" ;;
*) bad "SH_LOG_COMPILER ('${SQUALL_SH_LOG_COMPILER:-}') does not go through bounded.sh" ;; esac
case " ${SQUALL_TEST_MPI_LOG_COMPILER:-} " in *bounded.sh*run-listed.sh*) ok "listed MPI runs run under bounded.sh" ;;
*) bad "MPI_LOG_COMPILER ('${SQUALL_TEST_MPI_LOG_COMPILER:-}') does not go through bounded.sh and run-listed.sh" ;; esac
n=0
for t in ${SQUALL_TEST_LIST:-}; do
  n=$((n + 1))
  base=${t##*/}
  case $base in
  *.sh | *.mpi) ;;
  *.*) bad "$t: extension .${base##*.} has no bounded log compiler (only programs, .sh and .mpi are bounded)" ;;
  esac
done
ok "$n tests, each a program, a .sh script or a listed MPI run (.mpi)"

# ---- every listed MPI run is a test: the rows of tests/*/runs.list are
# the runs Makefile.am names (SQUALL_TEST_LISTED_RUNS, whichever configure
# enables), one for one
before=$fails
rows=0
for list in "$SQUALL_SRCDIR"/tests/*/runs.list; do
  dir=tests/$(basename "$(dirname "$list")")
  while read -r name _; do
    case $name in '' | '#'*) continue ;; esac
    rows=$((rows + 1))
    case " ${SQUALL_TEST_LISTED_RUNS:-} " in *" $dir/$name.mpi "*) ;;
    *) bad "$dir/runs.list: the run $name is no test (Makefile.am does not name $dir/$name.mpi)" ;; esac
  done < "$list"
done
named=0
for t in ${SQUALL_TEST_LISTED_RUNS:-}; do
  named=$((named + 1))
  n=${t##*/}
  grep -q "^${n%.mpi}[[:space:]]" "$SQUALL_SRCDIR/${t%/*}/runs.list" 2>/dev/null || bad "$t: no row ${n%.mpi} in ${t%/*}/runs.list"
done
test $rows -gt 0 || bad "no rows in tests/*/runs.list"
test $fails -eq $before && ok "$rows listed MPI runs, each a test of Makefile.am ($named)"

# ---- MPI only through run-mpi.sh
before=$fails
scripts=$(find "$SQUALL_SRCDIR/tests" -name '*.sh' | sort)
while IFS= read -r f; do
  test "${f##*/}" = timeouts.sh && continue # it names mpiexec to find it
  if grep -v '^[[:space:]]*#' "$f" | grep -Eq '(^|[^-A-Za-z_.])(mpiexec|mpirun|orterun)([[:space:]]|$)'; then
    bad "${f#"$SQUALL_SRCDIR"/} starts MPI itself instead of through tests/run-mpi.sh (no time limit)"
  fi
done <<EOF
$scripts
EOF
test $fails -eq $before && ok "no test script starts mpiexec itself"

# stopped CMD MARKER LIMIT: runs CMD (which starts 'sleep MARKER'), and checks
# that it ends with 124 within LIMIT + 20 s and leaves no sleeper behind.
stopped() {
  what=$1 marker=$2 limit=$3
  shift 3
  t0=$(date +%s)
  "$@" > "$tmp/out" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  if test $rc -ne 124; then
    bad "$what: exited $rc after $secs s, expected 124 (stopped): $(tail -n 3 "$tmp/out")"
  elif test $secs -gt $((limit + 20)); then
    bad "$what: stopped only after $secs s (limit $limit s)"
  elif ! grep -q "did not finish within $limit s" "$tmp/out"; then
    bad "$what: stopped without saying why: $(tail -n 3 "$tmp/out")"
  else
    ok "$what: stopped after $secs s (limit $limit s), and said so"
  fi
  # mpiexec's ranks get their signal from its daemon: on a loaded machine
  # they may take a few seconds to go; left behind means still there at 15 s
  waited=0
  left=$(pgrep -f "sleep $marker" || true)
  while test -n "$left" && test $waited -lt 15; do
    sleep 1
    waited=$((waited + 1))
    left=$(pgrep -f "sleep $marker" || true)
  done
  if test -n "$left"; then
    bad "$what: processes left running after the stop: $left"
    kill -9 $left 2>/dev/null
  fi
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-timeouts.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
# A marker no other process has: this shell's pid as the fraction.
m1=7301.$$ m2=7302.$$
if test -x "$SQUALL_BUILDDIR/tests/run-mpi.sh" && command -v "${MPIEXEC:-mpiexec}" >/dev/null 2>&1; then
  stopped "run-mpi.sh with 2 hanging ranks" "$m1" 3 \
    env SQUALL_TEST_TIMEOUT=3 "$SQUALL_BUILDDIR/tests/run-mpi.sh" 2 sleep "$m1"
else
  echo "note: no mpiexec here, run-mpi.sh's limit not exercised"
fi
stopped "bounded.sh with a hanging test" "$m2" 2 \
  env SQUALL_TEST_LIMIT=2 sh "$SQUALL_SRCDIR/tests/bounded.sh" sh -c "sleep $m2; echo never"

if test $fails -ne 0; then
  echo "FAIL: $fails check(s) failed"
  exit 1
fi
echo "PASS: every test has a time limit"

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# During the run, not only at exit: with SQUALL_STATS_INTERVAL=1 a job
# writes its SQUALL_STATS file while it runs, and again with more calls a
# second later (whole JSON each time: written beside it and renamed); with
# SQUALL_SUMMARY_INTERVAL=1 rank 0 says "so far" that it compressed too
# little, with the reason; SIGTERM writes the file of a job that set no
# interval, and the process still dies by the signal. squall-bench runs
# as one MPI process without a launcher (its pid is the rank's), so its
# calls pass through (single_rank), and it runs until it is stopped.
set -u
b=$SQUALL_BUILDDIR
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
test -x "$b/squall-bench" || { echo "SKIP: squall-bench not built"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-interval.XXXXXX") || exit 1
pid=
trap 'test -z "$pid" || kill -KILL $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for v in $(env | sed -n 's/^\(SQUALL_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
fails=0
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }
calls() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["calls"])' "$1" 2>/dev/null; }
start() { # LOG: squall-bench in the background, for far longer than the test waits
  "$b/squall-bench" -b 64K -e 64K -n 1000000 -w 0 -C fp16 -c 0 --no-progress > "$tmp/$1" 2>&1 &
  pid=$!
}
# wait_for TEST SECONDS: polls TEST every 0.1 s while the job runs
wait_for() {
  i=0
  while ! eval "$1"; do
    kill -0 $pid 2>/dev/null || return 1
    i=$((i + 1))
    test $i -le $(($2 * 10)) || return 1
    sleep 0.1
  done
}
stop() { # kills the job with SIGTERM; its exit status
  kill -TERM $pid 2>/dev/null
  wait $pid
  rc=$?
  pid=
  return $rc
}

f=$tmp/s.0.json
SQUALL_STATS=$tmp/s.%r.json SQUALL_STATS_INTERVAL=1 SQUALL_SUMMARY_INTERVAL=1 start run1
if ! wait_for 'test -s "$f"' 60; then
  cat "$tmp/run1"
  bad "no SQUALL_STATS file while the job ran (SQUALL_STATS_INTERVAL=1)"
else
  first=$(calls "$f")
  test -n "$first" && test "$first" -gt 0 || bad "the file written during the run is not JSON with calls: $(cat "$f")"
  # another write, with more calls, about a second later
  wait_for 'c=$(calls "$f"); test -n "$c" && test "$c" -gt "$first"' 10 ||
    bad "the file was not written again with more calls (first $first calls, now: $(cat "$f"))"
  ls "$tmp" | grep -q 'tmp\.' && bad "a temporary file stayed beside the file: $(ls "$tmp")"
  line='rank 0 has compressed 0% of the'
  why='squall could have compressed so far; the rest passed through: 100% single_rank (fewer ranks than SQUALL_MIN_RANKS)'
  wait_for 'grep -F "$line" "$tmp/run1" | grep -qF "$why"' 10 || { cat "$tmp/run1"; bad "no summary during the run, as: $line ... $why"; }
fi
stop
test $? = 143 || bad "the job did not end by SIGTERM"

# no interval: nothing until SIGTERM, which writes the file
rm -f "$f"
SQUALL_STATS=$tmp/s.%r.json SQUALL_DEBUG=INFO start run2
wait_for 'grep -q "now pass through (single_rank)" "$tmp/run2"' 60 || { cat "$tmp/run2"; bad "the job made no call"; }
test -e "$f" && bad "SQUALL_STATS was written during the run without an interval"
stop
rc=$?
test $rc = 143 || { cat "$tmp/run2"; bad "the job stopped by SIGTERM exited with $rc, not by the signal (143)"; }
c=$(calls "$f")
test -n "$c" && test "$c" -gt 0 || { cat "$tmp/run2"; bad "SIGTERM did not write a whole SQUALL_STATS file: $(cat "$f" 2>&1)"; }
grep -q 'squall could have compressed' "$tmp/run2" && bad "a summary during the run with the default interval (600 s)"
test "$fails" = 0 && echo "stats interval: 6 passed, 0 failed"
test "$fails" = 0

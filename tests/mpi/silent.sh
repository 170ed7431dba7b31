#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Never a silent no-op: at exit, rank 0 says in one line when less than
# half of the bytes squall could have compressed were, with the reasons and
# their fixes (compression off; every call below SQUALL_MIN_BYTES), on rank
# 0 alone; and says nothing where squall compressed them. squall-bench is
# the program: with -C none its warm-up calls go through squall with
# compression off. (During the run: tests/mpi/stats-interval.sh.)
set -u
b=$SQUALL_BUILDDIR
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-silent.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
for v in $(env | sed -n 's/^\(SQUALL_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
fails=0
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }

# --tag-output (Open MPI) prefixes each line with [job,rank]: the line is rank 0's alone
"$b/tests/run-mpi.sh" 2 --tag-output "$b/squall-bench" -b 64K -e 64K -n 2 -w 3 -C none -c 0 --no-progress > "$tmp/off" 2>&1
rc=$?
test "$rc" = 77 && { echo "SKIP: no MPI launcher"; exit 77; }
test "$rc" = 0 || { cat "$tmp/off"; bad "squall-bench -C none exited with $rc"; }
line='rank 0 compressed 0% of the 196608 bytes squall could have compressed; the rest passed through: 100% disabled (compression is off: set SQUALL_COMPRESS (squall-run --compress fp16))'
n=$(grep -cF "$line" "$tmp/off")
test "$n" = 1 || { cat "$tmp/off"; bad "compression off: the summary at exit was said $n times, expected once, as: $line"; }
grep -F "$line" "$tmp/off" | grep -q '^\[[0-9]*,0\]<stderr>' || { cat "$tmp/off"; bad "the summary was not rank 0's"; }

# every fp16 call below SQUALL_MIN_BYTES: the reason and its fix, largest
# first (5 calls of 64 KiB: 62%; the plain row's 3 warm-up calls run with
# compression off: 38%)
"$b/tests/run-mpi.sh" 2 "$b/squall-bench" -b 64K -e 64K -n 2 -w 3 -C fp16 -S MIN_BYTES=1M -c 0 --no-progress \
  > "$tmp/small" 2>&1 || { cat "$tmp/small"; bad "squall-bench -S MIN_BYTES=1M failed"; }
line='rank 0 compressed 0% of the 524288 bytes squall could have compressed; the rest passed through: 62% small (smaller than SQUALL_MIN_BYTES: lower it); 38% disabled (compression is off: set SQUALL_COMPRESS (squall-run --compress fp16))'
n=$(grep -cF "$line" "$tmp/small")
test "$n" = 1 || { cat "$tmp/small"; bad "below SQUALL_MIN_BYTES: the summary was said $n times, expected once, as: $line"; }

"$b/tests/run-mpi.sh" 2 "$b/squall-bench" -b 64K -e 64K -n 2 -w 3 -C fp16 -S COST_MODEL=off -c 0 --no-progress \
  > "$tmp/on" 2>&1 || { cat "$tmp/on"; bad "squall-bench -C fp16 failed"; }
! grep -q 'squall could have compressed' "$tmp/on" || { cat "$tmp/on"; bad "a summary where squall compressed most bytes"; }
test "$fails" = 0 && echo "silent: 4 passed, 0 failed"
test "$fails" = 0

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Which rank names a SQUALL_STATS file where the rank comes from a
# communicator (the NCCL side): the launcher's, where its environment
# gives one for a world at least as large as the communicator (torchrun's
# RANK with WORLD_SIZE, Open MPI's, PMI's, Slurm's), else the
# communicator's; two processes of one run that end up with the same name
# do not overwrite each other (the second's counters go to <file>.<pid>,
# with a warning); an earlier run's file is replaced; a forked child does
# not write the parent's file.
set -eu
w=$SQUALL_BUILDDIR/tests/unit/stats_writer
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
unset RANK WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMIX_RANK PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS
export SQUALL_STATS="$dir/s.%r.json"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
rank_in() { sed -n 's/^{"rank": \([0-9]*\),.*/\1/p' "$1"; }
names() { ls "$dir" | tr '\n' ' '; }

# the launcher's rank beats the communicator's; torchrun's beats Open MPI's
OMPI_COMM_WORLD_RANK=5 OMPI_COMM_WORLD_SIZE=8 "$w" 0 8 0
test -f "$dir/s.5.json" && test "$(rank_in "$dir/s.5.json")" = 5 || bad "Open MPI's rank 5 did not name s.5.json: $(names)"
RANK=7 WORLD_SIZE=8 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 "$w" 0 4 0
test -f "$dir/s.7.json" || bad "torchrun's RANK=7 did not name s.7.json: $(names)"
SLURM_PROCID=4 SLURM_NTASKS=8 "$w" 1 2 0
test -f "$dir/s.4.json" || bad "Slurm's rank 4 did not name s.4.json (a sub-group's rank 1 would): $(names)"
# not a launcher's: RANK without WORLD_SIZE; a launcher's world smaller
# than the communicator (mp.spawn inside one Slurm task)
RANK=9 "$w" 3 4 0
test -f "$dir/s.3.json" || bad "RANK without WORLD_SIZE was taken: $(names)"
SLURM_PROCID=0 SLURM_NTASKS=1 "$w" 6 8 0
test -f "$dir/s.6.json" || bad "one Slurm task's rank 0 was taken for a communicator of 8: $(names)"

# two processes of one run with the same rank: both counters kept (the
# second starts long before the first writes, even on a loaded machine)
"$w" 0 2 2000 2>"$dir/a.err" &
a=$!
"$w" 0 2 3000 2>"$dir/b.err" &
b=$!
wait $a
wait $b
test -f "$dir/s.0.json" || bad "no s.0.json"
test -f "$dir/s.0.json.$b" || bad "the second writer's file s.0.json.$b is missing: $(names)"
grep -q "was written by another process of this run" "$dir/b.err" || bad "no warning from the second writer: $(cat "$dir/b.err")"
# an earlier run's file is replaced, silently
echo stale > "$dir/s.0.json"
touch -d '2000-01-01' "$dir/s.0.json"
"$w" 0 2 0 2>"$dir/c.err"
test -s "$dir/c.err" && bad "replacing an earlier run's file warned: $(cat "$dir/c.err")"
test "$(rank_in "$dir/s.0.json")" = 0 || bad "an earlier run's file was not replaced: $(cat "$dir/s.0.json")"
test "$(ls "$dir" | grep -c '^s\.0\.json\.')" = 1 || bad "a second .pid file appeared: $(names)"
# a child forked by the process exits first: the file is still the parent's
"$w" 2 4 200 fork 2>"$dir/f.err"
test -s "$dir/f.err" && bad "a forked child's exit made the parent warn: $(cat "$dir/f.err")"
test "$(ls "$dir" | grep -c '^s\.2\.json')" = 1 || bad "a forked child wrote a file of its own: $(names)"
test $fail = 0 && echo "stats ranks: all passed"
exit $fail

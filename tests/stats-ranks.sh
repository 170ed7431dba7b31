#!/bin/sh
# Which rank names a SQUALL_STATS file where the rank comes from a
# communicator (the NCCL side): the launcher's, where its environment
# gives one (torchrun's RANK with WORLD_SIZE, Open MPI's, PMIx's, PMI's,
# Slurm's), else the communicator's; and two processes of one run that
# end up with the same name do not overwrite each other: the second's
# counters go to <file>.<pid>, with a warning.
set -eu
w=$SQUALL_BUILDDIR/tests/stats_writer
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
unset RANK WORLD_SIZE OMPI_COMM_WORLD_RANK PMIX_RANK PMI_RANK SLURM_PROCID
export SQUALL_STATS="$dir/s.%r.json"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
rank_in() { sed -n 's/^{"rank": \([0-9]*\),.*/\1/p' "$1"; }

# the launcher's rank beats the communicator's; torchrun's beats Open MPI's
OMPI_COMM_WORLD_RANK=5 "$w" 0 0
test -f "$dir/s.5.json" && test "$(rank_in "$dir/s.5.json")" = 5 || bad "OMPI_COMM_WORLD_RANK=5 did not name s.5.json: $(ls "$dir")"
RANK=7 WORLD_SIZE=8 OMPI_COMM_WORLD_RANK=1 "$w" 0 0
test -f "$dir/s.7.json" || bad "torchrun's RANK=7 did not name s.7.json: $(ls "$dir")"
RANK=9 "$w" 3 0 # RANK alone is no launcher's
test -f "$dir/s.3.json" || bad "RANK without WORLD_SIZE was taken: $(ls "$dir")"
SLURM_PROCID=4 "$w" 0 0
test -f "$dir/s.4.json" || bad "SLURM_PROCID=4 did not name s.4.json: $(ls "$dir")"

# two processes of one run with the same rank: both counters kept (the
# second starts long before the first writes, even on a loaded machine)
"$w" 0 2000 2>"$dir/a.err" &
a=$!
"$w" 0 3000 2>"$dir/b.err" &
b=$!
wait $a
wait $b
test -f "$dir/s.0.json" || bad "no s.0.json"
test -f "$dir/s.0.json.$b" || bad "the second writer's file s.0.json.$b is missing: $(ls "$dir")"
grep -q "was written by another process of this run" "$dir/b.err" || bad "no warning from the second writer: $(cat "$dir/b.err")"
# a file from an earlier run is overwritten, silently
"$w" 0 0 2>"$dir/c.err"
test -s "$dir/c.err" && bad "overwriting an earlier run's file warned: $(cat "$dir/c.err")"
test "$(ls "$dir" | grep -c '^s\.0\.json\.')" = 1 || bad "an earlier run's file was not overwritten: $(ls "$dir")"
test $fail = 0 && echo "stats ranks: all passed"
exit $fail

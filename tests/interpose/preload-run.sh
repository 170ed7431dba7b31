#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# squall-run, the launcher: the environment it builds, its errors, and that
# it runs the command with the interposer loaded.
set -u
b=$SQUALL_BUILDDIR
run=$b/tools/squall-run
mpilib=$b/.libs/libsquall-preload-mpi.so
nccllib=$b/.libs/libsquall-preload.so
test -x "$run" || { echo "SKIP: $run is not built"; exit 77; }
test -f "$mpilib" || { echo "SKIP: $mpilib is not built"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-run.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# Nothing from the caller's environment may leak into the checks.
for v in $(env | sed -n 's/^\(SQUALL_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset LD_PRELOAD
fails=0
checks=0

ok() { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*"; }
# expect_line FILE LINE WHAT
expect_line() { if grep -qxF -- "$2" "$1"; then ok; else bad "$3: no line '$2' in:"; sed 's/^/  | /' "$1"; fi; }
# expect_text FILE TEXT WHAT
expect_text() { if grep -qF -- "$2" "$1"; then ok; else bad "$3: no '$2' in:"; sed 's/^/  | /' "$1"; fi; }
# expect_status WANT GOT WHAT
expect_status() { if test "$1" = "$2"; then ok; else bad "$3: exit status $2, expected $1"; fi; }

# 1. Every flag becomes its variable; the MPI interposer's path is absolute.
"$run" --mpi --compress topk:0.01 --min-bytes 1M --stats "$tmp/st.%r.json" --values fp16 --ef 0 \
  --warmup 5 --zstd 3 --debug INFO -n -- ./prog "an arg" > "$tmp/out" 2> "$tmp/err"
expect_status 0 $? "dry run"
expect_line "$tmp/out" "LD_PRELOAD=$(cd "$b/.libs" && pwd -P)/libsquall-preload-mpi.so" "dry run"
for kv in SQUALL_COMPRESS=topk:0.01 SQUALL_MIN_BYTES=1M "SQUALL_STATS=$tmp/st.%r.json" \
  SQUALL_TOPK_VALUES=fp16 SQUALL_EF=0 SQUALL_WARMUP=5 SQUALL_ZSTD=3 SQUALL_DEBUG=INFO; do
  expect_line "$tmp/out" "$kv" "dry run"
done
expect_line "$tmp/out" "exec './prog' 'an arg'" "dry run"

# 2. --flag=value, and an existing LD_PRELOAD is kept in front, never doubled.
LD_PRELOAD=$mpilib "$run" --mpi --compress=fp16 -n -- true > "$tmp/out" 2>&1
expect_line "$tmp/out" "SQUALL_COMPRESS=fp16" "--compress=fp16"
abs_mpi=$(cd "$b/.libs" && pwd -P)/libsquall-preload-mpi.so
if test "$mpilib" = "$abs_mpi"; then
  expect_line "$tmp/out" "LD_PRELOAD=$mpilib" "no duplicate in LD_PRELOAD"
else
  expect_line "$tmp/out" "LD_PRELOAD=$mpilib:$abs_mpi" "appended to LD_PRELOAD"
fi
# an LD_PRELOAD list separated by blanks, which ld.so also reads
LD_PRELOAD="/lib/x.so $abs_mpi" "$run" --mpi -n -- true > "$tmp/out" 2>&1
expect_line "$tmp/out" "LD_PRELOAD=/lib/x.so $abs_mpi" "no duplicate in a blank-separated LD_PRELOAD"

# 3. The command runs with the variables and the interposer really loaded,
#    and its exit status comes back.
probe='echo "compress=$SQUALL_COMPRESS"
grep -q libsquall-preload-mpi.so /proc/$$/maps && echo loaded
exit 3'
"$run" --mpi --compress bf16 -- sh -c "$probe" > "$tmp/out" 2>&1
expect_status 3 $? "exit status of the command"
expect_line "$tmp/out" "compress=bf16" "variable in the command"
expect_line "$tmp/out" "loaded" "interposer mapped in the command"

# 4. The NCCL interposer is the default, and both can be asked for.
if test -f "$nccllib"; then
  abs_nccl=$(cd "$b/.libs" && pwd -P)/libsquall-preload.so
  "$run" -n -- true > "$tmp/out" 2>&1
  expect_line "$tmp/out" "LD_PRELOAD=$abs_nccl" "default interposer"
  # never a silent no-op: without --compress, compression is off, and it says so
  expect_text "$tmp/out" "no --compress (nor SQUALL_COMPRESS): compression is off" "the note without --compress"
  "$run" --nccl --mpi -n -- true > "$tmp/out" 2>&1
  expect_line "$tmp/out" "LD_PRELOAD=$abs_nccl:$abs_mpi" "--nccl --mpi"
else
  echo "note: $nccllib not built (no NCCL): default-interposer checks skipped"
  SQUALL_PRELOAD_LIB=/nonexistent/libsquall-preload.so "$run" -n -- true > "$tmp/out" 2>&1
  expect_status 2 $? "missing override"
  expect_text "$tmp/out" "/nonexistent/libsquall-preload.so" "missing override"
fi

# 4a. A relative override is made absolute (the loader would search for a
# bare name, never look in this directory), and a dry run loads nothing:
# its own output is all there is, even at --debug INFO.
(cd "$b/.libs" && SQUALL_PRELOAD_MPI_LIB=libsquall-preload-mpi.so "$run" --mpi --debug INFO -n -- true) > "$tmp/out" 2>&1
expect_line "$tmp/out" "LD_PRELOAD=$abs_mpi" "relative override"
grep -q "squall INFO" "$tmp/out" && bad "dry run: squall was loaded: $(cat "$tmp/out")"

# 4b. An override that does not exist: one message, naming it, and exit 2;
# and mpirun's "-n 4" by habit, which is --dry-run here, is refused.
SQUALL_PRELOAD_MPI_LIB=/nonexistent/x.so "$run" --mpi -n -- true > "$tmp/out" 2>&1
expect_status 2 $? "missing MPI override"
expect_text "$tmp/out" "'/nonexistent/x.so', does not exist" "missing MPI override"
test "$(wc -l < "$tmp/out")" -eq 1 || bad "missing MPI override: more than one message:"
"$run" 4 ./prog > "$tmp/out" 2>&1
expect_status 2 $? "a rank count as the command"
expect_text "$tmp/out" "'4' is no command, and looks like a rank count" "a rank count as the command"
"$run" -n 4 ./prog > "$tmp/out" 2>&1
expect_status 2 $? "-n 4"
expect_text "$tmp/out" "'4' looks like a rank count" "-n 4"

# 5. SQUALL_PRELOAD_MPI_LIB overrides the search.
cp "$mpilib" "$tmp/custom-mpi.so"
SQUALL_PRELOAD_MPI_LIB=$tmp/custom-mpi.so "$run" --mpi -n -- true > "$tmp/out" 2>&1
expect_line "$tmp/out" "LD_PRELOAD=$tmp/custom-mpi.so" "SQUALL_PRELOAD_MPI_LIB"

# 6. Errors name the flag, the value and what is accepted (via squall-info).
if test -x "$b/squall-info"; then
  "$run" --mpi --compress topk:2 -- true > "$tmp/out" 2>&1
  expect_status 2 $? "bad --compress"
  expect_text "$tmp/out" "squall-run: --compress: SQUALL_COMPRESS='topk:2' is invalid: accepted values are" "bad --compress"
  "$run" --mpi --min-bytes 12Q -- true > "$tmp/out" 2>&1
  expect_status 2 $? "bad --min-bytes"
  expect_text "$tmp/out" "--min-bytes: SQUALL_MIN_BYTES='12Q'" "bad --min-bytes"
  "$run" --mpi --stats "$tmp/no-such-dir/st.json" -- true > "$tmp/out" 2>&1
  expect_status 2 $? "unwritable --stats"
  expect_text "$tmp/out" "squall-run: --stats: SQUALL_STATS='$tmp/no-such-dir/st.json' cannot be written" "unwritable --stats"
  expect_text "$tmp/out" "No such file or directory" "unwritable --stats"
  # every %r is the rank, by the library's own rule: rank 0 writes 00/x.0.json
  mkdir -p "$tmp/00"
  "$run" --mpi -n --stats "$tmp/%r%r/x.%r.json" -- true > "$tmp/out" 2>&1
  expect_status 0 $? "--stats with %r twice in a directory that exists"
  "$run" --mpi -n --stats "$tmp/%r%r" -- true > "$tmp/out" 2>&1
  expect_status 2 $? "--stats naming a directory"
  expect_text "$tmp/out" "rank 0 cannot write '$tmp/00': it is a directory" "--stats naming a directory"
  SQUALL_EF=7 "$run" --mpi -- true > "$tmp/out" 2>&1
  expect_status 2 $? "bad SQUALL_EF in the environment"
  expect_text "$tmp/out" "environment variable SQUALL_EF (not set by a flag)" "bad SQUALL_EF"
  # a misspelt name, which the library alone would only warn about
  SQUALL_COMPRES=fp16 "$run" --mpi -- true > "$tmp/out" 2>&1
  expect_status 2 $? "misspelt SQUALL_COMPRES"
  expect_text "$tmp/out" "SQUALL_COMPRES is not a squall option (did you mean SQUALL_COMPRESS?)" "misspelt SQUALL_COMPRES"
else
  echo "note: $b/squall-info not built: validation checks skipped"
fi

# 7. The --mpi hint: an MPI program under the NCCL interposer alone (the
#    default) is told at exit that its MPI_Allreduce calls were not
#    compressed; with the MPI interposer too, or without MPI, nothing is said.
py=
for c in ${PYTHON3:-} /usr/bin/python3 python3; do
  if "$c" -c 'import mpi4py' >/dev/null 2>&1; then py=$c; break; fi
done
if test -f "$nccllib" && test -n "$py"; then
  mpiprog='from mpi4py import MPI
c = MPI.COMM_WORLD
s = c.allreduce(c.Get_rank() + 1, op=MPI.SUM)
assert s == c.Get_size() * (c.Get_size() + 1) // 2, s
print("allreduce ok")'
  hint='for MPI_Allreduce use the MPI interposer: squall-run --mpi'
  "$b/tests/run-mpi.sh" 2 "$run" --compress fp16 -- "$py" -c "$mpiprog" > "$tmp/out" 2>&1
  expect_status 0 $? "MPI program under the NCCL interposer"
  expect_text "$tmp/out" "allreduce ok" "MPI program under the NCCL interposer"
  n=$(grep -c -F -- "$hint" "$tmp/out")
  if test "$n" = 1; then ok; else bad "--mpi hint: $n lines (want 1, rank 0 only) in:"; sed 's/^/  | /' "$tmp/out"; fi
  "$b/tests/run-mpi.sh" 2 "$run" --nccl --mpi --compress fp16 -- "$py" -c "$mpiprog" > "$tmp/out" 2>&1
  expect_status 0 $? "MPI program under both interposers"
  if grep -q -F -- "$hint" "$tmp/out"; then bad "hint with --mpi given:"; sed 's/^/  | /' "$tmp/out"; else ok; fi
  "$b/tests/run-mpi.sh" 1 "$run" --compress none -- "$py" -c "$mpiprog" > "$tmp/out" 2>&1
  if grep -q -F -- "$hint" "$tmp/out"; then bad "hint although nothing was to be compressed:"; sed 's/^/  | /' "$tmp/out"; else ok; fi
  "$run" --compress fp16 -- "$py" -c 'print("no mpi")' > "$tmp/out" 2>&1
  if grep -q -F -- "$hint" "$tmp/out"; then bad "hint in a process without MPI:"; sed 's/^/  | /' "$tmp/out"; else ok; fi
else
  echo "note: no NCCL interposer or no python3 with mpi4py: --mpi hint checks skipped"
fi

# 7b. A process whose SQUALL_ variables hold a bad value runs with
#     compression off, says so once, and still writes the SQUALL_STATS file
#     its own valid value asks for (the calls show as passed through).
if test -n "$py" && "$py" -c 'import numpy' >/dev/null 2>&1; then
  arrprog='from mpi4py import MPI
import numpy as np
c = MPI.COMM_WORLD
x = np.ones(1 << 18, dtype=np.float32)
y = np.empty_like(x)
c.Allreduce(x, y)
assert (y == c.Get_size()).all()
print("array allreduce ok")'
  SQUALL_COMPRESS=fp16 SQUALL_EF=7 SQUALL_STATS="$tmp/bad.%r.json" LD_PRELOAD=$mpilib \
    "$b/tests/run-mpi.sh" 2 -x SQUALL_COMPRESS -x SQUALL_EF -x SQUALL_STATS -x LD_PRELOAD \
    "$py" -c "$arrprog" > "$tmp/out" 2>&1
  expect_status 0 $? "a bad SQUALL_EF"
  expect_text "$tmp/out" "array allreduce ok" "a bad SQUALL_EF"
  expect_text "$tmp/out" "compression is off for this process" "a bad SQUALL_EF"
  for r in 0 1; do
    if grep -q '"compressed_calls": 0' "$tmp/bad.$r.json" 2>/dev/null; then ok
    else bad "a bad SQUALL_EF: rank $r wrote no statistics with 0 compressed calls to $tmp/bad.$r.json"; fi
  done
else
  echo "note: no python3 with mpi4py and numpy: the bad-value statistics check is skipped"
fi

# 8. Usage errors, and a command that does not exist.
"$run" --mpi > "$tmp/out" 2>&1
expect_status 2 $? "no command"
"$run" --bogus -- true > "$tmp/out" 2>&1
expect_status 2 $? "unknown option"
expect_text "$tmp/out" "unknown option '--bogus'" "unknown option"
"$run" --mpi --compress > "$tmp/out" 2>&1
expect_status 2 $? "flag without a value"
"$run" --mpi -- "$tmp/no-such-program" > "$tmp/out" 2>&1
expect_status 127 $? "missing command"
"$run" --help > "$tmp/out" 2>&1
expect_status 0 $? "--help"
expect_text "$tmp/out" "usage: squall-run" "--help"

echo "squall-run: $((checks - fails)) of $checks checks passed"
test $fails = 0

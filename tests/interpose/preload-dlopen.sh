#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The NCCL interposer when NCCL is loaded with RTLD_LOCAL (as PyTorch loads
# it): tests/interpose/test_preload_dlopen dlopens tests/interpose/.libs/preload_dlmod.so, which
# links libnccl.so.2 (the host-memory test NCCL here). The interposer must
# find the real functions through dlopen(libnccl.so.2, RTLD_NOLOAD), compress
# the module's all-reduces (statistics) and say so at SQUALL_DEBUG=INFO.
# Then, with no NCCL in the process at all, the interposer's calls must fail
# with ncclSystemError and one clear message naming libnccl.so.2; and with a
# partial NCCL (tests/interpose/preload_oldnccl.c) a missing newer function must answer
# ncclInvalidUsage while what exists is forwarded.
set -u
. "$SQUALL_SRCDIR/tests/interpose/with_test_nccl.sh" preload-dlopen
host=$b/tests/interpose/test_preload_dlopen
mod=$b/tests/interpose/.libs/preload_dlmod.so
test -x "$host" && test -f "$mod" || { echo "SKIP: $host or $mod is not built (make check builds them)"; exit 77; }

"$b/tests/run-mpi.sh" 2 -x LD_LIBRARY_PATH -x LD_PRELOAD="$lib" -x SQUALL_COMPRESS=topk:0.01 \
  -x SQUALL_MIN_BYTES=0 -x SQUALL_DEBUG=INFO -x SQUALL_STATS="$tmp/stats.%r.json" \
  "$host" "$mod" > "$tmp/log" 2>&1
rc=$?
cat "$tmp/log"
test $rc = 0 || { echo "FAIL: exit status $rc"; failed=1; }
route="from $fake/libnccl.so.2, found with dlopen(libnccl.so.2, RTLD_NOLOAD)"
if ! grep -q "NCCL interposer: real NCCL .* $route" "$tmp/log"; then
  echo "FAIL: no INFO line saying the real NCCL was found with dlopen(libnccl.so.2, RTLD_NOLOAD)"
  failed=1
fi
for r in 0 1; do
  f=$tmp/stats.$r.json
  if ! test -f "$f"; then
    echo "FAIL: rank $r wrote no statistics"
    failed=1
  elif ! grep -q '"compressed_calls": 3,' "$f"; then
    echo "FAIL: rank $r: expected 3 compressed calls: $(cat "$f")"
    failed=1
  fi
done

# No NCCL anywhere: not the fake on LD_LIBRARY_PATH, no MPI.
env -u LD_LIBRARY_PATH "$host" --no-nccl "$lib" > "$tmp/out" 2> "$tmp/err"
rc=$?
cat "$tmp/out" "$tmp/err"
test $rc = 0 || { echo "FAIL: without NCCL: exit status $rc"; failed=1; }
n=$(grep -c 'fatal: cannot forward ncclAllReduce: .*libnccl.so.2' "$tmp/err")
test "$n" = 1 || { echo "FAIL: without NCCL: $n messages for ncclAllReduce, expected exactly 1"; failed=1; }

old=$b/tests/interpose/oldnccl/.libs/libnccl.so.2
if test -e "$old"; then
  env -u LD_LIBRARY_PATH "$host" --old-nccl "$old" "$lib" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  cat "$tmp/out" "$tmp/err"
  test $rc = 0 || { echo "FAIL: with a partial NCCL: exit status $rc"; failed=1; }
  n=$(grep -c 'ncclCommShrink: the loaded NCCL does not provide it' "$tmp/err")
  test "$n" = 1 || { echo "FAIL: with a partial NCCL: $n messages for ncclCommShrink, expected 1"; failed=1; }
else
  echo "FAIL: $old is not built"
  failed=1
fi

test $failed = 0 && echo "PASS: the interposer reaches an RTLD_LOCAL NCCL, and fails cleanly without one"
exit $failed

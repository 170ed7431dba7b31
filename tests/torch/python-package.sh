#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The squall Python package without PyTorch, on one process: it loads the
# library this build made (its SONAME is the package's), squall.config
# names a bad setting, squall.Comm runs calls over Python collectives and
# raises a failing collective's exception, chained (and named in its
# text), and the counters say what ran.
set -u
py=$(command -v python3 || command -v /usr/bin/python3) || { echo "python-package.sh: skipped: no python3"; exit 77; }
lib="$SQUALL_BUILDDIR/.libs/libsquall.so"
so=$(objdump -p "$lib" 2>/dev/null | sed -n 's/^ *SONAME *libsquall\.so\.//p')
want=$(sed -n 's/^SONAME = "\(.*\)"/\1/p' "$SQUALL_SRCDIR/python/squall/_location.py")
if [ -n "$so" ] && [ "$so" != "$want" ]; then
  echo "FAIL: python/squall/_location.py says SONAME $want, the library is libsquall.so.$so"
  exit 1
fi
PYTHONPATH="$SQUALL_SRCDIR/python" SQUALL_LIBRARY="$lib" "$py" - <<'PY'
import ctypes, sys
import squall

fails = []
def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL:", msg)

print("squall", squall.version())
try:
    squall.config("SQUALL_COMPRESS=topk:7")
    check(False, "topk:7 accepted")
except squall.SquallError as e:
    check("SQUALL_COMPRESS" in str(e), "no option named in: %s" % e)

calls = []
def all_reduce(send, recv, count, dtype, op):
    calls.append((dtype, op))
    width = 8 if dtype == squall.INT64 else 4 if dtype == squall.FLOAT32 else 2
    if send != recv:
        ctypes.memmove(recv, send, count * width)
def all_gather(send, recv, nbytes):
    ctypes.memmove(recv, send, nbytes)

comm = squall.Comm(0, 1, all_reduce, all_gather, spec="SQUALL_COMPRESS=fp16 SQUALL_MIN_RANKS=1 SQUALL_MIN_BYTES=0")
n = 1000
x = (ctypes.c_float * n)(*[i / 8.0 for i in range(n)])
y = (ctypes.c_float * n)()
comm.all_reduce(ctypes.addressof(x), ctypes.addressof(y), n, squall.FLOAT32, squall.SUM, key=1)
check(list(y) == list(x), "one rank's fp16 sum of multiples of 1/8 is not exact")
check((squall.FLOAT16, squall.SUM) in calls, "the fp16 codec never called a 16-bit sum: %s" % calls)
st = comm.stats()
check(st["calls"] == 1 and st["compressedCalls"] == 1 and st["bytesIn"] == 4 * n,
      "Comm.stats after one fp16 call of %d floats: %s" % (n, st))
plain = squall.Comm(0, 1, all_reduce, all_gather, spec="SQUALL_COMPRESS=fp16 SQUALL_MIN_RANKS=1 SQUALL_MIN_BYTES=1M")
plain.all_reduce(ctypes.addressof(x), ctypes.addressof(y), n, squall.FLOAT32, squall.SUM, key=1)
st = plain.stats()
check(st["passthroughCalls"] == 1 and st["passthrough"] == {"small": 1},
      "a call below SQUALL_MIN_BYTES is not counted as passed through, small: %s" % st)
check(squall.stats()["calls"] >= 2, "squall.stats() (the process's) misses the calls: %s" % squall.stats())

def broken(send, recv, count, dtype, op):
    raise ValueError("the network is down")
bad = squall.Comm(0, 1, broken, all_gather, spec="SQUALL_COMPRESS=fp16 SQUALL_MIN_RANKS=1 SQUALL_MIN_BYTES=0")
try:
    bad.all_reduce(ctypes.addressof(x), ctypes.addressof(y), n, squall.FLOAT32, squall.SUM, key=1)
    check(False, "a failing collective was not raised")
except squall.SquallError as e:
    check(isinstance(e.__cause__, ValueError), "not chained to the collective's exception: %r" % e.__cause__)
    check("allReduce" in str(e), "the error names no collective: %s" % e)
    check("the network is down" in str(e), "the error does not name the collective's exception: %s" % e)
sys.exit(1 if fails else 0)
PY

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# bench-reducescatter.sh - squall-bench --coll reducescatter on 2 and 4
# ranks, codecs none, fp16 and int8: the JSON names the collective, its
# sizes are nccl-tests' reduce_scatter_perf's (the send buffer per rank,
# rounded down to a multiple of 4P elements; count = the elements each
# rank receives), busbw = algbw*(P-1)/P, the plain rows' wire is a ring
# reduce-scatter's (P-1)/P of the size and the codecs' a half (fp16) and a
# quarter (int8) of it, every rank's block is within the codec's bound,
# and a bad --coll, or a type squall does not compress in a reduce-scatter,
# is refused with exit status 2 naming it. About 15 s.
#
# Bounds (relative L2 of each rank's block against the exact sum, error
# feedback on): none 1e-6 (a float sum of P values rounds P-1 times by
# 2^-24); fp16 3e-3 and int8 0.1 as in bench-smoke.sh (a reduce-scatter
# encodes once, the all-reduce's bounds twice, so these hold with room),
# and int8 at least 1e-4 (it did quantise).
set -u

if test -z "${MPIEXEC:-}" || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
  echo "SKIP: no MPI launcher (mpiexec): squall-bench runs under MPI" >&2
  exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 is needed to check the JSON" >&2
  exit 77
fi
run="$SQUALL_BUILDDIR/tests/run-mpi.sh"
bench="$SQUALL_BUILDDIR/squall-bench"
export SQUALL_TEST_TIMEOUT="${SQUALL_TEST_TIMEOUT:-120}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-rs.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() {
  echo "FAIL: $*" >&2
  fail=1
}

# -b 1000 does not divide into 4P floats on either rank count: rounded down
for p in 2 4; do
  "$run" $p "$bench" --coll reducescatter -b 1000 -e 64000 -f 8 -n 3 -w 2 -C none,fp16,int8 \
    -J "$tmp/rs$p.json" --no-progress >"$tmp/rs$p.txt" 2>&1
  rc=$?
  cat "$tmp/rs$p.txt"
  test $rc -eq 0 || bad "--coll reducescatter on $p ranks: exit $rc"
  grep -q "^# squall-bench: reduce-scatter" "$tmp/rs$p.txt" || bad "$p ranks: the header does not name the reduce-scatter"
  grep -q "PMPI_Reduce_scatter_block" "$tmp/rs$p.txt" || bad "$p ranks: the header does not name the plain call"
  python3 - "$tmp/rs$p.json" "$p" <<'EOF' || bad "--coll reducescatter on $p ranks: the JSON is wrong"
import json, math, sys
rows, p = json.load(open(sys.argv[1])), int(sys.argv[2])
errors = []
def need(cond, what):
    if not cond: errors.append(what)
# nccl-tests' reduce_scatter_perf: recvcount = count/(4P)*4
sizes = []
for s in (1000, 8000, 64000):
    block = max(s // 4 // (4 * p) * 4, 4)
    sizes.append(block * p * 4)
codecs = ["none", "fp16", "int8"]
bounds = {"none": (0, 1e-6), "fp16": (0, 3e-3), "int8": (1e-4, 0.1)}
paths = {"none": "plain", "fp16": "two-phase", "int8": "two-phase"}
codes = {"fp16": 2, "int8": 4}  # bytes in per byte on the wire, against the plain ring
need(len(rows) == len(sizes) * len(codecs), "expected %d rows, got %d" % (len(sizes) * len(codecs), len(rows)))
by = {(r["size_bytes"], r["codec"]): r for r in rows}
for s in sizes:
    for c in codecs:
        r = by.get((s, c))
        tag = "%s at %d B on %d ranks" % (c, s, p)
        if r is None:
            errors.append("no row for " + tag); continue
        need(r["coll"] == "reducescatter", tag + ": coll %r" % r.get("coll"))
        need(r["ranks"] == p, tag + ": ranks %r" % r["ranks"])
        need(r["count"] == s // 4 // p, tag + ": count %r, expected the %d floats each rank receives" % (r["count"], s // 4 // p))
        need(r["time_us"] > 0 and math.isclose(r["algbw_gbs"], s / r["time_us"] / 1e3, rel_tol=1e-3), tag + ": algbw != size/time")
        need(math.isclose(r["busbw_gbs"], r["algbw_gbs"] * (p - 1) / p, rel_tol=1e-3), tag + ": busbw != algbw*(P-1)/P")
        lo, hi = bounds[c]
        need(r["rel_err"] is not None and lo <= r["rel_err"] <= hi, tag + ": rel_err %r outside [%g, %g]" % (r["rel_err"], lo, hi))
        need(r["path"] == paths[c], tag + ": path %r, expected %r" % (r["path"], paths[c]))
        need(r["pass_reason"] is None, tag + ": pass_reason %r" % r["pass_reason"])
        need(r["consistent"] is None, tag + ": consistent %r, where the ranks' blocks differ by design" % r["consistent"])
        need(r["wrong"] is False, tag + ": the bench flagged it wrong")
        ring = (p - 1) * s // p
        if c == "none":
            need(r["wire_bytes"] == ring, tag + ": wire %r, expected a ring reduce-scatter's %d" % (r["wire_bytes"], ring))
        elif s == sizes[-1]:  # whole buckets: the codes and their scales
            got = ring / r["wire_bytes"]
            need(codes[c] * 0.95 <= got <= codes[c] * 1.001, tag + ": ring / wire %.3f, expected about %d" % (got, codes[c]))
if errors:
    print("\n".join(errors), file=sys.stderr)
    sys.exit(1)
EOF
done

# the all-reduce stays the default, named as such, with its own busbw
"$run" 2 "$bench" -b 4K -e 4K -n 1 -w 0 -C none -J "$tmp/ar.json" --no-progress >"$tmp/ar.txt" 2>&1 ||
  bad "the default collective: exit $?"
python3 -c 'import json, math, sys
r = json.load(open(sys.argv[1]))[0]
sys.exit(0 if r["coll"] == "allreduce" and r["count"] == 1024 and math.isclose(r["busbw_gbs"], r["algbw_gbs"], rel_tol=1e-3)
         else 1)' "$tmp/ar.json" || bad "the default is not the all-reduce: $(cat "$tmp/ar.json")"

# ---- refusals: exit status 2, naming the value
expect_error() { # PATTERN ARGS...
  pattern=$1
  shift
  "$run" 2 "$bench" "$@" >"$tmp/e.txt" 2>&1
  rc=$?
  if test $rc -ne 2 || ! grep -q -- "$pattern" "$tmp/e.txt"; then
    bad "squall-bench $*: exit $rc, expected 2 and '$pattern'"
    cat "$tmp/e.txt" >&2
  fi
}
expect_error "--coll 'reduce' is invalid: accepted are allreduce and reducescatter" --coll reduce
expect_error "option '--coll' needs a value" --coll
expect_error "type 'half' is not benchmarked with --coll reducescatter" --coll reducescatter -d float,half
exit $fail

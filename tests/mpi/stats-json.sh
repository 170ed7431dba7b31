#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# SQUALL_STATS: one JSON file per process, every %r replaced by the rank, with the
# documented keys and counts that add up; SQUALL_DEBUG=INFO logs a summary
# per communicator at teardown.
set -eu
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
SQUALL_STATS="$dir/stats.%r-%r.json" SQUALL_DEBUG=INFO \
  "$SQUALL_BUILDDIR/tests/run-mpi.sh" 2 -x SQUALL_STATS -x SQUALL_DEBUG \
  "$SQUALL_BUILDDIR/tests/mpi/test_engine_mpi" > "$dir/log" 2>&1 || { cat "$dir/log"; exit 1; }
grep -q "squall INFO communicator rank 0/2" "$dir/log" || { echo "no INFO summary at teardown"; cat "$dir/log"; exit 1; }
python3 - "$dir" <<'PY'
import json, sys, os
d = sys.argv[1]
for r in (0, 1):
    s = json.load(open(os.path.join(d, "stats.%d-%d.json" % (r, r))))  # every %r replaced
    for k in ("calls", "compressed_calls", "passthrough_calls", "bytes_in", "bytes_wire", "codec_seconds", "passthrough", "headers"):
        assert k in s, "missing key %s" % k
    assert s["rank"] == r, s
    assert s["calls"] == s["compressed_calls"] + s["passthrough_calls"], s
    assert s["passthrough_calls"] == sum(s["passthrough"].values()), s
    assert s["compressed_calls"] > 0 and s["bytes_wire"] > 0, s
    assert s["compressed_calls"] <= s["headers"] <= s["calls"], s  # at most one per call; every compressed call has one
print("stats json: 2 passed, 0 failed")
PY

# A two-level call (4 ranks, 2 nodes faked through MPI_COMM_TYPE_SHARED)
# that runs its shard across nodes in chunks counts them: pipelined_calls
# and pipeline_chunks, as a flat call's do (they read 0 before).
if test -x "$SQUALL_BUILDDIR/tests/mpi/test_audit_mpi"; then
  SQUALL_STATS="$dir/two-level.%r.json" AUDIT_FAKE_NODES=1 CK_RUN_CASE=chunks \
    "$SQUALL_BUILDDIR/tests/run-mpi.sh" 4 -x SQUALL_STATS -x AUDIT_FAKE_NODES -x CK_RUN_CASE \
    "$SQUALL_BUILDDIR/tests/mpi/test_audit_mpi" > "$dir/log3" 2>&1 || { cat "$dir/log3"; exit 1; }
  for r in 0 1 2 3; do
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))
assert s["two_level_calls"] >= 1 and s["pipelined_calls"] >= 1 and s["pipeline_chunks"] >= 2 * s["pipelined_calls"], s' \
      "$dir/two-level.$r.json" || { echo "rank $r: a two-level call's chunks are not counted"; exit 1; }
  done
  echo "stats json: a two-level call's chunks are counted"
fi

# A process whose only all-reduce MPI refuses (aliased buffers, before
# anything reaches the engine) still writes its file, with no calls in it.
py=
for c in ${PYTHON3:-} /usr/bin/python3 python3; do
  if "$c" -c 'import mpi4py' 2>/dev/null; then py=$c; break; fi
done
if test -z "$py"; then
  echo "note: no python3 with mpi4py: the refused-call case is skipped"
  exit 0
fi
lib=$SQUALL_BUILDDIR/.libs/libsquall-preload-mpi.so
if ldd "$lib" 2>/dev/null | grep -q libasan; then # the sanitizer build: python3 has no ASan runtime to come first
  echo "note: sanitizer build: the refused-call case (python3 under LD_PRELOAD) is skipped"
  exit 0
fi
SQUALL_STATS="$dir/refused.%r.json" LD_PRELOAD=$lib "$SQUALL_BUILDDIR/tests/run-mpi.sh" 2 -x SQUALL_STATS -x LD_PRELOAD \
  "$py" -c 'from mpi4py import MPI
import array
b = array.array("f", [1.0, 2.0])
try:
    MPI.COMM_WORLD.Allreduce(b, b)
except MPI.Exception as e:
    assert e.Get_error_class() == MPI.ERR_BUFFER' > "$dir/log2" 2>&1 || { cat "$dir/log2"; exit 1; }
for r in 0 1; do
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["calls"] == 0 and s["rank"] == int(sys.argv[2]), s' \
    "$dir/refused.$r.json" "$r" || { echo "no SQUALL_STATS file of rank $r after a refused call"; cat "$dir/log2"; exit 1; }
done
echo "stats json: a process with a refused call only writes its file"

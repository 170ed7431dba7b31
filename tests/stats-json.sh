#!/bin/sh
# SQUALL_STATS: one JSON file per process, every %r replaced by the rank, with the
# documented keys and counts that add up; SQUALL_DEBUG=INFO logs a summary
# per communicator at teardown.
set -eu
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
SQUALL_STATS="$dir/stats.%r-%r.json" SQUALL_DEBUG=INFO \
  "$SQUALL_BUILDDIR/tests/run-mpi.sh" 2 -x SQUALL_STATS -x SQUALL_DEBUG \
  "$SQUALL_BUILDDIR/tests/test_engine_mpi" > "$dir/log" 2>&1 || { cat "$dir/log"; exit 1; }
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

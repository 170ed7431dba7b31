#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""launch.py N SCRIPT [ARGS...]: runs SCRIPT on N local processes as
torch.distributed workers (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set,
as torchrun would; Debian's torchrun fails on Python 3.11). Exits with the
first non-zero status of a worker (77, a skip, only if every worker
skipped), or 1 when one has not finished within SQUALL_TEST_TIMEOUT
seconds (default 600)."""
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    n, script, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    port = free_port()
    procs = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        procs.append(subprocess.Popen([sys.executable, script] + args, env=env))
    deadline = time.time() + float(os.environ.get("SQUALL_TEST_TIMEOUT", "600"))
    codes = [None] * n
    while None in codes:
        for i, p in enumerate(procs):
            if codes[i] is None:
                codes[i] = p.poll()
        if any(c not in (None, 0) for c in codes):  # one failed: the others may wait for it forever
            time.sleep(5)
            for i, p in enumerate(procs):
                if p.poll() is None:
                    p.kill()
                codes[i] = p.wait()
            break
        if time.time() > deadline:
            print("launch.py: a worker ran past %s s; killing them all" % os.environ.get("SQUALL_TEST_TIMEOUT", "600"),
                  file=sys.stderr)
            for p in procs:
                p.kill()
            return 1
        time.sleep(0.05)
    if all(c == 77 for c in codes):
        return 77
    bad = [c for c in codes if c not in (0,)]
    return bad[0] if bad else 0


if __name__ == "__main__":
    sys.exit(main())

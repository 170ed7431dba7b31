#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The squall DDP comm hook (python/squall/torch.py) on 2, 4 and 3 CPU
# processes with gloo: tests/torch/ddp_hook.py's cases. Needs PyTorch
# (Debian: python3-torch, for /usr/bin/python3); skips (77) without it.
set -u
py=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch, torch.distributed' >/dev/null 2>&1; then
    py=$p
    break
  fi
done
if [ -z "$py" ]; then
  echo "ddp-hook.sh: skipped: no python3 here imports torch (Debian: apt-get install python3-torch)"
  exit 77
fi
export PYTHONPATH="$SQUALL_SRCDIR/python${PYTHONPATH:+:$PYTHONPATH}"
export SQUALL_LIBRARY="$SQUALL_BUILDDIR/.libs/libsquall.so"
export SQUALL_TEST_TIMEOUT=${SQUALL_TEST_TIMEOUT:-300}
run() {
  echo "ddp-hook.sh: $*"
  "$py" "$SQUALL_SRCDIR/tests/torch/launch.py" "$@" || exit $?
}
for n in 2 4; do
  run "$n" "$SQUALL_SRCDIR/tests/torch/ddp_hook.py"
  run "$n" "$SQUALL_SRCDIR/tests/torch/ddp_hook.py" someranks # alone: it breaks its process group
done
# 3: DDP's own all-reduce scales by 1/3 before its sum, and a pass-through
# must give those bits too (conservation needs a power of two: not here)
run 3 "$SQUALL_SRCDIR/tests/torch/ddp_hook.py" plain mixed identical unused

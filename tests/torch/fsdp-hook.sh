#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The squall FSDP comm hook (python/squall/torch.py, fsdp_comm_hook) on 2
# and 4 CPU processes with gloo: tests/torch/fsdp_hook.py's cases. Needs
# PyTorch (Debian: python3-torch, for /usr/bin/python3); skips (77)
# without it.
set -u
py=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch, torch.distributed' >/dev/null 2>&1; then
    py=$p
    break
  fi
done
if [ -z "$py" ]; then
  echo "fsdp-hook.sh: skipped: no python3 here imports torch (Debian: apt-get install python3-torch)"
  exit 77
fi
export PYTHONPATH="$SQUALL_SRCDIR/python${PYTHONPATH:+:$PYTHONPATH}"
export SQUALL_LIBRARY="$SQUALL_BUILDDIR/.libs/libsquall.so"
export SQUALL_TEST_TIMEOUT=${SQUALL_TEST_TIMEOUT:-300}
for n in 2 4; do
  echo "fsdp-hook.sh: $n processes"
  "$py" "$SQUALL_SRCDIR/tests/torch/launch.py" "$n" "$SQUALL_SRCDIR/tests/torch/fsdp_hook.py" || exit $?
done

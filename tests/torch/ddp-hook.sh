#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The squall DDP comm hook (python/squall/torch.py) on 2, 4 and 3 CPU
# processes with gloo: tests/torch/ddp_hook.py's cases. Needs PyTorch
# (Debian: python3-torch, for /usr/bin/python3); skips (77) without it.
set -u
. "$SQUALL_SRCDIR/tests/torch/torch-env.sh" # py, the environment, launch
for n in 2 4; do
  launch "$n" "$SQUALL_SRCDIR/tests/torch/ddp_hook.py"
  launch "$n" "$SQUALL_SRCDIR/tests/torch/ddp_hook.py" someranks # alone: it breaks its process group
done
# 3: DDP's own all-reduce scales by 1/3 before its sum, and a pass-through
# must give those bits too (conservation needs a power of two: not here)
launch 3 "$SQUALL_SRCDIR/tests/torch/ddp_hook.py" plain mixed identical unused

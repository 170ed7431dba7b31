#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The squall FSDP comm hook (python/squall/torch.py, fsdp_comm_hook) on 2
# and 4 CPU processes with gloo: tests/torch/fsdp_hook.py's cases. Needs
# PyTorch (Debian: python3-torch, for /usr/bin/python3); skips (77)
# without it.
set -u
. "$SQUALL_SRCDIR/tests/torch/torch-env.sh" # py, the environment, launch
for n in 2 4; do launch "$n" "$SQUALL_SRCDIR/tests/torch/fsdp_hook.py"; done

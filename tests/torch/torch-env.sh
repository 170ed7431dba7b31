# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=sh
# torch-env.sh - sourced by the PyTorch hook tests (ddp-hook.sh,
# fsdp-hook.sh), which run the same way: sets py to a python3 that imports
# torch and torch.distributed (/usr/bin/python3 first: Debian's
# python3-torch), or skips the test (77) saying so; the squall package of
# this tree and the library of this build; SQUALL_TEST_TIMEOUT, 300 s
# unless set. launch N SCRIPT [CASE...] runs SCRIPT on N processes
# through launch.py and ends the test with its status where it fails.
py=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch, torch.distributed' >/dev/null 2>&1; then
    py=$p
    break
  fi
done
if [ -z "$py" ]; then
  echo "${0##*/}: skipped: no python3 here imports torch (Debian: apt-get install python3-torch)"
  exit 77
fi
export PYTHONPATH="$SQUALL_SRCDIR/python${PYTHONPATH:+:$PYTHONPATH}"
export SQUALL_LIBRARY="$SQUALL_BUILDDIR/.libs/libsquall.so"
export SQUALL_TEST_TIMEOUT="${SQUALL_TEST_TIMEOUT:-300}"
launch() {
  echo "${0##*/}: $*"
  "$py" "$SQUALL_SRCDIR/tests/torch/launch.py" "$@" || exit $?
}

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The engine suite on one rank with SQUALL_MIN_RANKS=1: the whole compressed
# path runs without a peer (how one GPU proves the device path).
SQUALL_MIN_RANKS=1 exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 1 -x SQUALL_MIN_RANKS "$SQUALL_BUILDDIR/tests/test_engine_mpi"

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# 3 MPI ranks with SQUALL_RANKS_PER_NODE=2: nodes of 2 + 1 ranks are uneven,
# so every compressed call must run flat (and say why).
SQUALL_RANKS_PER_NODE=2 exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 3 -x SQUALL_RANKS_PER_NODE \
  "$SQUALL_BUILDDIR/tests/test_hierarchy_mpi"

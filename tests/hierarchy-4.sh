#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The two-level all-reduce on 4 MPI ranks as 2 nodes x 2 ranks.
SQUALL_RANKS_PER_NODE=2 exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 4 -x SQUALL_RANKS_PER_NODE \
  "$SQUALL_BUILDDIR/tests/test_hierarchy_mpi"

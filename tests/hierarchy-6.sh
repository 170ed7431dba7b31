#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The two-level all-reduce on 6 MPI ranks as 2 nodes x 3 ranks: a node
# size that is not a power of two (3-step ring reduce-scatter, counts not
# divisible by 3).
SQUALL_RANKS_PER_NODE=3 exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 6 -x SQUALL_RANKS_PER_NODE \
  "$SQUALL_BUILDDIR/tests/test_hierarchy_mpi"

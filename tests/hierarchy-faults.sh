#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# One rank's local failures around the two-level all-reduce (allocations,
# the node reduce-scatter's ring), on 4 MPI ranks as 2 nodes x 2 ranks:
# every rank must pass the call through together, never wait alone.
SQUALL_RANKS_PER_NODE=2 exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 4 -x SQUALL_RANKS_PER_NODE \
  "$SQUALL_BUILDDIR/tests/test_hierarchy_faults"

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The standing adversarial suite of the MPI path on 4 ranks, which a faked
# MPI_COMM_TYPE_SHARED puts on 2 nodes of 2 for squall's own node discovery.
AUDIT_FAKE_NODES=1 exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 4 -x AUDIT_FAKE_NODES \
  "$SQUALL_BUILDDIR/tests/test_audit_mpi"

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The standing adversarial suite of the MPI path on 2 ranks (one node).
exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 2 "$SQUALL_BUILDDIR/tests/test_audit_mpi"

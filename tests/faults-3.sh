#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The failure-policy suite (injected faults) on 3 MPI ranks.
exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 3 "$SQUALL_BUILDDIR/tests/test_faults_mpi"

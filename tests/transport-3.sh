#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The MPI transport's blocks over INT_MAX bytes (in pieces), on 3 MPI ranks.
exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 3 "$SQUALL_BUILDDIR/tests/test_transport_mpi"

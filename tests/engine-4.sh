#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The engine suite on 4 MPI ranks.
exec "$SQUALL_BUILDDIR/tests/run-mpi.sh" 4 "$SQUALL_BUILDDIR/tests/test_engine_mpi"

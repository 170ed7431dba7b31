#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# configure finds another MPI through its compiler wrapper: where MPICH is
# installed beside the default MPI (Debian: mpich libmpich-dev, whose
# wrapper is mpicc.mpich), a build in a temporary folder with
# MPICC=mpicc.mpich (CUDA left out, to be quick) makes libsquall-mpi.so
# against libmpich, and an MPI program linked with it sums on 2 ranks under
# mpirun.mpich. Skips (77) without MPICH.
set -u
# a make of its own, not one of the outer make check's: its MAKEFLAGS carry
# the outer TEST_LOGS, which a make check here would run (this test too)
unset MAKEFLAGS MFLAGS MAKELEVEL
s=$SQUALL_SRCDIR
command -v mpicc.mpich > /dev/null 2>&1 || { echo "SKIP: no mpicc.mpich (Debian: mpich libmpich-dev)"; exit 77; }
launcher=$(command -v mpiexec.mpich || command -v mpirun.mpich) || { echo "SKIP: no mpiexec.mpich"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-mpich.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
"$s/configure" --without-cuda MPICC=mpicc.mpich --with-python-dir="$tmp/py" > configure.log 2>&1 ||
  { tail -30 configure.log; echo "FAIL: configure MPICC=mpicc.mpich"; exit 1; }
grep -q "MPI \.* yes (MPICH's -compile_info of .*mpicc.mpich" configure.log ||
  { tail -15 configure.log; echo "FAIL: configure's summary does not name MPICH's wrapper"; exit 1; }
grep -q '^MPI_LIBS = .*-lmpich' Makefile || { grep '^MPI_' Makefile; echo "FAIL: MPI_LIBS does not name libmpich"; exit 1; }
# the library and one program: the whole tree would take minutes
make -j"${SQUALL_TEST_JOBS:-2}" libsquall.la libsquall-mpi.la > make.log 2>&1 || { tail -30 make.log; echo "FAIL: make libsquall-mpi.la"; exit 1; }
readelf -d .libs/libsquall-mpi.so | grep -q 'NEEDED.*libmpich' || { readelf -d .libs/libsquall-mpi.so; echo "FAIL: libsquall-mpi.so does not need libmpich"; exit 1; }
mpicc.mpich -o consume_mpi "$s/tests/tree/consume_mpi.c" -I"$s/include" -L.libs -lsquall-mpi -lsquall \
  -Wl,-rpath,"$tmp/.libs" > cc.log 2>&1 || { cat cc.log; echo "FAIL: mpicc.mpich consume_mpi.c -lsquall-mpi -lsquall"; exit 1; }
timeout 120 "$launcher" -n 2 ./consume_mpi > run.log 2>&1 || { cat run.log; echo "FAIL: $launcher -n 2 consume_mpi"; exit 1; }
cat run.log
grep -q '^consume_mpi: 2 ranks' run.log || { echo "FAIL: consume_mpi said nothing"; exit 1; }
echo "build-mpich: libsquall-mpi built with mpicc.mpich, 2 ranks under $(basename "$launcher"): passed"

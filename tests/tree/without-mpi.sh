#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# configure --without-mpi (and --without-cuda, to be quick) in a temporary
# folder builds everything that needs no MPI: libsquall.so (needing no MPI),
# squall-info, the host codecs' benchmark; the summary says what was left
# out, nothing of MPI is built or installed, and make check skips (77) a
# test that needs MPI while it runs one that does not.
set -u
# a make of its own, not one of the outer make check's: its MAKEFLAGS carry
# the outer TEST_LOGS, which a make check here would run (this test too)
unset MAKEFLAGS MFLAGS MAKELEVEL
s=$SQUALL_SRCDIR
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-nompi.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }
"$s/configure" --without-mpi --without-cuda --with-python-dir="$tmp/py" > configure.log 2>&1 ||
  { tail -30 configure.log; echo "FAIL: configure --without-mpi"; exit 1; }
grep -q 'MPI \.* no (--without-mpi)' configure.log || bad "configure's summary does not say MPI is left out"
grep -q 'left out: libsquall-mpi' configure.log || bad "configure's summary does not say what is left out"
make -j"${SQUALL_TEST_JOBS:-2}" > make.log 2>&1 || { tail -30 make.log; echo "FAIL: make in a build --without-mpi"; exit 1; }
for f in .libs/libsquall.so squall-info squall-codec-bench; do test -e "$f" || bad "$f was not built"; done
for f in .libs/libsquall-mpi.so .libs/libsquall-preload-mpi.so squall-bench squall-train; do
  test ! -e "$f" || bad "$f was built without MPI"
done
readelf -d .libs/libsquall.so | grep -E 'NEEDED.*(libmpi|libnccl|libcudart)' && bad "libsquall.so needs MPI, NCCL or CUDA"
./squall-info -c > info.log 2>&1 || { cat info.log; bad "squall-info does not run"; }
make install DESTDIR="$tmp/dest" > install.log 2>&1 || { tail -20 install.log; bad "make install"; }
# (the files' own names: the temporary folder's path may hold "mpi" too)
(cd "$tmp/dest" && find . -name '*mpi*' ! -path "*${tmp##*/}*") | grep . && bad "an MPI file was installed"
# only the program the plain test needs: not every test program
make check TESTS="tests/mpi/engine-2.mpi tests/mpi/silent.sh tests/tree/header_squall" \
  check_PROGRAMS=tests/tree/header_squall check_LTLIBRARIES= > check.log 2>&1 ||
  { tail -20 check.log; bad "make check of a skipped and a plain test"; }
grep -q '^SKIP: tests/mpi/engine-2.mpi' check.log || bad "tests/mpi/engine-2.mpi was not skipped"
grep -q '^SKIP: tests/mpi/silent.sh' check.log || bad "tests/mpi/silent.sh was not skipped"
grep -q '^PASS: tests/tree/header_squall' check.log || bad "tests/tree/header_squall did not pass"
grep -q 'needs MPI, and this build was configured --without-mpi' tests/mpi/silent.log || bad "the skip does not say why"
test "$fails" = 0 && echo "without-mpi: built, installed and checked without MPI: passed"
test "$fails" = 0

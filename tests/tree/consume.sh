#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# squall as another project uses it: make install (DESTDIR), the install
# moved elsewhere (the CMake package must find itself), then a program that
# uses only squall.h/squall_coll.h and an MPI program that calls
# squallMpiAllreduce, each built through CMake (find_package(squall)) and
# through pkg-config, and run with an empty LD_LIBRARY_PATH. The core
# program must need no MPI, NCCL or CUDA runtime (its NEEDED, and ldd).
set -u
s=$SQUALL_SRCDIR
b=$SQUALL_BUILDDIR
command -v cmake > /dev/null 2>&1 || { echo "SKIP: no cmake (Debian: cmake)"; exit 77; }
command -v pkg-config > /dev/null 2>&1 || { echo "SKIP: no pkg-config"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-consume.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }
# make check installs once before the tests run (Makefile.am says why).
staged=$b/staged-install
test -d "$staged" || { echo "FAIL: no install in $staged (make check makes it: make tests-staged-install)"; exit 1; }
prefix=$(sed -n 's/^prefix = //p' "$b/Makefile")
libdir=$(sed -n 's/^libdir = //p' "$b/Makefile" | sed "s|\${exec_prefix}|$prefix|")
case $libdir in "$prefix"/*) ;; *) echo "SKIP: libdir $libdir is not below the prefix $prefix"; exit 77 ;; esac
cp -a "$staged$prefix" "$tmp/moved" || exit 1
root=$tmp/moved
lib=$root${libdir#"$prefix"}
have_mpi=no
grep -q '^#define HAVE_MPI 1' "$b/config.h" && have_mpi=yes
cc=$(sed -n 's/^CC = //p' "$b/Makefile")

# run NAME PROGRAM...: with an empty LD_LIBRARY_PATH
run() {
  what=$1; shift
  env -u LD_LIBRARY_PATH LD_LIBRARY_PATH= "$@" > "$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; bad "$what does not run"; }
}
# core_only PROGRAM: libsquall and nothing of MPI, NCCL or CUDA
core_only() {
  needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  case " $needed " in *" libsquall.so."*) ;; *) bad "$1 does not need libsquall.so (NEEDED: $needed)" ;; esac
  loaded=$(env -u LD_LIBRARY_PATH LD_LIBRARY_PATH= ldd "$1" 2>&1)
  echo "$loaded" | grep -E 'libmpi|libnccl|libcudart|libcuda\.|not found' && bad "$1 loads MPI, NCCL or CUDA, or misses a library"
}

# CMake, from the moved install.
mkdir -p "$tmp/cm"
cat > "$tmp/cm/CMakeLists.txt" <<CMEOF
cmake_minimum_required(VERSION 3.13)
project(consume C)
find_package(squall 0.1 REQUIRED)
add_executable(consume_core "$s/tests/tree/consume_core.c")
target_link_libraries(consume_core squall::squall)
if(squall_mpi_FOUND)
  add_executable(consume_mpi "$s/tests/tree/consume_mpi.c")
  target_link_libraries(consume_mpi squall::mpi)
endif()
CMEOF
if ! { cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_C_COMPILER="${cc%% *}" -DCMAKE_PREFIX_PATH="$root" &&
       cmake --build "$tmp/cm/build"; } > "$tmp/cmake.log" 2>&1; then
  cat "$tmp/cmake.log"; bad "the CMake project with find_package(squall)"
else
  run "the core program (CMake)" "$tmp/cm/build/consume_core"
  core_only "$tmp/cm/build/consume_core"
  if test $have_mpi = yes; then
    test -x "$tmp/cm/build/consume_mpi" || bad "find_package(squall) gave no squall::mpi in a build with MPI"
    run "the MPI program (CMake) on 2 ranks" "$b/tests/run-mpi.sh" 2 "$tmp/cm/build/consume_mpi"
  fi
fi
# A component that this build lacks is refused, saying why.
if test $have_mpi = no; then
  sed -i 's/find_package(squall 0.1 REQUIRED)/find_package(squall 0.1 REQUIRED COMPONENTS mpi)/' "$tmp/cm/CMakeLists.txt"
  cmake -S "$tmp/cm" -B "$tmp/cm/build2" -DCMAKE_PREFIX_PATH="$root" > "$tmp/cmake2.log" 2>&1 &&
    bad "find_package(squall COMPONENTS mpi) succeeded in a build without MPI"
  grep -q 'built without mpi' "$tmp/cmake2.log" || { cat "$tmp/cmake2.log"; bad "find_package(squall COMPONENTS mpi) does not say why"; }
fi

# pkg-config, as the README says (--define-prefix: the install was moved).
export PKG_CONFIG_PATH="$lib/pkgconfig"
pc() { pkg-config --define-prefix "$@"; }
# shellcheck disable=SC2046
$cc -o "$tmp/pc_core" "$s/tests/tree/consume_core.c" $(pc --cflags --libs squall) -Wl,-rpath,"$lib" \
  > "$tmp/pc.log" 2>&1 || { cat "$tmp/pc.log"; bad "cc consume_core.c \$(pkg-config --cflags --libs squall)"; }
test -x "$tmp/pc_core" && { run "the core program (pkg-config)" "$tmp/pc_core"; core_only "$tmp/pc_core"; }
if test $have_mpi = yes; then
  # shellcheck disable=SC2046
  $cc -o "$tmp/pc_mpi" "$s/tests/tree/consume_mpi.c" $(pc --cflags --libs squall-mpi) -Wl,-rpath,"$lib" \
    > "$tmp/pc.log" 2>&1 || { cat "$tmp/pc.log"; bad "cc consume_mpi.c \$(pkg-config --cflags --libs squall-mpi)"; }
  test -x "$tmp/pc_mpi" && run "the MPI program (pkg-config) on 2 ranks" "$b/tests/run-mpi.sh" 2 "$tmp/pc_mpi"
fi
test "$fails" = 0 && echo "consume: CMake and pkg-config, core$(test $have_mpi = yes && echo ' and MPI'): passed"
test "$fails" = 0

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# quickstart.sh - set up, build and run squall on a Debian 12 machine.
#   tools/quickstart.sh bench [squall-bench args...]  build, then the benchmark on local ranks
#     (it runs in ./build: relative paths in the arguments are relative to it)
#     (SQUALL_LINK=1gbit|10gbit|none: the emulated link; SQUALL_CLUSTER=2x2: emulated nodes)
#   tools/quickstart.sh test                          build, then `make check`
#   tools/quickstart.sh build                         set up and build only
# Installs missing Debian packages with apt-get (as root, or through sudo),
# builds out of tree in ./build, and uses the CUDA toolkit when
# /usr/local/cuda (or $CUDA_HOME) has one.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
what=${1:-bench}
# the word first: a typo must not install packages and build before it is told
case $what in
  bench | test | build) ;;
  -h | --help) echo "usage: tools/quickstart.sh bench|test|build [args]"; exit 0 ;;
  *) echo "usage: tools/quickstart.sh bench|test|build [args] ('$what' is none of them)" >&2; exit 2 ;;
esac
[ $# -gt 0 ] && shift

packages="build-essential autoconf automake libtool pkg-config libopenmpi-dev openmpi-bin \
libzstd-dev check gnuplot-nox python3 python3-numpy python3-mpi4py jq iproute2 procps util-linux"
# the tests also run the PyTorch comm hook (tests/torch): Debian's PyTorch;
# build another MPI beside the default one (tests/tree/build-mpich.sh: MPICH
# installs as mpicc.mpich and leaves the default alternatives alone), and
# consume an install through CMake (tests/tree/consume.sh)
[ "$what" = test ] && packages="$packages python3-torch mpich libmpich-dev cmake"

missing=
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "quickstart: installing Debian packages:$missing"
  sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
fi

jobs=$(nproc 2>/dev/null || echo 2)
[ -x configure ] && [ configure -nt configure.ac ] && [ configure -nt Makefile.am ] || autoreconf -fi >/dev/null 2>&1
mkdir -p build
cd build
if [ ! -f Makefile ]; then
  cuda=; [ -n "${CUDA_HOME:-}" ] && cuda="--with-cuda=$CUDA_HOME"
  ../configure $cuda ${SQUALL_CONFIGURE_FLAGS:-}
fi
make -j"$jobs"

# Open MPI refuses root without these; a small machine needs oversubscription.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

case $what in
  build) ;;
  test) make -j"$jobs" check || { cat test-suite.log 2>/dev/null | tail -100; exit 1; } ;;
  bench)
    # On one machine the ranks talk through shared memory, faster than any
    # NIC, and compression cannot pay. By default the benchmark runs over an
    # emulated 1 Gbit/s Ethernet link (SQUALL_LINK=none for plain shared
    # memory, or another tc rate such as 10gbit).
    ranks=${SQUALL_RANKS:-4}
    link=${SQUALL_LINK:-1gbit}
    # the arguments stay as given ("$@": -S "TOPK_VALUES=fp16 ZSTD=3" is one)
    [ $# -gt 0 ] || set -- -b 1M -e 64M -f 4 -n 5 -w 5 --plot squall-bench.png -J squall-bench.json
    args=$*
    # SQUALL_CLUSTER=NxR: N emulated nodes of R ranks, each node's NIC
    # limited to SQUALL_LINK (tools/cluster.sh), instead of one shared link.
    if [ -n "${SQUALL_CLUSTER:-}" ]; then
      n=${SQUALL_CLUSTER%x*} r=${SQUALL_CLUSTER#*x}
      [ "$link" != none ] || link=10gbit
      echo "quickstart: tools/cluster.sh --nodes $n --ranks-per-node $r --rate $link -- ./squall-bench $args"
      exec "$top/tools/cluster.sh" --nodes "$n" --ranks-per-node "$r" --rate "$link" -- ./squall-bench "$@"
    fi
    if [ "$link" != none ] && "$top/tools/ethernet.sh" --rate "$link" -- true >/dev/null 2>&1; then
      echo "quickstart: tools/ethernet.sh --rate $link -- mpirun -n $ranks ./squall-bench $args"
      exec "$top/tools/ethernet.sh" --rate "$link" -- mpirun -n "$ranks" --oversubscribe ./squall-bench "$@"
    fi
    [ "$link" != none ] && echo "quickstart: cannot emulate a $link link here (tools/ethernet.sh needs root or user namespaces); running on shared memory"
    echo "quickstart: mpirun -n $ranks ./squall-bench $args"
    exec mpirun -n "$ranks" --oversubscribe ./squall-bench "$@" ;;
  *) echo "usage: tools/quickstart.sh bench|test|build [args]" >&2; exit 2 ;;
esac

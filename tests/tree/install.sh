#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# make install to a folder (DESTDIR), then what a user runs from
# there, with an empty LD_LIBRARY_PATH and no ldconfig: squall-info,
# squall-run --mpi -- mpirun -n 2 squall-bench (whose summary says the
# calls were compressed), the licence beside the docs; and make uninstall
# leaves nothing behind, folders included.
set -u
b=$SQUALL_BUILDDIR
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/root
# make check installs once before the tests run (Makefile.am says why);
# this test examines a copy and uninstalls from it.
staged=$b/staged-install
test -d "$staged" || { echo "FAIL: no install in $staged (make check makes it: make tests-staged-install)"; exit 1; }
cp -a "$staged" "$dest" || { echo "FAIL: copying $staged"; exit 1; }
prefix=$(sed -n 's/^prefix = //p' "$b/Makefile")
bin=$dest$prefix/bin
fails=0
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }

# The programs find libsquall.so through their RUNPATH, relative to themselves.
for p in squall-info squall-bench; do
  readelf -d "$bin/$p" 2>/dev/null | grep -q 'R.*PATH.*\$ORIGIN' || bad "$p has no \$ORIGIN-relative RUNPATH"
done
env -u LD_LIBRARY_PATH LD_LIBRARY_PATH= "$bin/squall-info" -c > "$tmp/info" 2>&1 ||
  { cat "$tmp/info"; bad "the installed squall-info does not run"; }
test -f "$dest$prefix/share/doc/squall/LICENSE" || bad "no LICENSE in share/doc/squall"

# The launcher finds the interposer of its own install, and the benchmark runs
# (not in the sanitizer build: mpiexec has no ASan runtime to load first).
if ldd "$b/.libs/libsquall-preload-mpi.so" 2>/dev/null | grep -q libasan; then
  echo "note: sanitizer build: squall-run from the install is not run"
  make -s -C "$b" uninstall DESTDIR="$dest" > /dev/null 2>&1
  test "$fails" = 0 && echo "install: 1 passed, 0 failed"
  exit "$fails"
fi
# (tests/run-mpi.sh is mpirun -n 2 with a time limit, as root too)
env -u LD_LIBRARY_PATH LD_LIBRARY_PATH= "$bin/squall-run" --mpi --compress fp16 -- \
  "$b/tests/run-mpi.sh" 2 "$bin/squall-bench" -b 64K -e 64K -n 3 -w 1 -C none,fp16 -S COST_MODEL=off --no-progress \
  > "$tmp/bench" 2>&1
rc=$?
test "$rc" = 77 && { echo "SKIP: no MPI launcher"; exit 77; }
test "$rc" = 0 || { cat "$tmp/bench"; bad "squall-run with squall-bench on 2 ranks from the install"; }
grep -q '^# 2 results, 0 out of bounds, 0 where ranks differ' "$tmp/bench" ||
  { cat "$tmp/bench"; bad "the installed squall-bench's verdict"; }
grep -q '^ *65536 .* fp16 .* \(16-bit\|two-phase\)$' "$tmp/bench" ||
  { cat "$tmp/bench"; bad "the installed squall-bench did not compress fp16"; }

# The Python package, where configure said, naming the installed library.
loc=$(find "$dest" -path '*/squall/_location.py' | head -1)
pkg=${loc%/_location.py}
pydir=${pkg#"$dest"}
pydir=${pydir%/squall}
test -f "$pkg/__init__.py" || bad "no Python package installed (squall/__init__.py)"
grep -q "^LIBDIR = '/" "$pkg/_location.py" 2>/dev/null || bad "the installed squall/_location.py names no library folder"
so=$(sed -n 's/^SONAME = "\(.*\)"/\1/p' "$pkg/_location.py" 2>/dev/null)
libdir=$(sed -n "s/^LIBDIR = '\(.*\)'/\1/p" "$pkg/_location.py" 2>/dev/null)
if command -v python3 > /dev/null 2>&1; then
  SQUALL_LIBRARY="$dest$libdir/libsquall.so.$so" PYTHONPATH="$dest$pydir" python3 -c 'import squall; squall.version()' \
    > "$tmp/py" 2>&1 || { cat "$tmp/py"; bad "import squall from the install (libsquall.so.$so in $libdir)"; }
fi

make -s -C "$b" uninstall DESTDIR="$dest" > "$tmp/uninstall.log" 2>&1 || { cat "$tmp/uninstall.log"; bad "make uninstall"; }
left=$(find "$dest" -mindepth 1 \( -type f -o -type l \) 2>/dev/null)
test -z "$left" || bad "make uninstall left files: $left"
for d in $prefix/share/squall $prefix/share/doc/squall $pydir/squall; do
  test ! -d "$dest$d" || bad "make uninstall left $d"
done
test "$fails" = 0 && echo "install: 1 passed, 0 failed"
test "$fails" = 0

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Every source file of the tree names its licence (LICENSE: BSD-3-Clause)
# in a one-line SPDX header, on its first line or, after a #! line, its
# second. The files are the ones git tracks (a release tarball has no git:
# skipped there); benchmark output and fuzz corpora are data, not source.
set -u
s=${SQUALL_SRCDIR:-.}
command -v git >/dev/null 2>&1 && git -C "$s" rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
  { echo "SKIP: not a git checkout"; exit 77; }
test -f "$s/LICENSE" || { echo "FAIL: no LICENSE"; exit 1; }
tag='SPDX-License-Identifier: BSD-3-Clause'
fails=0 checked=0
for f in $(git -C "$s" ls-files -co --exclude-standard | grep -v '^bench/results/\|^fuzz/corpus/'); do
  case $f in
    *.c | *.h | *.cu | *.sh | *.py | *.in | *.m4 | Makefile.am | configure.ac | .ci/run | build-aux/nvcc-libtool | lib/libsquall.map) ;;
    *) continue ;;
  esac
  case $f in man/*) continue ;; esac # roff pages: documentation
  test -f "$s/$f" || continue
  checked=$((checked + 1))
  head -n 2 "$s/$f" | grep -q "$tag" || { echo "FAIL: $f has no '$tag' on its first lines"; fails=$((fails + 1)); }
done
echo "spdx: $checked source files checked, $fails without the header"
test "$fails" = 0

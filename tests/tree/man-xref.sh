#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Man pages: every cross-reference name(N) in man/*.[1-9]* (man(7): .BR,
# .IR, .RB, .RI, .BI, .IB "name (N)"; mdoc(7): Xr name N) that names a
# squall page must exist in man/; other names must be in the list of
# external pages below (so that a misspelt squall page cannot pass as an
# external one). Every .so link must point at a page of the tree, and every
# public function declared in include/*.h must have a page (or a .so link
# to one) whose NAME section lists it.
set -u
s=${SQUALL_SRCDIR:-.}
man=$s/man
test -d "$man" || { echo "FAIL: no man directory at $man"; exit 1; }

# Pages of other projects that squall's pages may cite.
external=' gnuplot(1) ip(8) mpirun(1) tc(8) tc-tbf(8) unshare(1) MPI_Allreduce(3) MPI_Reduce_scatter_block(3) dlopen(3) dlsym(3) ld.so(8) man(7) '

fails=0
checks=0
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }

# page_exists NAME SECTION: man/NAME.SECTION, or its .in template.
page_exists() { test -f "$man/$1.$2" || test -f "$man/$1.$2.in"; }

pages=$(ls "$man" | grep '\.[1-9][a-z]*\(\.in\)\{0,1\}$')
for p in $pages; do
  refs=$(awk '
    /^\.(BR|IR|RB|RI|BI|IB)[ \t]/ {
      for (i = 2; i < NF; i++)
        if ($(i + 1) ~ /^\([1-9]\)/) print $i, substr($(i + 1), 2, 1)
    }
    /(^\.|[ \t])Xr[ \t]/ {
      for (i = 1; i + 2 <= NF; i++)
        if (($i == "Xr" || $i == ".Xr") && $(i + 2) ~ /^[1-9]/) print $(i + 1), substr($(i + 2), 1, 1)
    }' "$man/$p" | sed -e 's/\\-/-/g' -e 's/^[("]*//' | sort -u)
  # shellcheck disable=SC2086
  set -- $refs
  while test $# -ge 2; do
    name=$1 sec=$2
    shift 2
    checks=$((checks + 1))
    case $name in
      squall*)
        page_exists "$name" "$sec" || bad "$p cites $name($sec), which is not in man/" ;;
      *)
        case $external in
          *" $name($sec) "*) ;;
          *) bad "$p cites $name($sec): not a squall page and not in the list of external pages in $0" ;;
        esac ;;
    esac
  done
  # .so links: one line naming a page of the tree.
  target=$(sed -n 's/^\.so[ \t]\{1,\}//p' "$man/$p" | head -n 1)
  if test -n "$target"; then
    checks=$((checks + 1))
    test -f "$man/${target##*/}" || bad "$p is a link to $target, which is not in man/"
  fi
done

# Every public function has a page that names it.
funcs=$(sed -n 's/^SQUALL_API[^(]*[ *]\(squall[A-Za-z0-9_]*\)(.*/\1/p' "$s"/include/*.h | sort -u)
test -n "$funcs" || bad "no SQUALL_API function found in $s/include/*.h"
for f in $funcs; do
  checks=$((checks + 1))
  page=$man/$f.3
  if ! test -f "$page"; then
    bad "public function $f has no page (man/$f.3)"
    continue
  fi
  target=$(sed -n 's/^\.so[ \t]\{1,\}//p' "$page" | head -n 1)
  test -z "$target" || page=$man/${target##*/}
  if ! grep -q "^\.Nm $f\( ,\)\{0,1\}$" "$page" 2>/dev/null && ! grep -q "^$f\( \\\\-\|,\)" "$page" 2>/dev/null; then
    bad "man/$f.3 (${page##*/}) does not list $f in its NAME section"
  fi
done

echo "man-xref: $((checks - fails)) of $checks checks passed ($(echo "$funcs" | wc -l) public functions)"
test $fails = 0

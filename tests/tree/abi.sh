#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The ABI of libsquall.so (and of libsquall-mpi.so, libsquall-nccl.so) is
# exactly the SQUALL_API functions of the public headers: none missing, none extra (an internal squall__ name, or a
# function that left the headers, such as the old configuration printers),
# the soname is the one configure.ac's SQUALL_SO_VERSION gives, and the
# public structs' layout is the one tests/tree/abi-layout.txt records for it, or
# grew from it only in the ways that keep its binaries working (appended
# members, new enumerators).
set -u
s=$SQUALL_SRCDIR
b=$SQUALL_BUILDDIR
lib=$b/.libs/libsquall.so
test -f "$lib" || { echo "SKIP: $lib is not built"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-abi.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0

# Three libraries (docs/design.md, "Libraries"): libsquall.so exports the
# functions of squall.h and squall_coll.h, libsquall-mpi.so those of
# squall_mpi.h, libsquall-nccl.so those of squall_nccl.h, each where
# configure built it, all under the version node SQUALL_<major>; besides
# them only libsquall.so's internals (squall__*, which the two sides call)
# leave, under SQUALL_PRIVATE_<package version>, and no data symbol is public.
pkgver=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"/\1/p' "$b/config.h")
check_lib() { # check_lib LIBRARY HEADER...: exports against declarations
  l=$b/.libs/$1; shift
  if ! test -f "$l"; then echo "FAIL: $l is not built"; fails=1; return; fi
  # shellcheck disable=SC2068
  sed -n 's/^SQUALL_API[^(]*[ *]\(squall[A-Za-z0-9_]*\)(.*/\1/p' $@ | sort -u > "$tmp/declared"
  nm -D --defined-only "$l" | awk '$3 !~ /^squall__/ && $2 ~ /^[TtWw]$/ {print $3}' | sed 's/@.*//' | sort -u > "$tmp/exported"
  if ! cmp -s "$tmp/declared" "$tmp/exported"; then
    echo "FAIL: $(basename "$l"): exported functions differ from the SQUALL_API declarations (< headers only, > library only):"
    diff "$tmp/declared" "$tmp/exported" | grep '^[<>]'
    fails=1
  fi
  data=$(nm -D --defined-only "$l" | awk '$3 !~ /^squall__/ && $2 !~ /^[TtWwA]$/ {print $3}')
  test -z "$data" || { echo "FAIL: $(basename "$l"): data symbols exported: $data"; fails=1; }
  unversioned=$(nm -D --defined-only "$l" | awk '$3 !~ /^squall__/ && $2 ~ /^[TtWw]$/ && $3 !~ /@@SQUALL_[0-9]+$/ {print $3}')
  test -z "$unversioned" || { echo "FAIL: $(basename "$l"): public symbols outside SQUALL_<major>: $unversioned"; fails=1; }
  private=$(nm -D --defined-only "$l" | awk -v want="@@SQUALL_PRIVATE_$pkgver" '$3 ~ /^squall__/ && substr($3, length($3) - length(want) + 1) != want {print $3}')
  test -z "$private" || { echo "FAIL: $(basename "$l"): internals outside SQUALL_PRIVATE_$pkgver: $private"; fails=1; }
  echo "abi: $(basename "$l"): $(wc -l < "$tmp/declared") functions declared, $(wc -l < "$tmp/exported") exported"
}
check_lib libsquall.so "$s/include/squall.h" "$s/include/squall_coll.h"
# The sides export no internals at all.
if grep -q '^#define HAVE_MPI 1' "$b/config.h"; then
  check_lib libsquall-mpi.so "$s/include/squall_mpi.h"
  nm -D --defined-only "$b/.libs/libsquall-mpi.so" | grep -q ' squall__' && { echo "FAIL: libsquall-mpi.so exports internals"; fails=1; }
fi
if grep -q '^#define HAVE_NCCL 1' "$b/config.h"; then
  check_lib libsquall-nccl.so "$s/include/squall_nccl.h"
  nm -D --defined-only "$b/.libs/libsquall-nccl.so" | grep -q ' squall__' && { echo "FAIL: libsquall-nccl.so exports internals"; fails=1; }
fi
# The core needs no MPI, NCCL or CUDA runtime.
needed=$(objdump -p "$lib" | awk '$1 == "NEEDED" {print $2}' | grep -E 'libmpi|libnccl|libcudart|libcuda\.' )
test -z "$needed" || { echo "FAIL: libsquall.so needs $needed"; fails=1; }

# libtool's current:revision:age gives libsquall.so.(current - age).
v=$(sed -n 's/^AC_SUBST(\[SQUALL_SO_VERSION\], \[\([0-9]*\):\([0-9]*\):\([0-9]*\)\]).*/\1 \3/p' "$s/configure.ac")
test -n "$v" || { echo "FAIL: no SQUALL_SO_VERSION in configure.ac"; exit 1; }
# shellcheck disable=SC2086
set -- $v
want=libsquall.so.$(($1 - $2))
got=$(objdump -p "$lib" 2>/dev/null | awk '$1 == "SONAME" {print $2}')
if test "$got" != "$want"; then
  echo "FAIL: soname '$got', configure.ac says $want"
  fails=1
fi
for side in mpi nccl; do
  test -f "$b/.libs/libsquall-$side.so" || continue
  sgot=$(objdump -p "$b/.libs/libsquall-$side.so" 2>/dev/null | awk '$1 == "SONAME" {print $2}')
  test "$sgot" = "libsquall-$side.so.$(($1 - $2))" || { echo "FAIL: libsquall-$side.so's soname '$sgot', not libsquall-$side.so.$(($1 - $2))"; fails=1; }
done
# The structs the library writes into (squallConfigDefault, squallStatsGet,
# squallConfigOption): they begin with size, magic and version, and the
# library reads and writes only min(the caller's size, its own) bytes
# (squall.h), so a member may be appended and a reason may take a free slot
# of its array under the same soname; a member that moved or changed size,
# or an enumerator that changed, breaks binaries built against the
# recorded layout, which is tied to one soname. (The record is for LP64,
# where size_t, pointers and double are 8 bytes.)
#   compare RECORD NOW: one line per difference, "break: ..." where a
#   binary built against RECORD would misread NOW, "new: ..." for what
#   NOW adds compatibly (to be recorded), "hole: ..." for a struct with
#   more after its last listed member than padding (a member that
#   tests/tree/abi_layout.c does not list).
compare() {
  awk '
    function type_of(name) { return substr(name, 1, index(name, ".") - 1) }
    NR == FNR {
      if ($1 == "soname") next
      rec[$1 " " $2] = $0; rv[$1 " " $2] = $3
      if ($1 == "member" && $3 + $4 > rend[type_of($2)]) rend[type_of($2)] = $3 + $4
      next
    }
    {
      now[$1 " " $2] = $0; nv[$1 " " $2] = $3
      if ($1 == "member" && $3 + $4 > nend[type_of($2)]) nend[type_of($2)] = $3 + $4
      if ($1 == "struct") size[$2] = $3
    }
    END {
      for (k in rec) {
        split(k, f, " ")
        if (!(k in now)) print "break: gone: " rec[k]
        else if (f[1] == "enum" || f[1] == "member") { if (rec[k] != now[k]) print "break: was " rec[k] ", now " now[k] }
        else if (nv[k] + 0 < rv[k] + 0) print "break: shrank: was " rec[k] ", now " now[k]
        else if (nv[k] + 0 > rv[k] + 0) print "new: grew: was " rec[k] ", now " now[k]
      }
      for (k in now) {
        if (k in rec) continue
        split(k, f, " ")
        t = type_of(f[2])
        if (f[1] == "member" && (t in rend) && nv[k] + 0 < rend[t]) print "break: inserted before the end of the recorded members: " now[k]
        else print "new: " now[k]
      }
      for (t in size) if (size[t] - nend[t] >= 8) print "hole: " t " has " size[t] - nend[t] " bytes after its last listed member: list every member in tests/tree/abi_layout.c"
    }' "$1" "$2" | sort
}
record=$s/tests/tree/abi-layout.txt
if test "$(getconf LONG_BIT 2>/dev/null)" != 64; then
  echo "abi: not LP64, the layout record is not checked"
elif ! "$b/tests/tree/abi_layout" > "$tmp/layout"; then
  echo "FAIL: tests/tree/abi_layout did not run"
  fails=1
else
  # The comparison itself must tell a moved member from an appended one.
  awk '$1 == "member" && !done && $3 > 0 {$3 += 8; done = 1} {print}' "$tmp/layout" > "$tmp/moved"
  printf 'member squallStats_t.zz_appended 100000 8\n' | cat "$tmp/layout" - > "$tmp/appended"
  if ! compare "$tmp/layout" "$tmp/moved" | grep -q '^break: ' ||
     compare "$tmp/layout" "$tmp/appended" | grep -q '^break: ' ||
     ! compare "$tmp/layout" "$tmp/appended" | grep -q '^new: member squallStats_t.zz_appended' ||
     test -n "$(compare "$tmp/layout" "$tmp/layout")"; then
    echo "FAIL: tests/tree/abi.sh's comparison does not tell a moved member from an appended one"
    fails=1
  fi
  rec_so=$(sed -n 's/^soname //p' "$record")
  compare "$record" "$tmp/layout" > "$tmp/layout.diff"
  if grep -q '^hole: ' "$tmp/layout.diff"; then
    echo "FAIL: a public struct has a member that tests/tree/abi_layout.c does not list:"
    grep '^hole: ' "$tmp/layout.diff"
    fails=1
  fi
  if test "$rec_so" != "$want"; then
    echo "FAIL: tests/tree/abi-layout.txt records the layout of $rec_so, configure.ac gives $want"
    fails=1
  elif grep -q '^break: ' "$tmp/layout.diff"; then
    echo "FAIL: the public structs' layout or enumerators changed incompatibly from tests/tree/abi-layout.txt:"
    grep '^break: ' "$tmp/layout.diff"
    echo "  a binary built against $want's header would misread them: give the library a new soname"
    echo "  (SQUALL_SO_VERSION in configure.ac) and record the layout anew (the soname line, then the"
    echo "  output of tests/tree/abi_layout) in tests/tree/abi-layout.txt"
    fails=1
  elif grep -q '^new: ' "$tmp/layout.diff"; then
    echo "FAIL: the public structs or enumerators grew compatibly, and tests/tree/abi-layout.txt does not record it:"
    grep '^new: ' "$tmp/layout.diff"
    echo "  no new soname is needed: record the layout (the soname line, then the output of"
    echo "  tests/tree/abi_layout) in tests/tree/abi-layout.txt, so that the new members are held in place too"
    fails=1
  fi
fi
echo "abi: soname $got, struct layout checked"
test $fails = 0

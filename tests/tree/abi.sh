#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The ABI of libsquall.so is exactly the SQUALL_API functions of the public
# headers: none missing, none extra (an internal squall__ name, or a
# function that left the headers, such as the old configuration printers),
# the soname is the one configure.ac's SQUALL_SO_VERSION gives, and the
# public structs' layout is the one tests/tree/abi-layout.txt records for it.
set -u
s=$SQUALL_SRCDIR
b=$SQUALL_BUILDDIR
lib=$b/.libs/libsquall.so
test -f "$lib" || { echo "SKIP: $lib is not built"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-abi.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0

# squall_nccl.h's functions exist only in a build with the NCCL transport.
headers="$s/include/squall.h $s/include/squall_mpi.h"
grep -q '^#define HAVE_NCCL 1' "$b/config.h" && headers="$headers $s/include/squall_nccl.h"
# shellcheck disable=SC2086
sed -n 's/^SQUALL_API[^(]*[ *]\(squall[A-Za-z0-9_]*\)(.*/\1/p' $headers | sort -u > "$tmp/declared"
nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWw]$/ {print $3}' | sort -u > "$tmp/exported"
if ! cmp -s "$tmp/declared" "$tmp/exported"; then
  echo "FAIL: exported functions differ from the SQUALL_API declarations (< headers only, > library only):"
  diff "$tmp/declared" "$tmp/exported" | grep '^[<>]'
  fails=1
fi
# No data symbol leaves either.
data=$(nm -D --defined-only "$lib" | awk '$2 !~ /^[TtWw]$/ {print $3}')
if test -n "$data"; then
  echo "FAIL: data symbols exported: $data"
  fails=1
fi

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
# The structs the library writes into (squallConfigDefault, squallStatsGet,
# squallConfigOption): a member added, moved or resized breaks binaries
# built against the recorded layout, which is tied to one soname. (The
# record is for LP64, where size_t, pointers and double are 8 bytes.)
record=$s/tests/tree/abi-layout.txt
if test "$(getconf LONG_BIT 2>/dev/null)" != 64; then
  echo "abi: not LP64, the layout record is not checked"
elif ! "$b/tests/tree/abi_layout" > "$tmp/layout"; then
  echo "FAIL: tests/tree/abi_layout did not run"
  fails=1
else
  rec_so=$(sed -n 's/^soname //p' "$record")
  if test "$rec_so" != "$want"; then
    echo "FAIL: tests/tree/abi-layout.txt records the layout of $rec_so, configure.ac gives $want"
    fails=1
  fi
  if ! grep -v '^soname ' "$record" | diff - "$tmp/layout" > "$tmp/layout.diff"; then
    echo "FAIL: the public structs' layout or enumerators differ from tests/tree/abi-layout.txt (< record, > now):"
    grep '^[<>]' "$tmp/layout.diff"
    echo "  a binary built against $want's header would misread them (or have memory past its structs written):"
    echo "  give the library a new soname (SQUALL_SO_VERSION in configure.ac) and record the layout"
    echo "  (soname line, then the output of tests/tree/abi_layout) in tests/tree/abi-layout.txt"
    fails=1
  fi
fi
echo "abi: $(wc -l < "$tmp/declared") functions declared, $(wc -l < "$tmp/exported") exported, soname $got, struct layout checked"
test $fails = 0

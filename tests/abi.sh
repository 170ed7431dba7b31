#!/bin/sh
# The ABI of libsquall.so is exactly the SQUALL_API functions of the public
# headers: none missing, none extra (an internal squall__ name, or a
# function that left the headers, such as the old configuration printers),
# and the soname is the one configure.ac's SQUALL_SO_VERSION gives.
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
echo "abi: $(wc -l < "$tmp/declared") functions declared, $(wc -l < "$tmp/exported") exported, soname $got"
test $fails = 0

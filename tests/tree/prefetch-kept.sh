#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Every host codec whose source asks for software prefetches has them in
# its compiled code. GCC deletes a call to a function that only prefetches
# (it finds no side effects) unless the call was inlined first: for a while
# codec_half.c's loops lost every prefetch that way, and the 16-bit encoder
# ran 20-30% slower, with the same bits, so no other test could see it.
set -u
s=$SQUALL_SRCDIR
b=$SQUALL_BUILDDIR
lib=$b/.libs/libsquall_base.a
test -f "$lib" || { echo "SKIP: $lib is not built"; exit 77; }
command -v objdump >/dev/null 2>&1 || { echo "SKIP: no objdump"; exit 77; }
case $(uname -m) in
x86_64) ;;
*) echo "SKIP: the prefetch instructions are named for x86_64 only"; exit 77 ;;
esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squall-prefetch.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0 checked=0
for src in $(grep -l '_mm_prefetch\|__builtin_prefetch\|sq_prefetch_line' "$s"/lib/codecs/*.c); do
  base=$(basename "$src" .c)
  member=$(ar t "$lib" | grep -- "-$base\.o\$" | head -n 1)
  test -n "$member" || { echo "FAIL: no object for $base.c in $lib"; fails=1; continue; }
  (cd "$tmp" && ar x "$lib" "$member") || { echo "FAIL: cannot extract $member"; fails=1; continue; }
  count=$(objdump -d "$tmp/$member" | grep -cE '^ *[0-9a-f]+:.*[[:space:]]prefetch')
  checked=$((checked + 1))
  if test "$count" -eq 0; then
    echo "FAIL: $base.c asks for prefetches, and its object $member has none"
    fails=1
  else
    echo "ok: $base.c: $count prefetch instructions"
  fi
done
test "$checked" -gt 0 || { echo "FAIL: no codec source asks for prefetches (the check found nothing to check)"; exit 1; }

# The streaming loops themselves (an object may keep other prefetches, as
# top-k's selection does): each function named here prefetches.
for pair in codec_half:encode_guess_simd codec_half:decode_f16c codec_half:decode_bf16_avx2 codec_topk:fused_avx2; do
  base=${pair%%:*} fn=${pair#*:}
  member=$(ar t "$lib" | grep -- "-$base\.o\$" | head -n 1)
  test -n "$member" && test -f "$tmp/$member" || { echo "FAIL: no object for $base.c"; fails=1; continue; }
  count=$(objdump -d "$tmp/$member" | awk -v fn="$fn" '
    /^[0-9a-f]+ <.*>:$/ { name = $2; sub(/^</, "", name); sub(/>:$/, "", name); sub(/\..*/, "", name); inside = name == fn; seen += inside; next }
    inside && /[[:space:]]prefetch/ { n++ }
    END { print seen ? n + 0 : -1 }')
  if test "$count" -lt 0; then
    echo "FAIL: $base.c has no function $fn any more: update this list"
    fails=1
  elif test "$count" -eq 0; then
    echo "FAIL: $base.c's $fn has no prefetch instruction"
    fails=1
  else
    echo "ok: $base.c $fn: $count"
  fi
done
exit $fails

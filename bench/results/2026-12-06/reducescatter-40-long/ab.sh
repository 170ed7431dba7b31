#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Before and after one library change, interleaved, so that the machine's
# drift between batches falls on both alike: measure.sh's two sets with
# BEFORE.so and AFTER.so (copies of build/.libs/libsquall.so.5.0.0 built
# from the two commits) in turn, 3 times each; the same squall-bench.
# Leaves AFTER.so in place.
set -eu
before=$(realpath "${1:?usage: ab.sh BEFORE.so AFTER.so OUTDIR}") after=$(realpath "${2:?}") out=$(realpath -m "${3:?}")
here=$(cd "$(dirname "$0")" && pwd)
lib="$here/../../../../build/.libs/libsquall.so.5.0.0"
for i in 1 2 3; do
  for v in before after; do
    if [ $v = before ]; then cp "$before" "$lib"; else cp "$after" "$lib"; fi
    "$here/measure.sh" "$out/$v-$i"
  done
done
cp "$after" "$lib"

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# train-short.sh - the training-quality regression test of make check:
# squall-train --short (the small task, seconds) on 2 ranks, asserted by
# tests/train/train-compare.sh; tests/train/train-long.sh (make check-long) is the full size.
exec sh "${SQUALL_SRCDIR:?}/tests/train/train-compare.sh" short

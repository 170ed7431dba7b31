#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# train-long.sh - the full-size training comparison (make check-long, not
# make check: minutes): the runs of squall-train --short on the default task
# (1.1M parameters, 600 steps), asserted by tests/train/train-compare.sh.
exec sh "${SQUALL_SRCDIR:?}/tests/train/train-compare.sh" long

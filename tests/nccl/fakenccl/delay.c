/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * delay.c - an emulated slow link for the cost model's tests:
 * FAKENCCL_NS_PER_BYTE=D makes each collective and each group of
 * send/receive wait D nanoseconds per byte this rank would send over a
 * real link (a ring all-reduce's 2(p-1)/p of its data, an all-gather's
 * p-1 blocks, ...), after the data moved. Shared memory moves a test's
 * bytes faster than any network does; the delay gives compression
 * something to win. Unset or 0: no delay.
 */
#include "fakenccl.h"

#include <stdlib.h>
#include <time.h>

void fake__link_delay(double bytes_sent) {
  const char *v = getenv("FAKENCCL_NS_PER_BYTE");
  double ns = v ? atof(v) * bytes_sent : 0;
  if (!(ns >= 1)) return;
  struct timespec t = {(time_t)(ns / 1e9), (long)(ns - (double)(time_t)(ns / 1e9) * 1e9)};
  while (nanosleep(&t, &t) != 0) {
  }
}

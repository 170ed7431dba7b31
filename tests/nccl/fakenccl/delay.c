/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * delay.c - an emulated link for the cost model's tests, after the data
 * moved: FAKENCCL_NS_PER_BYTE=D makes each collective and each group of
 * send/receive wait D nanoseconds per byte this rank would send over a
 * real link (a ring all-reduce's 2(p-1)/p of its data, an all-gather's
 * p-1 blocks, ...): a slow link, where compression wins;
 * FAKENCCL_NS_PER_CALL=L adds L nanoseconds to each: a link whose latency
 * dominates, where a compressed call's extra collectives lose. Unset or
 * 0: no delay.
 */
#include "fakenccl.h"

#include <stdlib.h>
#include <time.h>

void fake__link_delay(double bytes_sent) {
  const char *v = getenv("FAKENCCL_NS_PER_BYTE"), *l = getenv("FAKENCCL_NS_PER_CALL");
  double ns = (v ? atof(v) * bytes_sent : 0) + (l ? atof(l) : 0);
  if (!(ns >= 1)) return;
  struct timespec t = {(time_t)(ns / 1e9), (long)(ns - (double)(time_t)(ns / 1e9) * 1e9)};
  while (nanosleep(&t, &t) != 0) {
  }
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * delay.c - an emulated link for the cost model's tests, after the data
 * moved: FAKENCCL_NS_PER_BYTE=D makes each collective and each group of
 * send/receive wait D nanoseconds per byte this rank would send over a
 * real link (a ring all-reduce's 2(p-1)/p of its data, an all-gather's
 * p-1 blocks, ...): a slow link, where compression wins;
 * FAKENCCL_NS_PER_CALL=L adds L nanoseconds to each: a link whose latency
 * dominates, where a compressed call's extra collectives lose. Unset or
 * 0: no delay. Read and waited for as the device-memory test NCCL does
 * (link_env.h); a value that is not a number is the call's error.
 */
#include "fakenccl.h"

#include "link_env.h"

ncclResult_t fake__link_delay(double bytes_sent) {
  fakenccl_link link;
  char err[160];
  if (fakenccl_link_read(&link, err, sizeof err) != 0) return fake__error(ncclInvalidArgument, "%s", err);
  fakenccl_link_wait(&link, bytes_sent);
  return ncclSuccess;
}

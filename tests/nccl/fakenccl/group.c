/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * group.c - ncclGroupStart/End. Operations run as soon as they are called,
 * also inside a group: that is correct as long as every rank issues its
 * collectives in the same order, which is what the tests do (it would not
 * be for send/recv pairs, which this library does not provide). What a
 * group still means here: a per-thread depth, and the first error of any
 * call inside it is returned again by the outermost ncclGroupEnd.
 */
#include "fakenccl.h"


static _Thread_local int group_depth;
static _Thread_local ncclResult_t group_error;

/* p2p.c queues send/recv while a group is open */
int fake__group_depth(void) { return group_depth; }

void fake__group_note(ncclResult_t code) {
  if (group_depth > 0 && group_error == ncclSuccess && code != ncclSuccess && code != ncclInProgress)
    group_error = code;
}

FAKE_API ncclResult_t pncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}
FAKE_ALIAS(ncclGroupStart);

static ncclResult_t group_end(const char *fn, ncclSimInfo_t *sim) {
  if (group_depth == 0) return fake__error(ncclInvalidUsage, "%s: not inside ncclGroupStart", fn);
  if (--group_depth > 0) return ncclSuccess;
  ncclResult_t p2p = fake__p2p_flush(); /* the queued send/recv */
  ncclResult_t ret = group_error != ncclSuccess ? group_error : p2p;
  group_error = ncclSuccess;
  if (ret != ncclSuccess) return ret;
  if (sim) {
    ncclSimInfo_t init = NCCL_SIM_INFO_INITIALIZER;
    if (sim->magic != init.magic)
      return fake__error(ncclInvalidArgument,
                         "%s: simInfo magic 0x%x, expected 0x%x (use NCCL_SIM_INFO_INITIALIZER)", fn,
                         sim->magic, init.magic);
    /* The operations already ran; there is no cost model to report. */
    if (sim->size >= offsetof(ncclSimInfo_t, estimatedTime) + sizeof sim->estimatedTime)
      sim->estimatedTime = 0.0f;
  }
  return ncclSuccess;
}

FAKE_API ncclResult_t pncclGroupEnd(void) { return group_end("ncclGroupEnd", NULL); }
FAKE_ALIAS(ncclGroupEnd);

FAKE_API ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  return group_end("ncclGroupSimulateEnd", simInfo);
}
FAKE_ALIAS(ncclGroupSimulateEnd);

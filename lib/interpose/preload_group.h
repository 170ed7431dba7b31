/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * preload_group.h - the NCCL interposer's view of the user's
 * ncclGroupStart/ncclGroupEnd on this thread (preload_group.c): which
 * all-reduces a group holds, recorded so that ncclGroupEnd can run them
 * through squall, or handed on into NCCL's group where squall cannot.
 */
#ifndef SQUALL_INTERPOSE_PRELOAD_GROUP_H
#define SQUALL_INTERPOSE_PRELOAD_GROUP_H

#include <nccl.h>

/* One ncclAllReduce, as the caller made it. */
typedef struct {
  const void *send;
  void *recv;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op;
  ncclComm_t comm;
  cudaStream_t stream;
} squall_group_call;

/* Runs one all-reduce now: group_why NULL through squall as if ungrouped;
 * else into NCCL's open group, passed through, group_why saying why. */
typedef ncclResult_t (*squall_group_run_fn)(const squall_group_call *c, const char *group_why);

/* The real ncclGroupEnd or ncclGroupSimulateEnd, closing one level. */
typedef ncclResult_t (*squall_group_end_fn)(void *arg);

/* This thread's depth of user groups (0: none open). */
int squall__group_depth(void);

/* After the real ncclGroupStart succeeded: one level deeper. */
void squall__group_started(void);

/* An ncclAllReduce inside a group: recorded (returns ncclSuccess; run at
 * the outermost ncclGroupEnd), or, where the group already cannot be
 * compressed or c cannot join it, run into NCCL's group by run. */
ncclResult_t squall__group_allreduce(const squall_group_call *c, squall_group_run_fn run);

/* Any other NCCL collective or send/recv (fn: its name, "ncclSend") is
 * about to enter the group: the group passes through from now on, the
 * all-reduces recorded so far first, in their order. */
void squall__group_other(const char *fn, squall_group_run_fn run);

/* ncclGroupEnd (simulate 0) or ncclGroupSimulateEnd (1): closes the level
 * with end(arg); at the outermost level, runs the recorded all-reduces
 * through squall in the order issued, each on its own stream, after NCCL's
 * (then empty) group closed. Returns the first failure: NCCL's group's,
 * then the grouped calls' in their order. */
ncclResult_t squall__group_end(squall_group_end_fn end, void *arg, int simulate, squall_group_run_fn run);

#endif /* SQUALL_INTERPOSE_PRELOAD_GROUP_H */

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * preload_oldnccl.c - a stand-in for an old or partial libnccl.so.2, for
 * tests/interpose/test_preload_dlopen --old-nccl: it has the group calls and
 * ncclCommDestroy but none of the newer functions (ncclCommShrink, ...)
 * and, to make the point, no all-reduce. The interposer must forward what
 * exists, answer ncclInvalidUsage for a missing newer function, and
 * ncclSystemError with a message for a missing required one.
 */
#define OLD_API __attribute__((visibility("default")))

static int depth;

OLD_API int pncclGetVersion(int *version) {
  *version = 21803; /* 2.18.3 */
  return 0;
}
OLD_API int pncclGroupStart(void) {
  depth++;
  return 0;
}
OLD_API int pncclGroupEnd(void) {
  return depth > 0 ? (depth--, 0) : 5; /* ncclInvalidUsage outside a group, as NCCL */
}
OLD_API int pncclCommDestroy(void *comm) { return comm == 0 ? 0 : 4; /* ncclInvalidArgument: no comms here */ }

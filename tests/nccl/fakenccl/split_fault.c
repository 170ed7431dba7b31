/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * split_fault.c - an injected ncclCommSplit failure, for squall's two-level
 * all-reduce tests: with FAKENCCL_FAIL_SPLIT=1 in the environment (read at
 * each call, so a test can turn it on and off between phases), every
 * ncclCommSplit fails with ncclSystemError after its argument checks and
 * before any communication, as a split that cannot set up its new
 * communicator would. Every rank must set it alike, or the ranks that do
 * split wait for the others, as with real NCCL.
 */
#include "fakenccl.h"

#include <stdlib.h>
#include <string.h>

ncclResult_t fake__split_fault(const char *fn) {
  const char *v = getenv("FAKENCCL_FAIL_SPLIT");
  if (v == NULL || strcmp(v, "1") != 0) return ncclSuccess;
  return fake__error(ncclSystemError, "%s: failed on purpose (FAKENCCL_FAIL_SPLIT=1)", fn);
}

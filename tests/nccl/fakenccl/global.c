/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * global.c - the functions not tied to a communicator: version, error
 * strings, the last error, and host "device memory" allocation.
 */
#include "fakenccl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* One table gives each result code its message, so they cannot drift. */
#define FAKE_RESULTS(X)                                             \
  X(ncclSuccess, "no error")                                        \
  X(ncclUnhandledCudaError, "a CUDA call failed")                   \
  X(ncclSystemError, "a system or MPI call failed")                 \
  X(ncclInternalError, "internal error of the library")             \
  X(ncclInvalidArgument, "invalid argument (see ncclGetLastError)") \
  X(ncclInvalidUsage, "invalid usage (see ncclGetLastError)")       \
  X(ncclRemoteError, "a remote rank failed")                        \
  X(ncclInProgress, "operation in progress")

/* Written by failing calls, read by ncclGetLastError; like NCCL's, it is
 * one string for the process and is not cleared by reading it. */
static char last_error[512];

static int debug_warn(void) {
  static int level = -1;
  if (level < 0) {
    const char *v = getenv("NCCL_DEBUG");
    level = v && (!strcasecmp(v, "WARN") || !strcasecmp(v, "INFO") || !strcasecmp(v, "TRACE"));
  }
  return level;
}

ncclResult_t fake__error(ncclResult_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  if (debug_warn()) fprintf(stderr, "fakenccl WARN %s\n", last_error);
  fake__group_note(code);
  return code;
}

FAKE_API ncclResult_t pncclGetVersion(int *version) {
  if (!version) return fake__error(ncclInvalidArgument, "ncclGetVersion: version is NULL");
#ifdef FAKENCCL_NO_SPLIT
  *version = 21705; /* an NCCL before ncclCommSplit (2.18) */
#else
  *version = NCCL_VERSION_CODE; /* the header this library was built with */
#endif
  return ncclSuccess;
}
FAKE_ALIAS(ncclGetVersion);

FAKE_API const char *pncclGetErrorString(ncclResult_t result) {
  switch (result) {
#define FAKE_CASE(code, text) \
  case code:                  \
    return text;
    FAKE_RESULTS(FAKE_CASE)
#undef FAKE_CASE
  default:
    return "unknown ncclResult_t value";
  }
}
FAKE_ALIAS(ncclGetErrorString);

FAKE_API const char *pncclGetLastError(ncclComm_t comm) {
  (void)comm; /* unused by NCCL too */
  return last_error;
}
FAKE_ALIAS(ncclGetLastError);

/* "Device" memory is host memory here. */
FAKE_API ncclResult_t pncclMemAlloc(void **ptr, size_t size) {
  if (!ptr) return fake__error(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = calloc(1, size ? size : 1);
  if (!*ptr) return fake__error(ncclSystemError, "ncclMemAlloc: out of memory for %zu bytes", size);
  return ncclSuccess;
}
FAKE_ALIAS(ncclMemAlloc);

FAKE_API ncclResult_t pncclMemFree(void *ptr) {
  free(ptr);
  return ncclSuccess;
}
FAKE_ALIAS(ncclMemFree);

/* SPDX-License-Identifier: BSD-3-Clause */
/* error.c - result strings (from the X-macro table in squall.h) and the
 * per-thread detail behind squallGetLastError(). */
#include "common/internal.h"

#include <stdarg.h>
#include <stdio.h>

static __thread char last_error[512];

const char *squallGetErrorString(squallResult_t result) {
  switch (result) {
#define SQUALL_RESULT_CASE(name, value, msg) \
  case name:                                 \
    return msg;
    SQUALL_RESULT_TABLE(SQUALL_RESULT_CASE)
#undef SQUALL_RESULT_CASE
  default:
    return "unknown result";
  }
}

const char *squallGetLastError(void) { return last_error; }

squallResult_t squall__fail(squallResult_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  SQ_TRACE("error %d: %s", (int)code, last_error);
  return code;
}

const char *squallPassReasonName(squallPassReason_t reason) {
  switch (reason) {
#define SQUALL_PASS_CASE(name, key, doc) \
  case name:                             \
    return key;
    SQUALL_PASS_REASON_TABLE(SQUALL_PASS_CASE)
#undef SQUALL_PASS_CASE
  default:
    return "unknown";
  }
}

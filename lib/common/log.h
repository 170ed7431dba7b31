/* SPDX-License-Identifier: BSD-3-Clause */
/* log.h - SQUALL_DEBUG-levelled logging to stderr, NCCL_DEBUG style:
 * "host:pid:tid squall INFO message". */
#ifndef SQUALL_LOG_H
#define SQUALL_LOG_H

#include "squall.h"

#ifdef __cplusplus
extern "C" {
#endif

void squall__log(squallLogLevel_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Current level (from the configuration, read once). */
squallLogLevel_t squall__log_level(void);
void squall__log_set_level(squallLogLevel_t level);

#define SQ_WARN(...) squall__log(squallLogWarn, __VA_ARGS__)
#define SQ_INFO(...)                                                                   \
  do {                                                                                 \
    if (squall__log_level() >= squallLogInfo) squall__log(squallLogInfo, __VA_ARGS__); \
  } while (0)
#define SQ_TRACE(...)                                                                    \
  do {                                                                                   \
    if (squall__log_level() >= squallLogTrace) squall__log(squallLogTrace, __VA_ARGS__); \
  } while (0)

/* Warns once per call site (a static flag), for conditions that repeat every step. */
#define SQ_WARN_ONCE(...)                                                             \
  do {                                                                                \
    static int sq_warned_;                                                            \
    if (!__atomic_exchange_n(&sq_warned_, 1, __ATOMIC_RELAXED)) SQ_WARN(__VA_ARGS__); \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif

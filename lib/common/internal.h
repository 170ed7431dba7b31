/* SPDX-License-Identifier: BSD-3-Clause */
/* internal.h - what every library file needs: the public header, config.h,
 * and the error macros (zstd's RETURN_ERROR_IF / FORWARD_IF_ERROR idiom). */
#ifndef SQUALL_INTERNAL_H
#define SQUALL_INTERNAL_H

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <fenv.h>
#include <stdio.h>

#include "squall.h"
#include "common/log.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Decimal text and doubles converted as every rank converts them: glibc's
 * strtod and printf follow the rounding mode, which an application may
 * change on one rank (fesetround), and the ranks compare the configuration
 * as text. The whole environment is saved and restored (fegetround reads
 * the x87 control word only, where MXCSR may hold another mode). */
static inline void squall__round_nearest_begin(fenv_t *saved) {
  fegetenv(saved);
  fesetround(FE_TONEAREST);
}
static inline void squall__round_nearest_end(const fenv_t *saved) { fesetenv(saved); }

/* Records a formatted detail for squallGetLastError() and returns code. */
squallResult_t squall__fail(squallResult_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The process-wide configuration and its generation, which every
 * squallSetConfig() bumps: engines re-agree with their peers when it moves. */
void squall__config_get(squallConfig_t *config, uint64_t *generation);
/* The generation alone (squallSetConfig bumps it): one atomic load. */
uint64_t squall__config_generation(void);
/* squallSetConfig's checks of every option, its error naming `who`. */
squallResult_t squall__config_check(const squallConfig_t *config, const char *who);

#define SQ_RETURN_ERROR_IF(cond, code, ...)                                   \
  do {                                                                        \
    if (cond) {                                                               \
      SQ_TRACE("%s:%d: failed check '%s'", __FILE__, __LINE__, #cond);        \
      return squall__fail((code), __VA_ARGS__);                               \
    }                                                                         \
  } while (0)

#define SQ_FORWARD_IF_ERROR(call)                                             \
  do {                                                                        \
    squallResult_t sq_r_ = (call);                                            \
    if (sq_r_ != squallSuccess) {                                             \
      SQ_TRACE("%s:%d: '%s' returned %d", __FILE__, __LINE__, #call, (int)sq_r_); \
      return sq_r_;                                                           \
    }                                                                         \
  } while (0)

#define SQ_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#ifdef __cplusplus
}
#endif
#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/* internal.h - what every library file needs: the public header, config.h,
 * and the error macros (zstd's RETURN_ERROR_IF / FORWARD_IF_ERROR idiom).
 *
 * lib/common/ (the bottom layer: it includes nothing but itself and
 * include/):
 *   internal.h, error.c, log.c/.h   errors, squallGetLastError, logging
 *   config.c, config_types.c,       the configuration as data: typed option
 *   config_env.c, config_table.h    rows, their parsers, the environment
 *   stats.c/.h, stats_path.c/.h     the counters, SQUALL_STATS, the summary
 *   sized.h                         the head of the structs that can grow
 *   halfmath.c/.h, halfmath_x86.h   fp16/bf16 conversion and sums (codecs
 *                                   and transports both need them)
 *   cpu.c/.h, fpenv.h, size.c/.h    CPU features, rounding, sizes with suffixes
 *   version.c                       squallGetVersion, squallVersionString */
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
/* A caller's configuration as squallSetConfig takes it into *full: as
 * much as the caller's struct holds (its size), the rest from the
 * process's, every option checked; an error names `who`. */
squallResult_t squall__config_take(const squallConfig_t *config, squallConfig_t *full, const char *who);

/* What the ranks compare: every option of the configuration table marked
 * to agree (what changes the wire or which collectives run), as
 * "compress=topk:0.01 values=fp32 ef=1 min_bytes=1048576 ... ratio=0.01",
 * in the table's order (the top-k ratio in full at the end). The call
 * header carries its digest (62 bits of FNV-1a: positive, so that its
 * negation fits), and a mismatch warning its text. Both are the same on
 * every rank for the same configuration, whatever its rounding mode. */
#define SQ_CONFIG_DESC_BYTES 512 /* the longest description (every field at its widest) is under 400 */
void squall__config_describe(const squallConfig_t *config, char *out, size_t cap);
int64_t squall__config_digest(const squallConfig_t *config);
/* 0 when every row of the table is well formed: marked either agree or
 * local, its default parses, its member lies in squallConfig_t, in the
 * struct's order, with no member between rows that no row sets; else -1
 * and why. */
int squall__config_table_check(char *why, size_t len);

#define SQ_RETURN_ERROR_IF(cond, code, ...)                            \
  do {                                                                 \
    if (cond) {                                                        \
      SQ_TRACE("%s:%d: failed check '%s'", __FILE__, __LINE__, #cond); \
      return squall__fail((code), __VA_ARGS__);                        \
    }                                                                  \
  } while (0)

#define SQ_FORWARD_IF_ERROR(call)                                                 \
  do {                                                                            \
    squallResult_t sq_r_ = (call);                                                \
    if (sq_r_ != squallSuccess) {                                                 \
      SQ_TRACE("%s:%d: '%s' returned %d", __FILE__, __LINE__, #call, (int)sq_r_); \
      return sq_r_;                                                               \
    }                                                                             \
  } while (0)

#define SQ_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#ifdef __cplusplus
}
#endif
#endif

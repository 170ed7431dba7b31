/* SPDX-License-Identifier: BSD-3-Clause */
/* log.c - the logger behind SQ_WARN/SQ_INFO/SQ_TRACE. */
#include "common/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* -1 until the configuration is first read. */
static int log_level = -1;

squallLogLevel_t squall__log_level(void) {
  int l = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
  if (l < 0) {
    /* Before the configuration is loaded: read SQUALL_DEBUG alone, so that
     * logging never triggers (or re-enters) the configuration load. */
    squallConfig_t cfg = SQUALL_CONFIG_INITIALIZER;
    const char *v = getenv("SQUALL_DEBUG");
    __atomic_store_n(&log_level, (int)squallLogWarn, __ATOMIC_RELAXED); /* while parsing */
    squallConfigDefault(&cfg);
    l = (v && squallConfigSet(&cfg, "SQUALL_DEBUG", v) == squallSuccess) ? (int)cfg.debug : squallLogWarn;
    __atomic_store_n(&log_level, l, __ATOMIC_RELAXED);
  }
  return (squallLogLevel_t)l;
}

void squall__log_set_level(squallLogLevel_t level) {
  __atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

void squall__log(squallLogLevel_t level, const char *fmt, ...) {
  static const char *names[] = {"WARN", "INFO", "TRACE"};
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s:%d:%ld squall %s %s\n", host, (int)getpid(), (long)syscall(SYS_gettid),
          names[level], msg);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/* size.c - sizes in bytes: see size.h. */
#include "common/size.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

int squall__parse_size(const char *text, size_t *out) {
  /* clang-format off */
  static const struct {
    const char *suffix;
    unsigned shift;
  } units[] = {{"", 0},  {"K", 10},   {"M", 20},   {"G", 30},
               {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"KB", 10}, {"MB", 20}, {"GB", 30}};
  /* clang-format on */
  if (text == NULL || out == NULL) return -1;
  const char *p = text;
  size_t x = 0;
  if (*p < '0' || *p > '9') return -1;
  for (; *p >= '0' && *p <= '9'; p++) {
    unsigned d = (unsigned)(*p - '0');
    if (x > (SIZE_MAX - d) / 10) return -1;
    x = x * 10 + d;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcasecmp(p, units[i].suffix) != 0) continue; /* 64m, 64Mib, 64mb too */
    if (x > (SIZE_MAX >> units[i].shift)) return -1;
    *out = x << units[i].shift;
    return 0;
  }
  return -1;
}

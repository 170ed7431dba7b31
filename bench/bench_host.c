/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_host.c - what the machine is, for the headers of squall-bench and
 * squall-codec-bench: figures mean little without the CPU they ran on.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

const char *bench_cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return buf;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10)) continue;
    const char *v = strchr(line, ':');
    if (!v) break;
    v++;
    while (*v == ' ' || *v == '\t') v++;
    snprintf(buf, len, "%s", v);
    buf[strcspn(buf, "\n")] = 0;
    break;
  }
  fclose(f);
  return buf;
}

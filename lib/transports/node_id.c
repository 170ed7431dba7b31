/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * node_id.c - this machine's identity (node_id.h), from the hostname and
 * the boot id: containers on one machine may share a hostname pattern but
 * not a kernel boot, and a reused hostname on another machine has another
 * boot id.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "transports/node_id.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static uint64_t fnv1a(uint64_t x, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) x = (x ^ b[i]) * 0x100000001b3ULL;
  return x;
}

uint64_t squall__node_id(void) {
  char host[256] = "", boot[64] = "";
  gethostname(host, sizeof host - 1);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (fgets(boot, sizeof boot, f) == NULL) boot[0] = 0;
    fclose(f);
  }
  uint64_t x = fnv1a(0xcbf29ce484222325ULL, host, strlen(host));
  return fnv1a(fnv1a(x, "\n", 1), boot, strlen(boot));
}

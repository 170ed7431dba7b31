/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * link_env.h - the emulated link of both test NCCLs, read and waited for
 * alike: the host-memory one (tests/nccl/fakenccl/delay.c) and the
 * device-memory one (tests/gpu/devnccl/xchg*.c), so that a cost-model test
 * means the same on either. FAKENCCL_NS_PER_BYTE=D: each operation waits D
 * ns per byte this rank sends (a slow link, where compression wins);
 * FAKENCCL_NS_PER_CALL=L: L ns more per operation (a link whose latency
 * dominates, where a compressed call's extra collectives lose). Unset or
 * empty: 0. No NCCL, MPI or CUDA header: the device test NCCL's exchange
 * core has none.
 */
#ifndef SQUALL_TESTS_FAKENCCL_LINK_ENV_H
#define SQUALL_TESTS_FAKENCCL_LINK_ENV_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
  double ns_per_byte, ns_per_call;
} fakenccl_link;

/* One variable: 0 when unset, -1 with err when not a number in [0, max]. */
static inline double fakenccl_link_var(const char *name, double max, const char *unit, char *err, size_t len) {
  const char *v = getenv(name);
  if (v == NULL || !*v) return 0;
  char *end;
  double ns = strtod(v, &end);
  if (*end || !(ns >= 0) || ns > max) {
    snprintf(err, len, "%s='%s' is not a number of nanoseconds per %s (0 to %g)", name, v, unit, max);
    return -1;
  }
  return ns;
}

/* Both variables; 0, or -1 with err naming the bad one. */
static inline int fakenccl_link_read(fakenccl_link *l, char *err, size_t len) {
  l->ns_per_byte = fakenccl_link_var("FAKENCCL_NS_PER_BYTE", 1e9, "byte", err, len);
  if (l->ns_per_byte < 0) return -1;
  l->ns_per_call = fakenccl_link_var("FAKENCCL_NS_PER_CALL", 1e11, "call", err, len);
  return l->ns_per_call < 0 ? -1 : 0;
}

/* Waits as the link would for an operation that sends bytes_sent. */
static inline void fakenccl_link_wait(const fakenccl_link *l, double bytes_sent) {
  double ns = l->ns_per_byte * bytes_sent + l->ns_per_call;
  if (!(ns >= 1)) return;
  struct timespec t = {(time_t)(ns / 1e9), (long)(ns - (double)(time_t)(ns / 1e9) * 1e9)};
  while (nanosleep(&t, &t) != 0) { /* interrupted: wait out the rest */
  }
}

#endif

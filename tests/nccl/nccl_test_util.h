/* SPDX-License-Identifier: BSD-3-Clause */
/* nccl_test_util.h - what the squallAllReduce tests over the test NCCL
 * share: dyadic test data (exact in any summation order) and a
 * configuration set from defaults plus a spec. */
#ifndef SQUALL_TESTS_NCCL_TEST_UTIL_H
#define SQUALL_TESTS_NCCL_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include <squall.h>

static float gen(int seed, int r, size_t i) { /* dyadic, in [-8, 8] */
  unsigned x = (unsigned)(seed * 2654435761u) ^ (unsigned)(r * 40503u) ^ (unsigned)(i * 2246822519u);
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return (float)((int)(x % 129) - 64) / 8.0f;
}

/* Defaults, no minimum size, no zstd, no cost model (every eligible call
 * is compressed), then spec; exits 2 on a bad spec. */
static void use(const char *spec) {
  squallConfig_t c;
  squallConfigDefault(&c);
  squallConfigParse(&c, "SQUALL_MIN_BYTES=0 SQUALL_ZSTD=0 SQUALL_COST_MODEL=off");
  if (squallConfigParse(&c, spec) != squallSuccess || squallSetConfig(&c) != squallSuccess) {
    fprintf(stderr, "bad spec %s\n", spec);
    exit(2);
  }
}

#endif

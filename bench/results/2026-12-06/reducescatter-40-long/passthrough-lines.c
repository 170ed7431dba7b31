/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * passthrough-lines.c - the instructions and the cache lines squall's
 * pass-through path touches per reduce-scatter, caches cold, as a
 * collective library leaves them: squallCollReduceScatter of 4096 floats
 * a rank over collectives that move nothing (4 ranks in one process),
 * after 4 MiB of other memory is walked before each call. Under
 * cachegrind, run for 1000 and for 3000 calls; the per-function counts'
 * difference over 2000 is a call's, the first calls left out
 * (cachegrind.txt):
 *   gcc -O2 -g -I include passthrough-lines.c -L build/.libs -lsquall \
 *     -Wl,-rpath,$PWD/build/.libs -o /tmp/passthrough-lines
 *   for n in 1000 3000; do SQUALL_MIN_BYTES=0 SQUALL_COST_MODEL=on SQUALL_COMPRESS=int8 \
 *     valgrind --tool=cachegrind --cache-sim=yes --cachegrind-out-file=/tmp/cg.$n \
 *     /tmp/passthrough-lines $n; done
 *   cg_annotate --threshold=0 --auto=no /tmp/cg.1000 | grep lib/   (and /tmp/cg.3000)
 */
#include <squall_coll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANKS 4

static size_t width(squallDataType_t t) { return t == squallInt64 ? 8 : t == squallFloat32 ? 4 : 2; }

static int all_reduce(void *c, const void *s, void *r, size_t n, squallDataType_t t, squallRedOp_t o, void *st) {
  (void)c, (void)o, (void)st;
  if (s != r) memmove(r, s, n * width(t));
  return 0;
}

static int all_gather(void *c, const void *s, void *r, size_t b, void *st) {
  (void)c, (void)st;
  for (int i = 0; i < RANKS; i++) memcpy((char *)r + (size_t)i * b, s, b);
  return 0;
}

static int all_to_all(void *c, const void *s, void *r, size_t b, void *st) {
  (void)c, (void)st;
  memcpy(r, s, b * RANKS);
  return 0;
}

static int reduce_scatter(void *c, const void *s, void *r, size_t n, squallDataType_t t, squallRedOp_t o, void *st) {
  (void)c, (void)s, (void)r, (void)n, (void)t, (void)o, (void)st;
  return 0; /* moves nothing: only squall's own path is counted */
}

static char other[4 << 20];

__attribute__((noinline)) static void walk_other_memory(void) {
  for (size_t i = 0; i < sizeof other; i += 64) other[i]++;
}

int main(int argc, char **argv) {
  size_t rc = 4096;
  int calls = argc > 1 ? atoi(argv[1]) : 300;
  squallCollectives_t cl = SQUALL_COLLECTIVES_INIT;
  cl.nranks = RANKS;
  cl.allReduce = all_reduce;
  cl.allGather = all_gather;
  cl.allToAll = all_to_all;
  cl.reduceScatter = reduce_scatter;
  squallColl_t c;
  if (squallCollCreate(&cl, NULL, &c) != squallSuccess) return 1;
  float *s = calloc(rc * RANKS, 4), *r = calloc(rc, 4);
  for (int i = 0; i < calls; i++) {
    walk_other_memory();
    squallCollReduceScatter(c, s, r, rc, squallFloat32, squallSum, (void *)1, NULL);
  }
  squallCollDestroy(c);
  free(s);
  free(r);
  return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_coll.c - what squall-bench's figures mean for each collective
 * (--coll): its names, the bus bandwidth factor, the plain ring's bytes,
 * and the sizes it runs, in the terms of nccl-tests' all_reduce_perf and
 * reduce_scatter_perf, so that their columns compare line by line.
 */
#include <string.h>
#include <strings.h>

#include "bench.h"

static const char *const names[] = {"allreduce", "reducescatter"};
static const char *const titles[] = {"all-reduce", "reduce-scatter"};

const char *bench_coll_name(bench_coll k) { return names[k]; }
const char *bench_coll_title(bench_coll k) { return titles[k]; }

int bench_coll_parse(const char *name, bench_coll *k) {
  for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
    if (!strcasecmp(name, names[i])) {
      *k = (bench_coll)i;
      return 0;
    }
  return -1;
}

/* nccl-tests' AllReduceGetBw and ReduceScatterGetBw: a ring all-reduce
 * moves each byte 2(P-1)/P times over the busiest link, a reduce-scatter
 * (P-1)/P times. */
double bench_coll_bus_factor(bench_coll k, int p) {
  if (p <= 1) return 1.0;
  return (k == BENCH_REDUCESCATTER ? 1.0 : 2.0) * (p - 1) / p;
}

uint64_t bench_coll_ring_wire(bench_coll k, uint64_t bytes, int p) {
  if (p <= 1) return 0;
  return (k == BENCH_REDUCESCATTER ? 1 : 2) * (uint64_t)(p - 1) * bytes / (uint64_t)p;
}

size_t bench_coll_out_count(bench_coll k, size_t count, int p) {
  return k == BENCH_REDUCESCATTER && p > 0 ? count / (size_t)p : count;
}

/* nccl-tests' ALIGN: a reduce-scatter's block per rank is a multiple of 4
 * elements (so that its in-place offsets stay aligned). */
#define BLOCK_ALIGN 4

int bench_coll_sizes(bench_coll k, size_t elsize, int p, size_t *sizes, int n) {
  if (k != BENCH_REDUCESCATTER || p < 1) return n;
  size_t step = (size_t)BLOCK_ALIGN * (size_t)p; /* elements */
  int m = 0;
  for (int i = 0; i < n; i++) {
    size_t count = sizes[i] / elsize / step * step;
    if (count == 0) count = step;
    size_t bytes = count * elsize;
    if (m == 0 || sizes[m - 1] != bytes) sizes[m++] = bytes;
  }
  return m;
}

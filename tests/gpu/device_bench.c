/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * device_bench.c - what squall's device path costs a call, one rank on one
 * GPU: squallAllReduce on device buffers, each codec, against the plain
 * ncclAllReduce of the same buffer.
 *
 * With one rank NCCL's collectives are copies, so a compressed call's time
 * is nearly all squall's own work: the codec kernels, the call header, the
 * host code that enqueues them and whatever it waits for. That is the
 * overhead a compressed call adds on a real link, where the wire time
 * (a ring all-reduce of B bytes on P ranks sends 2(P-1)/P x B per rank)
 * is what compression saves. The figures are wall-clock times per call:
 * REPS calls back to back on one stream after WARM untimed ones, then one
 * synchronisation, divided by REPS; the median of RUNS such runs.
 *
 *   device_bench [-r REPS] [N ...]   N: float32 elements per call
 *                                    (default 1048576 16777216: 4 and 64 MiB)
 *
 * Every compressed row also checks, in squall's statistics, that its calls
 * were compressed (a call passed through would time plain NCCL instead);
 * a row whose calls were not says so and the exit status is 1.
 * Exit 0 figures printed, 1 a check failed, 2 usage, 77 no CUDA device.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "squall_nccl.h"
#define GPU_TEST_NAME "device_bench"
#include "gpu_check.h"

#define WARM 3
#define RUNS 3

/* Each row: SQUALL_COMPRESS and SQUALL_TOPK_VALUES, as a user sets them. */
typedef struct {
  const char *name, *compress, *values;
} codec_row;

/* clang-format off */
static const codec_row rows[] = {
    {"fp16", "fp16", "fp32"},         {"bf16", "bf16", "fp32"},           {"int8", "int8", "fp32"},
    {"int4", "int4", "fp32"},         {"fp8", "fp8", "fp32"},             {"topk:0.01", "topk:0.01", "fp32"},
    {"topk:0.01:fp16", "topk:0.01", "fp16"},
};
/* clang-format on */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static ncclComm_t g_comm;
static cudaStream_t g_stream;

/* The file the loaded NCCL came from: a figure depends on its version. */
static const char *nccl_file(void) {
  Dl_info info;
  if (!dladdr((void *)ncclGetVersion, &info) || info.dli_fname == NULL) return "?";
  return info.dli_fname;
}

/* A positive whole number, all of s; 0 when s is not one. */
static unsigned long long parse_count(const char *s) {
  char *end;
  if (*s < '0' || *s > '9') return 0; /* strtoull takes "-5" and wraps it */
  unsigned long long v = strtoull(s, &end, 10);
  return *end ? 0 : v;
}

/* Seconds per call, the median of RUNS runs of reps calls; -1 when a call
 * fails (its error printed). */
static double time_calls(int squall, const float *send, float *recv, size_t n, int reps) {
  double t[RUNS];
  for (int r = 0; r < RUNS; r++) {
    for (int i = 0; i < WARM + reps; i++) {
      if (i == WARM) {
        CK(cudaStreamSynchronize(g_stream));
        t[r] = now();
      }
      ncclResult_t e = squall ? squallAllReduce(send, recv, n, ncclFloat32, ncclSum, g_comm, g_stream)
                              : ncclAllReduce(send, recv, n, ncclFloat32, ncclSum, g_comm, g_stream);
      if (e != ncclSuccess) {
        printf("    the call returned %d (%s): %s\n", (int)e, ncclGetErrorString(e), squallGetLastError());
        return -1;
      }
    }
    CK(cudaStreamSynchronize(g_stream));
    t[r] = (now() - t[r]) / reps;
  }
  qsort(t, RUNS, sizeof t[0], cmp_double);
  return t[RUNS / 2];
}

static int set_codec(const codec_row *c) {
  squallConfig_t cfg;
  if (squallGetConfig(&cfg) != squallSuccess || squallConfigSet(&cfg, "SQUALL_COMPRESS", c->compress) != squallSuccess ||
      squallConfigSet(&cfg, "SQUALL_TOPK_VALUES", c->values) != squallSuccess) {
    fprintf(stderr, "device_bench: %s: %s\n", c->name, squallGetLastError());
    return -1;
  }
  cfg.errorFeedback = 1;
  cfg.minBytes = 0;
  cfg.minRanks = 1;
  cfg.warmup = 0;
  if (squallSetConfig(&cfg) != squallSuccess) {
    fprintf(stderr, "device_bench: squallSetConfig(%s): %s\n", c->name, squallGetLastError());
    return -1;
  }
  return 0;
}

/* Normal-ish values of mixed magnitude, made on the host once per size. */
static void fill_input(float *d, size_t n) {
  float *h = xmalloc(n * sizeof *h);
  uint64_t s = 0x5eedULL + n;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    float u = (float)((s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
    h[i] = u * (float)(1u << ((s >> 20) & 7));
  }
  CK(cudaMemcpyAsync(d, h, n * sizeof *h, cudaMemcpyHostToDevice, g_stream));
  CK(cudaStreamSynchronize(g_stream));
  free(h);
}

static void bench_size(size_t n, int reps) {
  float *send = dmalloc(n * 4), *recv = dmalloc(n * 4);
  fill_input(send, n);
  double plain = time_calls(0, send, recv, n, reps);
  if (plain < 0) {
    g_failed++;
    CK(cudaFree(send));
    CK(cudaFree(recv));
    return;
  }
  double mib = (double)n * 4 / (1 << 20);
  printf("%-16s %10zu %8.1f %10.1f %9.3f %8s  %s\n", "plain NCCL", n, mib, plain * 1e6, plain * 1e9 / (double)n,
         "1.00", "");
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (set_codec(&rows[i]) != 0) {
      g_failed++;
      continue;
    }
    squallStats_t before, after;
    if (squallStatsGet(&before) != squallSuccess) memset(&before, 0, sizeof before);
    double t = time_calls(1, send, recv, n, reps);
    if (squallStatsGet(&after) != squallSuccess) memset(&after, 0, sizeof after);
    uint64_t calls = after.calls - before.calls, comp = after.compressedCalls - before.compressedCalls;
    int ok = t >= 0 && comp == calls && calls > 0;
    if (ok) g_passed++;
    else g_failed++;
    if (t < 0) {
      printf("%-16s %10zu %8.1f  a call failed (above)\n", rows[i].name, n, mib);
      continue;
    }
    char note[96] = "";
    if (!ok) snprintf(note, sizeof note, "NOT COMPRESSED: %llu of %llu calls", (unsigned long long)comp,
                      (unsigned long long)calls);
    printf("%-16s %10zu %8.1f %10.1f %9.3f %8.2f  %s\n", rows[i].name, n, mib, t * 1e6, t * 1e9 / (double)n,
           t / plain, note);
    fflush(stdout);
  }
  CK(cudaFree(send));
  CK(cudaFree(recv));
}

int main(int argc, char **argv) {
  int reps = 20, first = 1;
  if (argc > 1 && !strcmp(argv[1], "-r")) {
    unsigned long long r = argc > 2 ? parse_count(argv[2]) : 0;
    if (r == 0 || r > 100000) {
      fprintf(stderr, "device_bench: -r needs a number of calls from 1 to 100000, got '%s'\n",
              argc > 2 ? argv[2] : "");
      return 2;
    }
    reps = (int)r;
    first = 3;
  }
  size_t sizes[16];
  int ns = 0;
  for (int i = first; i < argc; i++) {
    unsigned long long v = parse_count(argv[i]);
    if (v == 0 || v > ((size_t)1 << 40) || ns == 16) {
      fprintf(stderr, "usage: device_bench [-r REPS] [N ...]  (N: float32 elements per call, 1 to 2^40, at most "
                      "16 sizes); got '%s'\n",
              argv[i]);
      return 2;
    }
    sizes[ns++] = (size_t)v;
  }
  if (ns == 0) {
    sizes[ns++] = (size_t)1 << 20;
    sizes[ns++] = (size_t)1 << 24;
  }
  switch (gpu_device_state()) {
  case 0: return 77;
  case -1: return 1;
  }
  struct cudaDeviceProp prop;
  int v = 0;
  CK(cudaSetDevice(0));
  CK(cudaGetDeviceProperties(&prop, 0));
  ncclGetVersion(&v);
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&g_comm, 1, id, 0) != ncclSuccess) {
    printf("device_bench: cannot make a one-rank NCCL communicator\n0 passed, 1 failed\n");
    return 1;
  }
  printf("device_bench: %s (sm_%d%d), NCCL %d from %s, libsquall %s; one rank, float32 sum, %d calls x %d runs "
         "(median), wall clock per call\n",
         prop.name, prop.major, prop.minor, v, nccl_file(), squallVersionString(), reps, RUNS);
  printf("%-16s %10s %8s %10s %9s %8s\n", "codec", "n", "MiB", "us/call", "ns/elem", "x plain");
  for (int i = 0; i < ns; i++) bench_size(sizes[i], reps);
  squallCommForget(g_comm);
  ncclCommDestroy(g_comm);
  CK(cudaStreamDestroy(g_stream));
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}

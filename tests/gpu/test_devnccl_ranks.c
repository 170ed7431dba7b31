/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_devnccl_ranks.c - squall's NCCL path on DEVICE buffers with several
 * ranks on one GPU: this program forks 2 and 4 processes on device 0, each
 * a rank of the device-memory test NCCL (tests/gpu/devnccl, which it must
 * have loaded as libnccl.so.2), and runs squallAllReduce there. Checked:
 *   nccl      the test NCCL itself on device buffers (all-reduce, all-gather,
 *             reduce-scatter, a send/recv group), exact;
 *   codecs    every codec, three error-feedback steps: compressed, the same
 *             bits on every rank, and conservation (outputs + residuals =
 *             inputs, exact on dyadic data; the residuals are read by a
 *             flush, SQUALL_COMPRESS=topk:1 on zeros, as tests/nccl does);
 *   reduce-scatter  squallReduceScatter, every codec, three steps:
 *             compressed, answered alike everywhere, and conservation
 *             (each rank's shards + residuals = its block of the inputs);
 *   faults    FAKENCCL_FAULT=fail:N on every rank: that call fails
 *             everywhere, the others do not, conservation still holds (the
 *             failed call's residual was restored);
 *   two-level on 4 ranks, SQUALL_RANKS_PER_NODE=2 (ncclCommSplit): top-k
 *             equals tests/mpi/hierarchy_model.h's two-level model bit for bit;
 *   graph     a compressed call captured in a CUDA graph and replayed with
 *             new inputs: same bits everywhere, conservation;
 *   slow link FAKENCCL_NS_PER_BYTE delays a call by at least bytes x ns;
 *   --cost    alone: the cost model ON over an emulated link, timed on the
 *             stream (CUDA events): over a latency (FAKENCCL_NS_PER_CALL)
 *             int8's class ends up passing through as not paying, over a
 *             slow link (FAKENCCL_NS_PER_BYTE) top-k's ends up compressed;
 *             every rank takes the same path at every call, and once
 *             measured a header comes only on every 16th call.
 * Ranks compare results through a shared mapping made before fork, not
 * through the NCCL under test. The CUDA runtime is touched only in the
 * ranks (and in a probe process), never before fork.
 *
 *   test_devnccl_ranks [--host] [--cost] [NRANKS...]   (default: 2 4; each 2..4)
 * --host: host buffers, no CUDA, for make check over the library built on
 * host memory (tests/gpu/devnccl-ranks-host.sh); no graphs; with --cost the
 * host engines run the device schedule (SQUALL_TEST_DEVICE_SCHEDULE=2), so
 * the same assertions hold or fail there.
 * Exit 0 pass, 1 fail, 2 usage, 77 no CUDA device. The last line reads
 * "N passed, N failed".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#include "codecs/codec.h" /* squall__topk_k, for the model */
#include "squall_nccl.h"
#define GPU_TEST_NAME "test_devnccl_ranks"
#include "gpu_check.h"
#include "../mpi/hierarchy_model.h"
#include "../nccl/nccl_test_util.h"

#define MAXR 4
#define N 20011 /* odd; top-k 1% keeps 200 */
#define STEPS 3

typedef struct {
  _Atomic int passed, failed;
  _Atomic uint64_t arrived[MAXR];
  float out[MAXR][N];
  int word[MAXR];
} shared_t;

static shared_t *sh;
static int me = -1, P;
static uint64_t phase;
static cudaStream_t stream;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
  atomic_fetch_add(ok ? &sh->passed : &sh->failed, 1);
  if (ok) return;
  va_list ap;
  va_start(ap, fmt);
  printf("rank %d: FAIL: ", me);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The ranks meet (60 s at most: a rank that died ends the others too). */
static void barrier(void) {
  uint64_t k = ++phase;
  atomic_store(&sh->arrived[me], k);
  double t0 = now();
  for (int r = 0; r < P; r++)
    while (atomic_load(&sh->arrived[r]) < k) {
      if (now() - t0 > 60) {
        printf("rank %d: FAIL: rank %d did not reach barrier %llu in 60 s\n", me, r, (unsigned long long)k);
        atomic_fetch_add(&sh->failed, 1);
        _exit(1);
      }
      usleep(200);
    }
}

static int same_everywhere(const float *v, size_t n) {
  memcpy(sh->out[me], v, n * 4);
  barrier();
  int ok = memcmp(sh->out[0], v, n * 4) == 0;
  barrier();
  return ok;
}

static int word_everywhere(int w) {
  sh->word[me] = w;
  barrier();
  int ok = 1;
  for (int r = 0; r < P; r++) ok &= sh->word[r] == w;
  barrier();
  return ok;
}

/* --host: host buffers and no CUDA at all, over the library built on host
 * memory (tests/gpu/devnccl-host), so that make check runs this program's
 * own checks without a GPU; the graph part needs one and is left out. */
static int host_mode;
static int cost_mode; /* --cost: the cost model's case alone (cost_model) */

static void *buf_new(size_t bytes) { return host_mode ? xmalloc(bytes) : dmalloc(bytes); }
static void buf_free(void *p) {
  if (host_mode) free(p);
  else CK(cudaFree(p));
}
static void sync_stream(void) {
  if (!host_mode) CK(cudaStreamSynchronize(stream));
}
static void buf_zero(void *d, size_t bytes) {
  if (host_mode) memset(d, 0, bytes);
  else CK(cudaMemsetAsync(d, 0, bytes, stream));
}
static void up(void *d, const void *h, size_t bytes) {
  if (host_mode) {
    memcpy(d, h, bytes);
    return;
  }
  CK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream));
  CK(cudaStreamSynchronize(stream));
}
static void down(void *h, const void *d, size_t bytes) {
  if (host_mode) {
    memcpy(h, d, bytes);
    return;
  }
  CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
}

/* r, the status of a call enqueued on the stream, once the stream's work
 * is done; *d: what the statistics counted since *before (the counts this
 * file reads). */
static ncclResult_t counted(ncclResult_t r, const squallStats_t *before, squallStats_t *d) {
  sync_stream();
  squallStatsGet(d);
  d->compressedCalls -= before->compressedCalls;
  d->twoLevelCalls -= before->twoLevelCalls;
  d->headers -= before->headers;
  for (int i = 0; i < SQUALL_PASS_REASONS_MAX; i++) d->passthrough[i] -= before->passthrough[i];
  return r;
}

/* squallAllReduce of n floats, and what the statistics counted for it. */
static ncclResult_t all_reduce_counted(ncclComm_t comm, const float *d_g, float *d_out, size_t n, squallStats_t *d) {
  squallStats_t before;
  squallStatsGet(&before);
  return counted(squallAllReduce(d_g, d_out, n, ncclFloat32, ncclSum, comm, stream), &before, d);
}

/* squallReduceScatter of recvcount floats a rank, and what the statistics
 * counted for it. */
static ncclResult_t reduce_scatter_counted(ncclComm_t comm, const float *d_g, float *d_out, size_t recvcount,
                                           squallStats_t *d) {
  squallStats_t before;
  squallStatsGet(&before);
  return counted(squallReduceScatter(d_g, d_out, recvcount, ncclFloat32, ncclSum, comm, stream), &before, d);
}

/* One compressed call of d_g into d_out; its result in out. */
static ncclResult_t call(ncclComm_t comm, float *d_g, float *d_out, float *out, int *compressed) {
  squallStats_t d;
  ncclResult_t r = all_reduce_counted(comm, d_g, d_out, N, &d);
  *compressed = d.compressedCalls == 1;
  down(out, d_out, N * 4);
  return r;
}

/* outputs so far + the residuals (flushed: topk:1 on zeros through key d_g) == inputs */
static void conserved(ncclComm_t comm, float *d_g, float *d_out, const double *sum_out, const double *sum_in,
                      const char *what) {
  use("SQUALL_COMPRESS=topk:1");
  buf_zero(d_g, N * 4);
  float *flush = xmalloc(N * 4);
  int compressed;
  ncclResult_t r = call(comm, d_g, d_out, flush, &compressed);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < N; i++)
    if (sum_out[i] + flush[i] != sum_in[i] && bad++ == 0) first = i;
  check(r == ncclSuccess && bad == 0, "%s: outputs + residuals == inputs: %zu of %d elements differ, first [%zu]: "
                                      "%.17g + %.9g != %.17g",
        what, bad, N, first, sum_out[first], flush[first], sum_in[first]);
  free(flush);
}

/* ------------------------------------------------------------ the parts */
static void nccl_itself(ncclComm_t comm) {
  float *h = xmalloc(N * 4 * MAXR), *got = xmalloc(N * 4 * MAXR);
  float *d = buf_new(N * 4 * MAXR), *e = buf_new(N * 4 * MAXR);
  for (size_t i = 0; i < N; i++) h[i] = gen(1, me, i);
  up(d, h, N * 4);
  check(ncclAllReduce(d, e, N, ncclFloat32, ncclSum, comm, stream) == ncclSuccess, "ncclAllReduce");
  down(got, e, N * 4);
  size_t bad = 0;
  for (size_t i = 0; i < N; i++) {
    float want = 0;
    for (int r = 0; r < P; r++) want += gen(1, r, i);
    bad += got[i] != want;
  }
  check(bad == 0, "ncclAllReduce on device buffers: %zu of %d wrong", bad, N);
  check(ncclAllGather(d, e, N, ncclFloat32, comm, stream) == ncclSuccess, "ncclAllGather");
  down(got, e, N * 4 * (size_t)P);
  bad = 0;
  for (int r = 0; r < P; r++)
    for (size_t i = 0; i < N; i++) bad += got[(size_t)r * N + i] != gen(1, r, i);
  check(bad == 0, "ncclAllGather on device buffers: %zu wrong", bad);
  for (size_t i = 0; i < N * (size_t)P; i++) h[i] = gen(2, me, i);
  up(d, h, N * 4 * (size_t)P);
  check(ncclReduceScatter(d, e, N, ncclFloat32, ncclSum, comm, stream) == ncclSuccess, "ncclReduceScatter");
  down(got, e, N * 4);
  bad = 0;
  for (size_t i = 0; i < N; i++) {
    float want = 0;
    for (int r = 0; r < P; r++) want += gen(2, r, (size_t)me * N + i);
    bad += got[i] != want;
  }
  check(bad == 0, "ncclReduceScatter on device buffers: %zu wrong", bad);
  /* an all-to-all as squall posts it: block q to rank q */
  check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  for (int q = 0; q < P; q++) {
    ncclSend(d + (size_t)q * N, N * 4, ncclUint8, q, comm, stream);
    ncclRecv(e + (size_t)q * N, N * 4, ncclUint8, q, comm, stream);
  }
  check(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd (send/recv)");
  down(got, e, N * 4 * (size_t)P);
  bad = 0;
  for (int q = 0; q < P; q++)
    for (size_t i = 0; i < N; i++) bad += got[(size_t)q * N + i] != gen(2, q, (size_t)me * N + i);
  check(bad == 0, "send/recv all-to-all on device buffers: %zu wrong", bad);
  buf_free(d);
  buf_free(e);
  free(h);
  free(got);
}

/* STEPS calls of one codec, then conservation. fault: FAKENCCL_FAULT for
 * the second call (which must then fail on every rank), or NULL. */
static void run_codec(ncclComm_t comm, const char *spec, const char *fault) {
  float *d_g = buf_new(N * 4), *d_out = buf_new(N * 4), *h = xmalloc(N * 4), *out = xmalloc(N * 4);
  double *sum_in = calloc(N, 8), *sum_out = calloc(N, 8);
  use(spec);
  check(squallResetResiduals(comm) == ncclSuccess, "%s: reset", spec);
  int fails = 0, diverged = 0, uncompressed = 0;
  for (int t = 0; t < STEPS + (fault != NULL); t++) {
    for (size_t i = 0; i < N; i++) h[i] = gen(100 + t, me, i);
    up(d_g, h, N * 4);
    if (fault && t == 1) setenv("FAKENCCL_FAULT", fault, 1);
    int compressed;
    ncclResult_t r = call(comm, d_g, d_out, out, &compressed);
    unsetenv("FAKENCCL_FAULT");
    diverged += !word_everywhere((int)r);
    if (r != ncclSuccess) {
      fails++;
      check(fault && t == 1 && r == ncclSystemError, "%s: call %d failed with %d (%s)", spec, t, (int)r,
            squallGetLastError());
      continue;
    }
    uncompressed += !compressed;
    diverged += !same_everywhere(out, N);
    for (size_t i = 0; i < N; i++) {
      sum_out[i] += out[i];
      for (int q = 0; q < P; q++) sum_in[i] += gen(100 + t, q, i);
    }
  }
  check(fails == (fault != NULL), "%s%s%s: %d calls failed", spec, fault ? ", FAKENCCL_FAULT=" : "",
        fault ? fault : "", fails);
  check(!diverged && !uncompressed, "%s: every call compressed (%d not), the same on every rank (%d not)", spec,
        uncompressed, diverged);
  ncclResult_t async = ncclInternalError;
  check(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess, "%s: no asynchronous error (%d)",
        spec, (int)async);
  char what[160];
  snprintf(what, sizeof what, "%s%s%s", spec, fault ? ", fault " : "", fault ? fault : "");
  conserved(comm, d_g, d_out, sum_out, sum_in, what);
  buf_free(d_g);
  buf_free(d_out);
  free(h), free(out), free(sum_in), free(sum_out);
}

/* squallReduceScatter of RS_RECV elements a rank on device buffers, every
 * codec over STEPS error-feedback steps: every call compressed and
 * answered alike on every rank, and this rank's shards plus its residuals
 * (flushed as run_codec's are: topk:1 on zeros through the same send
 * buffer) equal the sum of every rank's inputs at its block, exact on
 * dyadic data: what the host engine's reduce-scatter guarantees
 * (tests/nccl/test_nccl_reducescatter.c), on the device path. */
#define RS_RECV 5003 /* odd */
static void run_rs_codec(ncclComm_t comm, const char *spec) {
  size_t n = (size_t)RS_RECV * (size_t)P;
  float *d_g = buf_new(n * 4), *d_out = buf_new(RS_RECV * 4), *h = xmalloc(n * 4), *out = xmalloc(RS_RECV * 4);
  double *sum_in = calloc(RS_RECV, 8), *sum_out = calloc(RS_RECV, 8);
  use(spec);
  check(squallResetResiduals(comm) == ncclSuccess, "%s: reset", spec);
  int failed = 0, uncompressed = 0, diverged = 0;
  for (int t = 0; t <= STEPS; t++) {
    int flush = t == STEPS;
    if (flush) use("SQUALL_COMPRESS=topk:1");
    for (size_t i = 0; i < n; i++) h[i] = flush ? 0.0f : gen(300 + t, me, i);
    up(d_g, h, n * 4);
    squallStats_t d;
    ncclResult_t r = reduce_scatter_counted(comm, d_g, d_out, RS_RECV, &d);
    diverged += !word_everywhere((int)r);
    failed += r != ncclSuccess;
    uncompressed += d.compressedCalls != 1;
    down(out, d_out, RS_RECV * 4);
    for (size_t i = 0; i < RS_RECV; i++) {
      sum_out[i] += out[i];
      for (int q = 0; q < P && !flush; q++) sum_in[i] += gen(300 + t, q, (size_t)me * RS_RECV + i);
    }
  }
  check(!failed && !uncompressed && !diverged,
        "%s: reduce-scatter: %d calls failed (%s), %d not compressed, %d answered differently on some rank", spec,
        failed, failed ? squallGetLastError() : "", uncompressed, diverged);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < RS_RECV; i++)
    if (sum_out[i] != sum_in[i] && bad++ == 0) first = i;
  check(bad == 0, "%s: reduce-scatter: shards + residuals == inputs: %zu of %d elements differ, first [%zu]: %.17g != %.17g",
        spec, bad, RS_RECV, first, sum_out[first], sum_in[first]);
  buf_free(d_g);
  buf_free(d_out);
  free(h), free(out), free(sum_in), free(sum_out);
}

/* Top-k on 2 nodes of 2 ranks: the two-level model's bits, counted two-level. */
static void two_level(ncclComm_t comm) {
  float *d_g = buf_new(N * 4), *d_out = buf_new(N * 4), *h = xmalloc(N * 4), *out = xmalloc(N * 4);
  float *ref = xmalloc(N * 4);
  use("SQUALL_COMPRESS=topk:0.01 SQUALL_RANKS_PER_NODE=2");
  for (int seed = 3; seed < 5; seed++) {
    check(squallResetResiduals(comm) == ncclSuccess, "two-level: reset"); /* the model starts from zero */
    hm_fill(h, N, (uint64_t)seed, me);
    up(d_g, h, N * 4);
    squallStats_t d;
    ncclResult_t r = all_reduce_counted(comm, d_g, d_out, N, &d);
    down(out, d_out, N * 4);
    hm_model_two_level(squall__topk_k, P, 2, (uint64_t)seed, N, 0.01, ref);
    check(r == ncclSuccess && d.twoLevelCalls == 1, "two-level top-k: status %d, %llu two-level", (int)r,
          (unsigned long long)d.twoLevelCalls);
    check(memcmp(out, ref, N * 4) == 0, "two-level top-k equals the model bit for bit (seed %d)", seed);
    check(same_everywhere(out, N), "two-level top-k the same on every rank");
  }
  buf_free(d_g);
  buf_free(d_out);
  free(h), free(out), free(ref);
}

/* A warm-up call, then the call captured once and replayed with new inputs. */
static void graph(ncclComm_t comm, const char *spec) {
  enum { REPLAYS = 3 };
  float *d_g = buf_new(N * 4), *d_out = buf_new(N * 4), *h = xmalloc(N * 4), *out = xmalloc(N * 4);
  double *sum_in = calloc(N, 8), *sum_out = calloc(N, 8);
  use(spec);
  check(squallResetResiduals(comm) == ncclSuccess, "graph: reset");
  cudaGraphExec_t exec = NULL;
  int bad = 0;
  for (int t = 0; t <= REPLAYS; t++) {
    for (size_t i = 0; i < N; i++) h[i] = gen(200 + t, me, i);
    up(d_g, h, N * 4);
    int compressed = 1;
    ncclResult_t r = ncclSuccess;
    if (t == 0) {
      r = call(comm, d_g, d_out, out, &compressed);
    } else {
      if (t == 1) {
        cudaGraph_t g = NULL;
        CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        r = squallAllReduce(d_g, d_out, N, ncclFloat32, ncclSum, comm, stream);
        CK(cudaStreamEndCapture(stream, &g));
        CK(cudaGraphInstantiate(&exec, g, 0));
        CK(cudaGraphDestroy(g));
      }
      CK(cudaGraphLaunch(exec, stream));
      CK(cudaStreamSynchronize(stream));
      down(out, d_out, N * 4);
    }
    bad += r != ncclSuccess || !compressed || !same_everywhere(out, N);
    for (size_t i = 0; i < N; i++) {
      sum_out[i] += out[i];
      for (int q = 0; q < P; q++) sum_in[i] += gen(200 + t, q, i);
    }
  }
  check(bad == 0, "%s in a CUDA graph: %d of %d steps failed, were not compressed or differ between ranks", spec,
        bad, REPLAYS + 1);
  char what[120];
  snprintf(what, sizeof what, "%s, warm-up and %d graph replays", spec, REPLAYS);
  conserved(comm, d_g, d_out, sum_out, sum_in, what);
  CK(cudaGraphExecDestroy(exec));
  buf_free(d_g);
  buf_free(d_out);
  free(h), free(out), free(sum_in), free(sum_out);
}

/* 4 MB at 2 ns a byte: 8 ms at least, whatever the GPU. */
static void slow_link(ncclComm_t comm) {
  size_t n = 1 << 20;
  float *d = buf_new(n * 4);
  buf_zero(d, n * 4);
  setenv("FAKENCCL_NS_PER_BYTE", "2", 1);
  double t0 = now();
  ncclResult_t r = ncclAllReduce(d, d, n, ncclFloat32, ncclSum, comm, stream);
  sync_stream();
  double t = now() - t0;
  unsetenv("FAKENCCL_NS_PER_BYTE");
  check(r == ncclSuccess && t >= 0.008, "FAKENCCL_NS_PER_BYTE=2: 4 MiB took %.4f s (at least 0.008)", t);
  buf_free(d);
}

/* ------------------------------------------------------------ --cost */
/* The cost model's device schedule (lib/engine/costing_device.c) with the
 * cost model on, as tests/nccl/test_nccl_devcost.c checks it on the host
 * test NCCL, but timed here by the kernel set's timer on the stream (CUDA
 * events on a GPU; with --host the host engine runs the device schedule,
 * SQUALL_TEST_DEVICE_SCHEDULE=2, its readings two calls late). */
#define COST_CALLS 112
#define HEADER_EVERY 16 /* SQ_DEV_HEADER_EVERY */
#define SETTLED 32      /* calls by which measuring is over (it takes about 10) */

/* COST_CALLS calls of n floats; path[i]: 1 compressed, 2 passed through
 * as not paying, 3 otherwise; headed[i]: the headers the call exchanged. */
static void cost_run(ncclComm_t comm, size_t n, char *path, char *headed) {
  float *d_g = buf_new(n * 4), *d_out = buf_new(n * 4), *h = xmalloc(n * 4);
  for (size_t j = 0; j < n; j++) h[j] = gen(300, me, j);
  up(d_g, h, n * 4);
  memset(path, 3, COST_CALLS);
  memset(headed, 0, COST_CALLS);
  for (int i = 0; i < COST_CALLS; i++) {
    squallStats_t d;
    ncclResult_t r = all_reduce_counted(comm, d_g, d_out, n, &d);
    if (r != ncclSuccess) {
      check(0, "cost model: call %d of %zu floats: %d (%s)", i, n, (int)r, squallGetLastError());
      break;
    }
    path[i] = d.compressedCalls > 0 ? 1 : d.passthrough[squallPassNotPaying] > 0 ? 2 : 3;
    headed[i] = (char)d.headers;
  }
  buf_free(d_g);
  buf_free(d_out);
  free(h);
}

static int bytes_everywhere(const void *v, size_t n) {
  memcpy(sh->out[me], v, n);
  barrier();
  int ok = 1;
  for (int r = 0; r < P; r++) ok &= memcmp(sh->out[r], v, n) == 0;
  barrier();
  return ok;
}

/* at_least: of the calls after SETTLED, those that must take want */
static void cost_expect(const char *what, const char *path, const char *headed, int want, int at_least) {
  int on_schedule = 1, settled = 0, others = 0;
  char late[COST_CALLS * 4 + 1] = "";
  for (int i = SETTLED; i < COST_CALLS; i++) {
    on_schedule &= headed[i] == (i % HEADER_EVERY == 0);
    settled += path[i] == want;
    others += path[i] == 3;
    if (path[i] != want) snprintf(late + strlen(late), sizeof late - strlen(late), " %d", i);
  }
  check(bytes_everywhere(path, COST_CALLS) && bytes_everywhere(headed, COST_CALLS),
        "%s: the same path and headers on every rank at every call", what);
  check(on_schedule, "%s: after call %d, a header on every %dth call only", what, SETTLED, HEADER_EVERY);
  if (me == 0) printf("%s: calls %d to %d not %s:%s\n", what, SETTLED, COST_CALLS - 1,
                      want == 1 ? "compressed" : "passed through", late); /* for the log */
  check(settled >= at_least && others == 0, "%s: %d of the last %d calls %s (at least %d), %d for another reason",
        what, settled, COST_CALLS - SETTLED, want == 1 ? "compressed" : "passed through as not paying", at_least,
        others);
}

/* The delays are far above what a loaded machine's scheduler adds to a
 * call (tens of milliseconds now and then), as in test_nccl_devcost. */
static void cost_model(ncclComm_t comm) {
  char path[COST_CALLS], headed[COST_CALLS];
  /* Latency: 256 KiB calls, 40 ms an operation; int8's max and all-gather
   * wait twice, plain once. All ranks are on one node: unmeasured, the
   * class passes through but for the measuring calls. */
  use("SQUALL_COMPRESS=int8 SQUALL_COST_MODEL=on");
  setenv("FAKENCCL_NS_PER_CALL", "40000000", 1);
  cost_run(comm, 65536, path, headed);
  unsetenv("FAKENCCL_NS_PER_CALL");
  /* plain is sampled on most calls, the codec every 32nd: a stall can
   * lift plain's figure, and the verdict with it until the next header */
  cost_expect("latency", path, headed, 2, (COST_CALLS - SETTLED) / 2);
  int measured = 0;
  for (int i = 0; i < SETTLED; i++) measured += path[i] == 1;
  check(measured > 0 && path[0] != 1, "latency: the first call on one node passes through (path %d); while "
                                      "measured, some calls are compressed (%d, to time the codec)",
        path[0], measured);
  /* A slow link: 4 MiB calls (another size class) at 50 ns a byte, a
   * plain call about 0.2 s, top-k 1% about 50 times less: all compressed
   * but the plain probes (every 32nd call) and what a stall may turn. */
  use("SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=on");
  setenv("FAKENCCL_NS_PER_BYTE", "50", 1);
  cost_run(comm, (size_t)1 << 20, path, headed);
  unsetenv("FAKENCCL_NS_PER_BYTE");
  cost_expect("slow link", path, headed, 1, COST_CALLS - SETTLED - 8);
}

static const char *codecs[] = {"SQUALL_COMPRESS=fp16", "SQUALL_COMPRESS=bf16", "SQUALL_COMPRESS=int8",
                               "SQUALL_COMPRESS=int4 SQUALL_BUCKET=64", "SQUALL_COMPRESS=fp8",
                               "SQUALL_COMPRESS=topk:0.01", "SQUALL_COMPRESS=topk:0.02 SQUALL_TOPK_VALUES=fp16"};

static void rank_main(const ncclUniqueId *ids) {
  if (!host_mode) {
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRank(&comm, P, ids[0], me);
  check(r == ncclSuccess, "ncclCommInitRank: %d (%s)", (int)r, ncclGetLastError(NULL));
  if (r != ncclSuccess) _exit(1);
  double t0 = now();
  if (cost_mode) { /* a run of its own (step 8 of tests/gpu/run-gpu-checks.sh) */
    cost_model(comm);
    check(squallCommForget(comm) == ncclSuccess && ncclCommDestroy(comm) == ncclSuccess, "forget, destroy");
    if (me == 0) printf("--cost, %d ranks: rank 0 took %.1f s\n", P, now() - t0);
    if (!host_mode) CK(cudaStreamDestroy(stream));
    return;
  }
  nccl_itself(comm);
  for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; c++) run_codec(comm, codecs[c], NULL);
  for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; c++) run_rs_codec(comm, codecs[c]);
  /* Which collective a fault hits: on device memory there is no call
   * header after the first call (engine.c), so top-k's first all-reduce or
   * all-gather is its exchange, after the residual was rewritten; the
   * 16-bit codecs' second is the all-gather after the max. */
  run_codec(comm, "SQUALL_COMPRESS=topk:0.02", "fail:1");
  run_codec(comm, "SQUALL_COMPRESS=fp16", "fail:2");
  run_codec(comm, "SQUALL_COMPRESS=int8", "fail:1");
  if (!host_mode) {
    graph(comm, "SQUALL_COMPRESS=topk:0.01");
    graph(comm, "SQUALL_COMPRESS=fp16");
  }
  slow_link(comm);
  check(squallCommForget(comm) == ncclSuccess && ncclCommDestroy(comm) == ncclSuccess, "forget, destroy");
  if (P == 4) { /* a communicator of its own: squall splits it on first use */
    check(ncclCommInitRank(&comm, P, ids[1], me) == ncclSuccess, "ncclCommInitRank (two-level)");
    two_level(comm);
    check(squallCommForget(comm) == ncclSuccess && ncclCommDestroy(comm) == ncclSuccess, "forget, destroy");
  }
  if (me == 0) printf("%d ranks: rank 0 took %.1f s\n", P, now() - t0);
  if (!host_mode) CK(cudaStreamDestroy(stream));
}

/* ------------------------------------------------------------ processes */
/* Which libnccl.so.2 answers ncclGetUniqueId: it must be the test NCCL. */
static int loaded_devnccl(void) {
  Dl_info info;
  if (!dladdr((void *)ncclGetUniqueId, &info) || !info.dli_fname || !strstr(info.dli_fname, "devnccl")) {
    printf(GPU_TEST_NAME ": FAIL: ncclGetUniqueId comes from %s, not the device test NCCL "
                         "(tests/gpu/devnccl/libnccl.so.2): check RPATH and LD_LIBRARY_PATH\n",
           info.dli_fname ? info.dli_fname : "?");
    return 0;
  }
  return 1;
}

/* The CUDA runtime must not start before fork: a probe process asks. */
static int probe_gpu(void) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int state = gpu_device_state();
    fflush(NULL);
    _exit(state == 1 ? 0 : state == 0 ? 77
                                      : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static int run_ranks(int nranks) {
  ncclUniqueId ids[2];
  if (ncclGetUniqueId(&ids[0]) != ncclSuccess || ncclGetUniqueId(&ids[1]) != ncclSuccess) {
    printf(GPU_TEST_NAME ": FAIL: ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  memset((void *)sh->arrived, 0, sizeof sh->arrived);
  P = nranks;
  pid_t pid[MAXR];
  for (int r = 0; r < P; r++) {
    fflush(NULL);
    if ((pid[r] = fork()) == 0) {
      me = r;
      rank_main(ids);
      fflush(NULL);
      _exit(0);
    }
  }
  int bad = 0;
  for (int r = 0; r < P; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf(GPU_TEST_NAME ": FAIL: rank %d of %d ended with status 0x%x\n", r, P, st);
      bad = 1;
    }
  }
  return bad;
}

int main(int argc, char **argv) {
  int counts[8], nc = 0, first = 1;
  for (; first < argc && argv[first][0] == '-'; first++) {
    if (!strcmp(argv[first], "--host")) host_mode = 1;
    else if (!strcmp(argv[first], "--cost")) cost_mode = 1;
    else break; /* the usage below names it */
  }
  for (int i = first; i < argc; i++) {
    int p = atoi(argv[i]);
    if (nc == 8 || p < 2 || p > MAXR) {
      fprintf(stderr, "usage: " GPU_TEST_NAME " [--host] [--cost] [NRANKS...]  (each 2..%d; got '%s')\n", MAXR, argv[i]);
      return 2;
    }
    counts[nc++] = p;
  }
  if (nc == 0) counts[nc++] = 2, counts[nc++] = 4;
  (void)hm_model_flat; /* the flat model is the hierarchy tests' */
  int gpu = host_mode ? 0 : probe_gpu();
  if (gpu != 0) return gpu == 77 ? 77 : 1;
  if (!loaded_devnccl()) return 1;
  if (!getenv("FAKENCCL_TIMEOUT")) setenv("FAKENCCL_TIMEOUT", "30", 1);
  /* --cost on host buffers: the host engines run the device schedule
   * (read as each engine is made, in the ranks) */
  if (cost_mode && host_mode) setenv("SQUALL_TEST_DEVICE_SCHEDULE", "2", 1);
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  int bad = 0;
  for (int i = 0; i < nc; i++) bad |= run_ranks(counts[i]);
  printf("%d passed, %d failed\n", sh->passed, sh->failed + bad);
  return sh->failed || bad ? 1 : 0;
}

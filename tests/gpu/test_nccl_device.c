/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_nccl_device.c - squall's compressed all-reduce on DEVICE buffers, one
 * rank, the real NCCL (SQUALL_MIN_RANKS=1 runs the whole compressed path on
 * a single GPU), checked bit for bit against the host twin of every step.
 *
 * One rank makes the exchange an identity (the max, the all-to-all and the
 * all-gather copy), so the result of a step is what lib/codecs/codec.h
 * computes on the host: widen, absmax, power-of-two scale, encode with the
 * residual, (16-bit: the owner's sum of the one block, re-encoded with the
 * residual), decode, narrow. This file keeps a host residual per tensor and
 * follows squall's error feedback over several steps; any difference in one
 * bit of a result (or of the residual, which shows in the next step) fails.
 *
 * Built twice from this file:
 *   direct (-DSQ_DIRECT)  calls squallAllReduce (libsquall's objects linked
 *                         in), switches codecs with squallSetConfig and
 *                         checks squallStatsGet around every call;
 *   plain                 knows nothing of squall: nccl.h, ncclAllReduce,
 *                         run under squall-run (LD_PRELOAD=libsquall-preload.so)
 *                         with the codec in SQUALL_*; it also checks what only
 *                         the interposer can see (groups, PreMulSum ops,
 *                         non-blocking communicators), writes DIR/expect, and
 *                         `check DIR` compares that with the SQUALL_STATS file.
 *
 * Parts: (a) every codec x float32/float16/bfloat16 x ncclSum/ncclAvg, out of
 * place and in place, several steps; (b) the same call captured in a CUDA
 * graph after one uncaptured warm-up and replayed with new inputs copied into
 * the same buffers; pass-through cases (integer, max, small, captured before
 * the tensor was seen), whose results must be NCCL's, exactly.
 *
 *   test_nccl_device_direct [CODEC...]  CODEC: fp16 bf16 topk:R topk:R:fp16
 *                                       (default: all four, R = 0.01)
 *   test_nccl_device run DIR            (under squall-run; SQUALL_STATS=DIR/stats.%r.json)
 *   test_nccl_device check DIR
 *
 * Exit 0 pass, 1 fail, 2 usage, 77 no CUDA device. The last line of a run
 * reads "N passed, N failed".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr, RTLD_DEFAULT */
#endif
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "codecs/codec.h"
#include "squall_nccl.h"
#define GPU_TEST_NAME "test_nccl_device"
#include "gpu_check.h"

#define STEPS 4                       /* uncaptured steps per tensor: the residual carries */
#define REPLAYS 5                     /* graph replays after the captured call */
#define N_BIG (((size_t)1 << 20) + 7) /* odd, over a million elements */
#define N_SMALL 100                   /* 400 bytes and a few (tensor_new): under the minimum size */
#define MIN_BYTES 4096                /* SQUALL_MIN_BYTES the checks assume */

/* ------------------------------------------------------------ bookkeeping */

static int row_bad;          /* failures in the current row */
static char row_detail[512]; /* its first failure */

static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...) {
  if (row_bad++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(row_detail, sizeof row_detail, fmt, ap);
    va_end(ap);
  }
}

/* An NCCL (or squall) call that must succeed. */
#define NOK(call)                                                                                          \
  do {                                                                                                     \
    ncclResult_t nok_r_ = (call);                                                                          \
    if (nok_r_ != ncclSuccess) bad("%s returned %d (%s)", #call, (int)nok_r_, ncclGetErrorString(nok_r_)); \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double row_t0;

static void row_begin(void) {
  row_bad = 0;
  row_detail[0] = 0;
  row_t0 = now();
}

static void row_end(const char *what, size_t n, int calls) {
  if (row_bad) g_failed++;
  else g_passed++;
  printf("%-44s %9zu %5d %8.1f  %s\n", what, n, calls, 1e3 * (now() - row_t0), row_bad ? "FAIL" : "ok");
  if (row_bad) printf("    %d problems; first: %s\n", row_bad, row_detail);
  fflush(stdout);
}

/* ------------------------------------------------------------ what is tested */

enum { DT_F32 = 0,
       DT_F16 = 1,
       DT_BF16 = 2 };
static const char *dt_name[3] = {"f32", "f16", "bf16"};
static const ncclDataType_t dt_nccl[3] = {ncclFloat32, ncclFloat16, ncclBfloat16};
static size_t dt_size(int dt) { return dt == DT_F32 ? 4 : 2; }

typedef struct {
  squallCodec_t codec;      /* fp16, bf16 or top-k */
  double ratio;             /* top-k */
  squallValueType_t values; /* top-k values */
  int ef;                   /* error feedback */
} codec_cfg;

static void codec_name(const codec_cfg *c, char *out, size_t len) {
  if (c->codec == squallCodecTopk)
    snprintf(out, len, "topk:%g%s", c->ratio, c->values == squallValueFp16 ? ":fp16" : "");
  else
    snprintf(out, len, "%s", c->codec == squallCodecBf16 ? "bf16" : "fp16");
  if (!c->ef) snprintf(out + strlen(out), len - strlen(out), " ef=0");
}

/* One tensor: device buffers kept for the whole run, and the host twin's
 * residual. Each tensor has a count of its own (N + 2 x its serial, odd
 * stays odd): squall hands a new tensor of a shape it knows the residual
 * of one that may be gone (lib/engine/residual.h), by design, and the twin
 * follows each tensor's own residual from zero. */
typedef struct {
  size_t n;
  int dt;
  void *d_send, *d_recv;
  float *res; /* n floats */
} tensor_t;

static tensor_t *tensor_new(size_t n, int dt) {
  static size_t serial;
  n += 2 * serial++;
  tensor_t *t = xmalloc(sizeof *t);
  t->n = n;
  t->dt = dt;
  t->d_send = dmalloc(n * dt_size(dt));
  t->d_recv = dmalloc(n * dt_size(dt));
  t->res = calloc(n, sizeof(float));
  if (t->res == NULL) exit(1);
  return t;
}

/* ------------------------------------------------------------ inputs */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Magnitudes from 2^-30 to 2^8 with 20-bit mantissas (wide enough that the
 * smallest land among fp16's subnormals once scaled, where the choice of
 * scale shows in the bits), some zeros, and some repeated powers of two
 * (ties for top-k, broken by the lower index); in the element type (rounded
 * to nearest even for 16-bit data). */
static void gen_input(int dt, void *buf, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) {
    uint64_t u = splitmix(&s);
    float v;
    if (u % 97 == 0) {
      v = 0.0f;
    } else if (u % 89 == 0) {
      v = sq_pow2((int)((u >> 20) % 4));
    } else {
      float mant = 1.0f + (float)((u >> 11) & 0xfffff) * sq_pow2(-20);
      v = mant * sq_pow2((int)((u >> 40) % 38) - 30);
    }
    if (u & (1ull << 63)) v = -v;
    if (dt == DT_F32) ((float *)buf)[i] = v;
    else ((uint16_t *)buf)[i] = dt == DT_F16 ? sq_f32_to_f16(v) : sq_f32_to_bf16(v);
  }
}

/* ------------------------------------------------------------ the host twin */

/* One call of one rank, as squall's engine runs it (lib/engine/engine.c) with the
 * host kernels: in (the caller's type) -> want (the caller's type); res is
 * the tensor's residual, or NULL without error feedback. premul is a
 * PreMulSum scalar (1 otherwise). Averages divide by the rank count, 1. */
static void model_step(const codec_cfg *c, int dt, size_t n, float premul, float *res, const void *in,
                       void *want) {
  float *g = xmalloc(n * sizeof *g), *out = xmalloc(n * sizeof *out);
  for (size_t i = 0; i < n; i++) {
    float v = dt == DT_F32 ? ((const float *)in)[i]
                           : sq_half_to_f32(dt == DT_BF16 ? SQ_HALF_BF16 : SQ_HALF_FP16, ((const uint16_t *)in)[i]);
    g[i] = premul == 1.0f ? v : premul * v;
  }
  if (c->codec == squallCodecTopk) {
    size_t k = squall__topk_k(n, c->ratio);
    float scale = 1.0f;
    if (c->values == squallValueFp16) {
      float s = sq_pow2_scale(squall__absmax(g, res, n), SQ_F16_MAX);
      scale = s > sq_pow2(100) ? sq_pow2(100) : s;
    }
    void *slot = xmalloc(squall__topk_slot_bytes(k, c->values));
    void *ws = xmalloc(squall__topk_workspace_bytes(n));
    if (squall__topk_encode(g, res, n, k, c->values, scale, slot, ws) != 0 ||
        squall__sparse_decode(slot, 1, k, c->values, out, n) != 0) {
      fprintf(stderr, "test_nccl_device: the host twin failed (n=%zu k=%zu)\n", n, k);
      exit(1);
    }
    free(slot);
    free(ws);
  } else {
    /* The two-phase route (lib/engine/twophase.c), which the 16-bit codecs
     * take with SQUALL_HALF_ACCUM=fp32 (the default) on an NCCL that has
     * send and receive: the scale leaves headroom for the owner's sum of p
     * codes (limit / 2p), the owner (this rank: p = 1) sums the one block
     * and re-encodes the sum with the same residual, and every rank
     * decodes the re-encoded codes. */
    sq_half_kind kind = c->codec == squallCodecBf16 ? SQ_HALF_BF16 : SQ_HALF_FP16;
    const int p = 1;
    float limit = (kind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX) / (float)(2 * p);
    float max_scale = kind == SQ_HALF_FP16 ? sq_pow2(100) : 1.0f;
    float s = sq_pow2_scale(squall__absmax(g, res, n), limit);
    float scale = s > max_scale ? max_scale : s;
    uint16_t *codes = xmalloc(n * sizeof *codes), *owned = xmalloc(n * sizeof *owned);
    float *sum = xmalloc(n * sizeof *sum);
    squall__half_encode(kind, g, res, codes, n, scale);
    squall__half_reduce(kind, codes, p, n, sum, n, scale);
    squall__half_encode(kind, sum, res, owned, n, scale);
    squall__half_decode(kind, owned, out, n, scale, 0);
    free(codes);
    free(owned);
    free(sum);
  }
  for (size_t i = 0; i < n; i++) {
    if (dt == DT_F32) ((float *)want)[i] = out[i];
    else ((uint16_t *)want)[i] = sq_half_from_f32(dt == DT_BF16 ? SQ_HALF_BF16 : SQ_HALF_FP16, out[i]);
  }
  free(g);
  free(out);
}

static uint32_t elem_bits(int dt, const void *p, size_t i) {
  if (dt == DT_F32) {
    uint32_t v;
    memcpy(&v, (const char *)p + 4 * i, 4);
    return v;
  }
  uint16_t h;
  memcpy(&h, (const char *)p + 2 * i, 2);
  return h;
}

static float elem_value(int dt, uint32_t bits) {
  if (dt == DT_F32) return sq_bits_float(bits);
  return sq_half_to_f32(dt == DT_BF16 ? SQ_HALF_BF16 : SQ_HALF_FP16, (uint16_t)bits);
}

static void same_bits(const char *what, int step, int dt, const void *want, const void *got, size_t n) {
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (elem_bits(dt, want, i) != elem_bits(dt, got, i) && diff++ == 0) first = i;
  if (diff)
    bad("%s step %d: %zu of %zu elements differ from the host twin, first [%zu]: got %.9g (0x%x), "
        "want %.9g (0x%x)",
        what, step, diff, n, first, elem_value(dt, elem_bits(dt, got, first)), elem_bits(dt, got, first),
        elem_value(dt, elem_bits(dt, want, first)), elem_bits(dt, want, first));
}

/* ------------------------------------------------------------ what squall must count */

/* Pass-through reasons this test provokes, by their statistics key. */
enum { R_TYPE,
       R_OP,
       R_SMALL,
       R_IN_GROUP,
       R_CAPTURE,
       R_NONBLOCKING,
       R_COUNT };
static const char *reason_key[R_COUNT] = {"type", "op", "small", "in_group", "graph_capture", "nonblocking"};
#define COMPRESSED (-1)

#ifdef SQ_DIRECT
static squallStats_t stats_before;

static void call_begin(void) { squallStatsGet(&stats_before); }

/* The statistics moved by exactly this call, as expected. */
static void call_end(const char *what, int reason) {
  squallStats_t s;
  squallStatsGet(&s);
  uint64_t dc = s.compressedCalls - stats_before.compressedCalls;
  uint64_t dp = s.passthroughCalls - stats_before.passthroughCalls;
  if (reason == COMPRESSED) {
    if (dc != 1 || dp != 0) bad("%s: %llu compressed and %llu passed through, expected 1 compressed", what,
                                (unsigned long long)dc, (unsigned long long)dp);
    return;
  }
  int r = 0;
  while (r < squallPassNumReasons && strcmp(squallPassReasonName((squallPassReason_t)r), reason_key[reason])) r++;
  uint64_t dr = r < squallPassNumReasons ? s.passthrough[r] - stats_before.passthrough[r] : 0;
  if (dc != 0 || dp != 1 || dr != 1)
    bad("%s: %llu compressed, %llu passed through (%llu for '%s'), expected one pass for '%s'", what,
        (unsigned long long)dc, (unsigned long long)dp, (unsigned long long)dr, reason_key[reason],
        reason_key[reason]);
}
#else
static long exp_compressed, exp_pass[R_COUNT];

static void call_begin(void) {}

/* The statistics file is only written at exit: count what it must show. */
static void call_end(const char *what, int reason) {
  (void)what;
  if (reason == COMPRESSED) exp_compressed++;
  else exp_pass[reason]++;
}
#endif

static ncclResult_t allreduce(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op,
                              ncclComm_t comm, cudaStream_t stream) {
#ifdef SQ_DIRECT
  return squallAllReduce(send, recv, n, t, op, comm, stream);
#else
  return ncclAllReduce(send, recv, n, t, op, comm, stream);
#endif
}

/* ------------------------------------------------------------ (a) uncaptured steps */

static ncclComm_t g_comm;
static cudaStream_t g_stream;
static uint64_t g_seed = 0x5eed;

/* Inputs and the NaN fill go in order on g_stream, and are done on return.
 * g_stream is non-blocking: it does not wait for work on the legacy default
 * stream, where cudaMemset runs and where cudaMemcpy from pageable memory
 * may still be landing when it returns, so those could overwrite a result. */
static void upload(void *d, const void *h, size_t bytes) {
  CK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, g_stream));
  CK(cudaStreamSynchronize(g_stream));
}

static void fill_nan(void *d, size_t bytes) {
  CK(cudaMemsetAsync(d, 0xff, bytes, g_stream));
  CK(cudaStreamSynchronize(g_stream));
}

/* STEPS calls of one tensor with new inputs each time, every result against
 * the host twin, which carries the residual from step to step. */
static void run_steps(const codec_cfg *c, tensor_t *t, ncclRedOp_t op, float premul, int inplace, int steps,
                      const char *label) {
  size_t n = t->n, bytes = n * dt_size(t->dt);
  void *in = xmalloc(bytes), *want = xmalloc(bytes), *got = xmalloc(bytes);
  float *res = c->ef ? t->res : NULL;
  void *recv = inplace ? t->d_send : t->d_recv;
  row_begin();
  for (int s = 0; s < steps; s++) {
    gen_input(t->dt, in, n, ++g_seed);
    model_step(c, t->dt, n, premul, res, in, want);
    upload(t->d_send, in, bytes);
    if (!inplace) fill_nan(recv, bytes); /* NaNs: every element must be written */
    call_begin();
    NOK(allreduce(t->d_send, recv, n, dt_nccl[t->dt], op, g_comm, g_stream));
    CK(cudaStreamSynchronize(g_stream));
    call_end(label, COMPRESSED);
    CK(cudaMemcpy(got, recv, bytes, cudaMemcpyDeviceToHost));
    same_bits(label, s, t->dt, want, got, n);
  }
  row_end(label, n, steps);
  free(in);
  free(want);
  free(got);
}

/* ------------------------------------------------------------ (b) CUDA graphs */

/* Captures one all-reduce on g_stream in global mode (what PyTorch's graphs
 * use) and instantiates it; NULL, with the reason noted, when capture
 * fails (the run goes on: a failed capture leaves the context usable). */
static cudaGraphExec_t capture(const void *send, void *recv, size_t n, ncclDataType_t type, ncclRedOp_t op,
                               const char *label) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
  ncclResult_t r = allreduce(send, recv, n, type, op, g_comm, g_stream);
  cudaError_t e = cudaStreamEndCapture(g_stream, &graph);
  if (r != ncclSuccess) bad("%s: the captured call returned %d (%s)", label, (int)r, ncclGetErrorString(r));
  if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    bad("%s: capturing the call failed: %s", label, cudaGetErrorString(e));
    cudaGetLastError();
    return NULL;
  }
  return exec;
}

/* One uncaptured warm-up (squall agrees on the configuration, allocates the
 * residual and scratch), then the call captured once and replayed REPLAYS
 * times with new inputs copied into the same send buffer; each replay
 * against the host twin and its evolving residual. Capture counts as one
 * compressed call; replays run no host code and count nothing. */
static void run_graph(const codec_cfg *c, tensor_t *t, ncclRedOp_t op, const char *label) {
  size_t n = t->n, bytes = n * dt_size(t->dt);
  void *in = xmalloc(bytes), *want = xmalloc(bytes), *got = xmalloc(bytes);
  float *res = c->ef ? t->res : NULL;
  cudaGraphExec_t exec = NULL;
  row_begin();
  for (int s = 0; s <= REPLAYS + 1; s++) {
    gen_input(t->dt, in, n, ++g_seed);
    model_step(c, t->dt, n, 1.0f, res, in, want);
    upload(t->d_send, in, bytes);
    fill_nan(t->d_recv, bytes);
    if (s == 0) { /* the warm-up */
      call_begin();
      NOK(allreduce(t->d_send, t->d_recv, n, dt_nccl[t->dt], op, g_comm, g_stream));
      CK(cudaStreamSynchronize(g_stream));
      call_end(label, COMPRESSED);
    } else {
      if (s == 1) { /* capture; the first replay follows */
        call_begin();
        exec = capture(t->d_send, t->d_recv, n, dt_nccl[t->dt], op, label);
        call_end(label, COMPRESSED);
        if (exec == NULL) break;
      }
      call_begin();
      CK(cudaGraphLaunch(exec, g_stream));
      CK(cudaStreamSynchronize(g_stream));
#ifdef SQ_DIRECT
      squallStats_t st;
      squallStatsGet(&st);
      if (st.calls != stats_before.calls) bad("%s: a graph replay counted a call in the statistics", label);
#endif
    }
    CK(cudaMemcpy(got, t->d_recv, bytes, cudaMemcpyDeviceToHost));
    same_bits(label, s, t->dt, want, got, n);
  }
  if (exec) CK(cudaGraphExecDestroy(exec));
  row_end(label, n, REPLAYS + 2);
  free(in);
  free(want);
  free(got);
}

/* ------------------------------------------------------------ pass-through */

/* A non-blocking communicator may answer ncclInProgress: poll it to the end. */
static int g_nonblocking;

static ncclResult_t settle(ncclResult_t r) {
  double t0 = now();
  while (g_nonblocking && r == ncclInProgress && now() - t0 < 60) ncclCommGetAsyncError(g_comm, &r);
  return r;
}

/* Random normal floats (exponents -27..23), so that a PreMulSum scalar of
 * 0.25 scales them exactly; as integers, any 30-bit pattern. */
static void gen_words(uint32_t *w, size_t words, int as_int) {
  uint64_t s = ++g_seed;
  for (size_t i = 0; i < words; i++) {
    uint64_t u = splitmix(&s);
    w[i] = as_int ? (uint32_t)u & 0x3fffffffu
                  : (uint32_t)(u >> 63) << 31 | (uint32_t)(100 + (u >> 8) % 51) << 23 | ((uint32_t)u & 0x7fffffu);
  }
}

/* NCCL's own ncclAllReduce, squall's interposer bypassed: the one
 * libnccl.so.2 loaded (under the interposer, the program's own symbol is
 * squall's). NULL when it cannot be found. */
typedef ncclResult_t (*allreduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                     cudaStream_t);
static allreduce_fn nccl_itself(void) {
#ifdef SQ_DIRECT
  return ncclAllReduce;
#else
  static allreduce_fn fn;
  if (fn == NULL) {
    void *h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
    if (h) *(void **)&fn = dlsym(h, "ncclAllReduce");
  }
  return fn;
#endif
}

/* Words where a and b differ, and the first of them in *first. */
static size_t words_differ(const uint32_t *a, const uint32_t *b, size_t n, size_t *first) {
  size_t diff = 0;
  *first = 0;
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i] && diff++ == 0) *first = i;
  return diff;
}

/* A call squall must hand to NCCL unchanged: its result must be, bit for
 * bit, what NCCL itself makes of the same input. With one rank that is the
 * input itself for sum, max and average (premul times it for PreMulSum);
 * where NCCL itself differs from that, a note says so. */
static void run_pass(tensor_t *t, ncclDataType_t type, ncclRedOp_t op, float premul, int reason, int captured,
                     const char *label) {
  size_t n = t->n, bytes = n * 4; /* 4-byte types only */
  uint32_t *in = xmalloc(bytes), *got = xmalloc(bytes);
  gen_words(in, n, type == ncclInt32);
  row_begin();
  upload(t->d_send, in, bytes);
  fill_nan(t->d_recv, bytes);
  call_begin();
  if (captured) {
    cudaGraphExec_t exec = capture(t->d_send, t->d_recv, n, type, op, label);
    if (exec) {
      CK(cudaGraphLaunch(exec, g_stream));
      CK(cudaStreamSynchronize(g_stream));
      CK(cudaGraphExecDestroy(exec));
    }
  } else {
    NOK(settle(allreduce(t->d_send, t->d_recv, n, type, op, g_comm, g_stream)));
    CK(cudaStreamSynchronize(g_stream));
  }
  call_end(label, reason);
  CK(cudaMemcpy(got, t->d_recv, bytes, cudaMemcpyDeviceToHost));
  /* NCCL itself, on the same input (the comm's calls settle in order). */
  uint32_t *ref = xmalloc(bytes);
  allreduce_fn real = nccl_itself();
  int same_as_nccl = 0;
  if (real == NULL) {
    bad("%s: NCCL's own ncclAllReduce not found (dlopen libnccl.so.2 RTLD_NOLOAD): %s", label, dlerror());
  } else {
    upload(t->d_send, in, bytes);
    fill_nan(t->d_recv, bytes);
    NOK(settle(real(t->d_send, t->d_recv, n, type, op, g_comm, g_stream)));
    CK(cudaStreamSynchronize(g_stream));
    CK(cudaMemcpy(ref, t->d_recv, bytes, cudaMemcpyDeviceToHost));
    size_t first, diff = words_differ(ref, got, n, &first);
    if (diff)
      bad("%s: %zu of %zu words differ from NCCL's own result, first [%zu]: got 0x%08x, NCCL 0x%08x", label, diff,
          n, first, got[first], ref[first]);
    same_as_nccl = diff == 0;
  }
  if (premul != 1.0f)
    for (size_t i = 0; i < n; i++) in[i] = sq_float_bits(premul * sq_bits_float(in[i]));
  size_t first, diff = words_differ(in, got, n, &first);
  if (diff && real == NULL)
    bad("%s: %zu of %zu words differ from the exact one-rank result, first [%zu]: got 0x%08x, want 0x%08x", label,
        diff, n, first, got[first], in[first]);
  row_end(label, n, 1);
  if (diff && same_as_nccl)
    printf("    note: NCCL itself gives this (squall passed it through unchanged): %zu of %zu words differ from "
           "the exact one-rank result, first [%zu]: 0x%08x, exact 0x%08x\n",
           diff, n, first, got[first], in[first]);
  free(in);
  free(got);
  free(ref);
}

static void pass_through_cases(void) {
  tensor_t *ti = tensor_new(N_BIG, DT_F32), *tm = tensor_new(N_BIG, DT_F32);
  tensor_t *ts = tensor_new(N_SMALL, DT_F32), *tc = tensor_new(N_BIG, DT_F32);
  run_pass(ti, ncclInt32, ncclSum, 1.0f, R_TYPE, 0, "pass: int32 sum");
  run_pass(tm, ncclFloat32, ncclMax, 1.0f, R_OP, 0, "pass: f32 max");
  char small[64];
  snprintf(small, sizeof small, "pass: f32 sum of %zu bytes", ts->n * 4);
  if (ts->n * 4 >= MIN_BYTES) { /* tensor_new's offset grew it past the minimum */
    printf("test_nccl_device: the small tensor has %zu bytes, not under SQUALL_MIN_BYTES=%d\n", ts->n * 4, MIN_BYTES);
    g_failed++;
  } else
    run_pass(ts, ncclFloat32, ncclSum, 1.0f, R_SMALL, 0, small);
  /* A tensor squall has not seen: capture cannot allocate, so it passes. */
  run_pass(tc, ncclFloat32, ncclSum, 1.0f, R_CAPTURE, 1, "pass: first call of a tensor captured");
}

/* ------------------------------------------------------------ one codec */

static void run_codec(const codec_cfg *c) {
  char name[64], label[160];
  codec_name(c, name, sizeof name);
  static const ncclRedOp_t ops[2] = {ncclSum, ncclAvg};
  for (int dt = 0; dt < 3; dt++)
    for (int o = 0; o < 2; o++) {
      tensor_t *t = tensor_new(N_BIG, dt);
      snprintf(label, sizeof label, "%s %s %s", name, dt_name[dt], o ? "avg" : "sum");
      run_steps(c, t, ops[o], 1.0f, 0, STEPS, label);
    }
  tensor_t *t = tensor_new(N_BIG, DT_F32);
  snprintf(label, sizeof label, "%s f32 sum in place", name);
  run_steps(c, t, ncclSum, 1.0f, 1, STEPS, label);
  t = tensor_new(N_BIG, DT_F32);
  snprintf(label, sizeof label, "%s f32 sum, CUDA graph", name);
  run_graph(c, t, ncclSum, label);
  t = tensor_new(N_BIG, c->codec == squallCodecBf16 ? DT_BF16 : DT_F16);
  snprintf(label, sizeof label, "%s %s avg, CUDA graph", name, dt_name[t->dt]);
  run_graph(c, t, ncclAvg, label);
}

/* ------------------------------------------------------------ setup */

static const char *object_of(const char *sym) {
  Dl_info info;
  void *p = dlsym(RTLD_DEFAULT, sym);
  if (p == NULL || !dladdr(p, &info) || info.dli_fname == NULL) return "?";
  return info.dli_fname;
}

static void setup(void) {
  struct cudaDeviceProp prop;
  int v = 0;
  CK(cudaSetDevice(0));
  CK(cudaGetDeviceProperties(&prop, 0));
  ncclGetVersion(&v);
  printf("test_nccl_device: %s (sm_%d%d), NCCL %d from %s; ncclAllReduce from %s\n", prop.name, prop.major,
         prop.minor, v, object_of("ncclGetVersion"), object_of("ncclAllReduce"));
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  ncclUniqueId id;
  row_begin();
  NOK(ncclGetUniqueId(&id));
  NOK(ncclCommInitRank(&g_comm, 1, id, 0));
  row_end("NCCL communicator of one rank", 1, 1);
  if (row_bad) {
    printf("%d passed, %d failed\n", g_passed, g_failed);
    exit(1);
  }
  printf("%-44s %9s %5s %8s  %s\n", "check", "n", "calls", "ms", "result");
}

static void teardown(void) {
  row_begin();
#ifdef SQ_DIRECT
  NOK(squallCommForget(g_comm));
#endif
  NOK(ncclCommDestroy(g_comm));
  CK(cudaStreamDestroy(g_stream));
  row_end("destroy the communicator", 1, 1);
}

/* "fp16", "bf16", "topk:R" or "topk:R:fp16"; 0 on success. */
static int parse_codec(const char *s, codec_cfg *c) {
  memset(c, 0, sizeof *c);
  c->ef = 1;
  c->values = squallValueFp32;
  if (!strcasecmp(s, "fp16")) c->codec = squallCodecFp16;
  else if (!strcasecmp(s, "bf16")) c->codec = squallCodecBf16;
  else if (!strncasecmp(s, "topk:", 5)) {
    char *end;
    c->codec = squallCodecTopk;
    c->ratio = strtod(s + 5, &end);
    if (!strcasecmp(end, ":fp16")) c->values = squallValueFp16;
    else if (*end) return -1;
    if (!(c->ratio > 0 && c->ratio <= 1)) return -1;
  } else
    return -1;
  return 0;
}

#ifdef SQ_DIRECT
/* ------------------------------------------------------------ direct API */

static void tensor_zero_residual(tensor_t *t) { memset(t->res, 0, t->n * sizeof(float)); }

static int set_codec(const codec_cfg *c) {
  squallConfig_t cfg;
  if (squallGetConfig(&cfg) != squallSuccess) return -1;
  cfg.codec = c->codec;
  cfg.topkRatio = c->codec == squallCodecTopk ? c->ratio : cfg.topkRatio;
  cfg.topkValues = c->values;
  cfg.errorFeedback = c->ef;
  cfg.minBytes = MIN_BYTES;
  cfg.minRanks = 1;
  cfg.warmup = 0;
  cfg.efMaxBytes = 0;
  if (squallSetConfig(&cfg) != squallSuccess) {
    fprintf(stderr, "test_nccl_device: squallSetConfig: %s\n", squallGetLastError());
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  codec_cfg codecs[16];
  int nc = 0;
  for (int i = 1; i < argc; i++)
    if (nc == 16 || parse_codec(argv[i], &codecs[nc++]) != 0) {
      fprintf(stderr, "usage: test_nccl_device_direct [CODEC...]  CODEC: fp16, bf16, topk:R or topk:R:fp16 "
                      "(0 < R <= 1); got '%s'\n",
              argv[i]);
      return 2;
    }
  if (nc == 0) {
    static const char *all[] = {"fp16", "bf16", "topk:0.01", "topk:0.01:fp16"};
    for (; nc < 4; nc++) parse_codec(all[nc], &codecs[nc]);
  }
  switch (gpu_device_state()) {
  case 0: return 77;
  case -1: return 1;
  }
  printf("test_nccl_device: direct squallAllReduce, libsquall %s\n", squallVersionString());
  setup();
  for (int i = 0; i < nc; i++) {
    if (set_codec(&codecs[i]) != 0) return 1;
    /* Buffers of earlier codecs keep their residuals: start from zero. */
    row_begin();
    NOK(squallResetResiduals(g_comm));
    row_end("squallResetResiduals", 0, 1);
    run_codec(&codecs[i]);
  }
  pass_through_cases();

  /* Without error feedback nothing is kept between steps. */
  codec_cfg noef = codecs[0];
  noef.ef = 0;
  if (set_codec(&noef) != 0) return 1;
  char label[96];
  codec_name(&noef, label, sizeof label);
  strncat(label, " f32 sum", sizeof label - strlen(label) - 1);
  run_steps(&noef, tensor_new(N_BIG, DT_F32), ncclSum, 1.0f, 0, STEPS, label);

  /* A reset in the middle of a tensor's life: the next step starts from a
   * zero residual on both sides. */
  codec_cfg topk;
  parse_codec("topk:0.01", &topk);
  if (set_codec(&topk) != 0) return 1;
  tensor_t *t = tensor_new(N_BIG, DT_F32);
  run_steps(&topk, t, ncclSum, 1.0f, 0, 2, "topk:0.01 f32 sum before a reset");
  row_begin();
  NOK(squallResetResiduals(g_comm));
  CK(cudaStreamSynchronize(g_stream));
  row_end("squallResetResiduals mid-tensor", 0, 1);
  tensor_zero_residual(t);
  run_steps(&topk, t, ncclSum, 1.0f, 0, 2, "topk:0.01 f32 sum after the reset");

  teardown();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}

#else
/* ------------------------------------------------------------ plain NCCL under the interposer */

/* The codec the interposer was started with, from the same variables. */
static int codec_from_env(codec_cfg *c) {
  const char *comp = getenv("SQUALL_COMPRESS"), *vals = getenv("SQUALL_TOPK_VALUES");
  const char *ef = getenv("SQUALL_EF"), *minr = getenv("SQUALL_MIN_RANKS"), *minb = getenv("SQUALL_MIN_BYTES");
  const char *warm = getenv("SQUALL_WARMUP"), *cap = getenv("SQUALL_EF_MAX_BYTES");
  char spec[96];
  snprintf(spec, sizeof spec, "%s%s", comp ? comp : "",
           vals && !strcasecmp(vals, "fp16") && comp && !strncasecmp(comp, "topk:", 5) ? ":fp16" : "");
  if (comp == NULL || parse_codec(spec, c) != 0) {
    fprintf(stderr, "test_nccl_device: SQUALL_COMPRESS='%s' (SQUALL_TOPK_VALUES='%s'): needs fp16, bf16 or "
                    "topk:R (run it under squall-run --compress ...)\n",
            comp ? comp : "", vals ? vals : "");
    return -1;
  }
  if (vals && strcasecmp(vals, "fp16") && strcasecmp(vals, "fp32")) {
    fprintf(stderr, "test_nccl_device: SQUALL_TOPK_VALUES='%s': needs fp32 or fp16\n", vals);
    return -1;
  }
  c->ef = !(ef && !strcmp(ef, "0"));
  if (ef && strcmp(ef, "0") && strcmp(ef, "1")) {
    fprintf(stderr, "test_nccl_device: SQUALL_EF='%s': needs 0 or 1\n", ef);
    return -1;
  }
  char want_minb[32];
  snprintf(want_minb, sizeof want_minb, "%d", MIN_BYTES);
  if (!minr || strcmp(minr, "1") || !minb || strcmp(minb, want_minb) || (warm && strcmp(warm, "0")) ||
      (cap && strcmp(cap, "0"))) {
    fprintf(stderr, "test_nccl_device: needs SQUALL_MIN_RANKS=1 (have '%s'), SQUALL_MIN_BYTES=%s (have '%s'), "
                    "SQUALL_WARMUP unset or 0 (have '%s') and SQUALL_EF_MAX_BYTES unset or 0 (have '%s')\n",
            minr ? minr : "", want_minb, minb ? minb : "", warm ? warm : "", cap ? cap : "");
    return -1;
  }
  return 0;
}

/* The interposer must be the ncclAllReduce this program calls. */
static void interposer_in_place(void) {
  const char *pre = getenv("LD_PRELOAD"), *obj = object_of("ncclAllReduce");
  row_begin();
  if (pre == NULL || strstr(pre, "libsquall-preload.so") == NULL)
    bad("LD_PRELOAD='%s' does not name libsquall-preload.so: run this under squall-run", pre ? pre : "");
  else if (strstr(obj, "libsquall-preload.so") == NULL)
    bad("ncclAllReduce resolves to %s, not to squall's interposer", obj);
  row_end("ncclAllReduce is squall's interposer", 0, 0);
}

/* Inside a user's group every call passes through. */
static void group_case(void) {
  tensor_t *t = tensor_new(N_BIG, DT_F32);
  size_t bytes = t->n * 4;
  uint32_t *in = xmalloc(bytes), *got = xmalloc(bytes);
  gen_words(in, t->n, 0);
  row_begin();
  upload(t->d_send, in, bytes);
  NOK(ncclGroupStart());
  NOK(ncclAllReduce(t->d_send, t->d_recv, t->n, ncclFloat32, ncclSum, g_comm, g_stream));
  NOK(ncclGroupEnd());
  CK(cudaStreamSynchronize(g_stream));
  call_end("group", R_IN_GROUP);
  CK(cudaMemcpy(got, t->d_recv, bytes, cudaMemcpyDeviceToHost));
  if (memcmp(in, got, bytes)) bad("f32 sum inside a group: not NCCL's exact one-rank result");
  row_end("pass: f32 sum inside ncclGroupStart/End", t->n, 1);
  free(in);
  free(got);
}

/* PreMulSum ops: a host scalar makes a sum of scalar*input (compressed); a
 * device scalar cannot be read without a synchronisation (passed through). */
static void premul_cases(const codec_cfg *c) {
  char name[64], label[160];
  codec_name(c, name, sizeof name);
  float quarter = 0.25f, *d_quarter = dmalloc(sizeof(float));
  ncclRedOp_t op;
  row_begin();
  NOK(ncclRedOpCreatePreMulSum(&op, &quarter, ncclFloat32, ncclScalarHostImmediate, g_comm));
  row_end("ncclRedOpCreatePreMulSum (host scalar 0.25)", 0, 0);
  snprintf(label, sizeof label, "%s f32 PreMulSum(0.25, host)", name);
  run_steps(c, tensor_new(N_BIG, DT_F32), op, 0.25f, 0, STEPS, label);
  NOK(ncclRedOpDestroy(op, g_comm));
  upload(d_quarter, &quarter, sizeof quarter);
  row_begin();
  NOK(ncclRedOpCreatePreMulSum(&op, d_quarter, ncclFloat32, ncclScalarDevice, g_comm));
  row_end("ncclRedOpCreatePreMulSum (device scalar)", 0, 0);
  run_pass(tensor_new(N_BIG, DT_F32), ncclFloat32, op, 0.25f, R_OP, 0, "pass: f32 PreMulSum(0.25, device)");
  NOK(ncclRedOpDestroy(op, g_comm));
}

/* A non-blocking communicator passes through (NCCL may answer ncclInProgress). */
static void nonblocking_case(void) {
  ncclComm_t nb;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclUniqueId id;
  row_begin();
  NOK(ncclGetUniqueId(&id));
  ncclResult_t r = ncclCommInitRankConfig(&nb, 1, id, 0, &config), state = ncclInProgress;
  if (r != ncclSuccess && r != ncclInProgress) bad("ncclCommInitRankConfig (non-blocking) returned %d", (int)r);
  /* Ready once ncclCommGetAsyncError says so, whatever the init returned. */
  double t0 = now();
  while (r == ncclSuccess || r == ncclInProgress) {
    ncclCommGetAsyncError(nb, &state);
    if (state != ncclInProgress || now() - t0 > 60) break;
  }
  row_end("non-blocking communicator of one rank", 0, 1);
  if (state != ncclSuccess) {
    g_failed++;
    printf("    state %d after polling: skipping its all-reduce\n", (int)state);
    return;
  }
  ncclComm_t keep = g_comm;
  g_comm = nb;
  g_nonblocking = 1;
  run_pass(tensor_new(N_BIG, DT_F32), ncclFloat32, ncclSum, 1.0f, R_NONBLOCKING, 0,
           "pass: f32 sum on a non-blocking communicator");
  g_nonblocking = 0;
  g_comm = keep;
  row_begin();
  state = ncclCommFinalize(nb);
  t0 = now();
  while (state == ncclInProgress && now() - t0 < 60) ncclCommGetAsyncError(nb, &state);
  if (state != ncclSuccess) bad("ncclCommFinalize (non-blocking): state %d", (int)state);
  NOK(ncclCommDestroy(nb));
  row_end("finalize and destroy it", 0, 1);
}

static int write_expectations(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/expect", dir);
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "test_nccl_device: cannot write %s\n", path);
    return -1;
  }
  fprintf(f, "compressed_calls %ld\n", exp_compressed);
  long pass = 0;
  for (int r = 0; r < R_COUNT; r++) {
    fprintf(f, "%s %ld\n", reason_key[r], exp_pass[r]);
    pass += exp_pass[r];
  }
  fprintf(f, "passthrough_calls %ld\n", pass);
  fprintf(f, "calls %ld\n", pass + exp_compressed);
  /* Reasons that must not occur. */
  fprintf(f, "error 0\nconfig_mismatch 0\ndisabled 0\nsingle_rank 0\nwarmup 0\n");
  return fclose(f) == 0 ? 0 : -1;
}

static int run(const char *dir) {
  codec_cfg c;
  if (codec_from_env(&c) != 0) return 2;
  switch (gpu_device_state()) {
  case 0: return 77;
  case -1: return 1;
  }
  char name[64];
  codec_name(&c, name, sizeof name);
  printf("test_nccl_device: plain NCCL program under squall's interposer, %s\n", name);
  setup();
  interposer_in_place();
  run_codec(&c);
  premul_cases(&c);
  group_case();
  pass_through_cases();
  nonblocking_case();
  teardown();
  if (write_expectations(dir) != 0) g_failed++;
  printf("test_nccl_device: expects %ld compressed calls in the statistics\n", exp_compressed);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}

/* The number after "key": in a one-line JSON object; -1 when absent. */
static long json_number(const char *json, const char *key) {
  char pat[80];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(json, pat);
  return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

/* DIR/expect against the SQUALL_STATS file DIR/stats.0.json. */
static int check(const char *dir) {
  char path[600], json[4096] = "", key[64];
  snprintf(path, sizeof path, "%s/stats.0.json", dir);
  FILE *f = fopen(path, "r");
  if (f == NULL || !fgets(json, sizeof json, f)) {
    printf("test_nccl_device: FAIL: no statistics in %s (was SQUALL_STATS=%s/stats.%%r.json set?)\n", path, dir);
    if (f) fclose(f);
    return 1;
  }
  fclose(f);
  snprintf(path, sizeof path, "%s/expect", dir);
  if ((f = fopen(path, "r")) == NULL) {
    printf("test_nccl_device: FAIL: no expectations in %s\n", path);
    return 1;
  }
  long want;
  int bad_count = 0, n = 0;
  while (fscanf(f, "%63s %ld", key, &want) == 2) {
    long got = json_number(json, key);
    n++;
    if (got != want) {
      printf("test_nccl_device: FAIL: statistics say %s = %ld, expected %ld\n", key, got, want);
      bad_count++;
    }
  }
  fclose(f);
  printf("test_nccl_device: statistics: %s", json);
  printf("%d passed, %d failed\n", n - bad_count, bad_count);
  return bad_count || n == 0 ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "run")) return run(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "check")) return check(argv[2]);
  fprintf(stderr, "usage: test_nccl_device run DIR    (under squall-run, SQUALL_STATS=DIR/stats.%%r.json)\n"
                  "       test_nccl_device check DIR\n");
  return 2;
}
#endif

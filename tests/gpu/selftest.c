/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * selftest.c - the GPU self-test: every CUDA codec (lib/codecs/cuda/codec_cuda.h)
 * against its host twin (lib/codecs/codec.h), bit for bit, plus timings.
 *
 * For each size and input pattern it runs a kernel once, compares every
 * output and residual byte with the host twin, then times the kernel with
 * CUDA events over several repetitions. One table row per check; the last
 * line reads "N passed, N failed". Exit 0 when all pass, 1 otherwise, 77
 * (skipped) when there is no CUDA device. `selftest [-r REPS] [N ...]`
 * picks other sizes or repetitions (a quick run: selftest -r 2 1000).
 *
 * Equality is exact, with one exception the hardware imposes: a NaN that
 * went through float arithmetic has the canonical payload 0x7fffffff on
 * the GPU, while x86 keeps the operand's payload and sign. Two NaNs (of the
 * element's format) therefore count as equal; the row notes how many. No
 * pattern here has more NaNs than k, so the top-k selections still agree.
 *
 * GB/s counts the bytes a call must read and write at its interface
 * (inputs, outputs, residual), not its workspace traffic.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "codecs/codec.h"
#include "codecs/cuda/codec_cuda.h"

/* ------------------------------------------------------------ bookkeeping */

#define GPU_TEST_NAME "selftest"
#include "gpu_check.h"

static void to_dev(void *d, const void *h, size_t bytes) {
  if (bytes) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
}
static void to_host(void *h, const void *d, size_t bytes) {
  if (bytes) CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* One check's outcome, printed as a table row. */
typedef struct {
  const char *kernel, *variant, *pattern;
  size_t n;
  double us;    /* per call; < 0: not timed */
  double bytes; /* interface bytes per call */
  size_t mismatches;
  size_t nan_equal; /* NaN vs NaN with different payloads */
  char detail[200]; /* the first mismatch */
} check_t;

static void table_header(void) {
  printf("%-13s %-17s %-7s %10s %10s %9s  %s\n", "kernel", "variant", "input", "n", "us/call",
         "GB/s", "result");
}

static void report(check_t *c) {
  char us[32] = "-", gbs[32] = "-";
  if (c->us >= 0) {
    snprintf(us, sizeof us, "%.1f", c->us);
    if (c->bytes > 0 && c->us > 0) snprintf(gbs, sizeof gbs, "%.1f", c->bytes / (c->us * 1e3));
  }
  int ok = c->mismatches == 0;
  if (ok) g_passed++;
  else g_failed++;
  printf("%-13s %-17s %-7s %10zu %10s %9s  %s", c->kernel, c->variant, c->pattern, c->n, us, gbs,
         ok ? "ok" : "FAIL");
  if (c->nan_equal) printf(" (%zu NaN payloads differ)", c->nan_equal);
  printf("\n");
  if (!ok) printf("    %zu mismatches; first: %s\n", c->mismatches, c->detail);
  fflush(stdout);
}

static void note(check_t *c, const char *fmt, ...) {
  if (c->detail[0]) return; /* keep the first */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->detail, sizeof c->detail, fmt, ap);
  va_end(ap);
}

/* ------------------------------------------------------------ comparison */

typedef enum { E_F32,
               E_F16,
               E_BF16 } elem_t;

static int is_nan(elem_t t, uint32_t v) {
  switch (t) {
  case E_F32: return (v & 0x7f800000u) == 0x7f800000u && (v & 0x7fffffu) != 0;
  case E_F16: return (v & 0x7c00u) == 0x7c00u && (v & 0x3ffu) != 0;
  default: return (v & 0x7f80u) == 0x7f80u && (v & 0x7fu) != 0;
  }
}

static uint32_t elem_at(elem_t t, const void *p, size_t i) {
  if (t == E_F32) {
    uint32_t v;
    memcpy(&v, (const char *)p + 4 * i, 4);
    return v;
  }
  uint16_t h;
  memcpy(&h, (const char *)p + 2 * i, 2);
  return h;
}

/* Element-wise comparison of host and device outputs into c. */
static void compare(check_t *c, const char *what, elem_t t, const void *host, const void *dev,
                    size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t h = elem_at(t, host, i), d = elem_at(t, dev, i);
    if (h == d) continue;
    if (is_nan(t, h) && is_nan(t, d)) {
      c->nan_equal++;
      continue;
    }
    c->mismatches++;
    note(c, "%s[%zu]: host 0x%08" PRIx32 ", device 0x%08" PRIx32, what, i, h, d);
  }
}

/* A slot: every byte outside the values exact (indices, scale, padding),
 * the values element-wise. */
static void compare_slot(check_t *c, const unsigned char *host, const unsigned char *dev, size_t k,
                         squallValueType_t vt) {
  size_t bytes = squall__topk_slot_bytes(k, vt);
  size_t v0 = 4 * k, v1 = v0 + (vt == squallValueFp16 ? 2 : 4) * k;
  for (size_t b = 0; b < bytes; b++) {
    if (b >= v0 && b < v1) continue;
    if (host[b] != dev[b]) {
      c->mismatches++;
      note(c, "slot byte %zu (%s): host 0x%02x, device 0x%02x", b,
           b < v0 ? "indices" : "scale or padding", host[b], dev[b]);
    }
  }
  compare(c, "slot value", vt == squallValueFp16 ? E_F16 : E_F32, host + v0, dev + v0, k);
}

/* ------------------------------------------------------------ inputs */

static uint64_t g_rng;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in (-1, 1) times 2^e, e in [lo, hi]: a wide spread of
 * magnitudes, so rounding, subnormal and overflow paths all occur. */
static float wide(int lo, int hi) {
  int e = lo + (int)(rnd() % (uint64_t)(hi - lo + 1));
  float m = (float)((int64_t)(rnd() >> 40) - (1 << 23)) / (float)(1 << 23);
  return m * sq_pow2(e);
}

typedef enum { P_RANDOM,
               P_SPECIAL,
               P_TIES,
               P_COUNT } pattern_t;
static const char *pattern_name[P_COUNT] = {"random", "special", "ties"};

/* special: NaNs (several payloads and signs) at about 0.1%, +-Inf, -0,
 * subnormals, huge values and a class of tied magnitudes among randoms.
 * ties: a handful of values only, so every threshold falls in a tie. */
static float gen_value(pattern_t p, size_t i) {
  static const float tie_set[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f};
  if (p == P_RANDOM) return wide(-30, 4);
  if (p == P_TIES) return tie_set[rnd() % 7];
  if (i % 1021 == 7) return sq_bits_float((rnd() & 1 ? 0xff800001u : 0x7f800001u) | (uint32_t)(rnd() & 0x3fffffu) | (rnd() & 1 ? 0x400000u : 0));
  if (i % 1021 == 500) return sq_bits_float(rnd() & 1 ? 0x7f800000u : 0xff800000u);
  switch (rnd() % 16) {
  case 0: return -0.0f;
  case 1: return sq_bits_float((uint32_t)(rnd() & 0x807fffffu)); /* subnormal or +-0 */
  case 2: return wide(100, 127);                                 /* huge */
  case 3:
  case 4: return rnd() & 1 ? 3.0f : -3.0f; /* ties */
  default: return wide(-30, 4);
  }
}

static void gen_inputs(pattern_t p, size_t n, uint64_t seed, float *g, float *res) {
  g_rng = seed;
  for (size_t i = 0; i < n; i++) g[i] = gen_value(p, i);
  for (size_t i = 0; i < n; i++) res[i] = p == P_TIES ? 0.0f : wide(-40, -8);
}

/* ------------------------------------------------------------ the setup of one size */

typedef struct {
  size_t n;
  pattern_t pattern;
  int reps;
  float *g, *res;              /* host inputs */
  float *d_g, *d_res0, *d_res; /* device: inputs, pristine residual, working residual */
  float *d_f32;                /* a float output of n */
  uint16_t *d_u16;             /* a 16-bit output of n */
  float *d_scalar;             /* absmax, scales */
  int *d_flag;
  void *d_ws;
  size_t ws_bytes;
  cudaEvent_t t0, t1;
} ctx_t;

typedef cudaError_t (*launch_fn)(ctx_t *x, const void *args);

/* Mean time per call over x->reps calls, after one warm-up call. */
static double time_it(ctx_t *x, launch_fn f, const void *args) {
  CK(f(x, args));
  CK(cudaEventRecord(x->t0, 0));
  for (int r = 0; r < x->reps; r++) CK(f(x, args));
  CK(cudaEventRecord(x->t1, 0));
  CK(cudaEventSynchronize(x->t1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, x->t0, x->t1));
  return 1e3 * ms / x->reps;
}

static void restore_res(ctx_t *x) {
  if (x->n) CK(cudaMemcpy(x->d_res, x->d_res0, x->n * 4, cudaMemcpyDeviceToDevice));
}

static check_t new_check(ctx_t *x, const char *kernel, const char *variant) {
  check_t c;
  memset(&c, 0, sizeof c);
  c.kernel = kernel;
  c.variant = variant;
  c.pattern = pattern_name[x->pattern];
  c.n = x->n;
  c.us = -1;
  return c;
}

/* ------------------------------------------------------------ absmax and scale */

typedef struct {
  int with_res;
} absmax_args;

static cudaError_t run_absmax(ctx_t *x, const void *a) {
  const absmax_args *p = a;
  return squall__cuda_absmax(x->d_g, p->with_res ? x->d_res : NULL, x->n, x->d_scalar, x->d_ws,
                             x->ws_bytes, 0);
}

/* Returns the host absmax (with the residual), which picks the scales. */
static float check_absmax(ctx_t *x) {
  float with_res = 0;
  for (int wr = 1; wr >= 0; wr--) {
    check_t c = new_check(x, "absmax", wr ? "g+res" : "g");
    absmax_args args = {wr};
    restore_res(x);
    float h = squall__absmax(x->g, wr ? x->res : NULL, x->n), d = -1;
    CK(run_absmax(x, &args));
    to_host(&d, x->d_scalar, 4);
    compare(&c, "absmax", E_F32, &h, &d, 1);
    c.us = time_it(x, run_absmax, &args);
    c.bytes = (double)x->n * 4 * (wr ? 2 : 1);
    report(&c);
    if (wr) with_res = h;
  }
  return with_res;
}

typedef struct {
  float limit;
} scale_args;

static cudaError_t run_scale(ctx_t *x, const void *a) {
  return squall__cuda_pow2_scale(x->d_scalar, ((const scale_args *)a)->limit, x->d_scalar + 1, 0);
}

static void check_scale(ctx_t *x, float absmax, const char *variant, float limit) {
  check_t c = new_check(x, "pow2_scale", variant);
  scale_args args = {limit};
  to_dev(x->d_scalar, &absmax, 4);
  float h = sq_pow2_scale(absmax, limit), d = -1;
  CK(run_scale(x, &args));
  to_host(&d, x->d_scalar + 1, 4);
  compare(&c, "scale", E_F32, &h, &d, 1);
  c.us = time_it(x, run_scale, &args);
  report(&c);
}

/* ------------------------------------------------------------ 16-bit encode and decode */

typedef struct {
  sq_half_kind kind;
  int with_res, accumulate;
} half_args;

static cudaError_t run_encode(ctx_t *x, const void *a) {
  const half_args *p = a;
  return squall__cuda_half_encode(p->kind, x->d_g, p->with_res ? x->d_res : NULL, x->d_u16, x->n,
                                  x->d_scalar, 0);
}

static cudaError_t run_decode(ctx_t *x, const void *a) {
  const half_args *p = a;
  return squall__cuda_half_decode(p->kind, x->d_u16, x->d_f32, x->n, x->d_scalar, p->accumulate, 0);
}

static void check_encode(ctx_t *x, sq_half_kind kind, int with_res, float scale) {
  static const char *names[2][2] = {{"fp16", "fp16+res"}, {"bf16", "bf16+res"}};
  check_t c = new_check(x, "half_encode", names[kind][with_res]);
  half_args args = {kind, with_res, 0};
  size_t n = x->n;
  float *hres = xmalloc(n * 4), *dres = xmalloc(n * 4);
  uint16_t *hout = xmalloc(n * 2), *dout = xmalloc(n * 2);
  memcpy(hres, x->res, n * 4);
  squall__half_encode(kind, x->g, with_res ? hres : NULL, hout, n, scale);
  to_dev(x->d_scalar, &scale, 4);
  restore_res(x);
  CK(run_encode(x, &args));
  to_host(dout, x->d_u16, n * 2);
  to_host(dres, x->d_res, n * 4);
  compare(&c, "out", kind == SQ_HALF_BF16 ? E_BF16 : E_F16, hout, dout, n);
  if (with_res) compare(&c, "res", E_F32, hres, dres, n);
  else compare(&c, "res (untouched)", E_F32, x->res, dres, n);
  c.us = time_it(x, run_encode, &args);
  c.bytes = (double)n * (4 + 2 + (with_res ? 8 : 0));
  report(&c);
  free(hres), free(dres), free(hout), free(dout);
}

/* Codes are random bit patterns: every NaN, Inf, subnormal and normal. */
static void check_decode(ctx_t *x, sq_half_kind kind, int accumulate, float scale) {
  static const char *names[2][2] = {{"fp16", "fp16+=acc"}, {"bf16", "bf16+=acc"}};
  check_t c = new_check(x, "half_decode", names[kind][accumulate]);
  half_args args = {kind, 0, accumulate};
  size_t n = x->n;
  uint16_t *in = xmalloc(n * 2);
  float *hout = xmalloc(n * 4), *dout = xmalloc(n * 4);
  g_rng = 0x5eed0000u + n + (uint64_t)kind * 2 + (uint64_t)accumulate;
  for (size_t i = 0; i < n; i++) in[i] = (uint16_t)rnd();
  memcpy(hout, x->g, n * 4); /* what accumulate adds onto */
  squall__half_decode(kind, in, hout, n, scale, accumulate);
  to_dev(x->d_u16, in, n * 2);
  to_dev(x->d_f32, x->g, n * 4);
  to_dev(x->d_scalar, &scale, 4);
  CK(run_decode(x, &args));
  to_host(dout, x->d_f32, n * 4);
  compare(&c, "out", E_F32, hout, dout, n);
  c.us = time_it(x, run_decode, &args);
  c.bytes = (double)n * (2 + 4 + (accumulate ? 4 : 0));
  report(&c);
  free(in), free(hout), free(dout);
}

/* ------------------------------------------------------------ top-k */

typedef struct {
  size_t k;
  squallValueType_t vt;
  int with_res;
  void *d_slot;
} topk_args;

static cudaError_t run_topk(ctx_t *x, const void *a) {
  const topk_args *p = a;
  return squall__cuda_topk_encode(x->d_g, p->with_res ? x->d_res : NULL, x->n, p->k, p->vt,
                                  p->vt == squallValueFp16 ? x->d_scalar : NULL, p->d_slot,
                                  x->d_ws, x->ws_bytes, 0);
}

static void check_topk(ctx_t *x, double ratio, squallValueType_t vt, int with_res, float scale) {
  char variant[32];
  size_t n = x->n, k = squall__topk_k(n, ratio);
  snprintf(variant, sizeof variant, "%s%s k=%g%%", vt == squallValueFp16 ? "fp16" : "fp32",
           with_res ? "+res" : "", ratio * 100);
  check_t c = new_check(x, "topk_encode", variant);
  size_t sb = squall__topk_slot_bytes(k, vt);
  unsigned char *hslot = xmalloc(sb), *dslot = xmalloc(sb);
  float *hres = xmalloc(n * 4), *dres = xmalloc(n * 4);
  void *hws = xmalloc(squall__topk_workspace_bytes(n));
  memset(hslot, 0, sb);
  memcpy(hres, x->res, n * 4);
  if (squall__topk_encode(x->g, with_res ? hres : NULL, n, k, vt, scale, hslot, hws) != 0) {
    c.mismatches++;
    note(&c, "host squall__topk_encode(n=%zu, k=%zu) failed", n, k);
  }
  topk_args args = {k, vt, with_res, dmalloc(sb)};
  CK(cudaMemset(args.d_slot, 0xab, sb)); /* the kernel must write every byte */
  to_dev(x->d_scalar, &scale, 4);
  restore_res(x);
  CK(run_topk(x, &args));
  to_host(dslot, args.d_slot, sb);
  to_host(dres, x->d_res, n * 4);
  compare_slot(&c, hslot, dslot, k, vt);
  compare(&c, "res", E_F32, with_res ? hres : x->res, dres, n);
  c.us = time_it(x, run_topk, &args);
  c.bytes = (double)n * (with_res ? 12 : 4) + (double)sb;
  report(&c);
  CK(cudaFree(args.d_slot));
  free(hslot), free(dslot), free(hres), free(dres), free(hws);
}

/* The engine's split top-k where a failure returns: the device selection
 * writes the host's slot and leaves the residual alone; after a payload
 * check (flag 0) the commit leaves the residual squall__topk_finish
 * leaves; with the flag set it leaves it untouched. */
static void check_topk_split(ctx_t *x, double ratio, squallValueType_t vt, float scale) {
  char variant[32];
  size_t n = x->n, k = squall__topk_k(n, ratio), sb = squall__topk_slot_bytes(k, vt);
  snprintf(variant, sizeof variant, "%s k=%g%%", vt == squallValueFp16 ? "fp16" : "fp32", ratio * 100);
  check_t c = new_check(x, "topk_select+commit", variant);
  unsigned char *hslot = xmalloc(sb), *dslot = xmalloc(sb);
  float *hres = xmalloc(n * 4), *dres = xmalloc(n * 4);
  void *hws = xmalloc(squall__topk_workspace_bytes(n));
  memcpy(hres, x->res, n * 4);
  if (squall__topk_select(x->g, hres, n, k, vt, scale, hslot, hws) != 0 ||
      squall__topk_finish(x->g, hres, n, hslot, 1, 0, k, vt, NULL) != 0) {
    c.mismatches++;
    note(&c, "host select + finish (n=%zu, k=%zu) failed", n, k);
  }
  void *d_slot = dmalloc(sb);
  CK(cudaMemset(d_slot, 0xab, sb));
  to_dev(x->d_scalar, &scale, 4);
  restore_res(x);
  CK(squall__cuda_topk_select(x->d_g, x->d_res, n, k, vt, vt == squallValueFp16 ? x->d_scalar : NULL, d_slot,
                              x->d_ws, x->ws_bytes, 0));
  to_host(dslot, d_slot, sb);
  to_host(dres, x->d_res, n * 4);
  compare_slot(&c, hslot, dslot, k, vt);
  compare(&c, "res after select", E_F32, x->res, dres, n);
  int flag = -1, one = 1;
  CK(squall__cuda_sparse_validate(d_slot, 1, k, vt, n, x->d_flag, 0));
  to_host(&flag, x->d_flag, sizeof flag);
  if (flag != 0) {
    c.mismatches++;
    note(&c, "the device payload check flagged a valid slot (%d)", flag);
  }
  to_dev(x->d_flag, &one, sizeof one); /* a corrupt payload: nothing changes */
  CK(squall__cuda_topk_commit(x->d_g, x->d_res, n, k, vt, vt == squallValueFp16 ? x->d_scalar : NULL, x->d_ws,
                              x->ws_bytes, x->d_flag, 0));
  to_host(dres, x->d_res, n * 4);
  compare(&c, "res after a skipped commit", E_F32, x->res, dres, n);
  CK(cudaMemset(x->d_flag, 0, sizeof(int)));
  CK(squall__cuda_topk_commit(x->d_g, x->d_res, n, k, vt, vt == squallValueFp16 ? x->d_scalar : NULL, x->d_ws,
                              x->ws_bytes, x->d_flag, 0));
  to_host(dres, x->d_res, n * 4);
  compare(&c, "res after commit", E_F32, hres, dres, n);
  report(&c);
  CK(cudaFree(d_slot));
  free(hslot), free(dslot), free(hres), free(dres), free(hws);
}

/* ------------------------------------------------------------ sparse decode */

typedef struct {
  const void *d_slots;
  int nranks;
  size_t k;
  squallValueType_t vt;
} sparse_args;

static cudaError_t run_sparse(ctx_t *x, const void *a) {
  const sparse_args *p = a;
  return squall__cuda_sparse_decode(p->d_slots, p->nranks, p->k, p->vt, x->d_f32, x->n, x->d_flag, 0);
}

/* nranks slots of k ascending indices, entry j drawn in its stratum
 * [j*n/k, (j+1)*n/k) (O(k), and ranks overlap at random), values from the
 * pattern; rank r's fp16 scale is 2^-r. */
static unsigned char *make_slots(ctx_t *x, int nranks, size_t k, squallValueType_t vt) {
  size_t n = x->n, sb = squall__topk_slot_bytes(k, vt);
  unsigned char *slots = xmalloc(sb * nranks);
  memset(slots, 0, sb * nranks);
  g_rng = 0x51075eedu + n + (uint64_t)vt;
  for (int r = 0; r < nranks; r++) {
    unsigned char *s = slots + (size_t)r * sb;
    float scale = sq_pow2(-r);
    for (size_t j = 0; j < k; j++) {
      uint64_t lo = (uint64_t)j * n / k, hi = (uint64_t)(j + 1) * n / k; /* k <= n: hi > lo */
      uint32_t idx = (uint32_t)(lo + rnd() % (hi - lo));
      float v = gen_value(x->pattern, idx);
      memcpy(s + 4 * j, &idx, 4);
      if (vt == squallValueFp16) {
        uint16_t h = sq_f32_to_f16(v * scale);
        memcpy(s + 4 * k + 2 * j, &h, 2);
      } else {
        memcpy(s + 4 * k + 4 * j, &v, 4);
      }
    }
    if (vt == squallValueFp16) memcpy(s + squall__slot_scale_offset(k), &scale, 4);
  }
  return slots;
}

/* corrupt: 0 none, 1 an index >= n in the last rank, 2 a repeated index
 * in rank 0. The device must flag it and zero dense, as the host does. */
static void check_sparse(ctx_t *x, squallValueType_t vt, int corrupt) {
  static const char *cname[3] = {"", " bad-index", " repeat"};
  const int nranks = 4;
  size_t n = x->n, k = squall__topk_k(n, 0.1), sb = squall__topk_slot_bytes(k, vt);
  if (corrupt == 2 && k < 2) return;
  char variant[32];
  snprintf(variant, sizeof variant, "%s x%d%s", vt == squallValueFp16 ? "fp16" : "fp32", nranks,
           cname[corrupt]);
  check_t c = new_check(x, "sparse_decode", variant);
  unsigned char *slots = make_slots(x, nranks, k, vt);
  if (corrupt == 1) {
    uint32_t bad = (uint32_t)n;
    memcpy(slots + (size_t)(nranks - 1) * sb + 4 * (k - 1), &bad, 4);
  }
  if (corrupt == 2) memcpy(slots + 4, slots, 4);
  float *hdense = xmalloc(n * 4), *ddense = xmalloc(n * 4);
  int hrc = squall__sparse_decode(slots, nranks, k, vt, hdense, n), dflag = -1;
  sparse_args args = {dmalloc(sb * nranks), nranks, k, vt};
  to_dev((void *)args.d_slots, slots, sb * nranks);
  to_dev(x->d_f32, x->g, n * 4); /* garbage the decoder must overwrite */
  CK(run_sparse(x, &args));
  to_host(ddense, x->d_f32, n * 4);
  to_host(&dflag, x->d_flag, sizeof dflag);
  if (hrc != (corrupt ? -1 : 0)) {
    c.mismatches++;
    note(&c, "host squall__sparse_decode returned %d", hrc);
  }
  if (dflag != (corrupt ? 1 : 0)) {
    c.mismatches++;
    note(&c, "device error flag %d, expected %d", dflag, corrupt ? 1 : 0);
  }
  compare(&c, "dense", E_F32, hdense, ddense, n);
  if (!corrupt) {
    c.us = time_it(x, run_sparse, &args);
    c.bytes = (double)n * 4 + (double)sb * nranks;
  }
  report(&c);
  CK(cudaFree((void *)args.d_slots));
  free(slots), free(hdense), free(ddense);
}

/* ------------------------------------------------------------ quantised  */

typedef struct {
  sq_quant_kind k;
  size_t bucket;
  int with_res;
  uint8_t *d_codes;
} quant_args;

static const char *quant_name(sq_quant_kind k) {
  return k == SQ_QUANT_INT8 ? "int8" : k == SQ_QUANT_INT4 ? "int4"
                                                          : "fp8";
}

static cudaError_t run_quant_encode(ctx_t *x, const void *a) {
  const quant_args *p = a;
  return squall__cuda_quant_encode(p->k, p->bucket, x->d_g, p->with_res ? x->d_res : NULL, p->d_codes,
                                   x->n, 0);
}

static cudaError_t run_quant_decode(ctx_t *x, const void *a) {
  const quant_args *p = a;
  return squall__cuda_quant_decode(p->k, p->bucket, p->d_codes, x->d_f32, x->n, 0);
}

/* Encode (every byte: headers, codes, padding; the residual) and then the
 * decode of those codes, against the host twin. */
static void check_quant(ctx_t *x, sq_quant_kind k, size_t bucket, int with_res) {
  char variant[48];
  snprintf(variant, sizeof variant, "%s/%zu%s", quant_name(k), bucket, with_res ? "+res" : "");
  check_t c = new_check(x, "quant_encode", variant);
  size_t n = x->n, bytes = squall__quant_bytes(k, bucket, n);
  quant_args args = {k, bucket, with_res, dmalloc(bytes ? bytes : 1)};
  float *hres = xmalloc(n * 4), *dres = xmalloc(n * 4), *hout = xmalloc(n * 4), *dout = xmalloc(n * 4);
  uint8_t *hc = xmalloc(bytes + 1), *dc = xmalloc(bytes + 1);
  memcpy(hres, x->res, n * 4);
  squall__quant_encode(k, bucket, x->g, with_res ? hres : NULL, hc, n);
  CK(cudaMemset(args.d_codes, 0xab, bytes)); /* the kernel must write every byte */
  restore_res(x);
  CK(run_quant_encode(x, &args));
  to_host(dc, args.d_codes, bytes);
  to_host(dres, x->d_res, n * 4);
  for (size_t b = 0; b < bytes; b++)
    if (hc[b] != dc[b]) {
      c.mismatches++;
      note(&c, "byte %zu: host 0x%02x, device 0x%02x", b, hc[b], dc[b]);
    }
  if (with_res) compare(&c, "res", E_F32, hres, dres, n);
  else compare(&c, "res (untouched)", E_F32, x->res, dres, n);
  c.us = time_it(x, run_quant_encode, &args);
  c.bytes = (double)n * (4 + (with_res ? 8 : 0)) + (double)bytes;
  report(&c);

  /* Timing re-ran the encode, and with the residual each run encodes a new
   * a = g + r: decode the codes checked above, which the host decodes too. */
  check_t d = new_check(x, "quant_decode", variant);
  squall__quant_decode(k, bucket, hc, hout, n, 0);
  to_dev(args.d_codes, hc, bytes);
  CK(run_quant_decode(x, &args));
  to_host(dout, x->d_f32, n * 4);
  compare(&d, "out", E_F32, hout, dout, n);
  d.us = time_it(x, run_quant_decode, &args);
  d.bytes = (double)n * 4 + (double)bytes;
  report(&d);

  /* reduce: P = 3 copies (random bytes for the other two: every header and
   * code, NaN flags and corrupt exponents included) summed in rank order */
  check_t r = new_check(x, "quant_reduce", variant);
  uint8_t *blocks = xmalloc(3 * bytes + 1), *d_blocks = dmalloc(3 * bytes + 1);
  memcpy(blocks, hc, bytes);
  g_rng = 0x9e3779b9u + n + bucket;
  for (size_t b = bytes; b < 3 * bytes; b++) blocks[b] = (uint8_t)rnd();
  squall__quant_reduce(k, bucket, blocks, 3, bytes, hout, n);
  to_dev(d_blocks, blocks, 3 * bytes);
  CK(squall__cuda_quant_reduce(k, bucket, d_blocks, 3, bytes, x->d_f32, n, 0));
  to_host(dout, x->d_f32, n * 4);
  compare(&r, "out", E_F32, hout, dout, n);
  report(&r);
  CK(cudaFree(args.d_codes));
  CK(cudaFree(d_blocks));
  free(hres), free(dres), free(hout), free(dout), free(hc), free(dc), free(blocks);
}

/* 16-bit codes summed in fp32 over 3 blocks of random codes. */
static void check_half_reduce(ctx_t *x, sq_half_kind kind, float scale) {
  check_t c = new_check(x, "half_reduce", kind == SQ_HALF_BF16 ? "bf16" : "fp16");
  size_t n = x->n;
  uint16_t *in = xmalloc(3 * n * 2 + 2), *d_in = dmalloc(3 * n * 2 + 2);
  float *hout = xmalloc(n * 4), *dout = xmalloc(n * 4);
  g_rng = 0x5eed1234u + n + (uint64_t)kind;
  for (size_t i = 0; i < 3 * n; i++) in[i] = (uint16_t)rnd();
  squall__half_reduce(kind, in, 3, n, hout, n, scale);
  to_dev(d_in, in, 3 * n * 2);
  to_dev(x->d_scalar, &scale, 4);
  CK(squall__cuda_half_reduce(kind, d_in, 3, n, x->d_f32, n, x->d_scalar, 0));
  to_host(dout, x->d_f32, n * 4);
  compare(&c, "out", E_F32, hout, dout, n);
  report(&c);
  CK(cudaFree(d_in));
  free(in), free(hout), free(dout);
}

/* ------------------------------------------------------------ driver */

static void run_size(size_t n, pattern_t p, int reps) {
  ctx_t x;
  memset(&x, 0, sizeof x);
  x.n = n;
  x.pattern = p;
  x.reps = reps > 0 ? reps : n >= ((size_t)1 << 24) ? 10
                                                    : 20;
  x.g = xmalloc(n * 4);
  x.res = xmalloc(n * 4);
  gen_inputs(p, n, 0x5e1f7e57u * (uint64_t)(p + 1) + n, x.g, x.res);
  x.d_g = dmalloc(n * 4);
  x.d_res0 = dmalloc(n * 4);
  x.d_res = dmalloc(n * 4);
  x.d_f32 = dmalloc(n * 4);
  x.d_u16 = dmalloc(n * 2);
  x.d_scalar = dmalloc(2 * sizeof(float));
  x.d_flag = dmalloc(sizeof(int));
  x.ws_bytes = squall__cuda_topk_workspace_bytes(n, n);
  if (squall__cuda_absmax_workspace_bytes(n) > x.ws_bytes)
    x.ws_bytes = squall__cuda_absmax_workspace_bytes(n);
  x.d_ws = dmalloc(x.ws_bytes);
  CK(cudaEventCreate(&x.t0));
  CK(cudaEventCreate(&x.t1));
  to_dev(x.d_g, x.g, n * 4);
  to_dev(x.d_res0, x.res, n * 4);

  /* Scales as the engine picks them: room for 8 ranks' sum. */
  float absmax = check_absmax(&x);
  float s16 = sq_pow2_scale(absmax, SQ_F16_MAX / 8), sb16 = sq_pow2_scale(absmax, SQ_BF16_MAX / 8);
  check_scale(&x, absmax, "fp16 limit", SQ_F16_MAX / 8);
  check_scale(&x, absmax, "bf16 limit", SQ_BF16_MAX / 8);
  for (int kind = 0; kind < 2; kind++)
    for (int wr = 0; wr < 2; wr++) check_encode(&x, (sq_half_kind)kind, wr, kind ? sb16 : s16);
  for (int kind = 0; kind < 2; kind++)
    for (int acc = 0; acc < 2; acc++) check_decode(&x, (sq_half_kind)kind, acc, kind ? sb16 : s16);
  static const double ratios[] = {0.01, 0.25};
  for (size_t r = 0; r < sizeof ratios / sizeof ratios[0]; r++) {
    check_topk(&x, ratios[r], squallValueFp32, 1, 1.0f);
    check_topk(&x, ratios[r], squallValueFp16, 1, s16);
    check_topk(&x, ratios[r], squallValueFp32, 0, 1.0f);
    check_topk_split(&x, ratios[r], squallValueFp32, 1.0f);
    check_topk_split(&x, ratios[r], squallValueFp16, s16);
  }
  if (n <= 1000) check_topk(&x, 1.0, squallValueFp16, 1, s16); /* k == n */
  for (int vt = 0; vt < 2; vt++)
    for (int corrupt = 0; corrupt < 3; corrupt++) check_sparse(&x, (squallValueType_t)vt, corrupt);

  static const sq_quant_kind qkinds[] = {SQ_QUANT_INT8, SQ_QUANT_INT4, SQ_QUANT_FP8};
  for (int q = 0; q < 3; q++) {
    check_quant(&x, qkinds[q], 512, 1);
    check_quant(&x, qkinds[q], 512, 0);
    if (n <= 1000) check_quant(&x, qkinds[q], 24, 1);
  }
  check_half_reduce(&x, SQ_HALF_FP16, s16);
  check_half_reduce(&x, SQ_HALF_BF16, sb16);

  CK(cudaEventDestroy(x.t0));
  CK(cudaEventDestroy(x.t1));
  CK(cudaFree(x.d_g));
  CK(cudaFree(x.d_res0));
  CK(cudaFree(x.d_res));
  CK(cudaFree(x.d_f32));
  CK(cudaFree(x.d_u16));
  CK(cudaFree(x.d_scalar));
  CK(cudaFree(x.d_flag));
  CK(cudaFree(x.d_ws));
  free(x.g);
  free(x.res);
}

static void usage(void) {
  fprintf(stderr, "usage: selftest [-r REPS] [N ...]\n"
                  "  N     sizes to test (default 1 1000 1048579 67108864), at most 2^31-1\n"
                  "  REPS  timed calls per check (default 20, 10 from 2^24 elements)\n");
  exit(2);
}

int main(int argc, char **argv) {
  static const size_t default_sizes[] = {1, 1000, ((size_t)1 << 20) + 3, (size_t)1 << 26};
  size_t sizes[64];
  int nsizes = 0, reps = 0;
  for (int i = 1; i < argc; i++) {
    char *end;
    if (!strcmp(argv[i], "-r") && i + 1 < argc) {
      long r = strtol(argv[++i], &end, 10);
      if (*end || r < 1 || r > 100000) usage();
      reps = (int)r;
      continue;
    }
    unsigned long long v = strtoull(argv[i], &end, 10);
    if (*end || argv[i][0] == '-' || v > 0x7fffffffull || nsizes == 64) usage();
    sizes[nsizes++] = (size_t)v;
  }
  if (nsizes == 0)
    for (; nsizes < (int)(sizeof default_sizes / sizeof default_sizes[0]); nsizes++)
      sizes[nsizes] = default_sizes[nsizes];

  switch (gpu_device_state()) {
  case 0: return 77;
  case -1: return 1;
  }
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("selftest: device 0: %s, sm_%d%d, %.1f GiB\n", prop.name, prop.major, prop.minor,
         (double)prop.totalGlobalMem / (1u << 30));
  table_header();
  for (int s = 0; s < nsizes; s++)
    for (int p = 0; p < P_COUNT; p++) run_size(sizes[s], (pattern_t)p, reps);
  CK(cudaDeviceSynchronize());
  CK(cudaGetLastError());
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * squall-codec-bench - the host codecs alone, on one core, against the
 * memory floor: nanoseconds per element of each codec's whole encode and
 * decode on a large buffer, beside one streaming pass r[i] += g[i] timed in
 * the same run (what any encoder with error feedback must at least do:
 * read g and the residual, write the residual).
 *
 *   squall-codec-bench [-n COUNT] [-r REPS] [--data DIST|all] [--ratio R]
 *                      [--bucket B] [--stores learn|plain|stream]
 *
 * A separate program, not a squall-bench mode: squall-bench times whole
 * all-reduces under MPI (transport, engine, codec together), while this one
 * needs no MPI and calls the codec functions directly, so that a codec's
 * own cost is seen without the noise of a collective. It links the
 * library's internals and is built, not installed.
 *
 * Per codec (error feedback on, the residual carried from repetition to
 * repetition as in training; g fixed per data set):
 *   fp16, bf16   encode + decode as the engine's two-phase path runs them
 *                once a tensor's scale is known: the encoder guesses the
 *                previous scale and finds the absolute maximum in the same
 *                pass (a rescale pass follows only where the agreed scale
 *                differs); and the two-phase reduce
 *   int8, int4, fp8  encode (per-bucket scales, so no absmax pass) +
 *                decode, and the two-phase reduce
 *   topk:R       the engine's top-k where failures end the process (MPI's
 *                default): the one-pass encode (fp32 values; selection and
 *                residual update) + the tiled decode of the one slot.
 *                Where failures return, the engine's host encoder also
 *                copies the residual into a backup in the same pass (one
 *                streamed write more, not timed here)
 *   topk16:R     absmax + the same with fp16 values
 * The reduce column is what the owner of a shard does in the two-phase
 * all-reduce, for BENCH_REDUCE_RANKS ranks: the rank-ordered fp32 sum of the
 * encoded tensor's shards (each rank's contribution), so n elements are
 * decoded into n / ranks sums; the owner's re-encode of its shard is the
 * encode column's work again and is not counted twice.
 * Each figure is the median over the repetitions; "x floor" is the median
 * of each repetition's total over that repetition's floor.
 * "x bound" (fp16, bf16): the same over the 16-bit codecs' traffic bound,
 * two passes that move their bytes and compute nothing (bit operations
 * only): read g and e, write e, stream 2 bytes of codes; read the codes,
 * write the output (with the decoders' stores). What the codec takes
 * beyond it is its arithmetic; the bound itself over the floor is what the
 * traffic costs on this host.
 * Outputs of SQ_OUT_COLD_BYTES or more are decoded as the engine decodes a
 * call that large: cold, with the stores the library learns are faster on
 * this host (cold_stores.c), learned before the first row is timed, as a
 * long-running job has by then; --stores plain or stream imposes them.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "codecs/codec.h"

/* The thread's CPU time: on a machine shared with other work the figures
 * then leave out the time this process waited for a core (memory stalls
 * still count: the thread is running). */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The floor: one pass of r += g, vectorised (AVX where the CPU has it; a
 * scalar loop at -O2 is compute-bound on some cores and would flatter every
 * codec beside it). noinline, so that it is timed as a pass. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("avx"), noinline)) static size_t floor_avx(const float *g, float *r, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = _mm256_add_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(g + i));
    __m256 a1 = _mm256_add_ps(_mm256_loadu_ps(r + i + 8), _mm256_loadu_ps(g + i + 8));
    __m256 a2 = _mm256_add_ps(_mm256_loadu_ps(r + i + 16), _mm256_loadu_ps(g + i + 16));
    __m256 a3 = _mm256_add_ps(_mm256_loadu_ps(r + i + 24), _mm256_loadu_ps(g + i + 24));
    _mm256_storeu_ps(r + i, a0);
    _mm256_storeu_ps(r + i + 8, a1);
    _mm256_storeu_ps(r + i + 16, a2);
    _mm256_storeu_ps(r + i + 24, a3);
  }
  return i;
}
#endif

__attribute__((noinline)) static void floor_pass(const float *g, float *r, size_t n) {
  size_t i = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (squall__cpu_x86(SQ_CPU_AVX)) i = floor_avx(g, r, n);
#endif
  for (; i < n; i++) r[i] += g[i];
}

/* The 16-bit codecs' traffic bound (see the top), on a scratch buffer of
 * n floats that stands for both the residual and the decoder's output (a
 * separate pass over each: the same traffic as two buffers), so that the
 * codec's own buffers keep their values. The codes are streamed where the
 * guessing encoder streams them (SQ_CODES_COLD_BYTES). No arithmetic
 * (xor), so no input slows it. codes: 16-byte aligned. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx"), noinline)) static void bound_encode_avx(const float *g, float *r, uint16_t *codes,
                                                                      size_t n, int cold) {
  for (size_t i = 0; i + 16 <= n; i += 16) {
    __m256 a = _mm256_xor_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(g + i));
    __m256 b = _mm256_xor_ps(_mm256_loadu_ps(r + i + 8), _mm256_loadu_ps(g + i + 8));
    _mm256_storeu_ps(r + i, a);
    _mm256_storeu_ps(r + i + 8, b);
    if (cold) {
      _mm_stream_ps((float *)(codes + i), _mm256_castps256_ps128(a));
      _mm_stream_ps((float *)(codes + i + 8), _mm256_castps256_ps128(b));
    } else {
      _mm_store_ps((float *)(codes + i), _mm256_castps256_ps128(a));
      _mm_store_ps((float *)(codes + i + 8), _mm256_castps256_ps128(b));
    }
  }
  if (cold) _mm_sfence();
}
__attribute__((target("avx"), noinline)) static void bound_decode_avx(const uint16_t *codes, float *out, size_t n,
                                                                      int stream) {
  for (size_t i = 0; i + 16 <= n; i += 16) {
    __m256 x = _mm256_loadu_ps((const float *)(codes + i));
    if (stream) { /* out: 32-byte aligned (bound_pass) */
      _mm256_stream_ps(out + i, x);
      _mm256_stream_ps(out + i + 8, x);
    } else {
      _mm256_storeu_ps(out + i, x);
      _mm256_storeu_ps(out + i + 8, x);
    }
  }
  if (stream) _mm_sfence();
}
#endif

static int forced_stores = -1; /* --stores plain or stream; -1: learned */

/* The stores the 16-bit decoders use for n elements of output: streamed
 * where the output is cold and this process was told, or learned, that
 * streaming is faster. */
static int decode_streams(size_t n) {
  int kind = forced_stores >= 0 ? forced_stores : squall__cold_stores_learned(SQ_COLD_HALF, NULL);
  return n * sizeof(float) >= SQ_OUT_COLD_BYTES && kind == SQ_STORE_STREAM;
}

/* Seconds of the bound for n elements, or 0 where it is not measured (no
 * AVX; fewer than 4096 elements, where timing so little means nothing). */
static double bound_pass(const float *g, float *scratch, uint16_t *codes, size_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (!squall__cpu_x86(SQ_CPU_AVX) || (uintptr_t)codes % 16 || (uintptr_t)scratch % 32 || n < 4096) return 0;
  double t0 = now();
  bound_encode_avx(g, scratch, codes, n, n * sizeof(uint16_t) >= SQ_CODES_COLD_BYTES);
  bound_decode_avx(codes, scratch, n, decode_streams(n));
  return now() - t0;
#else
  (void)g, (void)scratch, (void)codes, (void)n;
  return 0;
#endif
}

typedef struct {
  size_t n, k, bucket;
  float *g, *res, *out, *scratch; /* scratch: the traffic bound's buffer */
  uint16_t *codes;                /* also the quantised codecs' bytes */
  void *slot, *ws;
} bufs;

/* Ranks of the two-phase reduce rows (the engine's case on one node). */
#define BENCH_REDUCE_RANKS 4

enum { C_FP16,
       C_BF16,
       C_INT8,
       C_INT4,
       C_FP8,
       C_TOPK,
       C_TOPK16,
       NCODECS };
static const char *const codec_names[NCODECS] = {"fp16", "bf16", "int8", "int4", "fp8", "topk", "topk16"};

/* The quantised rows: encode, reduce of the shards as the owner of shard 0
 * (the twophase.c geometry: whole buckets per shard), decode. */
static void run_quant(sq_quant_kind k, bufs *b, double parts[4]) {
  size_t n = b->n, p = BENCH_REDUCE_RANKS;
  size_t nb = (n + b->bucket - 1) / b->bucket, sb = (nb + p - 1) / p;
  size_t se = sb * b->bucket, bb = sb * sq_quant_bucket_bytes(k, b->bucket);
  size_t len = se < n ? se : n;
  int blocks = (int)((n + se - 1) / se); /* the shards the tensor has (fewer than p when tiny) */
  uint8_t *codes = (uint8_t *)b->codes;
  double t0 = now();
  squall__quant_encode(k, b->bucket, b->g, b->res, codes, n);
  double t1 = now();
  /* The last shard may be short: the reduce reads whole blocks, so only
   * shards that cover the first len elements are summed (all but a short
   * tail shard at most; the work per element is what is measured). */
  if (blocks > 1 && (size_t)(blocks - 1) * se + len > n) blocks--;
  squall__quant_reduce(k, b->bucket, codes, blocks, bb, b->out + n - len, len);
  double t2 = now();
  if (n * sizeof(float) >= SQ_OUT_COLD_BYTES) /* as the engine decodes a call this large */
    squall__quant_decode_cold(k, b->bucket, codes, b->out, n);
  else
    squall__quant_decode(k, b->bucket, codes, b->out, n, 0);
  double t3 = now();
  parts[0] = 0;
  parts[1] = t1 - t0;
  parts[2] = t3 - t2;
  parts[3] = (t2 - t1) * (double)n / (double)(blocks * len); /* per element decoded, scaled to n */
}

/* The 16-bit scale for a maximum, as the two-phase engine picks it for
 * BENCH_REDUCE_RANKS ranks (bf16 has float's range: at most 1). */
static float half_scale(sq_half_kind kind, float absmax) {
  /* twophase.c's limit for BENCH_REDUCE_RANKS: the format's largest over 2p */
  float limit = (kind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX) / (float)(2 * BENCH_REDUCE_RANKS);
  float s = sq_pow2_scale(absmax, limit);
  return kind == SQ_HALF_BF16 && s > 1.0f ? 1.0f : s;
}

/* One repetition of a codec; parts[0..3] receive absmax, encode, decode,
 * reduce (seconds for n elements). */
static void run_codec(int c, bufs *b, double parts[4]) {
  size_t n = b->n;
  double t0 = now(), t1 = t0, t2, t3, tr = 0;
  if (c == C_INT8 || c == C_INT4 || c == C_FP8) {
    run_quant(c == C_INT8 ? SQ_QUANT_INT8 : c == C_INT4 ? SQ_QUANT_INT4
                                                        : SQ_QUANT_FP8,
              b, parts);
    return;
  }
  if (c == C_FP16 || c == C_BF16) {
    sq_half_kind kind = c == C_FP16 ? SQ_HALF_FP16 : SQ_HALF_BF16;
    /* The engine's steady state: the tensor's previous scale is the guess,
     * and the maximum comes out of the encoding pass (a call whose agreed
     * scale differs adds a rescale pass; the first call of a tensor takes
     * a pass of squall__absmax instead). The scale is that of the data, as
     * after the first call. */
    float s = half_scale(kind, squall__absmax(b->g, b->res, n));
    t0 = t1 = now();
    float m = squall__half_encode_guess(kind, b->g, b->res, b->codes, n, s, n * 2 >= SQ_CODES_COLD_BYTES, NULL);
    float scale = half_scale(kind, m);
    if (squall__half_guess_missed(kind, s, m, scale)) squall__half_rescale(kind, b->res, b->codes, n, s, scale);
    s = scale;
    t2 = now();
    if (n * sizeof(float) >= SQ_OUT_COLD_BYTES) /* as the engine decodes a call this large */
      squall__half_decode_cold(kind, b->codes, b->out, n, s);
    else
      squall__half_decode(kind, b->codes, b->out, n, s, 0);
    t3 = now();
    /* the two-phase reduce: shards of about n / ranks codes, summed into
     * the upper end of out (as twophase.c, whole shards only) */
    size_t se = (n + BENCH_REDUCE_RANKS - 1) / BENCH_REDUCE_RANKS;
    int blocks = (int)(n / se);
    if (blocks > 0) {
      double r0 = now();
      squall__half_reduce(kind, b->codes, blocks, se, b->out + n - se, se, s);
      tr = (now() - r0) * (double)n / (double)((size_t)blocks * se);
    }
  } else {
    squallValueType_t vt = c == C_TOPK16 ? squallValueFp16 : squallValueFp32;
    float s = 1.0f;
    if (c == C_TOPK16) s = sq_pow2_scale(squall__absmax(b->g, b->res, n), SQ_F16_MAX);
    t1 = now();
    if (squall__topk_encode(b->g, b->res, n, b->k, vt, s, b->slot, b->ws) != 0) {
      fprintf(stderr, "squall-codec-bench: top-k encode failed\n");
      exit(1);
    }
    t2 = now();
    if (squall__topk_finish(b->g, NULL, n, b->slot, 1, 0, b->k, vt, b->out) != 0) {
      fprintf(stderr, "squall-codec-bench: top-k finish failed\n");
      exit(1);
    }
    t3 = now();
  }
  parts[0] = t1 - t0;
  parts[1] = t2 - t1;
  parts[2] = t3 - t2;
  parts[3] = tr;
}

/* Decodes cold outputs until the library has learned which stores write
 * them faster, for the 16-bit and the quantised decoders (the trials
 * alternate; each is a whole decode of n). */
static void learn_stores(bufs *b) {
  squall__half_encode(SQ_HALF_FP16, b->g, NULL, b->codes, b->n, 1.0f);
  for (int i = 0; i < 4 * SQ_COLD_TRIALS_PER_KIND && squall__cold_stores_learned(SQ_COLD_HALF, NULL) < 0; i++)
    squall__half_decode_cold(SQ_HALF_FP16, b->codes, b->out, b->n, 1.0f);
  squall__quant_encode(SQ_QUANT_INT8, b->bucket, b->g, NULL, (uint8_t *)b->codes, b->n);
  for (int i = 0; i < 4 * SQ_COLD_TRIALS_PER_KIND && squall__cold_stores_learned(SQ_COLD_QUANT, NULL) < 0; i++)
    squall__quant_decode_cold(SQ_QUANT_INT8, b->bucket, (const uint8_t *)b->codes, b->out, b->n);
}

static void print_stores(size_t n, int stores) {
  static const char *const who[SQ_COLD_SITES] = {"16-bit", "int8, int4, fp8"};
  for (int site = 0; site < SQ_COLD_SITES; site++) {
    double ns[2];
    int kind = squall__cold_stores_learned((sq_cold_site)site, ns);
    printf("# %s decode stores: ", who[site]);
    if (n * sizeof(float) < SQ_OUT_COLD_BYTES)
      printf("plain (outputs under %zu MiB are not cold)\n", SQ_OUT_COLD_BYTES >> 20);
    else if (stores >= 0)
      printf("%s (--stores)\n", stores == SQ_STORE_STREAM ? "streamed" : "plain");
    else if (kind >= 0)
      printf("%s, learned by timing both (best of %d: plain %.3f, streamed %.3f ns/element)\n",
             kind == SQ_STORE_STREAM ? "streamed" : "plain", SQ_COLD_TRIALS_PER_KIND, ns[0], ns[1]);
    else
      printf("not learned yet (plain meanwhile)\n");
  }
}

static void usage(FILE *f) {
  fprintf(f, "usage: squall-codec-bench [-n COUNT] [-r REPS] [--data DIST|all] [--ratio R] [--bucket B]\n"
             "Times each host codec's encode + decode per element on one core, beside the\n"
             "memory floor (one pass r[i] += g[i]) measured in the same run.\n"
             "  -n COUNT      elements (default 16777216)\n"
             "  -r REPS       timed repetitions, median reported (default 5)\n"
             "  --data DIST   uniform (default), normal, lognormal, constant, tiny, sparse,\n"
             "                nonfinite, or all\n"
             "  --ratio R     top-k ratio (default 0.01)\n"
             "  --bucket B    elements per scale of int8, int4, fp8 (default 512; what SQUALL_BUCKET accepts)\n"
             "  --stores S    how the decoders write outputs of 16 MiB or more: learn (default:\n"
             "                what the library does, timing both first), plain or stream\n");
}

int main(int argc, char **argv) {
  size_t n = (size_t)1 << 24;
  int reps = 5, all = 0;
  double ratio = 0.01;
  size_t bucket = 512;
  int stores = -1; /* learn */
  bench_dist dist = BENCH_DIST_UNIFORM;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-n") && v) {
      unsigned long long x = strtoull(v, &end, 10);
      if (*end || x == 0 || x > 0xffffffffull) {
        fprintf(stderr, "squall-codec-bench: -n '%s' is invalid: accepted is a count from 1 to 2^32-1\n", v);
        return 2;
      }
      n = (size_t)x;
      i++;
    } else if (!strcmp(a, "-r") && v) {
      long x = strtol(v, &end, 10);
      if (*end || x < 1 || x > 1000) {
        fprintf(stderr, "squall-codec-bench: -r '%s' is invalid: accepted is 1 to 1000\n", v);
        return 2;
      }
      reps = (int)x;
      i++;
    } else if (!strcmp(a, "--ratio") && v) {
      double x = strtod(v, &end);
      if (*end || !(x > 0.0 && x <= 1.0)) {
        fprintf(stderr, "squall-codec-bench: --ratio '%s' is invalid: accepted is 0 < R <= 1\n", v);
        return 2;
      }
      ratio = x;
      i++;
    } else if (!strcmp(a, "--bucket") && v) {
      /* read as SQUALL_BUCKET is, so that only buckets the library runs are timed */
      squallConfig_t c;
      char spec[64];
      squallConfigDefault(&c);
      snprintf(spec, sizeof spec, "SQUALL_BUCKET=%s", v);
      int one = strlen(v) <= 32 && !strpbrk(v, " \t\n"); /* not a list of settings */
      if (!one || squallConfigParse(&c, spec) != squallSuccess) {
        fprintf(stderr, "squall-codec-bench: --bucket '%s' is invalid: %s\n", v,
                one ? squallGetLastError() : "one count is wanted");
        return 2;
      }
      bucket = c.bucket;
      i++;
    } else if (!strcmp(a, "--stores") && v) {
      if (!strcmp(v, "learn")) stores = -1;
      else if (!strcmp(v, "plain")) stores = SQ_STORE_PLAIN;
      else if (!strcmp(v, "stream")) stores = SQ_STORE_STREAM;
      else {
        fprintf(stderr, "squall-codec-bench: --stores '%s' is invalid: accepted are learn, plain and stream\n", v);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--data") && v) {
      if (!strcmp(v, "all")) all = 1;
      else if (bench_dist_parse(v, &dist)) {
        fprintf(stderr, "squall-codec-bench: --data '%s' is invalid: accepted are uniform, normal, "
                        "lognormal, constant, tiny, sparse, nonfinite and all\n",
                v);
        return 2;
      }
      i++;
    } else {
      fprintf(stderr, "squall-codec-bench: unknown or incomplete option '%s' (see -h)\n", a);
      return 2;
    }
  }

  bufs b = {.n = n, .k = squall__topk_k(n, ratio), .bucket = bucket};
  /* g as malloc places it (16 bytes past a line, as numpy's arrays are):
   * the codecs read the user's tensor wherever it lies */
  b.g = malloc(n * sizeof(float));
  /* the residual and the codes on a line, as the engine allocates them
   * (host_alloc); a residual 16 bytes off a line measured its 16-bit
   * encode 25% slower (line-split stores), a case the engine never has */
  if (posix_memalign((void **)&b.res, 64, n * sizeof(float))) b.res = NULL;
  /* on a line, as the engine's scratch and PyTorch's tensors are: where
   * the quantised decoders can stream (codec_quant.c) */
  if (posix_memalign((void **)&b.out, 64, n * sizeof(float))) b.out = NULL;
  if (posix_memalign((void **)&b.scratch, 64, n * sizeof(float))) b.scratch = NULL; /* the bound may stream */
  /* 16-bit codes, or the quantised codecs' bytes (at most n + 2 per bucket + a bucket) */
  size_t code_bytes = n * sizeof(uint16_t);
  if (squall__quant_bytes(SQ_QUANT_INT8, bucket, n) > code_bytes) code_bytes = squall__quant_bytes(SQ_QUANT_INT8, bucket, n);
  if (posix_memalign((void **)&b.codes, 64, code_bytes)) b.codes = NULL;
  b.slot = malloc(squall__topk_slot_bytes(b.k, squallValueFp32) + squall__topk_slot_bytes(b.k, squallValueFp16));
  b.ws = malloc(squall__topk_workspace_bytes(n));
  double *t = malloc(sizeof(double) * 9 * (size_t)reps);
  if (!b.g || !b.res || !b.out || !b.scratch || !b.codes || !b.slot || !b.ws || !t) {
    fprintf(stderr, "squall-codec-bench: out of memory for %zu elements\n", n);
    return 3;
  }
  /* Touch everything once: page faults are not the codecs' cost. */
  memset(b.out, 0, n * sizeof(float));
  memset(b.scratch, 0, n * sizeof(float));
  memset(b.codes, 0, code_bytes);
  memset(b.ws, 0, squall__topk_workspace_bytes(n));

  /* What a long-running job has done by the time it matters: learnt the
   * decoders' stores for cold outputs (or been told). */
  squall__cold_stores_force(stores);
  forced_stores = stores;
  if (stores < 0 && n * sizeof(float) >= SQ_OUT_COLD_BYTES) learn_stores(&b);

  char cpu[256];
  printf("# squall-codec-bench: %zu elements, %d repetitions (median), top-k ratio %g (k = %zu), "
         "bucket %zu\n",
         n, reps, ratio, b.k, bucket);
  printf("# cpu: %s; SIMD: avx2 %s, f16c %s\n", bench_cpu_model(cpu, sizeof cpu),
         squall__cpu_x86(SQ_CPU_AVX2) ? "yes" : "no", squall__cpu_x86(SQ_CPU_F16C) ? "yes" : "no");
  printf("# ns/element of thread CPU time; floor = one vectorised pass r[i] += g[i];\n"
         "# fp16, bf16 = encode at the tensor's previous scale, absmax in the same pass (the steady state) + decode; int8, int4, fp8 = encode + decode (absmax = 0);\n"
         "# topk = encode (selection and residual update in one pass) + tiled decode (absmax = 0);\n# reduce = the two-phase owner's rank-ordered\n"
         "# sum of %d shards per element decoded (not in total);\n"
         "# x floor = median over the repetitions of total / the floor timed just before;\n"
         "# bound (fp16, bf16) = their bytes moved without arithmetic: read g and e, write e, stream\n"
         "# 2 bytes of codes; read the codes, write the output; x bound = median of total / bound\n",
         BENCH_REDUCE_RANKS);
  print_stores(n, stores);
  printf("#%-10s %-8s %8s %8s %8s %8s %8s %8s %9s %8s %8s\n", "data", "codec", "absmax", "encode", "decode",
         "total", "reduce", "floor", "x floor", "bound", "x bound");
  int first = all ? 0 : (int)dist, last = all ? BENCH_NUM_DISTS - 1 : (int)dist;
  for (int d = first; d <= last; d++) {
    bench_fill((bench_dist)d, 1, 0, 0, 0, n, b.g);
    for (int c = 0; c < NCODECS; c++) {
      memset(b.res, 0, n * sizeof(float));
      double parts[4], fl[1];
      run_codec(c, &b, parts); /* warm-up */
      double *ta = t, *te = t + reps, *td = t + 2 * reps, *tf = t + 3 * reps, *tr = t + 4 * reps;
      double *tb = t + 7 * reps, *rb = t + 8 * reps;
      int half = c == C_FP16 || c == C_BF16;
      for (int r = 0; r < reps; r++) {
        /* The floor on a scratch copy of the same size, interleaved with
         * the codec so that both see the same machine load. */
        double f0 = now();
        floor_pass(b.g, b.out, n);
        tf[r] = now() - f0;
        run_codec(c, &b, parts);
        ta[r] = parts[0];
        te[r] = parts[1];
        td[r] = parts[2];
        tr[r] = parts[3];
        tb[r] = half ? bound_pass(b.g, b.scratch, b.codes, n) : 0;
      }
      /* x floor: the median of each repetition's total over the floor timed
       * just before it, so that a change of the machine's load between
       * repetitions (other tenants' memory traffic) cancels out */
      double *tot = t + 5 * reps, *ratio = t + 6 * reps;
      for (int r = 0; r < reps; r++) {
        tot[r] = ta[r] + te[r] + td[r];
        ratio[r] = tot[r] / tf[r];
      }
      int nb = 0; /* the repetitions with a bound (all or none) */
      for (int r = 0; r < reps; r++)
        if (tb[r] > 0) rb[nb++] = tot[r] / tb[r];
      double mx = median(ratio, reps), mt = median(tot, reps);
      fl[0] = median(tf, reps);
      double ns = 1e9 / (double)n;
      printf(" %-10s %-8s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %9.2f", bench_dist_name((bench_dist)d),
             codec_names[c], median(ta, reps) * ns, median(te, reps) * ns, median(td, reps) * ns,
             mt * ns, median(tr, reps) * ns, fl[0] * ns, mx);
      double mb = nb ? median(tb, reps) : 0;
      if (nb) printf(" %8.3f %8.2f\n", mb * ns, median(rb, nb));
      else printf(" %8s %8s\n", "-", "-");
      fflush(stdout);
    }
  }
  free(b.g);
  free(b.res);
  free(b.out);
  free(b.scratch);
  free(b.codes);
  free(b.slot);
  free(b.ws);
  free(t);
  return 0;
}

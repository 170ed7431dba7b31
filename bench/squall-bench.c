/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * squall-bench - how much faster squall's compressed all-reduce (or
 * reduce-scatter, --coll) is than the plain one, and at what accuracy
 * cost, in the style of nccl-tests.
 *
 *   mpirun -n 4 squall-bench -b 1M -e 64M -f 4 -C none,fp16,bf16,topk:0.01
 *
 * For each size, every codec runs on the same buffers with the same
 * sequence of inputs (new data every iteration, error feedback on, as in
 * training): warm-up iterations, timed iterations (only the all-reduce
 * between two clock reads; the inputs are generated before a barrier), then
 * one untimed check iteration whose result is compared with the exact sum.
 * Each rank takes its median iteration; the row shows the slowest rank's.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_backend.h"
#include "common/stats_path.h"
#include "squall_mpi.h"
#include "../tools/typo_refuse.h"

typedef struct {
  const bench_options *opt;
  const bench_backend *be;
  MPI_Comm comm;
  int rank, nranks;
  squallConfig_t base;
  bench_dtype dtype; /* the type being run (one of -d's) */
  double start;
  /* progress, rank 0: iterations weighted by bytes, so that the estimate
   * follows the big sizes that take the time */
  double work_total, work_done, last_print;
} bench_ctx;

static void die(bench_ctx *c, const char *what) {
  fprintf(stderr, "squall-bench: rank %d: %s\n", c->rank, what);
  MPI_Abort(MPI_COMM_WORLD, 3);
  exit(3);
}

/* The benchmark's own MPI calls (barriers, combining the figures) on its
 * communicator, whose errors return (MPI_ERRORS_RETURN, for the timed
 * all-reduces): a failure ends the job as MPI's default handler would. */
static void mpi_ok(bench_ctx *c, int err, const char *call) {
  if (err == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING + 64], text[MPI_MAX_ERROR_STRING];
  snprintf(msg, sizeof msg, "%s failed: %s", call, bench_mpi_error_text(err, text, sizeof text));
  die(c, msg);
}

/* calls: how many calls of `bytes` have ended since the last report */
static void progress_calls(bench_ctx *c, size_t bytes, int calls, const char *codec, int it, int total) {
  c->work_done += (double)bytes * calls;
  if (c->rank != 0 || !c->opt->progress) return;
  double now = MPI_Wtime(), el = now - c->start;
  /* Quiet for short runs; then a line every few seconds (stderr is a pipe
   * under mpirun, so whole lines, no carriage returns). */
  if (el < 3.0 || now - c->last_print < 5.0) return;
  c->last_print = now;
  double f = c->work_done / c->work_total;
  char h[32];
  fprintf(stderr, "squall-bench: %3.0f%% (%s, %s, iteration %d/%d), %.0f s elapsed, about %.0f s left\n",
          100.0 * f, bench_human_bytes((double)bytes, h, sizeof h), codec, it, total, el,
          f > 0 ? el * (1.0 - f) / f : 0.0);
}

static void progress(bench_ctx *c, size_t bytes, const char *codec, int it, int total) {
  progress_calls(c, bytes, 1, codec, it, total);
}

/* Fills the send buffer with this rank's input of iteration `iter`, in
 * the type being run: generated as float (in stage where the buffer is
 * not host memory of floats), converted, uploaded. */
static void fill(bench_ctx *c, void *send, float *stage, size_t count, int iter) {
  if (c->be->host_accessible && c->dtype == BENCH_F32) {
    bench_fill(c->opt->data, c->opt->seed, c->rank, iter, 0, count, send);
    return;
  }
  bench_fill(c->opt->data, c->opt->seed, c->rank, iter, 0, count, stage);
  bench_to_type(c->dtype, stage, c->be->host_accessible ? send : (void *)stage, count);
  if (!c->be->host_accessible && c->be->upload(send, stage, count * bench_dtype_size(c->dtype)))
    die(c, "copying the input into the backend's buffer failed");
}

/* The result as float: recv itself, or converted (and downloaded) into
 * stage. */
static const float *result_floats(bench_ctx *c, const void *recv, float *stage, size_t count) {
  if (c->be->host_accessible && c->dtype == BENCH_F32) return recv;
  if (!c->be->host_accessible && c->be->download(stage, recv, count * bench_dtype_size(c->dtype)))
    die(c, "copying the result to the host failed");
  bench_from_type(c->dtype, c->be->host_accessible ? recv : (const void *)stage, stage, count);
  return stage;
}

/* One call of the collective measured (--coll): through squall, or plain
 * (the collective library's own, never through squall: the "none" rows). */
static void allreduce(bench_ctx *c, int plain, const void *send, void *recv, size_t count) {
  char why[512];
  int rs = c->opt->coll == BENCH_REDUCESCATTER;
  int (*fn)(const void *, void *, size_t, bench_dtype, bench_op, MPI_Comm, char *, size_t) =
      rs ? (plain ? c->be->plain_reduce_scatter : c->be->reduce_scatter)
         : (plain ? c->be->plain_allreduce : c->be->allreduce);
  if (fn(send, recv, count, c->dtype, c->opt->op, c->comm, why, sizeof why)) die(c, why);
}

/* The collective library's first calls at a size are slow (connections,
 * buffers touched for the first time): warm it up with plain calls, so
 * that the first codec in -C does not bear that alone. They go through
 * squall with compression off, which passes them to the plain collective
 * and, on host memory (the mpi backend), times them for its cost model
 * as a job's own plain calls would: from 3 warm-ups on, the codecs' calls
 * need no plain probes (squall(7), COST MODEL), which would otherwise fall
 * among the first timed iterations. Each size and codec starts squall's
 * state afresh (free_state), so each warms up. */
static void warm_up(bench_ctx *c, const void *send, void *recv, size_t count, int calls) {
  squallConfig_t off = c->base;
  if (squallConfigSet(&off, "SQUALL_COMPRESS", "none") != squallSuccess || squallSetConfig(&off) != squallSuccess)
    die(c, squallGetLastError());
  for (int it = 0; it < calls; it++) allreduce(c, 0, send, recv, count);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The largest error a correct result may have, for the bench's own
 * pass/fail (-c 1); the smoke test applies its own, tighter bounds.
 *  - none: the float sum of P inputs rounds at most P-1 times, each by at
 *    most u = 2^-24 of a partial sum; 4*P*u leaves room for cancellation.
 *  - fp16, bf16: each rank's encode error (unit roundoff 2^-11, 2^-8)
 *    enters twice with error feedback (sent now, carried from the last
 *    step) and the 16-bit sum rounds up to P-1 times: 8*P units is well
 *    above that and far below a broken codec.
 *  - int8, int4, fp8: the same count with the unit of each format relative
 *    to its bucket's max (1/254, 1/14, 2^-4); the two-phase sum adds one
 *    more encode, which 8*P units covers. int8's and int4's unit is of the
 *    bucket's largest element, so for data whose buckets stand far above
 *    their typical element (heavy tails: lognormal) it grows with `crest`
 *    (bucket_crest), counted from uniform data's sqrt(3).
 *  - top-k: no bound here; how much a step leaves in the residual is what
 *    the column reports.
 * One step's error is measured against that step's inputs, while error
 * feedback also sends what earlier steps left: where a step's data are a
 * few nonzeros (sparse: any lossy codec), or (int4, 7 levels) mostly far
 * below their bucket's largest (lognormal), that carry can be larger than
 * the step itself, so those get no bound. Every other bound stays below 1, the
 * error of a result of zeros, or of one that lost most of the sum
 * (MAX_BOUND; correct results measured at most 0.52, int4 on uniform
 * data); a result of zeros for inputs that are not is wrong whatever the
 * bound (the caller checks it). */
#define MAX_BOUND 0.9
static double error_bound(const char *codec, int p, bench_dist data, double crest, bench_dtype t) {
  /* tiny: fp16's scale stops at 2^100, so values near 1e-38 stay below its
   * smallest code and wait in the residual; no bound to check. */
  if (data == BENCH_DIST_TINY && strcmp(codec, "none")) return INFINITY;
  if (data == BENCH_DIST_SPARSE && strcmp(codec, "none")) return INFINITY;
  if (data == BENCH_DIST_LOGNORMAL && !strcmp(codec, "int4")) return INFINITY;
  double spread = crest > sqrt(3.0) ? crest / sqrt(3.0) : 1.0, b = INFINITY;
  /* half and bfloat16 data: the plain sum rounds to the type up to P-1
   * times and the result once more, each by its unit (2^-11, 2^-8), on
   * top of whatever the codec loses: 4P units, as for float's none */
  double type_err = t == BENCH_F32 ? 0.0 : 4.0 * p * bench_dtype_unit(t);
  if (!strcmp(codec, "none")) b = 4.0 * p * bench_dtype_unit(t);
  if (!strcmp(codec, "fp16")) b = 8.0 * p * ldexp(1.0, -11);
  if (!strcmp(codec, "bf16")) b = 8.0 * p * ldexp(1.0, -8);
  if (!strcmp(codec, "int8")) b = 8.0 * p / 254.0 * spread;
  if (!strcmp(codec, "int4")) b = 8.0 * p / 14.0 * spread;
  if (!strcmp(codec, "fp8")) b = 8.0 * p * ldexp(1.0, -4);
  if (strcmp(codec, "none")) b += type_err;
  return isinf(b) ? b : fmin(b, MAX_BOUND);
}

/* How far each bucket's largest finite element stands above the data's
 * own size: sqrt(mean of every element's bucket max squared / mean
 * square). sqrt(3) for uniform data, more for heavy tails; 1 when there
 * is nothing finite and nonzero. */
static double bucket_crest(const float *g, size_t n, size_t bucket) {
  double max2 = 0.0, sq = 0.0;
  for (size_t b = 0; b < n; b += bucket) {
    size_t e = n - b < bucket ? n : b + bucket;
    double m = 0.0;
    for (size_t i = b; i < e; i++) {
      double v = fabs((double)g[i]);
      if (!isfinite(v)) continue;
      if (v > m) m = v;
      sq += v * v;
    }
    max2 += m * m * (double)(e - b);
  }
  return sq > 0.0 ? sqrt(max2 / sq) : 1.0;
}

/* Whether this rank's SQUALL_STATS file can be written, by the library's
 * own rule; says why not on stderr. */
static int stats_file_writable(const char *pattern, int rank) {
  char why[1400];
  if (!pattern[0] || squall__stats_path_check(pattern, rank, why, sizeof why) == 0) return 1;
  fprintf(stderr, "squall-bench: SQUALL_STATS='%s': %s\n", pattern, why);
  return 0;
}

/* Check calls tried before giving up on matching the timed calls' path:
 * a header, which makes the check's configuration count, comes within
 * 256 calls of a size the cost model settled (squall(7), COST MODEL: the
 * recheck). */
#define CHECK_TRIES 257

static const char *path_of(const char *codec, const squallStats_t *d, uint64_t wire_per_call,
                           uint64_t ring, const squallConfig_t *cfg, bench_coll coll) {
  if (!strcmp(codec, "none")) return "plain";
  if (d->compressedCalls == 0) return "passthrough";
  if (d->passthroughCalls) return "mixed";
  /* a reduce-scatter is the two-phase route's first half, fp16 and bf16
   * too (whatever SQUALL_HALF_ACCUM) */
  if (coll == BENCH_REDUCESCATTER && strncmp(codec, "topk", 4)) return "two-phase";
  /* the quantised codecs, and 16-bit codes summed in fp32 */
  if (!strcmp(codec, "int8") || !strcmp(codec, "int4") || !strcmp(codec, "fp8") ||
      (strncmp(codec, "topk", 4) && cfg->halfAccum == squallHalfAccumFp32))
    return "two-phase";
  if (strncmp(codec, "topk", 4)) return "16-bit";
  return wire_per_call == ring ? "dense" : "sparse"; /* the engine's dense fallback */
}

/* The timed calls' compressed and passed-through counts (into *d), and
 * the reason most of those that passed through had (-1: none did; the
 * same on every rank: every reason is decided from inputs the ranks
 * share). */
static int timed_calls(const squallStats_t *s0, const squallStats_t *s1, squallStats_t *d) {
  memset(d, 0, sizeof *d);
  d->compressedCalls = s1->compressedCalls - s0->compressedCalls;
  d->passthroughCalls = s1->passthroughCalls - s0->passthroughCalls;
  int reason = -1;
  uint64_t most = 0;
  for (int k = 0; k < squallPassNumReasons; k++)
    if (s1->passthrough[k] - s0->passthrough[k] > most) most = s1->passthrough[k] - s0->passthrough[k], reason = k;
  return reason;
}

static void run_one(bench_ctx *c, const char *codec, void *send, void *recv, float *stage,
                    size_t count, bench_row *row) {
  const bench_options *o = c->opt;
  size_t bytes = count * bench_dtype_size(c->dtype);
  int p = c->nranks, total = o->warmup + o->iters;
  squallConfig_t cfg = c->base;
  if (squallConfigSet(&cfg, "SQUALL_COMPRESS", codec) != squallSuccess ||
      squallSetConfig(&cfg) != squallSuccess)
    die(c, squallGetLastError());
  /* Each codec starts from empty residuals: nothing carried over from the
   * previous codec's steps. */
  c->be->reset_residuals(c->comm);

  /* none: the plain collective itself, not squall passing it through */
  int plain = !strcmp(codec, "none");
  double *times = malloc(sizeof(double) * (size_t)o->iters);
  if (times == NULL) die(c, "out of memory for timings");
  squallStats_t s0, s1;
  squallStatsGet(&s0);
  for (int it = 0; it < total; it++) {
    fill(c, send, stage, count, it);
    mpi_ok(c, MPI_Barrier(c->comm), "MPI_Barrier");
    if (it == o->warmup) squallStatsGet(&s0);
    double t0 = MPI_Wtime();
    allreduce(c, plain, send, recv, count);
    double t1 = MPI_Wtime();
    if (it >= o->warmup) times[it - o->warmup] = t1 - t0;
    progress(c, bytes, codec, it + 1, total);
  }
  squallStatsGet(&s1);
  double mean = 0.0;
  for (int i = 0; i < o->iters; i++) mean += times[i] / o->iters;
  qsort(times, (size_t)o->iters, sizeof *times, cmp_double);
  double median = o->iters % 2 ? times[o->iters / 2]
                               : 0.5 * (times[o->iters / 2 - 1] + times[o->iters / 2]);
  double fastest = times[0], slowest = times[o->iters - 1];
  free(times);

  squallStats_t d;
  int reason = timed_calls(&s0, &s1, &d);
  uint64_t wire = s1.bytesWire - s0.bytesWire, in = s1.bytesIn - s0.bytesIn;
  uint64_t ring = bench_coll_ring_wire(o->coll, bytes, p);
  if (s1.calls == s0.calls) { /* a backend that bypasses squall's counters */
    wire = ring * (uint64_t)o->iters;
    in = bytes * (uint64_t)o->iters;
  }

  /* The check: one more step, untimed, against the exact sum. Each rank
   * checks its 1/P slice (all ranks hold the same result, verified by the
   * hash), recomputing every rank's input for it. */
  double err2 = 0.0, ref2 = 0.0;
  uint64_t hash = 0;
  int same_path = 1;  /* the check call took the timed calls' path */
  double crest = 1.0; /* of the check's input (bucket_crest) */
  double out2 = 0.0;  /* the result's sum of squares, over this rank's slice */
  if (o->check) {
    /* The check call takes the timed calls' path, so that its error is
     * that path's: where they compressed it compresses too (the cost model,
     * left on, could make it a plain probe), and where they all passed
     * through it does too. The decision stays the same on every rank. */
    squallConfig_t chk = cfg;
    if (d.compressedCalls > 0) chk.costModel = 0;
    else chk.codec = squallCodecNone;
    if (!plain && squallSetConfig(&chk) != squallSuccess) die(c, squallGetLastError());
    /* A size the cost model has settled as plain passes through without
     * a call header until its next one (CHECK_TRIES): only a header makes
     * the new configuration count, the same on every rank. Until then the
     * check call is repeated (the path of each is the same on every rank,
     * and so is the count). */
    for (int tries = 0; tries < CHECK_TRIES; tries++) {
      squallStats_t k0, k1;
      squallStatsGet(&k0);
      fill(c, send, stage, count, total);
      allreduce(c, plain, send, recv, count);
      squallStatsGet(&k1);
      same_path = plain || (k1.compressedCalls > k0.compressedCalls) == (d.compressedCalls > 0);
      if (same_path) break;
    }
    if (!plain && squallSetConfig(&cfg) != squallSuccess) die(c, squallGetLastError());
    if (!same_path && c->rank == 0)
      fprintf(stderr, "squall-bench: %zu bytes, %s: %d check calls %s where the timed calls %s: no rel_err\n",
              bytes, codec, CHECK_TRIES, d.compressedCalls ? "passed through" : "compressed",
              d.compressedCalls ? "compressed" : "passed through");
    /* the check's input as float, for its buckets' crest (stage holds
     * it in the type, or nothing, after fill) */
    const float *input = send;
    if (!(c->be->host_accessible && c->dtype == BENCH_F32)) {
      bench_fill(o->data, o->seed, c->rank, total, 0, count, stage);
      input = stage;
    }
    crest = bucket_crest(input, count, cfg.bucket > 0 ? cfg.bucket : 512);
    /* a reduce-scatter's result is this rank's block, [lo, hi) of the sum */
    int rs = o->coll == BENCH_REDUCESCATTER;
    size_t n_out = bench_coll_out_count(o->coll, count, p);
    const float *out = result_floats(c, recv, stage, n_out);
    size_t lo = count * (size_t)c->rank / (size_t)p, hi = count * (size_t)(c->rank + 1) / (size_t)p;
    const float *mine = rs ? out : out + lo;
    bench_error_sums(o->data, o->seed, c->dtype, p, total, o->op == BENCH_AVG, mine, lo, hi - lo, &err2, &ref2);
    for (size_t i = 0; i < hi - lo; i++) out2 += (double)mine[i] * mine[i];
    /* equal floats: equal results in the type; the blocks of a
     * reduce-scatter differ by design, so there is nothing to compare */
    hash = rs ? 0 : bench_hash(out, count * sizeof(float));
  }

  /* Combine over ranks: maxima, sums, and the hash's range. */
  double mx[6] = {median, (s1.codecSeconds - s0.codecSeconds) / o->iters, crest, mean, fastest, slowest};
  double sum[5] = {(double)wire / o->iters, (double)in, err2, ref2, out2};
  uint64_t hmin = hash, hmax = hash;
  mpi_ok(c, MPI_Allreduce(MPI_IN_PLACE, mx, 6, MPI_DOUBLE, MPI_MAX, c->comm), "MPI_Allreduce of the times");
  mpi_ok(c, MPI_Allreduce(MPI_IN_PLACE, sum, 5, MPI_DOUBLE, MPI_SUM, c->comm), "MPI_Allreduce of the sums");
  mpi_ok(c, MPI_Allreduce(MPI_IN_PLACE, &hmin, 1, MPI_UINT64_T, MPI_MIN, c->comm), "MPI_Allreduce of the hashes");
  mpi_ok(c, MPI_Allreduce(MPI_IN_PLACE, &hmax, 1, MPI_UINT64_T, MPI_MAX, c->comm), "MPI_Allreduce of the hashes");

  memset(row, 0, sizeof *row);
  row->bytes = bytes;
  row->count = bench_coll_out_count(o->coll, count, p);
  row->dtype = c->dtype;
  snprintf(row->codec, sizeof row->codec, "%s", codec);
  row->time_us = mx[0] * 1e6;
  row->mean_us = mx[3] * 1e6;
  row->min_us = mx[4] * 1e6;
  row->max_us = mx[5] * 1e6;
  row->algbw_gbs = mx[0] > 0 ? (double)bytes / mx[0] / 1e9 : 0.0;
  row->busbw_gbs = row->algbw_gbs * bench_coll_bus_factor(o->coll, p);
  row->wire_bytes = sum[0] / p;
  row->ratio = sum[0] > 0 ? sum[1] / (sum[0] * o->iters) : 0.0;
  row->codec_us = mx[1] * 1e6;
  row->speedup = -1;
  row->path = path_of(codec, &d, (uint64_t)llround((double)wire / o->iters), ring, &cfg, o->coll);
  row->pass_reason = plain || reason < 0 ? NULL : squallPassReasonName((squallPassReason_t)reason);
  row->checked = o->check && same_path;
  if (row->checked) {
    row->rel_err = sum[3] > 0 ? sqrt(sum[2] / sum[3]) : sqrt(sum[2]);
    row->consistent = hmin == hmax;
    /* Plain MPI may legitimately differ between ranks; squall must not. */
    row->wrong = !(row->rel_err <= error_bound(codec, p, o->data, mx[2], c->dtype)) || (sum[4] == 0.0 && sum[3] > 0.0) ||
                 (!row->consistent && strcmp(codec, "none"));
  }
}

/* --alternate: what squall costs against the plain all-reduce where the
 * difference is a few percent, which separate runs cannot resolve (the
 * machine's speed drifts between them): blocks of -n calls through squall
 * and of plain calls, interleaved on the same buffers, the order swapped
 * every block, after -w warm-up calls through squall (which let the cost
 * model settle a size class). A block's time is the slowest rank's mean
 * call; the row is the median block, against the plain blocks' median.
 * "none" runs squall with compression off: what squall adds to the calls
 * it passes through. No check of the result (the usual rows have it). */
static double median_of(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static void run_alternating(bench_ctx *c, const char *codec, void *send, void *recv, float *stage, size_t count,
                            bench_row *row) {
  const bench_options *o = c->opt;
  size_t bytes = count * bench_dtype_size(c->dtype);
  int p = c->nranks, blocks = o->alternate;
  squallConfig_t cfg = c->base;
  if (squallConfigSet(&cfg, "SQUALL_COMPRESS", codec) != squallSuccess || squallSetConfig(&cfg) != squallSuccess)
    die(c, squallGetLastError());
  c->be->reset_residuals(c->comm);
  for (int it = 0; it < o->warmup; it++) {
    fill(c, send, stage, count, it);
    allreduce(c, 0, send, recv, count);
    progress(c, bytes, codec, it + 1, o->warmup + 2 * blocks * o->iters);
  }
  double *t = malloc(sizeof(double) * 2 * (size_t)blocks); /* [squall blocks | plain blocks] */
  if (t == NULL) die(c, "out of memory for timings");
  squallStats_t s0, s1;
  squallStatsGet(&s0);
  double codec_s = 0.0;
  for (int b = 0; b < blocks; b++)
    for (int side = 0; side < 2; side++) {
      int plain = side ^ (b & 1); /* squall first in even blocks, plain first in odd ones */
      fill(c, send, stage, count, o->warmup + b);
      mpi_ok(c, MPI_Barrier(c->comm), "MPI_Barrier");
      squallStats_t k0, k1;
      squallStatsGet(&k0);
      double t0 = MPI_Wtime();
      for (int it = 0; it < o->iters; it++) allreduce(c, plain, send, recv, count);
      double el = (MPI_Wtime() - t0) / o->iters;
      squallStatsGet(&k1);
      if (!plain) codec_s += k1.codecSeconds - k0.codecSeconds;
      t[plain * blocks + b] = el;
      progress_calls(c, bytes, o->iters, codec, o->warmup + (2 * b + side + 1) * o->iters,
                     o->warmup + 2 * blocks * o->iters);
    }
  squallStatsGet(&s1);
  mpi_ok(c, MPI_Allreduce(MPI_IN_PLACE, t, 2 * blocks, MPI_DOUBLE, MPI_MAX, c->comm), "MPI_Allreduce of the times");
  /* the mean call, for the codec's share of it and against plain's mean */
  double mean_t = 0.0, plain_mean_t = 0.0, min_t = t[0], max_t = t[0];
  for (int b = 0; b < blocks; b++) {
    mean_t += t[b] / blocks;
    plain_mean_t += t[blocks + b] / blocks;
    min_t = t[b] < min_t ? t[b] : min_t;
    max_t = t[b] > max_t ? t[b] : max_t;
  }
  double squall_t = median_of(t, blocks), plain_t = median_of(t + blocks, blocks);
  free(t);
  uint64_t calls = (uint64_t)blocks * (uint64_t)o->iters;
  double sum[2] = {(double)(s1.bytesWire - s0.bytesWire) / (double)calls, (double)(s1.bytesIn - s0.bytesIn)},
         mx = codec_s / (double)calls;
  mpi_ok(c, MPI_Allreduce(MPI_IN_PLACE, sum, 2, MPI_DOUBLE, MPI_SUM, c->comm), "MPI_Allreduce of the sums");
  mpi_ok(c, MPI_Allreduce(MPI_IN_PLACE, &mx, 1, MPI_DOUBLE, MPI_MAX, c->comm), "MPI_Allreduce of the times");
  squallStats_t d;
  int reason = timed_calls(&s0, &s1, &d);
  uint64_t ring = bench_coll_ring_wire(o->coll, bytes, p);
  memset(row, 0, sizeof *row);
  row->bytes = bytes;
  row->count = bench_coll_out_count(o->coll, count, p);
  row->dtype = c->dtype;
  snprintf(row->codec, sizeof row->codec, "%s", codec);
  row->time_us = squall_t * 1e6;
  row->mean_us = mean_t * 1e6;
  row->min_us = min_t * 1e6;
  row->max_us = max_t * 1e6;
  row->plain_us = plain_t * 1e6;
  row->plain_mean_us = plain_mean_t * 1e6;
  row->algbw_gbs = squall_t > 0 ? (double)bytes / squall_t / 1e9 : 0.0;
  row->busbw_gbs = row->algbw_gbs * bench_coll_bus_factor(o->coll, p);
  row->wire_bytes = sum[0] / p;
  row->ratio = sum[0] > 0 ? sum[1] / (sum[0] * (double)calls) : 0.0;
  row->codec_us = mx * 1e6;
  row->speedup = squall_t > 0 ? plain_t / squall_t : -1;
  /* "none" went through squall here: its path is squall's, not plain's */
  row->path = d.compressedCalls == 0 ? "passthrough"
                                     : path_of(codec, &d, (uint64_t)llround(sum[0] / p), ring, &cfg, o->coll);
  row->pass_reason = reason < 0 ? NULL : squallPassReasonName((squallPassReason_t)reason);
}

/* All ranks agree whether everyone allocated, so that nobody waits on a
 * rank that is about to stop. */
static void all_ok_or_exit(bench_ctx *c, int ok, const char *what, int status) {
  int all = ok;
  mpi_ok(c, MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, c->comm), "MPI_Allreduce of the ranks' status");
  if (!all) {
    if (c->rank == 0) fprintf(stderr, "squall-bench: %s\n", what);
    MPI_Finalize();
    exit(status);
  }
}
static void all_ok(bench_ctx *c, int ok, const char *what) { all_ok_or_exit(c, ok, what, 3); }

/* Whether path can be written (an existing file, or a new one in an
 * existing writable directory): checked before the run, not after it. */
static int writable(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0) return !S_ISDIR(st.st_mode) && access(path, W_OK) == 0;
  if (*path == 0 || path[strlen(path) - 1] == '/') return 0; /* a directory's name */
  const char *slash = strrchr(path, '/');
  if (slash == NULL) return access(".", W_OK | X_OK) == 0;
  char dir[4096];
  size_t len = slash == path ? 1 : (size_t)(slash - path);
  if (len >= sizeof dir) return 0;
  memcpy(dir, path, len);
  dir[len] = 0;
  return access(dir, W_OK | X_OK) == 0;
}

/* An output (flag and path, NULL: none asked for) that rank 0 cannot
 * write is a usage error, found before the run. */
static void check_output(bench_ctx *c, const char *flag, const char *path) {
  char why[4200];
  snprintf(why, sizeof why, "%s %s: cannot write there (a directory, no such directory, or not writable)", flag,
           path ? path : "");
  all_ok_or_exit(c, c->rank != 0 || !path || writable(path), why, 2);
}

/* Every codec at one size of the type being run, into rows[0 ..
 * ncodecs), printed as they are complete; returns how many. */
static int run_size(bench_ctx *c, size_t bytes, bench_row *rows, FILE *out) {
  const bench_options *opt = c->opt;
  size_t count = bytes / bench_dtype_size(c->dtype);
  void *send = c->be->alloc(bytes), *recv = c->be->alloc(bytes);
  /* the float data before conversion, or a copy of the backend's buffer */
  int staged = !c->be->host_accessible || c->dtype != BENCH_F32;
  float *stage = staged ? malloc(count * sizeof(float)) : NULL;
  char h[32], why[128];
  snprintf(why, sizeof why, "out of memory for two %s buffers on some rank", bench_human_bytes((double)bytes, h, sizeof h));
  all_ok(c, send && recv && (!staged || stage), why);
  fill(c, send, stage, count, 0); /* data, not whatever the allocation held */
  for (int k = 0; k < opt->ncodecs; k++) {
    /* Each codec from squall's state afresh: a row measures its codec, not
     * what the codecs before it in -C left (the cost model's verdict on the
     * size holds until its next call header, up to 256 calls on) */
    if (k > 0) c->be->free_state(c->comm);
    warm_up(c, send, recv, count, opt->warmup);
    (opt->alternate ? run_alternating : run_one)(c, opt->codecs[k], send, recv, stage, count, &rows[k]);
  }
  /* Speedups need none's time at this size, whatever its place in -C
   * (--alternate: each row has its own plain blocks). */
  const bench_row *none = NULL;
  for (int k = 0; k < opt->ncodecs; k++)
    if (!strcmp(rows[k].codec, "none") && !opt->alternate) none = &rows[k];
  for (int k = 0; k < opt->ncodecs; k++) {
    if (none && rows[k].time_us > 0) rows[k].speedup = none->time_us / rows[k].time_us;
    if (out) bench_report_row(out, opt, &rows[k]);
  }
  c->be->free_state(c->comm); /* residuals and scratch of this size */
  c->be->release(send);
  c->be->release(recv);
  free(stage);
  return opt->ncodecs;
}

/* --coll reducescatter on a backend without one, or of a type it does not
 * compress: 1 after saying why (rank 0). */
static int refuse_reduce_scatter(const bench_backend *be, const bench_options *opt, FILE *err) {
  if (be->reduce_scatter == NULL || be->plain_reduce_scatter == NULL) {
    if (err) fprintf(err, "squall-bench: --coll reducescatter: the %s backend cannot run it: %s\n", be->name,
                     be->no_reduce_scatter ? be->no_reduce_scatter : "it has no reduce-scatter");
    return 1;
  }
  for (int t = 0; t < opt->ndtypes; t++)
    if (!(be->supports_reduce_scatter ? be->supports_reduce_scatter : be->supports)(opt->dtypes[t])) {
      if (err) fprintf(err, "squall-bench: -d: type '%s' is not benchmarked with --coll reducescatter by the %s "
                            "backend: squall passes its reduce-scatters through uncompressed (it compresses "
                            "those of float only), so there is nothing to compare; accepted is float\n",
                       bench_dtype_name(opt->dtypes[t]), be->name);
      return 1;
    }
  return 0;
}

/* The command line for the JSON, one string: words with characters the
 * shell would read are single-quoted, so that it can be run again. */
static const char *command_line(int argc, char **argv) {
  static char line[4096];
  size_t n = 0;
  for (int i = 0; i < argc && n + 1 < sizeof line; i++) {
    const char *a = argv[i];
    int plain = *a != 0;
    for (const char *q = a; *q; q++)
      if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:,=+@%", *q)) plain = 0;
    n += (size_t)snprintf(line + n, sizeof line - n, "%s%s", i ? " " : "", plain ? "" : "'");
    for (const char *q = a; *q && n + 5 < sizeof line; q++)
      n += (size_t)(*q == '\'' ? snprintf(line + n, sizeof line - n, "'\\''")
                               : snprintf(line + n, sizeof line - n, "%c", *q));
    if (!plain && n + 1 < sizeof line) line[n++] = '\'', line[n] = 0;
  }
  return line;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  bench_ctx c = {0};
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.nranks);
  FILE *out = c.rank == 0 ? stdout : NULL, *err = c.rank == 0 ? stderr : NULL;
  bench_options opt;
  int rc = bench_parse_args(argc, argv, &opt, out, err);
  if (rc != 0) {
    MPI_Finalize();
    return rc == 1 ? 0 : 2;
  }
  c.opt = &opt;
  /* squall's own tools refuse a misspelt SQUALL_ variable (squall(7)) */
  int typo = squall_tool_refuse_typos(c.rank == 0 ? "squall-bench" : NULL) > 0, any_typo = 0;
  MPI_Allreduce(&typo, &any_typo, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_typo) {
    MPI_Finalize();
    return 2;
  }
  char why[512];
  c.be = bench_backend_find(opt.backend, why, sizeof why);
  if (c.be == NULL) {
    if (err) fprintf(err, "squall-bench: %s\n", why);
    MPI_Finalize();
    return 2;
  }
  for (int t = 0; t < opt.ndtypes; t++)
    if (!c.be->supports(opt.dtypes[t])) {
      if (err)
        fprintf(err, "squall-bench: -d: type '%s' is not benchmarked by the %s backend: squall passes it "
                     "through uncompressed, so there is nothing to compare; accepted are float, half and "
                     "bfloat16\n",
                bench_dtype_name(opt.dtypes[t]), c.be->name);
      MPI_Finalize();
      return 2;
    }
  if (opt.coll == BENCH_REDUCESCATTER && refuse_reduce_scatter(c.be, &opt, err)) {
    MPI_Finalize();
    return 2;
  }
  if (opt.errors_fatal && strcmp(c.be->name, "mpi")) {
    if (err) fprintf(err, "squall-bench: --errors fatal applies to the mpi backend; the %s backend's calls "
                          "always return their errors\n",
                     c.be->name);
    MPI_Finalize();
    return 2;
  }
  /* the sizes of each type, in whole elements of it */
  size_t sizes[BENCH_MAX_TYPES][BENCH_MAX_SIZES];
  int nsizes[BENCH_MAX_TYPES], all_sizes = 0;
  for (int t = 0; t < opt.ndtypes; t++) {
    size_t es = bench_dtype_size(opt.dtypes[t]);
    nsizes[t] = bench_sizes(&opt, es, sizes[t], BENCH_MAX_SIZES);
    if (nsizes[t] > 0) nsizes[t] = bench_coll_sizes(opt.coll, es, c.nranks, sizes[t], nsizes[t]);
    if (nsizes[t] >= 0 && sizes[t][nsizes[t] - 1] / es <= (size_t)INT32_MAX) {
      all_sizes += nsizes[t];
      continue;
    }
    int bad = nsizes[t];
    if (err && bad < 0)
      fprintf(err, "squall-bench: -b %zu -e %zu with %s %zu give more than %d sizes; use a larger "
                   "step\n",
              opt.min_bytes, opt.max_bytes, opt.step_factor ? "-f" : "-i",
              opt.step_factor ? (size_t)opt.step_factor : opt.step_bytes, BENCH_MAX_SIZES);
    else if (err)
      fprintf(err, "squall-bench: -e %zu is too large: MPI counts are int, so at most %zu bytes of "
                   "%s per rank\n",
              opt.max_bytes, (size_t)INT32_MAX * es, bench_dtype_name(opt.dtypes[t]));
    MPI_Finalize();
    return 2;
  }

  /* The benchmark sets these two itself: a value in the environment,
   * even one the library would reject, is not a reason to stop. */
  static const struct {
    const char *name, *why;
  } set_here[] = {{"SQUALL_COMPRESS", "-C chooses the codecs"}, {"SQUALL_MIN_BYTES", "every size may compress"}};
  for (size_t i = 0; i < sizeof set_here / sizeof set_here[0]; i++)
    if (getenv(set_here[i].name)) {
      if (err) fprintf(err, "squall-bench: note: %s in the environment is ignored (%s)\n", set_here[i].name,
                       set_here[i].why);
      unsetenv(set_here[i].name);
    }
  /* The configuration every codec starts from: the environment's, with
   * SQUALL_MIN_BYTES=0 so that small sizes compress too, then -S. A
   * variable the library cannot read is a usage error here: the library
   * itself would fall back to its defaults, and every row would then
   * silently run a configuration other than the one asked for. */
  if (squallConfigFromEnv(&c.base) != squallSuccess) {
    if (err) fprintf(err, "squall-bench: the environment: %s\n", squallGetLastError());
    MPI_Finalize();
    return 2;
  }
  c.base.minBytes = 0;
  if (opt.squall_spec && squallConfigParse(&c.base, opt.squall_spec) != squallSuccess) {
    if (err) fprintf(err, "squall-bench: -S '%s': %s\n", opt.squall_spec, squallGetLastError());
    MPI_Finalize();
    return 2;
  }
  c.base.codec = squallCodecNone;
  /* The library writes SQUALL_STATS at exit, where a path it cannot write
   * would only be warned about after the whole run: every rank tries its
   * own file now, and any rank's failure is a usage error everywhere. */
  int stats_ok = stats_file_writable(c.base.statsPath, c.rank), all_stats_ok = 0;
  MPI_Allreduce(&stats_ok, &all_stats_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_stats_ok) {
    MPI_Finalize();
    return 2;
  }
  if (c.nranks < c.base.minRanks && err)
    fprintf(err, "squall-bench: warning: %d rank%s, fewer than SQUALL_MIN_RANKS=%d: squall passes every call "
                 "through; run it under mpirun -n %d or more\n",
            c.nranks, c.nranks == 1 ? "" : "s",
            c.base.minRanks, c.base.minRanks);

  MPI_Comm_dup(MPI_COMM_WORLD, &c.comm);
  /* An all-reduce that fails returns its error to the benchmark, which
   * names it and exits with status 3, rather than MPI aborting the job; as
   * under mpi4py or NCCL, squall then keeps what it needs to give a
   * failed call back (a backup of the residual, which the host encoders
   * mostly copy in their encoding pass). --errors fatal keeps MPI's
   * default, where it need not. */
  MPI_Comm_set_errhandler(c.comm, opt.errors_fatal ? MPI_ERRORS_ARE_FATAL : MPI_ERRORS_RETURN);
  all_ok(&c, c.be->setup(c.comm, stderr) == 0, "backend setup failed (see above)");
  check_output(&c, "-J", opt.json_path);
  check_output(&c, "--plot", opt.plot_path);
  int nrows = 0;
  bench_row *rows = calloc((size_t)all_sizes * (size_t)opt.ncodecs, sizeof *rows);
  all_ok(&c, rows != NULL, "out of memory for the results");
  for (int t = 0; t < opt.ndtypes; t++)
    for (int s = 0; s < nsizes[t]; s++)
      c.work_total += (double)sizes[t][s] * opt.ncodecs *
                      (opt.warmup + (opt.alternate ? 2 * opt.alternate : 1) * opt.iters);
  /* clang-format off */
  bench_run_info info = {.nranks = c.nranks, .backend = c.be->name, .memory = c.be->memory,
                         .opt = &opt, .base = &c.base, .link = getenv("SQUALL_BENCH_LINK"),
                         .command = command_line(argc, argv)};
  /* clang-format on */
  if (info.link && !*info.link) info.link = NULL;
  /* What the figures depend on: the CPU, how many ranks share it, the MPI. */
  char cpu[256], mpilib[MPI_MAX_LIBRARY_VERSION_STRING];
  int mpilen = 0, node_ranks = 1;
  MPI_Comm node;
  mpi_ok(&c, MPI_Comm_split_type(c.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  MPI_Comm_size(node, &node_ranks);
  MPI_Comm_free(&node);
  MPI_Get_library_version(mpilib, &mpilen);
  mpilib[strcspn(mpilib, "\n")] = 0;
  long ncores = sysconf(_SC_NPROCESSORS_ONLN);
  info.cpu = bench_cpu_model(cpu, sizeof cpu);
  info.cores = ncores > 0 ? (int)ncores : 0;
  info.node_ranks = node_ranks;
  info.mpi_library = mpilib;
  info.nccl_version = c.be->version ? c.be->version() : NULL;
  time_t now = time(NULL);
  struct tm utc;
  if (gmtime_r(&now, &utc)) strftime(info.date, sizeof info.date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  if (gethostname(info.hostname, sizeof info.hostname) != 0) snprintf(info.hostname, sizeof info.hostname, "unknown");
  info.hostname[sizeof info.hostname - 1] = 0;
  if (out) bench_report_header(out, &info);
  c.start = MPI_Wtime();

  for (int t = 0; t < opt.ndtypes; t++) {
    c.dtype = opt.dtypes[t];
    for (int s = 0; s < nsizes[t]; s++) nrows += run_size(&c, sizes[t][s], &rows[nrows], out);
  }
  info.seconds = MPI_Wtime() - c.start;
  int status = 0;
  for (int i = 0; i < nrows; i++) status |= rows[i].wrong;
  if (out) {
    bench_report_summary(out, &info, rows, nrows);
    if (opt.json_path && bench_report_json(opt.json_path, &info, rows, nrows) != 0) {
      fprintf(stderr, "squall-bench: -J %s: cannot write the JSON: %s\n", opt.json_path,
              strerror(errno));
      status = 1;
    }
  }
  c.be->teardown();
  squallMpiCommFree(c.comm);
  MPI_Comm_free(&c.comm);
  MPI_Finalize();
  /* gnuplot runs after MPI is gone: no forking inside an MPI process. */
  /* a missing gnuplot is a warning with a status of its own (4), below a
   * wrong result's or an unwritten file's (1) */
  int plotted = out && opt.plot_path ? bench_plot(opt.plot_path, &info, rows, nrows, stderr) : 0;
  if (plotted == -1) status = 1;
  else if (plotted == -2 && status == 0) status = 4;
  free(rows);
  return status;
}

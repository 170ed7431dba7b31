/* SPDX-License-Identifier: BSD-3-Clause */
/* train_run.c - one data-parallel training run through squallMpiAllreduce. */
#include "train_run.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "squall_mpi.h"
#include "train_optim.h"

/* Prints a usage error when loud; the caller returns -1. */
#define PARSE_ERROR(...)                                     \
  do {                                                       \
    if (loud) fprintf(stderr, "squall-train: " __VA_ARGS__); \
  } while (0)

/* Appends to d->spec; returns -1 when it no longer fits. */
__attribute__((format(printf, 2, 3))) static int spec_append(train_run_desc *d, const char *fmt, ...) {
  size_t used = strlen(d->spec);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(d->spec + used, sizeof d->spec - used, fmt, ap);
  va_end(ap);
  return n < 0 || (size_t)n >= sizeof d->spec - used ? -1 : 0;
}

int train_run_parse(const char *name, int warmup, const char *extra, int loud, train_run_desc *d) {
  memset(d, 0, sizeof *d);
  if (strlen(name) >= TRAIN_LABEL_MAX) {
    PARSE_ERROR("run name '%s' is longer than %d characters\n", name, TRAIN_LABEL_MAX - 1);
    return -1;
  }
  strcpy(d->label, name);
  if (!strcmp(name, "linear")) {
    d->linear = 1;
    snprintf(d->spec, sizeof d->spec, "SQUALL_COMPRESS=none");
    return 0;
  }
  char codec[TRAIN_LABEL_MAX];
  strcpy(codec, name);
  char *plus = strchr(codec, '+');
  if (plus) *plus++ = 0;
  int ef = 1, ef_given = 0, want_warmup = 0; /* error feedback unless +noef: squall's default */
  while (plus && *plus) {
    char *next = strchr(plus, '+');
    if (next) *next++ = 0;
    int was_ef = ef_given;
    if (!strcmp(plus, "ef") || !strcmp(plus, "noef")) {
      ef_given = 1;
      if (was_ef && ef != !strcmp(plus, "ef")) {
        PARSE_ERROR("run '%s': +ef and +noef together\n", name);
        return -1;
      }
      ef = !strcmp(plus, "ef");
    } else if (!strcmp(plus, "warmup")) want_warmup = 1;
    else {
      PARSE_ERROR("run '%s': unknown modifier '+%s'; accepted: +ef, +noef, +warmup\n", name, plus);
      return -1;
    }
    plus = next;
  }
  /* Check the codec with squall's own parser: its message names the value. */
  squallConfig_t cfg;
  squallConfigDefault(&cfg);
  if (squallConfigSet(&cfg, "SQUALL_COMPRESS", codec) != squallSuccess) {
    PARSE_ERROR("run '%s': %s\n", name, squallGetLastError());
    return -1;
  }
  d->compressed = cfg.codec != squallCodecNone;
  d->warmup = want_warmup ? warmup : 0;
  /* SQUALL_MIN_BYTES=0: the point of a run is that the whole gradient goes
   * through the codec, whatever the model size or --per-layer; the 1 MiB
   * default would silently pass a small model's (or a small layer's)
   * gradient through. The program's other reductions (loss sums,
   * checksums) call MPI directly. SQUALL_EF is spelled out even where it is
   * the default, so that the JSON says it. SQUALL_COST_MODEL=off: on shared
   * memory the model would pass calls through, and the run would measure
   * less of the codec than it says. */
  if (spec_append(d, "SQUALL_COMPRESS=%s SQUALL_MIN_BYTES=0 SQUALL_COST_MODEL=off SQUALL_WARMUP=%d SQUALL_EF=%d", codec, d->warmup,
                  ef) ||
      (extra && *extra && spec_append(d, " %s", extra))) {
    PARSE_ERROR("run '%s': configuration longer than %d characters\n", name, TRAIN_SPEC_MAX - 1);
    return -1;
  }
  if (squallConfigParse(&cfg, d->spec) != squallSuccess) {
    PARSE_ERROR("run '%s': configuration '%s': %s\n", name, d->spec, squallGetLastError());
    return -1;
  }
  return 0;
}

void train_result_free(train_result *r) {
  free(r->curve);
  r->curve = NULL;
}

static uint64_t fnv1a(const void *p, size_t bytes) {
  const unsigned char *c = p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; i++) h = (h ^ c[i]) * 0x100000001b3ull;
  return h;
}

/* 1 on every rank when every rank passes ok, else 0. */
static int all_ok(MPI_Comm comm, int ok) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
  return all;
}

/* Loss and accuracy of params on samples [0, n) of set, split over ranks. */
static void evaluate(const train_mlp *m, const float *params, const train_set *set, int n, train_ws *ws,
                     MPI_Comm comm, double *loss, double *acc) {
  int rank, p;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &p);
  int lo = (int)((long)n * rank / p), hi = (int)((long)n * (rank + 1) / p);
  double mine[2] = {0, 0}, sum[2];
  int hits = 0;
  if (train_mlp_eval(m, params, set->x + (size_t)lo * set->dim, set->y + lo, hi - lo, ws, &mine[0], &hits)) {
    fprintf(stderr, "squall-train: rank %d: out of memory evaluating\n", rank);
    MPI_Abort(comm, 1);
  }
  mine[1] = hits;
  MPI_Allreduce(mine, sum, 2, MPI_DOUBLE, MPI_SUM, comm);
  *loss = sum[0] / n;
  *acc = sum[1] / n;
}

/* The squall configuration for the run, the same on every rank. */
static int configure(const train_run_desc *d, int rank) {
  squallConfig_t cfg;
  squallConfigDefault(&cfg);
  if (squallConfigParse(&cfg, d->spec) != squallSuccess || squallSetConfig(&cfg) != squallSuccess) {
    if (rank == 0)
      fprintf(stderr, "squall-train: run '%s': configuration '%s': %s\n", d->label, d->spec,
              squallGetLastError());
    return -1;
  }
  return 0;
}

/* Did squall do what the run asked? Warm-up calls pass through, every
 * later call must be compressed; with compression off, or on one rank,
 * nothing is. */
static int check_stats(const train_run_desc *d, const squallStats_t *st, long steps, int buckets, int ranks,
                       int rank) {
  int compressing = d->compressed && ranks > 1;
  uint64_t warm = compressing ? (uint64_t)(d->warmup < steps ? d->warmup : steps) * (uint64_t)buckets : 0;
  uint64_t calls = (uint64_t)steps * (uint64_t)buckets;
  uint64_t want = compressing ? calls - warm : 0;
  if (st->calls == calls && st->compressedCalls == want && st->passthrough[squallPassWarmup] == warm)
    return 0;
  if (rank == 0)
    fprintf(stderr,
            "squall-train: run '%s': squall saw %llu calls, compressed %llu, warm-up %llu; expected %ld, "
            "%llu, %llu\n",
            d->label, (unsigned long long)st->calls, (unsigned long long)st->compressedCalls,
            (unsigned long long)st->passthrough[squallPassWarmup], (long)calls, (unsigned long long)want,
            (unsigned long long)warm);
  return -1;
}

int train_run_one(const train_setup *s, const train_run_desc *d, MPI_Comm world, train_result *out) {
  memset(out, 0, sizeof *out);
  out->d = *d;
  out->steps = s->steps;
  MPI_Comm comm;
  MPI_Comm_dup(world, &comm);
  int rank, p;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &p);
  const train_mlp *m = d->linear ? &s->linear : &s->mlp;
  int local = s->batch / p, dim = m->widths[0];
  int eval_chunk = 256;
  size_t n = m->nparams;
  out->nparams = n;
  float *params = malloc(n * sizeof *params), *grad = malloc(n * sizeof *grad);
  float *gsum = malloc(n * sizeof *gsum), *x = malloc((size_t)local * dim * sizeof *x);
  float *init = malloc(n * sizeof *init);
  int *y = malloc((size_t)local * sizeof *y);
  double *curve = calloc((size_t)s->steps, sizeof *curve);
  out->curve = calloc((size_t)s->steps, sizeof *out->curve);
  train_ws *ws = train_ws_create(m, local > eval_chunk ? local : eval_chunk);
  train_batcher *batches = train_batcher_create(s->train, s->seed);
  train_sgd opt = {0};
  int rc = -1;
  int ok = params && grad && gsum && init && x && y && curve && out->curve && ws && batches &&
           !train_sgd_init(&opt, n, s->lr, s->momentum, s->steps, s->lr_ramp);
  if (!all_ok(comm, ok)) {
    if (rank == 0) fprintf(stderr, "squall-train: run '%s': out of memory\n", d->label);
    goto done;
  }
  if (!all_ok(comm, configure(d, rank) == 0)) goto done;

  /* The gradient tensors: the whole flat buffer, or each layer's weights
   * and biases (contiguous in it). Either way at fixed addresses, which is
   * what keys squall's error-feedback residuals. */
  size_t bucket_off[TRAIN_MAX_LAYERS], bucket_len[TRAIN_MAX_LAYERS];
  int nbuckets = s->per_layer ? m->nlayers : 1;
  for (int b = 0; b < nbuckets; b++) {
    bucket_off[b] = s->per_layer ? m->w_off[b] : 0;
    bucket_len[b] = s->per_layer ? m->b_off[b] + (size_t)m->widths[b + 1] - m->w_off[b] : n;
  }
  train_mlp_init(m, params, s->seed);
  memcpy(init, params, n * sizeof *init);
  squallStatsReset();
  MPI_Barrier(comm);
  double t0 = MPI_Wtime(), t_ar = 0.0;
  for (long t = 0; t < s->steps; t++) {
    train_batcher_slice(batches, t, s->batch, rank * local, local, x, y);
    int hits;
    double loss = train_mlp_grad(m, params, x, y, local, grad, ws, &hits);
    if (loss < 0.0) {
      fprintf(stderr, "squall-train: rank %d: out of memory in the backward pass\n", rank);
      MPI_Abort(comm, 1);
    }
    curve[t] = loss;
    double ta = MPI_Wtime();
    for (int b = 0; b < nbuckets; b++) {
      int err = squallMpiAllreduce(grad + bucket_off[b], gsum + bucket_off[b], (int)bucket_len[b], MPI_FLOAT,
                                   MPI_SUM, comm);
      if (err != MPI_SUCCESS) {
        fprintf(stderr,
                "squall-train: rank %d: run '%s': squallMpiAllreduce failed at step %ld (MPI error %d): %s\n",
                rank, d->label, t, err, squallGetLastError());
        MPI_Abort(comm, 1);
      }
    }
    t_ar += MPI_Wtime() - ta;
    train_sgd_step(&opt, params, gsum, p, t);
    if (s->verbose && rank == 0 && (t + 1) % (s->steps / 10 > 0 ? s->steps / 10 : 1) == 0)
      fprintf(stderr, "  %s: step %ld/%ld, rank 0 batch loss %.4f\n", d->label, t + 1, s->steps,
              loss / local);
  }
  out->seconds = MPI_Wtime() - t0;
  MPI_Allreduce(&t_ar, &out->allreduce_seconds, 1, MPI_DOUBLE, MPI_MAX, comm);
  squallStatsGet(&out->stats);

  /* The curve: each step's mean loss over the whole global batch. */
  MPI_Allreduce(curve, out->curve, (int)s->steps, MPI_DOUBLE, MPI_SUM, comm);
  for (long t = 0; t < s->steps; t++) out->curve[t] /= s->batch;
  int n_eval = s->eval_train < s->train->n ? s->eval_train : s->train->n;
  evaluate(m, params, s->train, n_eval, ws, comm, &out->train_loss, &out->train_acc);
  evaluate(m, params, s->test, s->test->n, ws, comm, &out->test_loss, &out->test_acc);

  /* Without error feedback, coordinates that never make the top-k never
   * move: this fraction shows it. */
  size_t moved = 0;
  for (size_t i = 0; i < n; i++) moved += params[i] != init[i];
  out->updated = (double)moved / (double)n;

  /* Every rank applied the same update to the same start: the bits must agree. */
  out->checksum = fnv1a(params, n * sizeof *params);
  uint64_t *sums = malloc((size_t)p * sizeof *sums);
  if (!all_ok(comm, sums != NULL)) {
    free(sums);
    goto done;
  }
  MPI_Allgather(&out->checksum, 1, MPI_UINT64_T, sums, 1, MPI_UINT64_T, comm);
  int same = 1;
  for (int r = 1; r < p; r++) same &= sums[r] == sums[0];
  if (!same && rank == 0) {
    fprintf(stderr, "squall-train: run '%s': the ranks ended with different parameters; checksums:",
            d->label);
    for (int r = 0; r < p; r++) fprintf(stderr, " %d:%016llx", r, (unsigned long long)sums[r]);
    fputc('\n', stderr);
  }
  free(sums);
  int stats_ok = check_stats(d, &out->stats, s->steps, nbuckets, p, rank) == 0;
  rc = same && all_ok(comm, stats_ok) ? 0 : -1;

done:
  train_batcher_free(batches);
  train_ws_free(ws);
  train_sgd_free(&opt);
  free(params);
  free(grad);
  free(gsum);
  free(init);
  free(x);
  free(y);
  free(curve);
  squallMpiCommFree(comm);
  MPI_Comm_free(&comm);
  return rc;
}

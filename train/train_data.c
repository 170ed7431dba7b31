/* SPDX-License-Identifier: BSD-3-Clause */
/* train_data.c - the teacher-labelled data set and its batches. */
#include "train_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_rng.h"

void train_set_free(train_set *s) {
  if (s == NULL) return;
  free(s->x);
  free(s->y);
  s->x = NULL;
  s->y = NULL;
}

/* Labels rows x[n x dim] with the teacher (A: width x dim, C: classes x width). */
static void label(const train_task *t, const double *a, const double *c, const float *x, int n, int *y,
                  double *h) {
  double pre = t->gain / sqrt((double)t->dim);
  for (int i = 0; i < n; i++) {
    const float *xi = x + (size_t)i * t->dim;
    for (int u = 0; u < t->teacher_width; u++) {
      double s = 0.0;
      for (int d = 0; d < t->dim; d++) s += a[(size_t)u * t->dim + d] * xi[d];
      h[u] = tanh(pre * s);
    }
    int best = 0;
    double best_z = -HUGE_VAL;
    for (int k = 0; k < t->classes; k++) {
      double z = 0.0;
      for (int u = 0; u < t->teacher_width; u++) z += c[(size_t)k * t->teacher_width + u] * h[u];
      if (z > best_z) {
        best_z = z;
        best = k;
      }
    }
    y[i] = best;
  }
}

static int make_set(train_set *s, int n, int dim) {
  s->n = n;
  s->dim = dim;
  s->x = malloc((size_t)n * dim * sizeof *s->x);
  s->y = malloc((size_t)n * sizeof *s->y);
  return s->x && s->y ? 0 : -1;
}

/* Samples n points of the cluster task into s (centres: K x dim, zero past
 * the informative dimensions). */
static void sample_clusters(const train_task *t, const double *centres, train_rng *rng, train_set *s) {
  int k_all = t->classes * t->clusters;
  for (int i = 0; i < s->n; i++) {
    int k = (int)train_rng_below(rng, (uint32_t)k_all);
    for (int d = 0; d < t->dim; d++) {
      double z = train_rng_normal(rng);
      s->x[(size_t)i * t->dim + d] =
          (float)(d < t->informative ? centres[(size_t)k * t->dim + d] + t->noise * z : z);
    }
    s->y[i] = k % t->classes;
  }
}

int train_data_make(const train_task *t, train_set *train, train_set *test) {
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  int teacher = t->kind == TRAIN_TASK_TEACHER;
  size_t na = teacher ? (size_t)t->teacher_width * t->dim : (size_t)t->classes * t->clusters * t->dim;
  size_t nc = teacher ? (size_t)t->classes * t->teacher_width : 1;
  double *a = malloc(na * sizeof *a), *c = malloc(nc * sizeof *c);
  double *h = malloc((size_t)(teacher ? t->teacher_width : 1) * sizeof *h);
  int rc = -1;
  if (a && c && h && !make_set(train, t->n_train, t->dim) && !make_set(test, t->n_test, t->dim)) {
    train_rng rng = train_rng_make(t->seed, 0x7eac4e5);
    for (size_t i = 0; i < na; i++)
      a[i] = teacher || (int)(i % (size_t)t->dim) < t->informative ? train_rng_normal(&rng) : 0.0;
    if (teacher)
      for (size_t i = 0; i < nc; i++) c[i] = train_rng_normal(&rng);
    train_rng xr = train_rng_make(t->seed, 0xda7a);
    train_set *sets[2] = {train, test};
    for (int k = 0; k < 2; k++) {
      if (teacher) {
        for (size_t i = 0; i < (size_t)sets[k]->n * t->dim; i++) sets[k]->x[i] = (float)train_rng_normal(&xr);
        label(t, a, c, sets[k]->x, sets[k]->n, sets[k]->y, h);
      } else {
        sample_clusters(t, a, &xr, sets[k]);
      }
    }
    rc = 0;
  }
  free(a);
  free(c);
  free(h);
  if (rc) {
    train_set_free(train);
    train_set_free(test);
  }
  return rc;
}

double train_set_majority(const train_set *s, int classes) {
  int *count = calloc((size_t)classes, sizeof *count);
  if (count == NULL || s->n == 0) {
    free(count);
    return 0.0;
  }
  int best = 0;
  for (int i = 0; i < s->n; i++)
    if (++count[s->y[i]] > best) best = count[s->y[i]];
  free(count);
  return (double)best / s->n;
}

struct train_batcher {
  const train_set *set;
  uint64_t seed;
  long epoch[2]; /* the two permutations kept: a batch may straddle two epochs */
  int *perm[2];
};

train_batcher *train_batcher_create(const train_set *train, uint64_t seed) {
  train_batcher *b = calloc(1, sizeof *b);
  if (b == NULL) return NULL;
  b->set = train;
  b->seed = seed;
  b->epoch[0] = b->epoch[1] = -1;
  b->perm[0] = malloc((size_t)train->n * sizeof(int));
  b->perm[1] = malloc((size_t)train->n * sizeof(int));
  if (!b->perm[0] || !b->perm[1]) {
    train_batcher_free(b);
    return NULL;
  }
  return b;
}

void train_batcher_free(train_batcher *b) {
  if (b == NULL) return;
  free(b->perm[0]);
  free(b->perm[1]);
  free(b);
}

/* Epoch e's permutation (Fisher-Yates from (seed, e)). */
static const int *perm_of(train_batcher *b, long e) {
  for (int s = 0; s < 2; s++)
    if (b->epoch[s] == e) return b->perm[s];
  int s = b->epoch[0] < b->epoch[1] ? 0 : 1; /* replace the older epoch */
  int n = b->set->n, *p = b->perm[s];
  for (int i = 0; i < n; i++) p[i] = i;
  train_rng rng = train_rng_make(b->seed, 0x5e9000000ull + (uint64_t)e);
  for (int i = n - 1; i > 0; i--) {
    int j = (int)train_rng_below(&rng, (uint32_t)i + 1);
    int t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  b->epoch[s] = e;
  return p;
}

void train_batcher_slice(train_batcher *b, long step, int global_batch, int first, int count, float *x,
                         int *y) {
  int n = b->set->n, dim = b->set->dim;
  for (int i = 0; i < count; i++) {
    long pos = step * (long)global_batch + first + i;
    const int *p = perm_of(b, pos / n);
    int idx = p[pos % n];
    memcpy(x + (size_t)i * dim, b->set->x + (size_t)idx * dim, (size_t)dim * sizeof *x);
    y[i] = b->set->y[idx];
  }
}

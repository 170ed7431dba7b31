/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_data.h - the training program's data: a fixed-seed synthetic
 * classification task, and the global batches that the ranks split.
 *
 * Two tasks, both from a seed alone:
 *  clusters: `clusters` Gaussian blobs per class (XOR-like: every class is
 *            scattered over several random centres), which no linear
 *            classifier separates. The centres ~ N(0, I) live in the first
 *            `informative` dimensions, with noise of sigma `noise` around
 *            them; the other dimensions are N(0, 1) distractors of the same
 *            scale as the centres: random features drown in them, only a
 *            trained first layer learns to ignore them;
 *  teacher:  x ~ N(0, I), labelled by the arg-max of a random network,
 *            logits = C tanh(gain * A x / sqrt(dim)).
 * The program trains a linear baseline next to the MLP to show the gap.
 */
#ifndef SQUALL_TRAIN_DATA_H
#define SQUALL_TRAIN_DATA_H

#include <stdint.h>

typedef enum { TRAIN_TASK_CLUSTERS = 0,
               TRAIN_TASK_TEACHER = 1 } train_task_kind;

typedef struct {
  train_task_kind kind;
  int dim;           /* input dimension */
  int classes;       /* number of labels */
  int clusters;      /* clusters: blobs per class */
  int informative;   /* clusters: dimensions that carry the centres (<= dim) */
  double noise;      /* clusters: standard deviation around a centre */
  int teacher_width; /* teacher: hidden units */
  double gain;       /* teacher: pre-activation scale */
  int n_train, n_test;
  uint64_t seed;
} train_task;

typedef struct {
  int n, dim;
  float *x; /* n x dim, row-major */
  int *y;   /* n labels in [0, classes) */
} train_set;

/* Draws the task (centres or teacher), then the training and held-out
 * samples (disjoint draws), from task->seed alone. Returns 0, or -1 when out of memory. */
int train_data_make(const train_task *task, train_set *train, train_set *test);
void train_set_free(train_set *s);

/* Fraction of the commonest label in s (what guessing it scores). */
double train_set_majority(const train_set *s, int classes);

/* Global batches: step t uses positions t*B .. t*B+B-1 of an endless
 * sequence of per-epoch permutations of the training set (epoch e shuffled
 * from (seed, e)), so the global batch never depends on the rank count. */
typedef struct train_batcher train_batcher;

train_batcher *train_batcher_create(const train_set *train, uint64_t seed);
void train_batcher_free(train_batcher *b); /* accepts NULL */

/* Copies samples [first, first+count) of step t's global batch of size
 * global_batch into x[count x dim] and y[count]. */
void train_batcher_slice(train_batcher *b, long step, int global_batch, int first, int count, float *x,
                         int *y);

#endif

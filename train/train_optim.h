/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_optim.h - SGD with momentum on a flat parameter buffer, with a
 * cosine learning-rate schedule. Every rank applies it to the same averaged
 * gradient and so keeps the same weights.
 */
#ifndef SQUALL_TRAIN_OPTIM_H
#define SQUALL_TRAIN_OPTIM_H

#include <stddef.h>

typedef struct {
  double lr;       /* peak learning rate */
  double momentum; /* heavy-ball coefficient */
  long steps;      /* schedule length: the rate decays to 0 at this step */
  long ramp;       /* linear ramp-up steps from lr/ramp to lr (0: none) */
  size_t n;
  float *velocity; /* n floats, zero at start */
} train_sgd;

/* Allocates a zero velocity. Returns 0, or -1 when out of memory. */
int train_sgd_init(train_sgd *o, size_t n, double lr, double momentum, long steps, long ramp);
void train_sgd_free(train_sgd *o);

/* The learning rate at step t (0-based). */
double train_sgd_rate(const train_sgd *o, long t);

/* One step from the all-reduced sum of the ranks' gradients: g = sum / ranks
 * (the average), v = momentum * v + g, w -= rate * v. */
void train_sgd_step(train_sgd *o, float *params, const float *grad_sum, int ranks, long t);

#endif

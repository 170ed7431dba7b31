/* SPDX-License-Identifier: BSD-3-Clause */
/* train_optim.c - SGD with momentum and a cosine schedule. */
#include "train_optim.h"

#include <math.h>
#include <stdlib.h>

int train_sgd_init(train_sgd *o, size_t n, double lr, double momentum, long steps, long ramp) {
  o->lr = lr;
  o->momentum = momentum;
  o->steps = steps;
  o->ramp = ramp;
  o->n = n;
  o->velocity = calloc(n ? n : 1, sizeof *o->velocity);
  return o->velocity ? 0 : -1;
}

void train_sgd_free(train_sgd *o) {
  free(o->velocity);
  o->velocity = NULL;
}

double train_sgd_rate(const train_sgd *o, long t) {
  if (t < o->ramp) return o->lr * (double)(t + 1) / (double)o->ramp;
  if (o->steps <= o->ramp) return o->lr;
  double frac = (double)(t - o->ramp) / (double)(o->steps - o->ramp);
  if (frac > 1.0) frac = 1.0;
  return o->lr * 0.5 * (1.0 + cos(3.141592653589793 * frac));
}

void train_sgd_step(train_sgd *o, float *params, const float *grad_sum, int ranks, long t) {
  float rate = (float)train_sgd_rate(o, t), mu = (float)o->momentum, div = (float)ranks;
  float *v = o->velocity;
  for (size_t i = 0; i < o->n; i++) {
    v[i] = mu * v[i] + grad_sum[i] / div;
    params[i] -= rate * v[i];
  }
}

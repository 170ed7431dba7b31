/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_model.h - a multi-layer perceptron (ReLU hidden layers, softmax
 * cross-entropy) whose parameters and gradient each live in one flat float
 * buffer: the gradient is one tensor for the all-reduce, at a stable address.
 */
#ifndef SQUALL_TRAIN_MODEL_H
#define SQUALL_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define TRAIN_MAX_LAYERS 8 /* weight layers */

/* The shape: widths[0] inputs, widths[nlayers] classes. Layer l's weights
 * are a widths[l] x widths[l+1] row-major matrix (input-major, so that the
 * forward product streams contiguous rows) followed by its biases. */
typedef struct {
  int nlayers;
  int widths[TRAIN_MAX_LAYERS + 1];
  size_t w_off[TRAIN_MAX_LAYERS], b_off[TRAIN_MAX_LAYERS];
  size_t nparams;
} train_mlp;

/* Scratch for one forward/backward of up to max_batch samples. */
typedef struct train_ws train_ws;

/* Fills *m from widths[0..nlayers]. Returns 0, or -1 (with a message on
 * stderr naming the value) when a width or the layer count is out of range. */
int train_mlp_shape(train_mlp *m, int nlayers, const int *widths);

/* He-uniform hidden weights (bound sqrt(6/fan_in), suited to ReLU),
 * LeCun-uniform logits weights (sqrt(3/fan_in)), zero biases, from seed
 * only: every rank starts from the same bits. */
void train_mlp_init(const train_mlp *m, float *params, uint64_t seed);

train_ws *train_ws_create(const train_mlp *m, int max_batch);
void train_ws_free(train_ws *ws); /* accepts NULL */

/* Gradient of the mean cross-entropy over the nb samples x[nb x widths[0]]
 * with labels y into grad[nparams] (overwritten). Returns the summed loss;
 * *correct gets the number of samples whose largest logit is the label.
 * Returns a negative value when out of memory. */
double train_mlp_grad(const train_mlp *m, const float *params, const float *x, const int *y, int nb,
                      float *grad, train_ws *ws, int *correct);

/* Forward only, in chunks of the workspace's batch: summed loss and
 * number correct over n samples. Returns -1 when out of memory, else 0. */
int train_mlp_eval(const train_mlp *m, const float *params, const float *x, const int *y, int n,
                   train_ws *ws, double *loss_sum, int *correct);

#endif

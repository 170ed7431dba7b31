/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_model.c - forward and backward of the MLP over a batch, all in
 * float, every sum in a fixed order (the result depends only on the inputs,
 * never on timing or the rank).
 */
#include "train_model.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_gemm.h"
#include "train_rng.h"

struct train_ws {
  int max_batch;
  float *act[TRAIN_MAX_LAYERS + 1]; /* act[l], l >= 1: layer l's output (post-ReLU; logits last) */
  float *dz[2];                     /* gradient at a layer's pre-activation, ping-pong */
  float *in_t;                      /* a layer's input, then its output gradient, transposed */
  float *dx_t;                      /* the gradient at a layer's input, transposed */
};

int train_mlp_shape(train_mlp *m, int nlayers, const int *widths) {
  if (nlayers < 1 || nlayers > TRAIN_MAX_LAYERS) {
    fprintf(stderr, "squall-train: %d weight layers: accepted 1 to %d\n", nlayers, TRAIN_MAX_LAYERS);
    return -1;
  }
  memset(m, 0, sizeof *m);
  m->nlayers = nlayers;
  size_t off = 0;
  for (int l = 0; l <= nlayers; l++) {
    if (widths[l] < 1 || widths[l] > (1 << 16)) {
      fprintf(stderr, "squall-train: layer width %d: accepted 1 to 65536\n", widths[l]);
      return -1;
    }
    m->widths[l] = widths[l];
  }
  for (int l = 0; l < nlayers; l++) {
    m->w_off[l] = off;
    off += (size_t)widths[l] * (size_t)widths[l + 1];
    m->b_off[l] = off;
    off += (size_t)widths[l + 1];
  }
  m->nparams = off;
  return 0;
}

void train_mlp_init(const train_mlp *m, float *params, uint64_t seed) {
  train_rng rng = train_rng_make(seed, 0x1417);
  for (int l = 0; l < m->nlayers; l++) {
    size_t nw = (size_t)m->widths[l] * (size_t)m->widths[l + 1];
    /* The logits layer gets LeCun's variance (1/fan_in): He's doubling
     * there only inflates the first losses (3-6 instead of ln 10). */
    double bound = sqrt((l + 1 < m->nlayers ? 6.0 : 3.0) / m->widths[l]);
    float *w = params + m->w_off[l];
    for (size_t i = 0; i < nw; i++) w[i] = (float)((2.0 * train_rng_uniform(&rng) - 1.0) * bound);
    memset(params + m->b_off[l], 0, (size_t)m->widths[l + 1] * sizeof(float));
  }
}

void train_ws_free(train_ws *ws) {
  if (ws == NULL) return;
  for (int l = 0; l <= TRAIN_MAX_LAYERS; l++) free(ws->act[l]);
  free(ws->dz[0]);
  free(ws->dz[1]);
  free(ws->in_t);
  free(ws->dx_t);
  free(ws);
}

train_ws *train_ws_create(const train_mlp *m, int max_batch) {
  train_ws *ws = calloc(1, sizeof *ws);
  if (ws == NULL) return NULL;
  ws->max_batch = max_batch;
  size_t widest = 0;
  for (int l = 0; l <= m->nlayers; l++)
    if ((size_t)m->widths[l] > widest) widest = (size_t)m->widths[l];
  int ok = 1;
  for (int l = 1; l <= m->nlayers; l++)
    ok &= (ws->act[l] = malloc((size_t)max_batch * (size_t)m->widths[l] * sizeof(float))) != NULL;
  ok &= (ws->dz[0] = malloc((size_t)max_batch * widest * sizeof(float))) != NULL;
  ok &= (ws->dz[1] = malloc((size_t)max_batch * widest * sizeof(float))) != NULL;
  ok &= (ws->in_t = malloc((size_t)max_batch * widest * sizeof(float))) != NULL;
  ok &= (ws->dx_t = malloc((size_t)max_batch * widest * sizeof(float))) != NULL;
  if (!ok) {
    train_ws_free(ws);
    return NULL;
  }
  return ws;
}

/* Layers' outputs for nb samples into ws->act; the logits end in act[L]. */
static int forward(const train_mlp *m, const float *params, const float *x, int nb, train_ws *ws) {
  const float *in = x;
  for (int l = 0; l < m->nlayers; l++) {
    int n_in = m->widths[l], n_out = m->widths[l + 1];
    float *out = ws->act[l + 1];
    if (train_gemm(nb, n_out, n_in, in, n_in, params + m->w_off[l], n_out, out, n_out, 0)) return -1;
    const float *bias = params + m->b_off[l];
    int relu = l + 1 < m->nlayers;
    for (int b = 0; b < nb; b++) {
      float *row = out + (size_t)b * n_out;
      for (int j = 0; j < n_out; j++) {
        float z = row[j] + bias[j];
        row[j] = relu && z < 0.0f ? 0.0f : z;
      }
    }
    in = out;
  }
  return 0;
}

/* Softmax cross-entropy of one row of logits: returns the loss; writes the
 * probabilities into p when p != NULL; *hit is 1 when the arg-max (lowest
 * index among ties) is the label. */
static double softmax_xent(const float *z, int classes, int label, float *p, int *hit) {
  int arg = 0;
  for (int j = 1; j < classes; j++)
    if (z[j] > z[arg]) arg = j;
  float zmax = z[arg];
  double sum = 0.0;
  for (int j = 0; j < classes; j++) sum += exp((double)(z[j] - zmax));
  if (p)
    for (int j = 0; j < classes; j++) p[j] = (float)(exp((double)(z[j] - zmax)) / sum);
  *hit = arg == label;
  return log(sum) - (double)(z[label] - zmax);
}

double train_mlp_grad(const train_mlp *m, const float *params, const float *x, const int *y, int nb,
                      float *grad, train_ws *ws, int *correct) {
  if (forward(m, params, x, nb, ws)) return -1.0;
  int L = m->nlayers, classes = m->widths[L];
  const float *logits = ws->act[L];
  float *dz = ws->dz[0], *dz_next = ws->dz[1];
  double loss = 0.0;
  int hits = 0;
  float inv_nb = 1.0f / (float)nb;
  for (int b = 0; b < nb; b++) {
    float *d = dz + (size_t)b * classes;
    int hit;
    loss += softmax_xent(logits + (size_t)b * classes, classes, y[b], d, &hit);
    hits += hit;
    d[y[b]] -= 1.0f;
    for (int j = 0; j < classes; j++) d[j] *= inv_nb; /* gradient of the mean */
  }
  for (int l = L - 1; l >= 0; l--) {
    int n_in = m->widths[l], n_out = m->widths[l + 1];
    const float *in = l == 0 ? x : ws->act[l];
    /* dW = in^T dz: transposing the small input makes it a plain product. */
    train_transpose(nb, n_in, in, ws->in_t);
    if (train_gemm(n_in, n_out, nb, ws->in_t, nb, dz, n_out, grad + m->w_off[l], n_out, 0)) return -1.0;
    float *db = grad + m->b_off[l];
    memset(db, 0, (size_t)n_out * sizeof *db);
    for (int b = 0; b < nb; b++) {
      const float *row = dz + (size_t)b * n_out;
      for (int j = 0; j < n_out; j++) db[j] += row[j];
    }
    if (l == 0) break; /* no gradient for the data */
    /* d(in) = dz W^T, computed as its transpose W dz^T: transposing the
     * two small batch-sized matrices costs far less than transposing W
     * (that was a third of the step). Then through the ReLU: its output is
     * > 0 exactly where it passed its input. */
    train_transpose(nb, n_out, dz, ws->in_t);
    if (train_gemm(n_in, nb, n_out, params + m->w_off[l], n_out, ws->in_t, nb, ws->dx_t, nb, 0)) return -1.0;
    train_transpose(n_in, nb, ws->dx_t, dz_next);
    for (size_t i = 0; i < (size_t)nb * n_in; i++)
      if (!(in[i] > 0.0f)) dz_next[i] = 0.0f;
    float *t = dz;
    dz = dz_next;
    dz_next = t;
  }
  *correct = hits;
  return loss;
}

int train_mlp_eval(const train_mlp *m, const float *params, const float *x, const int *y, int n,
                   train_ws *ws, double *loss_sum, int *correct) {
  int L = m->nlayers, classes = m->widths[L];
  double loss = 0.0;
  int hits = 0;
  for (int b0 = 0; b0 < n; b0 += ws->max_batch) {
    int nb = n - b0 < ws->max_batch ? n - b0 : ws->max_batch;
    if (forward(m, params, x + (size_t)b0 * m->widths[0], nb, ws)) return -1;
    for (int b = 0; b < nb; b++) {
      int hit;
      loss += softmax_xent(ws->act[L] + (size_t)b * classes, classes, y[b0 + b], NULL, &hit);
      hits += hit;
    }
  }
  *loss_sum = loss;
  *correct = hits;
  return 0;
}

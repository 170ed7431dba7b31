/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_run.h - one data-parallel training run, as a framework does it: each
 * rank computes the gradient of its shard of the global batch, the flat
 * gradient goes through squallMpiAllreduce (sum), every rank divides by the
 * rank count and applies the same SGD-with-momentum step.
 */
#ifndef SQUALL_TRAIN_RUN_H
#define SQUALL_TRAIN_RUN_H

#include <mpi.h>
#include <stdint.h>

#include "squall.h"
#include "train_data.h"
#include "train_model.h"

/* What stays the same across the runs of one comparison. */
typedef struct {
  const train_set *train, *test;
  int classes;
  train_mlp mlp;    /* the model every compressed run trains */
  train_mlp linear; /* the same inputs and classes, no hidden layer */
  long steps;
  int batch; /* global batch; each rank takes batch / ranks */
  double lr, momentum;
  long lr_ramp;             /* learning-rate ramp-up steps */
  uint64_t seed;            /* weights and batch order */
  int eval_train;           /* training samples the final training loss is measured on */
  const char *squall_extra; /* squall configuration items added to every run */
  int per_layer;            /* one all-reduce per layer (its weights and biases) instead of one flat buffer */
  int verbose;
} train_setup;

#define TRAIN_LABEL_MAX 64
#define TRAIN_SPEC_MAX 512

/* One entry of the comparison. */
typedef struct {
  char label[TRAIN_LABEL_MAX]; /* as the user names it: "topk:0.01+noef" */
  char spec[TRAIN_SPEC_MAX];   /* the squall configuration it runs with */
  int linear;                  /* the linear baseline: no hidden layer */
  int warmup;                  /* dense warm-up calls (SQUALL_WARMUP) */
  int compressed;              /* a codec is on: compressed calls are expected */
} train_run_desc;

typedef struct {
  train_run_desc d;
  long steps;
  double *curve;                     /* steps values: the global batch's mean loss before each update */
  double train_loss, train_acc;      /* on the first eval_train training samples, after training */
  double test_loss, test_acc;        /* on the whole held-out set */
  double seconds, allreduce_seconds; /* wall time of the loop, and of its all-reduces */
  squallStats_t stats;               /* this rank's squall counters for the run */
  uint64_t checksum;                 /* FNV-1a of the final parameters' bits (equal on all ranks) */
  double updated;                    /* fraction of the parameters that moved from their initial value */
  size_t nparams;
} train_result;

/* Parses a run name: "linear", or CODEC[+ef|+noef][+warmup] with CODEC one of
 * none, fp16, bf16, int8, int4, fp8, topk:<ratio>. warmup is the number of dense steps that
 * "+warmup" asks for; extra is added to the configuration. Returns 0, or -1
 * (with a message on stderr when loud). */
int train_run_parse(const char *name, int warmup, const char *extra, int loud, train_run_desc *d);

/* Trains from scratch on a private duplicate of world (fresh squall state:
 * no residual or warm-up count leaks from an earlier run), evaluates, and
 * checks that every rank ended with the same parameters and that squall
 * compressed exactly the calls it should have. Returns 0, or -1 after
 * printing why (the same on every rank). */
int train_run_one(const train_setup *s, const train_run_desc *d, MPI_Comm world, train_result *out);

void train_result_free(train_result *r);

#endif

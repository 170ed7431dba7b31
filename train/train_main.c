/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * squall-train - does gradient compression hurt accuracy? Trains the same
 * MLP from the same seed once per squall configuration (dense, fp16, bf16,
 * top-k with and without error feedback and with a dense warm-up), data
 * parallel over MPI with squallMpiAllreduce, and reports the final training
 * loss and held-out accuracy of each run as a table, JSON and a loss plot.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "squall.h"
#include "train_data.h"
#include "train_report.h"
#include "train_run.h"

/* The full comparison and the CI subset (tests/train/train-short.sh asserts on it). */
static const char *full_runs = "linear,none,fp16,bf16,topk:0.01+ef,topk:0.01+noef,topk:0.01+ef+warmup,"
                               "topk:0.001+ef,topk:0.001+noef,topk:0.001+ef+warmup";
static const char *short_runs = "linear,none,fp16,bf16,topk:0.01+ef,topk:0.01+noef";

typedef struct {
  train_task task;
  long steps;
  int batch, hidden, layers, warmup_steps, eval_train;
  double lr, momentum;
  long lr_ramp;
  uint64_t seed;
  const char *runs, *squall_extra, *json, *plot;
  int is_short, verbose, per_layer;
} options;

static void usage(FILE *out) {
  fputs("usage: mpiexec -n P squall-train [options]\n"
        "Trains one MLP per squall configuration, data parallel over P ranks through\n"
        "squallMpiAllreduce, and compares final training loss and held-out accuracy.\n"
        "  --runs LIST        comma-separated runs: linear (no hidden layer, dense), or\n"
        "                     CODEC[+ef|+noef][+warmup], CODEC = none|fp16|bf16|int8|int4|fp8|topk:<ratio>\n"
        "                     (default: the full comparison)\n"
        "  --short            CI mode: the runs the regression test needs, on a small task\n"
        "                     (--hidden 128 --steps 300 --lr 0.2 --clusters 4 --train-size 32768\n"
        "                     --test-size 2048 --eval-train 2048; options given win): seconds\n"
        "  --steps N          training steps (default 600)\n"
        "  --batch B          global batch, a multiple of P (default 128)\n"
        "  --hidden H         width of each hidden layer (default 1024)\n"
        "  --layers L         hidden layers (default 2)\n"
        "  --lr X             peak learning rate, cosine decay to 0 (default 0.1)\n"
        "  --lr-ramp N        linear learning-rate ramp-up steps (default steps/20)\n"
        "  --momentum X       SGD momentum (default 0.8)\n"
        "  --warmup-steps N   dense steps of the +warmup runs (SQUALL_WARMUP; default steps/10)\n"
        "  --seed N           data, weights and batch order (default 1)\n"
        "  --task KIND        clusters (default) or teacher\n"
        "  --dim N            input dimension (default 64)\n"
        "  --classes N        classes (default 10)\n"
        "  --clusters N       clusters task: blobs per class (default 8)\n"
        "  --informative N    clusters task: dimensions that carry the centres (default 8)\n"
        "  --noise X          clusters task: standard deviation of a blob (default 0.3)\n"
        "  --teacher-width N  teacher task: hidden units of the labelling network (default 64)\n"
        "  --gain X           teacher task: pre-activation gain (default 3)\n"
        "  --train-size N     training samples (default 131072: 600 steps stay within one epoch)\n"
        "  --test-size N      held-out samples (default 4096)\n"
        "  --eval-train N     training samples the final training loss is measured on (default 4096)\n"
        "  --per-layer        one all-reduce per layer instead of one flat gradient buffer\n"
        "  --squall ITEMS     squall configuration added to every run, e.g. 'SQUALL_ZSTD=0'\n"
        "  --json FILE        write the results as JSON (one line per run)\n"
        "  --plot FILE.png    draw the loss curves with gnuplot\n"
        "  -v, --verbose      progress of each run\n"
        "  -h, --help         this help\n"
        "Exit status: 0; 1 when a run fails its checks (ranks disagree on the weights, squall\n"
        "compressed other calls than asked) or an output cannot be written; 2 on bad usage.\n",
        out);
}

static int loud = 1; /* rank 0 explains bad usage; the others stay quiet */

/* Parses an integer option value in [lo, hi]; -1 on error after a message. */
static int parse_long(const char *opt, const char *v, long lo, long hi, long *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (*v == 0 || *end != 0 || x < lo || x > hi) {
    if (loud) fprintf(stderr, "squall-train: %s '%s': accepted an integer from %ld to %ld\n", opt, v, lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

static int parse_double(const char *opt, const char *v, double lo, double hi, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (*v == 0 || *end != 0 || !(x >= lo && x <= hi)) {
    if (loud) fprintf(stderr, "squall-train: %s '%s': accepted a number from %g to %g\n", opt, v, lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

/* The CI mode's task: small enough for seconds on a busy 2-core machine
 * (about 26k parameters, 300 steps per run), still one where the MLP beats a
 * linear model by far and where dropping the top-k residual costs tens of
 * points, so that tests/train/train-short.sh fails when a codec breaks training.
 * The full-size comparison is tests/train/train-long.sh (make check-long). */
static void short_defaults(options *o) {
  o->hidden = 128;
  o->steps = 300;
  o->lr = 0.2;
  o->task.clusters = 4;
  o->task.n_train = 32768;
  o->task.n_test = 2048;
  o->eval_train = 2048;
}

static int parse_options(int argc, char **argv, options *o, int rank) {
  enum { O_RUNS = 256,
         O_SHORT,
         O_STEPS,
         O_BATCH,
         O_HIDDEN,
         O_LAYERS,
         O_LR,
         O_RAMP,
         O_MOM,
         O_WARM,
         O_SEED,
         O_TASK,
         O_CLUST,
         O_INFO,
         O_NOISE,
         O_DIM,
         O_CLASSES,
         O_TWIDTH,
         O_GAIN,
         O_NTRAIN,
         O_NTEST,
         O_EVTRAIN,
         O_SQUALL,
         O_JSON,
         O_PLOT,
         O_PERLAYER };
  /* clang-format off */
  static const struct option longopts[] = {
      {"runs", required_argument, 0, O_RUNS},        {"short", no_argument, 0, O_SHORT},
      {"steps", required_argument, 0, O_STEPS},      {"batch", required_argument, 0, O_BATCH},
      {"hidden", required_argument, 0, O_HIDDEN},    {"layers", required_argument, 0, O_LAYERS},
      {"lr", required_argument, 0, O_LR},            {"lr-ramp", required_argument, 0, O_RAMP},
      {"momentum", required_argument, 0, O_MOM},     {"warmup-steps", required_argument, 0, O_WARM},
      {"seed", required_argument, 0, O_SEED},        {"dim", required_argument, 0, O_DIM},
      {"task", required_argument, 0, O_TASK},        {"clusters", required_argument, 0, O_CLUST},
      {"noise", required_argument, 0, O_NOISE},      {"informative", required_argument, 0, O_INFO},
      {"classes", required_argument, 0, O_CLASSES},  {"teacher-width", required_argument, 0, O_TWIDTH},
      {"gain", required_argument, 0, O_GAIN},        {"train-size", required_argument, 0, O_NTRAIN},
      {"test-size", required_argument, 0, O_NTEST},  {"eval-train", required_argument, 0, O_EVTRAIN},
      {"squall", required_argument, 0, O_SQUALL},    {"json", required_argument, 0, O_JSON},
      {"plot", required_argument, 0, O_PLOT},        {"per-layer", no_argument, 0, O_PERLAYER},
      {"verbose", no_argument, 0, 'v'},              {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  /* clang-format on */
  long steps = -1, warm = -1, ramp = -1, v;
  int opt;
  /* --short first, wherever it stands: it sets defaults the other options
   * then override. A silent pass; the next one reports errors. */
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1)
    if (opt == O_SHORT) o->is_short = 1;
  optind = 0; /* glibc: start over */
  if (o->is_short) short_defaults(o);
  opterr = loud = rank == 0; /* one complaint, not one per rank */
  int li = -1;
  while ((opt = getopt_long(argc, argv, "vh", longopts, &li)) != -1) {
    int bad = 0;
    /* "--runs --steps 5": getopt hands the next option over as the value */
    if (optarg && !strncmp(optarg, "--", 2) && optarg[2] && li >= 0) {
      if (rank == 0) fprintf(stderr, "squall-train: --%s needs a value before '%s'\n", longopts[li].name, optarg);
      return -1;
    }
    li = -1;
    switch (opt) {
    case O_RUNS: o->runs = optarg; break;
    case O_SHORT: o->is_short = 1; break;
    case O_STEPS: bad = parse_long("--steps", optarg, 1, 10000000, &steps); break;
    case O_BATCH:
      bad = parse_long("--batch", optarg, 1, 1 << 20, &v);
      o->batch = (int)v;
      break;
    case O_HIDDEN:
      bad = parse_long("--hidden", optarg, 1, 65536, &v);
      o->hidden = (int)v;
      break;
    case O_LAYERS:
      bad = parse_long("--layers", optarg, 1, TRAIN_MAX_LAYERS - 1, &v);
      o->layers = (int)v;
      break;
    case O_LR: bad = parse_double("--lr", optarg, 0.0, 100.0, &o->lr); break;
    case O_RAMP: bad = parse_long("--lr-ramp", optarg, 0, 10000000, &ramp); break;
    case O_MOM: bad = parse_double("--momentum", optarg, 0.0, 0.9999, &o->momentum); break;
    case O_WARM: bad = parse_long("--warmup-steps", optarg, 0, 10000000, &warm); break;
    case O_SEED:
      bad = parse_long("--seed", optarg, 0, 0x7fffffffL, &v);
      o->seed = (uint64_t)v;
      break;
    case O_TASK:
      if (!strcmp(optarg, "clusters")) o->task.kind = TRAIN_TASK_CLUSTERS;
      else if (!strcmp(optarg, "teacher")) o->task.kind = TRAIN_TASK_TEACHER;
      else {
        if (rank == 0) fprintf(stderr, "squall-train: --task '%s': accepted clusters or teacher\n", optarg);
        bad = 1;
      }
      break;
    case O_CLUST:
      bad = parse_long("--clusters", optarg, 1, 4096, &v);
      o->task.clusters = (int)v;
      break;
    case O_INFO:
      bad = parse_long("--informative", optarg, 1, 65536, &v);
      o->task.informative = (int)v;
      break;
    case O_NOISE: bad = parse_double("--noise", optarg, 0.0, 1e6, &o->task.noise); break;
    case O_DIM:
      bad = parse_long("--dim", optarg, 1, 65536, &v);
      o->task.dim = (int)v;
      break;
    case O_CLASSES:
      bad = parse_long("--classes", optarg, 2, 65536, &v);
      o->task.classes = (int)v;
      break;
    case O_TWIDTH:
      bad = parse_long("--teacher-width", optarg, 1, 65536, &v);
      o->task.teacher_width = (int)v;
      break;
    case O_GAIN: bad = parse_double("--gain", optarg, 0.0, 1e6, &o->task.gain); break;
    case O_NTRAIN:
      bad = parse_long("--train-size", optarg, 1, 1 << 24, &v);
      o->task.n_train = (int)v;
      break;
    case O_NTEST:
      bad = parse_long("--test-size", optarg, 1, 1 << 24, &v);
      o->task.n_test = (int)v;
      break;
    case O_EVTRAIN:
      bad = parse_long("--eval-train", optarg, 1, 1 << 24, &v);
      o->eval_train = (int)v;
      break;
    case O_SQUALL: o->squall_extra = optarg; break;
    case O_JSON: o->json = optarg; break;
    case O_PLOT: o->plot = optarg; break;
    case O_PERLAYER: o->per_layer = 1; break;
    case 'v': o->verbose = 1; break;
    case 'h':
      if (rank == 0) usage(stdout);
      return 1;
    default:
      if (rank == 0) usage(stderr);
      return -1;
    }
    if (bad) return -1;
  }
  if (optind < argc) {
    if (rank == 0) fprintf(stderr, "squall-train: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  if (steps > 0) o->steps = steps;
  if (o->runs == NULL) o->runs = o->is_short ? short_runs : full_runs;
  o->warmup_steps = warm >= 0 ? (int)warm : (int)(o->steps / 10);
  o->lr_ramp = ramp >= 0 ? ramp : o->steps / 20;
  return 0;
}

/* Whether path (an option's, NULL: not asked for) can be written: opened
 * for appending, and removed again where it did not exist, so that a bad
 * path is found before the runs. Prints why not. */
static int can_write(const char *flag, const char *path) {
  if (path == NULL) return 1;
  int existed = access(path, F_OK) == 0;
  FILE *f = fopen(path, "a");
  if (f == NULL) {
    fprintf(stderr, "squall-train: %s %s: cannot write it: %s\n", flag, path, strerror(errno));
    return 0;
  }
  fclose(f);
  if (!existed) remove(path);
  return 1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  /* clang-format off */
  options o = {
      .task = {.kind = TRAIN_TASK_CLUSTERS, .dim = 64, .classes = 10, .clusters = 8,
               .informative = 0, /* min(8, dim) */
               .noise = 0.3, .teacher_width = 64, .gain = 3.0, .n_train = 131072, .n_test = 4096},
      .steps = 600, .batch = 128, .hidden = 1024, .layers = 2, .eval_train = 4096,
      /* lr 0.1 with momentum 0.8 (the same effective step as 0.05 with 0.9):
       * dense accuracy is the same, and top-k with error feedback lags less,
       * since momentum replays every burst of residual that gets sent (on
       * seeds 1-3 with 4 ranks: within 0.64 points of dense here, 0.78-1.22
       * points behind with 0.9). */
      .lr = 0.1, .momentum = 0.8, .seed = 1};
  /* clang-format on */
  int pr = parse_options(argc, argv, &o, rank);
  if (pr != 0) {
    MPI_Finalize();
    return pr > 0 ? 0 : 2;
  }
  if (o.batch % ranks != 0) {
    if (rank == 0)
      fprintf(stderr, "squall-train: --batch %d: accepted a multiple of the rank count (%d)\n", o.batch,
              ranks);
    MPI_Finalize();
    return 2;
  }
  o.task.seed = o.seed;
  if (o.task.informative > o.task.dim) {
    if (rank == 0)
      fprintf(stderr, "squall-train: --informative %d: accepted 1 to --dim (%d)\n", o.task.informative,
              o.task.dim);
    MPI_Finalize();
    return 2;
  }
  if (o.task.informative == 0) o.task.informative = o.task.dim < 8 ? o.task.dim : 8;

  /* clang-format off */
  train_setup s = {.classes = o.task.classes, .steps = o.steps, .batch = o.batch, .lr = o.lr,
                   .momentum = o.momentum, .lr_ramp = o.lr_ramp, .seed = o.seed, .eval_train = o.eval_train,
                   .squall_extra = o.squall_extra, .verbose = o.verbose, .per_layer = o.per_layer};
  /* clang-format on */
  int widths[TRAIN_MAX_LAYERS + 1];
  widths[0] = o.task.dim;
  for (int l = 1; l <= o.layers; l++) widths[l] = o.hidden;
  widths[o.layers + 1] = o.task.classes;
  int lin[2] = {o.task.dim, o.task.classes};
  if (train_mlp_shape(&s.mlp, o.layers + 1, widths) || train_mlp_shape(&s.linear, 1, lin)) {
    MPI_Finalize();
    return 2;
  }

  /* --squall once, before any run: items squall cannot read, and what each
   * run takes from its name (the codec, +ef/+noef, +warmup): set here they
   * would override every run's and mislabel it. Two probes that differ in
   * each of those catch any spelling of the variables, defaults included. */
  if (o.squall_extra && *o.squall_extra) {
    squallConfig_t a, b;
    squallConfigDefault(&a);
    squallConfigDefault(&b);
    b.codec = squallCodecFp16;
    b.errorFeedback = !a.errorFeedback;
    b.warmup = a.warmup + 1;
    const squallConfig_t a0 = a, b0 = b;
    const char *why = NULL;
    if (squallConfigParse(&a, o.squall_extra) != squallSuccess) why = squallGetLastError();
    else if (squallConfigParse(&b, o.squall_extra) != squallSuccess) why = squallGetLastError();
    else if (a.codec != a0.codec || b.codec != b0.codec)
      why = "it sets the codec, which each run takes from its name in --runs";
    else if (a.errorFeedback != a0.errorFeedback || b.errorFeedback != b0.errorFeedback)
      why = "it sets SQUALL_EF, which each run takes from its name in --runs (+ef, +noef)";
    else if (a.warmup != a0.warmup || b.warmup != b0.warmup)
      why = "it sets SQUALL_WARMUP, which each run takes from its name and --warmup-steps";
    if (why) {
      if (rank == 0) fprintf(stderr, "squall-train: --squall '%s': %s\n", o.squall_extra, why);
      MPI_Finalize();
      return 2;
    }
  }
  /* The outputs, before hours of training rather than after. */
  int writable = 1;
  if (rank == 0) writable = can_write("--json", o.json) && can_write("--plot", o.plot);
  MPI_Bcast(&writable, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!writable) {
    MPI_Finalize();
    return 2;
  }

  /* The run list, checked in full before any training. */
  char *list = strdup(o.runs);
  int cap = 1;
  for (const char *c = o.runs; *c; c++) cap += *c == ',';
  train_run_desc *desc = calloc((size_t)cap, sizeof *desc);
  train_result *res = calloc((size_t)cap, sizeof *res);
  int nr = 0, status = 0;
  if (list == NULL || desc == NULL || res == NULL) {
    fprintf(stderr, "squall-train: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    if (train_run_parse(tok, o.warmup_steps, o.squall_extra, rank == 0, &desc[nr++]) != 0) status = 2;
    else {
      int seen = 0; /* the table, JSON and plot key results by name */
      for (int j = 0; j < nr - 1; j++) seen += !strcmp(desc[j].label, tok);
      if (seen) status = 2;
      if (seen == 1 && rank == 0) fprintf(stderr, "squall-train: --runs names '%s' more than once\n", tok);
    }
  if (status || nr == 0) {
    if (nr == 0 && rank == 0) fprintf(stderr, "squall-train: --runs '%s' names no run\n", o.runs);
    MPI_Finalize();
    return 2;
  }

  train_set train, test;
  if (train_data_make(&o.task, &train, &test) != 0) {
    fprintf(stderr, "squall-train: rank %d: out of memory for the data set\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  s.train = &train;
  s.test = &test;
  if (rank == 0)
    fprintf(stderr,
            "squall-train: %d ranks, %d runs, %ld steps x %d samples; MLP %zu parameters; task: %d-dim, %d "
            "classes, %d train / %d held-out samples (majority class %.1f%%)\n",
            ranks, nr, o.steps, o.batch, s.mlp.nparams, o.task.dim, o.task.classes, train.n, test.n,
            100.0 * train_set_majority(&test, o.task.classes));

  for (int i = 0; i < nr; i++) {
    int rc = train_run_one(&s, &desc[i], MPI_COMM_WORLD, &res[i]);
    if (rank == 0)
      fprintf(stderr, "[%d/%d] %-22s train loss %.4f, held-out acc %.2f%%, %.1f s (all-reduce %.1f s)%s\n",
              i + 1, nr, desc[i].label, res[i].train_loss, 100.0 * res[i].test_acc, res[i].seconds,
              res[i].allreduce_seconds, rc ? "  FAILED" : "");
    if (rc) status = 1;
  }

  if (rank == 0) {
    train_report_table(stdout, &s, ranks, res, nr);
    fflush(stdout);
    if (o.json && train_report_json(o.json, &s, &o.task, ranks, res, nr)) status = 1;
    if (o.plot && train_report_plot(o.plot, &s, ranks, res, nr)) status = 1;
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);

  for (int i = 0; i < nr; i++) train_result_free(&res[i]);
  free(res);
  free(desc);
  free(list);
  train_set_free(&train);
  train_set_free(&test);
  MPI_Finalize();
  return status;
}

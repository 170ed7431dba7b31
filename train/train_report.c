/* SPDX-License-Identifier: BSD-3-Clause */
/* train_report.c - table, JSON and plot of a training comparison. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "train_report.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SQUALL_GNUPLOT
#define SQUALL_GNUPLOT "gnuplot"
#endif

const train_result *train_report_reference(const train_result *r, int nr) {
  for (int i = 0; i < nr; i++)
    if (!strcmp(r[i].d.label, "none")) return &r[i];
  return NULL;
}

/* What a dense ring all-reduce of the same bytes would send per rank. */
static double dense_wire(const train_result *r, int ranks) {
  return ranks > 1 ? 2.0 * (ranks - 1) / ranks * (double)r->stats.bytesIn : 0.0;
}

static double reduction(const train_result *r, int ranks) {
  return r->stats.bytesWire ? dense_wire(r, ranks) / (double)r->stats.bytesWire : 0.0;
}

void train_report_table(FILE *out, const train_setup *s, int ranks, const train_result *r, int nr) {
  const train_result *ref = train_report_reference(r, nr);
  fprintf(out, "| run | final train loss | train acc | held-out acc | vs none (pp) | params updated | "
               "wire/step/rank | vs dense | s |\n");
  fprintf(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < nr; i++) {
    const train_result *x = &r[i];
    char delta[32] = "";
    if (ref && !x->d.linear) snprintf(delta, sizeof delta, "%+.2f", 100.0 * (x->test_acc - ref->test_acc));
    double per_step = x->steps ? (double)x->stats.bytesWire / x->steps : 0.0;
    char wire[32];
    if (per_step >= 1e6) snprintf(wire, sizeof wire, "%.2f MB", per_step / 1e6);
    else snprintf(wire, sizeof wire, "%.1f kB", per_step / 1e3);
    char ratio[32] = "-"; /* one rank sends nothing */
    if (x->stats.bytesWire) snprintf(ratio, sizeof ratio, "%.1fx", reduction(x, ranks));
    fprintf(out, "| %s | %.4f | %.2f%% | %.2f%% | %s | %.1f%% | %s | %s | %.1f |\n", x->d.label,
            x->train_loss, 100.0 * x->train_acc, 100.0 * x->test_acc, delta, 100.0 * x->updated, wire, ratio,
            x->seconds);
  }
  fprintf(out, "\n%d ranks, %ld steps of %d samples (global), MLP %zu parameters, SGD lr %g momentum %g, "
               "seed %llu.\n",
          ranks, s->steps, s->batch, s->mlp.nparams, s->lr, s->momentum, (unsigned long long)s->seed);
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

/* A number, or null where JSON has no spelling for it (NaN, infinity). */
static void json_num(FILE *f, const char *fmt, double x) {
  if (isfinite(x)) fprintf(f, fmt, x);
  else fputs("null", f);
}

static void json_widths(FILE *f, const train_mlp *m) {
  fputc('[', f);
  for (int l = 0; l <= m->nlayers; l++) fprintf(f, "%s%d", l ? ", " : "", m->widths[l]);
  fputc(']', f);
}

int train_report_json(const char *path, const train_setup *s, const train_task *task, int ranks,
                      const train_result *r, int nr) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "squall-train: cannot write --json file '%s': %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n\"program\": \"squall-train\", \"squall\": ");
  json_string(f, squallVersionString());
  fprintf(f, ", \"ranks\": %d,\n", ranks);
  if (task->kind == TRAIN_TASK_TEACHER)
    fprintf(f, "\"task\": {\"kind\": \"teacher\", \"teacher_width\": %d, \"gain\": %g, ", task->teacher_width,
            task->gain);
  else
    fprintf(f, "\"task\": {\"kind\": \"clusters\", \"clusters_per_class\": %d, \"informative\": %d, "
               "\"noise\": %g, ",
            task->clusters, task->informative, task->noise);
  fprintf(f, "\"dim\": %d, \"classes\": %d, \"train\": %d, \"test\": %d, \"seed\": %llu},\n", task->dim,
          task->classes, task->n_train, task->n_test, (unsigned long long)task->seed);
  fprintf(f, "\"model\": {\"widths\": ");
  json_widths(f, &s->mlp);
  fprintf(f, ", \"parameters\": %zu},\n", s->mlp.nparams);
  fprintf(f, "\"training\": {\"steps\": %ld, \"global_batch\": %d, \"lr\": %g, \"momentum\": %g, "
             "\"lr_ramp\": %ld, \"schedule\": \"cosine\", \"seed\": %llu, \"gradient_buffers\": \"%s\", "
             "\"eval_train_samples\": %d},\n",
          s->steps, s->batch, s->lr, s->momentum, s->lr_ramp, (unsigned long long)s->seed,
          s->per_layer ? "per-layer" : "flat",
          s->eval_train < s->train->n ? s->eval_train : s->train->n);
  fprintf(f, "\"runs\": [\n");
  for (int i = 0; i < nr; i++) {
    const train_result *x = &r[i];
    fprintf(f, "{\"label\": ");
    json_string(f, x->d.label);
    fprintf(f, ", \"config\": ");
    json_string(f, x->d.spec);
    fprintf(f, ", \"parameters\": %zu, \"final_train_loss\": ", x->nparams);
    json_num(f, "%.6f", x->train_loss);
    fprintf(f, ", \"train_accuracy\": %.6f, \"test_loss\": ", x->train_acc);
    json_num(f, "%.6f", x->test_loss);
    fprintf(f, ", \"test_accuracy\": %.6f, \"seconds\": %.3f, \"allreduce_seconds\": %.3f, "
               "\"calls\": %llu, \"compressed_calls\": %llu, \"warmup_calls\": %llu, \"bytes_in\": %llu, "
               "\"bytes_wire\": %llu, \"wire_reduction\": %.3f, \"params_updated\": %.6f, "
               "\"checksum\": \"%016llx\", \"loss_curve\": [",
            x->test_acc, x->seconds, x->allreduce_seconds, (unsigned long long)x->stats.calls,
            (unsigned long long)x->stats.compressedCalls,
            (unsigned long long)x->stats.passthrough[squallPassWarmup], (unsigned long long)x->stats.bytesIn,
            (unsigned long long)x->stats.bytesWire, reduction(x, ranks), x->updated,
            (unsigned long long)x->checksum);
    for (long t = 0; t < x->steps; t++) {
      if (t) fputs(", ", f);
      json_num(f, "%.5g", x->curve[t]);
    }
    fprintf(f, "]}%s\n", i + 1 < nr ? "," : "");
  }
  fprintf(f, "]\n}\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "squall-train: error writing --json file '%s': %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* Colour by codec, dash by variant, so that "with/without error feedback"
 * reads at a glance. */
static void style_of(const char *label, char *out, size_t len) {
  const char *color = "#7f7f7f";
  if (!strcmp(label, "linear")) color = "#bbbbbb";
  else if (!strncmp(label, "none", 4)) color = "#000000";
  else if (!strncmp(label, "fp16", 4)) color = "#1f77b4";
  else if (!strncmp(label, "bf16", 4)) color = "#17becf";
  else if (!strncmp(label, "topk:0.01", 9) && (label[9] == 0 || label[9] == '+')) color = "#2ca02c";
  else if (!strncmp(label, "topk:0.001", 10) && (label[10] == 0 || label[10] == '+')) color = "#d62728";
  else if (!strncmp(label, "topk", 4)) color = "#9467bd";
  int dash = strstr(label, "+noef") ? 2 : strstr(label, "+warmup") ? 4
                                                                   : 1;
  snprintf(out, len, "lc rgb '%s' dt %d lw 2", color, dash);
}

int train_report_plot(const char *path, const train_setup *s, int ranks, const train_result *r, int nr) {
  const char *gp = SQUALL_GNUPLOT;
  if (strchr(gp, '/') && access(gp, X_OK) != 0) {
    fprintf(stderr, "squall-train: cannot plot: gnuplot ('%s') is not there; install gnuplot "
                    "(Debian: gnuplot-nox) or leave out --plot (the curves are in the JSON)\n",
            gp);
    return -1;
  }
  /* A gnuplot that dies early must not kill us with SIGPIPE. */
  void (*old)(int) = signal(SIGPIPE, SIG_IGN);
  FILE *g = popen(gp, "w");
  if (g == NULL) {
    signal(SIGPIPE, old);
    fprintf(stderr, "squall-train: cannot start gnuplot ('%s'): %s\n", gp, strerror(errno));
    return -1;
  }
  long w = s->steps / 25 > 1 ? s->steps / 25 : 1;
  for (int i = 0; i < nr; i++) {
    fprintf(g, "$run%d << EOD\n", i);
    double acc = 0.0;
    for (long t = 0; t < r[i].steps; t++) {
      acc += r[i].curve[t];
      if (t >= w) acc -= r[i].curve[t - w];
      long have = t + 1 < w ? t + 1 : w;
      fprintf(g, "%ld %.6g\n", t + 1, acc / have);
    }
    fprintf(g, "EOD\n");
  }
  fprintf(g, "set terminal pngcairo size 1000,640 font ',11'\nset output '");
  for (const char *c = path; *c; c++) fprintf(g, *c == '\'' ? "''" : "%c", *c); /* gnuplot quoting */
  fprintf(g, "'\nset title 'squall-train: training loss, %d ranks, %zu-parameter MLP (mean of the last %ld "
             "steps)' noenhanced\n",
          ranks, s->mlp.nparams, w);
  fprintf(g, "set xlabel 'step'\nset ylabel 'training loss (cross-entropy)'\nset logscale y\nset grid\n"
             "set key outside right top noenhanced\nplot ");
  for (int i = 0; i < nr; i++) {
    char style[96];
    style_of(r[i].d.label, style, sizeof style);
    fprintf(g, "%s$run%d using 1:2 with lines %s title '%s'", i ? ", " : "", i, style, r[i].d.label);
  }
  fprintf(g, "\n");
  int st = pclose(g);
  signal(SIGPIPE, old);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    int code = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (code == 127)
      fprintf(stderr, "squall-train: cannot plot: gnuplot ('%s') not found; install gnuplot (Debian: "
                      "gnuplot-nox) or leave out --plot (the curves are in the JSON)\n",
              gp);
    else
      fprintf(stderr, "squall-train: gnuplot ('%s') failed (status %d) drawing '%s'\n", gp, code, path);
    return -1;
  }
  return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_report.h - the comparison's outputs: a Markdown table, a JSON file
 * (one line per run, so that shell tests can read it with awk), and a PNG of
 * the loss curves drawn by gnuplot.
 */
#ifndef SQUALL_TRAIN_REPORT_H
#define SQUALL_TRAIN_REPORT_H

#include <stdio.h>

#include "train_data.h"
#include "train_run.h"

/* The reference run for the "vs none" column: the first run named "none",
 * or NULL. */
const train_result *train_report_reference(const train_result *r, int nr);

void train_report_table(FILE *out, const train_setup *s, int ranks, const train_result *r, int nr);

/* Returns 0, or -1 after printing why. */
int train_report_json(const char *path, const train_setup *s, const train_task *task, int ranks,
                      const train_result *r, int nr);

/* Pipes a script and the curves (moving average over a window of about
 * steps/25) to gnuplot. Returns 0, or -1 after printing why (gnuplot
 * missing, or failing). */
int train_report_plot(const char *path, const train_setup *s, int ranks, const train_result *r, int nr);

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_plot.c - --plot FILE.png: effective bus bandwidth against message
 * size, one line per codec, drawn by gnuplot (Debian: gnuplot-nox). The
 * script and its data go to a temporary file that gnuplot reads; a missing
 * or failing gnuplot is reported, never fatal to the results already
 * printed.
 */
#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

extern char **environ;

/* A string inside gnuplot's single quotes: a quote is written twice. */
static void quoted(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    fputc(*s, f);
  }
  fputc('\'', f);
}

static void script(FILE *f, const char *png, const bench_run_info *in, const bench_row *rows, int n) {
  const bench_options *o = in->opt;
  char title[256], h[32], types[64] = "";
  for (int t = 0; t < o->ndtypes; t++)
    snprintf(types + strlen(types), sizeof types - strlen(types), "%s%s", t ? ", " : "",
             bench_dtype_name(o->dtypes[t]));
  snprintf(title, sizeof title, "squall-bench: %s of %s, %d ranks, %s backend%s%s",
           bench_coll_title(o->coll), types, in->nranks, in->backend, in->link ? ", " : "",
           in->link ? in->link : "");
  /* pngcairo draws smoother lines; gd's png is the fallback every build has. */
  fputs("if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
        "  set terminal pngcairo size 1000,640 noenhanced font ',10'\n"
        "} else {\n"
        "  set terminal png size 1000,640 noenhanced\n"
        "}\n",
        f);
  fputs("set output ", f);
  quoted(f, png);
  fputs("\nset title ", f);
  quoted(f, title);
  fputs("\nset xlabel 'message size per rank'\n"
        "set ylabel 'bus bandwidth, GB/s (codecs: effective, from the uncompressed size)'\n"
        "set logscale xy 2\nset grid\nset key top left\nset format y '%g'\n",
        f);
  /* Some room left and right, so that the end labels are drawn too. */
  size_t lo = (size_t)-1, hi = 0;
  for (int i = 0; i < n; i++) {
    if (rows[i].bytes < lo) lo = rows[i].bytes;
    if (rows[i].bytes > hi) hi = rows[i].bytes;
  }
  if (n) fprintf(f, "set xrange [%.9g:%.9g]\n", lo / 1.4142, hi * 1.4142);
  /* Size labels in KiB/MiB at the measured sizes. */
  fputs("set xtics (", f);
  int first = 1;
  for (int i = 0; i < n; i++) {
    int dup = 0;
    for (int j = 0; j < i; j++) dup |= rows[j].bytes == rows[i].bytes;
    if (dup) continue;
    fprintf(f, "%s'%s' %zu", first ? "" : ", ", bench_human_bytes((double)rows[i].bytes, h, sizeof h),
            rows[i].bytes);
    first = 0;
  }
  /* one line per codec, per (type, codec) where -d lists several */
  fputs(")\nplot ", f);
  for (int tc = 0; tc < o->ndtypes * o->ncodecs; tc++) {
    int c = tc % o->ncodecs;
    char label[BENCH_CODEC_LEN + 16];
    snprintf(label, sizeof label, "%s%s%s", o->ndtypes > 1 ? bench_dtype_name(o->dtypes[tc / o->ncodecs]) : "",
             o->ndtypes > 1 ? " " : "", o->codecs[c]);
    fprintf(f, "%s'-' using 1:2 with linespoints lw 2 pt %d title ", tc ? ", " : "", 5 + 2 * (c % 4));
    quoted(f, label);
  }
  fputc('\n', f);
  for (int tc = 0; tc < o->ndtypes * o->ncodecs; tc++) {
    bench_dtype t = o->dtypes[tc / o->ncodecs];
    for (int i = 0; i < n; i++)
      if (!strcmp(rows[i].codec, o->codecs[tc % o->ncodecs]) && rows[i].dtype == t && rows[i].busbw_gbs > 0)
        fprintf(f, "%zu %.9g\n", rows[i].bytes, rows[i].busbw_gbs);
    fputs("e\n", f);
  }
}

int bench_plot(const char *png, const bench_run_info *in, const bench_row *rows, int n, FILE *err) {
  const char *prog = getenv("SQUALL_BENCH_GNUPLOT");
  if (prog == NULL || !*prog) prog = "gnuplot";
  const char *dir = getenv("TMPDIR");
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s/squall-bench-plot.XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fprintf(err, "squall-bench: --plot %s: cannot create a temporary script '%s': %s\n", png, tmp,
            strerror(errno));
    return -1;
  }
  FILE *f = fdopen(fd, "w");
  if (f == NULL) {
    close(fd);
    unlink(tmp);
    return -1;
  }
  script(f, png, in, rows, n);
  if (fclose(f) != 0) {
    fprintf(err, "squall-bench: --plot %s: cannot write '%s': %s\n", png, tmp, strerror(errno));
    unlink(tmp);
    return -1;
  }
  char *argv[] = {(char *)prog, tmp, NULL};
  pid_t pid;
  int rc = posix_spawnp(&pid, prog, NULL, NULL, argv, environ), status = 0;
  if (rc == 0 && waitpid(pid, &status, 0) < 0) rc = errno;
  unlink(tmp);
  if (rc == ENOENT) {
    fprintf(err, "squall-bench: warning: --plot %s: '%s' was not found in PATH, so there is no plot (the "
                 "table%s is complete); install gnuplot (Debian/Ubuntu: apt-get install "
                 "gnuplot-nox) or name it with SQUALL_BENCH_GNUPLOT\n",
            png, prog, in->opt->json_path ? " and the JSON" : "");
    return -2;
  }
  if (rc != 0) {
    fprintf(err, "squall-bench: --plot %s: cannot run '%s': %s\n", png, prog, strerror(rc));
    return -1;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(err, "squall-bench: --plot %s: '%s' failed (%s %d); see its messages above\n", png, prog,
            WIFEXITED(status) ? "exit status" : "signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return -1;
  }
  return 0;
}

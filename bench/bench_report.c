/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_report.c - what squall-bench prints: a header that says what was
 * run, an aligned row per (size, codec) as it finishes, a one-line summary
 * per codec, and the same rows as a JSON array for scripts.
 */
#ifdef HAVE_CONFIG_H
#include "config.h" /* SQUALL_COMMIT */
#endif
#include <errno.h>
#include <math.h>
#include <string.h>

#include "bench.h"

/* The codec column: 12 wide, or as wide as the longest name in -C
 * (topk:0.001953125), so that the columns stay aligned. */
static int codec_width(const bench_options *o) {
  int w = 12;
  for (int c = 0; c < o->ncodecs; c++)
    if ((int)strlen(o->codecs[c]) > w) w = (int)strlen(o->codecs[c]);
  return w;
}

/* -d's types as a list, "float,half". Returns buf. */
static const char *type_list(const bench_options *o, char *buf, size_t len) {
  buf[0] = 0;
  for (int t = 0; t < o->ndtypes; t++)
    snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", t ? "," : "", bench_dtype_name(o->dtypes[t]));
  return buf;
}

void bench_report_header(FILE *out, const bench_run_info *in) {
  const bench_options *o = in->opt;
  const squallConfig_t *c = in->base;
  char lo[32], hi[32], types[64];
  int rs = o->coll == BENCH_REDUCESCATTER;
  const char *plain_name = rs ? (!strcmp(in->backend, "mpi") ? "PMPI_Reduce_scatter_block" : "pncclReduceScatter")
                              : (!strcmp(in->backend, "mpi") ? "PMPI_Allreduce" : "pncclAllReduce");
  fprintf(out, "# squall-bench: %s, squall %s\n", bench_coll_title(o->coll), squallVersionString());
  fprintf(out, "# ranks %d, backend %s (%s), type %s, op %s%s\n", in->nranks, in->backend,
          in->memory, type_list(o, types, sizeof types), o->op == BENCH_AVG ? "avg" : "sum",
          o->op == BENCH_AVG && !strcmp(in->backend, "mpi")
              ? " (MPI has no average op: sum, then divide, inside the timed call)"
              : "");
  if (rs)
    fprintf(out, "# size: the send buffer per rank (a multiple of 4 x ranks elements, as nccl-tests'\n"
                 "# reduce_scatter_perf); count: the elements each rank receives, its block of the sum\n");
  fprintf(out, "# sizes %s .. %s, %d timed + %d warm-up iterations, check %s, seed %llu\n",
          bench_human_bytes((double)o->min_bytes, lo, sizeof lo),
          bench_human_bytes((double)o->max_bytes, hi, sizeof hi), o->iters, o->warmup,
          o->check ? "on" : "off", (unsigned long long)o->seed);
  /* every option the figures depend on (the codec is per row) */
  fputs("# squall:", out);
  squallOption_t opt;
  for (int i = 0; squallConfigOption(c, i, &opt) == squallSuccess; i++)
    if (strcmp(opt.name, "SQUALL_COMPRESS") && strcmp(opt.name, "SQUALL_DEBUG") && strcmp(opt.name, "SQUALL_STATS"))
      fprintf(out, " %s=%s", opt.name, opt.value);
  fputc('\n', out);
  fprintf(out, "# data: %s\n", bench_dist_name(o->data));
  if (!strcmp(in->backend, "mpi"))
    fprintf(out, "# errors: %s\n", o->errors_fatal ? "fatal (MPI_ERRORS_ARE_FATAL: squall keeps no way back)" : "return (MPI_ERRORS_RETURN: squall keeps a way back)");
  else
    fprintf(out, "# errors: return (NCCL's calls return theirs)\n");
  fprintf(out, "# host: %s, %d cores, %d ranks on this machine (%.2f per core)\n",
          in->cpu ? in->cpu : "unknown", in->cores, in->node_ranks,
          in->cores > 0 ? (double)in->node_ranks / in->cores : 0.0);
  fprintf(out, "# mpi: %s\n", in->mpi_library ? in->mpi_library : "unknown");
  if (in->nccl_version) fprintf(out, "# nccl: %s\n", in->nccl_version);
  fprintf(out, "# link: %s\n", in->link ? in->link : "as the ranks find it (no emulation: SQUALL_BENCH_LINK unset)");
  fprintf(out, "#\n# out-of-place (separate send and receive buffers; in place, squall runs the same path)\n");
  if (!o->alternate)
    fprintf(out, "# time: max over ranks of the median iteration; algbw = size/time; busbw = "
                 "algbw*%s(P-1)/P\n# (one rank: busbw = algbw, ratio 0: nothing is exchanged)\n"
                 "# (for codecs: effective, from the uncompressed size); wire: bytes one "
                 "rank sends per call;\n# ratio = bytes in / bytes on the wire; codec: compress + "
                 "decompress per call;\n# rel_err = ||result - exact sum|| / ||exact sum|| after "
                 "warm-up and timed iterations (error feedback on)%s\n",
            rs ? "" : "2", rs ? "; each rank checks its block" : "");
  else
    fprintf(out, "# algbw = size/time; busbw = algbw*%s(P-1)/P; wire: bytes one rank sends per call;\n"
                 "# ratio = bytes in / bytes on the wire; codec: compress + decompress per call\n",
            rs ? "" : "2");
  if (o->alternate)
    fprintf(out, "# alternating blocks: %d blocks of %d calls through squall and %d of the plain %s\n"
                 "# (%s), interleaved after %d warm-up calls through squall; time: max over ranks of each\n"
                 "# block's mean call, median over blocks; speedup = the plain blocks' time / time;\n"
                 "# none = squall with compression off (what it adds to calls it passes through)\n#\n",
            o->alternate, o->iters, o->iters, bench_coll_title(o->coll), plain_name, o->warmup);
  else
    fprintf(out, "# none = the plain %s (%s, not through squall); speedup = time of none / time\n#\n",
            bench_coll_title(o->coll), plain_name);
  int cw = codec_width(o);
  fprintf(out, "#%11s %10s %8s %*s %12s %8s %8s %12s %7s %7s %10s %9s %s\n", "size", "count", "type", cw,
          "codec", "time", "algbw", "busbw", "wire", "ratio", "speedup", "codec", "rel_err", "path");
  fprintf(out, "#%11s %10s %8s %*s %12s %8s %8s %12s %7s %7s %10s\n", "(B)", "(elts)", "", cw, "", "(us)",
          "(GB/s)", "(GB/s)", "(B/rank)", "", "", "(us)");
  fflush(out);
}

void bench_report_row(FILE *out, const bench_options *o, const bench_row *r) {
  char speed[16], err[16];
  if (r->speedup > 0) snprintf(speed, sizeof speed, "%.2f", r->speedup);
  else snprintf(speed, sizeof speed, "-");
  if (r->checked) snprintf(err, sizeof err, "%.2e", r->rel_err); /* "nan" too */
  else snprintf(err, sizeof err, "-");
  fprintf(out, " %11zu %10zu %8s %*s %12.1f %8.3f %8.3f %12.0f %7.2f %7s %10.1f %9s %s%s%s\n",
          r->bytes, r->count, bench_dtype_name(r->dtype), codec_width(o), r->codec, r->time_us, r->algbw_gbs, r->busbw_gbs, r->wire_bytes,
          r->ratio, speed, r->codec_us, err, r->path, r->checked && !r->consistent ? " RANKS-DIFFER" : "",
          r->wrong ? " WRONG" : "");
  fflush(out);
}

/* A time per call for the summary: microseconds below 1 ms (a 49 us codec
 * is not "0.0 ms"), milliseconds above. */
static const char *per_call(double us, char *buf, size_t len) {
  if (us < 1000.0) snprintf(buf, len, "%.0f us", us);
  else snprintf(buf, len, "%.1f ms", us / 1e3);
  return buf;
}

void bench_report_summary(FILE *out, const bench_run_info *in, const bench_row *rows, int n) {
  const bench_options *o = in->opt;
  char a[32], b[32];
  int wrong = 0, differ = 0;
  fprintf(out, "#\n# summary (largest size %s)\n",
          n ? bench_human_bytes((double)rows[n - 1].bytes, a, sizeof a) : "-");
  for (int tc = 0; tc < o->ndtypes * o->ncodecs; tc++) {
    int c = tc % o->ncodecs;
    bench_dtype t = o->dtypes[tc / o->ncodecs];
    const bench_row *last = NULL, *best = NULL, *worst = NULL;
    double max_err = -1;
    for (int i = 0; i < n; i++) {
      const bench_row *r = &rows[i];
      if (strcmp(r->codec, o->codecs[c]) || r->dtype != t) continue;
      last = r;
      if (r->speedup > 0 && (!best || r->speedup > best->speedup)) best = r;
      if (r->speedup > 0 && (!worst || r->speedup < worst->speedup)) worst = r;
      if (r->checked && (isnan(r->rel_err) || r->rel_err > max_err) && !isnan(max_err))
        max_err = r->rel_err; /* a NaN stays */
    }
    if (!last) continue;
    if (o->ndtypes > 1) fprintf(out, "# %-8s %-*s", bench_dtype_name(t), codec_width(o), last->codec);
    else fprintf(out, "# %-*s", codec_width(o), last->codec);
    if (!strcmp(last->codec, "none") && !o->alternate) {
      fprintf(out, " busbw %.3f GB/s, %s per call", last->busbw_gbs, per_call(last->time_us, a, sizeof a));
    } else {
      if (last->speedup > 0)
        fprintf(out, " %.2fx vs plain (%.2fx at %s .. %.2fx at %s),", last->speedup,
                worst->speedup, bench_human_bytes((double)worst->bytes, a, sizeof a),
                best->speedup, bench_human_bytes((double)best->bytes, b, sizeof b));
      fprintf(out, " effective busbw %.3f GB/s, wire ratio %.1f, codec %s per call (%.0f%% of "
                   "the call)",
              last->busbw_gbs, last->ratio, per_call(last->codec_us, a, sizeof a),
              /* the codec's time is a mean per call: its share is of the mean call */
              last->mean_us > 0 ? 100.0 * last->codec_us / last->mean_us : 0.0);
    }
    if (!(max_err < 0)) fprintf(out, ", rel_err <= %.2e", max_err);
    /* a largest size that ran plain: say why, or its speedup means nothing */
    if (!strcmp(last->path, "passthrough") && last->pass_reason)
      fprintf(out, "; at %s every timed call passed through (%s)",
              bench_human_bytes((double)last->bytes, a, sizeof a), last->pass_reason);
    fputc('\n', out);
  }
  int checked = 0;
  for (int i = 0; i < n; i++) {
    wrong += rows[i].wrong;
    differ += rows[i].checked && !rows[i].consistent;
    checked += rows[i].checked;
  }
  if (checked == n)
    fprintf(out, "# %d results, %d out of bounds, %d where ranks differ; %.1f s in all\n", n, wrong,
            differ, in->seconds);
  else /* nccl-tests says N/A where it did not check */
    fprintf(out, "# %d results, %d checked (%s): %d out of bounds, %d where ranks differ; %.1f s in all\n", n,
            checked, o->alternate ? "--alternate checks nothing" : o->check ? "see the messages above"
                                                                            : "-c 0",
            wrong, differ, in->seconds);
  fflush(out);
}

/* JSON has no NaN, Infinity or "unmeasured": those become null. */
static void num(FILE *f, const char *key, double v, int valid, const char *fmt) {
  fprintf(f, ", \"%s\": ", key);
  if (valid && isfinite(v)) fprintf(f, fmt, v);
  else fputs("null", f);
}

static void quoted(FILE *f, const char *v) {
  fputc('"', f);
  for (; v && *v; v++) {
    if (*v == '"' || *v == '\\') fprintf(f, "\\%c", *v);
    else if ((unsigned char)*v < 0x20) fprintf(f, "\\u%04x", *v);
    else fputc(*v, f);
  }
  fputc('"', f);
}

static void str(FILE *f, const char *key, const char *v) {
  fprintf(f, ", \"%s\": ", key);
  quoted(f, v);
}

int bench_report_json(const char *path, const bench_run_info *in, const bench_row *rows, int n) {
  FILE *f = fopen(path, "w");
  if (f == NULL) return -1;
  fputs("[\n", f);
  for (int i = 0; i < n; i++) {
    const bench_row *r = &rows[i];
    /* nccl-tests' size (the send buffer) and count (the elements each rank receives) */
    fprintf(f, "  {\"size_bytes\": %zu, \"count\": %zu", r->bytes, r->count);
    str(f, "coll", bench_coll_name(in->opt->coll));
    str(f, "codec", r->codec);
    str(f, "type", bench_dtype_name(r->dtype)); /* nccl-tests' column */
    num(f, "time_us", r->time_us, 1, "%.3f");
    num(f, "median_us", r->time_us, 1, "%.3f"); /* time_us by the name that says what it is */
    num(f, "min_us", r->min_us, 1, "%.3f");     /* the spread over iterations (--alternate: blocks) */
    num(f, "max_us", r->max_us, 1, "%.3f");
    num(f, "algbw_gbs", r->algbw_gbs, 1, "%.6g");
    num(f, "busbw_gbs", r->busbw_gbs, 1, "%.6g");
    num(f, "wire_bytes", r->wire_bytes, 1, "%.10g"); /* a mean over ranks */
    num(f, "ratio", r->ratio, r->ratio > 0, "%.6g");
    num(f, "speedup", r->speedup, r->speedup > 0, "%.6g");
    num(f, "plain_us", r->plain_us, r->plain_us > 0, "%.3f"); /* --alternate: the interleaved plain blocks */
    fprintf(f, ", \"alternate_blocks\": %d", in->opt->alternate);
    /* --alternate: the blocks' means, which count a rare slow call (an exploration) that the medians leave out */
    num(f, "mean_us", r->mean_us, in->opt->alternate > 0, "%.3f");
    num(f, "plain_mean_us", r->plain_mean_us, r->plain_mean_us > 0, "%.3f");
    num(f, "rel_err", r->rel_err, r->checked, "%.6g");
    num(f, "codec_us", r->codec_us, 1, "%.3f");
    str(f, "path", r->path);
    if (r->pass_reason) str(f, "pass_reason", r->pass_reason);
    else fputs(", \"pass_reason\": null", f);
    /* consistent: null for a reduce-scatter, whose ranks hold different blocks */
    fprintf(f, ", \"consistent\": %s, \"wrong\": %s, \"ranks\": %d",
            !r->checked || in->opt->coll == BENCH_REDUCESCATTER ? "null" : r->consistent ? "true"
                                                                                         : "false",
            !r->checked ? "null" : r->wrong ? "true"
                                            : "false",
            in->nranks);
    str(f, "backend", in->backend);
    str(f, "dtype", bench_dtype_name(r->dtype)); /* as "type" (older readers) */
    str(f, "op", in->opt->op == BENCH_AVG ? "avg" : "sum");
    fprintf(f, ", \"iters\": %d, \"warmup_iters\": %d", in->opt->iters, in->opt->warmup);
    str(f, "errors", in->opt->errors_fatal ? "fatal" : "return"); /* fatal: the mpi backend only */
    if (in->link) str(f, "link", in->link);
    else fputs(", \"link\": null", f);
    /* what the figures were measured with */
    str(f, "squall", squallVersionString());
#ifdef SQUALL_COMMIT
    str(f, "commit", SQUALL_COMMIT);
#else
    str(f, "commit", "unknown");
#endif
    str(f, "date", in->date);
    str(f, "command", in->command ? in->command : "");
    str(f, "host", in->hostname);
    str(f, "cpu", in->cpu ? in->cpu : "unknown");
    fprintf(f, ", \"cores\": %d, \"node_ranks\": %d", in->cores, in->node_ranks);
    str(f, "mpi", in->mpi_library ? in->mpi_library : "unknown");
    if (in->nccl_version) str(f, "nccl", in->nccl_version);
    else fputs(", \"nccl\": null", f);
    /* every setting, as squall-info -c prints it, the row's codec included
     * (none: the plain rows did not go through squall at all) */
    squallConfig_t cfg = *in->base;
    squallConfigSet(&cfg, "SQUALL_COMPRESS", r->codec); /* a name -C's parser took */
    fputs(", \"config\": {", f);
    squallOption_t opt;
    for (int k = 0; squallConfigOption(&cfg, k, &opt) == squallSuccess; k++) {
      fprintf(f, "%s\"%s\": ", k ? ", " : "", opt.name);
      quoted(f, opt.value);
    }
    fputc('}', f);
    fprintf(f, "}%s\n", i + 1 < n ? "," : "");
  }
  fputs("]\n", f);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    if (!errno) errno = EIO;
    return -1;
  }
  return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench.h - squall-bench's shared types: the options a run was asked for,
 * one measured row per (size, codec), and the small modules that parse,
 * generate, report and plot. The backends (which memory, which collective)
 * sit behind bench_backend.h.
 */
#ifndef SQUALL_BENCH_H
#define SQUALL_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "squall.h"

#define BENCH_MAX_CODECS 16
#define BENCH_MAX_SIZES 64
#define BENCH_CODEC_LEN 32
#define BENCH_MAX_TYPES 4 /* -d: each of float, half, bfloat16, double at most once */

typedef enum { BENCH_F32 = 0,
               BENCH_F16,
               BENCH_BF16,
               BENCH_F64,
               BENCH_NUM_TYPES } bench_dtype;
typedef enum { BENCH_SUM = 0,
               BENCH_AVG } bench_op;
/* --coll: which collective is measured (bench_coll.c). */
typedef enum { BENCH_ALLREDUCE = 0,
               BENCH_REDUCESCATTER } bench_coll;
/* --data: what the gradients look like (bench_data.c). */
typedef enum {
  BENCH_DIST_UNIFORM = 0, /* fixed per-coordinate magnitudes 2^0..2^-7 times normal noise */
  BENCH_DIST_NORMAL,      /* normal noise only */
  BENCH_DIST_LOGNORMAL,   /* heavy-tailed magnitudes (2^(4z)), random sign */
  BENCH_DIST_CONSTANT,    /* 0.5 everywhere: all ties */
  BENCH_DIST_TINY,        /* around 1e-38, the subnormal boundary */
  BENCH_DIST_SPARSE,      /* 99% zeros */
  BENCH_DIST_NONFINITE,   /* uniform with 1 in 4096 NaN or +-Inf */
  BENCH_NUM_DISTS
} bench_dist;

typedef struct {
  size_t min_bytes, max_bytes;         /* -b, -e */
  int step_factor;                     /* -f (0 when -i is used) */
  size_t step_bytes;                   /* -i (0 when -f is used) */
  int iters, warmup;                   /* -n, -w */
  int ndtypes;                         /* -d: the types to run, in the order given */
  bench_dtype dtypes[BENCH_MAX_TYPES]; /* -d */
  bench_op op;                         /* -o */
  bench_coll coll;                     /* --coll */
  int check;                           /* -c */
  int ncodecs;                         /* -C */
  char codecs[BENCH_MAX_CODECS][BENCH_CODEC_LEN];
  const char *json_path;   /* -J, NULL = none */
  const char *plot_path;   /* --plot, NULL = none */
  const char *backend;     /* --backend: "auto", "mpi" or "nccl" */
  const char *squall_spec; /* -S: extra SQUALL_* items (every -S, in order), NULL = none */
  uint64_t seed;           /* --seed */
  bench_dist data;         /* --data */
  int progress;            /* 0 with --no-progress */
  int errors_fatal;        /* --errors fatal: the MPI backend's communicator keeps MPI's default handler */
  int alternate;           /* --alternate N: N blocks of -n calls each way, squall and plain
                                  interleaved (0: the usual rows) */
} bench_options;

/* What one (size, codec) measured, already combined over ranks. */
typedef struct {
  size_t bytes, count; /* the send buffer per rank; the elements each rank receives (nccl-tests'
                          count: all of them for an all-reduce, one block for a reduce-scatter) */
  bench_dtype dtype;   /* the element type (-d) */
  char codec[BENCH_CODEC_LEN];
  double time_us;          /* max over ranks of each rank's median iteration */
  double min_us, max_us;   /* max over ranks of each rank's fastest and slowest iteration (the
                            spread; --alternate: of its blocks) */
  double mean_us;          /* max over ranks of each rank's mean iteration (the codec's share);
                              --alternate: the mean over squall's blocks of each block's time
                              (the slowest rank's mean call) */
  double algbw_gbs;        /* bytes / time, 1e9 bytes per GB */
  double busbw_gbs;        /* algbw * 2(P-1)/P (reduce-scatter: (P-1)/P) */
  double wire_bytes;       /* bytes one rank sent per call, mean over ranks */
  double ratio;            /* bytes in / bytes on the wire */
  double speedup;          /* time of none / time; < 0 when none was not run */
  int checked;             /* 1 when rel_err and consistent were measured (-c 1) */
  double rel_err;          /* ||out - exact|| / ||exact|| (NaN when out holds NaN) */
  double codec_us;         /* compress + decompress per call, max over ranks */
  const char *path;        /* "plain", "16-bit", "sparse", "dense", "passthrough" */
  const char *pass_reason; /* the timed calls' most common pass-through reason
                              (squallPassReasonName), NULL where none passed */
  double plain_us;         /* --alternate: the plain blocks' median per call, interleaved with
                          this row's (speedup = plain_us / time_us); 0 otherwise */
  double plain_mean_us;    /* --alternate: the plain blocks' mean per call (against mean_us,
                              the squall blocks' mean: what a rare slow call costs, which
                              the medians leave out); 0 otherwise */
  int consistent;          /* 1 when all ranks hold the same bits */
  int wrong;               /* 1 when -c found a result outside what the codec allows */
} bench_row;

/* Everything the report needs besides the rows. */
typedef struct {
  int nranks;
  const char *backend, *memory; /* "mpi", "host memory" */
  const bench_options *opt;
  const squallConfig_t *base; /* the configuration every codec starts from */
  const char *link;           /* SQUALL_BENCH_LINK from tools/ethernet.sh, or NULL */
  double seconds;             /* wall time of the whole run */
  /* what the figures depend on, for the header */
  const char *cpu;          /* CPU model (/proc/cpuinfo), or "unknown" */
  int cores;                /* online cores of rank 0's machine */
  int node_ranks;           /* ranks on rank 0's machine */
  const char *mpi_library;  /* MPI_Get_library_version's first line */
  const char *nccl_version; /* "2.28.3" where the backend is nccl, else NULL */
  char date[32];            /* when the run started, ISO 8601 UTC */
  char hostname[64];        /* rank 0's */
  const char *command;      /* the command line, words quoted where the shell would need it */
} bench_run_info;

/* ------------------------------------------------------------ bench_args.c */
/* Parses argv into *opt. Returns 0 to run, 1 after printing -h's help to
 * `out`, 2 after printing an error (names the flag, the value and what is
 * accepted) to `err`. Either stream may be NULL (ranks other than 0). */
int bench_parse_args(int argc, char **argv, bench_options *opt, FILE *out, FILE *err);

/* The sizes to run, ascending, in whole elements; returns how many, or -1
 * when there would be more than max. */
int bench_sizes(const bench_options *opt, size_t elsize, size_t *sizes, int max);

/* "float", "half", ... as -d spells it. */
const char *bench_dtype_name(bench_dtype t);
size_t bench_dtype_size(bench_dtype t);

/* ------------------------------------------------------------ bench_coll.c */
/* What differs between the collectives, in nccl-tests' terms (its
 * all_reduce_perf and reduce_scatter_perf): the size is the send buffer
 * per rank either way. */
/* "allreduce", "reducescatter" as --coll spells them; parse returns 0, or
 * -1 for a name that is not one. */
const char *bench_coll_name(bench_coll k);
int bench_coll_parse(const char *name, bench_coll *k);
/* "all-reduce", "reduce-scatter", for the text. */
const char *bench_coll_title(bench_coll k);
/* busbw / algbw: 2(P-1)/P for an all-reduce, (P-1)/P for a reduce-scatter;
 * 1 for one rank (nothing is exchanged). */
double bench_coll_bus_factor(bench_coll k, int p);
/* Bytes one rank sends in the plain collective of `bytes` per rank, by a
 * ring: 2(P-1)/P of them for an all-reduce, (P-1)/P for a reduce-scatter. */
uint64_t bench_coll_ring_wire(bench_coll k, uint64_t bytes, int p);
/* The elements each rank receives from a send buffer of count. */
size_t bench_coll_out_count(bench_coll k, size_t count, int p);
/* The sizes (bytes, ascending, from bench_sizes) that the collective runs
 * on p ranks, in place: a reduce-scatter's send buffer is rounded down to
 * a multiple of 4P elements, as nccl-tests' reduce_scatter_perf does (4
 * elements a rank at least), and sizes that become equal are run once.
 * Returns how many remain. */
int bench_coll_sizes(bench_coll k, size_t elsize, int p, size_t *sizes, int n);

/* ----------------------------------------------------------- bench_types.c */
/* float -> the type's bytes (n elements), rounding to nearest even; dst may
 * be src itself (each element is read before its bytes are written). */
void bench_to_type(bench_dtype t, const float *src, void *dst, size_t n);
/* The type's bytes -> float (exact for half and bfloat16; double is
 * rounded); dst may be src itself (converted from the last element down). */
void bench_from_type(bench_dtype t, const void *src, float *dst, size_t n);
/* x as the type holds it, back in float: what a rank of that type sends. */
float bench_round_to(bench_dtype t, float x);
/* The type's unit roundoff: 2^-24, 2^-11, 2^-8 (double: 2^-24, as the
 * data are generated in float). */
double bench_dtype_unit(bench_dtype t);

/* "64 MiB", "1.5 KiB", "512 B". Returns buf. */
const char *bench_human_bytes(double bytes, char *buf, size_t len);

/* ------------------------------------------------------------ bench_data.c */
/* The gradient rank `rank` feeds in at iteration `iter`: elements
 * [off, off+n) of a deterministic, counter-based sequence, so that any rank
 * can recompute any other rank's input exactly (for the exact sum). */
void bench_fill(bench_dist dist, uint64_t seed, int rank, int iter, size_t off, size_t n, float *out);

/* Sums of (out[i] - exact[i])^2 and exact[i]^2 over [off, off+n), where
 * exact[i] is the sum over nranks ranks of bench_fill's values, rounded
 * to type t as each rank sent them, in double (divided by nranks when
 * avg). */
void bench_error_sums(bench_dist dist, uint64_t seed, bench_dtype t, int nranks, int iter, int avg,
                      const float *out, size_t off, size_t n, double *err2, double *ref2);

/* "uniform", ... as --data spells it; parse returns 0, or -1 for a name
 * that is not one. */
const char *bench_dist_name(bench_dist d);
int bench_dist_parse(const char *name, bench_dist *d);

/* 64-bit hash of a buffer's bytes (equal bits -> equal hash). */
uint64_t bench_hash(const void *p, size_t bytes);

/* ------------------------------------------------------------ bench_host.c */
/* The CPU model from /proc/cpuinfo into buf ("unknown" when absent). */
const char *bench_cpu_model(char *buf, size_t len);

/* ---------------------------------------------------------- bench_report.c */
void bench_report_header(FILE *out, const bench_run_info *info);
void bench_report_row(FILE *out, const bench_options *opt, const bench_row *row);
/* One line per codec, then the totals. */
void bench_report_summary(FILE *out, const bench_run_info *info, const bench_row *rows, int nrows);
/* Writes the JSON array; returns 0, or -1 with errno when the file fails. */
int bench_report_json(const char *path, const bench_run_info *info, const bench_row *rows, int nrows);

/* ------------------------------------------------------------ bench_plot.c */
/* PNG of effective busbw against size, one line per codec, by gnuplot (the
 * program named by SQUALL_BENCH_GNUPLOT, default "gnuplot"). Returns 0;
 * -2 after a warning to err when there is no gnuplot; -1 after printing
 * why to err when it failed. */
int bench_plot(const char *png, const bench_run_info *info, const bench_row *rows, int nrows,
               FILE *err);

#endif

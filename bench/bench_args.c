/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_args.c - squall-bench's command line, in nccl-tests' spelling
 * (-b -e -f -i -n -w -d -o -c, and -t -g -m -N -a -z -G -p -y -R -r -T -M at the
 * value that describes squall-bench) plus squall's own (-C, -J, --plot,
 * --backend, -S, --coll). Every error names the flag, the value and what is
 * accepted; nothing is silently clamped.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "bench_backend.h"
/* The library's own size parser, compiled in (its symbols are hidden in
 * libsquall.so), so that -b 64M and SQUALL_MIN_BYTES=64M read alike. */
#include "common/size.h"

#define DEFAULT_CODECS "none,fp16,bf16,topk:0.01"

static const char *const dtype_names[BENCH_NUM_TYPES] = {"float", "half", "bfloat16", "double"};

const char *bench_dtype_name(bench_dtype t) { return dtype_names[t]; }

size_t bench_dtype_size(bench_dtype t) { return t == BENCH_F64 ? 8 : t == BENCH_F32 ? 4
                                                                                    : 2; }

const char *bench_human_bytes(double b, char *buf, size_t len) {
  static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    u++;
  }
  if (u == 0 || b == (double)(long long)b)
    snprintf(buf, len, "%lld %s", (long long)b, unit[u]);
  else
    snprintf(buf, len, "%.*f %s", b < 10 ? 2 : 1, b, unit[u]);
  return buf;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: mpirun -n NRANKS squall-bench [options]\n"
          "Times squall's compressed all-reduce (or reduce-scatter) against the plain\n"
          "one, size by size, codec by codec, on the same buffers in one run.\n"
          "\n"
          "      --coll NAME         allreduce (default) or reducescatter: the collective\n"
          "                          measured, as nccl-tests' all_reduce_perf and\n"
          "                          reduce_scatter_perf (reducescatter: float only; the\n"
          "                          size is the send buffer per rank, rounded down to a\n"
          "                          multiple of 4 x ranks elements as nccl-tests does;\n"
          "                          count is the elements each rank receives)\n"
          "  -b, --minbytes SIZE     smallest message per rank (default 1M)\n"
          "  -e, --maxbytes SIZE     largest message per rank (default 64M)\n"
          "  -f, --stepfactor N      multiply the size by N each step (default 4)\n"
          "  -i, --stepbytes SIZE    or add SIZE each step\n"
          "  -n, --iters N           timed iterations per size and codec (default 20)\n"
          "  -w, --warmup_iters N    untimed iterations before them (default 5)\n"
          "  -d, --datatype LIST     element types, comma-separated (default float): float,\n"
          "                          half, bfloat16 (also float32, fp16, bf16, ...) or all\n"
          "                          (the three); each runs every size and codec\n"
          "  -o, --op OP             sum or avg (default sum)\n"
          "  -c, --check 0|1         measure the error against the exact sum (default 1)\n"
          "  -C, --compress LIST     codecs, comma-separated (default " DEFAULT_CODECS ");\n"
          "                          each is none, fp16, bf16, int8, int4, fp8 or topk:RATIO\n"
          "  -J, --json FILE         write the results as a JSON array\n"
          "      --plot FILE.png     plot effective bus bandwidth against size (gnuplot)\n"
          "      --backend NAME      auto, mpi or nccl (default auto; built: %s)\n"
          "  -S, --squall SPEC       more squall options, e.g. \"TOPK_VALUES=fp16 ZSTD=3\"\n"
          "                          (SQUALL_MIN_BYTES is 0 unless set here)\n"
          "      --seed N            seed of the generated gradients (default 1)\n"
          "      --data DIST         what the gradients look like: uniform (default), normal,\n"
          "                          lognormal, constant, tiny (near 1e-38), sparse (99%% zeros),\n"
          "                          nonfinite (1 in 4096 NaN or +-Inf)\n"
          "      --no-progress       no progress lines on stderr\n"
          "      --alternate N       N blocks of -n calls through squall and N of the plain\n"
          "                          all-reduce, interleaved on the same buffers; each row is\n"
          "                          the median block against the plain blocks' (none: squall\n"
          "                          with compression off, what squall adds to calls it passes\n"
          "                          through); no rel_err\n"
          "      --errors MODE       return (default) or fatal: how the mpi backend's failed\n"
          "                          all-reduces end (MPI_ERRORS_RETURN, or MPI's default\n"
          "                          MPI_ERRORS_ARE_FATAL, where squall keeps no backups)\n"
          "  -h, --help              this help\n"
          "nccl-tests' -g 1, -t 1, -m 1, -N 1, -a 3, -z 1, -G 0, -p 0, -y 0, -R 0, -r 0, -T 0 and\n"
          "-M 0 are accepted (they say what squall-bench does); other values say why not.\n"
          "SIZE: bytes with an optional K, M or G (also KiB, MiB, GiB or KB, MB, GB, any case;\n"
          "      powers of 1024), e.g. 64M.\n"
          "Exit status: 0 all rows within bounds and every file written; 1 a row WRONG, or the\n"
          "JSON or plot not written; 2 a bad command line; 3 a rank failed; 4 all within\n"
          "bounds but --plot found no gnuplot (a warning says so; table and JSON complete).\n",
          bench_backend_list());
}

/* "0" or "1": what nccl-tests' -C and -S (report options) take, where
 * squall-bench's -C and -S take codecs and squall options. */
static int is_0_or_1(const char *v) { return !strcmp(v, "0") || !strcmp(v, "1"); }

static int parse_int(const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) return -1;
  *out = x;
  return 0;
}

static int parse_u64(const char *v, uint64_t *out) {
  if (!isdigit((unsigned char)v[0])) return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10); /* decimal: "010" is ten, not octal eight */
  if (errno || *end) return -1;
  *out = x;
  return 0;
}

static int parse_dtype(const char *v, bench_dtype *t) {
  /* clang-format off */
  static const struct {
    const char *name;
    bench_dtype t;
  } names[] = {{"float", BENCH_F32},    {"float32", BENCH_F32}, {"fp32", BENCH_F32},
               {"f32", BENCH_F32},      {"half", BENCH_F16},    {"float16", BENCH_F16},
               {"fp16", BENCH_F16},     {"f16", BENCH_F16},     {"bfloat16", BENCH_BF16},
               {"bf16", BENCH_BF16},    {"double", BENCH_F64},  {"float64", BENCH_F64},
               {"fp64", BENCH_F64}};
  /* clang-format on */
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcasecmp(v, names[i].name)) {
      *t = names[i].t;
      return 0;
    }
  return -1;
}

/* nccl-tests' integer and 8-bit float types: named, so that the error
 * says why they are not run rather than that they are unknown. */
static int is_nccl_tests_other_type(const char *v) {
  static const char *const other[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "f8e4m3", "f8e5m2"};
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    if (!strcasecmp(v, other[i])) return 1;
  return 0;
}

#define DTYPES_ACCEPTED                                                                                  \
  "accepted is a comma-separated list of float (float32, fp32), half (float16, fp16), bfloat16 (bf16), " \
  "double (float64, fp64), or all (float, half and bfloat16)"

/* -d LIST: types separated by commas, each at most once, "all" for the
 * three squall compresses. */
static int parse_dtypes(const char *list, bench_options *opt, FILE *err) {
  opt->ndtypes = 0;
  if (!strcasecmp(list, "all")) {
    opt->dtypes[0] = BENCH_F32, opt->dtypes[1] = BENCH_F16, opt->dtypes[2] = BENCH_BF16;
    opt->ndtypes = 3;
    return 0;
  }
  const char *p = list;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
    bench_dtype t;
    if (len == 0) {
      if (err) fprintf(err, "squall-bench: -d '%s': empty type name in the list; " DTYPES_ACCEPTED "\n", list);
      return -1;
    }
    if (parse_dtype(name, &t) || len >= sizeof name) {
      if (err && is_nccl_tests_other_type(name))
        fprintf(err, "squall-bench: -d: type '%s' is not benchmarked: squall compresses float, half and bfloat16 "
                     "only (integer and 8-bit float types pass through unchanged, so there is nothing to "
                     "compare); " DTYPES_ACCEPTED "\n",
                name);
      else if (err)
        fprintf(err, "squall-bench: -d: type '%s' is unknown; " DTYPES_ACCEPTED "\n", name);
      return -1;
    }
    for (int i = 0; i < opt->ndtypes; i++)
      if (opt->dtypes[i] == t) {
        if (err) fprintf(err, "squall-bench: -d '%s': type '%s' is listed twice\n", list, bench_dtype_name(t));
        return -1;
      }
    opt->dtypes[opt->ndtypes++] = t; /* at most BENCH_MAX_TYPES: each type once */
    if (!comma) return 0;
    p = comma + 1;
  }
}

/* Splits LIST on commas and checks each codec with squall's own parser, so
 * that the accepted spellings are squall's. */
static int parse_codecs(const char *list, bench_options *opt, FILE *err) {
  opt->ncodecs = 0;
  const char *p = list;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == 0) {
      if (err) fprintf(err, "squall-bench: -C '%s': empty codec name in the list; accepted: a "
                            "comma-separated list of none, fp16, bf16, int8, int4, fp8, topk:RATIO\n",
                       list);
      return -1;
    }
    if (len >= BENCH_CODEC_LEN || opt->ncodecs == BENCH_MAX_CODECS) {
      if (err) fprintf(err, "squall-bench: -C '%s': %s; accepted: at most %d codecs of at most %d "
                            "characters\n",
                       list, len >= BENCH_CODEC_LEN ? "codec name too long" : "too many codecs", BENCH_MAX_CODECS, BENCH_CODEC_LEN - 1);
      return -1;
    }
    char name[BENCH_CODEC_LEN];
    memcpy(name, p, len);
    name[len] = 0;
    squallConfig_t cfg;
    squallConfigDefault(&cfg);
    if (squallConfigSet(&cfg, "SQUALL_COMPRESS", name) != squallSuccess) {
      if (err) fprintf(err, "squall-bench: -C: codec '%s' is invalid: %s%s\n", name, squallGetLastError(),
                       is_0_or_1(list)
                           ? " (nccl-tests' -C 0|1, --report_cputime, is not supported: here -C lists codecs)"
                           : "");
      return -1;
    }
    /* The canonical spelling, so that "TOPK:0.010" and "topk:0.01" match. */
    squallConfigCodecString(&cfg, name, sizeof name);
    for (int i = 0; i < opt->ncodecs; i++)
      if (!strcmp(opt->codecs[i], name)) {
        if (err) fprintf(err, "squall-bench: -C '%s': codec '%s' is listed twice\n", list, name);
        return -1;
      }
    strcpy(opt->codecs[opt->ncodecs++], name);
    if (!comma) return 0;
    p = comma + 1;
  }
}

/* nccl-tests options that squall-bench takes only at the value that says
 * what it does anyway (one GPU and one thread per rank, plain stream-ordered
 * calls), so that a command line copied from nccl-tests runs, or says why
 * not instead of "unknown option". */
typedef struct {
  int flag;
  const char *name; /* nccl-tests' long name */
  long accepted;
  const char *why; /* what squall-bench does instead */
} nccl_tests_option;

static const nccl_tests_option nccl_tests_options[] = {
    {'t', "nthreads", 1, "squall-bench runs one thread per MPI rank; start one rank per GPU instead"},
    {'g', "ngpus", 1, "squall-bench drives one GPU per MPI rank; start one rank per GPU instead"},
    {'m', "agg_iters", 1, "aggregated (grouped) calls pass through squall uncompressed, so there is "
                          "nothing to compare; each call is timed alone"},
    {'N', "run_cycles", 1, "squall-bench runs one cycle; run it again for another"},
    {'a', "average", 3, "squall-bench reports the slowest rank's median iteration (closest to nccl-tests' "
                        "-a 3, the slowest rank's mean)"},
    {'z', "blocking", 1, "squall-bench waits for each timed call to finish before the next (nccl-tests' -z 1)"},
    {'G', "cudagraph", 0, "CUDA graph launches are not benchmarked"},
    {'p', "parallel_init", 0, "there is one thread per rank, so nothing to initialise in parallel"},
    {'y', "stream_null", 0, "the calls run on a stream of their own"},
    {'R', "local_register", 0, "buffers are not registered with NCCL"},
    {'r', "root", 0, "neither an all-reduce nor a reduce-scatter has a root"},
    {'T', "timeout", 0, "squall-bench has no per-test timeout; bound the run from outside (timeout(1))"},
    {'M', "memory_report", 0, "squall-bench prints no memory report"},
};
#define NUM_NCCL_TESTS_OPTIONS (int)(sizeof nccl_tests_options / sizeof nccl_tests_options[0])

/* The entry for an nccl-tests flag, or NULL. */
static const nccl_tests_option *nccl_tests_option_of(int flag) {
  for (int i = 0; i < NUM_NCCL_TESTS_OPTIONS; i++)
    if (nccl_tests_options[i].flag == flag) return &nccl_tests_options[i];
  return NULL;
}

#define FAIL(...)                                        \
  do {                                                   \
    if (err) fprintf(err, "squall-bench: " __VA_ARGS__); \
    return 2;                                            \
  } while (0)

/* Every -S of the command line, joined by spaces (opt->squall_spec). */
static char squall_specs[2048];

int bench_parse_args(int argc, char **argv, bench_options *opt, FILE *out, FILE *err) {
  squall_specs[0] = '\0';
  enum { OPT_PLOT = 256,
         OPT_BACKEND,
         OPT_SEED,
         OPT_NO_PROGRESS,
         OPT_DATA,
         OPT_CPUTIME,
         OPT_ERRORS,
         OPT_ALTERNATE,
         OPT_COLL };
  /* clang-format off */
  static const struct option longopts[] = {
      {"minbytes", required_argument, 0, 'b'},     {"maxbytes", required_argument, 0, 'e'},
      {"stepfactor", required_argument, 0, 'f'},   {"stepbytes", required_argument, 0, 'i'},
      {"iters", required_argument, 0, 'n'},        {"warmup_iters", required_argument, 0, 'w'},
      {"datatype", required_argument, 0, 'd'},     {"op", required_argument, 0, 'o'},
      {"check", required_argument, 0, 'c'},        {"compress", required_argument, 0, 'C'},
      {"json", required_argument, 0, 'J'},         {"plot", required_argument, 0, OPT_PLOT},
      {"backend", required_argument, 0, OPT_BACKEND}, {"squall", required_argument, 0, 'S'},
      {"seed", required_argument, 0, OPT_SEED},    {"no-progress", no_argument, 0, OPT_NO_PROGRESS},
      {"data", required_argument, 0, OPT_DATA},    {"errors", required_argument, 0, OPT_ERRORS},
      {"alternate", required_argument, 0, OPT_ALTERNATE},
      {"coll", required_argument, 0, OPT_COLL},
      {"nthreads", required_argument, 0, 't'},     {"ngpus", required_argument, 0, 'g'},
      {"agg_iters", required_argument, 0, 'm'},    {"run_cycles", required_argument, 0, 'N'},
      {"average", required_argument, 0, 'a'},      {"blocking", required_argument, 0, 'z'},
      {"cudagraph", required_argument, 0, 'G'},    {"parallel_init", required_argument, 0, 'p'},
      {"stream_null", required_argument, 0, 'y'},  {"local_register", required_argument, 0, 'R'},
      {"root", required_argument, 0, 'r'},         {"timeout", required_argument, 0, 'T'},
      {"memory_report", required_argument, 0, 'M'}, {"report_cputime", required_argument, 0, OPT_CPUTIME},
      {"help", no_argument, 0, 'h'},               {0, 0, 0, 0}};
  /* clang-format on */
  memset(opt, 0, sizeof *opt);
  opt->min_bytes = 1u << 20;
  opt->max_bytes = 64u << 20;
  opt->step_factor = 4;
  opt->iters = 20;
  opt->warmup = 5;
  opt->ndtypes = 1;
  opt->dtypes[0] = BENCH_F32;
  opt->op = BENCH_SUM;
  opt->check = 1;
  opt->backend = "auto";
  opt->seed = 1;
  opt->progress = 1;
  parse_codecs(DEFAULT_CODECS, opt, err);
  int saw_f = 0, saw_i = 0;

  opterr = 0; /* our messages, not getopt's */
  optind = 1;
  int c;
  long x;
  while ((c = getopt_long(argc, argv, ":b:e:f:i:n:w:d:o:c:C:J:S:ht:g:m:N:a:z:G:p:y:R:r:T:M:", longopts, NULL)) != -1) {
    const char *v = optarg;
    switch (c) {
    case 'b':
    case 'e': {
      size_t s;
      if (squall__parse_size(v, &s) || s == 0)
        FAIL("-%c '%s' is not a size: accepted is %s, greater than 0\n", c, v, SQUALL_SIZE_SPELLINGS);
      *(c == 'b' ? &opt->min_bytes : &opt->max_bytes) = s;
      break;
    }
    case 'f':
      if (parse_int(v, 2, 1024, &x))
        FAIL("-f '%s' is invalid: accepted is an integer factor from 2 to 1024\n", v);
      opt->step_factor = (int)x;
      saw_f = 1;
      break;
    case 'i':
      if (squall__parse_size(v, &opt->step_bytes) || opt->step_bytes == 0)
        FAIL("-i '%s' is not a size: accepted is %s, greater than 0\n", v, SQUALL_SIZE_SPELLINGS);
      saw_i = 1;
      break;
    case 'n':
      if (parse_int(v, 1, 1000000, &x))
        FAIL("-n '%s' is invalid: accepted is an iteration count from 1 to 1000000\n", v);
      opt->iters = (int)x;
      break;
    case 'w':
      if (parse_int(v, 0, 1000000, &x))
        FAIL("-w '%s' is invalid: accepted is a warm-up count from 0 to 1000000\n", v);
      opt->warmup = (int)x;
      break;
    case 'd':
      if (parse_dtypes(v, opt, err)) return 2;
      break;
    case 'o':
      if (!strcasecmp(v, "sum")) opt->op = BENCH_SUM;
      else if (!strcasecmp(v, "avg")) opt->op = BENCH_AVG;
      else if (!strcasecmp(v, "prod") || !strcasecmp(v, "min") || !strcasecmp(v, "max") ||
               !strcasecmp(v, "all"))
        FAIL("-o '%s' is not benchmarked: squall compresses sum and avg only (other ops pass "
             "through unchanged, so there is nothing to compare); accepted are sum and avg\n",
             v);
      else
        FAIL("-o '%s' is invalid: accepted are sum and avg\n", v);
      break;
    case 'c':
      if (parse_int(v, 0, 1, &x)) FAIL("-c '%s' is invalid: accepted are 0 and 1\n", v);
      opt->check = (int)x;
      break;
    case 'C':
      if (parse_codecs(v, opt, err)) return 2;
      break;
    case 'J': opt->json_path = v; break;
    case OPT_PLOT: opt->plot_path = v; break;
    case OPT_BACKEND:
      if (strcasecmp(v, "auto") && strcasecmp(v, "mpi") && strcasecmp(v, "nccl"))
        FAIL("--backend '%s' is invalid: accepted are auto, mpi and nccl\n", v);
      opt->backend = v;
      break;
    case 'S': {
      squallConfig_t cfg;
      squallConfigDefault(&cfg);
      if (squallConfigParse(&cfg, v) != squallSuccess)
        FAIL("-S '%s' is invalid: %s%s\n", v, squallGetLastError(),
             is_0_or_1(v)
                 ? " (nccl-tests' -S 0|1, --report_timestamps, is not supported: here -S takes squall options)"
                 : "");
      if (cfg.codec != squallCodecNone)
        FAIL("-S '%s' sets SQUALL_COMPRESS: choose codecs with -C instead\n", v);
      /* repeated -S add up, later items overriding earlier ones (as
       * squallConfigParse reads "A=1 A=2") */
      size_t used = strlen(squall_specs);
      int w = snprintf(squall_specs + used, sizeof squall_specs - used, "%s%s", used ? " " : "", v);
      if (w < 0 || (size_t)w >= sizeof squall_specs - used)
        FAIL("-S: the options add up to more than %zu bytes\n", sizeof squall_specs - 1);
      opt->squall_spec = squall_specs;
      break;
    }
    case OPT_SEED:
      if (parse_u64(v, &opt->seed))
        FAIL("--seed '%s' is invalid: accepted is a non-negative integer\n", v);
      break;
    case OPT_NO_PROGRESS: opt->progress = 0; break;
    case OPT_ERRORS:
      if (strcmp(v, "return") && strcmp(v, "fatal"))
        FAIL("--errors '%s' is invalid: accepted are return and fatal\n", v);
      opt->errors_fatal = !strcmp(v, "fatal");
      break;
    case OPT_ALTERNATE:
      if (parse_int(v, 2, 10000, &x))
        FAIL("--alternate '%s' is invalid: accepted is a block count from 2 to 10000\n", v);
      opt->alternate = (int)x;
      break;
    case OPT_COLL:
      if (bench_coll_parse(v, &opt->coll))
        FAIL("--coll '%s' is invalid: accepted are allreduce and reducescatter\n", v);
      break;
    case OPT_DATA:
      if (bench_dist_parse(v, &opt->data))
        FAIL("--data '%s' is invalid: accepted are uniform, normal, lognormal, constant, tiny, "
             "sparse and nonfinite\n",
             v);
      break;
    case OPT_CPUTIME:
      FAIL("--report_cputime (nccl-tests' -C) is not supported: squall-bench reports wall time, and the "
           "codec's own time per call in the codec column; here -C lists codecs\n");
    case 'h':
      if (out) usage(out);
      return 1;
    case ':':
      FAIL("option '%s' needs a value (see squall-bench -h)\n", argv[optind - 1]);
    default: {
      const nccl_tests_option *nt = nccl_tests_option_of(c); /* the table's letters, in getopt's string */
      if (nt) {
        if (parse_int(v, 0, LONG_MAX, &x))
          FAIL("-%c (nccl-tests' --%s) '%s' is invalid: accepted is %ld only\n", c, nt->name, v, nt->accepted);
        if (x != nt->accepted)
          FAIL("-%c %ld (nccl-tests' --%s) is not supported: %s; accepted is %ld only\n", c, x, nt->name,
               nt->why, nt->accepted);
        break;
      }
      if (optopt)
        FAIL("unknown option '-%c' (see squall-bench -h)\n", optopt);
      FAIL("unknown option '%s' (see squall-bench -h)\n", argv[optind - 1]);
    }
    }
  }
  if (optind < argc)
    FAIL("unexpected argument '%s': squall-bench takes options only (see squall-bench -h)\n",
         argv[optind]);
  if (saw_f && saw_i)
    FAIL("-f and -i both given: choose a step factor (-f) or a step size (-i)\n");
  if (saw_i) opt->step_factor = 0;
  if (opt->min_bytes > opt->max_bytes)
    FAIL("-b %zu is larger than -e %zu: the smallest size must not exceed the largest\n",
         opt->min_bytes, opt->max_bytes);
  return 0;
}

int bench_sizes(const bench_options *o, size_t elsize, size_t *sizes, int max) {
  int n = 0;
  size_t s = o->min_bytes;
  for (;;) {
    size_t r = s / elsize * elsize; /* whole elements */
    if (r == 0) r = elsize;
    if (n == 0 || r != sizes[n - 1]) {
      if (n == max) return -1;
      sizes[n++] = r;
    }
    size_t next = o->step_factor ? s * (size_t)o->step_factor : s + o->step_bytes;
    if (next <= s || next > o->max_bytes) break;
    s = next;
  }
  return n;
}

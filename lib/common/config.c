/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * config.c - the configuration table. One row per environment variable:
 * name, struct member, default, what is accepted, what it means, a parser,
 * a printer and a range check.
 * The same rows drive parsing, the range checks of squallSetConfig() and
 * squallConfigOption(), from which `squall-info -c` and squall(7)'s
 * ENVIRONMENT are printed.
 */
#include "common/internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <ctype.h>

extern char **environ; /* POSIX: the process's environment */

#include "common/size.h"

typedef int (*parse_fn)(squallConfig_t *cfg, const char *value);
typedef void (*print_fn)(const squallConfig_t *cfg, char *buf, size_t len);
/* 0 when the field(s) of cfg that the option sets hold a value the option
 * could have parsed; else -1 with the field, its value and the range in why. */
typedef int (*check_fn)(const squallConfig_t *cfg, char *why, size_t len);

typedef struct {
  const char *name;     /* environment variable */
  const char *field;    /* squallConfig_t member(s) it sets */
  const char *defval;   /* default, as text */
  const char *accepted; /* for error messages and docs */
  const char *doc;
  parse_fn parse;       /* 0 on success */
  print_fn print;       /* never reads out of bounds, even for a field out of range */
  check_fn check;
} option_t;

/* ------------------------------------------------------------ parsers
 * Exactly the documented spellings: no leading blanks, signs, hex or
 * trailing text, which strtol and strtod would let through. */

/* Decimal digits only, within [lo, hi] (hi well below LLONG_MAX / 10, so
 * that stopping once past hi also rules out overflow). */
static int parse_uint(const char *v, long lo, long hi, long *out) {
  long long x = 0;
  if (*v < '0' || *v > '9') return -1;
  for (; *v >= '0' && *v <= '9'; v++) {
    x = x * 10 + (*v - '0');
    if (x > hi) return -1;
  }
  if (*v || x < lo) return -1;
  *out = (long)x;
  return 0;
}

/* A decimal fraction: digits with an optional point and an optional
 * exponent ("0.01", ".25", "1e-3"); no sign, blank, hex, inf or nan. The
 * text is checked here and converted by strtod, which must consume all of
 * it (it does not under a locale whose decimal point is not '.'). */
static int parse_ratio(const char *v, double *out) {
  const char *p = v;
  int digits = 0;
  while (*p >= '0' && *p <= '9') p++, digits++;
  if (*p == '.') {
    p++;
    while (*p >= '0' && *p <= '9') p++, digits++;
  }
  if (!digits) return -1;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (*p < '0' || *p > '9') return -1;
    while (*p >= '0' && *p <= '9') p++;
  }
  if (*p) return -1;
  char *end;
  errno = 0;
  fenv_t env;
  squall__round_nearest_begin(&env);
  double r = strtod(v, &end);
  squall__round_nearest_end(&env);
  /* a subnormal result sets ERANGE too, but is the value written (a
   * ratio of 1e-320 is still above 0); one that underflows to 0 is not */
  if ((errno && !(errno == ERANGE && r != 0.0 && isfinite(r))) || end != p) return -1;
  *out = r;
  return 0;
}

/* The shortest %g spelling of v that reads back as v: what a user would
 * write for 0.01, and every digit for 0.0123456789, so that what
 * squall-info and squallConfigCodecString print, set again, is the same
 * configuration (%g's 6 digits made another ratio). */
static void print_double(char *b, size_t n, double v) {
  fenv_t env;
  squall__round_nearest_begin(&env);
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(b, n, "%.*g", prec, v);
    if (strtod(b, NULL) == v) break;
  }
  squall__round_nearest_end(&env);
}

static int parse_compress(squallConfig_t *c, const char *v) {
  if (!strcasecmp(v, "none")) { c->codec = squallCodecNone; return 0; }
  if (!strcasecmp(v, "fp16")) { c->codec = squallCodecFp16; return 0; }
  if (!strcasecmp(v, "bf16")) { c->codec = squallCodecBf16; return 0; }
  if (!strcasecmp(v, "int8")) { c->codec = squallCodecInt8; return 0; }
  if (!strcasecmp(v, "int4")) { c->codec = squallCodecInt4; return 0; }
  if (!strcasecmp(v, "fp8")) { c->codec = squallCodecFp8; return 0; }
  if (!strncasecmp(v, "topk:", 5)) {
    double r;
    if (parse_ratio(v + 5, &r) || !(r > 0.0 && r <= 1.0)) return -1;
    c->codec = squallCodecTopk;
    c->topkRatio = r;
    return 0;
  }
  return -1;
}

static int parse_values(squallConfig_t *c, const char *v) {
  if (!strcasecmp(v, "fp32")) { c->topkValues = squallValueFp32; return 0; }
  if (!strcasecmp(v, "fp16")) { c->topkValues = squallValueFp16; return 0; }
  return -1;
}

#define MAX_COUNT 1000000000L /* SQUALL_WARMUP, SQUALL_MIN_RANKS */

/* An integer option: its parser and its range check, from one range. */
#define INT_OPTION(fn, member, lo, hi)                                              \
  static int parse_##fn(squallConfig_t *c, const char *v) {                       \
    long x;                                                                       \
    if (parse_uint(v, (lo), (hi), &x)) return -1;                                 \
    c->member = (int)x;                                                           \
    return 0;                                                                     \
  }                                                                               \
  static int check_##fn(const squallConfig_t *c, char *why, size_t n) {           \
    if (c->member >= (lo) && c->member <= (hi)) return 0;                         \
    snprintf(why, n, #member "=%d is outside [%ld, %ld]", c->member, (long)(lo), (long)(hi)); \
    return -1;                                                                    \
  }                                                                               \
  static void print_##fn(const squallConfig_t *c, char *b, size_t n) { snprintf(b, n, "%d", c->member); }

INT_OPTION(ef, errorFeedback, 0, 1)
INT_OPTION(zstd, zstdLevel, 0, 19)
INT_OPTION(warmup, warmup, 0, MAX_COUNT)
INT_OPTION(min_ranks, minRanks, 1, MAX_COUNT)

static int parse_min_bytes(squallConfig_t *c, const char *v) { return squall__parse_size(v, &c->minBytes); }
static int parse_ef_max(squallConfig_t *c, const char *v) { return squall__parse_size(v, &c->efMaxBytes); }

static int parse_debug(squallConfig_t *c, const char *v) {
  if (!strcasecmp(v, "WARN")) c->debug = squallLogWarn;
  else if (!strcasecmp(v, "INFO")) c->debug = squallLogInfo;
  else if (!strcasecmp(v, "TRACE")) c->debug = squallLogTrace;
  else return -1;
  return 0;
}

static int parse_stats(squallConfig_t *c, const char *v) {
  if (strlen(v) >= sizeof c->statsPath) return -1;
  strcpy(c->statsPath, v);
  return 0;
}

/* ------------------------------------------------------- range checks
 * For squallSetConfig, which gets a whole structure rather than text. */
static int check_compress(const squallConfig_t *c, char *why, size_t n) {
  if ((int)c->codec < squallCodecNone || (int)c->codec > squallCodecFp8) {
    snprintf(why, n, "codec=%d is not a squallCodec_t (%d to %d)", (int)c->codec, squallCodecNone,
             squallCodecFp8);
    return -1;
  }
  /* Checked whatever the codec: a later SQUALL_COMPRESS=topk keeps it. */
  if (!(c->topkRatio > 0.0 && c->topkRatio <= 1.0)) {
    snprintf(why, n, "topkRatio=%g is outside (0, 1]", c->topkRatio);
    return -1;
  }
  return 0;
}

static int check_values(const squallConfig_t *c, char *why, size_t n) {
  if (c->topkValues == squallValueFp32 || c->topkValues == squallValueFp16) return 0;
  snprintf(why, n, "topkValues=%d is not a squallValueType_t (%d or %d)", (int)c->topkValues,
           squallValueFp32, squallValueFp16);
  return -1;
}

static int check_size(const squallConfig_t *c, char *why, size_t n) { (void)c, (void)why, (void)n; return 0; }

static int check_debug(const squallConfig_t *c, char *why, size_t n) {
  if ((int)c->debug >= squallLogWarn && (int)c->debug <= squallLogTrace) return 0;
  snprintf(why, n, "debug=%d is not a squallLogLevel_t (%d to %d)", (int)c->debug, squallLogWarn,
           squallLogTrace);
  return -1;
}

static int check_stats(const squallConfig_t *c, char *why, size_t n) {
  if (memchr(c->statsPath, 0, sizeof c->statsPath) != NULL) return 0;
  snprintf(why, n, "statsPath is not terminated within its %zu bytes", sizeof c->statsPath);
  return -1;
}

/* ----------------------------------------------------------- printers */
static void print_compress(const squallConfig_t *c, char *b, size_t n) {
  char why[128];
  if (check_compress(c, why, sizeof why)) snprintf(b, n, "invalid (%s)", why);
  else squallConfigCodecString(c, b, n);
}
static void print_values(const squallConfig_t *c, char *b, size_t n) {
  char why[128];
  if (check_values(c, why, sizeof why)) snprintf(b, n, "invalid (%s)", why);
  else snprintf(b, n, "%s", c->topkValues == squallValueFp16 ? "fp16" : "fp32");
}
/* The shortest spelling that reads back as the same size. */
static void print_size(size_t v, char *b, size_t n) {
  if (v && v % (1u << 30) == 0) snprintf(b, n, "%zuG", v >> 30);
  else if (v && v % (1u << 20) == 0) snprintf(b, n, "%zuM", v >> 20);
  else if (v && v % (1u << 10) == 0) snprintf(b, n, "%zuK", v >> 10);
  else snprintf(b, n, "%zu", v);
}
static void print_min_bytes(const squallConfig_t *c, char *b, size_t n) { print_size(c->minBytes, b, n); }
static void print_ef_max(const squallConfig_t *c, char *b, size_t n) { print_size(c->efMaxBytes, b, n); }
static void print_debug(const squallConfig_t *c, char *b, size_t n) {
  static const char *names[] = {"WARN", "INFO", "TRACE"};
  char why[128];
  if (check_debug(c, why, sizeof why)) snprintf(b, n, "invalid (%s)", why);
  else snprintf(b, n, "%s", names[c->debug]);
}
static void print_stats(const squallConfig_t *c, char *b, size_t n) {
  snprintf(b, n, "%.*s", (int)strnlen(c->statsPath, sizeof c->statsPath), c->statsPath);
}

/* ------------------------------------------ bucket, half accumulation */
#define SQ_BUCKET_MIN 8
#define SQ_BUCKET_MAX (1L << 20)
static int parse_bucket(squallConfig_t *c, const char *v) {
  long x;
  if (parse_uint(v, SQ_BUCKET_MIN, SQ_BUCKET_MAX, &x) || x % 8) return -1;
  c->bucket = (size_t)x;
  return 0;
}
static void print_bucket(const squallConfig_t *c, char *b, size_t n) { snprintf(b, n, "%zu", c->bucket); }
static int parse_half_accum(squallConfig_t *c, const char *v) {
  if (!strcasecmp(v, "fp32")) { c->halfAccum = squallHalfAccumFp32; return 0; }
  if (!strcasecmp(v, "half")) { c->halfAccum = squallHalfAccumHalf; return 0; }
  return -1;
}
static void print_half_accum(const squallConfig_t *c, char *b, size_t n) {
  snprintf(b, n, "%s", c->halfAccum == squallHalfAccumHalf ? "half" : "fp32");
}
static int check_bucket(const squallConfig_t *c, char *why, size_t n) {
  if (c->bucket >= SQ_BUCKET_MIN && c->bucket <= (size_t)SQ_BUCKET_MAX && c->bucket % 8 == 0) return 0;
  snprintf(why, n, "bucket=%zu is not a multiple of 8 in [%d, %ld]", c->bucket, SQ_BUCKET_MIN, SQ_BUCKET_MAX);
  return -1;
}
static int check_half_accum(const squallConfig_t *c, char *why, size_t n) {
  if (c->halfAccum == squallHalfAccumFp32 || c->halfAccum == squallHalfAccumHalf) return 0;
  snprintf(why, n, "halfAccum=%d is not a squallHalfAccum_t", (int)c->halfAccum);
  return -1;
}

/* --------------------------------------------- two-level all-reduce */
static int parse_hierarchy(squallConfig_t *c, const char *v) {
  if (!strcasecmp(v, "auto")) c->hierarchy = squallHierarchyAuto;
  else if (!strcasecmp(v, "flat")) c->hierarchy = squallHierarchyFlat;
  else return -1;
  return 0;
}
static int check_hierarchy(const squallConfig_t *c, char *why, size_t n) {
  if (c->hierarchy == squallHierarchyAuto || c->hierarchy == squallHierarchyFlat) return 0;
  snprintf(why, n, "hierarchy=%d is not a squallHierarchy_t (%d or %d)", (int)c->hierarchy,
           squallHierarchyAuto, squallHierarchyFlat);
  return -1;
}
static void print_hierarchy(const squallConfig_t *c, char *b, size_t n) {
  char why[128];
  if (check_hierarchy(c, why, sizeof why)) snprintf(b, n, "invalid (%s)", why);
  else snprintf(b, n, "%s", c->hierarchy == squallHierarchyFlat ? "flat" : "auto");
}
INT_OPTION(ranks_per_node, ranksPerNode, 0, MAX_COUNT)

/* ----------------------------------------- pipelining, the cost model */
static int parse_chunk(squallConfig_t *c, const char *v) { return squall__parse_size(v, &c->chunkBytes); }
static void print_chunk(const squallConfig_t *c, char *b, size_t n) { print_size(c->chunkBytes, b, n); }
static int parse_cost_model(squallConfig_t *c, const char *v) {
  if (!strcasecmp(v, "on")) c->costModel = 1;
  else if (!strcasecmp(v, "off")) c->costModel = 0;
  else return -1;
  return 0;
}
static void print_cost_model(const squallConfig_t *c, char *b, size_t n) {
  snprintf(b, n, "%s", c->costModel ? "on" : "off");
}
static int check_cost_model(const squallConfig_t *c, char *why, size_t n) {
  if (c->costModel == 0 || c->costModel == 1) return 0;
  snprintf(why, n, "costModel=%d is not 0 or 1", c->costModel);
  return -1;
}
#define SQ_LINK_GBPS_MAX 100000.0 /* 100 Tbit/s: anything above is a typo */
#define SQ_LINK_GBPS_MIN 0.001    /* 1 Mbit/s: below, predicted times leave int64 nanoseconds */
static int parse_link_gbps(squallConfig_t *c, const char *v) {
  double x;
  if (!strcasecmp(v, "auto")) x = 0;
  else if (parse_ratio(v, &x) || !(x == 0 || (x >= SQ_LINK_GBPS_MIN && x <= SQ_LINK_GBPS_MAX))) return -1;
  c->linkGbps = x;
  return 0;
}
static void print_link_gbps(const squallConfig_t *c, char *b, size_t n) {
  if (c->linkGbps == 0) snprintf(b, n, "auto");
  else print_double(b, n, c->linkGbps);
}
static int check_link_gbps(const squallConfig_t *c, char *why, size_t n) {
  if (c->linkGbps == 0 || (c->linkGbps >= SQ_LINK_GBPS_MIN && c->linkGbps <= SQ_LINK_GBPS_MAX)) return 0;
  snprintf(why, n, "linkGbps=%g is neither 0 nor in [%g, %g]", c->linkGbps, SQ_LINK_GBPS_MIN, SQ_LINK_GBPS_MAX);
  return -1;
}

static const option_t options[] = {
    {"SQUALL_COMPRESS", "codec, topkRatio", "none", "none, fp16, bf16, int8, int4, fp8 or topk:<ratio> with 0 < ratio <= 1",
     "Codec for eligible all-reduces: none passes every call through; fp16 and bf16 scale and "
     "round to 16 bits and all-reduce those; int8, int4 and fp8 (e4m3) round each bucket of "
     "SQUALL_BUCKET elements under its own power-of-two scale and run a two-phase all-reduce "
     "(exchange, sum in fp32 in rank order, re-encode, all-gather); topk:<ratio> sends the "
     "ceil(ratio*count) entries of largest magnitude and all-gathers them.",
     parse_compress, print_compress, check_compress},
    {"SQUALL_TOPK_VALUES", "topkValues", "fp32", "fp32 or fp16",
     "Precision of the values top-k sends; fp16 rounding error stays in the residual.",
     parse_values, print_values, check_values},
    {"SQUALL_EF", "errorFeedback", "1", "0 or 1",
     "Error feedback: keep what was not sent in a per-tensor residual and add it to the next call.",
     parse_ef, print_ef, check_ef},
    {"SQUALL_MIN_BYTES", "minBytes", "1M", SQUALL_SIZE_SPELLINGS,
     "Calls smaller than this pass through.", parse_min_bytes, print_min_bytes, check_size},
    {"SQUALL_ZSTD", "zstdLevel", "1", "an integer from 0 to 19",
     "zstd level of the top-k lossless stage on the MPI transport (index gaps and values as byte "
     "planes); 0 turns it off. With the cost model on, calls also try raw slots and keep "
     "whichever whole calls of the size ran faster (raw wins on fast links).",
     parse_zstd, print_zstd, check_zstd},
    {"SQUALL_EF_MAX_BYTES", "efMaxBytes", "0", SQUALL_SIZE_SPELLINGS "; 0 means unlimited",
     "Memory cap for residuals; tensors seen after the cap is reached run without error feedback "
     "(warned once).",
     parse_ef_max, print_ef_max, check_size},
    {"SQUALL_WARMUP", "warmup", "0", "a non-negative integer (at most 1000000000)",
     "The first n eligible calls of each tensor shape (element count and type) go dense "
     "(uncompressed), as Deep Gradient Compression warms up.",
     parse_warmup, print_warmup, check_warmup},
    {"SQUALL_MIN_RANKS", "minRanks", "2", "a positive integer (at most 1000000000)",
     "Communicators with fewer ranks pass through. 1 runs the whole compressed path on a single "
     "rank, which proves the device path on a machine with one GPU.",
     parse_min_ranks, print_min_ranks, check_min_ranks},
    {"SQUALL_DEBUG", "debug", "WARN", "WARN, INFO or TRACE",
     "Logging to standard error: INFO logs every setting at start, one line whenever the path of a size "
     "class of calls changes (with its reason), and a summary per communicator. At any level, rank 0 says "
     "at exit when less than half of the bytes squall could have compressed were, and why.",
     parse_debug, print_debug, check_debug},
    {"SQUALL_STATS", "statsPath", "", "a file path of at most 511 bytes; every %r is replaced by the rank, else .<rank> is appended",
     "Write the statistics counters as JSON at exit, one file per process.",
     parse_stats, print_stats, check_stats},
    {"SQUALL_BUCKET", "bucket", "512", "a multiple of 8 from 8 to 1048576",
     "Elements that share one scale in the int8, int4 and fp8 codecs (2 bytes of scale and flags "
     "per bucket).",
     parse_bucket, print_bucket, check_bucket},
    {"SQUALL_HALF_ACCUM", "halfAccum", "fp32", "fp32 or half",
     "Where fp16 and bf16 codes are summed: fp32 runs the two-phase all-reduce (each rank sums "
     "its shard in fp32, so the error does not grow with the rank count); half all-reduces the "
     "16-bit codes, rounding after every addition (those roundings belong to no rank's residual: "
     "they are neither sent nor kept).",
     parse_half_accum, print_half_accum, check_half_accum},
    {"SQUALL_HIERARCHY", "hierarchy", "auto", "auto or flat",
     "auto: where there are at least 2 nodes with the same number (at least 2) of ranks each, sum "
     "inside each node uncompressed (reduce-scatter), compress only across nodes (one shard per "
     "local rank), then all-gather inside the node; otherwise, and with flat, every rank is its "
     "own node.",
     parse_hierarchy, print_hierarchy, check_hierarchy},
    {"SQUALL_RANKS_PER_NODE", "ranksPerNode", "0", "a non-negative integer (at most 1000000000)",
     "0 finds the nodes (MPI's shared-memory split; hostname and boot id with NCCL). R > 0 makes "
     "every R consecutive ranks a node, which runs the two-level path on one host (tests).",
     parse_ranks_per_node, print_ranks_per_node, check_ranks_per_node},
    {"SQUALL_CHUNK_BYTES", "chunkBytes", "4M", SQUALL_SIZE_SPELLINGS "; 0 means one chunk",
     "The two-phase all-reduce (int8, int4, fp8; fp16 and bf16 summed in fp32) on host memory "
     "splits a call into chunks of about this many fp32 bytes and overlaps one chunk's encoding "
     "and decoding with the next chunk's exchange (MPI non-blocking collectives). Every element "
     "is coded as without chunks: the result is bit for bit the same.",
     parse_chunk, print_chunk, check_size},
    {"SQUALL_COST_MODEL", "costModel", "on", "on or off",
     "on: on host memory, each rank predicts the time of the plain and of the compressed "
     "all-reduce from its measured codec speed and the link's speed (or from whole calls of the "
     "same size timed both ways); the call passes through (reason would_not_pay) unless the "
     "largest compressed prediction over the ranks is below the largest plain one. Where two "
     "levels apply, the same timings choose between two levels and flat. On device memory, "
     "where every rank is on one node, calls pass through (would_not_pay). off: every eligible "
     "call is compressed.",
     parse_cost_model, print_cost_model, check_cost_model},
    {"SQUALL_LINK_GBPS", "linkGbps", "auto", "auto (or 0), or a decimal number of Gbit/s from 0.001 to 100000",
     "The link speed the cost model assumes per rank; auto measures it from the all-reduces' own "
     "times (plain calls, and the exchanges of compressed calls).",
     parse_link_gbps, print_link_gbps, check_link_gbps},
};

static const option_t *find_option(const char *name) {
  const char *bare = strncasecmp(name, "SQUALL_", 7) ? name : name + 7;
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++)
    if (!strcasecmp(bare, options[i].name + 7)) return &options[i];
  return NULL;
}

squallResult_t squallConfigDefault(squallConfig_t *config) {
  SQ_RETURN_ERROR_IF(config == NULL, squallInvalidArgument, "squallConfigDefault: config is NULL");
  memset(config, 0, sizeof *config);
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++)
    if (options[i].parse(config, options[i].defval) != 0) return squallInternalError;
  config->topkRatio = 0.01; /* used when a codec string says topk without a later ratio */
  return squallSuccess;
}

squallResult_t squallConfigSet(squallConfig_t *config, const char *name, const char *value) {
  SQ_RETURN_ERROR_IF(config == NULL || name == NULL || value == NULL, squallInvalidArgument,
                     "squallConfigSet: config, name and value must not be NULL");
  const option_t *o = find_option(name);
  if (o == NULL) {
    char names[512] = "";
    for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
      strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
      strncat(names, options[i].name, sizeof names - strlen(names) - 1);
    }
    return squall__fail(squallInvalidArgument, "unknown squall option '%.100s%s' (known: %s)", name,
                        strlen(name) > 100 ? "..." : "", names);
  }
  squallConfig_t tmp = *config;
  /* At most 100 characters of the value are echoed, so that what is
   * accepted always fits in the message (a long SQUALL_STATS path did not). */
  SQ_RETURN_ERROR_IF(o->parse(&tmp, value) != 0, squallInvalidArgument,
                     "%s='%.100s%s' is invalid: accepted values are %s", o->name, value,
                     strlen(value) > 100 ? "..." : "", o->accepted);
  *config = tmp;
  return squallSuccess;
}

squallResult_t squallConfigParse(squallConfig_t *config, const char *spec) {
  SQ_RETURN_ERROR_IF(config == NULL || spec == NULL, squallInvalidArgument,
                     "squallConfigParse: config and spec must not be NULL");
  squallConfig_t tmp = *config;
  const char *p = spec;
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == ';') p++;
    if (!*p) break;
    const char *end = p;
    while (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != ';') end++;
    char item[640];
    size_t len = (size_t)(end - p);
    SQ_RETURN_ERROR_IF(len >= sizeof item, squallInvalidArgument,
                       "configuration item '%.40s...' is too long", p);
    memcpy(item, p, len);
    item[len] = 0;
    char *eq = strchr(item, '=');
    SQ_RETURN_ERROR_IF(eq == NULL, squallInvalidArgument,
                       "configuration item '%s' is not NAME=VALUE (e.g. SQUALL_COMPRESS=topk:0.01)", item);
    *eq = 0;
    SQ_FORWARD_IF_ERROR(squallConfigSet(&tmp, item, eq + 1));
    p = end;
  }
  *config = tmp;
  return squallSuccess;
}

/* SQUALL_ names that squall's own tools and scripts read (squall-run,
 * quickstart.sh, ethernet.sh, cluster.sh, .ci/run, the test, training and
 * GPU scripts): not options, not typos. A prefix ends in '_'. */
static const char *const tool_names[] = {
    "SQUALL_PRELOAD_", "SQUALL_BENCH_",          "SQUALL_ETHERNET_", "SQUALL_CLUSTER_",   "SQUALL_CLUSTER",
    "SQUALL_GPU_",     "SQUALL_TEST_",           "SQUALL_TRAIN_",    "SQUALL_CI_",        "SQUALL_RUN_MPI_",
    "SQUALL_BUILDDIR", "SQUALL_SRCDIR",          "SQUALL_LINK",      "SQUALL_RANKS",      "SQUALL_CFLAGS",
    "SQUALL_CONFIGURE_FLAGS", "SQUALL_LOG_COMPILER", "SQUALL_SH_LOG_COMPILER"};

static int is_tool_name(const char *name, size_t len) {
  for (size_t i = 0; i < SQ_ARRAY_SIZE(tool_names); i++) {
    size_t t = strlen(tool_names[i]);
    if (tool_names[i][t - 1] == '_' ? len >= t && !strncmp(name, tool_names[i], t)
                                    : len == t && !strncmp(name, tool_names[i], t))
      return 1;
  }
  return 0;
}

/* Edit distance of a[0..la) and b, up to 3 (more is "far"). */
static int distance(const char *a, size_t la, const char *b) {
  size_t lb = strlen(b);
  if (la > 63 || lb > 63) return 3;
  int d[64], prev;
  for (size_t j = 0; j <= lb; j++) d[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    prev = d[0];
    d[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int cur = d[j], sub = prev + (toupper((unsigned char)a[i - 1]) != b[j - 1]);
      d[j] = d[j] + 1 < d[j - 1] + 1 ? d[j] + 1 : d[j - 1] + 1;
      if (sub < d[j]) d[j] = sub;
      prev = cur;
    }
  }
  return d[lb] < 3 ? d[lb] : 3;
}

/* Names a user may guess from other libraries' words, too far from the
 * option by edit distance to be found as a typo; compared ignoring case. */
static const struct {
  const char *guess, *meant;
} guesses[] = {
    {"SQUALL_CODEC", "SQUALL_COMPRESS"},          {"SQUALL_COMPRESSION", "SQUALL_COMPRESS"},
    {"SQUALL_COMPRESSOR", "SQUALL_COMPRESS"},     {"SQUALL_ALGO", "SQUALL_COMPRESS"},
    {"SQUALL_METHOD", "SQUALL_COMPRESS"},         {"SQUALL_MODE", "SQUALL_COMPRESS"},
    {"SQUALL_ENABLE", "SQUALL_COMPRESS"},         {"SQUALL_DISABLE", "SQUALL_COMPRESS"},
    {"SQUALL_TOPK", "SQUALL_COMPRESS=topk:<ratio>"}, {"SQUALL_TOPK_RATIO", "SQUALL_COMPRESS=topk:<ratio>"},
    {"SQUALL_RATIO", "SQUALL_COMPRESS=topk:<ratio>"}, {"SQUALL_DENSITY", "SQUALL_COMPRESS=topk:<ratio>"},
    {"SQUALL_SPARSITY", "SQUALL_COMPRESS=topk:<ratio>"}, {"SQUALL_K", "SQUALL_COMPRESS=topk:<ratio>"},
    {"SQUALL_FP16", "SQUALL_COMPRESS=fp16"},      {"SQUALL_BF16", "SQUALL_COMPRESS=bf16"},
    {"SQUALL_INT8", "SQUALL_COMPRESS=int8"},      {"SQUALL_QUANTIZE", "SQUALL_COMPRESS"},
    {"SQUALL_ERROR_FEEDBACK", "SQUALL_EF"},       {"SQUALL_RESIDUAL", "SQUALL_EF"},
    {"SQUALL_RESIDUALS", "SQUALL_EF"},            {"SQUALL_MEMORY", "SQUALL_EF_MAX_BYTES"},
    {"SQUALL_CHUNK", "SQUALL_CHUNK_BYTES"},       {"SQUALL_CHUNK_SIZE", "SQUALL_CHUNK_BYTES"},
    {"SQUALL_PIPELINE", "SQUALL_CHUNK_BYTES"},    {"SQUALL_BUCKET_SIZE", "SQUALL_BUCKET"},
    {"SQUALL_THRESHOLD", "SQUALL_MIN_BYTES"},     {"SQUALL_MIN_SIZE", "SQUALL_MIN_BYTES"},
    {"SQUALL_MIN_COUNT", "SQUALL_MIN_BYTES"},     {"SQUALL_LOG", "SQUALL_DEBUG"},
    {"SQUALL_LOG_LEVEL", "SQUALL_DEBUG"},         {"SQUALL_VERBOSE", "SQUALL_DEBUG"},
    {"SQUALL_BANDWIDTH", "SQUALL_LINK_GBPS"},     {"SQUALL_LINK_SPEED", "SQUALL_LINK_GBPS"},
    {"SQUALL_GBPS", "SQUALL_LINK_GBPS"},          {"SQUALL_COST", "SQUALL_COST_MODEL"},
    {"SQUALL_AUTO", "SQUALL_COST_MODEL"},         {"SQUALL_STATS_FILE", "SQUALL_STATS"},
    {"SQUALL_WARMUP_STEPS", "SQUALL_WARMUP"},     {"SQUALL_LOCAL_SIZE", "SQUALL_RANKS_PER_NODE"},
    {"SQUALL_PPN", "SQUALL_RANKS_PER_NODE"},      {"SQUALL_GPUS_PER_NODE", "SQUALL_RANKS_PER_NODE"},
    {"SQUALL_HIERARCHICAL", "SQUALL_HIERARCHY"},  {"SQUALL_TWO_LEVEL", "SQUALL_HIERARCHY"},
    {"SQUALL_ZSTD_LEVEL", "SQUALL_ZSTD"},         {"SQUALL_LOSSLESS", "SQUALL_ZSTD"},
    {"SQUALL_EF_MAX", "SQUALL_EF_MAX_BYTES"},     {"SQUALL_HALF", "SQUALL_HALF_ACCUM"},
};

/* The option a misspelt or guessed name may have meant, or NULL. */
static const char *meant_by(const char *name, size_t len) {
  for (size_t i = 0; i < SQ_ARRAY_SIZE(guesses); i++)
    if (strlen(guesses[i].guess) == len && !strncasecmp(name, guesses[i].guess, len)) return guesses[i].meant;
  int best = 3;
  const char *near = NULL;
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    int dist = distance(name, len, options[i].name);
    if (dist < best) best = dist, near = options[i].name;
  }
  return near;
}

/* A misspelt variable (SQUALL_COMPRES=fp16) would leave compression off
 * without a word: every SQUALL_ variable that is neither an option nor a
 * tool's is named once per process, with the option it may have meant. */
static void warn_unknown_env(void) {
  static int warned; /* once per process, whichever thread reads first */
  if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) return;
  for (char **e = environ; e && *e; e++) {
    if (strncasecmp(*e, "SQUALL_", 7)) continue;
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    int known = 0;
    for (size_t i = 0; i < SQ_ARRAY_SIZE(options) && !known; i++)
      known = strlen(options[i].name) == len && !strncmp(*e, options[i].name, len);
    if (known || is_tool_name(*e, len)) continue;
    const char *near = meant_by(*e, len);
    if (near)
      SQ_WARN("unknown variable %.*s is ignored (did you mean %s?)", (int)len, *e, near);
    else
      SQ_WARN("unknown variable %.*s is ignored (squall-info -c lists the options)", (int)len, *e);
  }
}

squallResult_t squallConfigFromEnv(squallConfig_t *config) {
  SQ_FORWARD_IF_ERROR(squallConfigDefault(config));
  warn_unknown_env();
  squallConfig_t tmp = *config;
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    const char *v = getenv(options[i].name);
    if (v != NULL) SQ_FORWARD_IF_ERROR(squallConfigSet(&tmp, options[i].name, v));
  }
  *config = tmp;
  return squallSuccess;
}

const char *squallConfigCodecString(const squallConfig_t *c, char *buf, size_t len) {
  if (buf == NULL || len == 0) return buf;
  switch (c ? c->codec : squallCodecNone) {
  case squallCodecFp16: snprintf(buf, len, "fp16"); break;
  case squallCodecBf16: snprintf(buf, len, "bf16"); break;
  case squallCodecTopk: {
    char r[32];
    print_double(r, sizeof r, c->topkRatio);
    snprintf(buf, len, "topk:%s", r);
    break;
  }
  case squallCodecInt8: snprintf(buf, len, "int8"); break;
  case squallCodecInt4: snprintf(buf, len, "int4"); break;
  case squallCodecFp8: snprintf(buf, len, "fp8"); break;
  default: snprintf(buf, len, "none"); break;
  }
  return buf;
}

squallResult_t squallConfigOption(const squallConfig_t *config, int index, squallOption_t *option) {
  SQ_RETURN_ERROR_IF(option == NULL, squallInvalidArgument, "squallConfigOption: option is NULL");
  SQ_RETURN_ERROR_IF(index < 0 || (size_t)index >= SQ_ARRAY_SIZE(options), squallInvalidArgument,
                     "squallConfigOption: there is no option %d (options are 0 to %d)", index,
                     (int)SQ_ARRAY_SIZE(options) - 1);
  const option_t *o = &options[index];
  option->name = o->name;
  option->field = o->field;
  option->defaultValue = o->defval;
  option->accepted = o->accepted;
  option->doc = o->doc;
  if (config != NULL) {
    o->print(config, option->value, sizeof option->value);
  } else {
    squallConfig_t d;
    squallConfigDefault(&d);
    o->print(&d, option->value, sizeof option->value);
  }
  return squallSuccess;
}

/* ------------------------------------------- the process-wide configuration */
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static squallConfig_t current;
static uint64_t generation; /* bumped by every squallSetConfig */

static void config_load(void) {
  squallConfig_t c;
  squall__log_set_level(squallLogWarn); /* the logger must not re-enter this once */
  if (squallConfigFromEnv(&c) != squallSuccess) {
    char why[512];
    snprintf(why, sizeof why, "%s", squallGetLastError());
    squallConfigDefault(&c);
    c.codec = squallCodecNone;
    /* What only reports keeps working where its own value is valid: the
     * statistics file then shows the calls passed through. */
    static const char *const reporting[] = {"SQUALL_DEBUG", "SQUALL_STATS"};
    for (size_t i = 0; i < SQ_ARRAY_SIZE(reporting); i++) {
      const char *v = getenv(reporting[i]);
      if (v) (void)squallConfigSet(&c, reporting[i], v);
    }
    squall__log_set_level(c.debug);
    SQ_WARN("%s; compression is off for this process (every call passes through)", why);
  }
  squall__log_set_level(c.debug);
  current = c;
  if (c.debug >= squallLogInfo) { /* every setting, as its variable spells it */
    char line[4096];
    size_t used = 0;
    squallOption_t o;
    for (int i = 0; squallConfigOption(&c, i, &o) == squallSuccess && used < sizeof line; i++) {
      int w = snprintf(line + used, sizeof line - used, " %s=%s", o.name, o.value[0] ? o.value : "''");
      if (w < 0) break;
      used += (size_t)w;
    }
    SQ_INFO("squall %s:%s", squallVersionString(), line);
  }
}

squallResult_t squallGetConfig(squallConfig_t *config) {
  SQ_RETURN_ERROR_IF(config == NULL, squallInvalidArgument, "squallGetConfig: config is NULL");
  squall__config_get(config, NULL);
  return squallSuccess;
}

void squall__config_get(squallConfig_t *config, uint64_t *gen) {
  pthread_once(&config_once, config_load);
  pthread_mutex_lock(&config_lock);
  *config = current;
  if (gen) *gen = generation;
  pthread_mutex_unlock(&config_lock);
}

uint64_t squall__config_generation(void) {
  pthread_once(&config_once, config_load);
  return __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
}

squallResult_t squall__config_check(const squallConfig_t *config, const char *who) {
  SQ_RETURN_ERROR_IF(config == NULL, squallInvalidArgument, "%s: config is NULL", who);
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    char why[256];
    SQ_RETURN_ERROR_IF(options[i].check(config, why, sizeof why) != 0, squallInvalidArgument,
                       "%s: %s (%s accepts %s)", who, why, options[i].name, options[i].accepted);
  }
  return squallSuccess;
}

squallResult_t squallSetConfig(const squallConfig_t *config) {
  SQ_FORWARD_IF_ERROR(squall__config_check(config, "squallSetConfig"));
  pthread_once(&config_once, config_load);
  pthread_mutex_lock(&config_lock);
  current = *config;
  __atomic_store_n(&generation, generation + 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&config_lock);
  squall__log_set_level(config->debug);
  return squallSuccess;
}

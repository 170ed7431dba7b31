/*
 * config.c - the configuration table. One row per environment variable:
 * name, default, what is accepted, what it means, a parser and a printer.
 * The same rows drive parsing, `squall-info -c` and squall(7)'s ENVIRONMENT.
 */
#include "common/internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef int (*parse_fn)(squallConfig_t *cfg, const char *value);
typedef void (*print_fn)(const squallConfig_t *cfg, char *buf, size_t len);

typedef struct {
  const char *name;     /* environment variable */
  const char *defval;   /* default, as text */
  const char *accepted; /* for error messages and docs */
  const char *doc;
  parse_fn parse;       /* 0 on success */
  print_fn print;
} option_t;

/* ------------------------------------------------------------ parsers */
static int parse_compress(squallConfig_t *c, const char *v) {
  if (!strcasecmp(v, "none")) { c->codec = squallCodecNone; return 0; }
  if (!strcasecmp(v, "fp16")) { c->codec = squallCodecFp16; return 0; }
  if (!strcasecmp(v, "bf16")) { c->codec = squallCodecBf16; return 0; }
  if (!strncasecmp(v, "topk:", 5)) {
    char *end;
    errno = 0;
    double r = strtod(v + 5, &end);
    if (errno || end == v + 5 || *end || !(r > 0.0 && r <= 1.0)) return -1;
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

static int parse_long(const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) return -1;
  *out = x;
  return 0;
}

static int parse_ef(squallConfig_t *c, const char *v) {
  long x;
  if (parse_long(v, 0, 1, &x)) return -1;
  c->errorFeedback = (int)x;
  return 0;
}

/* Sizes: a decimal integer with an optional K, M or G (powers of 1024). */
static int parse_size(const char *v, size_t *out) {
  char *end;
  errno = 0;
  if (!isdigit((unsigned char)v[0])) return -1;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v) return -1;
  unsigned long long mul = 1;
  if (*end) {
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1ull << 10; break;
    case 'M': mul = 1ull << 20; break;
    case 'G': mul = 1ull << 30; break;
    default: return -1;
    }
    end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
  }
  if (x > (~0ull) / mul) return -1;
  *out = (size_t)(x * mul);
  return 0;
}

static int parse_min_bytes(squallConfig_t *c, const char *v) { return parse_size(v, &c->minBytes); }
static int parse_ef_max(squallConfig_t *c, const char *v) { return parse_size(v, &c->efMaxBytes); }

static int parse_zstd(squallConfig_t *c, const char *v) {
  long x;
  if (parse_long(v, 0, 19, &x)) return -1;
  c->zstdLevel = (int)x;
  return 0;
}

static int parse_warmup(squallConfig_t *c, const char *v) {
  long x;
  if (parse_long(v, 0, 1000000000L, &x)) return -1;
  c->warmup = (int)x;
  return 0;
}

static int parse_min_ranks(squallConfig_t *c, const char *v) {
  long x;
  if (parse_long(v, 1, 1000000000L, &x)) return -1;
  c->minRanks = (int)x;
  return 0;
}

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

/* two-level all-reduce */
static int parse_hierarchy(squallConfig_t *c, const char *v) {
  if (!strcasecmp(v, "auto")) c->hierarchy = squallHierarchyAuto;
  else if (!strcasecmp(v, "flat")) c->hierarchy = squallHierarchyFlat;
  else return -1;
  return 0;
}

static int parse_ranks_per_node(squallConfig_t *c, const char *v) {
  long x;
  if (parse_long(v, 0, 1000000000L, &x)) return -1;
  c->ranksPerNode = (int)x;
  return 0;
}

/* ----------------------------------------------------------- printers */
static void print_compress(const squallConfig_t *c, char *b, size_t n) { squallConfigCodecString(c, b, n); }
static void print_values(const squallConfig_t *c, char *b, size_t n) {
  snprintf(b, n, "%s", c->topkValues == squallValueFp16 ? "fp16" : "fp32");
}
static void print_ef(const squallConfig_t *c, char *b, size_t n) { snprintf(b, n, "%d", c->errorFeedback); }
static void print_size(size_t v, char *b, size_t n) {
  if (v && v % (1u << 30) == 0) snprintf(b, n, "%zuG", v >> 30);
  else if (v && v % (1u << 20) == 0) snprintf(b, n, "%zuM", v >> 20);
  else if (v && v % (1u << 10) == 0) snprintf(b, n, "%zuK", v >> 10);
  else snprintf(b, n, "%zu", v);
}
static void print_min_bytes(const squallConfig_t *c, char *b, size_t n) { print_size(c->minBytes, b, n); }
static void print_ef_max(const squallConfig_t *c, char *b, size_t n) { print_size(c->efMaxBytes, b, n); }
static void print_zstd(const squallConfig_t *c, char *b, size_t n) { snprintf(b, n, "%d", c->zstdLevel); }
static void print_warmup(const squallConfig_t *c, char *b, size_t n) { snprintf(b, n, "%d", c->warmup); }
static void print_min_ranks(const squallConfig_t *c, char *b, size_t n) { snprintf(b, n, "%d", c->minRanks); }
static void print_debug(const squallConfig_t *c, char *b, size_t n) {
  static const char *names[] = {"WARN", "INFO", "TRACE"};
  snprintf(b, n, "%s", names[c->debug]);
}
static void print_stats(const squallConfig_t *c, char *b, size_t n) { snprintf(b, n, "%s", c->statsPath); }
static void print_hierarchy(const squallConfig_t *c, char *b, size_t n) {
  snprintf(b, n, "%s", c->hierarchy == squallHierarchyFlat ? "flat" : "auto");
}
static void print_ranks_per_node(const squallConfig_t *c, char *b, size_t n) { snprintf(b, n, "%d", c->ranksPerNode); }

static const option_t options[] = {
    {"SQUALL_COMPRESS", "none", "none, fp16, bf16 or topk:<ratio> with 0 < ratio <= 1",
     "Codec for eligible all-reduces: none passes every call through; fp16 and bf16 scale and "
     "round to 16 bits and all-reduce those; topk:<ratio> sends the ceil(ratio*count) entries of "
     "largest magnitude and all-gathers them.",
     parse_compress, print_compress},
    {"SQUALL_TOPK_VALUES", "fp32", "fp32 or fp16",
     "Precision of the values top-k sends; fp16 rounding error stays in the residual.",
     parse_values, print_values},
    {"SQUALL_EF", "1", "0 or 1",
     "Error feedback: keep what was not sent in a per-tensor residual and add it to the next call.",
     parse_ef, print_ef},
    {"SQUALL_MIN_BYTES", "1M", "a size in bytes with an optional K, M or G suffix (powers of 1024)",
     "Calls smaller than this pass through.", parse_min_bytes, print_min_bytes},
    {"SQUALL_ZSTD", "1", "an integer from 0 to 19",
     "zstd level of the lossless stage on the MPI transport (delta-coded indices and values); 0 "
     "turns it off.",
     parse_zstd, print_zstd},
    {"SQUALL_EF_MAX_BYTES", "0", "a size in bytes with an optional K, M or G suffix; 0 means unlimited",
     "Memory cap for residuals; tensors seen after the cap is reached run without error feedback "
     "(warned once).",
     parse_ef_max, print_ef_max},
    {"SQUALL_WARMUP", "0", "a non-negative integer",
     "The first n eligible calls of each tensor go dense (uncompressed), as Deep Gradient "
     "Compression warms up.",
     parse_warmup, print_warmup},
    {"SQUALL_MIN_RANKS", "2", "a positive integer",
     "Communicators with fewer ranks pass through. 1 runs the whole compressed path on a single "
     "rank, which proves the device path on a machine with one GPU.",
     parse_min_ranks, print_min_ranks},
    {"SQUALL_DEBUG", "WARN", "WARN, INFO or TRACE",
     "Logging to standard error: INFO logs the configuration and a summary per communicator.",
     parse_debug, print_debug},
    {"SQUALL_STATS", "", "a file path of at most 511 bytes; %r is replaced by the rank, else .<rank> is appended",
     "Write the statistics counters as JSON at exit, one file per process.",
     parse_stats, print_stats},
    {"SQUALL_HIERARCHY", "auto", "auto or flat",
     "auto: where there are at least 2 nodes with the same number (at least 2) of ranks each, sum "
     "inside each node uncompressed (reduce-scatter), compress only across nodes (one shard per "
     "local rank), then all-gather inside the node; otherwise, and with flat, every rank is its "
     "own node.",
     parse_hierarchy, print_hierarchy},
    {"SQUALL_RANKS_PER_NODE", "0", "a non-negative integer",
     "0 finds the nodes (MPI's shared-memory split; hostname and boot id with NCCL). R > 0 makes "
     "every R consecutive ranks a node, which runs the two-level path on one host (tests).",
     parse_ranks_per_node, print_ranks_per_node},
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

squallResult_t squallConfigFromEnv(squallConfig_t *config) {
  SQ_FORWARD_IF_ERROR(squallConfigDefault(config));
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
  case squallCodecTopk: snprintf(buf, len, "topk:%g", c->topkRatio); break;
  default: snprintf(buf, len, "none"); break;
  }
  return buf;
}

void squallConfigPrint(FILE *out, const squallConfig_t *config) {
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    char val[600];
    options[i].print(config, val, sizeof val);
    fprintf(out, "%-20s = %-12s (default %s%s%s)\n", options[i].name, val,
            options[i].defval[0] ? "" : "\"", options[i].defval, options[i].defval[0] ? "" : "\"");
    fprintf(out, "    %s\n    Accepted: %s.\n", options[i].doc, options[i].accepted);
  }
}

/* man(7) text: backslashes and dashes escaped, lines broken at blanks
 * (mandoc's lint wants them short), no line starting with a dot. */
static void man_text(FILE *out, const char *s) {
  int col = 0;
  if (*s == '.' || *s == '\'') fputs("\\&", out);
  for (; *s; s++) {
    if (*s == ' ' && col > 60) {
      fputc('\n', out);
      col = 0;
      if (s[1] == '.' || s[1] == '\'') fputs("\\&", out);
      continue;
    }
    if (*s == '\\') fputs("\\e", out);
    else if (*s == '-') fputs("\\-", out);
    else fputc(*s, out);
    col++;
  }
}

void squallConfigPrintMan(FILE *out) {
  fputs(".SH ENVIRONMENT\n", out);
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    fprintf(out, ".TP\n.B %s\n", options[i].name);
    man_text(out, options[i].doc);
    fputs("\nAccepted: ", out);
    man_text(out, options[i].accepted);
    fputs(".\nDefault: ", out);
    man_text(out, options[i].defval[0] ? options[i].defval : "unset");
    fputs(".\n", out);
  }
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
    squall__log_set_level(c.debug);
    SQ_WARN("%s; compression is off for this process (every call passes through)", why);
  }
  squall__log_set_level(c.debug);
  current = c;
  if (c.debug >= squallLogInfo) {
    char codec[64];
    SQ_INFO("squall %s: SQUALL_COMPRESS=%s SQUALL_TOPK_VALUES=%s SQUALL_EF=%d SQUALL_MIN_BYTES=%zu "
            "SQUALL_ZSTD=%d SQUALL_WARMUP=%d",
            squallVersionString(), squallConfigCodecString(&c, codec, sizeof codec),
            c.topkValues == squallValueFp16 ? "fp16" : "fp32", c.errorFeedback, c.minBytes,
            c.zstdLevel, c.warmup);
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

squallResult_t squallSetConfig(const squallConfig_t *config) {
  SQ_RETURN_ERROR_IF(config == NULL, squallInvalidArgument, "squallSetConfig: config is NULL");
  SQ_RETURN_ERROR_IF(config->codec == squallCodecTopk && !(config->topkRatio > 0 && config->topkRatio <= 1),
                     squallInvalidArgument, "squallSetConfig: topkRatio=%g is outside (0, 1]",
                     config->topkRatio);
  pthread_once(&config_once, config_load);
  pthread_mutex_lock(&config_lock);
  current = *config;
  generation++;
  pthread_mutex_unlock(&config_lock);
  squall__log_set_level(config->debug);
  return squallSuccess;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * config.c - the configuration table. One row per environment variable:
 * its name, the squallConfig_t member it sets (offsetof), its type and the
 * type's bounds or names, default, what is accepted, what it means, and
 * whether the ranks must agree on it. Typed parsers, printers and range
 * checks (config_types.c) serve every row of a type; an enum option is a
 * table of names and one row.
 * The same rows drive parsing, the range checks of squallSetConfig(),
 * squallConfigOption() (from which `squall-info -c`, squall(7)'s
 * ENVIRONMENT and the SQUALL_DEBUG=INFO line are printed), and the
 * configuration description and digest that the ranks compare in the call
 * header (squall__config_describe, squall__config_digest).
 */
#include "common/internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/config_env.h"
#include "common/config_table.h"
#include "common/size.h"
#include "common/sized.h"

/* ------------------------------------------------------------ the rows
 * (their type: common/config_table.h) */
#define MEMBER(m) .member = #m, .offset = offsetof(squallConfig_t, m), .width = sizeof(((squallConfig_t *)0)->m)
#define UINT_ROW(m, l, h) .type = OPT_UINT, MEMBER(m), .lo = (l), .hi = (h)
#define SIZE_ROW(m) .type = OPT_SIZE, MEMBER(m)
#define ENUM_ROW(m, tbl, tname) \
  .type = OPT_ENUM, MEMBER(m), .names = (tbl), .nnames = (int)SQ_ARRAY_SIZE(tbl), .type_name = (tname)
#define DOUBLE_ROW(m, l, h, z) .type = OPT_DOUBLE, MEMBER(m), .dlo = (l), .dhi = (h), .zero = (z)
#define STRING_ROW(m) .type = OPT_STRING, MEMBER(m)
#define SET_ROW(m, tbl) .type = OPT_SET, MEMBER(m), .names = (tbl), .nnames = (int)SQ_ARRAY_SIZE(tbl)
#define AGREE(k) .scope = OPT_AGREE, .key = (k)
#define LOCAL .scope = OPT_LOCAL

#define MAX_COUNT 1000000000L  /* SQUALL_WARMUP, SQUALL_MIN_RANKS, SQUALL_RANKS_PER_NODE */
#define MAX_INTERVAL 31536000L /* a year of seconds: SQUALL_STATS_INTERVAL, SQUALL_SUMMARY_INTERVAL */

/* The names of each enum option, indexed by the enumerator's value. */
static const char *const codec_names[] = {"none", "fp16", "bf16", "topk", "int8", "int4", "fp8"};
static const char *const value_names[] = {"fp32", "fp16"};
static const char *const debug_names[] = {"WARN", "INFO", "TRACE"};
static const char *const half_accum_names[] = {"fp32", "half"};
static const char *const hierarchy_names[] = {"auto", "flat"};
static const char *const on_off_names[] = {"off", "on"};
/* bit i of SQUALL_COLLECTIVES: squallCollective_t */
static const char *const collective_names[] = {"allreduce", "reducescatter"};

/* In the order of squallConfig_t's members (squall__config_table_check),
 * which is the order of squallConfigOption and of the description.
 * Agree: the codec, its ratio and values, error feedback, the size
 * threshold, zstd, the warm-up and the minimum ranks decide what each rank
 * sends; the bucket and the 16-bit accumulation change the wire; ranks
 * that disagree on the two-level options pass through together; chunks
 * change the sequence of collectives; the cost model's inputs must be the
 * same where it decides without a header (device buffers). Local: the
 * residual cap (a tensor past it runs without error feedback, on the same
 * wire), logging, the statistics file and the intervals of both. */
static const squall_option options[] = {
    {"SQUALL_COMPRESS", ENUM_ROW(codec, codec_names, "squallCodec_t"), .param = "topk",
     .param_member = "topkRatio", .param_offset = offsetof(squallConfig_t, topkRatio), .param_default = 0.01,
     .param_key = "ratio", .field = "codec, topkRatio", AGREE("compress"), .defval = "none",
     .accepted = "none, fp16, bf16, int8, int4, fp8 or topk:<ratio> with 0 < ratio <= 1",
     .doc = "Codec for eligible all-reduces: none passes every call through; fp16 and bf16 scale and "
            "round to 16 bits and all-reduce those; int8, int4 and fp8 (e4m3) round each bucket of "
            "SQUALL_BUCKET elements under its own power-of-two scale and run a two-phase all-reduce "
            "(exchange, sum in fp32 in rank order, re-encode, all-gather); topk:<ratio> sends the "
            "ceil(ratio*count) entries of largest magnitude and all-gathers them."},
    {"SQUALL_TOPK_VALUES", ENUM_ROW(topkValues, value_names, "squallValueType_t"), AGREE("values"),
     .defval = "fp32", .accepted = "fp32 or fp16",
     .doc = "Precision of the values top-k sends; fp16 rounding error stays in the residual."},
    {"SQUALL_EF", UINT_ROW(errorFeedback, 0, 1), AGREE("ef"), .defval = "1", .accepted = "0 or 1",
     .doc = "Error feedback: keep what was not sent in a per-tensor residual and add it to the next call."},
    {"SQUALL_MIN_BYTES", SIZE_ROW(minBytes), AGREE("min_bytes"), .defval = "1M", .accepted = SQUALL_SIZE_SPELLINGS,
     .doc = "Calls smaller than this pass through."},
    {"SQUALL_ZSTD", UINT_ROW(zstdLevel, 0, 19), AGREE("zstd"), .defval = "1", .accepted = "an integer from 0 to 19",
     .doc = "zstd level of the top-k lossless stage on the MPI transport (index gaps and values as byte "
            "planes); 0 turns it off. With the cost model on, calls also try raw slots and keep "
            "whichever whole calls of the size ran faster (raw wins on fast links)."},
    {"SQUALL_EF_MAX_BYTES", SIZE_ROW(efMaxBytes), LOCAL, .defval = "0",
     .accepted = SQUALL_SIZE_SPELLINGS "; 0 means unlimited",
     .doc = "Memory cap for residuals; tensors seen after the cap is reached run without error feedback "
            "(warned once)."},
    {"SQUALL_WARMUP", UINT_ROW(warmup, 0, MAX_COUNT), AGREE("warmup"), .defval = "0",
     .accepted = "a non-negative integer (at most 1000000000)",
     .doc = "The first n eligible calls of each tensor shape (element count and type) go dense "
            "(uncompressed), as Deep Gradient Compression warms up."},
    {"SQUALL_MIN_RANKS", UINT_ROW(minRanks, 1, MAX_COUNT), AGREE("min_ranks"), .defval = "2",
     .accepted = "a positive integer (at most 1000000000)",
     .doc = "Communicators with fewer ranks pass through. 1 runs the whole compressed path on a single "
            "rank, which proves the device path on a machine with one GPU."},
    {"SQUALL_DEBUG", ENUM_ROW(debug, debug_names, "squallLogLevel_t"), LOCAL, .defval = "WARN",
     .accepted = "WARN, INFO or TRACE",
     .doc = "Logging to standard error: INFO logs every setting at start, one line whenever the path of a size "
            "class of calls changes (with its reason), and a summary per communicator. At any level, rank 0 says "
            "at exit when less than half of the bytes squall could have compressed were, and why."},
    {"SQUALL_STATS", STRING_ROW(statsPath), LOCAL, .defval = "",
     .accepted = "a file path of at most 511 bytes; every %r is replaced by the rank, else .<rank> is appended",
     .doc = "Write the statistics counters as JSON, one file per process: at exit, every "
            "SQUALL_STATS_INTERVAL seconds, and on SIGTERM or SIGINT where the program left those at their "
            "default action. Each write replaces the whole file at once (a new file renamed over it), so "
            "a reader never sees half of one."},
    {"SQUALL_BUCKET", UINT_ROW(bucket, 8, 1L << 20), .multiple = 8, AGREE("bucket"), .defval = "512",
     .accepted = "a multiple of 8 from 8 to 1048576",
     .doc = "Elements that share one scale in the int8, int4 and fp8 codecs (2 bytes of scale and flags "
            "per bucket)."},
    {"SQUALL_HALF_ACCUM", ENUM_ROW(halfAccum, half_accum_names, "squallHalfAccum_t"), AGREE("half_accum"),
     .wire_number = 1, .defval = "fp32", .accepted = "fp32 or half",
     .doc = "Where fp16 and bf16 codes are summed: fp32 runs the two-phase all-reduce (each rank sums "
            "its shard in fp32, so the error does not grow with the rank count); half all-reduces the "
            "16-bit codes, rounding after every addition (those roundings belong to no rank's residual: "
            "they are neither sent nor kept)."},
    {"SQUALL_HIERARCHY", ENUM_ROW(hierarchy, hierarchy_names, "squallHierarchy_t"), AGREE("hierarchy"),
     .defval = "auto", .accepted = "auto or flat",
     .doc = "auto: where there are at least 2 nodes with the same number (at least 2) of ranks each, sum "
            "inside each node uncompressed (reduce-scatter), compress only across nodes (one shard per "
            "local rank), then all-gather inside the node; otherwise, and with flat, every rank is its "
            "own node."},
    {"SQUALL_RANKS_PER_NODE", UINT_ROW(ranksPerNode, 0, MAX_COUNT), AGREE("rpn"), .defval = "0",
     .accepted = "a non-negative integer (at most 1000000000)",
     .doc = "0 finds the nodes (MPI's shared-memory split; hostname and boot id with NCCL). R > 0 makes "
            "every R consecutive ranks a node, which runs the two-level path on one host (tests)."},
    {"SQUALL_CHUNK_BYTES", SIZE_ROW(chunkBytes), AGREE("chunk"), .defval = "4M",
     .accepted = SQUALL_SIZE_SPELLINGS "; 0 means one chunk",
     .doc = "The two-phase all-reduce (int8, int4, fp8; fp16 and bf16 summed in fp32) on host memory "
            "splits a call into chunks of about this many fp32 bytes and overlaps one chunk's encoding "
            "and decoding with the next chunk's exchange (MPI non-blocking collectives). Every element "
            "is coded as without chunks: the result is bit for bit the same."},
    {"SQUALL_COST_MODEL", ENUM_ROW(costModel, on_off_names, NULL), AGREE("cost"), .wire_number = 1,
     .defval = "on", .accepted = "on or off",
     .doc = "on: on host memory, each rank predicts the time of the plain and of the compressed "
            "all-reduce (or reduce-scatter, from figures of its own) from its measured codec speed and the link's speed (or from whole calls of the "
            "same size timed both ways); the call passes through (reason would_not_pay) unless the "
            "largest compressed prediction over the ranks is below the largest plain one. Where two "
            "levels apply, the same timings choose between two levels and flat. On device memory, "
            "all-reduces are timed on the stream and agreed every 16th call of a size class (squall(7), "
            "COST MODEL); until a class is measured, calls with every rank on one node pass through "
            "(would_not_pay). off: every eligible call is compressed."},
    /* 1 Mbit/s to 100 Tbit/s: below, predicted times leave int64 nanoseconds; above, a typo */
    {"SQUALL_LINK_GBPS", DOUBLE_ROW(linkGbps, 0.001, 100000.0, "auto"), AGREE("link"), .defval = "auto",
     .accepted = "auto (or 0), or a decimal number of Gbit/s from 0.001 to 100000",
     .doc = "The link speed the cost model assumes per rank; auto measures it from the calls' own times "
            "(plain calls, and the exchanges of compressed calls; all-reduces and reduce-scatters apart)."},
    {"SQUALL_STATS_INTERVAL", UINT_ROW(statsInterval, 0, MAX_INTERVAL), LOCAL, .defval = "0",
     .accepted = "a non-negative integer of seconds (at most 31536000); 0 means at exit only",
     .doc = "Also write the SQUALL_STATS file during the run, at the first call at least this many seconds "
            "after the last write, so that a long or killed job leaves its counters."},
    {"SQUALL_SUMMARY_INTERVAL", UINT_ROW(summaryInterval, 0, MAX_INTERVAL), LOCAL, .defval = "600",
     .accepted = "a non-negative integer of seconds (at most 31536000); 0 means at exit only",
     .doc = "Rank 0 also checks during the run, at the first call at least this many seconds after the "
            "last check, whether less than half of the bytes squall could have compressed so far were, and "
            "says why in the same WARN line as at exit (once per check)."},
    /* agreed: it decides which interposed calls run squall's collectives */
    {"SQUALL_COLLECTIVES", SET_ROW(collectives, collective_names), AGREE("collectives"), .defval = "allreduce",
     .accepted = "a comma list of allreduce and reducescatter, or all",
     .doc = "The collectives the LD_PRELOAD interposers hand to squall; the others pass through to NCCL or MPI "
            "(reason collective_off). The default leaves a sharded job's reduce-scatters (FSDP, ZeRO) as they "
            "were until it opts in. Direct calls (squallAllReduce, squallReduceScatter, "
            "squallMpiReduceScatterBlock...) are compressed whatever this holds: they name their collective."},
};

/* The first layouts of libsquall.so.4, which every caller's struct has. */
#define CONFIG_FIRST SQ_FIRST_SIZE(squallConfig_t, linkGbps)
#define OPTION_FIRST SQ_FIRST_SIZE(squallOption_t, agree)

_Static_assert(sizeof(squallCodec_t) == sizeof(int) && sizeof(squallValueType_t) == sizeof(int) &&
                   sizeof(squallLogLevel_t) == sizeof(int) && sizeof(squallHalfAccum_t) == sizeof(int) &&
                   sizeof(squallHierarchy_t) == sizeof(int),
               "enum options are read and written as int");

/* ------------------------------------------- what the ranks compare */
static void append(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *out, size_t cap, const char *fmt, ...) {
  size_t used = strlen(out);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out + used, cap - used, fmt, ap);
  va_end(ap);
}

/* Every OPT_AGREE row as " key=value", in the table's order, then the
 * ratio of an enum whose value takes one. */
void squall__config_describe(const squallConfig_t *c, char *out, size_t cap) {
  if (cap == 0) return;
  out[0] = 0;
  fenv_t env;
  squall__round_nearest_begin(&env); /* the same text on every rank */
  char v[SQ_CONFIG_DESC_BYTES];
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    const squall_option *o = &options[i];
    if (o->scope != OPT_AGREE) continue;
    squall__opt_wire(o, c, v, sizeof v);
    append(out, cap, "%s%s=%s", out[0] ? " " : "", o->key, v);
  }
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    const squall_option *o = &options[i];
    if (o->scope == OPT_AGREE && o->param && squall__opt_get_int(c, o->offset) == squall__opt_param_index(o))
      append(out, cap, " %s=%.17g", o->param_key, squall__opt_get_double(c, o->param_offset)); /* not %g's rounding */
  }
  squall__round_nearest_end(&env);
}

/* 62 bits of FNV-1a over the description: positive, so that its negation
 * fits and min(d) == -min(-d) says every rank has the same. */
int64_t squall__config_digest(const squallConfig_t *c) {
  char d[SQ_CONFIG_DESC_BYTES];
  squall__config_describe(c, d, sizeof d);
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char *p = d; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
  return (int64_t)(h >> 2);
}

/* ------------------------------------------------ the table's own rules */
static int table_fail(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int table_fail(char *why, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, n, fmt, ap);
  va_end(ap);
  return -1;
}

int squall__config_table_check(char *why, size_t n) {
  size_t end = 0; /* where the members seen so far end: they come in the struct's order */
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    const squall_option *o = &options[i];
    if (o->scope != OPT_AGREE && o->scope != OPT_LOCAL)
      return table_fail(why, n, "%s is marked neither agree (compared across ranks) nor local (the rank's own)",
                        o->name);
    if ((o->scope == OPT_AGREE) != (o->key != NULL))
      return table_fail(why, n, "%s: a key in the description is for agree rows, and every agree row has one",
                        o->name);
    if (strncmp(o->name, "SQUALL_", 7) || !o->member || !o->defval || !o->accepted || !o->doc)
      return table_fail(why, n, "row %zu (%s) lacks a name, member, default, accepted or doc", i, o->name);
    for (size_t j = 0; j < i; j++)
      if (!strcasecmp(o->name + 7, options[j].name + 7)) return table_fail(why, n, "%s is listed twice", o->name);
    squallConfig_t c;
    memset(&c, 0, sizeof c);
    char w[160];
    if (o->param) squall__opt_put(&c, o->param_offset, &o->param_default, sizeof(double));
    if (squall__opt_parse(o, &c, o->defval) || squall__opt_check(o, &c, w, sizeof w))
      return table_fail(why, n, "%s: its default '%s' does not parse", o->name, o->defval);
    if (o->offset < sizeof(squall_head) || o->offset + o->width > sizeof(squallConfig_t) || o->offset < end)
      return table_fail(why, n, "%s: its member is not in squallConfig_t after the previous row's", o->name);
    /* a member without a row would leave a hole where it is */
    size_t align = o->type == OPT_STRING ? 1 : o->width;
    if (o->offset - (end ? end : sizeof(squall_head)) >= align)
      return table_fail(why, n, "%s: squallConfig_t has a member before %s that no row sets", o->name, o->member);
    end = o->offset + o->width;
    if (o->param) {
      if (o->param_offset < sizeof(squall_head) || o->param_offset + sizeof(double) > sizeof(squallConfig_t) ||
          o->param_offset < end)
        return table_fail(why, n, "%s: its ratio member does not follow its member", o->name);
      end = o->param_offset + sizeof(double);
    }
    if (o->type == OPT_ENUM && (o->width != sizeof(int) || o->nnames < 2 || (o->param && squall__opt_param_index(o) < 0)))
      return table_fail(why, n, "%s: an enum row needs an int member and two names or more", o->name);
    if (o->type == OPT_SET && (o->width != sizeof(int) || o->nnames < 1 || o->nnames > 30))
      return table_fail(why, n, "%s: a set row needs an int member and 1 to 30 names", o->name);
    if (o->type == OPT_UINT && (o->multiple < 0 || (o->width != sizeof(int) && o->width != sizeof(size_t))))
      return table_fail(why, n, "%s: an integer row needs an int or size_t member", o->name);
  }
  if (sizeof(squallConfig_t) - end >= sizeof(double))
    return table_fail(why, n, "squallConfig_t has a member after the last row's that no row sets");
  return 0;
}

/* --------------------------------------------- the caller's struct
 * squall works on whole structs of its own size; a caller's struct is
 * read and written up to min(its size, ours) (common/sized.h). What the
 * caller's struct lacks (members appended after it was compiled) is the
 * default, or for squallSetConfig the process-wide value. */
static squallResult_t caller_head(const squallConfig_t *caller, squall_head *h, const char *fn) {
  *h = squall__head(caller, SQUALL_CONFIG_MAGIC, CONFIG_FIRST);
  SQ_RETURN_ERROR_IF(!squall__head_ok(*h, CONFIG_FIRST), squallInvalidArgument,
                     "%s: config->size is %zu, below the %zu bytes of every squallConfig_t since libsquall.so.4 "
                     "(initialize it with SQUALL_CONFIG_INITIALIZER)",
                     fn, h->size, (size_t)CONFIG_FIRST);
  return squallSuccess;
}

/* *full = the caller's struct over *full (a whole struct of ours). */
static squallResult_t config_in(const squallConfig_t *caller, squallConfig_t *full, squall_head *h, const char *fn) {
  SQ_FORWARD_IF_ERROR(caller_head(caller, h, fn));
  memcpy(full, caller, squall__head_bytes(*h, sizeof *full));
  return squallSuccess;
}

/* Writes *full into the caller's struct, under the caller's head h. */
static void config_out(squallConfig_t *caller, squallConfig_t full, squall_head h) {
  memcpy(&full, &h, sizeof h);
  memcpy(caller, &full, squall__head_bytes(h, sizeof full));
}

static void head_mine(squallConfig_t *c) {
  squall_head h = {sizeof *c, SQUALL_CONFIG_MAGIC, SQUALL_VERSION_CODE};
  memcpy(c, &h, sizeof h);
}

static void defaults(squallConfig_t *c) {
  memset(c, 0, sizeof *c);
  head_mine(c);
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    const squall_option *o = &options[i];
    /* the ratio a later SQUALL_COMPRESS=topk without one would use */
    if (o->param) squall__opt_put(c, o->param_offset, &o->param_default, sizeof(double));
    (void)squall__opt_parse(o, c, o->defval); /* squall__config_table_check: every default parses */
  }
}

static const squall_option *find_option(const char *name) {
  const char *bare = strncasecmp(name, "SQUALL_", 7) ? name : name + 7;
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++)
    if (!strcasecmp(bare, options[i].name + 7)) return &options[i];
  return NULL;
}

squallResult_t squallConfigDefault(squallConfig_t *config) {
  SQ_RETURN_ERROR_IF(config == NULL, squallInvalidArgument, "squallConfigDefault: config is NULL");
  squallConfig_t full;
  squall_head h;
  SQ_FORWARD_IF_ERROR(caller_head(config, &h, "squallConfigDefault"));
  defaults(&full);
  config_out(config, full, h);
  return squallSuccess;
}

/* squallConfigSet on a whole struct of which the caller sees `visible`
 * bytes: an option past them is not the caller's to set. */
static squallResult_t set_option(squallConfig_t *full, size_t visible, const char *name, const char *value) {
  const squall_option *o = find_option(name);
  if (o == NULL) {
    char names[512] = "";
    for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
      strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
      strncat(names, options[i].name, sizeof names - strlen(names) - 1);
    }
    return squall__fail(squallInvalidArgument, "unknown squall option '%.100s%s' (known: %s)", name,
                        strlen(name) > 100 ? "..." : "", names);
  }
  SQ_RETURN_ERROR_IF(o->offset + o->width > visible || (o->param && o->param_offset + sizeof(double) > visible),
                     squallInvalidArgument,
                     "%s is not in this squallConfig_t (its size is %zu: compiled with a squall.h older than "
                     "the option)",
                     o->name, visible);
  squallConfig_t tmp = *full;
  /* At most 100 characters of the value are echoed, so that what is
   * accepted always fits in the message (a long SQUALL_STATS path did not). */
  SQ_RETURN_ERROR_IF(squall__opt_parse(o, &tmp, value) != 0, squallInvalidArgument,
                     "%s='%.100s%s' is invalid: accepted values are %s", o->name, value,
                     strlen(value) > 100 ? "..." : "", o->accepted);
  *full = tmp;
  return squallSuccess;
}

squallResult_t squallConfigSet(squallConfig_t *config, const char *name, const char *value) {
  SQ_RETURN_ERROR_IF(config == NULL || name == NULL || value == NULL, squallInvalidArgument,
                     "squallConfigSet: config, name and value must not be NULL");
  squallConfig_t full;
  squall_head h;
  defaults(&full);
  SQ_FORWARD_IF_ERROR(config_in(config, &full, &h, "squallConfigSet"));
  SQ_FORWARD_IF_ERROR(set_option(&full, squall__head_bytes(h, sizeof full), name, value));
  config_out(config, full, h);
  return squallSuccess;
}

/* The items of spec applied in order to *full; all of them or none. */
static squallResult_t parse_spec(squallConfig_t *full, size_t visible, const char *spec) {
  squallConfig_t tmp = *full;
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
    SQ_FORWARD_IF_ERROR(set_option(&tmp, visible, item, eq + 1));
    p = end;
  }
  *full = tmp;
  return squallSuccess;
}

squallResult_t squallConfigParse(squallConfig_t *config, const char *spec) {
  SQ_RETURN_ERROR_IF(config == NULL || spec == NULL, squallInvalidArgument,
                     "squallConfigParse: config and spec must not be NULL");
  squallConfig_t full;
  squall_head h;
  defaults(&full);
  SQ_FORWARD_IF_ERROR(config_in(config, &full, &h, "squallConfigParse"));
  SQ_FORWARD_IF_ERROR(parse_spec(&full, squall__head_bytes(h, sizeof full), spec));
  config_out(config, full, h);
  return squallSuccess;
}

static void warn_typo(const char *name, size_t len, const char *meant, void *ctx) {
  (void)ctx;
  if (meant)
    SQ_WARN("unknown variable %.*s is ignored (did you mean %s?)", (int)len, name, meant);
  else
    SQ_WARN("unknown variable %.*s is ignored (squall-info -c lists the options)", (int)len, name);
}

/* The typo policy (squall(7)): the library runs inside someone else's job,
 * whose SQUALL_ variables it cannot make them fix mid-run; it names each
 * unknown one once per process and goes on (squall's tools refuse). */
static void warn_unknown_env(void) {
  static int warned; /* once per process, whichever thread reads first */
  if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) return;
  const char *names[SQ_ARRAY_SIZE(options)];
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) names[i] = options[i].name;
  squall__env_typos(names, SQ_ARRAY_SIZE(names), warn_typo, NULL);
}

/* The environment over the defaults, on a whole struct. */
static squallResult_t from_env(squallConfig_t *full) {
  defaults(full);
  warn_unknown_env();
  squallConfig_t tmp = *full;
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    const char *v = getenv(options[i].name);
    if (v != NULL) SQ_FORWARD_IF_ERROR(set_option(&tmp, sizeof tmp, options[i].name, v));
  }
  *full = tmp;
  return squallSuccess;
}

squallResult_t squallConfigFromEnv(squallConfig_t *config) {
  SQ_FORWARD_IF_ERROR(squallConfigDefault(config)); /* on a bad variable, config holds the defaults */
  squallConfig_t full;
  squall_head h;
  SQ_FORWARD_IF_ERROR(caller_head(config, &h, "squallConfigFromEnv"));
  SQ_FORWARD_IF_ERROR(from_env(&full));
  config_out(config, full, h);
  return squallSuccess;
}

const char *squallConfigCodecString(const squallConfig_t *c, char *buf, size_t len) {
  if (buf == NULL || len == 0) return buf;
  squallConfig_t none;
  if (c == NULL) { /* reads codec and topkRatio only, which every squallConfig_t has */
    defaults(&none);
    c = &none;
  }
  squall__opt_enum_text(&options[0], c, buf, len); /* SQUALL_COMPRESS */
  return buf;
}

squallResult_t squallConfigOption(const squallConfig_t *config, int index, squallOption_t *option) {
  SQ_RETURN_ERROR_IF(option == NULL, squallInvalidArgument, "squallConfigOption: option is NULL");
  SQ_RETURN_ERROR_IF(index < 0 || (size_t)index >= SQ_ARRAY_SIZE(options), squallInvalidArgument,
                     "squallConfigOption: there is no option %d (options are 0 to %d)", index,
                     (int)SQ_ARRAY_SIZE(options) - 1);
  squall_head oh = squall__head(option, SQUALL_OPTION_MAGIC, OPTION_FIRST);
  SQ_RETURN_ERROR_IF(!squall__head_ok(oh, OPTION_FIRST), squallInvalidArgument,
                     "squallConfigOption: option->size is %zu, below the %zu bytes of every squallOption_t since "
                     "libsquall.so.4 (initialize it with SQUALL_OPTION_INITIALIZER)",
                     oh.size, (size_t)OPTION_FIRST);
  squallConfig_t c;
  defaults(&c);
  if (config != NULL) {
    squall_head h;
    SQ_FORWARD_IF_ERROR(config_in(config, &c, &h, "squallConfigOption"));
  }
  const squall_option *o = &options[index];
  squallOption_t full;
  memset(&full, 0, sizeof full);
  memcpy(&full, &oh, sizeof oh);
  full.name = o->name;
  full.field = o->field ? o->field : o->member;
  full.defaultValue = o->defval;
  full.accepted = o->accepted;
  full.doc = o->doc;
  squall__opt_print(o, &c, full.value, sizeof full.value);
  full.agree = o->scope == OPT_AGREE;
  memcpy(option, &full, squall__head_bytes(oh, sizeof full));
  return squallSuccess;
}

/* ------------------------------------------- the process-wide configuration */
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static squallConfig_t current;
static uint64_t generation; /* bumped by every squallSetConfig */

/* SQUALL_DEBUG=INFO: every setting of the table, as its variable spells
 * it, in lines the logger does not cut (a long SQUALL_STATS path would
 * push the rest out of one). */
static void say_settings(const squallConfig_t *c) {
  char line[700]; /* with the version, within the logger's 1024 bytes */
  size_t used = 0;
  int part = 1;
  squallOption_t o = SQUALL_OPTION_INITIALIZER;
  for (int i = 0; squallConfigOption(c, i, &o) == squallSuccess; i++) {
    char item[600];
    snprintf(item, sizeof item, " %s=%s", o.name, o.value[0] ? o.value : "''");
    if (used > 0 && used + strlen(item) >= sizeof line) {
      SQ_INFO("squall %s settings (%d):%s", squallVersionString(), part++, line);
      used = 0;
    }
    snprintf(line + used, sizeof line - used, "%s", item);
    used = strlen(line);
  }
  if (used > 0) SQ_INFO("squall %s settings (%d):%s", squallVersionString(), part, line);
}

static void config_load(void) {
  squallConfig_t c;
  squall__log_set_level(squallLogWarn); /* the logger must not re-enter this once */
  if (from_env(&c) != squallSuccess) {
    char why[512];
    snprintf(why, sizeof why, "%s", squallGetLastError());
    defaults(&c);
    c.codec = squallCodecNone;
    /* What only reports keeps working where its own value is valid: the
     * statistics file then shows the calls passed through. */
    static const char *const reporting[] = {"SQUALL_DEBUG", "SQUALL_STATS", "SQUALL_STATS_INTERVAL",
                                            "SQUALL_SUMMARY_INTERVAL"};
    for (size_t i = 0; i < SQ_ARRAY_SIZE(reporting); i++) {
      const char *v = getenv(reporting[i]);
      if (v) (void)set_option(&c, sizeof c, reporting[i], v);
    }
    squall__log_set_level(c.debug);
    SQ_WARN("%s; compression is off for this process (every call passes through)", why);
  }
  squall__log_set_level(c.debug);
  current = c;
  if (c.debug >= squallLogInfo) say_settings(&c);
}

void squall__config_get(squallConfig_t *config, uint64_t *gen) {
  pthread_once(&config_once, config_load);
  pthread_mutex_lock(&config_lock);
  *config = current;
  if (gen) *gen = generation;
  pthread_mutex_unlock(&config_lock);
}

squallResult_t squallGetConfig(squallConfig_t *config) {
  SQ_RETURN_ERROR_IF(config == NULL, squallInvalidArgument, "squallGetConfig: config is NULL");
  squallConfig_t full;
  squall_head h;
  SQ_FORWARD_IF_ERROR(caller_head(config, &h, "squallGetConfig"));
  squall__config_get(&full, NULL);
  config_out(config, full, h);
  return squallSuccess;
}

uint64_t squall__config_generation(void) {
  pthread_once(&config_once, config_load);
  return __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
}

squallResult_t squall__config_take(const squallConfig_t *config, squallConfig_t *full, const char *who) {
  SQ_RETURN_ERROR_IF(config == NULL, squallInvalidArgument, "%s: config is NULL", who);
  squall_head h;
  SQ_FORWARD_IF_ERROR(caller_head(config, &h, who));
  size_t bytes = squall__head_bytes(h, sizeof *full);
  if (bytes < sizeof *full) squall__config_get(full, NULL); /* what the caller's struct lacks stays */
  memcpy(full, config, bytes);
  head_mine(full);
  for (size_t i = 0; i < SQ_ARRAY_SIZE(options); i++) {
    char why[256];
    SQ_RETURN_ERROR_IF(squall__opt_check(&options[i], full, why, sizeof why) != 0, squallInvalidArgument,
                       "%s: %s (%s accepts %s)", who, why, options[i].name, options[i].accepted);
  }
  return squallSuccess;
}

squallResult_t squallSetConfig(const squallConfig_t *config) {
  squallConfig_t full;
  SQ_FORWARD_IF_ERROR(squall__config_take(config, &full, "squallSetConfig"));
  pthread_once(&config_once, config_load);
  pthread_mutex_lock(&config_lock);
  current = full;
  __atomic_store_n(&generation, generation + 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&config_lock);
  squall__log_set_level(full.debug);
  return squallSuccess;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_config.c - the configuration table through the public API:
 * defaults, every accepted value of every variable, rejected values and
 * their messages, parsing of configuration strings, the environment, the
 * printers; the table's own rules and what the ranks compare (agree); and
 * the structs' size, magic and version (sized).
 */
#include <stdint.h>

#include "check_util.h"
#include "squall.h"

extern char **environ;

/* Field by field: struct padding makes memcmp unreliable. */
static int cfg_equal(const squallConfig_t *a, const squallConfig_t *b) {
  return a->codec == b->codec && a->topkRatio == b->topkRatio && a->topkValues == b->topkValues &&
         a->errorFeedback == b->errorFeedback && a->minBytes == b->minBytes && a->zstdLevel == b->zstdLevel &&
         a->efMaxBytes == b->efMaxBytes && a->warmup == b->warmup && a->debug == b->debug &&
         strcmp(a->statsPath, b->statsPath) == 0 &&
         a->bucket == b->bucket && a->halfAccum == b->halfAccum && a->hierarchy == b->hierarchy &&
         a->ranksPerNode == b->ranksPerNode && a->chunkBytes == b->chunkBytes &&
         a->costModel == b->costModel && a->linkGbps == b->linkGbps && a->statsInterval == b->statsInterval &&
         a->summaryInterval == b->summaryInterval && a->collectives == b->collectives;
}

static squallConfig_t defaults(void) {
  squallConfig_t c;
  ck_assert_int_eq(squallConfigDefault(&c), squallSuccess);
  return c;
}

/* A configuration that differs from the defaults in every field, so that
 * "unchanged" means something. */
static squallConfig_t unusual(void) {
  squallConfig_t c = defaults();
  c.codec = squallCodecBf16;
  c.topkRatio = 0.125;
  c.topkValues = squallValueFp16;
  c.errorFeedback = 0;
  c.minBytes = 12345;
  c.zstdLevel = 7;
  c.efMaxBytes = 999;
  c.warmup = 3;
  c.debug = squallLogTrace;
  strcpy(c.statsPath, "/nowhere/stats.json");
  c.bucket = 64;
  c.halfAccum = squallHalfAccumHalf;
  c.hierarchy = squallHierarchyFlat;
  c.ranksPerNode = 3;
  c.chunkBytes = 777;
  c.costModel = 0;
  c.linkGbps = 2.5;
  c.collectives = squallCollectiveReduceScatter;
  return c;
}

static void clear_squall_env(void) {
  for (;;) {
    char name[256] = "";
    for (char **e = environ; e && *e; e++)
      if (strncmp(*e, "SQUALL_", 7) == 0) {
        size_t len = strcspn(*e, "=");
        if (len < sizeof name) {
          memcpy(name, *e, len);
          name[len] = 0;
        }
        break;
      }
    if (!name[0]) return;
    unsetenv(name);
  }
}

START_TEST(test_defaults) {
  squallConfig_t c = defaults();
  ck_assert_int_eq(c.codec, squallCodecNone);
  ck_assert(c.topkRatio == 0.01);
  ck_assert_int_eq(c.topkValues, squallValueFp32);
  ck_assert_int_eq(c.errorFeedback, 1);
  ck_assert_uint_eq(c.minBytes, 1u << 20);
  ck_assert_int_eq(c.zstdLevel, 1);
  ck_assert_uint_eq(c.efMaxBytes, 0);
  ck_assert_int_eq(c.warmup, 0);
  ck_assert_int_eq(c.debug, squallLogWarn);
  ck_assert_str_eq(c.statsPath, "");
  ck_assert_int_eq(squallConfigDefault(NULL), squallInvalidArgument);
}
END_TEST

/* ---------------------------------------------------------- accepted */

/* Sets name=value on a copy of 'unusual' and checks the result equals
 * 'want' (which starts as the same copy, with the expected change). */
#define ACCEPT(name, value, field, expected)                                                                  \
  do {                                                                                                        \
    squallConfig_t got_ = unusual(), want_ = unusual();                                                       \
    want_.field = (expected);                                                                                 \
    squallResult_t r_ = squallConfigSet(&got_, (name), (value));                                              \
    ck_assert_msg(r_ == squallSuccess, "%s='%s' refused: %s", (name), (value), squallGetLastError());         \
    ck_assert_msg(cfg_equal(&got_, &want_), "%s='%s' did not set " #field " to " #expected, (name), (value)); \
  } while (0)

START_TEST(test_accept_compress) {
  ACCEPT("SQUALL_COMPRESS", "none", codec, squallCodecNone);
  ACCEPT("SQUALL_COMPRESS", "NONE", codec, squallCodecNone);
  ACCEPT("SQUALL_COMPRESS", "fp16", codec, squallCodecFp16);
  ACCEPT("SQUALL_COMPRESS", "FP16", codec, squallCodecFp16);
  ACCEPT("SQUALL_COMPRESS", "bf16", codec, squallCodecBf16);
  ACCEPT("SQUALL_COMPRESS", "Bf16", codec, squallCodecBf16);
  /* clang-format off */
  static const struct {
    const char *text;
    double ratio;
  } topk[] = {{"topk:0.01", 0.01}, {"topk:1", 1.0},     {"TOPK:0.5", 0.5},      {"topk:1e-3", 0.001},
              {"topk:.25", 0.25},  {"Topk:0.000001", 1e-6}, {"topk:1.0", 1.0}, {"topk:0.999", 0.999},
              {"topk:1e-320", 1e-320} /* subnormal, but above 0 */};
  /* clang-format on */
  for (size_t i = 0; i < sizeof topk / sizeof topk[0]; i++) {
    squallConfig_t c = unusual(), want = unusual();
    want.codec = squallCodecTopk;
    want.topkRatio = topk[i].ratio;
    ck_assert_msg(squallConfigSet(&c, "SQUALL_COMPRESS", topk[i].text) == squallSuccess, "%s refused: %s",
                  topk[i].text, squallGetLastError());
    ck_assert_msg(cfg_equal(&c, &want), "%s gave codec %d ratio %.17g", topk[i].text, c.codec, c.topkRatio);
  }
  /* A codec other than top-k keeps the last ratio. */
  squallConfig_t c = unusual();
  ck_assert_int_eq(squallConfigSet(&c, "COMPRESS", "topk:0.3"), squallSuccess);
  ck_assert_int_eq(squallConfigSet(&c, "COMPRESS", "fp16"), squallSuccess);
  ck_assert(c.topkRatio == 0.3);
}
END_TEST

START_TEST(test_accept_others) {
  ACCEPT("SQUALL_COLLECTIVES", "allreduce", collectives, squallCollectiveAllReduce);
  ACCEPT("SQUALL_COLLECTIVES", "ReduceScatter", collectives, squallCollectiveReduceScatter);
  ACCEPT("SQUALL_COLLECTIVES", "allreduce,reducescatter", collectives, 3);
  ACCEPT("SQUALL_COLLECTIVES", "reducescatter,allreduce,reducescatter", collectives, 3);
  ACCEPT("SQUALL_COLLECTIVES", "all", collectives, 3);
  ACCEPT("SQUALL_COLLECTIVES", "ALL,allreduce", collectives, 3);
  ACCEPT("SQUALL_CHUNK_BYTES", "0", chunkBytes, 0);
  ACCEPT("SQUALL_CHUNK_BYTES", "64K", chunkBytes, 65536);
  ACCEPT("SQUALL_COST_MODEL", "on", costModel, 1);
  ACCEPT("SQUALL_COST_MODEL", "OFF", costModel, 0);
  ACCEPT("SQUALL_LINK_GBPS", "auto", linkGbps, 0.0);
  ACCEPT("SQUALL_LINK_GBPS", "0", linkGbps, 0.0);
  ACCEPT("SQUALL_LINK_GBPS", "10", linkGbps, 10.0);
  ACCEPT("SQUALL_LINK_GBPS", "0.25", linkGbps, 0.25);
  ACCEPT("SQUALL_LINK_GBPS", "1e2", linkGbps, 100.0);
  ACCEPT("SQUALL_TOPK_VALUES", "fp32", topkValues, squallValueFp32);
  ACCEPT("SQUALL_TOPK_VALUES", "FP32", topkValues, squallValueFp32);
  ACCEPT("SQUALL_TOPK_VALUES", "fp16", topkValues, squallValueFp16);
  ACCEPT("SQUALL_EF", "0", errorFeedback, 0);
  ACCEPT("SQUALL_EF", "1", errorFeedback, 1);
  ACCEPT("SQUALL_MIN_BYTES", "0", minBytes, 0);
  ACCEPT("SQUALL_MIN_BYTES", "1", minBytes, 1);
  ACCEPT("SQUALL_MIN_BYTES", "4096", minBytes, 4096);
  ACCEPT("SQUALL_MIN_BYTES", "1K", minBytes, 1024);
  ACCEPT("SQUALL_MIN_BYTES", "1KiB", minBytes, 1024);
  ACCEPT("SQUALL_MIN_BYTES", "2M", minBytes, 2u << 20);
  ACCEPT("SQUALL_MIN_BYTES", "64MiB", minBytes, 64u << 20);
  ACCEPT("SQUALL_MIN_BYTES", "3G", minBytes, (size_t)3 << 30);
  if (sizeof(size_t) == 8) {
    ACCEPT("SQUALL_MIN_BYTES", "18446744073709551615", minBytes, SIZE_MAX);
    ACCEPT("SQUALL_MIN_BYTES", "17179869183G", minBytes, (size_t)17179869183ull << 30);
  }
  ACCEPT("SQUALL_EF_MAX_BYTES", "0", efMaxBytes, 0);
  ACCEPT("SQUALL_EF_MAX_BYTES", "512M", efMaxBytes, 512u << 20);
  ACCEPT("SQUALL_EF_MAX_BYTES", "1GiB", efMaxBytes, (size_t)1 << 30);
  ACCEPT("SQUALL_EF_MAX_BYTES", "100", efMaxBytes, 100);
  for (int z = 0; z <= 19; z++) {
    char v[16];
    snprintf(v, sizeof v, "%d", z);
    ACCEPT("SQUALL_ZSTD", v, zstdLevel, z);
  }
  ACCEPT("SQUALL_WARMUP", "0", warmup, 0);
  ACCEPT("SQUALL_WARMUP", "10", warmup, 10);
  ACCEPT("SQUALL_WARMUP", "1000000000", warmup, 1000000000);
  ACCEPT("SQUALL_MIN_RANKS", "1", minRanks, 1);
  ACCEPT("SQUALL_MIN_RANKS", "16", minRanks, 16);
  ACCEPT("SQUALL_DEBUG", "WARN", debug, squallLogWarn);
  ACCEPT("SQUALL_DEBUG", "warn", debug, squallLogWarn);
  ACCEPT("SQUALL_DEBUG", "INFO", debug, squallLogInfo);
  ACCEPT("SQUALL_DEBUG", "Info", debug, squallLogInfo);
  ACCEPT("SQUALL_DEBUG", "TRACE", debug, squallLogTrace);
  ACCEPT("SQUALL_DEBUG", "trace", debug, squallLogTrace);
  /* Paths up to 511 characters (the field holds 512 with the NUL). */
  static const char *paths[] = {"", "/tmp/squall.json", "stats-%r.json"};
  for (size_t i = 0; i < 3; i++) {
    squallConfig_t c = unusual();
    ck_assert_int_eq(squallConfigSet(&c, "SQUALL_STATS", paths[i]), squallSuccess);
    ck_assert_str_eq(c.statsPath, paths[i]);
  }
  char longpath[512];
  memset(longpath, 'p', 511);
  longpath[511] = 0;
  squallConfig_t c = unusual();
  ck_assert_int_eq(squallConfigSet(&c, "SQUALL_STATS", longpath), squallSuccess);
  ck_assert_str_eq(c.statsPath, longpath);
}
END_TEST

START_TEST(test_names) {
  /* The prefix may be left out; case does not matter. */
  static const char *names[] = {"SQUALL_EF", "EF", "ef", "squall_ef", "Squall_Ef"};
  for (size_t i = 0; i < 5; i++) {
    squallConfig_t c = defaults();
    ck_assert_msg(squallConfigSet(&c, names[i], "0") == squallSuccess, "name %s refused", names[i]);
    ck_assert_int_eq(c.errorFeedback, 0);
  }
  static const char *bad[] = {"SQUALL_FOO", "", "SQUALL_", "SQUALL_SQUALL_EF", "E F", "compression"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    squallConfig_t c = unusual(), before = unusual();
    ck_assert_int_eq(squallConfigSet(&c, bad[i], "1"), squallInvalidArgument);
    ck_assert(cfg_equal(&c, &before));
    const char *msg = squallGetLastError();
    char quoted[64];
    snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
    ck_assert_msg(strstr(msg, quoted) != NULL, "message '%s' does not name %s", msg, quoted);
    ck_assert_msg(strstr(msg, "SQUALL_COMPRESS") && strstr(msg, "SQUALL_STATS"), "message '%s' does not list the known names", msg);
  }
  /* A long unknown name is echoed in part; the known names still fit. */
  char longname[301];
  memset(longname, 'N', 300);
  longname[300] = 0;
  squallConfig_t c = defaults();
  ck_assert_int_eq(squallConfigSet(&c, longname, "1"), squallInvalidArgument);
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "NNN...'"));
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "SQUALL_STATS"));
  ck_assert_int_eq(squallConfigSet(NULL, "EF", "1"), squallInvalidArgument);
  ck_assert_int_eq(squallConfigSet(&c, NULL, "1"), squallInvalidArgument);
  ck_assert_int_eq(squallConfigSet(&c, "EF", NULL), squallInvalidArgument);
}
END_TEST

/* ---------------------------------------------------------- rejected */

static void reject(const char *name, const char *value, const char *accepted_hint) {
  squallConfig_t c = unusual(), before = unusual();
  squallResult_t r = squallConfigSet(&c, name, value);
  ck_assert_msg(r == squallInvalidArgument, "%s='%s' was accepted (result %d)", name, value, r);
  ck_assert_msg(cfg_equal(&c, &before), "%s='%s' changed the configuration although refused", name, value);
  const char *msg = squallGetLastError();
  char quoted[600];
  snprintf(quoted, sizeof quoted, "'%s'", value);
  ck_assert_msg(strstr(msg, name) != NULL, "message '%s' does not name %s", msg, name);
  if (strlen(value) > 100) snprintf(quoted, sizeof quoted, "'%.100s...'", value); /* echoed in part */
  ck_assert_msg(strstr(msg, quoted) != NULL, "message '%s' does not quote %s", msg, quoted);
  ck_assert_msg(strstr(msg, accepted_hint) != NULL, "message '%s' does not say what is accepted ('%s')", msg,
                accepted_hint);
}

START_TEST(test_reject) {
  static const char *compress[] = {"topk:0", "topk:1.5", "topk:", "topk:abc", "fp4", "topk:-0.5", "topk:nan",
                                   "topk:inf", "topk", "", "topk:0.5x", "fp16 ", "topk:1.0000001", "topk:-0",
                                   "int16", "topk:1e-400", "int8 ", "e4m3"};
  for (size_t i = 0; i < sizeof compress / sizeof compress[0]; i++)
    reject("SQUALL_COMPRESS", compress[i], "topk:<ratio> with 0 < ratio <= 1");
  static const char *values[] = {"bf16", "fp8", "", "FP 16", "16"};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) reject("SQUALL_TOPK_VALUES", values[i], "fp32 or fp16");
  static const char *ef[] = {"2", "-1", "", "yes", "1.0", "1x", "on"};
  for (size_t i = 0; i < sizeof ef / sizeof ef[0]; i++) reject("SQUALL_EF", ef[i], "0 or 1");

  static const char *bucket[] = {"0", "4", "12", "-8", "2097152", "512x", "", "1e3"};
  for (size_t i = 0; i < sizeof bucket / sizeof bucket[0]; i++) reject("SQUALL_BUCKET", bucket[i], "a multiple of 8");
  static const char *accum[] = {"fp16", "", "32", "halff"};
  for (size_t i = 0; i < sizeof accum / sizeof accum[0]; i++) reject("SQUALL_HALF_ACCUM", accum[i], "fp32 or half");
  static const char *sizes[] = {"-1", "1X", "", "K", "1KK", "1T", "1.5M", " 1", "1 K", "18446744073709551616",
                                "17179869184G", "0x10", "1KBB", "M1"};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    reject("SQUALL_MIN_BYTES", sizes[i], "optional K, M or G suffix");
    reject("SQUALL_EF_MAX_BYTES", sizes[i], "optional K, M or G suffix");
  }
  static const char *colls[] = {"", ",", "allreduce,", ",allreduce", "allreduce,,reducescatter", "allgather",
                                "none", "all_reduce", "allreduce reducescatter", "allreduces", "1", "al"};
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++)
    reject("SQUALL_COLLECTIVES", colls[i], "a comma list of allreduce and reducescatter, or all");
  static const char *cost[] = {"1", "", "yes", "onn"};
  for (size_t i = 0; i < sizeof cost / sizeof cost[0]; i++) reject("SQUALL_COST_MODEL", cost[i], "on or off");
  static const char *gbps[] = {"-1", "", "fast", "1e6", "inf", "nan", "10G", "1,5", " 1", "0.0009", "1e-12"};
  for (size_t i = 0; i < sizeof gbps / sizeof gbps[0]; i++)
    reject("SQUALL_LINK_GBPS", gbps[i], "a decimal number of Gbit/s from 0.001 to 100000");
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) reject("SQUALL_CHUNK_BYTES", sizes[i], "optional K, M or G suffix");
  static const char *zstd[] = {"20", "-1", "", "abc", "1.5", "100", "99999999999999999999"};
  for (size_t i = 0; i < sizeof zstd / sizeof zstd[0]; i++) reject("SQUALL_ZSTD", zstd[i], "from 0 to 19");
  static const char *warmup[] = {"-1", "1000000001", "x", "", "1e3"};
  for (size_t i = 0; i < sizeof warmup / sizeof warmup[0]; i++) reject("SQUALL_WARMUP", warmup[i], "non-negative integer");
  static const char *min_ranks[] = {"0", "-1", "", "two", "1.5"};
  for (size_t i = 0; i < sizeof min_ranks / sizeof min_ranks[0]; i++)
    reject("SQUALL_MIN_RANKS", min_ranks[i], "a positive integer");
  static const char *debug[] = {"LOUD", "", "2", "WARNING", "ERROR", "INFO "};
  for (size_t i = 0; i < sizeof debug / sizeof debug[0]; i++) reject("SQUALL_DEBUG", debug[i], "WARN, INFO or TRACE");
  char longpath[513];
  memset(longpath, 'p', 512);
  longpath[512] = 0;
  reject("SQUALL_STATS", longpath, "a file path of at most 511 bytes");
  /* The short name in the call, the full name in the message. */
  squallConfig_t c = defaults();
  ck_assert_int_eq(squallConfigSet(&c, "zstd", "20"), squallInvalidArgument);
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "SQUALL_ZSTD='20'"));
}
END_TEST

/* ------------------------------------------------------------ parsing */

START_TEST(test_parse) {
  squallConfig_t c = defaults();
  ck_assert_int_eq(squallConfigParse(&c, "SQUALL_COMPRESS=topk:0.01 SQUALL_EF=1"), squallSuccess);
  ck_assert_int_eq(c.codec, squallCodecTopk);
  ck_assert(c.topkRatio == 0.01);
  ck_assert_int_eq(c.errorFeedback, 1);

  c = defaults();
  ck_assert_int_eq(squallConfigParse(&c, "compress=fp16;ef=0"), squallSuccess);
  ck_assert_int_eq(c.codec, squallCodecFp16);
  ck_assert_int_eq(c.errorFeedback, 0);

  /* Any run of blanks, tabs, newlines and ';' separates items. */
  c = defaults();
  ck_assert_int_eq(squallConfigParse(&c, " \t\n;compress=bf16;;  topk_values=fp16 \n min_bytes=4K\tzstd=0;"),
                   squallSuccess);
  ck_assert_int_eq(c.codec, squallCodecBf16);
  ck_assert_int_eq(c.topkValues, squallValueFp16);
  ck_assert_uint_eq(c.minBytes, 4096);
  ck_assert_int_eq(c.zstdLevel, 0);

  /* Items apply in order: the last one wins. */
  c = defaults();
  ck_assert_int_eq(squallConfigParse(&c, "ef=0 ef=1 ef=0"), squallSuccess);
  ck_assert_int_eq(c.errorFeedback, 0);
  c = defaults();
  ck_assert_int_eq(squallConfigParse(&c, "compress=topk:0.5 compress=none"), squallSuccess);
  ck_assert_int_eq(c.codec, squallCodecNone);
  ck_assert(c.topkRatio == 0.5);

  /* Applied on top of what is there; empty specs change nothing. */
  squallConfig_t u = unusual(), before = unusual();
  ck_assert_int_eq(squallConfigParse(&u, ""), squallSuccess);
  ck_assert(cfg_equal(&u, &before));
  ck_assert_int_eq(squallConfigParse(&u, " ;; \t"), squallSuccess);
  ck_assert(cfg_equal(&u, &before));
  ck_assert_int_eq(squallConfigParse(&u, "warmup=9"), squallSuccess);
  before.warmup = 9;
  ck_assert(cfg_equal(&u, &before));

  /* Every value accepted on its own is accepted in a spec. */
  c = defaults();
  ck_assert_int_eq(squallConfigParse(&c, "SQUALL_COMPRESS=topk:0.25 SQUALL_TOPK_VALUES=fp16 SQUALL_EF=0 "
                                         "SQUALL_MIN_BYTES=64K SQUALL_ZSTD=19 SQUALL_EF_MAX_BYTES=2G "
                                         "SQUALL_WARMUP=100 SQUALL_DEBUG=TRACE SQUALL_STATS=/tmp/s-%r.json"),
                   squallSuccess);
  ck_assert_int_eq(c.codec, squallCodecTopk);
  ck_assert(c.topkRatio == 0.25);
  ck_assert_int_eq(c.topkValues, squallValueFp16);
  ck_assert_int_eq(c.errorFeedback, 0);
  ck_assert_uint_eq(c.minBytes, 64 * 1024);
  ck_assert_int_eq(c.zstdLevel, 19);
  ck_assert_uint_eq(c.efMaxBytes, (size_t)2 << 30);
  ck_assert_int_eq(c.warmup, 100);
  ck_assert_int_eq(c.debug, squallLogTrace);
  ck_assert_str_eq(c.statsPath, "/tmp/s-%r.json");
}
END_TEST

static void parse_fails(const char *spec, const char *must_mention1, const char *must_mention2) {
  squallConfig_t c = unusual(), before = unusual();
  squallResult_t r = squallConfigParse(&c, spec);
  ck_assert_msg(r == squallInvalidArgument, "'%s' parsed (result %d)", spec, r);
  ck_assert_msg(cfg_equal(&c, &before), "'%s' failed but changed the configuration", spec);
  const char *msg = squallGetLastError();
  ck_assert_msg(strstr(msg, must_mention1) != NULL, "message '%s' lacks '%s'", msg, must_mention1);
  if (must_mention2) ck_assert_msg(strstr(msg, must_mention2) != NULL, "message '%s' lacks '%s'", msg, must_mention2);
}

START_TEST(test_parse_errors) {
  parse_fails("compress", "'compress'", "NAME=VALUE");
  /* The good first item is not applied either: all or nothing. */
  parse_fails("compress=fp16 ef=2", "SQUALL_EF='2'", "0 or 1");
  parse_fails("warmup=1 compress=topk:0", "SQUALL_COMPRESS='topk:0'", "0 < ratio <= 1");
  parse_fails("compress=fp16 bogus=1", "'bogus'", "SQUALL_COMPRESS");
  parse_fails("=1", "''", NULL);
  parse_fails("ef=1 ef", "'ef'", "NAME=VALUE");
  /* A blank ends an item, so a path with a blank leaves a stray word. */
  parse_fails("stats=/tmp/a b", "'b'", "NAME=VALUE");
  char longspec[800] = "stats=";
  memset(longspec + 6, 'x', 700);
  longspec[706] = 0;
  parse_fails(longspec, "too long", NULL);
  squallConfig_t c = defaults();
  ck_assert_int_eq(squallConfigParse(NULL, "ef=1"), squallInvalidArgument);
  ck_assert_int_eq(squallConfigParse(&c, NULL), squallInvalidArgument);
}
END_TEST

/* -------------------------------------------------------- environment */

START_TEST(test_from_env) {
  clear_squall_env(); /* the test runs in its own process (CK_FORK) */
  squallConfig_t c = unusual(), d = defaults();
  ck_assert_int_eq(squallConfigFromEnv(&c), squallSuccess);
  ck_assert(cfg_equal(&c, &d));

  setenv("SQUALL_COMPRESS", "topk:0.05", 1);
  setenv("SQUALL_TOPK_VALUES", "fp16", 1);
  setenv("SQUALL_EF", "0", 1);
  setenv("SQUALL_MIN_BYTES", "64K", 1);
  setenv("SQUALL_ZSTD", "3", 1);
  setenv("SQUALL_EF_MAX_BYTES", "1G", 1);
  setenv("SQUALL_WARMUP", "5", 1);
  setenv("SQUALL_DEBUG", "INFO", 1);
  setenv("SQUALL_STATS", "/tmp/x-%r.json", 1);
  setenv("SQUALL_NOT_AN_OPTION", "whatever", 1); /* unknown variables are not read */
  setenv("squall_ef", "1", 1);                   /* names are exact in the environment */
  ck_assert_int_eq(squallConfigFromEnv(&c), squallSuccess);
  ck_assert_int_eq(c.codec, squallCodecTopk);
  ck_assert(c.topkRatio == 0.05);
  ck_assert_int_eq(c.topkValues, squallValueFp16);
  ck_assert_int_eq(c.errorFeedback, 0);
  ck_assert_uint_eq(c.minBytes, 65536);
  ck_assert_int_eq(c.zstdLevel, 3);
  ck_assert_uint_eq(c.efMaxBytes, (size_t)1 << 30);
  ck_assert_int_eq(c.warmup, 5);
  ck_assert_int_eq(c.debug, squallLogInfo);
  ck_assert_str_eq(c.statsPath, "/tmp/x-%r.json");

  /* Unsetting one brings its default back. */
  unsetenv("SQUALL_ZSTD");
  unsetenv("SQUALL_COMPRESS");
  ck_assert_int_eq(squallConfigFromEnv(&c), squallSuccess);
  ck_assert_int_eq(c.zstdLevel, 1);
  ck_assert_int_eq(c.codec, squallCodecNone);
  ck_assert_int_eq(c.warmup, 5);

  /* A bad value is an error that names the variable and the value. */
  setenv("SQUALL_ZSTD", "20", 1);
  ck_assert_int_eq(squallConfigFromEnv(&c), squallInvalidArgument);
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "SQUALL_ZSTD='20'"));
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "from 0 to 19"));
  setenv("SQUALL_ZSTD", "2", 1);
  setenv("SQUALL_DEBUG", "LOUD", 1);
  ck_assert_int_eq(squallConfigFromEnv(&c), squallInvalidArgument);
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "SQUALL_DEBUG='LOUD'"));
  clear_squall_env();
  ck_assert_int_eq(squallConfigFromEnv(&c), squallSuccess);
  ck_assert(cfg_equal(&c, &d));
}
END_TEST

/* ----------------------------------------------------------- printing */

START_TEST(test_codec_string) {
  char buf[64];
  squallConfig_t c = defaults();
  ck_assert_str_eq(squallConfigCodecString(&c, buf, sizeof buf), "none");
  c.codec = squallCodecFp16;
  ck_assert_str_eq(squallConfigCodecString(&c, buf, sizeof buf), "fp16");
  c.codec = squallCodecBf16;
  ck_assert_str_eq(squallConfigCodecString(&c, buf, sizeof buf), "bf16");
  c.codec = squallCodecTopk;
  c.topkRatio = 0.01;
  ck_assert_str_eq(squallConfigCodecString(&c, buf, sizeof buf), "topk:0.01");
  c.topkRatio = 1.0;
  ck_assert_str_eq(squallConfigCodecString(&c, buf, sizeof buf), "topk:1");
  c.topkRatio = 0.001;
  ck_assert_str_eq(squallConfigCodecString(&c, buf, sizeof buf), "topk:0.001");
  /* every digit that tells two ratios apart, and the spelling reads back
   * as the same ratio (the configuration digest is made of it) */
  c.topkRatio = 0.0123456789;
  ck_assert_str_eq(squallConfigCodecString(&c, buf, sizeof buf), "topk:0.0123456789");
  c.topkRatio = 0.001;
  ck_assert_ptr_eq(squallConfigCodecString(&c, buf, sizeof buf), buf);
  ck_assert_str_eq(squallConfigCodecString(NULL, buf, sizeof buf), "none");
  /* Truncated, still terminated; a zero length writes nothing. */
  c.topkRatio = 0.25;
  ck_assert_str_eq(squallConfigCodecString(&c, buf, 5), "topk");
  buf[0] = 'Z';
  ck_assert_ptr_eq(squallConfigCodecString(&c, buf, 0), buf);
  ck_assert_int_eq(buf[0], 'Z');
  /* What it prints, SQUALL_COMPRESS reads back as the same codec. */
  static const double ratios[] = {0.01, 0.001, 1e-5, 0.5, 1.0, 0.125, 0.3, 2.5e-4,
                                  /* more digits than %g prints */
                                  0.0123456789, 0.1 + 0.2, 1.0 / 3, 0x1.0000000000001p-1, 1e-7};
  for (size_t i = 0; i < sizeof ratios / sizeof ratios[0]; i++) {
    squallConfig_t x = defaults(), y = defaults();
    x.codec = squallCodecTopk;
    x.topkRatio = ratios[i];
    ck_assert_int_eq(squallConfigSet(&y, "SQUALL_COMPRESS", squallConfigCodecString(&x, buf, sizeof buf)),
                     squallSuccess);
    ck_assert_msg(y.codec == squallCodecTopk && y.topkRatio == ratios[i], "'%s' read back as %.17g", buf,
                  y.topkRatio);
  }
  static const squallCodec_t codecs[] = {squallCodecNone, squallCodecFp16, squallCodecBf16,
                                         squallCodecInt8, squallCodecInt4, squallCodecFp8};
  for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++) {
    squallConfig_t x = defaults(), y = unusual();
    x.codec = codecs[i];
    ck_assert_int_eq(squallConfigSet(&y, "COMPRESS", squallConfigCodecString(&x, buf, sizeof buf)), squallSuccess);
    ck_assert_int_eq(y.codec, codecs[i]);
  }
}
END_TEST

static char *run_capture(const char *command, int *status);
static const char *squall_info_path(void);

/* The table as `squall-info -c` prints it, from squallConfigOption(); the
 * man text from squall-info itself. */
static char *print_to_string(const squallConfig_t *c, int man) {
  char *text = NULL;
  size_t len = 0;
  if (man) {
    char cmd[1200];
    int status;
    snprintf(cmd, sizeof cmd, "'%s' --man-environment", squall_info_path());
    text = run_capture(cmd, &status);
    ck_assert_int_eq(status, 0);
    return text;
  }
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  squallOption_t o;
  for (int i = 0; squallConfigOption(c, i, &o) == squallSuccess; i++) {
    const char *q = o.defaultValue[0] ? "" : "\"";
    fprintf(f, "%-20s = %-12s (default %s%s%s)\n", o.name, o.value, q, o.defaultValue, q);
    fprintf(f, "    %s\n    Accepted: %s.\n", o.doc, o.accepted);
  }
  fclose(f);
  return text;
}

static const char *all_names[] = {"SQUALL_COMPRESS", "SQUALL_TOPK_VALUES", "SQUALL_EF",
                                  "SQUALL_MIN_BYTES", "SQUALL_ZSTD", "SQUALL_EF_MAX_BYTES",
                                  "SQUALL_WARMUP", "SQUALL_MIN_RANKS", "SQUALL_DEBUG", "SQUALL_STATS",
                                  "SQUALL_BUCKET", "SQUALL_HALF_ACCUM",
                                  "SQUALL_HIERARCHY", "SQUALL_RANKS_PER_NODE", "SQUALL_CHUNK_BYTES",
                                  "SQUALL_COST_MODEL", "SQUALL_LINK_GBPS", "SQUALL_STATS_INTERVAL",
                                  "SQUALL_SUMMARY_INTERVAL", "SQUALL_COLLECTIVES"};

/* The line of 'name' shows 'value' as its effective value. */
static void expect_row(const char *text, const char *name, const char *value) {
  char row[128];
  snprintf(row, sizeof row, "\n%-20s = %s", name, value);
  ck_assert_msg(strstr(text, row) != NULL || strncmp(text, row + 1, strlen(row + 1)) == 0,
                "no row '%s' in:\n%s", row + 1, text);
}

START_TEST(test_print) {
  squallConfig_t c = defaults();
  char *text = print_to_string(&c, 0);
  expect_row(text, "SQUALL_COMPRESS", "none ");
  expect_row(text, "SQUALL_TOPK_VALUES", "fp32 ");
  expect_row(text, "SQUALL_EF", "1 ");
  expect_row(text, "SQUALL_MIN_BYTES", "1M ");
  expect_row(text, "SQUALL_ZSTD", "1 ");
  expect_row(text, "SQUALL_EF_MAX_BYTES", "0 ");
  expect_row(text, "SQUALL_WARMUP", "0 ");
  expect_row(text, "SQUALL_MIN_RANKS", "2 ");
  expect_row(text, "SQUALL_DEBUG", "WARN ");
  ck_assert_ptr_nonnull(strstr(text, "(default 1M)"));
  ck_assert_ptr_nonnull(strstr(text, "(default \"\")"));
  size_t accepted = 0;
  for (const char *p = text; (p = strstr(p, "Accepted: ")) != NULL; p++) accepted++;
  ck_assert_uint_eq(accepted, sizeof all_names / sizeof all_names[0]);
  free(text);

  ck_assert_int_eq(squallConfigParse(&c, "compress=topk:0.25 topk_values=fp16 ef=0 min_bytes=64K zstd=19 "
                                         "ef_max_bytes=3G warmup=7 debug=trace stats=/tmp/q.json"),
                   squallSuccess);
  text = print_to_string(&c, 0);
  expect_row(text, "SQUALL_COMPRESS", "topk:0.25 ");
  expect_row(text, "SQUALL_TOPK_VALUES", "fp16 ");
  expect_row(text, "SQUALL_EF", "0 ");
  expect_row(text, "SQUALL_MIN_BYTES", "64K ");
  expect_row(text, "SQUALL_ZSTD", "19 ");
  expect_row(text, "SQUALL_EF_MAX_BYTES", "3G ");
  expect_row(text, "SQUALL_WARMUP", "7 ");
  expect_row(text, "SQUALL_DEBUG", "TRACE ");
  expect_row(text, "SQUALL_STATS", "/tmp/q.json");
  free(text);

  /* Printed sizes read back as the same size. */
  static const size_t sizes[] = {0, 1, 1000, 1024, 1536, 1 << 20, 3u << 20, (size_t)5 << 30, 123456789};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    squallConfig_t x = defaults(), y = defaults();
    x.minBytes = sizes[i];
    text = print_to_string(&x, 0);
    const char *row = strstr(text, "SQUALL_MIN_BYTES");
    ck_assert_ptr_nonnull(row);
    char val[64];
    ck_assert_int_eq(sscanf(row, "SQUALL_MIN_BYTES = %63s", val), 1);
    ck_assert_int_eq(squallConfigSet(&y, "SQUALL_MIN_BYTES", val), squallSuccess);
    ck_assert_msg(y.minBytes == sizes[i], "%zu printed as %s", sizes[i], val);
    free(text);
  }

  text = print_to_string(NULL, 1);
  ck_assert_ptr_nonnull(strstr(text, ".SH ENVIRONMENT\n"));
  for (size_t i = 0; i < 9; i++) {
    char b[64];
    snprintf(b, sizeof b, ".B %s\n", all_names[i]);
    ck_assert_msg(strstr(text, b) != NULL, "man text lacks %s", b);
  }
  ck_assert_ptr_nonnull(strstr(text, "Default: 1M."));
  ck_assert_ptr_nonnull(strstr(text, "Default: unset."));
  ck_assert_ptr_nonnull(strstr(text, "\\-")); /* hyphens escaped for man(7) */
  free(text);
}
END_TEST

START_TEST(test_set_get_config) {
  clear_squall_env();
  squallConfig_t c = defaults(), got;
  c.codec = squallCodecTopk;
  c.topkRatio = 0.0;
  ck_assert_int_eq(squallSetConfig(&c), squallInvalidArgument);
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "topkRatio"));
  c.topkRatio = 0.02;
  c.zstdLevel = 4;
  ck_assert_int_eq(squallSetConfig(&c), squallSuccess);
  ck_assert_int_eq(squallGetConfig(&got), squallSuccess);
  ck_assert(cfg_equal(&c, &got));
  ck_assert_int_eq(squallSetConfig(NULL), squallInvalidArgument);
  ck_assert_int_eq(squallGetConfig(NULL), squallInvalidArgument);
}
END_TEST

static TCase *strict_tcase(void); /* at the end of the file */
static TCase *agree_tcase(void);
static TCase *sized_tcase(void);

/* One TCase per feature, so that CK_RUN_CASE=<name> runs just that one.
 * Timeouts leave room for a loaded machine (Check's default is 4 s). */
static Suite *config_suite(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("defaults");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_defaults);
  suite_add_tcase(s, tc);
  tc = tcase_create("accept");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_accept_compress);
  tcase_add_test(tc, test_accept_others);
  suite_add_tcase(s, tc);
  tc = tcase_create("names");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_names);
  suite_add_tcase(s, tc);
  tc = tcase_create("reject");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_reject);
  suite_add_tcase(s, tc);
  tc = tcase_create("parse");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_parse);
  tcase_add_test(tc, test_parse_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("environment");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_from_env);
  suite_add_tcase(s, tc);
  tc = tcase_create("set-get");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_set_get_config);
  suite_add_tcase(s, tc);
  tc = tcase_create("printing");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_codec_string);
  tcase_add_test(tc, test_print);
  suite_add_tcase(s, tc);
  suite_add_tcase(s, strict_tcase());
  suite_add_tcase(s, agree_tcase());
  suite_add_tcase(s, sized_tcase());
  return s;
}

int main(void) { return tu_run(config_suite()); }

/* ------------------------------------------------------------- strict
 * What review found: squallSetConfig took out-of-range fields (and the
 * printer then read out of bounds), the parsers took undocumented
 * spellings, SQUALL_MIN_BYTES refused 64MiB, and an unwritable SQUALL_STATS
 * went unnoticed until a reasonless warning at exit. */
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/size.h"
#include "common/stats.h"

/* squall-info of this build tree (make check exports SQUALL_BUILDDIR;
 * otherwise the tests run from the build directory). */
static const char *squall_info_path(void) {
  static char path[1024];
  const char *b = getenv("SQUALL_BUILDDIR");
  snprintf(path, sizeof path, "%s/squall-info", b && *b ? b : ".");
  return path;
}

/* Runs command with sh, returns its standard output and error (malloc'd)
 * and its exit status in *status. */
static char *run_capture(const char *command, int *status) {
  char full[2048];
  snprintf(full, sizeof full, "%s 2>&1", command);
  FILE *p = popen(full, "r");
  ck_assert_ptr_nonnull(p);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) fwrite(buf, 1, n, f);
  fclose(f);
  int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return text;
}

/* squallSetConfig refuses cfg, names 'field' (as "field=") in the message,
 * and leaves the process-wide configuration as it was. */
static void set_config_fails(const squallConfig_t *cfg, const char *field) {
  squallConfig_t before, after;
  ck_assert_int_eq(squallGetConfig(&before), squallSuccess);
  ck_assert_msg(squallSetConfig(cfg) == squallInvalidArgument, "squallSetConfig took a bad %s", field);
  const char *msg = squallGetLastError();
  ck_assert_msg(strstr(msg, field) != NULL, "message '%s' does not name %s", msg, field);
  ck_assert_int_eq(squallGetConfig(&after), squallSuccess);
  ck_assert(cfg_equal(&before, &after) && before.minRanks == after.minRanks);
}

START_TEST(test_strict_set_config) {
  clear_squall_env();
  squallConfig_t good = defaults(), c;
  ck_assert_int_eq(squallSetConfig(&good), squallSuccess);
#define BAD(member, value, field) \
  do {                            \
    c = good;                     \
    c.member = (value);           \
    set_config_fails(&c, field);  \
  } while (0)
  BAD(debug, (squallLogLevel_t)7, "debug=7");
  BAD(debug, (squallLogLevel_t)-1, "debug=-1");
  BAD(warmup, -1, "warmup=-1");
  BAD(warmup, 1000000001, "warmup=1000000001");
  BAD(zstdLevel, 99, "zstdLevel=99");
  BAD(zstdLevel, -1, "zstdLevel=-1");
  BAD(codec, (squallCodec_t)9, "codec=9");
  BAD(topkValues, (squallValueType_t)2, "topkValues=2");
  BAD(errorFeedback, 2, "errorFeedback=2");
  BAD(errorFeedback, -1, "errorFeedback=-1");
  BAD(minRanks, 0, "minRanks=0");
  BAD(topkRatio, 1.5, "topkRatio=1.5");
  BAD(topkRatio, -0.0, "topkRatio");
  BAD(topkRatio, NAN, "topkRatio");
  BAD(collectives, 0, "collectives=0"); /* never empty: SQUALL_COMPRESS=none turns squall off */
  BAD(collectives, 4, "collectives=4");
  BAD(collectives, -1, "collectives=-1");
#undef BAD
  c = good;
  memset(c.statsPath, 'x', sizeof c.statsPath); /* no terminating NUL */
  set_config_fails(&c, "statsPath");
  /* The extremes of every range are taken. */
  c = good;
  c.debug = squallLogTrace;
  c.warmup = 1000000000;
  c.zstdLevel = 19;
  c.minRanks = 1;
  c.topkRatio = 1.0;
  c.codec = squallCodecTopk;
  c.topkValues = squallValueFp16;
  c.errorFeedback = 0;
  c.minBytes = SIZE_MAX;
  c.efMaxBytes = SIZE_MAX;
  ck_assert_msg(squallSetConfig(&c) == squallSuccess, "%s", squallGetLastError());
  ck_assert_int_eq(squallSetConfig(&good), squallSuccess);
}
END_TEST

START_TEST(test_strict_option) {
  squallOption_t o;
  int n = 0;
  while (squallConfigOption(NULL, n, &o) == squallSuccess) {
    ck_assert_str_eq(o.name, all_names[n]);
    ck_assert(o.field[0] && o.accepted[0] && o.doc[0]);
    /* With no configuration the value is the default. */
    ck_assert_str_eq(o.value, o.defaultValue);
    n++;
  }
  ck_assert_int_eq(n, (int)(sizeof all_names / sizeof all_names[0]));
  char past[32];
  snprintf(past, sizeof past, "no option %d", n);
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), past));
  ck_assert_int_eq(squallConfigOption(NULL, -1, &o), squallInvalidArgument);
  ck_assert_int_eq(squallConfigOption(NULL, 0, NULL), squallInvalidArgument);

  /* Every value read back through its variable gives the same configuration. */
  squallConfig_t c = unusual(), back = defaults();
  c.codec = squallCodecTopk;
  c.minRanks = 5;
  for (int i = 0; squallConfigOption(&c, i, &o) == squallSuccess; i++)
    ck_assert_msg(squallConfigSet(&back, o.name, o.value) == squallSuccess, "%s='%s' does not read back: %s",
                  o.name, o.value, squallGetLastError());
  ck_assert(cfg_equal(&c, &back) && back.minRanks == 5);

  /* Out-of-range fields print as invalid, without reading out of bounds. */
  c = defaults();
  c.debug = (squallLogLevel_t)7;
  c.codec = (squallCodec_t)-3;
  c.topkValues = (squallValueType_t)1000000;
  memset(c.statsPath, 'x', sizeof c.statsPath);
  for (int i = 0; squallConfigOption(&c, i, &o) == squallSuccess; i++) {
    if (!strcmp(o.name, "SQUALL_DEBUG")) ck_assert_ptr_nonnull(strstr(o.value, "invalid (debug=7"));
    if (!strcmp(o.name, "SQUALL_COMPRESS")) ck_assert_ptr_nonnull(strstr(o.value, "invalid (codec=-3"));
    if (!strcmp(o.name, "SQUALL_TOPK_VALUES")) ck_assert_ptr_nonnull(strstr(o.value, "invalid (topkValues=1000000"));
    if (!strcmp(o.name, "SQUALL_STATS")) ck_assert_uint_eq(strlen(o.value), sizeof o.value - 1);
  }
}
END_TEST

START_TEST(test_strict_spellings) {
  /* strtod and strtol took blanks, signs, hex and trailing junk. */
  static const char *compress[] = {"topk: 0.5", "topk:0x1p-1", "topk:+0.5", "topk:0.5 ", "topk:\t0.5",
                                   "topk:1e", "topk:.", "topk:e-1", "topk:0.5e+", "topk:INF", "topk:0,5"};
  for (size_t i = 0; i < sizeof compress / sizeof compress[0]; i++)
    reject("SQUALL_COMPRESS", compress[i], "topk:<ratio> with 0 < ratio <= 1");
  static const char *ints[] = {" 3", "3 ", "+3", "\t3", "0x3", "3\n", "-0"};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    reject("SQUALL_ZSTD", ints[i], "from 0 to 19");
    reject("SQUALL_WARMUP", ints[i], "non-negative integer");
    reject("SQUALL_MIN_RANKS", ints[i], "a positive integer");
  }
  static const char *ef[] = {" 1", "+1", "1 ", "01x"};
  for (size_t i = 0; i < sizeof ef / sizeof ef[0]; i++) reject("SQUALL_EF", ef[i], "0 or 1");
  /* Sizes: an integer and one of K, M, G, KiB, MiB, GiB, KB, MB, GB in any case. */
  static const char *sizes[] = {"1 KiB", "1B", "1KiBB", "1Ki", "1iB", "1e3", "+1", " 1", "1G ", "1.5M", "1kbit",
                                "17179869184GiB"};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    reject("SQUALL_MIN_BYTES", sizes[i], "optional K, M or G suffix");
    reject("SQUALL_EF_MAX_BYTES", sizes[i], "optional K, M or G suffix");
  }
  ACCEPT("SQUALL_MIN_BYTES", "64MiB", minBytes, 64u << 20);
  ACCEPT("SQUALL_MIN_BYTES", "64M", minBytes, 64u << 20);
  ACCEPT("SQUALL_MIN_BYTES", "3GiB", minBytes, (size_t)3 << 30);
  ACCEPT("SQUALL_MIN_BYTES", "0KiB", minBytes, 0);
  ACCEPT("SQUALL_EF_MAX_BYTES", "2KiB", efMaxBytes, 2048);
  ACCEPT("SQUALL_ZSTD", "07", zstdLevel, 7);
  squallConfig_t t = unusual();
  ck_assert_int_eq(squallConfigSet(&t, "SQUALL_COMPRESS", "topk:5E-1"), squallSuccess);
  ck_assert(t.codec == squallCodecTopk && t.topkRatio == 0.5);

  /* The parser itself, as squall-bench uses it. */
  /* clang-format off */
  static const struct {
    const char *text;
    unsigned long long bytes;
  } ok[] = {{"0", 0},           {"1", 1},          {"1K", 1024},       {"1KiB", 1024},
            {"5M", 5ull << 20}, {"5MiB", 5ull << 20}, {"7G", 7ull << 30}, {"7GiB", 7ull << 30},
            {"0010", 10},       {"1k", 1024},      {"64m", 64ull << 20}, {"1g", 1ull << 30},
            {"1KB", 1024},      {"1kb", 1024},     {"64mb", 64ull << 20}, {"1Kib", 1024}, {"1KIB", 1024},
            {"2GB", 2ull << 30}};
  /* clang-format on */
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    size_t v = 12345;
    ck_assert_msg(squall__parse_size(ok[i].text, &v) == 0, "'%s' refused", ok[i].text);
    ck_assert_uint_eq(v, ok[i].bytes);
  }
  size_t v = 777;
  ck_assert_int_eq(squall__parse_size("", &v), -1);
  ck_assert_int_eq(squall__parse_size("K", &v), -1);
  ck_assert_int_eq(squall__parse_size("1T", &v), -1);
  ck_assert_int_eq(squall__parse_size("1.5M", &v), -1);
  ck_assert_int_eq(squall__parse_size(NULL, &v), -1);
  if (sizeof(size_t) == 8) {
    ck_assert_int_eq(squall__parse_size("18446744073709551615", &v), 0);
    ck_assert_uint_eq(v, SIZE_MAX);
    v = 777;
    ck_assert_int_eq(squall__parse_size("18446744073709551616", &v), -1);
    ck_assert_int_eq(squall__parse_size("17179869184G", &v), -1);
    ck_assert_int_eq(squall__parse_size("17592186044416M", &v), -1);
    ck_assert_uint_eq(v, 777); /* unchanged on failure */
  }
}
END_TEST

/* The SQUALL_STATS writer says why it could not write. */
START_TEST(test_strict_stats_reason) {
  clear_squall_env();
  squallConfig_t c = defaults();
  strcpy(c.statsPath, "/nonexistent-squall-dir/st.json");
  ck_assert_int_eq(squallSetConfig(&c), squallSuccess);
  char log[] = "/tmp/squall-test-config-XXXXXX";
  int fd = mkstemp(log);
  ck_assert_int_ge(fd, 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  squall__stats_write_file();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char text[2048] = "";
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  unlink(log);
  ck_assert_int_gt(n, 0);
  text[n] = 0;
  ck_assert_msg(strstr(text, "'/nonexistent-squall-dir/st.json.0'") != NULL, "no path in '%s'", text);
  ck_assert_msg(strstr(text, "No such file or directory") != NULL, "no reason in '%s'", text);
}
END_TEST

/* squall-info checks SQUALL_STATS now, not at exit, and reads the sizes
 * the library reads. */
START_TEST(test_strict_info) {
  char cmd[1600];
  int status;
  char *out;
  snprintf(cmd, sizeof cmd, "SQUALL_STATS=/nonexistent-squall-dir/st.%%r.json '%s' -c", squall_info_path());
  out = run_capture(cmd, &status);
  ck_assert_msg(status == 1, "exit status %d for an unwritable SQUALL_STATS:\n%s", status, out);
  ck_assert_msg(strstr(out, "invalid configuration: SQUALL_STATS='/nonexistent-squall-dir/st.%r.json' cannot "
                            "be written") != NULL,
                "no reason in:\n%s", out);
  ck_assert_msg(strstr(out, "'/nonexistent-squall-dir/st.0.json'") && strstr(out, "No such file or directory"),
                "no file or errno in:\n%s", out);
  free(out);

  snprintf(cmd, sizeof cmd, "SQUALL_STATS=/etc/passwd/st.json '%s'", squall_info_path());
  out = run_capture(cmd, &status);
  ck_assert_msg(status == 1 && strstr(out, "is not a directory"), "status %d:\n%s", status, out);
  free(out);

  char dir[] = "/tmp/squall-test-info-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "SQUALL_STATS=%s/st.json SQUALL_MIN_BYTES=64MiB '%s' -c", dir, squall_info_path());
  out = run_capture(cmd, &status);
  ck_assert_msg(status == 0, "status %d for a writable SQUALL_STATS:\n%s", status, out);
  ck_assert_msg(strstr(out, "\nSQUALL_MIN_BYTES     = 64M "), "64MiB not shown as 64M:\n%s", out);
  free(out);
  rmdir(dir);

  snprintf(cmd, sizeof cmd, "SQUALL_ZSTD=' 3' '%s'", squall_info_path());
  out = run_capture(cmd, &status);
  ck_assert_msg(status == 1 && strstr(out, "SQUALL_ZSTD=' 3' is invalid"), "status %d:\n%s", status, out);
  free(out);
}
END_TEST

static TCase *strict_tcase(void) {
  TCase *tc = tcase_create("strict");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_strict_set_config);
  tcase_add_test(tc, test_strict_option);
  tcase_add_test(tc, test_strict_spellings);
  tcase_add_test(tc, test_strict_stats_reason);
  tcase_add_test(tc, test_strict_info);
  return tc;
}

/* ------------------------------------------------------------- agree
 * What the ranks compare in the call header comes from the table: every
 * row is marked either agree or local, every agree row is in the digest,
 * no local row is, and the description and digest are those the engine
 * made before the table made them (bit for bit: the digest goes on the
 * wire between ranks of different builds of one release). */
#include "common/internal.h"

START_TEST(test_agree_table) {
  char why[256] = "";
  ck_assert_msg(squall__config_table_check(why, sizeof why) == 0, "%s", why);
  /* squallOption_t says which: the agree rows are exactly these. */
  static const char *const agree[] = {"SQUALL_COMPRESS", "SQUALL_TOPK_VALUES", "SQUALL_EF", "SQUALL_MIN_BYTES",
                                      "SQUALL_ZSTD", "SQUALL_WARMUP", "SQUALL_MIN_RANKS", "SQUALL_BUCKET",
                                      "SQUALL_HALF_ACCUM", "SQUALL_HIERARCHY", "SQUALL_RANKS_PER_NODE",
                                      "SQUALL_CHUNK_BYTES", "SQUALL_COST_MODEL", "SQUALL_LINK_GBPS",
                                      "SQUALL_COLLECTIVES"};
  squallOption_t o = SQUALL_OPTION_INITIALIZER;
  size_t n_agree = 0;
  for (int i = 0; squallConfigOption(NULL, i, &o) == squallSuccess; i++) {
    int listed = 0;
    for (size_t j = 0; j < sizeof agree / sizeof agree[0]; j++) listed |= !strcmp(agree[j], o.name);
    ck_assert_msg(o.agree == listed, "%s: agree is %d", o.name, o.agree);
    n_agree += (size_t)o.agree;
  }
  ck_assert_uint_eq(n_agree, sizeof agree / sizeof agree[0]);
}
END_TEST

/* The engine's description and digest before they came from the table,
 * with collectives=, which SQUALL_COLLECTIVES added after it. */
START_TEST(test_agree_legacy) {
  static const struct {
    const char *spec, *description;
    int64_t digest;
  } want[] = {
      {"", "compress=none values=fp32 ef=1 min_bytes=1048576 zstd=1 warmup=0 min_ranks=2 bucket=512 half_accum=0 "
           "hierarchy=auto rpn=0 chunk=4194304 cost=1 link=0 collectives=1",
       1789189814132419619LL},
      {"compress=topk:0.01", "compress=topk:0.01 values=fp32 ef=1 min_bytes=1048576 zstd=1 warmup=0 min_ranks=2 "
                             "bucket=512 half_accum=0 hierarchy=auto rpn=0 chunk=4194304 cost=1 link=0 collectives=1 ratio=0.01",
       1348776838783035675LL},
      {"compress=topk:0.0123456789 topk_values=fp16 ef=0 min_bytes=12345 zstd=7 warmup=3 min_ranks=5",
       "compress=topk:0.0123456789 values=fp16 ef=0 min_bytes=12345 zstd=7 warmup=3 min_ranks=5 bucket=512 "
       "half_accum=0 hierarchy=auto rpn=0 chunk=4194304 cost=1 link=0 collectives=1 ratio=0.0123456789",
       504475538388397235LL},
      {"compress=int8 bucket=64 half_accum=half hierarchy=flat ranks_per_node=3 chunk_bytes=777 cost_model=off "
       "link_gbps=2.5",
       "compress=int8 values=fp32 ef=1 min_bytes=1048576 zstd=1 warmup=0 min_ranks=2 bucket=64 half_accum=1 "
       "hierarchy=flat rpn=3 chunk=777 cost=0 link=2.5 collectives=1",
       2076067795112898375LL},
      {"compress=bf16 ef_max_bytes=999 debug=trace stats=/x",
       "compress=bf16 values=fp32 ef=1 min_bytes=1048576 zstd=1 warmup=0 min_ranks=2 bucket=512 half_accum=0 "
       "hierarchy=auto rpn=0 chunk=4194304 cost=1 link=0 collectives=1",
       4129191773930988656LL},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    squallConfig_t c = defaults();
    ck_assert_int_eq(squallConfigParse(&c, want[i].spec), squallSuccess);
    char d[SQ_CONFIG_DESC_BYTES];
    squall__config_describe(&c, d, sizeof d);
    ck_assert_str_eq(d, want[i].description);
    ck_assert_msg(squall__config_digest(&c) == want[i].digest, "'%s': digest %lld", want[i].spec,
                  (long long)squall__config_digest(&c));
    /* whatever the rounding mode of this rank */
    fesetround(FE_UPWARD);
    squall__config_describe(&c, d, sizeof d);
    int64_t up = squall__config_digest(&c);
    fesetround(FE_TONEAREST);
    ck_assert_str_eq(d, want[i].description);
    ck_assert(up == want[i].digest);
  }
  /* Members out of range (squallSetConfig refuses them, but the text is
   * the old one there too, never read out of bounds). */
  squallConfig_t c = defaults();
  c.codec = (squallCodec_t)9;
  c.topkValues = (squallValueType_t)-1;
  c.hierarchy = (squallHierarchy_t)5;
  c.halfAccum = (squallHalfAccum_t)-1;
  c.errorFeedback = -1;
  c.costModel = 7;
  c.minBytes = SIZE_MAX;
  char odd[SQ_CONFIG_DESC_BYTES];
  squall__config_describe(&c, odd, sizeof odd);
  if (sizeof(size_t) == 8) {
    ck_assert_str_eq(odd, "compress=none values=fp32 ef=-1 min_bytes=18446744073709551615 zstd=1 warmup=0 "
                          "min_ranks=2 bucket=512 half_accum=-1 hierarchy=auto rpn=0 chunk=4194304 cost=7 link=0 "
                          "collectives=1");
    ck_assert(squall__config_digest(&c) == 36559429462304380LL);
  }
  /* Truncated, still terminated. */
  c = defaults();
  char d[12];
  squall__config_describe(&c, d, sizeof d);
  ck_assert_str_eq(d, "compress=no");
}
END_TEST

/* Values tried for each option until one is accepted and changes it. */
static const char *const other_values[] = {"fp16", "topk:0.5", "int8", "0", "1", "2", "3", "64", "128", "7", "1K",
                                           "flat", "half", "off", "on", "INFO", "2.5", "fp32", "auto", "/tmp/x",
                                           "all"};

/* Sets option o of *c to another value it accepts; 0 when none is found. */
static int change(squallConfig_t *c, const squallOption_t *o) {
  for (size_t j = 0; j < sizeof other_values / sizeof other_values[0]; j++) {
    squallConfig_t t = *c;
    squallOption_t before = SQUALL_OPTION_INITIALIZER, after = SQUALL_OPTION_INITIALIZER;
    int i = 0;
    while (squallConfigOption(c, i, &before) == squallSuccess && strcmp(before.name, o->name)) i++;
    if (squallConfigSet(&t, o->name, other_values[j]) != squallSuccess) continue;
    ck_assert_int_eq(squallConfigOption(&t, i, &after), squallSuccess);
    if (strcmp(before.value, after.value)) {
      *c = t;
      return 1;
    }
  }
  return 0;
}

START_TEST(test_agree_digest) {
  /* From the defaults and from a configuration unlike them. */
  squallConfig_t bases[2] = {defaults(), unusual()};
  bases[1].codec = squallCodecTopk;
  for (int b = 0; b < 2; b++) {
    int64_t d0 = squall__config_digest(&bases[b]);
    squallOption_t o = SQUALL_OPTION_INITIALIZER;
    for (int i = 0; squallConfigOption(&bases[b], i, &o) == squallSuccess; i++) {
      squallConfig_t c = bases[b];
      ck_assert_msg(change(&c, &o), "%s: no other value found to try", o.name);
      int64_t d1 = squall__config_digest(&c);
      if (o.agree)
        ck_assert_msg(d1 != d0, "%s is marked agree, but changing it does not change the digest", o.name);
      else
        ck_assert_msg(d1 == d0, "%s is marked local, but changing it changes the digest", o.name);
    }
  }
  /* The top-k ratio counts in full where top-k is the codec, only there. */
  squallConfig_t a = defaults(), b = defaults();
  ck_assert_int_eq(squallConfigParse(&a, "compress=topk:0.1"), squallSuccess);
  ck_assert_int_eq(squallConfigParse(&b, "compress=topk:0.1"), squallSuccess);
  b.topkRatio = nextafter(0.1, 1.0);
  ck_assert(squall__config_digest(&a) != squall__config_digest(&b));
  a.codec = b.codec = squallCodecFp16;
  ck_assert(squall__config_digest(&a) == squall__config_digest(&b));
}
END_TEST

static TCase *agree_tcase(void) {
  TCase *tc = tcase_create("agree");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_agree_table);
  tcase_add_test(tc, test_agree_legacy);
  tcase_add_test(tc, test_agree_digest);
  return tc;
}

/* ------------------------------------------------------------- sized
 * The library writes no more of a caller's struct than the caller's size
 * says, and takes a struct whose magic is not set as the first layout.
 * The calls name the functions in parentheses, past squall.h's macros
 * that set the head from this file's sizeof (which the last part checks). */
#define SLACK 64

START_TEST(test_sized_config) {
  /* A caller built with a later squall.h: a longer struct, whose tail
   * this library leaves alone, and whose head it keeps. */
  unsigned char big[sizeof(squallConfig_t) + SLACK];
  memset(big, 0xab, sizeof big);
  squallConfig_t h = SQUALL_CONFIG_INITIALIZER;
  h.size = sizeof big;
  h.version = SQUALL_VERSION_CODE + 1;
  memcpy(big, &h, 16);
  squallConfig_t *c = (squallConfig_t *)(void *)big;
  ck_assert_int_eq((squallConfigDefault)(c), squallSuccess);
  ck_assert_int_eq((squallConfigSet)(c, "compress", "fp16"), squallSuccess);
  ck_assert_int_eq((squallConfigParse)(c, "ef=0"), squallSuccess);
  ck_assert(c->codec == squallCodecFp16 && c->errorFeedback == 0);
  clear_squall_env();
  ck_assert_int_eq(squallSetConfig(c), squallSuccess);
  ck_assert_int_eq((squallGetConfig)(c), squallSuccess);
  ck_assert(c->codec == squallCodecFp16 && c->errorFeedback == 0);
  ck_assert_int_eq((squallConfigFromEnv)(c), squallSuccess);
  ck_assert(c->codec == squallCodecNone && c->errorFeedback == 1);
  for (size_t i = sizeof(squallConfig_t); i < sizeof big; i++) ck_assert_int_eq(big[i], 0xab);
  ck_assert_uint_eq(c->size, sizeof big);
  ck_assert_uint_eq(c->version, SQUALL_VERSION_CODE + 1);
  ck_assert_uint_eq(c->magic, SQUALL_CONFIG_MAGIC);
  squallOption_t o = SQUALL_OPTION_INITIALIZER;
  ck_assert_int_eq(squallConfigOption(c, 0, &o), squallSuccess);

  /* A struct whose magic is not set (zeroed, as another language passes
   * it): the first layout, and the library's head. */
  squallConfig_t old;
  memset(&old, 0, sizeof old);
  ck_assert_int_eq((squallConfigDefault)(&old), squallSuccess);
  /* the first layout ends at linkGbps; members appended after it are left alone */
  ck_assert_uint_eq(old.size, offsetof(squallConfig_t, linkGbps) + sizeof old.linkGbps);
  ck_assert_uint_eq(old.magic, SQUALL_CONFIG_MAGIC);
  ck_assert_uint_eq(old.version, SQUALL_VERSION_CODE);
  ck_assert_uint_eq(old.minBytes, 1u << 20);

  /* A head that claims less than every squallConfig_t has is refused. */
  squallConfig_t small = SQUALL_CONFIG_INITIALIZER, before;
  ck_assert_int_eq(squallConfigDefault(&small), squallSuccess);
  small.size = 16;
  before = small;
  ck_assert_int_eq((squallConfigDefault)(&small), squallInvalidArgument);
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "SQUALL_CONFIG_INITIALIZER"));
  ck_assert_int_eq((squallConfigSet)(&small, "ef", "0"), squallInvalidArgument);
  ck_assert_int_eq((squallConfigParse)(&small, "ef=0"), squallInvalidArgument);
  ck_assert_int_eq((squallGetConfig)(&small), squallInvalidArgument);
  ck_assert_int_eq(squallSetConfig(&small), squallInvalidArgument);
  ck_assert_int_eq(squallConfigOption(&small, 0, &o), squallInvalidArgument);
  ck_assert(cfg_equal(&small, &before) && small.size == 16);

  /* Through squall.h's macros, whatever was on the stack: this file's size. */
  squallConfig_t stale;
  memset(&stale, 0, sizeof stale);
  stale.size = 16;
  stale.magic = SQUALL_CONFIG_MAGIC; /* as an earlier struct may leave it */
  ck_assert_int_eq(squallConfigDefault(&stale), squallSuccess);
  ck_assert_uint_eq(stale.size, sizeof stale);
  stale.size = 16;
  ck_assert_int_eq(squallGetConfig(&stale), squallSuccess);
  ck_assert_uint_eq(stale.size, sizeof stale);
}
END_TEST

START_TEST(test_sized_stats) {
  unsigned char big[sizeof(squallStats_t) + SLACK];
  memset(big, 0xab, sizeof big);
  squallStats_t h = SQUALL_STATS_INITIALIZER;
  h.size = sizeof big;
  memcpy(big, &h, 16);
  squallStats_t *s = (squallStats_t *)(void *)big;
  squallStatsReset();
  ck_assert_int_eq((squallStatsGet)(s), squallSuccess);
  for (size_t i = sizeof(squallStats_t); i < sizeof big; i++) ck_assert_int_eq(big[i], 0xab);
  ck_assert_uint_eq(s->size, sizeof big);
  ck_assert_uint_eq(s->calls, 0);
  /* the slots past the last reason are there, and 0 */
  for (int r = 0; r < SQUALL_PASS_REASONS_MAX; r++) ck_assert_uint_eq(s->passthrough[r], 0);
  for (int r = 0; r < SQUALL_FLAT_REASONS_MAX; r++) ck_assert_uint_eq(s->flat[r], 0);

  squallStats_t old;
  memset(&old, 0, sizeof old);
  ck_assert_int_eq((squallStatsGet)(&old), squallSuccess);
  ck_assert_uint_eq(old.size, sizeof old);
  ck_assert_uint_eq(old.magic, SQUALL_STATS_MAGIC);

  squallStats_t small = SQUALL_STATS_INITIALIZER;
  small.size = sizeof small - 8;
  ck_assert_int_eq((squallStatsGet)(&small), squallInvalidArgument);
  ck_assert_ptr_nonnull(strstr(squallGetLastError(), "SQUALL_STATS_INITIALIZER"));
  ck_assert_int_eq(squallStatsGet(&small), squallSuccess); /* the macro sizes it */
  ck_assert_uint_eq(small.size, sizeof small);
}
END_TEST

START_TEST(test_sized_option) {
  unsigned char big[sizeof(squallOption_t) + SLACK];
  memset(big, 0xab, sizeof big);
  squallOption_t h = SQUALL_OPTION_INITIALIZER;
  h.size = sizeof big;
  memcpy(big, &h, 16);
  squallOption_t *o = (squallOption_t *)(void *)big;
  ck_assert_int_eq((squallConfigOption)(NULL, 0, o), squallSuccess);
  ck_assert_str_eq(o->name, "SQUALL_COMPRESS");
  ck_assert_int_eq(o->agree, 1);
  for (size_t i = sizeof(squallOption_t); i < sizeof big; i++) ck_assert_int_eq(big[i], 0xab);
  squallOption_t small = SQUALL_OPTION_INITIALIZER;
  small.size = 8;
  ck_assert_int_eq((squallConfigOption)(NULL, 0, &small), squallInvalidArgument);
}
END_TEST

static TCase *sized_tcase(void) {
  TCase *tc = tcase_create("sized");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_sized_config);
  tcase_add_test(tc, test_sized_stats);
  tcase_add_test(tc, test_sized_option);
  return tc;
}

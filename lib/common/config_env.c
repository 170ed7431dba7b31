/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * config_env.c - never a silent typo: finds the SQUALL_ variables in the
 * environment that are neither options nor a tool's, with the option each
 * may have meant. The one check behind the library's warning and the
 * tools' refusal (config_env.h); it logs nothing itself, so that the tools
 * compile it without the library's internals.
 */
#define _DEFAULT_SOURCE /* strncasecmp */
#include "common/config_env.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#define SQ_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

extern char **environ; /* POSIX: the process's environment */

/* SQUALL_ names that squall's own tools and scripts read (squall-run,
 * quickstart.sh, ethernet.sh, cluster.sh, .ci/run, the test, training and
 * GPU scripts, the Python package): not options, not typos. A prefix ends in '_'. */
/* clang-format off */
static const char *const tool_names[] = {
    "SQUALL_PRELOAD_", "SQUALL_BENCH_",          "SQUALL_ETHERNET_", "SQUALL_CLUSTER_",   "SQUALL_CLUSTER",
    "SQUALL_GPU_",     "SQUALL_TEST_",           "SQUALL_TRAIN_",    "SQUALL_CI_",        "SQUALL_RUN_MPI_",
    "SQUALL_BUILDDIR", "SQUALL_SRCDIR",          "SQUALL_LINK",      "SQUALL_RANKS",      "SQUALL_CFLAGS",
    "SQUALL_CONFIGURE_FLAGS", "SQUALL_LOG_COMPILER", "SQUALL_SH_LOG_COMPILER",
    "SQUALL_LIBRARY" /* the Python package's library (python/squall) */};
/* clang-format on */

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
/* clang-format off */
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
/* clang-format on */

/* The option a misspelt or guessed name may have meant, or NULL. */
static const char *meant_by(const char *const *options, size_t n, const char *name, size_t len) {
  for (size_t i = 0; i < SQ_ARRAY_SIZE(guesses); i++)
    if (strlen(guesses[i].guess) == len && !strncasecmp(name, guesses[i].guess, len)) return guesses[i].meant;
  int best = 3;
  const char *near = NULL;
  for (size_t i = 0; i < n; i++) {
    int dist = distance(name, len, options[i]);
    if (dist < best) best = dist, near = options[i];
  }
  return near;
}

/* A misspelt variable (SQUALL_COMPRES=fp16) would leave compression off
 * without a word: every SQUALL_ variable that is neither an option nor a
 * tool's goes to report, with the option it may have meant. */
int squall__env_typos(const char *const *options, size_t n, squall_typo_fn report, void *ctx) {
  int found = 0;
  for (char **e = environ; e && *e; e++) {
    if (strncasecmp(*e, "SQUALL_", 7)) continue;
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    int known = 0;
    for (size_t i = 0; i < n && !known; i++) known = strlen(options[i]) == len && !strncmp(*e, options[i], len);
    if (known || is_tool_name(*e, len)) continue;
    found++;
    report(*e, len, meant_by(options, n, *e, len), ctx);
  }
  return found;
}

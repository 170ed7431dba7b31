/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * squall.h - squeezed all-reduce: compressed gradient all-reduce.
 *
 * The stable API: version, results, configuration, statistics and state
 * control. It needs no MPI, NCCL or CUDA header. The drop-in entry points
 * live beside it: squallMpiAllreduce() in squall_mpi.h (host buffers,
 * MPI_Allreduce's signature, needs mpi.h) and squallAllReduce() in
 * squall_nccl.h (ncclAllReduce's signature, needs nccl.h).
 *
 * Ownership: squall never keeps a pointer that the caller passes in past the
 * call, except as an opaque hint (the send buffer address helps find a
 * tensor's error-feedback residual, which is matched by communicator,
 * element count and type). Everything squall allocates it frees.
 */
#ifndef SQUALL_H
#define SQUALL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SQUALL_BUILDING_LIBRARY)
#define SQUALL_API __attribute__((visibility("default")))
#else
#define SQUALL_API
#endif

#define SQUALL_VERSION_MAJOR 0
#define SQUALL_VERSION_MINOR 1
#define SQUALL_VERSION_PATCH 0
/* One integer that orders versions: MAJOR*10000 + MINOR*100 + PATCH. */
#define SQUALL_VERSION_CODE \
  (SQUALL_VERSION_MAJOR * 10000 + SQUALL_VERSION_MINOR * 100 + SQUALL_VERSION_PATCH)

/* ------------------------------------------------------------------ results
 * Codes 0..7 are NCCL's, with NCCL's meaning, so that an entry point that
 * replaces an NCCL call can return them unchanged. */
/* clang-format off */
#define SQUALL_RESULT_TABLE(X)                                                     \
  X(squallSuccess, 0, "no error")                                                  \
  X(squallUnhandledCudaError, 1, "unhandled cuda error")                           \
  X(squallSystemError, 2, "unhandled system error (out of memory, MPI failure)")   \
  X(squallInternalError, 3, "internal error")                                      \
  X(squallInvalidArgument, 4, "invalid argument")                                  \
  X(squallInvalidUsage, 5, "invalid usage")                                        \
  X(squallRemoteError, 6, "remote error (a peer sent a corrupt or truncated payload)") \
  X(squallInProgress, 7, "operation in progress")

typedef enum {
#define SQUALL_RESULT_ENUM(name, value, msg) name = value,
  SQUALL_RESULT_TABLE(SQUALL_RESULT_ENUM)
#undef SQUALL_RESULT_ENUM
  squallNumResults = 8
} squallResult_t;
/* clang-format on */

/* Static message for a result code ("unknown result" for others). */
SQUALL_API const char *squallGetErrorString(squallResult_t result);

/* Detail of the last failure on this thread (names the argument or
 * variable, the value and what is accepted), or "" when none. The string
 * belongs to squall and stays valid until the next squall call on this
 * thread. */
SQUALL_API const char *squallGetLastError(void);

/* Writes SQUALL_VERSION_CODE of the library (not of this header). */
SQUALL_API squallResult_t squallGetVersion(int *version);
/* "0.1.0" plus build features, e.g. "0.1.0 (cuda kernels; nccl transport)". */
SQUALL_API const char *squallVersionString(void);

/* ------------------------------------------------------------ configuration */
typedef enum {
  squallCodecNone = 0, /* every call goes to the plain collective */
  squallCodecFp16 = 1, /* scaled IEEE half, all-reduced in 16 bits */
  squallCodecBf16 = 2, /* bfloat16, all-reduced in 16 bits */
  squallCodecTopk = 3, /* top-k sparsification, all-gathered */
  squallCodecInt8 = 4, /* int8 per bucket, two-phase all-reduce accumulating in fp32 */
  squallCodecInt4 = 5, /* int4 per bucket, two-phase */
  squallCodecFp8 = 6   /* fp8 e4m3 per bucket, two-phase */
} squallCodec_t;

typedef enum {
  squallHalfAccumFp32 = 0, /* fp16/bf16 codes summed in fp32 (two-phase all-reduce) */
  squallHalfAccumHalf = 1  /* fp16/bf16 codes summed in 16 bits (one 16-bit all-reduce) */
} squallHalfAccum_t;

typedef enum {
  squallValueFp32 = 0, /* top-k values sent as float */
  squallValueFp16 = 1  /* top-k values sent as scaled half; rounding kept in the residual */
} squallValueType_t;

/* How an all-reduce spans nodes: auto compresses only what crosses the
 * node boundary where the nodes allow it (two-level); flat treats every
 * rank as its own node. */
typedef enum {
  squallHierarchyAuto = 0,
  squallHierarchyFlat = 1
} squallHierarchy_t;

typedef enum {
  squallLogWarn = 0,
  squallLogInfo = 1,
  squallLogTrace = 2
} squallLogLevel_t;

/* ------------------------------------------------- structs that can grow
 * squallConfig_t, squallStats_t and squallOption_t begin with the same
 * three members, as NCCL's ncclConfig_t does: the size of the struct where
 * the caller was compiled, a magic number that says the three were set,
 * and that squall.h's version. SQUALL_CONFIG_INITIALIZER,
 * SQUALL_STATS_INITIALIZER and SQUALL_OPTION_INITIALIZER set them. The
 * library reads and writes only the bytes that both the caller's struct
 * (its size) and its own have, and members are only ever appended. So a
 * program keeps working with a later library of the same soname, whose
 * structs are longer (what it does not know is never written; what
 * squallSetConfig does not get keeps its process-wide value), and with an
 * earlier one, which leaves the members appended after it alone.
 * Why this, and not accessor functions or reserved padding: the structs
 * stay plain C that callers fill and read by member name, as before; a new
 * member costs no new function and no guess of how much room to keep; and
 * tests/abi.sh can tell an appended member (compatible) from one that
 * moved (a new soname). Inside squallStats_t the per-reason arrays have a
 * fixed capacity (SQUALL_PASS_REASONS_MAX, SQUALL_FLAT_REASONS_MAX), so
 * that a new reason takes a free slot and moves no member either.
 * The functions that fill a caller's struct set its head from the
 * caller's sizeof first ("sized calls" at the end of this header), so that
 * code written before these members keeps working unchanged. A struct that
 * the library gets with its magic not set (through dlsym, or a zeroed one
 * from another language) is taken to be of the size the first
 * libsquall.so.4 had, which every caller's struct has; a set magic with a
 * size below that is squallInvalidArgument. */
#define SQUALL_CONFIG_MAGIC 0x53514346u /* "SQCF" */
#define SQUALL_STATS_MAGIC 0x53515354u  /* "SQST" */
#define SQUALL_OPTION_MAGIC 0x53514f50u /* "SQOP" */

typedef struct {
  size_t size;                  /* sizeof(squallConfig_t) where the caller was compiled */
  unsigned int magic;           /* SQUALL_CONFIG_MAGIC: size and version are set */
  unsigned int version;         /* SQUALL_VERSION_CODE of that squall.h */
  squallCodec_t codec;          /* SQUALL_COMPRESS */
  double topkRatio;             /* SQUALL_COMPRESS=topk:<ratio>, 0 < ratio <= 1 */
  squallValueType_t topkValues; /* SQUALL_TOPK_VALUES */
  int errorFeedback;            /* SQUALL_EF, 0 or 1 */
  size_t minBytes;              /* SQUALL_MIN_BYTES: smaller calls pass through */
  int zstdLevel;                /* SQUALL_ZSTD: 0 = off (host transport only) */
  size_t efMaxBytes;            /* SQUALL_EF_MAX_BYTES: residual memory cap, 0 = unlimited */
  int warmup;                   /* SQUALL_WARMUP: first n calls of each shape go dense */
  int minRanks;                 /* SQUALL_MIN_RANKS: fewer ranks pass through (1 for tests) */
  squallLogLevel_t debug;       /* SQUALL_DEBUG */
  char statsPath[512];          /* SQUALL_STATS: JSON counters at exit, "" = none */
  size_t bucket;                /* SQUALL_BUCKET: elements per scale of int8/int4/fp8 */
  squallHalfAccum_t halfAccum;  /* SQUALL_HALF_ACCUM: where fp16/bf16 codes are summed */
  squallHierarchy_t hierarchy;  /* SQUALL_HIERARCHY */
  int ranksPerNode;             /* SQUALL_RANKS_PER_NODE: 0 = discover the nodes; R > 0 = R
                                   consecutive ranks form a node (tests on one host) */
  size_t chunkBytes;            /* SQUALL_CHUNK_BYTES: fp32 bytes per pipeline chunk of the
                                   two-phase all-reduce on host memory; 0 = one chunk */
  int costModel;                /* SQUALL_COST_MODEL: 1 = pass through where compression would
                                   not pay (host memory), 0 = always compress */
  double linkGbps;              /* SQUALL_LINK_GBPS: the link's speed for the cost model;
                                   0 = measured from the collectives' own times */
  /* ---- members appended after libsquall.so.4's first release go here */
  int statsInterval;            /* SQUALL_STATS_INTERVAL: seconds between writes of the
                                   SQUALL_STATS file during the run; 0 = at exit only */
  int summaryInterval;          /* SQUALL_SUMMARY_INTERVAL: seconds between rank 0's
                                   "compressed too little" checks during the run; 0 = at exit only */
  int collectives;              /* SQUALL_COLLECTIVES: the squallCollective_t bits of the
                                   collectives the LD_PRELOAD interposers hand to squall */
} squallConfig_t;

/* The collectives of SQUALL_COLLECTIVES (squallConfig_t.collectives, a
 * set of these bits). Only the interposers ask: a direct call
 * (squallAllReduce, squallReduceScatter, squallMpiReduceScatterBlock...)
 * names its collective, and is compressed whatever the set holds. */
typedef enum { squallCollectiveAllReduce = 1,
               squallCollectiveReduceScatter = 2 } squallCollective_t;

/* Sets the first three members; then squallConfigDefault() or
 * squallGetConfig() fills the rest:
 *   squallConfig_t cfg = SQUALL_CONFIG_INITIALIZER;
 *   squallGetConfig(&cfg); */
#define SQUALL_CONFIG_INITIALIZER \
  { .size = sizeof(squallConfig_t), .magic = SQUALL_CONFIG_MAGIC, .version = SQUALL_VERSION_CODE }

/* Fills *config with the built-in defaults (no environment). Like every
 * function that takes a squallConfig_t, it reads and writes as much of it
 * as config->size says (SQUALL_CONFIG_INITIALIZER; see "structs that can
 * grow" above). */
SQUALL_API squallResult_t squallConfigDefault(squallConfig_t *config);

/* Sets one option by its variable name ("SQUALL_COMPRESS"; the prefix may be
 * left out and case does not matter) from its textual value. On a bad value
 * returns squallInvalidArgument, leaves *config unchanged, and
 * squallGetLastError() names the variable, the value and what is accepted. */
SQUALL_API squallResult_t squallConfigSet(squallConfig_t *config, const char *name,
                                          const char *value);

/* Parses a configuration string: NAME=VALUE items separated by blanks or
 * ';', e.g. "SQUALL_COMPRESS=topk:0.01 SQUALL_EF=1" or "compress=fp16".
 * Applies the items in order on top of *config; stops at the first error. */
SQUALL_API squallResult_t squallConfigParse(squallConfig_t *config, const char *spec);

/* Defaults overridden by every SQUALL_* variable that is set. */
SQUALL_API squallResult_t squallConfigFromEnv(squallConfig_t *config);

/* Formats the codec part as SQUALL_COMPRESS would spell it ("topk:0.01").
 * Returns buf. */
SQUALL_API const char *squallConfigCodecString(const squallConfig_t *config, char *buf,
                                               size_t len);

/* One configuration option as squallConfigOption() describes it. The
 * strings belong to squall and live as long as the library is loaded. */
typedef struct {
  size_t size;              /* sizeof(squallOption_t) where the caller was compiled */
  unsigned int magic;       /* SQUALL_OPTION_MAGIC: size and version are set */
  unsigned int version;     /* SQUALL_VERSION_CODE of that squall.h */
  const char *name;         /* environment variable, e.g. "SQUALL_COMPRESS" */
  const char *field;        /* the squallConfig_t member(s) it sets, e.g. "codec, topkRatio" */
  const char *defaultValue; /* the default as the variable spells it; "" = unset */
  const char *accepted;     /* what the variable accepts, one phrase */
  const char *doc;          /* what it does, one paragraph */
  char value[512];          /* its value in the given configuration, as the variable
                               would spell it ("invalid (...)" for an out-of-range field) */
  int agree;                /* 1: the ranks compare it (the call header's configuration
                               digest), and calls pass through while they differ
                               (config_mismatch); 0: each rank's own, ranks may differ */
  /* ---- members appended after libsquall.so.4's first release go here */
} squallOption_t;

#define SQUALL_OPTION_INITIALIZER \
  { .size = sizeof(squallOption_t), .magic = SQUALL_OPTION_MAGIC, .version = SQUALL_VERSION_CODE }

/* Describes option number index, counting from 0 in a fixed order, with its
 * value in *config (config NULL: the default). An index past the last
 * option returns squallInvalidArgument, which ends an iteration:
 *   squallOption_t opt = SQUALL_OPTION_INITIALIZER;
 *   for (int i = 0; squallConfigOption(&cfg, i, &opt) == squallSuccess; i++) ...
 * `squall-info -c` and squall(7)'s ENVIRONMENT section are printed this way. */
SQUALL_API squallResult_t squallConfigOption(const squallConfig_t *config, int index,
                                             squallOption_t *option);

/* The configuration the entry points use. The first use reads the
 * environment once; an invalid environment logs the error and leaves
 * compression off (every call passes through). */
SQUALL_API squallResult_t squallGetConfig(squallConfig_t *config);
/* Replaces the process-wide configuration for calls that start afterwards
 * (for benchmarks and tests; all ranks must set the same). Every field is
 * checked against what its variable accepts; on a bad one returns
 * squallInvalidArgument, changes nothing, and squallGetLastError() names
 * the field, its value and the accepted range. */
SQUALL_API squallResult_t squallSetConfig(const squallConfig_t *config);

/* --------------------------------------------------------------- statistics */
/* clang-format off */
#define SQUALL_PASS_REASON_TABLE(X)                                   \
  X(squallPassDisabled, "disabled", "SQUALL_COMPRESS=none")           \
  X(squallPassType, "type", "data type is not fp32/fp16/bf16")        \
  X(squallPassOp, "op", "reduction is not a sum or an average")       \
  X(squallPassSmall, "small", "smaller than SQUALL_MIN_BYTES")        \
  X(squallPassSingleRank, "single_rank", "only one rank")             \
  X(squallPassInGroup, "in_group", "inside a user's group call")      \
  X(squallPassMismatch, "config_mismatch", "ranks disagree on the configuration") \
  X(squallPassWarmup, "warmup", "SQUALL_WARMUP dense steps")          \
  X(squallPassCapture, "graph_capture", "CUDA graph capture before the workspace was ready") \
  X(squallPassNonblocking, "nonblocking", "a non-blocking NCCL communicator")  \
  X(squallPassError, "error", "a rank could not prepare the call: every rank passed it through; or it failed") \
  X(squallPassIntercomm, "intercomm", "an MPI intercommunicator")       \
  X(squallPassNotPaying, "would_not_pay", "the cost model predicted plain to be faster, or device buffers with every rank on one node (SQUALL_COST_MODEL)") \
  X(squallPassDeviceMemory, "device_memory", "device buffers on the MPI path (a CUDA-aware MPI): the host codecs cannot read them") \
  X(squallPassCodecUnsupported, "codec_unsupported", "the codec has no route for this collective on this transport (no all-to-all)") \
  X(squallPassCollectiveOff, "collective_off", "an interposed collective that SQUALL_COLLECTIVES leaves out") \
  X(squallPassUnevenCounts, "uneven_counts", "an MPI_Reduce_scatter whose ranks receive different counts")

typedef enum {
#define SQUALL_PASS_ENUM(name, key, doc) name,
  SQUALL_PASS_REASON_TABLE(SQUALL_PASS_ENUM)
#undef SQUALL_PASS_ENUM
  squallPassNumReasons
} squallPassReason_t;
/* clang-format on */

/* Why a compressed call ran flat rather than two-level. */
/* clang-format off */
#define SQUALL_FLAT_REASON_TABLE(X)                                                 \
  X(squallFlatConfigured, "configured", "SQUALL_HIERARCHY=flat")                    \
  X(squallFlatOneNode, "one_node", "all ranks are on one node")                     \
  X(squallFlatOneRankPerNode, "one_rank_per_node", "every node has one rank")       \
  X(squallFlatUneven, "uneven_nodes", "nodes hold different numbers of ranks")      \
  X(squallFlatNoSplit, "no_split", "the transport cannot make sub-communicators (e.g. NCCL < 2.18)") \
  X(squallFlatSplitFailed, "split_failed", "making the node communicators failed")      \
  X(squallFlatSlower, "slower", "whole calls of this size ran faster flat (SQUALL_COST_MODEL)")

typedef enum {
#define SQUALL_FLAT_ENUM(name, key, doc) name,
  SQUALL_FLAT_REASON_TABLE(SQUALL_FLAT_ENUM)
#undef SQUALL_FLAT_ENUM
  squallFlatNumReasons
} squallFlatReason_t;
/* clang-format on */

/* Room in squallStats_t's per-reason arrays: reasons are added without
 * moving the members after them (the entries past the last reason are 0). */
#define SQUALL_PASS_REASONS_MAX 32
#define SQUALL_FLAT_REASONS_MAX 16

typedef struct {
  size_t size;                                   /* sizeof(squallStats_t) where the caller was compiled */
  unsigned int magic;                            /* SQUALL_STATS_MAGIC: size and version are set */
  unsigned int version;                          /* SQUALL_VERSION_CODE of that squall.h */
  uint64_t calls;                                /* all-reduce calls seen */
  uint64_t compressedCalls;                      /* calls that ran a codec */
  uint64_t passthroughCalls;                     /* calls handed to the plain collective */
  uint64_t passthrough[SQUALL_PASS_REASONS_MAX]; /* by squallPassReason_t */
  uint64_t bytesIn;                              /* uncompressed payload this rank contributed (count*size) */
  uint64_t bytesWire;                            /* payload bytes this rank sent (ring all-reduce: 2(P-1)/P*bytes;
                                all-gather: (P-1)*slot) */
  double codecSeconds;                           /* host time in compress and decompress (device path: enqueueing) */
  uint64_t flatCalls;                            /* compressed calls that ran over all ranks as one level */
  uint64_t twoLevelCalls;                        /* compressed calls that ran two-level (node, then across nodes) */
  uint64_t flat[SQUALL_FLAT_REASONS_MAX];        /* flat compressed calls, by squallFlatReason_t */
  uint64_t bytesInterNode;                       /* of bytesWire, what crossed this rank's node boundary (flat calls:
                                a ring's send to the next rank, across when that rank is on another
                                node, or when the nodes are not known yet: a communicator's first
                                compressed call finds them) */
  uint64_t bytesIntraNode;                       /* of bytesWire, what stayed inside the node */
  uint64_t pipelinedCalls;                       /* compressed calls that ran in more than one chunk (top-k: its
                                exchange in more than one round) */
  uint64_t pipelineChunks;                       /* the chunks (rounds) of those calls */
  uint64_t headers;                              /* call headers exchanged: one small all-reduce each (host buffers: every
                                call that could be compressed, except those of a size class the cost
                                model settled as not paying; device buffers: see squall(7)) */
  /* ---- members appended after libsquall.so.4's first release go here */
} squallStats_t;

/*   squallStats_t st = SQUALL_STATS_INITIALIZER;
 *   squallStatsGet(&st); */
#define SQUALL_STATS_INITIALIZER \
  { .size = sizeof(squallStats_t), .magic = SQUALL_STATS_MAGIC, .version = SQUALL_VERSION_CODE }

/* Process-wide counters since start or the last reset, into as much of
 * *stats as its size says (SQUALL_STATS_INITIALIZER; see "structs that
 * can grow" above). */
SQUALL_API squallResult_t squallStatsGet(squallStats_t *stats);
SQUALL_API void squallStatsReset(void);
/* Name of a pass-through reason as used in the JSON statistics. */
SQUALL_API const char *squallPassReasonName(squallPassReason_t reason);
/* Name of a flat reason as used in the JSON statistics. */
SQUALL_API const char *squallFlatReasonName(squallFlatReason_t reason);

/* ------------------------------------------------ sized calls
 * The functions that write into a caller's struct are wrapped in macros
 * that first set the struct's head from the caller's own sizeof, so that
 * code that never used an initializer (squallStats_t st; squallStatsGet(&st))
 * is sized right wherever it is compiled against this header, and a struct
 * left on the stack by an earlier call cannot pass as a sized one. A call
 * that bypasses the macros (a function pointer, dlsym, another language)
 * sets size, magic and version itself, or zeroes the struct: one whose
 * magic is not set is taken to be of the first libsquall.so.4 layout.
 * (Not in the library itself, which defines these functions.) */
#ifndef SQUALL_BUILDING_LIBRARY
static inline squallConfig_t *squall__sized_config(squallConfig_t *c) {
  if (c) {
    c->size = sizeof *c;
    c->magic = SQUALL_CONFIG_MAGIC;
    c->version = SQUALL_VERSION_CODE;
  }
  return c;
}
static inline squallStats_t *squall__sized_stats(squallStats_t *s) {
  if (s) {
    s->size = sizeof *s;
    s->magic = SQUALL_STATS_MAGIC;
    s->version = SQUALL_VERSION_CODE;
  }
  return s;
}
static inline squallOption_t *squall__sized_option(squallOption_t *o) {
  if (o) {
    o->size = sizeof *o;
    o->magic = SQUALL_OPTION_MAGIC;
    o->version = SQUALL_VERSION_CODE;
  }
  return o;
}
#define squallConfigDefault(config) squallConfigDefault(squall__sized_config(config))
#define squallConfigSet(config, name, value) squallConfigSet(squall__sized_config(config), name, value)
#define squallConfigParse(config, spec) squallConfigParse(squall__sized_config(config), spec)
#define squallConfigFromEnv(config) squallConfigFromEnv(squall__sized_config(config))
#define squallConfigOption(config, index, option) squallConfigOption(config, index, squall__sized_option(option))
#define squallGetConfig(config) squallGetConfig(squall__sized_config(config))
#define squallStatsGet(stats) squallStatsGet(squall__sized_stats(stats))
#endif

#ifdef __cplusplus
}
#endif
#endif /* SQUALL_H */

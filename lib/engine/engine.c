/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * engine.c - decides and runs one compressed all-reduce. Routes:
 *   16-bit: global max |a| -> power-of-two scale -> encode -> 16-bit
 *           all-reduce -> decode;
 *   top-k:  encode fixed-size slot -> all-gather (or, on a host transport
 *           with SQUALL_ZSTD, lossless-coded all-gather-v) -> rank-ordered
 *           sparse decode, bit-identical on every rank;
 *   dense:  where top-k cannot pay, the plain all-reduce of a = g + e,
 *           which also empties the residual;
 *   two-phase: int8/int4/fp8, and fp16/bf16 summed in fp32 (twophase.h):
 *           encode -> all-to-all -> fp32 sum of the own shard -> re-encode
 *           -> all-gather -> decode;
 *   two-level: where the ranks sit on >= 2 nodes of equal size (engine/
 *           hierarchy.c): dense reduce-scatter inside the node, one of the
 *           routes above across nodes on the shard (an inner engine on the
 *           inter-node transport, whose calls skip the header, the
 *           agreement and the warm-up: the outer call did them), dense
 *           all-gather inside the node. The nodes are found, collectively,
 *           at the first call that every rank compresses after the header.
 *
 * A call goes through four steps:
 *   1. prepare: everything the call needs (scratch, residual, the backup of
 *      the residual or the spare the next one is written into, where one is
 *      needed) is allocated and laid out, locally, before anything
 *      collective happens;
 *   2. header: one tiny all-reduce(min) of [ok, digest, -digest] tells every
 *      rank whether all ranks prepared successfully and hold the same
 *      configuration. Host engines exchange it on every call that could be
 *      compressed, so nothing rank-local (a different SQUALL_MIN_RANKS, a
 *      squallSetConfig landing between two calls on one rank only) can make
 *      ranks take different collectives. Device engines exchange it only
 *      when the configuration generation moved or scratch must grow (both
 *      the same on every rank when squallSetConfig is called at the same
 *      point everywhere), because reading it back synchronises the stream;
 *   3. decide(): the one decision point, from inputs identical on every rank;
 *   4. run: on failure the residual is restored from its backup (top-k
 *      writes the next one into a spare, swapped in on success, or only
 *      after the last step that can fail) and the error is returned.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "codecs/lossless.h"
#include "engine/topk_rounds.h"
#include "common/stats.h"
#include "engine/costmodel.h"
#include "engine/engine.h"
#include "engine/graph_memory.h"
#include "engine/hierarchy.h" /* two-level all-reduce */
#include "engine/residual.h"
#include "engine/twophase.h"

#define DESC_BYTES 512 /* the longest description (every field at its widest) is under 400 */
/* Larger counts cannot be laid out (count * sizeof(float) and the top-k
 * indices must not overflow): refused before anything collective. */
#define MAX_COUNT (SIZE_MAX / 16)

struct squall_engine {
  squall_transport tr;
  squall_kernels k;
  squall_residuals *residuals;
  int header_every_call; /* host memory: the header costs no synchronisation */
  int agreed_nonblocking; /* the last header: some rank's communicator is non-blocking */
  uint64_t agreed_gen;   /* configuration generation of the last header */
  squallConfig_t agreed_cfg; /* the configuration it agreed on (agreed_ok) */
  int agreed_valid, agreed_ok;
  uint64_t warned_gen; /* disagreement logged for this generation */
  int warned_valid;
  void *scratch; /* kernel memory, grown on demand, kept for the next call */
  size_t scratch_bytes;
  squall_graph_memory graphs; /* scratch replaced after a capture: kept for the graphs */
  size_t scratch_planned; /* the largest layout any header covered: the same
                             on every rank, unlike scratch_bytes after a
                             failed allocation */
  void *host; /* host memory for the lossless stage */
  size_t host_bytes;
  void *last_stream; /* for squallResetResiduals, which has no stream of its own */
  /* the end of the last compressed call's work (kernels.h, fence_record),
   * and its stream: a call on another stream waits for it */
  void *fence, *fence_stream;
  squallStats_t stats;
  squall_hier *hier; /* two-level all-reduce: nodes, node communicators, inner engine */
  /* a shard call's residual and its backup, kept until the next call so
   * that the outer two-level call can undo it when a later step fails */
  float *undo_res, *undo_backup;
  size_t undo_n;
  squall_cost cost; /* SQUALL_COST_MODEL: this rank's link and codec figures */
  squall_tensor *shard_slot; /* the slot squall__engine_prepare_shard looked up for the next shard call */
  float *fold_buf; /* g + residual for a plain call that is not in place (fold_into_plain) */
  size_t fold_bytes;
  int said_one_node; /* say_one_node() ran */
  int said_changes;  /* ranks' squallSetConfig counts differed: said once */
  /* SQUALL_DEBUG=INFO: each size class's last path (say_path), 0: none yet */
  uint8_t last_path[64];
};

const squallStats_t *squall__engine_stats(const squall_engine *e) { return &e->stats; }

uint64_t squall__ring_allreduce_wire(uint64_t bytes, int p) {
  return p > 1 ? 2 * (uint64_t)(p - 1) * bytes / (uint64_t)p : 0;
}

squall_engine *squall__engine_create(const squall_transport *tr, const squall_kernels *k) {
  squall_engine *e = calloc(1, sizeof *e);
  if (e == NULL) return NULL;
  e->tr = *tr;
  e->k = *k;
  e->header_every_call = strcmp(k->name, "host") == 0;
  e->residuals = squall__residuals_create(&e->k);
  e->hier = squall__hier_create(&e->tr, &e->k); /* two-level all-reduce */
  if (e->residuals == NULL || e->hier == NULL) {
    squall__residuals_free(e->residuals);
    squall__hier_free(e->hier);
    free(e);
    return NULL;
  }
  return e;
}

void squall__engine_free(squall_engine *e) {
  if (e == NULL) return;
  if (e->stats.calls) {
    const squallStats_t *s = &e->stats;
    SQ_INFO("communicator rank %d/%d: %llu calls, %llu compressed, %llu passed through, "
            "%llu call headers, %llu bytes in, %llu bytes on the wire (%.1fx), %.3f s in codecs (host time)",
            e->tr.rank, e->tr.nranks, (unsigned long long)s->calls,
            (unsigned long long)s->compressedCalls, (unsigned long long)s->passthroughCalls,
            (unsigned long long)s->headers,
            (unsigned long long)s->bytesIn, (unsigned long long)s->bytesWire,
            s->bytesWire ? (double)s->bytesIn / (double)s->bytesWire : 0.0, s->codecSeconds);
  }
  squall__residuals_free(e->residuals);
  squall__hier_free(e->hier); /* two-level: node communicators, inner engine */
  if (e->scratch) e->k.free(NULL, e->scratch);
  squall__graph_memory_free(&e->graphs, &e->k);
  if (e->fence && e->k.fence_free) e->k.fence_free(e->fence);
  free(e->host);
  free(e->fold_buf);
  free(e);
}

/* ------------------------------------------------------- configuration */
/* Everything that changes what goes on the wire or what the sum means:
 * the options the configuration table marks to agree (lib/common/config.c). */
static void describe(const squallConfig_t *c, char *out) { squall__config_describe(c, out, DESC_BYTES); }
static int64_t digest(const squallConfig_t *c) { return squall__config_digest(c); }

/* ------------------------------------------------------------- decision */
/* The cost model's part of the call header. */
typedef struct {
  int forced;               /* compress whatever the times say: no figures yet, exploring,
                               or the model does not run */
  int explored;             /* forced by squall__cost_explore (the same on every rank) */
  int64_t comp_ns, plain_ns; /* predicted times (after the header: the largest over ranks) */
  /* variants of the call (SQ_VARIANT_*): whole-call times of each at this
   * size, NS_UNKNOWN where this rank has none or the variant does not
   * apply; after the header, the largest over the ranks */
  int64_t variant_ns[SQ_COST_VARIANTS];
} cost_verdict;

#define NS_UNKNOWN (INT64_MAX / 2) /* above any to_ns() */

typedef struct {
  const squall_call *call;
  const squallConfig_t *cfg; /* the same on every rank when agreed */
  int nranks;
  int agreed;                /* every rank holds cfg */
  int all_ok;                /* every rank prepared what the call needs */
  squall_residuals *count;   /* counts the call for warm-up; NULL: do not count */
  int alltoall;              /* the transport has an all-to-all (same library on every rank) */
  size_t topk_max;           /* the kernel set's top-k limit (the same set on every rank) */
  int two_level;             /* squall__hier_known(): the same on every rank */
  int pays;                  /* the cost model: the largest compressed prediction over the ranks
                                is below the largest plain one (or it explores); 1 where the
                                model does not run */
  int nonblocking;           /* some rank's communicator is non-blocking (from the header) */
  int one_node;              /* device_on_one_node(): the same on every rank */
  int foreign;               /* some rank's buffers are not the kernels' memory (from the header) */
} decide_in;

/* Reasons that follow from the call alone (identical on every rank: MPI
 * and NCCL require the same count, type, op and communicator). */
static int call_pass_reason(const squall_call *c, squallPassReason_t *why) {
  if (c->in_group) *why = squallPassInGroup;
  else if (c->dtype < 0) *why = squallPassType;
  else if (c->op == SQ_OP_OTHER) *why = squallPassOp;
  /* An intercommunicator's all-reduce sums the other group's data: none
   * of the codecs' collectives mean that. */
  else if (c->intercomm) *why = squallPassIntercomm;
  else if (c->count == 0) *why = squallPassSmall;
  else return 0;
  return 1;
}

/* Top-k, or its dense fallback where the all-gather would send more than
 * the ring all-reduce of the data in its own precision. */
static squall_route topk_route(const squall_call *c, const squallConfig_t *cfg, int p, size_t topk_max) {
  size_t k = squall__topk_k(c->count, cfg->topkRatio);
  uint64_t sb = squall__topk_slot_bytes(k, cfg->topkValues);
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  int pays = (uint64_t)(p - 1) * sb < squall__ring_allreduce_wire(bytes_in, p) ||
             p == 1; /* one rank (SQUALL_MIN_RANKS=1): run the codec to prove it */
  if (pays && c->count <= topk_max) return SQ_ROUTE_TOPK; /* the slots' indices are u32, the kernels' may be less */
  return c->dtype == SQ_DT_F32 ? SQ_ROUTE_DENSE : SQ_ROUTE_HALF;
}

/* The residual store's kind for c (residual.h): its type; a shard's is
 * the two-level call's type and count, so that a tensor of n elements and
 * one of n + 1 from the same buffer, whose shards have one size, keep
 * residuals of their own as on one node (a shared one would carry the
 * longer one's padding tail into the shorter one's, where nothing
 * delivers it). Counts stay far below 2^56. */
static uint64_t residual_kind(int dtype, size_t whole) { return (uint64_t)whole << 8 | (uint8_t)dtype; }
static uint64_t kind_of(const squall_call *c) {
  return c->shard ? residual_kind(c->whole->dtype, c->whole->count) : residual_kind(c->dtype, 0);
}

/* THE decision point: every input is the same on every rank, so every
 * rank takes the same route. Buffer addresses, allocation results and
 * timing never enter here except through all_ok, which is already the
 * minimum over all ranks. */
static squall_route decide(const decide_in *in, squallPassReason_t *why) {
  const squall_call *c = in->call;
  const squallConfig_t *cfg = in->cfg;
  if (call_pass_reason(c, why)) return SQ_ROUTE_PASS;
  /* A two-level shard: the outer call decided to compress, on the same
   * inputs everywhere, and counted the warm-up; only the codec's route on
   * the shard is left (a pass-through here is the outer call's error). */
  if (c->shard) goto route;
  /* Non-blocking communicators pass through (a call must be able to
   * return ncclInProgress); the mode is each rank's own, so it counts
   * where the header has combined it over the ranks. */
  if (in->nonblocking) { *why = squallPassNonblocking; return SQ_ROUTE_PASS; }
  if (in->foreign) { *why = squallPassDeviceMemory; return SQ_ROUTE_PASS; }
  if (!in->agreed) { *why = squallPassMismatch; return SQ_ROUTE_PASS; }
  if (in->nranks < cfg->minRanks) { *why = squallPassSingleRank; return SQ_ROUTE_PASS; }
  if (cfg->codec == squallCodecNone) { *why = squallPassDisabled; return SQ_ROUTE_PASS; }
  if (c->count * c->elsize < cfg->minBytes) { *why = squallPassSmall; return SQ_ROUTE_PASS; }
  if (!in->all_ok) { *why = squallPassError; return SQ_ROUTE_PASS; }
  if (in->count && squall__residuals_count_call(in->count, c->count, kind_of(c)) < (uint64_t)cfg->warmup) {
    *why = squallPassWarmup;
    return SQ_ROUTE_PASS;
  }
  if (in->two_level == 1) return SQ_ROUTE_TWOLEVEL;
  if (!in->pays || in->one_node) { *why = squallPassNotPaying; return SQ_ROUTE_PASS; }
route:
  if (cfg->codec == squallCodecTopk) return topk_route(c, cfg, in->nranks, in->topk_max);
  squall_twophase_codec tp;
  if (squall__twophase_select(cfg, c->dtype, &tp)) {
    if (in->alltoall) return SQ_ROUTE_TWOPHASE;
    if (tp.quant) { /* no 16-bit fallback means the same on the wire */
      *why = squallPassDisabled;
      return SQ_ROUTE_PASS;
    }
  }
  return SQ_ROUTE_HALF;
}

/* Device engines run no cost model: rank-local timings reach the other
 * ranks only through a header, which a device call exchanges only when it
 * must (reading it back waits for the stream). One fact needs no timing:
 * where every rank is on one node, NCCL all-reduces over NVLink, PCIe or
 * shared memory, and over NVLink the codec's kernels alone (0.4 ms on one
 * H200 for 16M floats sent as fp16) cost about what a whole plain
 * all-reduce of those 64 MiB takes. Such calls pass through as not paying.
 * That errs towards plain on PCIe-only nodes, which cannot be told apart
 * here yet; SQUALL_COST_MODEL=off compresses them (PCIe, or a node whose
 * GPUs talk over a NIC: NCCL_P2P_DISABLE and NCCL_SHM_DISABLE), as does
 * SQUALL_RANKS_PER_NODE=1. The nodes were all-gathered and the
 * configuration agreed: the same on every rank. Never a shard (a shard's
 * outer call decided). One rank (SQUALL_MIN_RANKS=1) compresses: it is
 * there to prove the path. */
static int device_on_one_node(const squall_engine *e, const squallConfig_t *cfg, const squall_call *c) {
  return cfg->costModel && !e->header_every_call && !c->shard && e->tr.nranks > 1 &&
         squall__hier_one_node(e->hier, cfg);
}

/* Said once per communicator, by its rank 0 at the default log level: a
 * user who asked for a codec should learn why nothing is compressed. */
static void say_one_node(squall_engine *e) {
  if (e->said_one_node) return;
  e->said_one_node = 1;
  if (e->tr.rank == 0)
    SQ_WARN("rank 0/%d: all ranks are on one node: calls on device buffers pass through (would_not_pay), "
            "since over NVLink a plain all-reduce costs about what the codecs' kernels do; where the GPUs "
            "share only PCIe compressing may pay, and SQUALL_COST_MODEL=off compresses them", e->tr.nranks);
  const char *p2p = getenv("NCCL_P2P_DISABLE"), *shm = getenv("NCCL_SHM_DISABLE");
  if (p2p && shm && atoi(p2p) == 1 && atoi(shm) == 1)
    SQ_WARN("rank %d: NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 send this node's traffic over a network "
            "interface, where compressing may pay: SQUALL_COST_MODEL=off compresses these calls",
            e->tr.rank);
}

/* --------------------------------------------------------------- memory */

/* Offsets of everything a call needs in the scratch, computed once per
 * call from the route; `total` bytes in all. */
typedef struct {
  size_t k, sb;            /* top-k: entries per rank, slot bytes */
  size_t scalars;          /* [0] absmax, [1] scale, [2] decode error flag (int), [3] this rank's absmax */
  size_t work;             /* count floats: widened input / fp32 result */
  size_t absmax_ws;
  size_t backup;           /* count floats: the residual before the call */
  int has_backup;          /* top-k: where its encoder can copy it, or in a shard (run()) */
  size_t mine, slots, topk_ws; /* top-k */
  size_t rounds;               /* top-k's exchange in rounds (topk_rounds.h); 1: one exchange */
  size_t codes;            /* 16-bit */
  size_t twophase;         /* two-phase: its own scratch */
  squall_twophase_codec tp;
  size_t total;
} scratch_layout;

static void layout_for(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                       squall_route route, scratch_layout *L) {
  size_t n = c->count, off = 0;
  int p = e->tr.nranks;
  memset(L, 0, sizeof *L);
  if (route == SQ_ROUTE_TWOLEVEL) return; /* its scratch is the hierarchy's and the inner engine's */
#define PLACE(field, bytes) (L->field = off, off += squall__align_up(bytes))
  PLACE(scalars, 4 * sizeof(float));
  PLACE(work, n * sizeof(float));
  PLACE(absmax_ws, e->k.absmax_workspace_bytes(n));
  /* (top-k's is reserved where failures are fatal or the spare takes the
   * next residual too, and never written there: n floats more of scratch,
   * shared with the other routes, and untouched pages until used) */
  L->has_backup = cfg->errorFeedback && (route != SQ_ROUTE_TOPK || c->shard || e->k.topk_encode_backup);
  PLACE(backup, L->has_backup ? n * sizeof(float) : 0);
  if (route == SQ_ROUTE_TOPK) {
    L->k = squall__topk_k(n, cfg->topkRatio);
    L->sb = squall__topk_slot_bytes(L->k, cfg->topkValues);
    PLACE(mine, L->sb);
    PLACE(slots, (size_t)p * L->sb);
    PLACE(topk_ws, e->k.topk_workspace_bytes(n, L->k));
    /* in rounds, the finish overlaps the wire; where the residual is only
     * updated after the exchange, a failed late round would leave it half
     * done, so those calls (no backup: the device's route) take one. The
     * host's encoder updates it first: in place where failures are fatal,
     * into the spare, or where the backup restores it */
    L->rounds = 1;
    if ((!cfg->errorFeedback || L->has_backup) && strcmp(e->k.name, "host") == 0)
      L->rounds = squall__topk_rounds(&e->tr, n, L->k, cfg->chunkBytes);
  } else if (route == SQ_ROUTE_HALF) {
    PLACE(codes, n * sizeof(uint16_t));
  } else if (route == SQ_ROUTE_TWOPHASE) {
    squall__twophase_select(cfg, c->dtype, &L->tp);
    L->tp.guess = cfg->errorFeedback && e->k.half_encode_guess != NULL; /* the tensor keeps its last scale */
    L->tp.alone = p == 1 && strcmp(e->k.name, "host") == 0;
    /* chunks overlap only where the transport has non-blocking calls */
    if (!e->tr.ialltoall || !e->tr.iallgather || !e->tr.wait) L->tp.chunk_bytes = 0;
    PLACE(twophase, squall__twophase_scratch_bytes(&L->tp, n, p));
  }
#undef PLACE
  L->total = off;
}

/* A piece of the scratch, checked against its size: a layout bug becomes
 * an internal error before anything collective, not a buffer overrun. */
static void *carve(const squall_engine *e, size_t off, size_t bytes) {
  if (off > e->scratch_bytes || bytes > e->scratch_bytes - off) return NULL;
  return (char *)e->scratch + off;
}

static squallResult_t scratch_reserve(squall_engine *e, size_t bytes, void *stream) {
  if (bytes <= e->scratch_bytes) return squallSuccess;
  /* the new one first: on failure the old one stays (scratch_bytes never
   * falls below what a header planned); the old one is kept while a graph
   * may use it (graph_memory.h) */
  void *p = squall__graph_memory_replace(&e->graphs, &e->k, stream, e->scratch, e->scratch_bytes, &bytes);
  SQ_RETURN_ERROR_IF(p == NULL, squallSystemError, "cannot allocate %zu bytes of %s scratch", bytes, e->k.name);
  e->scratch = p;
  e->scratch_bytes = bytes;
  return squallSuccess;
}

static squallResult_t host_reserve(squall_engine *e, size_t bytes) {
  if (bytes <= e->host_bytes) return squallSuccess;
  void *p = realloc(e->host, bytes);
  SQ_RETURN_ERROR_IF(p == NULL, squallSystemError, "cannot allocate %zu bytes of host scratch", bytes);
  e->host = p;
  e->host_bytes = bytes;
  return squallSuccess;
}

static size_t lossless_host_bytes(int p, size_t k, squallValueType_t vt) {
  size_t bound = squall__lossless_bound(k, vt), scratch = squall__lossless_scratch_bytes(k, vt);
  return squall__align_up(bound) + squall__align_up((size_t)p * bound) + squall__align_up(scratch) + 2 * sizeof(size_t) * (size_t)p;
}

static int use_lossless(const squall_engine *e, const squallConfig_t *cfg) {
  return cfg->zstdLevel > 0 && e->tr.allgatherv != NULL;
}

/* What one compressed call works with, all carved before the header. */
typedef struct {
  scratch_layout L;
  squall_tensor *slot;
  const float *g;  /* the gradient in fp32 */
  float *work;     /* count floats */
  float *res;      /* residual or NULL */
  float *backup;   /* copy of res taken before it changes */
  float *spare;    /* top-k: where the encoder writes the next residual, swapped in on success */
  int backed_up;   /* backup holds all of res as it was */
  float *scalars;
  void *absmax_ws, *mine, *slots, *topk_ws;
  uint16_t *codes;
  void *twophase;
  double codec_s;
  uint64_t wire;
  int fatal;                  /* any failure ends the process: nothing to restore */
  int flat_reason;            /* squallFlatReason_t of a flat compressed call */
  int fresh;                  /* prepare() allocated: this call's times are not typical */
  double t_start;             /* when the call entered the engine */
  squall_hier_figures hier;   /* a two-level call's bytes and time */
  uint64_t chunks;            /* a shard call's chunks (call_chunks), for its outer call */
} run_state;

/* The configuration a call runs with: the agreed one, without the lossless
 * stage where its variant sends top-k's slots raw. */
static squallConfig_t run_config(const squallConfig_t *cfg, const squall_call *c) {
  squallConfig_t rc = *cfg;
  if (c->raw_slots) rc.zstdLevel = 0;
  return rc;
}

/* The residual's address hint: a shard's is the caller's tensor's. */
static squall_tensor_key hint_of(const squall_call *c) {
  squall_tensor_key k = {c->send, c->recv};
  if (c->key) k = (squall_tensor_key){c->key, c->key_recv};
  return k;
}

/* Step 1: everything the call needs, before anything collective; st->L
 * holds the layout already. */
static squallResult_t prepare(squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                              squall_route route, run_state *st) {
  if (route == SQ_ROUTE_TWOLEVEL) { /* the shard's state lives in the inner engine */
    SQ_RETURN_ERROR_IF(squall__residuals_add_shape(e->residuals, c->count, kind_of(c)) != 0, squallSystemError,
                       "out of memory for tensor state");
    return squall__hier_prepare(e->hier, c);
  }
  st->fresh = st->L.total > e->scratch_bytes; /* memory touched for the first time is slow */
  SQ_FORWARD_IF_ERROR(scratch_reserve(e, st->L.total, c->stream));
  if (route == SQ_ROUTE_TOPK && st->L.rounds > 1)
    SQ_FORWARD_IF_ERROR(host_reserve(e, squall__topk_rounds_host_bytes(c->count, st->L.k, cfg->topkValues,
                                                                       e->tr.nranks, st->L.rounds,
                                                                       use_lossless(e, cfg))));
  else if (route == SQ_ROUTE_TOPK && use_lossless(e, cfg))
    SQ_FORWARD_IF_ERROR(host_reserve(e, lossless_host_bytes(e->tr.nranks, st->L.k, cfg->topkValues)));
  if (cfg->errorFeedback) {
    /* a shard prepared ahead (squall__engine_prepare_shard): its slot, looked up once */
    squall_tensor *ahead = e->shard_slot;
    e->shard_slot = NULL;
    squall_tensor_key key = hint_of(c);
    uint64_t kind = kind_of(c);
    st->slot = c->shard && ahead && squall__tensor_key_eq(ahead->key, key) && ahead->count == c->count &&
                       ahead->kind == kind
                   ? ahead : squall__residuals_slot(e->residuals, key, c->count, kind);
    SQ_RETURN_ERROR_IF(st->slot == NULL, squallSystemError, "out of memory for tensor state");
    int new_residual = st->slot->residual == NULL;
    st->fresh |= new_residual;
    SQ_FORWARD_IF_ERROR(squall__residuals_ensure(e->residuals, st->slot, cfg->efMaxBytes, c->stream));
    st->res = st->slot->residual;
    if (c->capturing) st->slot->pinned = 1; /* the graph's now: replays never come back here */
    /* Host top-k where a failure returns: the next residual goes beside
     * the old one, which a failure then finds as it was, instead of a
     * backup copy made in the selection pass (an extra stream of n floats
     * written). A shard keeps its backup: the outer call may fail after
     * it, and undoes it from there (squall__engine_undo_shard). */
    int may_return = !(e->tr.failures_fatal && e->tr.failures_fatal(e->tr.ctx));
    if (route == SQ_ROUTE_TOPK && st->res && may_return && !c->shard && e->k.topk_encode_to) {
      int created;
      st->spare = squall__residuals_spare(e->residuals, st->slot, cfg->efMaxBytes, c->stream, &created);
      /* Memory first touched in a call makes its time untypical (fresh,
       * which the cost model skips). A new residual would only be read in
       * this call and first written a call later, as the spare: it is
       * touched here instead. */
      if (st->spare && new_residual) SQ_FORWARD_IF_ERROR(e->k.zero(c->stream, st->res, c->count * sizeof(float)));
      st->fresh |= created;
    }
  } else { /* decide() counts the call per shape: the shape must exist */
    SQ_RETURN_ERROR_IF(squall__residuals_add_shape(e->residuals, c->count, kind_of(c)) != 0,
                       squallSystemError, "out of memory for tensor state");
  }
  const scratch_layout *L = &st->L;
  size_t n = c->count;
  st->scalars = carve(e, L->scalars, 4 * sizeof(float));
  st->work = carve(e, L->work, n * sizeof(float));
  st->absmax_ws = carve(e, L->absmax_ws, e->k.absmax_workspace_bytes(n));
  st->backup = st->res && L->has_backup ? carve(e, L->backup, n * sizeof(float)) : NULL;
  int bad = !st->scalars || !st->work || (n && !st->absmax_ws && e->k.absmax_workspace_bytes(n)) ||
            (st->res && L->has_backup && !st->backup);
  if (route == SQ_ROUTE_TOPK) {
    st->mine = carve(e, L->mine, L->sb);
    st->slots = carve(e, L->slots, (size_t)e->tr.nranks * L->sb);
    st->topk_ws = carve(e, L->topk_ws, e->k.topk_workspace_bytes(n, L->k));
    bad |= !st->mine || !st->slots || !st->topk_ws;
  } else if (route == SQ_ROUTE_HALF) {
    st->codes = carve(e, L->codes, n * sizeof(uint16_t));
    bad |= !st->codes;
  } else if (route == SQ_ROUTE_TWOPHASE) {
    st->twophase = carve(e, L->twophase, squall__twophase_scratch_bytes(&L->tp, n, e->tr.nranks));
    bad |= !st->twophase;
  }
  SQ_RETURN_ERROR_IF(bad, squallInternalError, "scratch layout of %zu bytes overruns the %zu-byte scratch",
                     L->total, e->scratch_bytes);
  return squallSuccess;
}

/* ----------------------------------------------------------------- run */
/* Puts the result, now fp32 in `out` (recv itself for fp32 data, the work
 * buffer otherwise), into recv: average and narrowing in one pass. */
static squallResult_t finish(squall_engine *e, const squall_call *c, float *out) {
  float div = c->op == SQ_OP_AVG ? (float)e->tr.nranks : 1.0f;
  if (c->dtype == SQ_DT_F32 && div == 1.0f) return squallSuccess;
  return e->k.narrow(c->stream, (squall_dtype)c->dtype, out, c->recv, c->count, div);
}

/* fp32 data lands in recv directly; narrower data in the work buffer first. */
static float *fp32_out(const squall_call *c, run_state *st) {
  return c->dtype == SQ_DT_F32 ? (float *)c->recv : st->work;
}

static squallResult_t run_half(squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                               run_state *st) {
  sq_half_kind kind = cfg->codec == squallCodecBf16 ? SQ_HALF_BF16
                      : cfg->codec == squallCodecFp16 ? SQ_HALF_FP16
                                                      : squall__dtype_half_kind(c->dtype);
  size_t n = c->count;
  int p = e->tr.nranks;
  void *s = c->stream;
  double t0 = squall__now();
  SQ_FORWARD_IF_ERROR(e->k.absmax(s, st->g, st->res, n, &st->scalars[0], st->absmax_ws));
  double t1 = squall__now();
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_max_f32(e->tr.ctx, s, &st->scalars[0], 1));
  /* The sum of p codes must stay finite: scale the global max to limit/p. */
  unsigned fp = squall__fp_default_begin(); /* every rank's limit, whatever its rounding mode */
  float limit = (kind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX) / (float)p;
  squall__fp_default_end(fp);
  float max_scale = kind == SQ_HALF_FP16 ? sq_pow2(100) : 1.0f; /* bf16: range is float's */
  double t2 = squall__now();
  SQ_FORWARD_IF_ERROR(e->k.pow2_scale(s, &st->scalars[0], limit, max_scale, &st->scalars[1]));
  SQ_FORWARD_IF_ERROR(e->k.half_encode(s, kind, st->g, st->res, st->codes, n, &st->scalars[1]));
  double t3 = squall__now();
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_half(e->tr.ctx, s, st->codes, n, kind));
  double t4 = squall__now();
  float *out = fp32_out(c, st);
  int cold = n * sizeof(float) >= SQ_OUT_COLD_BYTES;
  SQ_FORWARD_IF_ERROR(e->k.half_decode(s, kind, st->codes, out, n, &st->scalars[1], cold));
  SQ_FORWARD_IF_ERROR(finish(e, c, out));
  st->codec_s += (t1 - t0) + (t3 - t2) + (squall__now() - t4);
  st->wire += squall__ring_allreduce_wire(2 * (uint64_t)n, p) + squall__ring_allreduce_wire(4, p);
  return squallSuccess;
}

static squallResult_t run_dense(squall_engine *e, const squall_call *c, run_state *st) {
  size_t n = c->count;
  double t0 = squall__now();
  SQ_FORWARD_IF_ERROR(e->k.flush(c->stream, st->g, st->res, st->work, n));
  double t1 = squall__now();
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_sum_f32(e->tr.ctx, c->stream, st->work, fp32_out(c, st), n));
  double t2 = squall__now();
  SQ_FORWARD_IF_ERROR(finish(e, c, fp32_out(c, st)));
  st->codec_s += (t1 - t0) + (squall__now() - t2);
  st->wire += squall__ring_allreduce_wire(4 * (uint64_t)n, e->tr.nranks);
  return squallSuccess;
}

/* All-gather of the raw slots into st->slots. */
static squallResult_t exchange_raw(squall_engine *e, const squall_call *c, run_state *st) {
  SQ_FORWARD_IF_ERROR(e->tr.allgather(e->tr.ctx, c->stream, st->mine, st->slots, st->L.sb));
  st->wire += (uint64_t)(e->tr.nranks - 1) * st->L.sb;
  return squallSuccess;
}

/* All-gather of the lossless-coded slots; decodes them into st->slots. */
static squallResult_t exchange_lossless(squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                                        run_state *st) {
  int p = e->tr.nranks;
  size_t k = st->L.k, sb = st->L.sb;
  squallValueType_t vt = cfg->topkValues;
  size_t bound = squall__lossless_bound(k, vt), scratch = squall__lossless_scratch_bytes(k, vt);
  /* host_reserve() ran in prepare(): carve the same layout */
  char *send = e->host, *recv = send + squall__align_up(bound), *raw = recv + squall__align_up((size_t)p * bound);
  size_t *sizes = (size_t *)(raw + squall__align_up(scratch));
  size_t *displs = sizes + p;
  double t0 = squall__now();
  /* zstd allocates inside: when it fails here, this rank still joins the
   * all-gather, with an empty payload that every peer rejects, so that all
   * ranks fail this call together instead of waiting for this one. */
  size_t z = squall__lossless_encode(st->mine, k, vt, cfg->zstdLevel, send, bound, raw);
  st->codec_s += squall__now() - t0;
  SQ_FORWARD_IF_ERROR(e->tr.allgatherv(e->tr.ctx, c->stream, send, z, recv, (size_t)p * bound, sizes, displs));
  SQ_RETURN_ERROR_IF(z == 0, squallInternalError, "zstd failed to compress a %zu-entry slot", k);
  double t2 = squall__now();
  for (int r = 0; r < p; r++)
    SQ_RETURN_ERROR_IF(squall__lossless_decode(recv + displs[r], sizes[r], k, vt, c->count,
                                               (char *)st->slots + (size_t)r * sb, raw) != 0,
                       squallRemoteError,
                       "rank %d sent a corrupt or truncated compressed top-k payload (%zu bytes)", r,
                       sizes[r]);
  st->codec_s += squall__now() - t2;
  st->wire += (uint64_t)(p - 1) * (z + sizeof(uint64_t));
  return squallSuccess;
}

/* The device decoder flags a corrupt payload in kernel memory: read it
 * back (a synchronisation) unless the stream is being captured, where no
 * host wait is possible; see squall(7), FAILURE POLICY. */
static squallResult_t check_decode_flag(squall_engine *e, const squall_call *c, run_state *st) {
  if (e->header_every_call || c->capturing) return squallSuccess; /* host: returned directly */
  int flag = 0;
  SQ_FORWARD_IF_ERROR(e->k.to_host(c->stream, &flag, &st->scalars[2], sizeof flag));
  SQ_RETURN_ERROR_IF(flag != 0, squallRemoteError,
                     "a peer's top-k payload is corrupt (index out of range or not ascending)");
  return squallSuccess;
}

static squallResult_t run_topk(squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                               run_state *st) {
  size_t n = c->count, k = st->L.k;
  int p = e->tr.nranks;
  void *s = c->stream;
  double t0 = squall__now();
  if (cfg->topkValues == squallValueFp16) {
    SQ_FORWARD_IF_ERROR(e->k.absmax(s, st->g, st->res, n, &st->scalars[0], st->absmax_ws));
    SQ_FORWARD_IF_ERROR(e->k.pow2_scale(s, &st->scalars[0], SQ_F16_MAX, sq_pow2(100), &st->scalars[1]));
  }
  /* The encoder updates the residual in the same pass as the selection,
   * which saves reading g and the residual a second time, where no error
   * returns (failures are fatal), or into the spare (swapped in once the
   * call has succeeded: run()), or where a backup restores it: the host
   * encoder copies it as it reads it (topk_encode_backup), else a pass of
   * its own did (run()). Without any of these and where a failure
   * returns, the residual is only read here and written after everything
   * that can fail (topk_finish), so that a failed call leaves it as it
   * was. */
  int res_done = st->res && (st->fatal || st->backup || st->spare); /* by the encoder */
  if (st->spare) {
    SQ_FORWARD_IF_ERROR(e->k.topk_encode_to(s, st->g, st->res, st->spare, n, k, cfg->topkValues, &st->scalars[1],
                                            st->mine, st->topk_ws));
  } else if (res_done && st->backup && !st->backed_up && e->k.topk_encode_backup) {
    SQ_FORWARD_IF_ERROR(e->k.topk_encode_backup(s, st->g, st->res, n, k, cfg->topkValues, &st->scalars[1],
                                                st->mine, st->topk_ws, st->backup));
    st->backed_up = 1; /* whole: the kernel fails only before anything changed */
  } else if (res_done)
    SQ_FORWARD_IF_ERROR(e->k.topk_encode(s, st->g, st->res, n, k, cfg->topkValues, &st->scalars[1], st->mine,
                                         st->topk_ws));
  else
    SQ_FORWARD_IF_ERROR(e->k.topk_select(s, st->g, st->res, n, k, cfg->topkValues, &st->scalars[1], st->mine,
                                         st->topk_ws));
  st->codec_s += squall__now() - t0;
  float *out = fp32_out(c, st);
  if (st->L.rounds > 1) { /* the residual is done (layout_for): the exchange and the finish, overlapped */
    squall_topk_rounds_call rc = {.tr = &e->tr, .n = n, .k = k, .rounds = st->L.rounds, .values = cfg->topkValues,
                                  .zstd_level = use_lossless(e, cfg) ? cfg->zstdLevel : 0, .mine = st->mine,
                                  .slots = st->slots, .g = st->g, .out = out, .host = e->host};
    SQ_RETURN_ERROR_IF(st->res && !res_done, squallInternalError, "top-k in rounds with the residual still to update");
    SQ_FORWARD_IF_ERROR(squall__topk_rounds_run(&rc, &st->codec_s, &st->wire));
  } else {
    if (use_lossless(e, cfg)) SQ_FORWARD_IF_ERROR(exchange_lossless(e, c, cfg, st));
    else SQ_FORWARD_IF_ERROR(exchange_raw(e, c, st));
    double t1 = squall__now();
    SQ_FORWARD_IF_ERROR(e->k.zero(s, &st->scalars[2], sizeof(int)));
    SQ_FORWARD_IF_ERROR(e->k.topk_finish(s, st->g, res_done ? NULL : st->res, n, k, cfg->topkValues, st->topk_ws,
                                         st->slots, p, e->tr.rank, out, (int *)&st->scalars[2]));
    SQ_FORWARD_IF_ERROR(check_decode_flag(e, c, st));
    st->codec_s += squall__now() - t1;
  }
  double t2 = squall__now();
  SQ_FORWARD_IF_ERROR(finish(e, c, out));
  st->codec_s += squall__now() - t2;
  return squallSuccess;
}

/* Quantised codecs, and 16-bit codes summed in fp32 (twophase.h). */
static squallResult_t run_twophase(squall_engine *e, const squall_call *c, run_state *st) {
  float *out = fp32_out(c, st);
  SQ_FORWARD_IF_ERROR(squall__twophase_allreduce(&e->tr, &e->k, &st->L.tp, c->stream, st->g, st->res, out,
                                                 c->count, st->scalars, st->absmax_ws, st->twophase,
                                                 st->res ? &st->slot->last_scale : NULL, st->backup, &st->backed_up,
                                                 &st->codec_s, &st->wire));
  return finish(e, c, out);
}

/* Step 4. The residual is backed up before any encoder touches it and put
 * back when anything fails: the mass it holds is never lost, whatever
 * step failed. Exact, unlike undoing an encode. A copy costs a pass over
 * n floats, a third of a host 16-bit call's codec time: the two-phase
 * call makes it in its encoding pass where it guesses the scale, and the
 * quantised encoder block by block as it encodes (streamed past the
 * cache; twophase.c), and the host top-k encoder in its selection
 * pass, where it cannot write the next residual into the shape's spare
 * instead (prepare()), which needs no backup at all. Top-k without those
 * kernels needs none: it writes the residual after everything that can
 * fail (run_topk). */
static squallResult_t run(squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                          squall_route route, run_state *st) {
  size_t n = c->count;
  double t0 = squall__now();
  if (c->dtype == SQ_DT_F32 && c->premul == 1.0f) {
    st->g = c->send;
  } else {
    SQ_FORWARD_IF_ERROR(e->k.widen(c->stream, (squall_dtype)c->dtype, c->send, st->work, n, c->premul));
    st->g = st->work;
  }
  /* The backup costs a pass over n floats. Only a failure that returns
   * needs it: not where every failure ends the process (failures_fatal:
   * a failed MPI call does, and the MPI entry points hand every error of
   * theirs to the communicator's error handler), not for top-k writing
   * into the spare (prepare()), and not for top-k without
   * topk_encode_backup, whose residual then changes only after the last
   * step that can fail (run_topk). The two-phase call and the host top-k
   * encoder without a spare copy it in their encoding pass. */
  int fatal = e->tr.failures_fatal && e->tr.failures_fatal(e->tr.ctx);
  st->fatal = fatal;
  if (st->slot && st->res) st->slot->unsent = 1; /* what the codec leaves, until a fold empties it */
  /* a shard's communicator is a split of the caller's, whose error handler
   * may have changed since, and the outer call may still fail after the
   * shard's: shards always keep the way back */
  st->backed_up = 0;
  int topk_fused = route == SQ_ROUTE_TOPK && e->k.topk_encode_backup != NULL;
  if (!st->res || st->spare || !(c->shard || (!fatal && (route != SQ_ROUTE_TOPK || topk_fused))))
    st->backup = NULL;
  else if (st->backup && route != SQ_ROUTE_TWOPHASE && !topk_fused) { /* those take it themselves */
    SQ_FORWARD_IF_ERROR(e->k.widen(c->stream, SQ_DT_F32, st->res, st->backup, n, 1.0f));
    st->backed_up = 1;
  }
  st->codec_s += squall__now() - t0;
  squallResult_t r = route == SQ_ROUTE_TOPK       ? run_topk(e, c, cfg, st)
                     : route == SQ_ROUTE_DENSE    ? run_dense(e, c, st)
                     : route == SQ_ROUTE_TWOPHASE ? run_twophase(e, c, st)
                                                  : run_half(e, c, cfg, st);
  if (r != squallSuccess && st->res && st->backed_up) {
    char why[512];
    snprintf(why, sizeof why, "%s", squallGetLastError());
    if (e->k.widen(c->stream, SQ_DT_F32, st->backup, st->res, n, 1.0f) != squallSuccess)
      SQ_WARN("restoring a %zu-element residual after a failure failed too: %s", n, squallGetLastError());
    squall__fail(r, "%s", why); /* keep the first failure as the detail */
  }
  if (r == squallSuccess && st->spare && squall__residuals_take_spare(e->residuals, st->slot) != 0)
    r = squall__fail(squallInternalError, "the %zu-element residual's spare went missing during the call", n);
  if (r == squallSuccess && c->shard && st->backed_up) { /* the outer call may still fail: keep the way back */
    e->undo_res = st->res;
    e->undo_backup = st->backup;
    e->undo_n = n;
  }
  return r;
}

/* ------------------------------------------------------------- header */
static const char *dtype_name(int t) {
  return t == SQ_DT_F32 ? "float32" : t == SQ_DT_F16 ? "float16" : t == SQ_DT_BF16 ? "bfloat16" : "other";
}

/* The call's arguments every rank must pass alike (MPI and NCCL require
 * it; premul is per rank by design): the type and the operation. */
static int64_t call_signature(const squall_call *c) { return (int64_t)c->dtype * 16 + (int64_t)c->op; }

/* Step 2: one all-reduce(min) of [ok, digest, -digest], the cost model's
 * [-forced, -t_comp, -t_plain, -t_variant...] (maxima, through the
 * minimum), [count, -count, signature, -signature]: a rank that passed
 * another count, type or operation is found here, before anything has
 * changed, where otherwise the collectives that follow would mismatch
 * (a hang, a truncation error on some ranks only, or a silent wrong sum);
 * [-nonblocking]: a communicator's blocking mode is each rank's own
 * choice, and one non-blocking rank makes every rank pass through; and
 * [changes, -changes], the squallSetConfig calls this process has made:
 * ranks that made different numbers of them have broken its collective
 * rule (squall(7)), which is said, where this header could still meet;
 * [-foreign]: a rank whose buffers its kernels cannot read makes every
 * rank pass through. */
#define HEADER_FIXED 14
#define HEADER_WORDS (HEADER_FIXED + SQ_COST_VARIANTS)
static squallResult_t header(squall_engine *e, const squall_call *c, const squallConfig_t *cfg, uint64_t gen,
                             int ok, int *agreed, int *all_ok, int *foreign, cost_verdict *v) {
  int64_t d = digest(cfg), sig = call_signature(c), n = (int64_t)c->count;
  int64_t changes = (int64_t)(gen & INT64_MAX);
  int64_t h[HEADER_WORDS] = {ok ? 1 : 0, d, -d, -(int64_t)v->forced, -v->comp_ns, -v->plain_ns, n, -n, sig, -sig,
                             c->nonblocking ? -1 : 0, changes, -changes, c->foreign ? -1 : 0};
  for (int i = 0; i < SQ_COST_VARIANTS; i++) h[HEADER_FIXED + i] = -v->variant_ns[i];
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_min_i64_host(e->tr.ctx, c->stream, h, HEADER_WORDS));
  squall__stats_record_header(&e->stats);
  /* Every rank sees the same minima: all of them return this error (not
   * where the ok word is neither 0 nor 1: a header that came back garbled
   * says nothing about the arguments, and is not "all ok" below). */
  int formed = h[0] == 0 || h[0] == 1;
  SQ_RETURN_ERROR_IF(formed && h[6] != -h[7], squallInvalidArgument,
                     "ranks passed different counts to one all-reduce (from %lld to %lld elements; "
                     "this rank: %zu %s elements): nothing was changed",
                     (long long)h[6], (long long)-h[7], c->count, dtype_name(c->dtype));
  SQ_RETURN_ERROR_IF(formed && h[8] != -h[9], squallInvalidArgument,
                     "ranks passed different datatypes or operations to one %zu-element all-reduce "
                     "(this rank: %s, %s): nothing was changed",
                     c->count, dtype_name(c->dtype), c->op == SQ_OP_AVG ? "average" : "sum");
  *all_ok = h[0] == 1;
  *agreed = h[1] == -h[2];
  /* The slowest rank sets a collective's time: compare the largest
   * predictions; a rank without figures (or exploring) makes all compress. */
  v->forced = h[3] < 0;
  v->comp_ns = -h[4];
  v->plain_ns = -h[5];
  for (int i = 0; i < SQ_COST_VARIANTS; i++) v->variant_ns[i] = -h[HEADER_FIXED + i];
  if (formed && h[11] != -h[12] && !e->said_changes++)
    SQ_WARN("rank %d: the ranks have called squallSetConfig different numbers of times (from %lld to %lld; "
            "this rank: %lld): it is collective, to be called between the same two calls on every rank, "
            "or ranks that pass a call through without a header meet others that exchange one",
            e->tr.rank, (long long)h[11], (long long)-h[12], (long long)changes);
  e->agreed_nonblocking = formed && h[10] < 0; /* for device calls without a header, too */
  *foreign = formed && h[13] < 0;
  e->agreed_gen = gen;
  e->agreed_valid = 1;
  e->agreed_ok = *agreed;
  e->agreed_cfg = *cfg;
  if (!*agreed && !(e->warned_valid && e->warned_gen == gen)) {
    char mine[DESC_BYTES];
    describe(cfg, mine);
    SQ_WARN("ranks disagree on the squall configuration: calls on this communicator pass through "
            "until they agree; rank %d has '%s'", e->tr.rank, mine);
    e->warned_gen = gen;
    e->warned_valid = 1;
  }
  return squallSuccess;
}

/* ------------------------------------------------------- the cost model */
/* Seconds as header nanoseconds: bounded, so that negating them is safe. */
static int64_t to_ns(double s) { return s > 0 ? (s < 1e9 ? (int64_t)(s * 1e9) : (int64_t)1e18) : 0; }


/* The cost model's slot for a codec's calls on a route: codec x route,
 * with two slots for top-k sent without the lossless stage (flat, and
 * two-level with raw shard slots), which time differently. */
#define SLOT_TOPK_RAW 6
#define SLOT_TWOLEVEL_RAW 7
static int cost_kind(const squallConfig_t *cfg, squall_route route) {
  int slot = (int)route;
  if (cfg->codec == squallCodecTopk && cfg->zstdLevel == 0)
    slot = route == SQ_ROUTE_TOPK ? SLOT_TOPK_RAW : route == SQ_ROUTE_TWOLEVEL ? SLOT_TWOLEVEL_RAW : slot;
  return (int)cfg->codec * 8 + slot;
}

/* The cost model runs on host engines, whose header every call exchanges
 * carries its figures; never on a shard (the outer call is what it weighs). */
static int model_runs(const squall_engine *e, const squallConfig_t *cfg, const squall_call *c) {
  return cfg->costModel && e->header_every_call && !c->shard;
}

/* What a compressed call on `route` moves; 0 for a route the model does
 * not weigh (the dense fallback is itself the plain all-reduce's bytes;
 * two-level and shard calls: see squall(7), COST MODEL). */
static int cost_call(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                     squall_route route, const scratch_layout *L, squall_cost_call *cc) {
  size_t n = c->count;
  int p = e->tr.nranks;
  memset(cc, 0, sizeof *cc);
  cc->kind = cost_kind(cfg, route);
  cc->n = n;
  cc->bytes_in = (uint64_t)n * c->elsize;
  cc->nranks = p;
  cc->chunks = 1;
  if (route == SQ_ROUTE_HALF) {
    cc->wire = squall__ring_allreduce_wire(2 * (uint64_t)n, p);
    cc->collectives = 2;
  } else if (route == SQ_ROUTE_TOPK) {
    /* rounds without the lossless stage go packed where smaller; a
     * lossless call is weighed at its raw size */
    cc->wire = L->rounds > 1 && !use_lossless(e, cfg)
                   ? squall__topk_rounds_wire(n, L->k, cfg->topkValues, p, L->rounds)
                   : (uint64_t)(p - 1) * L->sb;
    /* (rounds overlap the finish only, not the selection: no chunks here) */
    cc->collectives = (int)L->rounds + (use_lossless(e, cfg) ? 1 : 0);
  } else if (route == SQ_ROUTE_TWOPHASE) {
    size_t se, bb;
    squall__twophase_geometry(&L->tp, n, p, &se, &bb);
    cc->wire = 2 * (uint64_t)(p - 1) * bb;
    if (L->tp.alone) { /* one rank: the max of the 16-bit scale, nothing exchanged, nothing pipelined */
      cc->collectives = L->tp.quant ? 0 : 1;
    } else {
      cc->chunks = squall__twophase_chunks(&L->tp, n, p);
      cc->collectives = 2 * (int)cc->chunks + (L->tp.quant ? 0 : 1);
    }
  } else {
    return 0;
  }
  return cc->kind < SQ_COST_KINDS;
}

/* This rank's predictions for the header. The model runs where the header
 * is exchanged on every call (host memory), so that the predictions, which
 * come from rank-local timings, are shared at no extra cost; a declined
 * size class is compressed now and then to keep the codec's figures
 * current (squall__cost_explore, the same on all ranks). */
static void cost_vote(squall_engine *e, const squall_call *c, const squallConfig_t *cfg, squall_route guess,
                      const scratch_layout *L, cost_verdict *v) {
  squall_cost_call cc;
  memset(v, 0, sizeof *v);
  v->forced = 1;
  if (!model_runs(e, cfg, c) || !cost_call(e, c, cfg, guess, L, &cc)) return;
  if (squall__cost_explore(&e->cost, cc.bytes_in)) {
    v->explored = 1;
    return;
  }
  double t_plain, t_comp;
  int known = squall__cost_predict(&e->cost, &cc, cfg->linkGbps, &t_plain, &t_comp);
  if (!known) return;
  v->forced = 0;
  v->comp_ns = to_ns(t_comp);
  v->plain_ns = to_ns(t_plain);
  SQ_TRACE("rank %d: %zu elements: predicted %.3g s compressed, %.3g s plain", e->tr.rank, c->count, t_comp,
           t_plain);
}

/* The chunks a compressed call ran in (top-k: the rounds of its exchange,
 * which pipeline the exchange but not the selection: the model's chunks,
 * which would overlap the whole codec, stay 1 there); 0 for a route the
 * model does not weigh. */
static uint64_t call_chunks(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                            squall_route route, const run_state *st) {
  squall_cost_call cc;
  if (!cost_call(e, c, cfg, route, &st->L, &cc)) return 0;
  return route == SQ_ROUTE_TOPK ? st->L.rounds : cc.chunks;
}

/* Feeds a finished compressed call's figures to the model: the codec's
 * time per element, and the exchange (the call's time less the codec's;
 * a pipelined call hides part of its exchange, which biases the link fast
 * and so towards plain, only near the crossover). */
static void cost_learn(squall_engine *e, const squall_call *c, const squallConfig_t *cfg, squall_route route,
                       const run_state *st, double seconds) {
  squall_cost_call cc;
  int weighed = cost_call(e, c, cfg, route, &st->L, &cc);
  squall__stats_record_chunks(&e->stats, call_chunks(e, c, cfg, route, st));
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  if (st->fresh) { /* page faults of new memory: not what the next call will see */
    squall__cost_note_call(&e->cost, cost_kind(cfg, route), bytes_in, -1.0); /* but its first call ran */
    return;
  }
  if (weighed) {
    squall__cost_note_codec(&e->cost, cc.kind, cc.n, st->codec_s);
    double xfer = seconds - st->codec_s;
    squall__cost_note_link(&e->cost, cc.collectives, st->wire, xfer > 0 ? xfer : 0);
  }
  /* the whole call, header and all: against plain, and against the call's other variants */
  squall__cost_note_call(&e->cost, cost_kind(cfg, route), bytes_in, squall__now() - st->t_start);
}

/* ------------------------------------------------------------ variants */
/* Which variants of a call the cost model chooses between (SQ_VARIANT_*
 * bits), from inputs the same on every rank once the header agrees: two
 * levels or flat where the nodes allow two levels, and top-k's slots with
 * or without the lossless stage. Host engines only (the times travel in
 * the header); none until the nodes are known. */
static unsigned variants_allowed(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                                 int two_level) {
  if (!model_runs(e, cfg, c) || two_level < 0) return 0;
  unsigned allowed = two_level == 1 ? SQ_VARIANT_FLAT : 0;
  if (cfg->codec == squallCodecTopk && use_lossless(e, cfg)) allowed |= SQ_VARIANT_RAW;
  return allowed;
}

static int is_variant_of(int v, unsigned allowed) { return (v & ~(int)allowed) == 0; }

/* This rank's whole-call times of every allowed variant at this size, for
 * the header. in: the call's decision inputs (nodes as known). */
static void variant_vote(squall_engine *e, const squall_call *c, const squallConfig_t *cfg, const decide_in *in,
                         unsigned allowed, cost_verdict *v) {
  decide_in flat = *in; /* the route this call would take flat */
  flat.two_level = 0;
  flat.count = NULL;
  squallPassReason_t why;
  squall_route flat_route = decide(&flat, &why);
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  for (int i = 0; i < SQ_COST_VARIANTS; i++) {
    squallConfig_t vc = *cfg;
    if (i & SQ_VARIANT_RAW) vc.zstdLevel = 0;
    squall_route route = (allowed & SQ_VARIANT_FLAT) && !(i & SQ_VARIANT_FLAT) ? SQ_ROUTE_TWOLEVEL : flat_route;
    double t = squall__cost_call_seconds(&e->cost, cost_kind(&vc, route), bytes_in);
    v->variant_ns[i] = is_variant_of(i, allowed) && route != SQ_ROUTE_PASS && t > 0 ? to_ns(t) : NS_UNKNOWN;
    SQ_TRACE("rank %d: %zu elements: variant %d: %.3g s", e->tr.rank, c->count, i, t);
  }
}

/* After the header: the agreed times, and (counted) the call counted
 * with the variant it runs. */
static void variant_agree(squall_engine *e, const squallConfig_t *cfg, unsigned allowed, int variant,
                          uint64_t bytes_in, const cost_verdict *v, int counted) {
  for (int i = 0; i < SQ_COST_VARIANTS; i++)
    if (is_variant_of(i, allowed) && v->variant_ns[i] < NS_UNKNOWN)
      squall__cost_variant_agree(&e->cost, (int)cfg->codec, i, bytes_in, (double)v->variant_ns[i] * 1e-9);
  if (counted) squall__cost_variant_count(&e->cost, (int)cfg->codec, allowed, variant, bytes_in);
}

/* A call that passes through for its configuration (the cost model
 * declined its size class, compression is off or the call is below the
 * size threshold, the ranks disagree) would leave the tensor's residual to
 * wait for its next compressed call, which can be hundreds of calls away
 * or never come. The residual rides along instead where the caller can
 * send it (c->can_fold: MPI's sum of floats on host memory): its
 * contribution becomes a = g + e, formed here (in place, in the receive
 * buffer; otherwise in `work` or the engine's fold buffer), and e is
 * emptied once the plain call succeeded. A two-level call's shard
 * residual, kept by the inner engine, is added at the shard's place. The
 * collective is the caller's plain one whether this rank folds or not, so
 * a choice made from this rank's residuals alone cannot make ranks
 * mismatch, and no header is needed: every such call of the tensor folds,
 * so what a compressed call leaves is delivered by the tensor's next call
 * that passes through (squall(7), ERROR FEEDBACK). */
static int can_fold(const squall_engine *e, const squall_call *c) {
  return c->can_fold && !c->foreign && e->header_every_call && !c->capturing && !c->shard && c->dtype == SQ_DT_F32 &&
         c->op == SQ_OP_SUM && c->premul == 1.0f && squall__residuals_process_bytes() != 0;
}

static int holds_mass(const squall_tensor *t) { return t && t->residual && t->unsent && !t->pinned; }

static float *fold_buffer(squall_engine *e, const squall_call *c, float *work) {
  if (c->send == c->recv) return (float *)c->recv;
  if (work) return work;
  size_t bytes = c->count * sizeof(float);
  if (e->fold_bytes < bytes) {
    float *b = malloc(bytes); /* failing only skips this fold: the mass waits for the next call */
    if (b == NULL) return NULL;
    free(e->fold_buf);
    e->fold_buf = b;
    e->fold_bytes = bytes;
  }
  return e->fold_buf;
}

static void fold_into_plain(squall_engine *e, const squall_call *c, float *work, squall_tensor *slot,
                            squall_decision *d) {
  if (!can_fold(e, c) || c->send == NULL || c->recv == NULL) return;
  squall_tensor *t = slot ? slot : squall__engine_carrier_slot(e, c);
  size_t first = 0, s = 0;
  squall_tensor *sh = squall__hier_shard_slot(e->hier, c, &first, &s);
  if (!holds_mass(t)) t = NULL;
  if (!holds_mass(sh) || first >= c->count) sh = NULL;
  if (t == NULL && sh == NULL) return;
  if (c->on_device && c->on_device(c)) return; /* asked only here: a fold is due (a device check costs) */
  float *a = fold_buffer(e, c, work);
  if (a == NULL) return;
  const float *g = c->send;
  double t0 = squall__now();
  const unsigned fp = squall__fp_default_begin(); /* the sum every other path forms */
  if (t) {
    const float *r = t->residual;
    for (size_t i = 0; i < c->count; i++) a[i] = g[i] + r[i];
  } else if (a != g) {
    memcpy(a, g, c->count * sizeof(float));
  }
  if (sh) {
    size_t m = c->count - first < s ? c->count - first : s;
    for (size_t j = 0; j < m; j++) a[first + j] += sh->residual[j];
  }
  squall__fp_default_end(fp);
  /* the plain call's whole time, which the model compares with compressed
   * ones, leaves out this pass: only the first declined call after
   * compressed ones makes it */
  d->t_start += squall__now() - t0;
  d->fold = a;
  d->fold_slot = t;
  d->fold_shard_slot = sh;
  SQ_TRACE("rank %d: %zu elements: the residual rides along the plain call", e->tr.rank, c->count);
}

static void empty_residual(squall_engine *e, squall_tensor *t, size_t count) {
  if (t == NULL || t->residual == NULL) return;
  e->k.zero(NULL, t->residual, count * sizeof(float));
  t->unsent = 0;
}

void squall__engine_fold_done(squall_engine *e, const squall_decision *d) {
  if (d->fold_slot) empty_residual(e, d->fold_slot, d->fold_slot->count);
  if (d->fold_shard_slot) empty_residual(e, d->fold_shard_slot, d->fold_shard_slot->count);
}

squall_tensor *squall__engine_carrier_slot(squall_engine *e, const squall_call *c) {
  return squall__residuals_carrier(e->residuals, hint_of(c), c->count, kind_of(c));
}

void squall__engine_note_plain(squall_engine *e, uint64_t bytes, double seconds, double whole_seconds) {
  squall__cost_note_link(&e->cost, 1, squall__ring_allreduce_wire(bytes, e->tr.nranks), seconds);
  squall__cost_note_call(&e->cost, -1, bytes, whole_seconds);
  SQ_TRACE("rank %d: %llu bytes: plain call %.3g s (its collective %.3g s)", e->tr.rank, (unsigned long long)bytes,
           whole_seconds, seconds);
}

/* ------------------------------------------------------------ the call */
static const char *route_name(squall_route r) {
  static const char *const names[] = {"pass", "16-bit", "top-k", "dense", "two-phase", "two-level"};
  return (unsigned)r < SQ_ARRAY_SIZE(names) ? names[r] : "?";
}

/* SQUALL_DEBUG=INFO: one line whenever the path of a size class (a power
 * of two of bytes) changes, with its reason: what a user looking for why
 * nothing (or everything) is compressed wants, without a line per call. */
static void say_path(squall_engine *e, const squall_call *c, const squall_decision *d, squallResult_t r) {
  squallPassReason_t own;
  if (squall__log_level() < squallLogInfo || c->shard || r != squallSuccess || call_pass_reason(c, &own)) return;
  uint64_t bytes = (uint64_t)c->count * c->elsize;
  int cls = 0;
  while (cls < 63 && (bytes >> (cls + 1)) != 0) cls++;
  uint8_t path = (uint8_t)(d->route == SQ_ROUTE_PASS ? 0x80 | (unsigned)d->reason : 1 + (unsigned)d->route);
  if (e->last_path[cls] == path) return;
  e->last_path[cls] = path;
  if (d->route == SQ_ROUTE_PASS)
    SQ_INFO("rank %d/%d: calls of %llu bytes and up to twice that now pass through (%s)", e->tr.rank,
            e->tr.nranks, (unsigned long long)(1ull << cls), squallPassReasonName(d->reason));
  else
    SQ_INFO("rank %d/%d: calls of %llu bytes and up to twice that now run %s", e->tr.rank, e->tr.nranks,
            (unsigned long long)(1ull << cls), route_name(d->route));
}

static void record(squall_engine *e, const squall_call *c, const squall_decision *d, squallResult_t r,
                   const run_state *st) {
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  say_path(e, c, d, r);
  if (c->shard) { /* two-level: the outer call counts it, with these figures */
    if (r != squallSuccess) return;
    if (st->chunks > 1) {
      e->stats.pipelinedCalls++;
      e->stats.pipelineChunks += st->chunks;
    }
    e->stats.calls++;
    e->stats.compressedCalls++;
    e->stats.bytesIn += bytes_in;
    e->stats.bytesWire += st->wire;
    e->stats.codecSeconds += st->codec_s;
    return;
  }
  if (d->route == SQ_ROUTE_TWOLEVEL) {
    uint64_t wire = st->hier.inter + st->hier.intra;
    squall__stats_record(&e->stats, r == squallSuccess ? -1 : squallPassError, bytes_in, wire,
                         st->hier.codec_s);
    if (r == squallSuccess) {
      squall__stats_record_path(&e->stats, 2, -1, st->hier.inter, st->hier.intra);
      squall__stats_record_chunks(&e->stats, st->hier.chunks); /* the shard's, across nodes */
    }
  } else if (r != squallSuccess) {
    squall__stats_record(&e->stats, squallPassError, bytes_in, st->wire, st->codec_s);
  } else if (d->route == SQ_ROUTE_PASS) {
    uint64_t wire = squall__ring_allreduce_wire(bytes_in, e->tr.nranks);
    int crosses = squall__hier_crosses(e->hier); /* two-level: bytes at the node boundary */
    squall__stats_record_pass(&e->stats, (int)d->reason, bytes_in, crosses ? wire : 0, crosses ? 0 : wire);
  } else {
    squall__stats_record(&e->stats, -1, bytes_in, st->wire, st->codec_s);
    squall__hier_record(e->hier, &e->stats, 1, st->flat_reason, st->wire); /* flat path, and why */
  }
}

/* Under CUDA graph capture nothing may allocate or wait: the call runs only
 * when the header is not due and its memory is in place. */
static int capture_ready(squall_engine *e, const squall_call *c, const squallConfig_t *cfg, uint64_t gen,
                         squall_route guess, const scratch_layout *L) {
  if (!c->shard && (!e->agreed_valid || e->agreed_gen != gen)) return 0; /* a shard: the outer header */
  if (guess == SQ_ROUTE_PASS || (!c->shard && !e->agreed_ok)) return 1;
  /* the nodes are found, and the node communicators made, outside capture */
  if (!c->shard && squall__hier_known(e->hier, cfg) < 0) return 0;
  if (guess == SQ_ROUTE_TWOLEVEL) return squall__hier_ready(e->hier, c);
  /* the plan, the same on every rank (scratch_bytes, at least as large, is
   * rank-local); a shard's plan is the outer call's (squall__hier_ready) */
  if (L->total > (c->shard ? e->scratch_bytes : e->scratch_planned)) return 0;
  if (!cfg->errorFeedback) return 1;
  squall_tensor *t = squall__residuals_find(e->residuals, hint_of(c), c->count, kind_of(c));
  return t && (t->residual || t->no_residual);
}

int squall__engine_ready(squall_engine *e, const squall_call *c) {
  squallConfig_t cfg;
  uint64_t gen;
  squall__config_get(&cfg, &gen);
  decide_in in = {.call = c, .cfg = &cfg, .nranks = e->tr.nranks, .topk_max = e->k.topk_max_elems, .agreed = 1, .all_ok = 1,
                  .alltoall = e->tr.alltoall != NULL, .pays = 1};
  squallPassReason_t why;
  squall_route guess = decide(&in, &why);
  scratch_layout L;
  layout_for(e, c, &cfg, guess, &L);
  return capture_ready(e, c, &cfg, gen, guess, &L);
}

/* Calls that need no header. squallSetConfig is collective (squall(7)):
 * every rank calls it between the same two calls of each communicator,
 * so every rank sees the generation move at the same call, and that call
 * exchanges a header, where the ranks agree on the new configuration.
 * While the generation stays where the ranks last agreed, this rank's
 * configuration is the agreed one, and what it passes through whatever
 * the others say (compression off, below the size threshold, fewer ranks
 * than SQUALL_MIN_RANKS) costs nothing more than the plain call. */
static int agreed(const squall_engine *e, uint64_t gen) {
  return e->agreed_valid && e->agreed_gen == gen && e->agreed_ok;
}

static int agreed_pass(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, uint64_t gen,
                       squallPassReason_t *why) {
  if (c->shard || !agreed(e, gen)) return 0;
  if (e->tr.nranks < cfg->minRanks) *why = squallPassSingleRank;
  else if (cfg->codec == squallCodecNone) *why = squallPassDisabled;
  else if (c->count * c->elsize < cfg->minBytes) *why = squallPassSmall;
  else return 0;
  if (e->agreed_nonblocking) *why = squallPassNonblocking; /* decide()'s order */
  return 1;
}

/* An agreed pass-through (agreed_pass() said so): whether its plain call is
 * timed, and the fold of what its tensor holds. */
static void pass_agreed(squall_engine *e, const squall_call *c, squall_decision *d);

/* A host call of a size class that the agreed cost model has settled as
 * not paying (squall__cost_settled) passes through without its header.
 * Only past headers decide it, never this rank's configuration: a
 * squallSetConfig reaches the class at its next header (at most
 * SQ_COST_RECHECK calls on), where the digests are compared, so that even
 * one made on some ranks only, against the rule, never meets a header
 * here. */
static int settled_plain(const squall_engine *e, const squall_call *c, uint64_t bytes_in) {
  return e->header_every_call && !c->shard && e->agreed_valid && e->agreed_ok &&
         squall__cost_settled(&e->cost, bytes_in);
}

/* Agreed pass-throughs that are never compressed while the configuration
 * stands (below SQUALL_MIN_BYTES, fewer ranks than SQUALL_MIN_RANKS): the
 * cost model has no use for their plain call's time. Compression off keeps
 * its timings: a job may turn it on, and squall-bench's warm-ups time plain
 * so. From the reason alone, the same on every rank: the model's plain
 * counts steer its probes, which every rank must choose alike. */
static int untimed(squallPassReason_t why) { return why == squallPassSmall || why == squallPassSingleRank; }

/* Pass-throughs whose tensor may still hold a residual from earlier
 * compressed calls: the configuration's, not the call's own. */
static int folds_for(squallPassReason_t why) {
  return why == squallPassNotPaying || why == squallPassDisabled || why == squallPassSmall ||
         why == squallPassSingleRank || why == squallPassMismatch;
}

static squallResult_t allreduce(squall_engine *e, const squall_call *c, squall_decision *d, run_state *st) {
  squallConfig_t cfg; /* one snapshot for the whole call, as the header agrees it */
  uint64_t gen;
  squall__config_get(&cfg, &gen);
  e->last_stream = c->stream;
  d->route = SQ_ROUTE_PASS;
  if (c->shard) e->undo_res = NULL; /* set again when this shard's residual moves */
  /* a pass-through goes to the library unchanged, whatever its count */
  if (call_pass_reason(c, &d->reason)) return squallSuccess;
  SQ_RETURN_ERROR_IF(c->count > MAX_COUNT, squallInvalidArgument,
                     "count %zu is too large (at most %zu elements)", c->count, (size_t)MAX_COUNT);
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  if (agreed_pass(e, c, &cfg, gen, &d->reason)) { /* (squall__engine_passes takes these first) */
    pass_agreed(e, c, d);
    return squallSuccess;
  }
  if (settled_plain(e, c, bytes_in)) {
    d->reason = squallPassNotPaying;
    squall__cost_declined(&e->cost, bytes_in); /* counts toward the next exploration */
    squall__cost_judged(&e->cost, bytes_in, 1);
    if (can_fold(e, c)) fold_into_plain(e, c, NULL, NULL, d); /* marks the tensor as used too */
    else if (cfg.errorFeedback) squall__residuals_touch(e->residuals, hint_of(c), c->count, kind_of(c));
    return squallSuccess;
  }

  /* What this rank's own configuration would do, to prepare for it. */
  decide_in in = {.call = c, .cfg = &cfg, .nranks = e->tr.nranks, .topk_max = e->k.topk_max_elems, .agreed = 1, .all_ok = 1,
                  .alltoall = e->tr.alltoall != NULL, .pays = 1,
                  .two_level = c->shard ? 0 : squall__hier_known(e->hier, &cfg),
                  .one_node = device_on_one_node(e, &cfg, c), .foreign = c->foreign};
  st->flat_reason = squallFlatConfigured;
  /* The variant (two levels or flat, top-k's slots lossless or raw) that
   * whole calls showed fastest at this size, from figures earlier headers
   * agreed (the same here on every rank), so that this call is prepared
   * for the right route. */
  unsigned allowed = variants_allowed(e, c, &cfg, in.two_level);
  decide_in in_nodes = in; /* the inputs before the variant: for variant_vote() */
  int variant = allowed ? squall__cost_variant(&e->cost, (int)cfg.codec, allowed, bytes_in) : 0;
  if (allowed) SQ_TRACE("rank %d: %zu elements: runs variant %d of mask %u", e->tr.rank, c->count, variant, allowed);
  squall_call varied = *c;
  if (variant & SQ_VARIANT_FLAT) in.two_level = 0;
  if (variant & SQ_VARIANT_RAW) varied.raw_slots = 1; /* passed on to a two-level call's shards */
  c = &varied;
  const squallConfig_t rc = run_config(&cfg, c); /* a shard's raw_slots came from its outer call */
  squallPassReason_t why;
  squall_route guess = decide(&in, &why);
  layout_for(e, c, &cfg, guess, &st->L); /* once per call */
  if (c->capturing && !capture_ready(e, c, &cfg, gen, guess, &st->L)) {
    d->reason = squallPassCapture;
    return squallSuccess;
  }
  if (c->capturing && guess != SQ_ROUTE_PASS) e->graphs.captured = 1; /* its scratch is the graph's now */
  /* Growth beyond what every rank planned for needs the header (device
   * engines): decided from the plan, which is the same on every rank. */
  int grow = guess != SQ_ROUTE_PASS && (st->L.total > e->scratch_planned ||
                                        (guess == SQ_ROUTE_TWOLEVEL && squall__hier_grows(e->hier, c)));
  if (guess == SQ_ROUTE_TWOLEVEL && squall__hier_grows(e->hier, c)) st->fresh = 1; /* new memory: not timed */
  int explored = 0;
  int headed = e->header_every_call || grow || !e->agreed_valid || e->agreed_gen != gen;
  /* A call that passes through as non-blocking prepares nothing (no
   * scratch, no residual charged to SQUALL_EF_MAX_BYTES): where the header
   * decides, when this rank's communicator is non-blocking or the last
   * header found one (then it says "not ready", which passes through too
   * should the mode have changed); without a header, when the last one
   * found one, which decides then. */
  int skip = e->agreed_nonblocking || (headed && c->nonblocking); /* agreed_nonblocking: 0 before any header */
  squallResult_t prep = guess == SQ_ROUTE_PASS || skip ? squallSuccess : prepare(e, c, &rc, guess, st);
  if (c->shard) { /* the outer call exchanged the header: a failure now is an error */
    if (prep != squallSuccess) return prep;
    d->route = decide(&in, &d->reason);
    SQ_RETURN_ERROR_IF(d->route != guess, squallInternalError, "route %d decided, %d prepared",
                       (int)d->route, (int)guess);
    if (d->route == SQ_ROUTE_PASS) return squallSuccess;
    SQ_FORWARD_IF_ERROR(run(e, c, &rc, d->route, st));
    st->chunks = call_chunks(e, c, &rc, d->route, st); /* the outer call records them */
    return squallSuccess;
  }
  if (prep != squallSuccess)
    SQ_WARN("rank %d: cannot prepare a %zu-element all-reduce: %s", e->tr.rank, c->count, squallGetLastError());

  cost_verdict v;
  memset(&v, 0, sizeof v);
  int model_pays = 1; /* the model's own verdict, before a plain probe */
  int probing = 0;    /* a plain probe: the same on every rank (the header's figures) */
  if (headed) {
    cost_vote(e, c, &rc, guess, &st->L, &v);
    variant_vote(e, c, &cfg, &in_nodes, guess == SQ_ROUTE_PASS ? 0 : allowed, &v);
    explored = v.explored;
    double th = squall__now();
    SQ_FORWARD_IF_ERROR(
        header(e, c, &cfg, gen, prep == squallSuccess && !skip, &in.agreed, &in.all_ok, &in.foreign, &v));
    /* A plain call's whole time, which the model compares with compressed
     * ones (header included), leaves the header out: once the model has
     * declined a size class its calls skip it (squall__cost_settled), and
     * on 4 ranks over 2 cores it took 0.2-0.3 ms of a 0.5 ms call at 64 KiB,
     * which made compressing look faster than it was. */
    d->t_start += squall__now() - th;
    in.pays = model_pays = v.forced || squall__cost_pays((double)v.comp_ns, (double)v.plain_ns);
    /* the model would compress but cannot be sure (squall__cost_probe_plain): measure
     * plain (not where the link is given: whole calls do not overrule the model then) */
    if (in.pays && !v.forced && !(cfg.linkGbps > 0) &&
        squall__cost_probe_plain(&e->cost, bytes_in, (double)v.comp_ns * 1e-9, (double)v.plain_ns * 1e-9)) {
      SQ_TRACE("rank %d: %zu elements: a plain probe", e->tr.rank, c->count);
      in.pays = 0;
      probing = 1;
    }
    if (grow && in.agreed && in.all_ok) e->scratch_planned = st->L.total; /* every rank has it */
  } else {
    /* No header on this device call: the local failure cannot be shared
     * without a synchronisation, so it is returned (the communicator
     * must then be aborted, as after any NCCL error). */
    if (prep != squallSuccess) return prep;
    in.agreed = e->agreed_ok;
  }
  in.nonblocking = e->agreed_nonblocking;
  in.count = e->residuals;
  d->route = decide(&in, &d->reason);
  int declined = d->route == SQ_ROUTE_PASS && d->reason == squallPassNotPaying;
  int explored_ran = explored && d->route != SQ_ROUTE_PASS; /* an exploring call every rank compresses */
  if (headed) squall__cost_header_verdict(&e->cost, bytes_in, declined && !model_pays, explored_ran);
  if (declined || explored_ran)
    squall__cost_declined(&e->cost, bytes_in); /* counts toward the next exploration */
  if (model_runs(e, &cfg, c) && (declined || (d->route != SQ_ROUTE_PASS && d->route != SQ_ROUTE_TWOLEVEL)))
    squall__cost_judged(&e->cost, bytes_in, declined); /* for the plain probes */
  /* for the next call of this size; a flat variant the model declined, or one that some
   * rank could not prepare, counts too, or the rhythm would stand still on it. A plain
   * probe does not: the model chose the variant, the probe only borrowed the call, and a
   * variant's settling run lost to it came back later, among the calls it should spare */
  if (allowed && (d->route != SQ_ROUTE_PASS || d->reason == squallPassNotPaying || d->reason == squallPassError))
    variant_agree(e, &cfg, allowed, variant, bytes_in, &v, !probing);
  if (d->route == SQ_ROUTE_PASS) {
    if (d->reason == squallPassError)
      SQ_WARN("rank %d: a rank could not prepare a %zu-element all-reduce: every rank passes it through",
              e->tr.rank, c->count);
    if (folds_for(d->reason)) fold_into_plain(e, c, st->work, st->slot, d);
    if (in.one_node) say_one_node(e);
    return squallSuccess;
  }
  if (in.two_level < 0) {
    /* First compressed call with this node setting: every rank is here at
     * the same call (the decision is the same everywhere), so the nodes
     * can be found and the node communicators made, collectively. The
     * flat route was prepared; when the verdict is two-level, that
     * preparation stays unused and the call runs two-level. */
    SQ_FORWARD_IF_ERROR(squall__hier_route(e->hier, &cfg, c->stream, &st->flat_reason));
    in.two_level = squall__hier_known(e->hier, &cfg);
    if ((in.one_node = device_on_one_node(e, &cfg, c))) {
      /* nothing has run yet: every rank passes this call through too
       * (the warm-up was counted by the first decision: not again) */
      in.count = NULL;
      d->route = decide(&in, &d->reason);
      say_one_node(e);
      return squallSuccess;
    }
    if (in.two_level == 1) {
      /* Its memory is allocated after the header: every rank learns
       * whether all could, and if one could not, all run this call on the
       * flat route prepared above (later calls prepare two-level before
       * their header). */
      squallResult_t hp = squall__hier_prepare(e->hier, c);
      if (hp != squallSuccess)
        SQ_WARN("rank %d: cannot prepare the two-level path: %s", e->tr.rank, squallGetLastError());
      int64_t ok = hp == squallSuccess;
      SQ_FORWARD_IF_ERROR(e->tr.allreduce_min_i64_host(e->tr.ctx, c->stream, &ok, 1));
      if (ok) {
        /* decided again on the same, rank-identical inputs (the warm-up
         * was counted by the first decision: not again) */
        in.count = NULL;
        d->route = decide(&in, &d->reason);
        guess = d->route;
      }
    }
  } else if (in.two_level == 0) {
    squall__hier_route(e->hier, &cfg, c->stream, &st->flat_reason); /* known: only the reason */
    if (variant & SQ_VARIANT_FLAT) st->flat_reason = squallFlatSlower;
  }
  /* agreed and all ok: the route is this rank's guess, prepared above */
  SQ_RETURN_ERROR_IF(d->route != guess, squallInternalError, "route %d decided, %d prepared", (int)d->route,
                     (int)guess);
  if (d->route == SQ_ROUTE_TWOLEVEL) {
    SQ_FORWARD_IF_ERROR(squall__hier_allreduce(e->hier, c, &st->hier));
    if (model_runs(e, &cfg, c)) /* whole calls, against flat ones (new memory: not timed) */
      squall__cost_note_call(&e->cost, cost_kind(&rc, SQ_ROUTE_TWOLEVEL), bytes_in,
                             st->fresh ? -1.0 : squall__now() - st->t_start);
    return squallSuccess;
  }
  double t0 = squall__now();
  SQ_FORWARD_IF_ERROR(run(e, c, &rc, d->route, st));
  cost_learn(e, c, &rc, d->route, st, squall__now() - t0);
  return squallSuccess;
}

static void pass_agreed(squall_engine *e, const squall_call *c, squall_decision *d) {
  d->untimed = untimed(d->reason);
  fold_into_plain(e, c, NULL, NULL, d); /* this rank's own affair: the collective is plain either way */
}

int squall__engine_never_compresses(const squall_call *c) {
  squallPassReason_t why;
  return call_pass_reason(c, &why);
}

int squall__engine_passes(squall_engine *e, const squall_call *c, squall_decision *d) {
  memset(d, 0, sizeof *d); /* t_start 0: the plain call's own start (a clock read saved) */
  d->route = SQ_ROUTE_PASS;
  int pass = call_pass_reason(c, &d->reason);
  /* while the generation stands where the ranks agreed, this rank's
   * configuration is the one they agreed on: no snapshot needed */
  if (!pass && c->count <= MAX_COUNT && e->agreed_valid &&
      agreed_pass(e, c, &e->agreed_cfg, squall__config_generation(), &d->reason)) {
    pass = 1;
    pass_agreed(e, c, d);
    d->t_start = 0; /* the plain call's own start: the fold, before it, is left out */
  }
  if (!pass) return 0;
  run_state st;
  memset(&st, 0, sizeof st);
  record(e, c, d, squallSuccess, &st);
  return 1;
}

squallResult_t squall__engine_allreduce(squall_engine *e, const squall_call *c, squall_decision *d) {
  run_state st;
  memset(&st, 0, sizeof st);
  st.t_start = squall__now();
  d->t_start = st.t_start;
  d->fold = NULL;
  d->fold_slot = d->fold_shard_slot = NULL;
  d->untimed = 0;
  squallResult_t r = squallSuccess;
  /* The scratch may still be in use by the last compressed call's work on
   * another stream (not under capture: a graph's launches are ordered by
   * whoever launches them, and a capturing stream may not wait on an
   * event recorded outside it). */
  if (e->fence && c->stream != e->fence_stream && e->k.fence_wait && !c->capturing)
    r = e->k.fence_wait(e->fence, c->stream);
  if (r == squallSuccess) {
    r = allreduce(e, c, d, &st);
  } else {
    d->route = SQ_ROUTE_PASS;
    d->reason = squallPassError;
  }
  if (r == squallSuccess && d->route != SQ_ROUTE_PASS && e->k.fence_record && !c->capturing) {
    r = e->k.fence_record(&e->fence, c->stream);
    e->fence_stream = c->stream;
  }
  if (r != squallSuccess)
    SQ_WARN("rank %d: all-reduce of %zu elements failed: %s: %s", e->tr.rank, c->count,
            squallGetErrorString(r), squallGetLastError());
  record(e, c, d, r, &st);
  return r;
}

squallResult_t squall__engine_reset_residuals(squall_engine *e) {
  SQ_FORWARD_IF_ERROR(squall__hier_reset(e->hier)); /* two-level: per-shard residuals */
  return squall__residuals_reset(e->residuals, e->last_stream);
}

squallResult_t squall__engine_undo_shard(squall_engine *e, void *stream) {
  if (e->undo_res == NULL) return squallSuccess; /* no residual: nothing moved */
  return e->k.widen(stream, SQ_DT_F32, e->undo_backup, e->undo_res, e->undo_n, 1.0f);
}

squallResult_t squall__engine_get_residual(squall_engine *e, const void *key, size_t count, int dtype,
                                           size_t whole, float *out) {
  squall_tensor *t = squall__residuals_latest_from(e->residuals, key, count, residual_kind(dtype, whole));
  int flat = t != NULL && t->residual != NULL, shard = 0;
  if (flat) SQ_FORWARD_IF_ERROR(e->k.to_host(e->last_stream, out, t->residual, count * sizeof(float)));
  /* two-level all-reduce: this rank's shard residual, in its place */
  SQ_FORWARD_IF_ERROR(squall__hier_get_residual(e->hier, key, count, dtype, out, flat, &shard));
  SQ_RETURN_ERROR_IF(!flat && !shard, squallInvalidArgument,
                     "no residual is kept for the tensor at %p (%zu elements)", key, count);
  return squallSuccess;
}

squallResult_t squall__engine_prepare_shard(squall_engine *e, const squall_call *c, int alloc, size_t *bytes) {
  squallConfig_t cfg;
  uint64_t gen;
  squall__config_get(&cfg, &gen);
  cfg = run_config(&cfg, c); /* as allreduce() runs it */
  decide_in in = {.call = c, .cfg = &cfg, .nranks = e->tr.nranks, .topk_max = e->k.topk_max_elems, .agreed = 1, .all_ok = 1,
                  .alltoall = e->tr.alltoall != NULL};
  squallPassReason_t why;
  squall_route route = decide(&in, &why);
  run_state st;
  memset(&st, 0, sizeof st);
  layout_for(e, c, &cfg, route, &st.L);
  if (bytes) *bytes = st.L.total;
  if (!alloc) return squallSuccess; /* a plan only: a slot looked up for the run stays */
  e->shard_slot = NULL;
  if (route == SQ_ROUTE_PASS) return squallSuccess;
  SQ_FORWARD_IF_ERROR(prepare(e, c, &cfg, route, &st));
  e->shard_slot = st.slot; /* the shard call's prepare() takes it instead of a second lookup */
  return squallSuccess;
}

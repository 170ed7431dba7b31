/*
 * engine.c - plans and runs one compressed all-reduce (DESIGN.md, "The
 * compressed all-reduce"). Paths:
 *   16-bit: global max |a| -> power-of-two scale -> encode -> 16-bit
 *           all-reduce -> decode;
 *   top-k:  encode fixed-size slot -> all-gather (or, on a host transport
 *           with SQUALL_ZSTD, lossless-coded all-gather-v) -> rank-ordered
 *           sparse decode, bit-identical on every rank;
 *   dense:  where top-k cannot pay, the plain all-reduce of a = g + e,
 *           which also empties the residual.
 */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "engine/engine.h"
#include "codecs/lossless.h"
#include "engine/residual.h"
#include "common/stats.h"
#include "engine/hierarchy.h" /* two-level all-reduce */

#define DESC_BYTES 256

struct squall_engine {
  squall_transport tr;
  squall_kernels k;
  squall_residuals *residuals;
  uint64_t agreed_gen; /* configuration generation last agreed on */
  int agreed_valid, agreed_ok;
  void *scratch; /* kernel memory, grown on demand, kept for the next call */
  size_t scratch_bytes;
  void *host; /* host memory for the lossless stage */
  size_t host_bytes;
  squallStats_t stats;
  squall_hier *hier; /* two-level all-reduce: nodes, node communicators (engine/hierarchy.c) */
};

const squallStats_t *squall__engine_stats(const squall_engine *e) { return &e->stats; }

/* The tensor's residual key (two-level shards: the caller's tensor). */
static const void *key_of(const squall_call *c) { return c->key ? c->key : c->send; }

uint64_t squall__ring_allreduce_wire(uint64_t bytes, int p) {
  return p > 1 ? 2 * (uint64_t)(p - 1) * bytes / (uint64_t)p : 0;
}

squall_engine *squall__engine_create(const squall_transport *tr, const squall_kernels *k) {
  squall_engine *e = calloc(1, sizeof *e);
  if (e == NULL) return NULL;
  e->tr = *tr;
  e->k = *k;
  e->residuals = squall__residuals_create(&e->k);
  e->hier = squall__hier_create(&e->tr, &e->k); /* two-level all-reduce */
  if (e->residuals == NULL || e->hier == NULL) {
    squall__residuals_free(e->residuals);
    free(e->hier);
    return NULL;
  }
  return e;
}

void squall__engine_free(squall_engine *e) {
  if (e == NULL) return;
  if (e->stats.calls) {
    const squallStats_t *s = &e->stats;
    SQ_INFO("communicator rank %d/%d: %llu calls, %llu compressed, %llu passed through, "
            "%llu bytes in, %llu bytes on the wire (%.1fx), %.3f s in codecs",
            e->tr.rank, e->tr.nranks, (unsigned long long)s->calls,
            (unsigned long long)s->compressedCalls, (unsigned long long)s->passthroughCalls,
            (unsigned long long)s->bytesIn, (unsigned long long)s->bytesWire,
            s->bytesWire ? (double)s->bytesIn / (double)s->bytesWire : 0.0, s->codecSeconds);
  }
  squall__residuals_free(e->residuals);
  squall__hier_free(e->hier); /* two-level: node communicators, inner engine */
  if (e->scratch) e->k.free(e->k.ctx, e->scratch);
  free(e->host);
  free(e);
}

/* Everything that changes what goes on the wire or what the sum means. */
static void describe(const squallConfig_t *c, char *out) {
  char codec[64];
  snprintf(out, DESC_BYTES, "compress=%s values=%s ef=%d min_bytes=%zu zstd=%d warmup=%d min_ranks=%d",
           squallConfigCodecString(c, codec, sizeof codec),
           c->topkValues == squallValueFp16 ? "fp16" : "fp32", c->errorFeedback, c->minBytes,
           c->zstdLevel, c->warmup, c->minRanks);
  /* two-level all-reduce: ranks that disagree on it pass through together */
  snprintf(out + strlen(out), DESC_BYTES - strlen(out), " hierarchy=%s rpn=%d",
           c->hierarchy == squallHierarchyFlat ? "flat" : "auto", c->ranksPerNode);
  if (c->codec == squallCodecTopk) /* the exact ratio, not %g's rounding */
    snprintf(out + strlen(out), DESC_BYTES - strlen(out), " ratio=%.17g", c->topkRatio);
}

/* Exchanges the configuration description once per configuration
 * generation (the environment, then each squallSetConfig, which all ranks
 * make at the same point of their call sequence); on a mismatch every rank
 * logs what differs and the engine passes through. */
static squallResult_t agree(squall_engine *e, const squallConfig_t *cfg, uint64_t gen) {
  if (e->agreed_valid && e->agreed_gen == gen) return squallSuccess;
  char mine[DESC_BYTES] = {0};
  describe(cfg, mine);
  int p = e->tr.nranks;
  char *all = calloc((size_t)p, DESC_BYTES);
  SQ_RETURN_ERROR_IF(all == NULL, squallSystemError, "out of memory agreeing on the configuration");
  squallResult_t r = e->tr.allgather_host(e->tr.ctx, mine, all, DESC_BYTES);
  if (r != squallSuccess) {
    free(all);
    return r;
  }
  int ok = 1;
  for (int i = 0; i < p; i++) {
    char *d = all + (size_t)i * DESC_BYTES;
    d[DESC_BYTES - 1] = 0;
    if (strcmp(d, mine)) {
      if (ok) SQ_WARN("ranks disagree on the squall configuration: every call on this communicator "
                      "passes through until they agree. rank %d has '%s', rank %d has '%s'",
                      e->tr.rank, mine, i, d);
      ok = 0;
    }
  }
  free(all);
  e->agreed_gen = gen;
  e->agreed_valid = 1;
  e->agreed_ok = ok;
  return squallSuccess;
}

/* Grows the kernel-memory scratch to at least bytes (contents not kept). */
static squallResult_t scratch_reserve(squall_engine *e, size_t bytes) {
  if (bytes <= e->scratch_bytes) return squallSuccess;
  if (e->scratch) e->k.free(e->k.ctx, e->scratch);
  e->scratch = e->k.alloc(e->k.ctx, bytes);
  e->scratch_bytes = e->scratch ? bytes : 0;
  SQ_RETURN_ERROR_IF(e->scratch == NULL, squallSystemError,
                     "cannot allocate %zu bytes of %s scratch", bytes, e->k.name);
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

static size_t align_up(size_t x) { return (x + 255) & ~(size_t)255; }

/* Carves consecutive aligned pieces out of the scratch. */
typedef struct {
  char *base;
  size_t used;
} carver;

static void *carve(carver *c, size_t bytes) {
  void *p = c->base + c->used;
  c->used += align_up(bytes);
  return p;
}


typedef struct {
  const float *g; /* the gradient in fp32 */
  float *work;    /* count floats, or NULL when g is the caller's buffer */
  float *res;     /* residual or NULL */
  float *scalars; /* [0] absmax, [1] scale, [2] decode error flag (int) */
  void *absmax_ws;
  double codec_s;
  uint64_t wire;
} run_state;

/* Puts the result, now fp32 in `out` (recv itself for fp32 data, the work
 * buffer otherwise), into recv: average and narrowing in one pass. */
static squallResult_t finish(squall_engine *e, const squall_call *c, float *out) {
  float div = c->op == SQ_OP_AVG ? (float)e->tr.nranks : 1.0f;
  if (c->dtype == SQ_DT_F32 && div == 1.0f) return squallSuccess;
  return e->k.narrow(e->k.ctx, (squall_dtype)c->dtype, out, c->recv, c->count, div);
}

static squallResult_t run_half(squall_engine *e, const squall_call *c, run_state *st, sq_half_kind kind,
                               uint16_t *codes) {
  size_t n = c->count;
  int p = e->tr.nranks;
  double t0 = squall__now();
  SQ_FORWARD_IF_ERROR(e->k.absmax(e->k.ctx, st->g, st->res, n, &st->scalars[0], st->absmax_ws));
  double t1 = squall__now();
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_max_f32(e->tr.ctx, &st->scalars[0], 1));
  /* The sum of p codes must stay finite: scale the global max to limit/p. */
  float limit = (kind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX) / (float)p;
  float max_scale = kind == SQ_HALF_FP16 ? sq_pow2(100) : 1.0f; /* bf16: range is float's */
  double t2 = squall__now();
  SQ_FORWARD_IF_ERROR(e->k.pow2_scale(e->k.ctx, &st->scalars[0], limit, max_scale, &st->scalars[1]));
  SQ_FORWARD_IF_ERROR(e->k.half_encode(e->k.ctx, kind, st->g, st->res, codes, n, &st->scalars[1]));
  double t3 = squall__now();
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_half(e->tr.ctx, codes, n, kind));
  double t4 = squall__now();
  float *out = c->dtype == SQ_DT_F32 ? (float *)c->recv : st->work;
  SQ_FORWARD_IF_ERROR(e->k.half_decode(e->k.ctx, kind, codes, out, n, &st->scalars[1]));
  SQ_FORWARD_IF_ERROR(finish(e, c, out));
  st->codec_s += (t1 - t0) + (t3 - t2) + (squall__now() - t4);
  st->wire += squall__ring_allreduce_wire(2 * (uint64_t)n, p) + squall__ring_allreduce_wire(4, p);
  return squallSuccess;
}

static squallResult_t run_dense(squall_engine *e, const squall_call *c, run_state *st) {
  size_t n = c->count;
  double t0 = squall__now();
  SQ_FORWARD_IF_ERROR(e->k.flush(e->k.ctx, st->g, st->res, st->work, n));
  double t1 = squall__now();
  SQ_FORWARD_IF_ERROR(e->tr.allreduce_sum_f32(e->tr.ctx, st->work, (float *)c->recv, n));
  double t2 = squall__now();
  SQ_FORWARD_IF_ERROR(finish(e, c, (float *)c->recv));
  st->codec_s += (t1 - t0) + (squall__now() - t2);
  st->wire += squall__ring_allreduce_wire(4 * (uint64_t)n, e->tr.nranks);
  return squallSuccess;
}

/* All-gather of the lossless-coded slots; decodes them into `slots`. */
static squallResult_t exchange_lossless(squall_engine *e, const void *mine, void *slots, size_t k,
                                        squallValueType_t vt, size_t n, size_t sb, int level,
                                        run_state *st) {
  int p = e->tr.nranks;
  size_t bound = squall__lossless_bound(k, vt), scratch = squall__lossless_scratch_bytes(k, vt);
  size_t need = align_up(bound) + align_up((size_t)p * bound) + align_up(scratch) +
                2 * sizeof(size_t) * (size_t)p;
  SQ_FORWARD_IF_ERROR(host_reserve(e, need));
  carver cv = {e->host, 0};
  char *send = carve(&cv, bound), *recv = carve(&cv, (size_t)p * bound), *raw = carve(&cv, scratch);
  size_t *sizes = (size_t *)carve(&cv, sizeof(size_t) * (size_t)p);
  size_t *displs = sizes + p;
  double t0 = squall__now();
  size_t z = squall__lossless_encode(mine, k, vt, level, send, bound, raw);
  SQ_RETURN_ERROR_IF(z == 0, squallInternalError, "zstd failed to compress a %zu-entry slot", k);
  double t1 = squall__now();
  SQ_FORWARD_IF_ERROR(e->tr.allgatherv(e->tr.ctx, send, z, recv, (size_t)p * bound, sizes, displs));
  double t2 = squall__now();
  for (int r = 0; r < p; r++)
    SQ_RETURN_ERROR_IF(squall__lossless_decode(recv + displs[r], sizes[r], k, vt, n,
                                               (char *)slots + (size_t)r * sb, raw) != 0,
                       squallRemoteError,
                       "rank %d sent a corrupt or truncated compressed top-k payload (%zu bytes)", r,
                       sizes[r]);
  st->codec_s += (t1 - t0) + (squall__now() - t2);
  st->wire += (uint64_t)(p - 1) * (z + sizeof(uint64_t));
  return squallSuccess;
}

static squallResult_t run_topk(squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                               run_state *st, size_t k, void *mine, void *slots, void *ws) {
  size_t n = c->count, sb = squall__topk_slot_bytes(k, cfg->topkValues);
  int p = e->tr.nranks;
  double t0 = squall__now();
  if (cfg->topkValues == squallValueFp16) {
    SQ_FORWARD_IF_ERROR(e->k.absmax(e->k.ctx, st->g, st->res, n, &st->scalars[0], st->absmax_ws));
    SQ_FORWARD_IF_ERROR(e->k.pow2_scale(e->k.ctx, &st->scalars[0], SQ_F16_MAX, sq_pow2(100), &st->scalars[1]));
  }
  SQ_FORWARD_IF_ERROR(e->k.topk_encode(e->k.ctx, st->g, st->res, n, k, cfg->topkValues,
                                       &st->scalars[1], mine, ws));
  st->codec_s += squall__now() - t0;
  if (cfg->zstdLevel > 0 && e->tr.allgatherv != NULL) {
    SQ_FORWARD_IF_ERROR(exchange_lossless(e, mine, slots, k, cfg->topkValues, n, sb, cfg->zstdLevel, st));
  } else {
    SQ_FORWARD_IF_ERROR(e->tr.allgather(e->tr.ctx, mine, slots, sb));
    st->wire += (uint64_t)(p - 1) * sb;
  }
  double t1 = squall__now();
  float *out = c->dtype == SQ_DT_F32 ? (float *)c->recv : st->work;
  SQ_FORWARD_IF_ERROR(e->k.sparse_decode(e->k.ctx, slots, p, k, cfg->topkValues, out, n,
                                         (int *)&st->scalars[2]));
  SQ_FORWARD_IF_ERROR(finish(e, c, out));
  st->codec_s += squall__now() - t1;
  return squallSuccess;
}

static int plan(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg);

/* Which path an eligible call takes, and the scratch bytes it needs. */
typedef struct {
  size_t k, sb;
  int topk, dense;
} layout;

static size_t plan_layout(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                          layout *lay) {
  size_t n = c->count;
  int p = e->tr.nranks;
  uint64_t bytes_in = (uint64_t)n * c->elsize;
  memset(lay, 0, sizeof *lay);
  if (cfg->codec == squallCodecTopk) {
    lay->k = squall__topk_k(n, cfg->topkRatio);
    lay->sb = squall__topk_slot_bytes(lay->k, cfg->topkValues);
    /* Sparse pays while its all-gather sends less than the ring all-reduce
     * of the data in its own precision. */
    lay->topk = ((uint64_t)(p - 1) * lay->sb < squall__ring_allreduce_wire(bytes_in, p) ||
                 p == 1) && /* one rank (SQUALL_MIN_RANKS=1): run the codec to prove it */
                n <= UINT32_MAX;  /* indices are u32 */
    lay->dense = !lay->topk && c->dtype == SQ_DT_F32;
  }
  size_t need = align_up(4 * sizeof(float)) + align_up(n * sizeof(float)) + /* scalars, work */
                align_up(e->k.absmax_workspace_bytes(n));
  if (lay->topk)
    need += align_up(lay->sb) + align_up((size_t)p * lay->sb) +
            align_up(e->k.topk_workspace_bytes(n, lay->k));
  else if (!lay->dense)
    need += align_up(n * sizeof(uint16_t));
  return need;
}

int squall__engine_ready(squall_engine *e, const squall_call *c) {
  squallConfig_t cfg;
  uint64_t gen;
  squall__config_get(&cfg, &gen);
  if (!c->shard && (!e->agreed_valid || e->agreed_gen != gen)) return 0;
  if (!c->shard && (!e->agreed_ok || plan(e, c, &cfg) >= 0)) return 1; /* passes through: nothing to allocate */
  int two_level = c->shard ? -1 : squall__hier_ready(e->hier, c, &cfg); /* two-level all-reduce */
  if (two_level >= 0) return two_level;
  squall_tensor *t = squall__residuals_find(e->residuals, key_of(c), c->count, c->dtype);
  if (t == NULL || (cfg.errorFeedback && t->residual == NULL && !t->no_residual)) return 0;
  layout lay;
  return plan_layout(e, c, &cfg, &lay) <= e->scratch_bytes;
}

/* Why the call cannot be compressed, or -1. */
static int plan(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg) {
  if (c->shard) return -1; /* two-level: the outer engine planned it */
  if (c->in_group) return squallPassInGroup;
  if (c->dtype < 0) return squallPassType;
  if (c->op == SQ_OP_OTHER) return squallPassOp;
  if (e->tr.nranks < cfg->minRanks) return squallPassSingleRank;
  if (cfg->codec == squallCodecNone) return squallPassDisabled;
  if (c->count == 0 || c->count * c->elsize < cfg->minBytes) return squallPassSmall;
  return -1;
}

squallResult_t squall__engine_allreduce(squall_engine *e, const squall_call *c, int *pass_reason) {
  squallConfig_t cfg;
  uint64_t gen;
  squall__config_get(&cfg, &gen);
  uint64_t bytes_in = (uint64_t)c->count * c->elsize;
  int reason = c->in_group || e->tr.nranks < cfg.minRanks ? plan(e, c, &cfg) : -1;
  if (reason < 0 && !c->shard) { /* a two-level shard: the outer engine agreed */
    /* Agreement first, on every call kind, so that all ranks take the same
     * branch even when their minimum sizes or codecs differ. */
    SQ_FORWARD_IF_ERROR(agree(e, &cfg, gen));
    reason = e->agreed_ok ? plan(e, c, &cfg) : squallPassMismatch;
  }
  /* two-level all-reduce: find the nodes at the first eligible call (all
   * ranks agree it is one), and whether this call runs two-level */
  int flat_reason = squallFlatConfigured;
  if (reason < 0 && !c->shard) SQ_FORWARD_IF_ERROR(squall__hier_route(e->hier, &cfg, &flat_reason));
  squall_tensor *t = NULL;
  if (reason < 0) {
    t = squall__residuals_tensor(e->residuals, key_of(c), c->count, c->dtype);
    SQ_RETURN_ERROR_IF(t == NULL, squallSystemError, "out of memory for tensor state");
    if (t->calls++ < (uint64_t)cfg.warmup && !c->shard) reason = squallPassWarmup;
  }
  *pass_reason = reason;
  if (reason >= 0) {
    uint64_t wire = squall__ring_allreduce_wire(bytes_in, e->tr.nranks);
    squall__stats_record(&e->stats, reason, bytes_in, wire, 0.0);
    squall__hier_record(e->hier, &e->stats, 0, -1, wire); /* two-level: bytes at the node boundary */
    return squallSuccess;
  }
  if (flat_reason < 0 && !c->shard) return squall__hier_allreduce(e->hier, c, &cfg, &e->stats);

  /* Lay out the scratch: work floats, then the path's buffers. */
  size_t n = c->count;
  int p = e->tr.nranks;
  int direct = c->dtype == SQ_DT_F32 && c->premul == 1.0f;
  layout lay;
  size_t need = plan_layout(e, c, &cfg, &lay);
  size_t k = lay.k, sb = lay.sb;
  int path_topk = lay.topk, path_dense = lay.dense;
  SQ_FORWARD_IF_ERROR(scratch_reserve(e, need));
  carver cv = {e->scratch, 0};
  run_state st = {0};
  st.scalars = carve(&cv, 4 * sizeof(float));
  st.work = carve(&cv, n * sizeof(float));
  st.absmax_ws = carve(&cv, e->k.absmax_workspace_bytes(n));
  st.res = cfg.errorFeedback ? squall__residuals_get(e->residuals, t, cfg.efMaxBytes) : NULL;
  double t0 = squall__now();
  if (direct) {
    st.g = c->send;
  } else {
    SQ_FORWARD_IF_ERROR(e->k.widen(e->k.ctx, (squall_dtype)c->dtype, c->send, st.work, n, c->premul));
    st.g = st.work;
  }
  st.codec_s = squall__now() - t0;

  squallResult_t r;
  if (path_topk) {
    void *mine = carve(&cv, sb), *slots = carve(&cv, (size_t)p * sb);
    void *ws = carve(&cv, e->k.topk_workspace_bytes(n, k));
    r = run_topk(e, c, &cfg, &st, k, mine, slots, ws);
  } else if (path_dense) {
    r = run_dense(e, c, &st);
  } else {
    sq_half_kind kind = cfg.codec == squallCodecBf16 ? SQ_HALF_BF16
                        : cfg.codec == squallCodecFp16 ? SQ_HALF_FP16
                                                       : squall__dtype_half_kind(c->dtype);
    r = run_half(e, c, &st, kind, carve(&cv, n * sizeof(uint16_t)));
  }
  if (r != squallSuccess) {
    squall__stats_record(&e->stats, squallPassError, bytes_in, st.wire, st.codec_s);
    return r;
  }
  if (c->shard) { /* two-level: the outer call counts it, with these figures */
    e->stats.calls++;
    e->stats.compressedCalls++;
    e->stats.bytesIn += bytes_in;
    e->stats.bytesWire += st.wire;
    e->stats.codecSeconds += st.codec_s;
    return squallSuccess;
  }
  squall__stats_record(&e->stats, -1, bytes_in, st.wire, st.codec_s);
  squall__hier_record(e->hier, &e->stats, 1, flat_reason, st.wire); /* two-level: flat path, why */
  return squallSuccess;
}

squallResult_t squall__engine_reset_residuals(squall_engine *e) {
  SQ_FORWARD_IF_ERROR(squall__hier_reset(e->hier)); /* two-level: per-shard residuals */
  return squall__residuals_reset(e->residuals);
}

squallResult_t squall__engine_get_residual(squall_engine *e, const void *key, size_t count, int dtype,
                                           float *out) {
  squall_tensor *t = squall__residuals_find(e->residuals, key, count, dtype);
  int flat = t != NULL && t->residual != NULL, shard = 0;
  if (flat) SQ_FORWARD_IF_ERROR(e->k.to_host(e->k.ctx, out, t->residual, count * sizeof(float)));
  /* two-level all-reduce: this rank's shard residual, in its place */
  SQ_FORWARD_IF_ERROR(squall__hier_get_residual(e->hier, key, count, dtype, out, flat, &shard));
  SQ_RETURN_ERROR_IF(!flat && !shard, squallInvalidArgument,
                     "no residual is kept for the tensor at %p (%zu elements)", key, count);
  return squallSuccess;
}

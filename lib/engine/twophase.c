/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * twophase.c - the two-phase compressed all-reduce (see twophase.h). Knows
 * the transport and kernel interfaces only, never MPI or NCCL.
 */
#include "common/internal.h"

#include "engine/twophase.h"
#include "engine/engine.h"
#include "codecs/codec.h"
#include "common/stats.h"

int squall__twophase_select(const squallConfig_t *cfg, int dtype, squall_twophase_codec *cd) {
  (void)dtype; /* every element type is widened to fp32 first */
  memset(cd, 0, sizeof *cd);
  cd->bucket = cfg->bucket;
  cd->chunk_bytes = cfg->chunkBytes;
  switch (cfg->codec) {
  case squallCodecInt8:
    cd->quant = 1;
    cd->qkind = SQ_QUANT_INT8;
    return 1;
  case squallCodecInt4:
    cd->quant = 1;
    cd->qkind = SQ_QUANT_INT4;
    return 1;
  case squallCodecFp8:
    cd->quant = 1;
    cd->qkind = SQ_QUANT_FP8;
    return 1;
  case squallCodecFp16:
  case squallCodecBf16:
    if (cfg->halfAccum != squallHalfAccumFp32) return 0;
    cd->hkind = cfg->codec == squallCodecBf16 ? SQ_HALF_BF16 : SQ_HALF_FP16;
    return 1;
  default: return 0;
  }
}

int squall__twophase_select_scatter(const squallConfig_t *cfg, squall_twophase_codec *cd) {
  squallConfig_t fp32_sum = *cfg;
  fp32_sum.halfAccum = squallHalfAccumFp32; /* the owner's sum is the result, in fp32 */
  if (!squall__twophase_select(&fp32_sum, SQ_DT_F32, cd)) return 0;
  cd->scatter = 1;
  return 1;
}

/* Bytes of the codes of m elements (the quantised: whole buckets, the
 * last one possibly in part). */
static size_t code_bytes(const squall_twophase_codec *cd, size_t m) {
  return cd->quant ? (m + cd->bucket - 1) / cd->bucket * sq_quant_bucket_bytes(cd->qkind, cd->bucket)
                   : m * sizeof(uint16_t);
}

void squall__twophase_geometry(const squall_twophase_codec *cd, size_t n, int p, size_t *shard_elems,
                               size_t *block_bytes) {
  if (cd->scatter) { /* MPI's shards: the caller's layout, whatever the buckets */
    *shard_elems = p > 0 ? n / (size_t)p : n;
    *block_bytes = code_bytes(cd, *shard_elems);
  } else if (cd->quant) { /* whole buckets per shard, so a bucket never straddles two owners */
    size_t nb = (n + cd->bucket - 1) / cd->bucket, sb = (nb + (size_t)p - 1) / (size_t)p;
    *shard_elems = sb * cd->bucket;
    *block_bytes = sb * sq_quant_bucket_bytes(cd->qkind, cd->bucket);
  } else { /* whole lines of 64: a shard starts where its buffers' lines do (host_alloc) */
    *shard_elems = ((n + (size_t)p - 1) / (size_t)p + 63) / 64 * 64;
    *block_bytes = *shard_elems * sizeof(uint16_t);
  }
}


/* How a call is cut: shards of se elements, each in chunks of ce elements
 * (whole buckets; the last chunk may be shorter). */
typedef struct {
  size_t se, ce, chunks;
  size_t cbb;   /* block bytes of a full chunk: one peer's codes */
  size_t slots; /* buffer sets: 3 when pipelined (exchange, gather, encode), else 1 */
} tp_plan;

static void plan(const squall_twophase_codec *cd, size_t n, int p, tp_plan *pl) {
  size_t bb;
  squall__twophase_geometry(cd, n, p, &pl->se, &bb);
  size_t granule = cd->quant ? cd->bucket : 64; /* 64: cache-line-aligned ranges */
  size_t ce = cd->chunk_bytes / sizeof(float) / (size_t)p / granule * granule;
  if (ce < granule) ce = granule;
  if (cd->chunk_bytes == 0 || ce >= pl->se) ce = pl->se;
  pl->ce = ce;
  pl->chunks = ce ? (pl->se + ce - 1) / ce : 1;
  if (pl->chunks == 0) pl->chunks = 1;
  pl->cbb = code_bytes(cd, ce);
  (void)bb; /* code_bytes(se) == bb: shards are whole buckets */
  pl->slots = pl->chunks > 1 ? 3 : 1;
}

size_t squall__twophase_chunks(const squall_twophase_codec *cd, size_t n, int p) {
  tp_plan pl;
  plan(cd, n, p, &pl);
  return pl.chunks;
}

static size_t slot_bytes(const tp_plan *pl, int p) {
  return 2 * squall__align_up((size_t)p * pl->cbb) + squall__align_up(pl->cbb);
}

/* The whole call's codes, chunk-major (chunk j of every shard, then j+1),
 * where the 16-bit codes are encoded at a guessed scale before any chunk
 * is exchanged. */
static size_t guess_bytes(const squall_twophase_codec *cd, const tp_plan *pl, int p) {
  return cd->guess && !cd->quant ? squall__align_up((size_t)p * code_bytes(cd, pl->se)) : 0;
}

size_t squall__twophase_scratch_bytes(const squall_twophase_codec *cd, size_t n, int p) {
  tp_plan pl;
  plan(cd, n, p, &pl);
  return pl.slots * slot_bytes(&pl, p) + guess_bytes(cd, &pl, p);
}

/* ------------------------------------------------------------ the call */
typedef struct {
  const squall_transport *tr;
  const squall_kernels *k;
  const squall_twophase_codec *cd;
  void *stream;
  const float *g;
  float *res, *out, *scale;
  size_t n;
  int p, me, pipelined;
  tp_plan pl;
  char *scratch;
  char *coded;    /* the whole call's codes, encoded at the guess; NULL: encoded chunk by chunk */
  int coded_cold; /* so many codes that they leave the cache before they are sent */
  int out_cold;   /* so large a result that it leaves the cache before the caller reads it */
  float guess;
  float *absmax_mine;            /* kernel memory: this rank's maximum */
  float *backup;                 /* the residual as it was (NULL: none kept), in the encoding pass */
  size_t backed;                 /* quantised: blocks (chunk j, shard r: j * p + r + 1) whose encode backed them up */
  squall_request a2a[3], gat[3]; /* in flight, per buffer set */
  int a2a_live[3], gat_live[3];
  double codec_s;
  uint64_t wire;
} tp_call;

/* Buffer set s: send (also the gathered codes), recv, mine. */
static char *buf_send(tp_call *t, size_t s) { return t->scratch + s * slot_bytes(&t->pl, t->p); }
static char *buf_recv(tp_call *t, size_t s) { return buf_send(t, s) + squall__align_up((size_t)t->p * t->pl.cbb); }
static char *buf_mine(tp_call *t, size_t s) { return buf_recv(t, s) + squall__align_up((size_t)t->p * t->pl.cbb); }

/* Chunk j: elements per shard, and rank r's range [*lo, *lo + *cnt) of it
 * (clipped at n; empty past the end). */
static size_t chunk_len(const tp_call *t, size_t j) {
  size_t a = j * t->pl.ce;
  return t->pl.se - a < t->pl.ce ? t->pl.se - a : t->pl.ce;
}
static void range_of(const tp_call *t, size_t j, int r, size_t *lo, size_t *cnt) {
  size_t start = (size_t)r * t->pl.se + j * t->pl.ce, len = chunk_len(t, j);
  *lo = start < t->n ? start : t->n;
  *cnt = t->n - *lo < len ? t->n - *lo : len;
}

/* Where element lo of the call lands in out: the reduce-scatter's out is
 * this rank's shard alone. */
static float *out_at(const tp_call *t, size_t lo) {
  return t->out + (t->cd->scatter ? lo - (size_t)t->me * t->pl.se : lo);
}

/* MPI moves data only inside MPI calls: between pieces of codec work,
 * every exchange in flight gets a turn. */
static squallResult_t poke(tp_call *t) {
  if (!t->pipelined || t->tr->progress == NULL) return squallSuccess;
  for (int s = 0; s < 3; s++) {
    if (t->a2a_live[s]) SQ_FORWARD_IF_ERROR(t->tr->progress(t->tr->ctx, &t->a2a[s]));
    if (t->gat_live[s]) SQ_FORWARD_IF_ERROR(t->tr->progress(t->tr->ctx, &t->gat[s]));
  }
  return squallSuccess;
}

static squallResult_t encode(tp_call *t, const float *g, float *res, void *codes, size_t m) {
  if (m == 0) return squallSuccess;
  if (t->cd->quant) return t->k->quant_encode(t->stream, t->cd->qkind, t->cd->bucket, g, res, codes, m);
  return t->k->half_encode(t->stream, t->cd->hkind, g, res, codes, m, t->scale);
}

/* Rank r's range [lo, lo + m) of chunk j, this rank's contribution: where
 * the quantised encoder keeps the backup, it copies the residual in the
 * same pass. */
static squallResult_t encode_contribution(tp_call *t, size_t j, int r, size_t lo, void *codes, size_t m) {
  if (t->backup && t->cd->quant && m > 0)
    SQ_FORWARD_IF_ERROR(t->k->quant_encode_backup(t->stream, t->cd->qkind, t->cd->bucket, t->g + lo, t->res + lo,
                                                  codes, m, t->backup + lo));
  else
    SQ_FORWARD_IF_ERROR(encode(t, t->g + lo, t->res ? t->res + lo : NULL, codes, m));
  t->backed = j * (size_t)t->p + (size_t)r + 1;
  return squallSuccess;
}

/* After a failure, the blocks the quantised encoder had not reached yet:
 * their residual is as it was, so copying it completes the backup. */
static squallResult_t complete_backup(tp_call *t) {
  for (size_t b = t->backed; b < t->pl.chunks * (size_t)t->p; b++) {
    size_t lo, cnt;
    range_of(t, b / (size_t)t->p, (int)(b % (size_t)t->p), &lo, &cnt);
    if (cnt > 0) SQ_FORWARD_IF_ERROR(t->k->widen(t->stream, SQ_DT_F32, t->res + lo, t->backup + lo, cnt, 1.0f));
  }
  return squallSuccess;
}

static squallResult_t decode(tp_call *t, const void *codes, float *out, size_t m) {
  if (m == 0) return squallSuccess;
  if (t->cd->quant) return t->k->quant_decode(t->stream, t->cd->qkind, t->cd->bucket, codes, out, m, t->out_cold);
  return t->k->half_decode(t->stream, t->cd->hkind, codes, out, m, t->scale, t->out_cold);
}

/* Where chunk j of shard r lies in t->coded. */
static char *coded_block(tp_call *t, size_t j, int r) {
  return t->coded + j * (size_t)t->p * t->pl.cbb + (size_t)r * code_bytes(t->cd, chunk_len(t, j));
}

/* Chunk j of every shard at the guessed scale (rescale 0), before the
 * maximum is agreed; or (rescale 1), in its turn in the pipeline, again at
 * the agreed scale where the guess missed (the kernel tells; a no-op
 * otherwise), so that a miss overlaps the exchange as an encode does. */
static squallResult_t encode_guessed(tp_call *t, size_t j, int rescale) {
  for (int r = 0; r < t->p; r++) {
    size_t lo, cnt;
    range_of(t, j, r, &lo, &cnt);
    if (cnt == 0) continue;
    uint16_t *codes = (uint16_t *)coded_block(t, j, r);
    double t0 = squall__now();
    if (rescale)
      SQ_FORWARD_IF_ERROR(t->k->half_rescale(t->stream, t->cd->hkind, t->res + lo, codes, cnt, t->guess,
                                             t->absmax_mine, t->scale));
    else
      SQ_FORWARD_IF_ERROR(t->k->half_encode_guess(t->stream, t->cd->hkind, t->g + lo, t->res + lo, codes, cnt,
                                                  t->guess, t->absmax_mine, t->coded_cold,
                                                  t->backup ? t->backup + lo : NULL));
    t->codec_s += squall__now() - t0;
    if (rescale) SQ_FORWARD_IF_ERROR(poke(t));
  }
  return squallSuccess;
}

/* 1. encode chunk j of every shard (block r goes to rank r); exchange. */
static squallResult_t stage_encode(tp_call *t, size_t j) {
  size_t s = j % t->pl.slots, len = chunk_len(t, j), cbb = code_bytes(t->cd, len);
  char *send = t->coded ? coded_block(t, j, 0) : buf_send(t, s);
  if (t->coded) SQ_FORWARD_IF_ERROR(encode_guessed(t, j, 1)); /* encoded already; again where the guess missed */
  for (int r = 0; r < t->p && !t->coded; r++) {               /* encoded now */
    size_t lo, cnt;
    range_of(t, j, r, &lo, &cnt);
    double t0 = squall__now();
    SQ_FORWARD_IF_ERROR(encode_contribution(t, j, r, lo, send + (size_t)r * cbb, cnt));
    t->codec_s += squall__now() - t0; /* the codec's time only: MPI's progress is the exchange's */
    SQ_FORWARD_IF_ERROR(poke(t));
  }
  t->wire += (uint64_t)(t->p - 1) * cbb;
  if (!t->pipelined) return t->tr->alltoall(t->tr->ctx, t->stream, send, buf_recv(t, s), cbb);
  SQ_FORWARD_IF_ERROR(t->tr->ialltoall(t->tr->ctx, send, buf_recv(t, s), cbb, &t->a2a[s]));
  t->a2a_live[s] = 1;
  return squallSuccess;
}

/* The sum of the p blocks of my shard's chunk (cbb bytes apart), re-encoded
 * with my residual into codes; out (the shard's place in the result, which
 * the gathered codes overwrite later) may receive the sums. The 16-bit
 * codecs do it in one pass where the kernel set can; the quantised
 * encoder is compute-bound, and fusing it measured no faster. */
static squallResult_t reduce_encode(tp_call *t, const void *blocks, size_t cbb, float *out, float *res,
                                    void *codes, size_t m) {
  const squall_kernels *k = t->k;
  const squall_twophase_codec *cd = t->cd;
  if (m == 0) return squallSuccess;
  if (!cd->quant && k->half_reduce_encode)
    return k->half_reduce_encode(t->stream, cd->hkind, blocks, t->p, cbb / sizeof(uint16_t), out, res, codes, m,
                                 t->scale);
  if (cd->quant)
    SQ_FORWARD_IF_ERROR(k->quant_reduce(t->stream, cd->qkind, cd->bucket, blocks, t->p, cbb, out, m));
  else
    SQ_FORWARD_IF_ERROR(k->half_reduce(t->stream, cd->hkind, blocks, t->p, cbb / sizeof(uint16_t), out, m, t->scale));
  return encode(t, out, res, codes, m);
}

/* The reduce-scatter's step 2: the fp32 sum of the p blocks in rank order
 * is my shard's result. */
static squallResult_t reduce_only(tp_call *t, const void *blocks, size_t cbb, float *out, size_t m) {
  if (m == 0) return squallSuccess;
  if (t->cd->quant) return t->k->quant_reduce(t->stream, t->cd->qkind, t->cd->bucket, blocks, t->p, cbb, out, m);
  return t->k->half_reduce(t->stream, t->cd->hkind, blocks, t->p, cbb / sizeof(uint16_t), out, m, t->scale);
}

/* 2. sum my part of chunk j in fp32, rank order; 3. re-encode it with my
 * residual (its error stays on the owner) and all-gather it. The
 * reduce-scatter stops after 2. */
static squallResult_t stage_reduce(tp_call *t, size_t j) {
  size_t s = j % t->pl.slots, len = chunk_len(t, j), cbb = code_bytes(t->cd, len), lo, cnt;
  if (t->pipelined) {
    t->a2a_live[s] = 0;
    SQ_FORWARD_IF_ERROR(t->tr->wait(t->tr->ctx, &t->a2a[s]));
  }
  range_of(t, j, t->me, &lo, &cnt);
  double t0 = squall__now();
  if (t->cd->scatter) {
    SQ_FORWARD_IF_ERROR(reduce_only(t, buf_recv(t, s), cbb, out_at(t, lo), cnt));
    t->codec_s += squall__now() - t0;
    return squallSuccess;
  }
  SQ_FORWARD_IF_ERROR(reduce_encode(t, buf_recv(t, s), cbb, t->out + lo, t->res ? t->res + lo : NULL,
                                    buf_mine(t, s), cnt));
  t->codec_s += squall__now() - t0;
  t->wire += (uint64_t)(t->p - 1) * cbb;
  /* the gathered codes go into send, free again once the exchange is done */
  if (!t->pipelined) return t->tr->allgather(t->tr->ctx, t->stream, buf_mine(t, s), buf_send(t, s), cbb);
  SQ_FORWARD_IF_ERROR(t->tr->iallgather(t->tr->ctx, buf_mine(t, s), buf_send(t, s), cbb, &t->gat[s]));
  t->gat_live[s] = 1;
  return squallSuccess;
}

/* 4. decode chunk j of every shard: the same bits on every rank. */
static squallResult_t stage_decode(tp_call *t, size_t j) {
  size_t s = j % t->pl.slots, len = chunk_len(t, j), cbb = code_bytes(t->cd, len);
  if (t->pipelined) {
    t->gat_live[s] = 0;
    SQ_FORWARD_IF_ERROR(t->tr->wait(t->tr->ctx, &t->gat[s]));
  }
  const char *codes = buf_send(t, s);
  for (int r = 0; r < t->p; r++) {
    size_t lo, cnt;
    range_of(t, j, r, &lo, &cnt);
    double t0 = squall__now();
    SQ_FORWARD_IF_ERROR(decode(t, codes + (size_t)r * cbb, t->out + lo, cnt));
    t->codec_s += squall__now() - t0;
    SQ_FORWARD_IF_ERROR(poke(t));
  }
  return squallSuccess;
}

/* One rank on the host: the sum is its own contribution, whose codes the
 * owner's reduce and re-encode would only make again (and leave e' as it
 * is), at twice the memory traffic of the codec. So each chunk is encoded
 * and decoded straight away, while its codes are in the cache, and nothing
 * is exchanged. The device keeps the exchange: one GPU's checks run one
 * rank, and it is their only way to run NCCL's all-to-all and all-gather
 * and the device layout of the exchange. */
static squallResult_t run_alone(tp_call *t) {
  for (size_t j = 0; j < t->pl.chunks; j++) {
    size_t lo, cnt;
    range_of(t, j, 0, &lo, &cnt);
    char *codes = t->coded ? coded_block(t, j, 0) : buf_send(t, 0);
    if (t->coded) SQ_FORWARD_IF_ERROR(encode_guessed(t, j, 1)); /* again only where the guess missed */
    double t0 = squall__now();
    if (!t->coded) SQ_FORWARD_IF_ERROR(encode_contribution(t, j, 0, lo, codes, cnt));
    SQ_FORWARD_IF_ERROR(decode(t, codes, out_at(t, lo), cnt));
    t->codec_s += squall__now() - t0;
  }
  return squallSuccess;
}

/* Chunk j is encoded while j-1 is exchanged and j-2 gathered: one stage of
 * each per step, every wait placed as late as it can be. The
 * reduce-scatter has no gather: its last stage is the sum. */
static squallResult_t run_chunks(tp_call *t) {
  size_t C = t->pl.chunks, stages = t->cd->scatter ? 2 : 3;
  if (t->p == 1 && t->cd->alone) return run_alone(t);
  for (size_t j = 0; j < C + stages - 1; j++) {
    if (j < C) SQ_FORWARD_IF_ERROR(stage_encode(t, j));
    if (j >= 1 && j - 1 < C) SQ_FORWARD_IF_ERROR(stage_reduce(t, j - 1));
    if (j >= 2 && !t->cd->scatter) SQ_FORWARD_IF_ERROR(stage_decode(t, j - 2));
  }
  return squallSuccess;
}

squallResult_t squall__twophase_allreduce(const squall_transport *tr, const squall_kernels *k,
                                          const squall_twophase_codec *cd, void *stream, const float *g,
                                          float *res, float *out, size_t n, float *scalars,
                                          void *absmax_ws, void *scratch, float *last_scale, float *backup,
                                          int *backed_up, double *codec_s, uint64_t *wire) {
  int p = tr->nranks;
  *backed_up = 0;
  SQ_RETURN_ERROR_IF(tr->alltoall == NULL, squallInvalidUsage,
                     "the transport has no all-to-all: the two-phase all-reduce cannot run");
  SQ_RETURN_ERROR_IF(cd->quant && (cd->bucket < 1 || cd->bucket % 2), squallInvalidArgument,
                     "bucket of %zu elements: must be even and positive", cd->bucket);
  /* clang-format off */
  tp_call t = {.tr = tr, .k = k, .cd = cd, .stream = stream, .g = g, .res = res, .out = out,
               .scale = &scalars[1], .n = n, .p = p, .me = tr->rank, .scratch = scratch};
  /* clang-format on */
  plan(cd, n, p, &t.pl);
  t.out_cold = n * sizeof(float) >= SQ_OUT_COLD_BYTES;
  t.pipelined = t.pl.chunks > 1 && !(p == 1 && cd->alone); /* alone: chunks, but no exchange to overlap */
  SQ_RETURN_ERROR_IF(t.pipelined && (!tr->ialltoall || !tr->iallgather || !tr->wait), squallInternalError,
                     "a pipelined two-phase all-reduce on a transport without non-blocking collectives");

  int guessing = !cd->quant && cd->guess && res && last_scale && *last_scale > 0.0f && k->half_encode_guess &&
                 k->half_rescale;
  /* the quantised encoder copies each block's residual as it encodes it
   * where the kernel set can (failures: complete_backup) */
  int fused = backup && res && cd->quant && k->quant_encode_backup;
  if (fused) t.backup = backup;
  if (backup && res && !guessing && !fused) { /* a pass of its own, before anything changes the residual */
    double t0 = squall__now();
    SQ_FORWARD_IF_ERROR(k->widen(stream, SQ_DT_F32, res, backup, n, 1.0f));
    t.codec_s += squall__now() - t0;
    *backed_up = 1;
  }
  if (!cd->quant) { /* one global scale, before any chunk */
    t.guess = last_scale ? *last_scale : 0.0f;
    if (guessing) {
      t.coded = (char *)scratch + t.pl.slots * slot_bytes(&t.pl, p);
      t.coded_cold = n * sizeof(uint16_t) >= SQ_CODES_COLD_BYTES;
      t.absmax_mine = &scalars[3];
      t.backup = backup; /* copied in the encoding pass, which reads the residual anyway */
      SQ_FORWARD_IF_ERROR(k->zero(stream, t.absmax_mine, sizeof(float)));
      for (size_t j = 0; j < t.pl.chunks; j++) SQ_FORWARD_IF_ERROR(encode_guessed(&t, j, 0));
      *backed_up = backup != NULL;                                                           /* every element: the chunks cover the call */
      SQ_FORWARD_IF_ERROR(k->widen(stream, SQ_DT_F32, t.absmax_mine, &scalars[0], 1, 1.0f)); /* a copy */
    } else {
      double t0 = squall__now();
      SQ_FORWARD_IF_ERROR(k->absmax(stream, g, res, n, &scalars[0], absmax_ws));
      t.codec_s += squall__now() - t0;
    }
    SQ_FORWARD_IF_ERROR(tr->allreduce_max_f32(tr->ctx, stream, &scalars[0], 1));
    /* The owner re-encodes a sum of p codes in 16 bits: scale the global
     * max to max/(2p), a factor 2 of headroom for the rounding of the p
     * codes and the owner's residual. bf16 has float's range: scale 1. */
    unsigned fp = squall__fp_default_begin(); /* every rank's limit, whatever its rounding mode */
    float limit = (cd->hkind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX) / (float)(2 * p);
    squall__fp_default_end(fp);
    float max_scale = cd->hkind == SQ_HALF_FP16 ? sq_pow2(100) : 1.0f;
    SQ_FORWARD_IF_ERROR(k->pow2_scale(stream, &scalars[0], limit, max_scale, &scalars[1]));
    t.wire += squall__ring_allreduce_wire(4, p);
    /* the next call's guess: host memory is read directly, device memory
     * has no guessing kernels and is never read back */
    if (last_scale && k->half_encode_guess) SQ_FORWARD_IF_ERROR(k->to_host(stream, last_scale, &scalars[1], sizeof(float)));
  }
  squallResult_t r = run_chunks(&t);
  if (r != squallSuccess) { /* nothing may stay in flight on buffers the engine reuses */
    for (int s = 0; s < 3; s++) {
      if (t.a2a_live[s]) tr->wait(tr->ctx, &t.a2a[s]);
      if (t.gat_live[s]) tr->wait(tr->ctx, &t.gat[s]);
    }
  }
  if (fused) *backed_up = r == squallSuccess || complete_backup(&t) == squallSuccess;
  *codec_s += t.codec_s;
  *wire += t.wire;
  return r;
}

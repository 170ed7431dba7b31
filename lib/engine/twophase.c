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
  switch (cfg->codec) {
  case squallCodecInt8: cd->quant = 1; cd->qkind = SQ_QUANT_INT8; return 1;
  case squallCodecInt4: cd->quant = 1; cd->qkind = SQ_QUANT_INT4; return 1;
  case squallCodecFp8: cd->quant = 1; cd->qkind = SQ_QUANT_FP8; return 1;
  case squallCodecFp16:
  case squallCodecBf16:
    if (cfg->halfAccum != squallHalfAccumFp32) return 0;
    cd->hkind = cfg->codec == squallCodecBf16 ? SQ_HALF_BF16 : SQ_HALF_FP16;
    return 1;
  default: return 0;
  }
}

void squall__twophase_geometry(const squall_twophase_codec *cd, size_t n, int p, size_t *shard_elems,
                               size_t *block_bytes) {
  if (cd->quant) { /* whole buckets per shard, so a bucket never straddles two owners */
    size_t nb = (n + cd->bucket - 1) / cd->bucket, sb = (nb + (size_t)p - 1) / (size_t)p;
    *shard_elems = sb * cd->bucket;
    *block_bytes = sb * sq_quant_bucket_bytes(cd->qkind, cd->bucket);
  } else {
    *shard_elems = (n + (size_t)p - 1) / (size_t)p;
    *block_bytes = *shard_elems * sizeof(uint16_t);
  }
}

static size_t align_up(size_t x) { return (x + 255) & ~(size_t)255; }

size_t squall__twophase_scratch_bytes(const squall_twophase_codec *cd, size_t n, int p) {
  size_t se, bb;
  squall__twophase_geometry(cd, n, p, &se, &bb);
  return 2 * align_up((size_t)p * bb) + align_up(bb);
}

squallResult_t squall__twophase_allreduce(const squall_transport *tr, const squall_kernels *k,
                                          const squall_twophase_codec *cd, void *stream, const float *g,
                                          float *res, float *out, size_t n, float *scalars,
                                          void *absmax_ws, void *scratch, double *codec_s,
                                          uint64_t *wire) {
  int p = tr->nranks, me = tr->rank;
  SQ_RETURN_ERROR_IF(tr->alltoall == NULL, squallInvalidUsage,
                     "the transport has no all-to-all: the two-phase all-reduce cannot run");
  SQ_RETURN_ERROR_IF(cd->quant && (cd->bucket < 1 || cd->bucket % 2), squallInvalidArgument,
                     "bucket of %zu elements: must be even and positive", cd->bucket);
  size_t se, bb;
  squall__twophase_geometry(cd, n, p, &se, &bb);
  char *send = scratch, *recv = send + align_up((size_t)p * bb), *mine = recv + align_up((size_t)p * bb);
  size_t lo = (size_t)me * se < n ? (size_t)me * se : n;
  size_t len = n - lo < se ? n - lo : se;
  float *res_mine = res ? res + lo : NULL;

  /* 1. encode everything; shard r is block r (contiguous by construction) */
  double t0 = squall__now();
  if (!cd->quant) {
    SQ_FORWARD_IF_ERROR(k->absmax(stream, g, res, n, &scalars[0], absmax_ws));
    SQ_FORWARD_IF_ERROR(tr->allreduce_max_f32(tr->ctx, stream, &scalars[0], 1));
    /* The owner re-encodes a sum of p codes in 16 bits: scale the global
     * max to max/(2p), a factor 2 of headroom for the rounding of the p
     * codes and the owner's residual. bf16 has float's range: scale 1. */
    float limit = (cd->hkind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX) / (float)(2 * p);
    float max_scale = cd->hkind == SQ_HALF_FP16 ? sq_pow2(100) : 1.0f;
    SQ_FORWARD_IF_ERROR(k->pow2_scale(stream, &scalars[0], limit, max_scale, &scalars[1]));
    SQ_FORWARD_IF_ERROR(k->half_encode(stream, cd->hkind, g, res, (uint16_t *)send, n, &scalars[1]));
    *wire += squall__ring_allreduce_wire(4, p);
  } else {
    SQ_FORWARD_IF_ERROR(k->quant_encode(stream, cd->qkind, cd->bucket, g, res, (uint8_t *)send, n));
  }
  double t1 = squall__now();
  SQ_FORWARD_IF_ERROR(tr->alltoall(tr->ctx, stream, send, recv, bb));
  double t2 = squall__now();

  /* 2. sum my shard in fp32, rank order; 3. re-encode it with my residual */
  if (cd->quant) {
    SQ_FORWARD_IF_ERROR(k->quant_reduce(stream, cd->qkind, cd->bucket, (const uint8_t *)recv, p, bb,
                                        out + lo, len));
    SQ_FORWARD_IF_ERROR(k->quant_encode(stream, cd->qkind, cd->bucket, out + lo, res_mine,
                                        (uint8_t *)mine, len));
  } else {
    SQ_FORWARD_IF_ERROR(k->half_reduce(stream, cd->hkind, (const uint16_t *)recv, p, se, out + lo,
                                       len, &scalars[1]));
    SQ_FORWARD_IF_ERROR(k->half_encode(stream, cd->hkind, out + lo, res_mine, (uint16_t *)mine, len,
                                       &scalars[1]));
  }
  double t3 = squall__now();
  /* 4. all-gather the reduced shards (into send, free again) and decode
   * the whole tensor: the gathered blocks lie as one encoded tensor. */
  SQ_FORWARD_IF_ERROR(tr->allgather(tr->ctx, stream, mine, send, bb));
  double t4 = squall__now();
  if (cd->quant)
    SQ_FORWARD_IF_ERROR(k->quant_decode(stream, cd->qkind, cd->bucket, (const uint8_t *)send, out, n));
  else
    SQ_FORWARD_IF_ERROR(k->half_decode(stream, cd->hkind, (const uint16_t *)send, out, n, &scalars[1]));
  *codec_s += (t1 - t0) + (t3 - t2) + (squall__now() - t4);
  *wire += 2 * (uint64_t)(p - 1) * bb;
  return squallSuccess;
}

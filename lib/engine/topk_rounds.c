/* SPDX-License-Identifier: BSD-3-Clause */
/* topk_rounds.c - top-k's exchange in rounds (see topk_rounds.h). */
#include "common/internal.h"

#include <stddef.h>
#include <string.h>

#include "codecs/codec.h"
#include "codecs/lossless.h"
#include "engine/engine.h"
#include "engine/topk_rounds.h"
#include "common/stats.h"

/* Rounds in flight while one is finished. */
#define DEPTH 2
/* Elements finished between two turns of MPI's progress: MPI moves data
 * only inside MPI calls, and a round's all-gather takes several steps. */
#define SLICE ((size_t)1 << 16)

size_t squall__topk_rounds(const squall_transport *tr, size_t n, size_t k, size_t chunk_bytes) {
  if (chunk_bytes == 0 || !tr->iallgather || !tr->wait || !tr->progress || tr->nranks > SQ_FINISH_MAX_RANKS)
    return 1;
  uint64_t bytes = (uint64_t)n * sizeof(float), r64 = (bytes + chunk_bytes - 1) / chunk_bytes;
  size_t r = r64 > SQ_TOPK_ROUNDS_MAX ? SQ_TOPK_ROUNDS_MAX : (size_t)r64;
  if (r > k / SQ_TOPK_ROUND_MIN) r = k / SQ_TOPK_ROUND_MIN;
  return r > 1 ? r : 1;
}

/* Round j: entries [from, from + m) of every slot. */
static size_t round_from(size_t k, size_t rounds, size_t j) { return j * k / rounds; }
static size_t round_entries(size_t k, size_t rounds, size_t j) {
  return round_from(k, rounds, j + 1) - round_from(k, rounds, j);
}

int squall__topk_rounds_pack = 1;

/* Round j's part packed (16-bit indices), where that is smaller than
 * raw: 0 for raw. */
static size_t packed_bytes(size_t n, size_t k, squallValueType_t values, size_t rounds, size_t j) {
  return squall__topk_rounds_pack ? squall__topk_part_packed_bytes(round_entries(k, rounds, j), n, values) : 0;
}

/* Bytes one rank sends in round j at most: 8 bytes of size and the
 * largest frame zstd may make of the raw part, or the part packed or raw. */
static size_t round_capacity(size_t n, size_t k, squallValueType_t values, size_t rounds, size_t j, int lossless) {
  size_t m = round_entries(k, rounds, j);
  if (lossless) return squall__align_up(sizeof(uint64_t) + squall__lossless_bound(m, values));
  size_t packed = packed_bytes(n, k, values, rounds, j);
  return packed > 0 ? packed : squall__topk_slot_bytes(m, values);
}

uint64_t squall__topk_rounds_wire(size_t n, size_t k, squallValueType_t values, int p, size_t rounds) {
  uint64_t per_rank = 0;
  for (size_t j = 0; j < rounds; j++) per_rank += round_capacity(n, k, values, rounds, j, 0);
  return (uint64_t)(p > 1 ? p - 1 : 0) * per_rank;
}

/* The host memory, in this order: every round's send block, every
 * round's receive blocks (p of them), and for the lossless stage a part
 * and zstd's scratch (one round at a time) and the agreed sizes. */
typedef struct {
  char *send[SQ_TOPK_ROUNDS_MAX], *recv[SQ_TOPK_ROUNDS_MAX];
  char *part, *scratch;
  int64_t *sizes;
  size_t total;
} rounds_layout;

static void layout(size_t n, size_t k, squallValueType_t values, int p, size_t rounds, int lossless, char *base,
                   rounds_layout *L) {
  size_t off = 0, biggest = squall__topk_slot_bytes(round_entries(k, rounds, rounds - 1), values);
  for (size_t j = 0; j < rounds; j++) {
    L->send[j] = base + off;
    off += squall__align_up(round_capacity(n, k, values, rounds, j, lossless));
  }
  for (size_t j = 0; j < rounds; j++) {
    L->recv[j] = base + off;
    off += squall__align_up((size_t)p * round_capacity(n, k, values, rounds, j, lossless));
  }
  L->part = L->scratch = NULL;
  L->sizes = NULL;
  if (lossless) { /* the last round is the largest: it takes the rest of k / rounds */
    L->part = base + off;
    off += squall__align_up(biggest);
    L->scratch = base + off;
    off += squall__align_up(squall__lossless_scratch_bytes(round_entries(k, rounds, rounds - 1), values));
    L->sizes = (int64_t *)(base + off);
    off += squall__align_up((rounds + 1) * sizeof(int64_t));
  }
  L->total = off;
}

size_t squall__topk_rounds_host_bytes(size_t n, size_t k, squallValueType_t values, int p, size_t rounds,
                                      int lossless) {
  rounds_layout L;
  if (rounds <= 1 || rounds > SQ_TOPK_ROUNDS_MAX) return 0;
  layout(n, k, values, p, rounds, lossless, NULL, &L);
  return L.total;
}

typedef struct {
  const squall_topk_rounds_call *c;
  rounds_layout L;
  int p;
  int lossless;
  size_t block[SQ_TOPK_ROUNDS_MAX]; /* bytes per rank in round j's all-gather */
  squall_request req[SQ_TOPK_ROUNDS_MAX];
  int live[SQ_TOPK_ROUNDS_MAX];
  double codec_s;
  uint64_t wire;
  squall_topk_finisher fin; /* last: begin() sets it up, the rest is zeroed */
} rounds_run;

/* Every round in flight gets a turn of the library's progress. */
static squallResult_t poke(rounds_run *t) {
  const squall_transport *tr = t->c->tr;
  for (size_t j = 0; j < t->c->rounds; j++)
    if (t->live[j]) SQ_FORWARD_IF_ERROR(tr->progress(tr->ctx, &t->req[j]));
  return squallSuccess;
}

static squallResult_t post(rounds_run *t, size_t j) {
  const squall_transport *tr = t->c->tr;
  SQ_FORWARD_IF_ERROR(tr->iallgather(tr->ctx, t->L.send[j], t->L.recv[j], t->block[j], &t->req[j]));
  t->live[j] = 1;
  t->wire += (uint64_t)(t->p - 1) * t->block[j];
  return squallSuccess;
}

/* The rounds without the lossless stage: each a part of this rank's slot,
 * packed where that is smaller, else as it is. */
static void cut_plain(rounds_run *t) {
  const squall_topk_rounds_call *c = t->c;
  for (size_t j = 0; j < c->rounds; j++) {
    size_t m = round_entries(c->k, c->rounds, j), from = round_from(c->k, c->rounds, j);
    size_t packed = packed_bytes(c->n, c->k, c->values, c->rounds, j);
    if (packed > 0) squall__topk_slot_cut_packed(c->mine, c->k, from, m, c->n, c->values, t->L.send[j]);
    else squall__topk_slot_cut(c->mine, c->k, from, m, c->values, t->L.send[j]);
    t->block[j] = round_capacity(c->n, c->k, c->values, c->rounds, j, 0);
  }
}

/* The lossless rounds: each part coded on its own, then every round's
 * block size agreed (the largest over ranks; an all-reduce of minima of
 * the negated sizes), and whether every rank could code them: zstd
 * allocates inside, and where it fails on one rank every rank fails the
 * call here, before any round leaves. */
static squallResult_t code_lossless(rounds_run *t) {
  const squall_topk_rounds_call *c = t->c;
  const squall_transport *tr = c->tr;
  int failed = 0;
  double t0 = squall__now();
  for (size_t j = 0; j < c->rounds; j++) {
    size_t m = round_entries(c->k, c->rounds, j), cap = round_capacity(c->n, c->k, c->values, c->rounds, j, 1);
    squall__topk_slot_cut(c->mine, c->k, round_from(c->k, c->rounds, j), m, c->values, t->L.part);
    char *blk = t->L.send[j];
    uint64_t z = squall__lossless_encode(t->L.part, m, c->values, c->zstd_level, blk + sizeof z,
                                         cap - sizeof z, t->L.scratch);
    failed |= z == 0;
    memcpy(blk, &z, sizeof z);
    t->L.sizes[j] = -(int64_t)(sizeof z + z);
  }
  t->L.sizes[c->rounds] = !failed;
  t->codec_s += squall__now() - t0;
  SQ_FORWARD_IF_ERROR(tr->allreduce_min_i64_host(tr->ctx, NULL, t->L.sizes, c->rounds + 1));
  t->wire += squall__ring_allreduce_wire((c->rounds + 1) * sizeof(int64_t), t->p);
  SQ_RETURN_ERROR_IF(failed, squallInternalError, "zstd failed to compress a round of a %zu-entry top-k slot", c->k);
  SQ_RETURN_ERROR_IF(t->L.sizes[c->rounds] != 1, squallRemoteError,
                     "a peer could not compress its top-k rounds (zstd failed there)");
  for (size_t j = 0; j < c->rounds; j++) {
    uint64_t z;
    memcpy(&z, t->L.send[j], sizeof z);
    size_t block = (size_t)-t->L.sizes[j], cap = round_capacity(c->n, c->k, c->values, c->rounds, j, 1);
    /* every rank agreed on it, and none made more than its capacity */
    SQ_RETURN_ERROR_IF(block < sizeof z + z || block > cap, squallInternalError,
                       "round %zu of top-k: agreed block of %zu bytes for a %llu-byte frame", j, block,
                       (unsigned long long)z);
    memset(t->L.send[j] + sizeof z + z, 0, block - sizeof z - z); /* no stray bytes on the wire */
    t->block[j] = block;
  }
  return squallSuccess;
}

/* Rank r's part of round j into its slot, decoded as it was sent. */
static squallResult_t put_part(rounds_run *t, size_t j, int r) {
  const squall_topk_rounds_call *c = t->c;
  size_t m = round_entries(c->k, c->rounds, j), from = round_from(c->k, c->rounds, j);
  const char *blk = t->L.recv[j] + (size_t)r * t->block[j];
  char *slot = (char *)c->slots + (size_t)r * squall__topk_slot_bytes(c->k, c->values);
  if (t->lossless) {
    uint64_t z;
    memcpy(&z, blk, sizeof z);
    SQ_RETURN_ERROR_IF(z > t->block[j] - sizeof z ||
                           squall__lossless_decode(blk + sizeof z, (size_t)z, m, c->values, c->n, t->L.part,
                                                   t->L.scratch) != 0,
                       squallRemoteError,
                       "rank %d sent a corrupt or truncated compressed top-k payload (round %zu, %llu bytes)", r, j,
                       (unsigned long long)z);
    squall__topk_slot_put(t->L.part, m, slot, c->k, from, c->values);
  } else if (packed_bytes(c->n, c->k, c->values, c->rounds, j) > 0) {
    SQ_RETURN_ERROR_IF(squall__topk_slot_put_packed(blk, m, c->n, slot, c->k, from, c->values) != 0,
                       squallRemoteError,
                       "rank %d sent a corrupt packed top-k payload (round %zu: its page counts do not add up to "
                       "%zu entries)",
                       r, j, m);
  } else {
    squall__topk_slot_put(blk, m, slot, c->k, from, c->values);
  }
  return squallSuccess;
}

/* Round j is in: every rank's part goes into its slot, then is validated. */
static squallResult_t place(rounds_run *t, size_t j) {
  const squall_topk_rounds_call *c = t->c;
  size_t m = round_entries(c->k, c->rounds, j), from = round_from(c->k, c->rounds, j);
  for (int r = 0; r < t->p; r++) SQ_FORWARD_IF_ERROR(put_part(t, j, r));
  SQ_RETURN_ERROR_IF(squall__topk_finish_accept(&t->fin, from + m) != 0, squallRemoteError,
                     "a peer's top-k payload is corrupt (index out of range or not ascending, round %zu)", j);
  return squallSuccess;
}

/* Finishes what round j made final, a slice at a time between turns of
 * the rounds still in flight. */
static squallResult_t finish_upto(rounds_run *t, size_t end) {
  while (t->fin.done < end && t->fin.done < t->fin.bound) {
    size_t before = t->fin.done;
    double t0 = squall__now();
    squall__topk_finish_run(&t->fin, end - t->fin.done > SLICE ? t->fin.done + SLICE : end);
    t->codec_s += squall__now() - t0;
    SQ_FORWARD_IF_ERROR(poke(t));
    if (t->fin.done == before) break; /* the rest waits for a whole tile */
  }
  return squallSuccess;
}

/* A round that this rank finds corrupt (only this rank, where the bytes
 * went wrong on its way in) fails the call here, but the peers go on
 * posting and waiting for the later rounds: this rank goes through them
 * too, without decoding, and returns its error at the end. A failure of
 * the library itself returns at once, as any failed collective does. */
static squallResult_t run_rounds(rounds_run *t) {
  const squall_topk_rounds_call *c = t->c;
  if (t->lossless) SQ_FORWARD_IF_ERROR(code_lossless(t));
  else {
    double t0 = squall__now();
    cut_plain(t);
    t->codec_s += squall__now() - t0;
  }
  SQ_TRACE("rank %d: top-k exchange of %zu entries in %zu rounds%s", c->tr->rank, c->k, c->rounds,
           t->lossless ? ", lossless" : "");
  squallResult_t bad = squallSuccess; /* this rank's verdict on what came in */
  for (size_t j = 0; j < DEPTH && j < c->rounds; j++) SQ_FORWARD_IF_ERROR(post(t, j));
  for (size_t j = 0; j < c->rounds; j++) {
    SQ_FORWARD_IF_ERROR(c->tr->wait(c->tr->ctx, &t->req[j]));
    t->live[j] = 0;                                                     /* (after the wait: a failed one is still waited for on the way out) */
    if (j + DEPTH < c->rounds) SQ_FORWARD_IF_ERROR(post(t, j + DEPTH)); /* the wire stays busy */
    if (bad != squallSuccess) continue;
    double t0 = squall__now();
    bad = place(t, j);
    t->codec_s += squall__now() - t0;
    if (bad == squallSuccess) SQ_FORWARD_IF_ERROR(finish_upto(t, c->n));
  }
  SQ_FORWARD_IF_ERROR(bad);
  double t0 = squall__now();
  squall__topk_finish_run(&t->fin, c->n);
  t->codec_s += squall__now() - t0;
  return squallSuccess;
}

squallResult_t squall__topk_rounds_run(const squall_topk_rounds_call *c, double *codec_s, uint64_t *wire) {
  SQ_RETURN_ERROR_IF(c->rounds < 2 || c->rounds > SQ_TOPK_ROUNDS_MAX || !c->tr->iallgather, squallInternalError,
                     "top-k in %zu rounds on this transport", c->rounds);
  rounds_run run, *t = &run; /* on the stack: nothing may allocate once the header has passed */
  memset(t, 0, offsetof(rounds_run, fin));
  t->c = c;
  t->p = c->tr->nranks;
  t->lossless = c->zstd_level > 0;
  layout(c->n, c->k, c->values, t->p, c->rounds, t->lossless, c->host, &t->L);
  squallResult_t r = squallSuccess;
  if (squall__topk_finish_begin(&t->fin, c->g, NULL, c->n, c->slots, t->p, c->tr->rank, c->k, c->values, c->out) != 0)
    r = squall__fail(squallInternalError, "top-k's finish refused %d ranks", t->p);
  if (r == squallSuccess) r = run_rounds(t);
  if (r != squallSuccess) /* nothing may stay in flight on buffers the engine reuses */
    for (size_t j = 0; j < c->rounds; j++)
      if (t->live[j]) c->tr->wait(c->tr->ctx, &t->req[j]);
  *codec_s += t->codec_s;
  *wire += t->wire;
  return r;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * codec_sparse.c - after the top-k exchange: the host sparse decoder sums
 * the slots of every rank into a dense vector, in rank order, so that every
 * rank computes the same bits; squall__topk_finish does that and the
 * sender's residual update in one streaming pass. The CUDA twins
 * (lib/codecs/cuda/sparse.cu, topk.cu) add in the same order and take the
 * fp16 values and the residual from the same codec_math.h functions.
 *
 * Only codec.h and libc here: the standalone GPU self-test build compiles
 * this file without config.h or the logger.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define SQ_SPARSE_AVX2 1
#include <immintrin.h>
#endif

#include "codecs/codec.h"

/* Entries [from, to) of a slot that came from the network: indices
 * inside dense, ascending strictly past the entry before them (which also
 * rules out duplicates). */
static int entries_valid(const char *slot, size_t from, size_t to, size_t n) {
  uint32_t prev = 0;
  if (from > 0) memcpy(&prev, slot + 4 * (from - 1), sizeof prev);
  for (size_t j = from; j < to; j++) {
    uint32_t idx;
    memcpy(&idx, slot + 4 * j, sizeof idx);
    if ((size_t)idx >= n || (j > 0 && idx <= prev)) return 0;
    prev = idx;
  }
  return 1;
}

int squall__sparse_decode(const void *slots, int nranks, size_t k, squallValueType_t values,
                          float *dense, size_t n) {
  const char *base = (const char *)slots;
  const size_t sb = squall__topk_slot_bytes(k, values);
  const int fp16 = values == squallValueFp16;
  int ok = nranks >= 0;
  /* Validate everything before the first write: a corrupt payload leaves a
   * zeroed result, never a partial sum. */
  for (int r = 0; ok && r < nranks; r++) ok = entries_valid(base + (size_t)r * sb, 0, k, n);
  if (n > 0) memset(dense, 0, n * sizeof *dense);
  if (!ok) return -1;

  const unsigned fp = squall__fp_default_begin(); /* the same bits on every rank */
  for (int r = 0; r < nranks; r++) {
    const char *slot = base + (size_t)r * sb;
    const char *vals = slot + 4 * k;
    float scale = 1.0f;
    if (fp16) memcpy(&scale, slot + squall__slot_scale_offset(k), sizeof scale);
    for (size_t j = 0; j < k; j++) {
      uint32_t idx;
      memcpy(&idx, slot + 4 * j, sizeof idx);
      float v;
      if (fp16) {
        uint16_t h;
        memcpy(&h, vals + 2 * j, sizeof h);
        v = sq_half_decode_elem(SQ_HALF_FP16, h, scale);
      } else {
        memcpy(&v, vals + 4 * j, sizeof v);
      }
      /* dense may sit at any address: memcpy, not a float lvalue */
      char *at = (char *)dense + 4 * (size_t)idx;
      float cur;
      memcpy(&cur, at, sizeof cur);
      cur += v;
      memcpy(at, &cur, sizeof cur);
    }
  }
  squall__fp_default_end(fp);
  return 0;
}

/* ------------------------------------------------------- squall__topk_finish
 * Tiles of FINISH_TILE elements: a streaming pass writes the tile's
 * residual, the sender's own entries are applied to it while it is still in
 * the first-level cache, and the tile's output is summed in a small buffer
 * (every slot's indices ascend, so one cursor per slot walks them) and then
 * streamed out with non-temporal stores where the CPU has them: against a
 * memset of the output and scattered additions, no sent entry costs a cache
 * miss and the output is never read from memory. */
#define FINISH_TILE 256
/* With many slots the per-tile cursor checks add up: the decode's tiles
 * grow with the rank count, up to this many elements (32 KiB). */
#define DECODE_TILE_MAX 8192
/* Non-temporal stores only for an output well past the caches: a smaller
 * one is read soon (the narrowing to 16 bits, the caller) and should stay. */
#define STREAM_MIN_ELEMENTS ((size_t)1 << 22)

static inline float ldf(const float *p, size_t i) {
  float x;
  memcpy(&x, (const char *)p + 4 * i, sizeof x);
  return x;
}
static inline void stf(float *p, size_t i, float x) { memcpy((char *)p + 4 * i, &x, sizeof x); }

/* res[i] = sq_residual_keep(g[i] + res[i]) for i in [from, to). */
static void keep_scalar(const float *g, float *res, size_t from, size_t to) {
  for (size_t i = from; i < to; i++) stf(res, i, sq_residual_keep(ldf(g, i) + ldf(res, i)));
}

/* dense[from, from + m) = tile[0, m). */
static void put_tile(float *dense, size_t from, const float *tile, size_t m) {
  memcpy((char *)dense + 4 * from, tile, 4 * m);
}

#ifdef SQ_SPARSE_AVX2
__attribute__((target("avx2"))) static size_t keep_avx2(const float *g, float *res, size_t from, size_t to) {
  const __m256i expo = _mm256_set1_epi32(0x7f800000);
  size_t i = from;
  for (; i + 8 <= to; i += 8) {
    float *r = (float *)((char *)res + 4 * i);
    __m256 a = _mm256_add_ps(_mm256_loadu_ps((const float *)((const char *)g + 4 * i)), _mm256_loadu_ps(r));
    /* all exponent bits set: Inf or NaN, which the residual never keeps */
    __m256i bad = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(a), expo), expo);
    _mm256_storeu_ps(r, _mm256_andnot_ps(_mm256_castsi256_ps(bad), a));
  }
  return i;
}

/* put_tile with non-temporal stores; dense + from must be 32-byte aligned
 * and m a multiple of 8. */
__attribute__((target("avx"))) static void put_tile_stream(float *dense, size_t from, const float *tile,
                                                           size_t m) {
  for (size_t j = 0; j < m; j += 8) _mm256_stream_ps(dense + from + j, _mm256_loadu_ps(tile + j));
}
#endif

/* The residual of entry j of the sender's slot, at element i, where res
 * already holds sq_residual_keep(a): a itself when finite, and 0 for a
 * non-finite a, whose residual is 0 either way. */
static inline void sent_residual(float *res, size_t i, int fp16, float scale) {
  float r = 0.0f; /* fp32: sent whole */
  if (fp16) (void)sq_half_encode_a(SQ_HALF_FP16, sq_ftz(ldf(res, i)), &r, scale);
  stf(res, i, r);
}

static inline float slot_value(const char *slot, size_t k, size_t j, int fp16, float scale) {
  float v;
  if (fp16) {
    uint16_t h;
    memcpy(&h, slot + 4 * k + 2 * j, sizeof h);
    v = sq_half_decode_elem(SQ_HALF_FP16, h, scale);
  } else {
    memcpy(&v, slot + 4 * k + 4 * j, sizeof v);
  }
  return v;
}

static inline uint32_t slot_index(const char *slot, size_t j) {
  uint32_t idx;
  memcpy(&idx, slot + 4 * j, sizeof idx);
  return idx;
}

static float slot_scale(const char *slot, size_t k, int fp16) {
  float scale = 1.0f;
  if (fp16) memcpy(&scale, slot + squall__slot_scale_offset(k), sizeof scale);
  return scale;
}

/* The residual of elements [t0, t1): a streaming pass, then the sender's
 * own entries there (from *pos on, below `entries`, those in place; *pos
 * moves past them): what it sent leaves the residual. Reads g[t0, t1) and nothing of g after that. */
static void commit_tile(const float *g, float *res, const char *mine, size_t entries, int fp16, float scale,
                        size_t t0, size_t t1, size_t *pos, int avx2) {
  size_t i = t0;
#ifdef SQ_SPARSE_AVX2
  if (avx2) i = keep_avx2(g, res, t0, t1);
#else
  (void)avx2;
#endif
  keep_scalar(g, res, i, t1);
  size_t j = *pos;
  for (; j < entries && slot_index(mine, j) < t1; j++) sent_residual(res, slot_index(mine, j), fp16, scale);
  *pos = j;
}

int squall__topk_finish_begin(squall_topk_finisher *f, const float *g, float *res, size_t n, const void *slots,
                              int nranks, int own, size_t k, squallValueType_t values, float *dense) {
  memset(f, 0, offsetof(squall_topk_finisher, pos));
  if (nranks < 0 || (res && (own < 0 || own >= nranks))) return -1;
  f->g = g;
  f->res = res;
  f->dense = dense;
  f->base = (const char *)slots;
  f->n = n;
  f->k = k;
  f->sb = squall__topk_slot_bytes(k, values);
  f->nranks = nranks;
  f->own = own;
  f->fp16 = values == squallValueFp16;
  f->ndecode = dense && nranks <= SQ_FINISH_MAX_RANKS ? nranks : 0;
#ifdef SQ_SPARSE_AVX2
  f->avx2 = squall__cpu_x86(SQ_CPU_AVX2);
  f->stream = f->avx2 && f->ndecode && n >= STREAM_MIN_ELEMENTS && ((uintptr_t)dense & 3) == 0;
  if (f->stream) f->head = ((32 - ((uintptr_t)dense & 31)) & 31) / 4; /* a first, shorter tile aligns the rest */
#endif
  /* longer tiles for more slots: fewer cursor checks per element */
  f->span = (size_t)FINISH_TILE * (size_t)(f->ndecode > 2 ? f->ndecode / 2 : 1);
  if (f->span > DECODE_TILE_MAX) f->span = DECODE_TILE_MAX;
  for (int r = 0; r < f->ndecode; r++) f->pos[r] = 0;
  return 0;
}

int squall__topk_finish_accept(squall_topk_finisher *f, size_t entries) {
  int ok = entries <= f->k && entries >= f->accepted;
  for (int r = 0; ok && r < f->nranks; r++) ok = entries_valid(f->base + (size_t)r * f->sb, f->accepted, entries, f->n);
  if (ok && f->accepted == 0 && entries > 0) { /* the first round brings the scales */
    for (int r = 0; r < f->ndecode; r++) f->scales[r] = slot_scale(f->base + (size_t)r * f->sb, f->k, f->fp16);
  } else if (ok && entries > f->accepted) { /* every round carries them again: a different one is corrupt */
    for (int r = 0; ok && r < f->ndecode; r++) {
      float now = slot_scale(f->base + (size_t)r * f->sb, f->k, f->fp16);
      ok = memcmp(&now, &f->scales[r], sizeof now) == 0;
    }
  }
  if (!ok) {
    if (f->dense && f->n > 0) memset(f->dense, 0, f->n * sizeof *f->dense);
    return -1;
  }
  f->accepted = entries;
  if (entries == f->k) {
    f->bound = f->n;
  } else if (entries > 0) { /* below every slot's last entry so far, nothing more can come */
    size_t b = f->n;
    for (int r = 0; r < f->nranks; r++) {
      size_t last = slot_index(f->base + (size_t)r * f->sb, entries - 1);
      if (last < b) b = last;
    }
    f->bound = b + 1;
  }
  return 0;
}

/* Sums tile [t0, t1) of the decoded slots into dense, rank order. */
static void decode_tile(squall_topk_finisher *f, size_t t0, size_t t1, float *tile) {
  for (size_t j = 0; j < t1 - t0; j++) tile[j] = 0.0f;
  for (int r = 0; r < f->ndecode; r++) { /* rank order: the same sum everywhere */
    const char *slot = f->base + (size_t)r * f->sb;
    size_t j = f->pos[r];
    for (; j < f->accepted; j++) { /* entries past these have not arrived: not even read */
      uint32_t idx = slot_index(slot, j);
      if (idx >= t1) break;
      tile[idx - t0] += slot_value(slot, f->k, j, f->fp16, f->scales[r]);
    }
    f->pos[r] = j;
  }
#ifdef SQ_SPARSE_AVX2
  if (f->stream && (t1 - t0) % 8 == 0 && ((uintptr_t)(f->dense + t0) & 31) == 0) {
    put_tile_stream(f->dense, t0, tile, t1 - t0);
    return;
  }
#endif
  put_tile(f->dense, t0, tile, t1 - t0);
}

void squall__topk_finish_run(squall_topk_finisher *f, size_t upto) {
  size_t end = upto < f->bound ? upto : f->bound;
  if (f->done >= end) return;
  const unsigned fp = squall__fp_default_begin(); /* the same bits on every rank */
  const char *mine = f->res ? f->base + (size_t)f->own * f->sb : NULL;
  const float my_scale = mine ? slot_scale(mine, f->k, f->fp16) : 1.0f;
  float tile[DECODE_TILE_MAX];
  for (size_t t0 = f->done, t1; t0 < end; t0 = t1) {
    size_t len = t0 == 0 && f->head ? f->head : f->span;
    t1 = f->n - t0 > len ? t0 + len : f->n;
    if (t1 > end) break; /* whole tiles only, until the last */
    /* g[t0, t1) is read before dense, which may be g, is written */
    if (f->res) commit_tile(f->g, f->res, mine, f->accepted, f->fp16, my_scale, t0, t1, &f->my_pos, f->avx2);
    if (f->ndecode == f->nranks && f->dense) decode_tile(f, t0, t1, tile);
    f->done = t1;
  }
#ifdef SQ_SPARSE_AVX2
  if (f->stream) _mm_sfence(); /* the streamed stores are visible before the caller reads */
#endif
  squall__fp_default_end(fp);
}

int squall__topk_finish(const float *g, float *res, size_t n, const void *slots, int nranks, int own,
                        size_t k, squallValueType_t values, float *dense) {
  squall_topk_finisher f;
  if (squall__topk_finish_begin(&f, g, res, n, slots, nranks, own, k, values, dense) != 0) {
    if (dense && n > 0) memset(dense, 0, n * sizeof *dense);
    return -1;
  }
  /* Everything is validated before the first write: a corrupt payload
   * leaves the residual as it was and a zeroed result. */
  if (squall__topk_finish_accept(&f, k) != 0) return -1;
  squall__topk_finish_run(&f, n);
  /* Many ranks: the residual is done (g read), now the plain decoder. */
  if (dense && f.ndecode != nranks) return squall__sparse_decode(slots, nranks, k, values, dense, n);
  return 0;
}

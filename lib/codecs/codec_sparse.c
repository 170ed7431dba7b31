/*
 * codec_sparse.c - the host sparse decoder: sums the top-k slots of every
 * rank into a dense vector, in rank order, so that every rank computes the
 * same bits. The CUDA twin (cuda/sparse.cu) adds in the same order and
 * decodes fp16 values with the same codec_math.h function.
 *
 * Only codec.h and libc here: the standalone GPU self-test build compiles
 * this file without config.h or the logger.
 */
#include <string.h>

#include "codecs/codec.h"

/* A slot comes from the network: its indices must stay inside dense and
 * ascend strictly (which also rules out duplicates). */
static int slot_valid(const char *slot, size_t k, size_t n) {
  uint32_t prev = 0;
  for (size_t j = 0; j < k; j++) {
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
  for (int r = 0; ok && r < nranks; r++) ok = slot_valid(base + (size_t)r * sb, k, n);
  if (n > 0) memset(dense, 0, n * sizeof *dense);
  if (!ok) return -1;

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
  return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_codec_unaligned.c - the host codecs on buffers that are not aligned
 * for their element type. A user's MPI buffer can start anywhere (a numpy
 * view at a byte offset, a packed struct), and MPI_Allreduce takes void *;
 * so every host codec must give the same bytes at offsets 1, 2 and 3 as on
 * aligned memory, and must not load a float or uint16_t through a
 * misaligned pointer (undefined behaviour: the ASan+UBSan build of
 * tools/sanitize.sh traps on it, -fsanitize=alignment).
 * Plain C, no Check: it must run wherever the codecs build.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"

#define N 37 /* not a multiple of 8: vector paths and scalar tails both run */
#define K 5

static int failures;

static void expect_same(const void *a, const void *b, size_t bytes, const char *what, int offset) {
  if (memcmp(a, b, bytes) != 0) {
    printf("FAIL: %s at offset %d differs from the aligned result\n", what, offset);
    failures++;
  }
}

/* A block whose payload starts offset bytes past a 64-byte boundary. */
typedef struct {
  unsigned char *base;
  void *p;
} block;

static block at(int offset, size_t bytes) {
  block b;
  b.base = aligned_alloc(64, (bytes + 64 + 63) / 64 * 64);
  if (b.base == NULL) abort();
  b.p = b.base + offset;
  return b;
}

static void fill(float *f, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    f[i] = ((float)(seed >> 9) / (float)(1u << 23) - 0.5f) * (float)(1 + i % 7);
  }
}

static void half_codecs(sq_half_kind kind, const char *name, int off) {
  float g[N], res[N], res_u_copy[N];
  uint16_t out[N], sum[N];
  fill(g, N, 1);
  fill(res, N, 2);
  char what[64];

  block bg = at(off, sizeof g), br = at(off, sizeof res), bo = at(off, sizeof out), bs = at(off, sizeof sum);
  memcpy(bg.p, g, sizeof g);
  memcpy(br.p, res, sizeof res);

  float m = squall__absmax(g, res, N), mu = squall__absmax(bg.p, br.p, N);
  snprintf(what, sizeof what, "%s absmax", name);
  expect_same(&m, &mu, sizeof m, what, off);

  float scale = sq_pow2_scale(m, kind == SQ_HALF_FP16 ? SQ_F16_MAX : SQ_BF16_MAX);
  squall__half_encode(kind, g, res, out, N, scale);
  squall__half_encode(kind, bg.p, br.p, bo.p, N, scale);
  snprintf(what, sizeof what, "%s encode codes", name);
  expect_same(out, bo.p, sizeof out, what, off);
  memcpy(res_u_copy, br.p, sizeof res_u_copy);
  snprintf(what, sizeof what, "%s encode residual", name);
  expect_same(res, res_u_copy, sizeof res, what, off);

  float dec[N];
  block bd = at(off, sizeof dec);
  for (int acc = 0; acc < 2; acc++) {
    fill(dec, N, 3);
    memcpy(bd.p, dec, sizeof dec);
    squall__half_decode(kind, out, dec, N, scale, acc);
    squall__half_decode(kind, bo.p, bd.p, N, scale, acc);
    snprintf(what, sizeof what, "%s decode%s", name, acc ? " (accumulate)" : "");
    expect_same(dec, bd.p, sizeof dec, what, off);
  }

  memcpy(sum, out, sizeof sum);
  memcpy(bs.p, out, sizeof sum);
  squall__half_sum(kind, out, sum, N);
  squall__half_sum(kind, bo.p, bs.p, N);
  snprintf(what, sizeof what, "%s sum", name);
  expect_same(sum, bs.p, sizeof sum, what, off);

  free(bg.base);
  free(br.base);
  free(bo.base);
  free(bs.base);
  free(bd.base);
}

static void topk_and_sparse(squallValueType_t vt, const char *name, int off) {
  float g[N], res[N];
  fill(g, N, 4);
  fill(res, N, 5);
  size_t sb = squall__topk_slot_bytes(K, vt);
  unsigned char *slot = calloc(1, 2 * sb);
  void *ws = malloc(squall__topk_workspace_bytes(N));
  block bg = at(off, sizeof g), br = at(off, sizeof res), bslot = at(off, 2 * sb);
  memcpy(bg.p, g, sizeof g);
  memcpy(br.p, res, sizeof res);
  char what[64];

  if (squall__topk_encode(g, res, N, K, vt, 8.0f, slot, ws) != 0 ||
      squall__topk_encode(bg.p, br.p, N, K, vt, 8.0f, bslot.p, ws) != 0) {
    printf("FAIL: %s topk encode refused k=%d n=%d\n", name, K, N);
    failures++;
  }
  snprintf(what, sizeof what, "%s topk slot", name);
  expect_same(slot, bslot.p, sb, what, off);
  snprintf(what, sizeof what, "%s topk residual", name);
  expect_same(res, br.p, sizeof res, what, off);

  /* Two ranks' slots: the same slot twice. */
  memcpy(slot + sb, slot, sb);
  memcpy((unsigned char *)bslot.p + sb, slot, sb);
  float dense[N];
  block bd = at(off, sizeof dense);
  if (squall__sparse_decode(slot, 2, K, vt, dense, N) != 0 ||
      squall__sparse_decode(bslot.p, 2, K, vt, bd.p, N) != 0) {
    printf("FAIL: %s sparse decode refused a valid slot\n", name);
    failures++;
  }
  snprintf(what, sizeof what, "%s sparse decode", name);
  expect_same(dense, bd.p, sizeof dense, what, off);

  free(slot);
  free(ws);
  free(bg.base);
  free(br.base);
  free(bslot.base);
  free(bd.base);
}

int main(void) {
  for (int off = 1; off <= 3; off++) {
    half_codecs(SQ_HALF_FP16, "fp16", off);
    half_codecs(SQ_HALF_BF16, "bf16", off);
    topk_and_sparse(squallValueFp32, "topk fp32", off);
    topk_and_sparse(squallValueFp16, "topk fp16", off);
  }
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("host codecs at offsets 1, 2, 3: same bytes as aligned\n");
  return 0;
}

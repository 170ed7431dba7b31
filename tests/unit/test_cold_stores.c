/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_cold_stores.c - the decoders' cold outputs (cold_stores.c): the
 * streamed stores give the same bytes as the plain ones at every alignment
 * and length, for every 16-bit code and the quantised codecs; and the
 * learning ends, per family, after its trials and only then, whatever
 * threads take part.
 * Plain C, no Check: it must run wherever the codecs build.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"

static int failures;

#define FAIL(...)                 \
  do {                            \
    printf("FAIL: " __VA_ARGS__); \
    printf("\n");                 \
    failures++;                   \
  } while (0)

static void fill(float *f, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    f[i] = ((float)(seed >> 9) / (float)(1u << 23) - 0.5f) * (float)(1 + i % 7);
  }
}

/* Output starting `off` bytes past a 64-byte boundary: the streamed loops
 * must peel the elements before a 32-byte boundary (a float is 4-byte
 * aligned, so every offset is a multiple of 4). */
static unsigned char *out_at(unsigned char **base, size_t bytes, size_t off) {
  *base = aligned_alloc(64, (bytes + off + 127) / 64 * 64);
  if (*base == NULL) abort();
  memset(*base, 0xa5, (bytes + off + 127) / 64 * 64);
  return *base + off;
}

static const size_t offsets[] = {0, 4, 8, 12, 16, 20, 24, 28, 36, 44, 60};
static const size_t lengths[] = {0, 1, 3, 7, 8, 31, 32, 33, 100, 1029, 65536 + 45};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Every 16-bit code (NaN, Inf, subnormal, zero of both signs) decoded cold
 * with each kind of store, against the plain decoder. */
static void half_same_bits(sq_half_kind kind, const char *name) {
  enum { CODES = 65536 + 45 };
  uint16_t *codes = malloc(CODES * sizeof *codes);
  float *want = malloc(CODES * sizeof *want);
  for (size_t i = 0; i < CODES; i++) codes[i] = (uint16_t)(i * 40503u); /* every code, shuffled */
  const float scales[] = {1.0f, 0x1p-10f, 0x1p20f, 3.0f /* no exact reciprocal: the scalar path */};
  for (size_t s = 0; s < COUNT(scales); s++)
    for (int kindof = SQ_STORE_PLAIN; kindof <= SQ_STORE_STREAM; kindof++) {
      squall__cold_stores_force(kindof);
      for (size_t o = 0; o < COUNT(offsets); o++)
        for (size_t l = 0; l < COUNT(lengths); l++) {
          size_t n = lengths[l], bytes = n * sizeof(float);
          unsigned char *base, *got = out_at(&base, bytes, offsets[o]);
          squall__half_decode(kind, codes, want, n, scales[s], 0);
          squall__half_decode_cold(kind, codes, (float *)got, n, scales[s]);
          if (memcmp(want, got, bytes) != 0)
            FAIL("%s decode_cold (%s stores), scale %a, offset %zu, n %zu: bytes differ from the plain decode",
                 name, kindof ? "streamed" : "plain", (double)scales[s], offsets[o], n);
          for (size_t i = 0; i < 64; i++)
            if (got[bytes + i] != 0xa5) {
              FAIL("%s decode_cold, offset %zu, n %zu: wrote past the end", name, offsets[o], n);
              break;
            }
          free(base);
        }
    }
  squall__cold_stores_force(-1);
  free(codes);
  free(want);
}

static void quant_same_bits(sq_quant_kind k, const char *name) {
  const size_t buckets[] = {512, 64, 2};
  for (size_t b = 0; b < COUNT(buckets); b++)
    for (size_t l = 0; l < COUNT(lengths); l++) {
      size_t n = lengths[l], bytes = n * sizeof(float);
      float *g = malloc(bytes + 4), *want = malloc(bytes + 4);
      uint8_t *codes = malloc(squall__quant_bytes(k, buckets[b], n) + 1);
      fill(g, n, 7);
      if (n > 10) g[5] = 1.0f / 0.0f; /* a bucket with a non-finite value */
      squall__quant_encode(k, buckets[b], g, NULL, codes, n);
      squall__quant_decode(k, buckets[b], codes, want, n, 0);
      for (int kindof = SQ_STORE_PLAIN; kindof <= SQ_STORE_STREAM; kindof++) {
        squall__cold_stores_force(kindof);
        for (size_t o = 0; o < COUNT(offsets); o++) {
          unsigned char *base, *got = out_at(&base, bytes, offsets[o]);
          squall__quant_decode_cold(k, buckets[b], codes, (float *)got, n);
          if (memcmp(want, got, bytes) != 0)
            FAIL("%s decode_cold (%s stores), bucket %zu, offset %zu, n %zu: bytes differ from the plain decode",
                 name, kindof ? "streamed" : "plain", buckets[b], offsets[o], n);
          if (got[bytes] != 0xa5) FAIL("%s decode_cold, offset %zu, n %zu: wrote past the end", name, offsets[o], n);
          free(base);
        }
      }
      squall__cold_stores_force(-1);
      free(g);
      free(want);
      free(codes);
    }
}

/* Decodes too short to time are no trials; the family learns after
 * exactly its trials, keeps what it learned, and the other family is
 * untouched. */
static void half_learns(void) {
  size_t n = SQ_COLD_TRIAL_ELEMS;
  uint16_t *codes = calloc(n, sizeof *codes);
  float *out = malloc(n * sizeof *out);
  if (squall__cold_stores_learned(SQ_COLD_HALF, NULL) != -1) FAIL("16-bit stores learned before any cold decode");
  for (int i = 0; i < 100; i++) squall__half_decode_cold(SQ_HALF_FP16, codes, out, n - 1, 1.0f);
  if (squall__cold_stores_learned(SQ_COLD_HALF, NULL) != -1) FAIL("decodes shorter than a trial were counted");
  /* decodes that cannot stream (the scalar path of a scale without an
   * exact reciprocal) are no trials */
  for (int i = 0; i < 20; i++) squall__half_decode_cold(SQ_HALF_FP16, codes, out, n, 3.0f);
  if (squall__cold_stores_learned(SQ_COLD_HALF, NULL) != -1) FAIL("decodes that cannot stream were counted");
  for (int i = 0; i < 2 * SQ_COLD_TRIALS_PER_KIND - 1; i++) {
    squall__half_decode_cold(SQ_HALF_BF16, codes, out, n, 1.0f);
    if (squall__cold_stores_learned(SQ_COLD_HALF, NULL) != -1) FAIL("16-bit stores learned after %d trials", i + 1);
  }
  squall__half_decode_cold(SQ_HALF_FP16, codes, out, n, 1.0f);
  double ns[2];
  int kind = squall__cold_stores_learned(SQ_COLD_HALF, ns);
  if (kind != SQ_STORE_PLAIN && kind != SQ_STORE_STREAM)
    FAIL("16-bit stores not learned after %d trials (%d)", 2 * SQ_COLD_TRIALS_PER_KIND, kind);
  else if (!(ns[0] > 0 && ns[1] > 0) || (kind == SQ_STORE_STREAM) != (ns[1] < ns[0] * (1.0 - SQ_COLD_MARGIN)))
    FAIL("learned %s from plain %g and streamed %g ns per element", kind ? "streamed" : "plain", ns[0], ns[1]);
  for (int i = 0; i < 20; i++) squall__half_decode_cold(SQ_HALF_FP16, codes, out, n, 1.0f);
  if (squall__cold_stores_learned(SQ_COLD_HALF, NULL) != kind) FAIL("the learned 16-bit stores changed");
  if (squall__cold_stores_learned(SQ_COLD_QUANT, NULL) != -1) FAIL("16-bit trials taught the quantised decoders");
  free(codes);
  free(out);
}

/* Threads that decode at once share the trials: the family learns, and
 * every thread's output is right meanwhile. */
enum { THREADS = 4,
       ROUNDS = 6,
       TN = SQ_COLD_TRIAL_ELEMS + 17 };
static uint8_t *shared_codes;
static float *shared_want;

static void *decoder(void *arg) {
  float *out = aligned_alloc(64, (TN * sizeof(float) + 63) / 64 * 64); /* where the quantised decoder streams */
  for (int r = 0; r < ROUNDS; r++) {
    squall__quant_decode_cold(SQ_QUANT_INT8, 512, shared_codes, out, TN);
    if (memcmp(out, shared_want, TN * sizeof *out) != 0) *(int *)arg = 1;
  }
  free(out);
  return NULL;
}

static void quant_learns_across_threads(void) {
  float *g = malloc(TN * sizeof *g);
  shared_want = malloc(TN * sizeof *shared_want);
  shared_codes = malloc(squall__quant_bytes(SQ_QUANT_INT8, 512, TN));
  fill(g, TN, 11);
  squall__quant_encode(SQ_QUANT_INT8, 512, g, NULL, shared_codes, TN);
  squall__quant_decode(SQ_QUANT_INT8, 512, shared_codes, shared_want, TN, 0);
  pthread_t t[THREADS];
  int wrong[THREADS] = {0};
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, decoder, &wrong[i]) != 0) abort();
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    if (wrong[i]) FAIL("thread %d: a concurrent cold int8 decode differs from the plain one", i);
  }
  int kind = squall__cold_stores_learned(SQ_COLD_QUANT, NULL);
  if (kind != SQ_STORE_PLAIN && kind != SQ_STORE_STREAM)
    FAIL("quantised stores not learned after %d concurrent decodes", THREADS * ROUNDS);
  free(g);
  free(shared_want);
  free(shared_codes);
}

int main(void) {
  half_learns(); /* first: nothing may have decoded cold before */
  quant_learns_across_threads();
  half_same_bits(SQ_HALF_FP16, "fp16");
  half_same_bits(SQ_HALF_BF16, "bf16");
  quant_same_bits(SQ_QUANT_INT8, "int8");
  quant_same_bits(SQ_QUANT_INT4, "int4");
  quant_same_bits(SQ_QUANT_FP8, "fp8");
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("cold outputs: streamed and plain stores give the same bytes; the learning ends after its trials\n");
  return 0;
}

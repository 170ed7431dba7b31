/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fuzz.h - what the fuzz targets share: the libFuzzer entry point, a check
 * that stops the run with a message (libFuzzer keeps the input as a crash;
 * the replay driver fails the test), and a reader that takes the
 * parameters a target needs from the front of its input.
 */
#ifndef SQUALL_FUZZ_H
#define SQUALL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant, checked in every build (never compiled out like assert). */
#define FUZZ_CHECK(cond, ...)                                                       \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: invariant '%s' broken: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                 \
      fputc('\n', stderr);                                                          \
      abort();                                                                      \
    }                                                                               \
  } while (0)

/* Reads little-endian fields from the front of the input; past its end
 * every field reads as zero, so that every input means something. */
typedef struct {
  const uint8_t *p;
  size_t left;
} fuzz_reader;

static inline uint32_t fuzz_take(fuzz_reader *r, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; i++) {
    uint32_t b = 0;
    if (r->left) {
      b = *r->p++;
      r->left--;
    }
    v |= b << (8 * i);
  }
  return v;
}

/* A heap copy of exactly size bytes (at least 1 allocated), so that the
 * address sanitizer sees any read past the end of what the target got. */
static inline void *fuzz_dup(const void *data, size_t size) {
  void *p = malloc(size ? size : 1);
  if (p == NULL) abort();
  if (size) memcpy(p, data, size);
  return p;
}

static inline void *fuzz_alloc(size_t size) {
  void *p = calloc(1, size ? size : 1);
  if (p == NULL) abort();
  return p;
}

#endif

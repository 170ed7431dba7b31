/* residual.c - the per-communicator tensor table (a small hash map). */
#include "common/internal.h"

#include <stdlib.h>

#include "engine/residual.h"

#define NBUCKETS 256

struct squall_residuals {
  const squall_kernels *kernels;
  squall_tensor *buckets[NBUCKETS];
};

static size_t process_bytes; /* atomically updated */

squall_residuals *squall__residuals_create(const squall_kernels *kernels) {
  squall_residuals *s = calloc(1, sizeof *s);
  if (s) s->kernels = kernels;
  return s;
}

void squall__residuals_free(squall_residuals *s) {
  if (s == NULL) return;
  for (int b = 0; b < NBUCKETS; b++) {
    squall_tensor *t = s->buckets[b];
    while (t) {
      squall_tensor *next = t->next;
      if (t->residual) {
        s->kernels->free(s->kernels->ctx, t->residual);
        __atomic_sub_fetch(&process_bytes, t->count * sizeof(float), __ATOMIC_RELAXED);
      }
      free(t);
      t = next;
    }
  }
  free(s);
}

static unsigned bucket_of(const void *key, size_t count, int dtype) {
  uint64_t h = (uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15ull;
  h ^= (uint64_t)count * 0xc2b2ae3d27d4eb4full + (uint64_t)dtype;
  return (unsigned)(h >> 56) % NBUCKETS;
}

squall_tensor *squall__residuals_find(squall_residuals *s, const void *key, size_t count, int dtype) {
  for (squall_tensor *t = s->buckets[bucket_of(key, count, dtype)]; t; t = t->next)
    if (t->key == key && t->count == count && t->dtype == dtype) return t;
  return NULL;
}

squall_tensor *squall__residuals_tensor(squall_residuals *s, const void *key, size_t count, int dtype) {
  squall_tensor *t = squall__residuals_find(s, key, count, dtype);
  if (t) return t;
  unsigned b = bucket_of(key, count, dtype);
  t = calloc(1, sizeof *t);
  if (t == NULL) return NULL;
  t->key = key;
  t->count = count;
  t->dtype = dtype;
  t->next = s->buckets[b];
  s->buckets[b] = t;
  return t;
}

float *squall__residuals_get(squall_residuals *s, squall_tensor *t, size_t max_bytes) {
  if (t->residual || t->no_residual) return t->residual;
  size_t bytes = t->count * sizeof(float);
  size_t now = __atomic_add_fetch(&process_bytes, bytes, __ATOMIC_RELAXED);
  if (max_bytes && now > max_bytes) {
    __atomic_sub_fetch(&process_bytes, bytes, __ATOMIC_RELAXED);
    t->no_residual = 1;
    SQ_WARN_ONCE("SQUALL_EF_MAX_BYTES=%zu reached: tensors seen from now on (first: %zu elements) "
                 "run without error feedback",
                 max_bytes, t->count);
    return NULL;
  }
  t->residual = s->kernels->alloc(s->kernels->ctx, bytes);
  if (t->residual == NULL) {
    __atomic_sub_fetch(&process_bytes, bytes, __ATOMIC_RELAXED);
    t->no_residual = 1;
    SQ_WARN_ONCE("out of memory for a %zu-byte residual: running without error feedback", bytes);
    return NULL;
  }
  return t->residual; /* kernels->alloc returns zeroed memory: zero on first sight */
}

squallResult_t squall__residuals_reset(squall_residuals *s) {
  if (s == NULL) return squallSuccess;
  for (int b = 0; b < NBUCKETS; b++)
    for (squall_tensor *t = s->buckets[b]; t; t = t->next) {
      if (t->residual)
        SQ_FORWARD_IF_ERROR(s->kernels->zero(s->kernels->ctx, t->residual, t->count * sizeof(float)));
    }
  return squallSuccess;
}

size_t squall__residuals_process_bytes(void) {
  return __atomic_load_n(&process_bytes, __ATOMIC_RELAXED);
}

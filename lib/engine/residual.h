/*
 * residual.h - per-tensor state of one communicator: the error-feedback
 * residual and the call count (for warm-up). A tensor is identified by
 * (send pointer, count, type), within the communicator that owns the store.
 * Residuals are zero on first sight; memory is charged against the
 * process-wide SQUALL_EF_MAX_BYTES cap.
 */
#ifndef SQUALL_RESIDUAL_H
#define SQUALL_RESIDUAL_H

#include <stddef.h>
#include <stdint.h>
#include "engine/kernels.h"

typedef struct squall_tensor {
  const void *key;
  size_t count;
  int dtype;
  uint64_t calls;  /* eligible calls seen */
  float *residual; /* count floats in the kernels' memory, or NULL */
  int no_residual; /* the cap refused one: run without error feedback */
  struct squall_tensor *next;
} squall_tensor;

typedef struct squall_residuals squall_residuals;

/* The store allocates through kernels (host or device memory). */
squall_residuals *squall__residuals_create(const squall_kernels *kernels);
/* Frees every residual; accepts NULL. */
void squall__residuals_free(squall_residuals *store);

/* The tensor's entry, created on first sight (NULL only when out of memory). */
squall_tensor *squall__residuals_tensor(squall_residuals *store, const void *key, size_t count,
                                        int dtype);

/* The tensor's entry if it exists (never creates). */
squall_tensor *squall__residuals_find(squall_residuals *store, const void *key, size_t count,
                                      int dtype);

/* The tensor's residual, allocated and zeroed on first use; NULL when the
 * cap (max_bytes, 0 = unlimited) refuses it (warned once per process). */
float *squall__residuals_get(squall_residuals *store, squall_tensor *t, size_t max_bytes);

/* Zeroes every residual of the store (keeps the memory and warm-up counts). */
squallResult_t squall__residuals_reset(squall_residuals *store);

/* Bytes held by residuals in this process. */
size_t squall__residuals_process_bytes(void);

#endif

/*
 * residual.h - per-shape state of one communicator: error-feedback
 * residuals and the call counts that drive warm-up.
 *
 * Identity. A residual belongs to a slot of one shape (count, dtype). The
 * buffers' addresses, send and receive together (the same address for an
 * in-place call), are only a hint:
 *   - an address pair seen before finds its slot (a model whose tensors
 *     live at stable addresses gets one residual per tensor; so do tensors
 *     sent from one staging buffer or from temporaries the allocator puts
 *     at one address, as long as each has its own receive buffer);
 *   - a pair not seen before inherits the residual of a slot of its shape
 *     that was not used within the last round (the number of lookups of
 *     the shape after which known pairs come back): one with the same send
 *     buffer if there is one (a tensor whose output is allocated afresh),
 *     else the least recently used, so a loop that hands a freshly
 *     allocated array each step (mpi4py/NumPy, JAX) carries its residual
 *     from step to step instead of starting from zero, and stale residuals
 *     are recycled;
 *   - empty slots are dropped beyond a fixed number per shape,
 * so an allocate-each-step loop uses bounded memory. Moving a residual
 * never loses mass: the sum of all residuals is what was not yet sent,
 * whichever slot holds it. The first step of a model with several tensors
 * of one shape moves a residual from one to the next once, before their
 * addresses have come back. Tensors that share both addresses (a staging
 * buffer used in place) cannot be told apart and share one residual.
 *
 * Warm-up counts calls per shape, not per address: every rank makes the
 * same calls with the same shapes, so every rank counts alike whatever its
 * allocator does.
 *
 * Residual memory is charged against the process-wide SQUALL_EF_MAX_BYTES.
 */
#ifndef SQUALL_RESIDUAL_H
#define SQUALL_RESIDUAL_H

#include <stddef.h>
#include <stdint.h>
#include "engine/kernels.h"

/* The addresses a call's tensor is known by (see Identity above). */
typedef struct {
  const void *send, *recv;
} squall_tensor_key;

typedef struct squall_tensor {
  squall_tensor_key key; /* the addresses this slot answers to */
  size_t count;
  int dtype;
  float *residual;  /* count floats in the kernels' memory; NULL means zero */
  int no_residual;  /* the cap refused one: run without error feedback */
  float last_scale; /* the 16-bit scale of its last call (host kernels); 0: none yet */
  uint64_t hits;    /* times key came back after the first sight */
  uint64_t last_use; /* the shape's lookup clock at its last use */
  struct squall_tensor *next; /* slots of the same shape */
} squall_tensor;

typedef struct squall_residuals squall_residuals;

/* The store allocates through kernels (host or device memory). */
squall_residuals *squall__residuals_create(const squall_kernels *kernels);
/* Frees every residual; accepts NULL. */
void squall__residuals_free(squall_residuals *store);

/* Makes sure the shape is known (0), so that counting its calls cannot
 * fail later; -1 when out of memory. */
int squall__residuals_add_shape(squall_residuals *store, size_t count, int dtype);

/* Counts one eligible call of this shape and returns how many came before
 * it (the warm-up ordinal); UINT64_MAX when out of memory. */
uint64_t squall__residuals_count_call(squall_residuals *store, size_t count, int dtype);

/* The slot for a call with these buffers (see the identity rules above),
 * created or inherited as needed; NULL only when out of memory. */
squall_tensor *squall__residuals_slot(squall_residuals *store, squall_tensor_key key, size_t count,
                                      int dtype);

/* The slot bound to key if there is one (never creates or moves); with
 * key.recv NULL, the most recently used slot sent from key.send. */
squall_tensor *squall__residuals_find(squall_residuals *store, squall_tensor_key key, size_t count,
                                      int dtype);

/* Makes sure t holds residual memory (zeroed, enqueued on stream).
 * squallSuccess with t->residual set, or with t->no_residual set when the
 * cap (max_bytes, 0 = unlimited) refuses it (warned once per process);
 * squallSystemError when the allocation fails. */
squallResult_t squall__residuals_ensure(squall_residuals *store, squall_tensor *t,
                                        size_t max_bytes, void *stream);

/* Zeroes every residual of the store (keeps the memory and the counts). */
squallResult_t squall__residuals_reset(squall_residuals *store, void *stream);

/* Bytes held by residuals in this process. */
size_t squall__residuals_process_bytes(void);

#endif

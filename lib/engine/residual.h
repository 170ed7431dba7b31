/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * residual.h - per-shape state of one communicator: error-feedback
 * residuals and the call counts that drive warm-up.
 *
 * Identity. A residual belongs to a slot of one shape (count, kind). The
 * buffers' addresses, send and receive together (the same address for an
 * in-place call), are only a hint:
 *   - a pair seen before finds its slot: a model whose tensors live at
 *     stable addresses gets one residual per tensor, and so do tensors sent
 *     from one staging buffer (or NumPy temporaries the allocator puts at
 *     one address) each into an output of its own at a stable address;
 *   - a pair not seen before that shares a recurring buffer (one already in
 *     two slots: a tensor's stable send or output) with some slots is that
 *     tensor with a new other buffer: it takes the residual of the least
 *     recently used such slot whose tensor may have moved on (its pair
 *     never came back, or it has missed its own return period twice);
 *     where none can give one it starts afresh, never taking an unrelated
 *     tensor's. So an output (or input) allocated afresh each step carries
 *     its tensor's residual however other tensors of the shape come and go,
 *     and a temporary shared by several tensors (a buffer seen once says
 *     little about whose it is) does not pass residuals between them;
 *   - any other new pair (both buffers allocated afresh, as mpi4py/NumPy or
 *     JAX loops do) inherits the least recently used residual of the shape
 *     that may be gone and was not used within the last round (the age at
 *     which known pairs come back), so such a loop carries its residual
 *     from step to step instead of starting from zero, and stale residuals
 *     are recycled;
 *   - a residual a captured CUDA graph uses is never moved or dropped;
 *   - a tensor its caller keys (exact) is its key alone: it starts afresh
 *     on its first call and keeps its residual, whatever other tensors of
 *     the shape do (two of one size, a first call that passed through);
 *   - a call passed through without a lookup (the cost model's settled
 *     sizes) still marks its pair as used (squall__residuals_touch), so a
 *     live tensor whose calls pass through does not look gone;
 *   - empty slots are dropped beyond a fixed number per shape,
 * so an allocate-each-step loop uses bounded memory. Moving a residual
 * never loses mass: the sum of all residuals is what was not yet sent,
 * whichever slot holds it.
 * What addresses cannot tell: on the first step of a model with several
 * tensors of one shape a residual can move from one to the next once,
 * before their pairs have come back (with both buffers fresh every step
 * there is nothing to go by, and residuals keep moving between such
 * tensors, or between one such and a tensor of the shape that comes back
 * only after the loop's churn has trimmed its slot, MAX_EMPTY steps or
 * more; beside one that comes back every P steps such a loop keeps up to
 * about P residuals, the round being P); one tensor whose output
 * alternates between K buffers keeps K residuals, each carried to the next
 * call into its buffer, as K tensors sharing a staging buffer must; and
 * tensors that share both addresses (a staging buffer used in place) share
 * one.
 *
 * Warm-up counts calls per shape, not per address: every rank makes the
 * same calls with the same shapes, so every rank counts alike whatever its
 * allocator does.
 *
 * Residual memory is charged against the process-wide SQUALL_EF_MAX_BYTES,
 * and so is a shape's spare (squall__residuals_spare).
 * At most SQ_RESIDUAL_MAX_SHAPES shapes of one store keep residuals: the
 * least recently used shape's are dropped beyond that (a program whose
 * sizes vary would otherwise keep one per size it ever saw).
 */
#ifndef SQUALL_RESIDUAL_H
#define SQUALL_RESIDUAL_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/kernels.h"

#define SQ_RESIDUAL_MAX_SHAPES 256

/* The addresses a call's tensor is known by (see Identity above), or,
 * exact, the key its caller gave it (squallCollAllReduce's key, a DDP
 * bucket's index): the tensor's identity itself, so its slot never takes
 * another's residual nor gives its own away. */
typedef struct {
  const void *send, *recv;
  int exact;
} squall_tensor_key;

static inline int squall__tensor_key_eq(squall_tensor_key a, squall_tensor_key b) {
  return a.send == b.send && a.recv == b.recv && a.exact == b.exact;
}

typedef struct squall_tensor {
  squall_tensor_key key; /* the addresses this slot answers to */
  size_t count;
  uint64_t kind;              /* with count, the shape (see squall__residuals_add_shape) */
  float *residual;            /* count floats in the kernels' memory; NULL means zero */
  int no_residual;            /* the cap refused one: run without error feedback */
  float last_scale;           /* the 16-bit scale of its last call (host kernels); 0: none yet */
  uint64_t hits;              /* times key came back after the first sight */
  uint64_t last_use;          /* the shape's clock at its last use */
  uint64_t period;            /* the shape's clock between its last two uses (hits > 0) */
  int pinned;                 /* a captured CUDA graph uses the residual: never moved or dropped */
  int unsent;                 /* a compressed call ran since the residual was last emptied: it may hold mass */
  struct squall_tensor *next; /* slots of the same shape */
} squall_tensor;

typedef struct squall_residuals squall_residuals;

/* The store allocates through kernels (host or device memory). */
squall_residuals *squall__residuals_create(const squall_kernels *kernels);
/* Frees every residual; accepts NULL. */
void squall__residuals_free(squall_residuals *store);

/* A shape is a count of residual floats and a kind that tells tensors of
 * that count apart: the element type, and for the shard of a two-level
 * call also the whole tensor's count (plan.c, squall__residual_kind).
 * Makes sure the shape is known (0), so that counting its calls cannot
 * fail later; -1 when out of memory. */
int squall__residuals_add_shape(squall_residuals *store, size_t count, uint64_t kind);

/* Counts one eligible call of this shape and returns how many came before
 * it (the warm-up ordinal); UINT64_MAX when out of memory. */
uint64_t squall__residuals_count_call(squall_residuals *store, size_t count, uint64_t kind);

/* The slot for a call with these buffers (see the identity rules above),
 * created or inherited as needed; NULL only when out of memory. */
squall_tensor *squall__residuals_slot(squall_residuals *store, squall_tensor_key key, size_t count, uint64_t kind);

/* The slot bound to key if there is one (never creates or moves). */
squall_tensor *squall__residuals_find(squall_residuals *store, squall_tensor_key key, size_t count, uint64_t kind);

/* The most recently used slot sent from send, whatever its receive
 * buffer (never creates or moves); NULL when there is none. */
squall_tensor *squall__residuals_latest_from(squall_residuals *store, const void *send, size_t count, uint64_t kind);

/* For a call that passes through carrying its tensor's residual: where
 * some slot of the shape holds a residual, the slot the identity rules
 * give key (squall__residuals_slot: it may take a residual that moved
 * with the tensor to new buffers); otherwise NULL, and key's slot, if it
 * has one, is marked as used (squall__residuals_touch). Never creates a
 * shape. */
squall_tensor *squall__residuals_carrier(squall_residuals *store, squall_tensor_key key, size_t count,
                                         uint64_t kind);

/* Marks key's slot, if it has one, as used by a call that passed through
 * without looking it up (never creates, moves or allocates). */
void squall__residuals_touch(squall_residuals *store, squall_tensor_key key, size_t count, uint64_t kind);

/* Makes sure t holds residual memory (zeroed, enqueued on stream).
 * squallSuccess with t->residual set, or with t->no_residual set when the
 * cap (max_bytes, 0 = unlimited) refuses it even without the store's
 * spares, which it drops first (warned once per process);
 * squallSystemError when the allocation fails. */
squallResult_t squall__residuals_ensure(squall_residuals *store, squall_tensor *t,
                                        size_t max_bytes, void *stream);

/* The shape's spare: count floats, contents unspecified, into which an
 * encoder writes t's next residual while t's own stays as it was, so that
 * a failure has nothing to restore and success costs no backup copy
 * (squall__residuals_take_spare then swaps it in). One per shape, shared
 * by its slots, charged against max_bytes like a residual, but second to
 * residuals: where the cap would refuse a residual, the store's spares
 * are dropped to make room (squall__residuals_ensure). NULL where t has
 * no residual or a captured graph uses it (it must not move), where the
 * cap refuses one or memory is short: the caller backs up instead.
 * *created: allocated by this call (its pages not yet touched). */
float *squall__residuals_spare(squall_residuals *store, squall_tensor *t, size_t max_bytes, void *stream,
                               int *created);

/* After a call that wrote t's residual into the spare succeeded: the spare
 * becomes t's residual and t's old buffer the shape's spare. -1 when the
 * shape has no spare (nothing changes). */
int squall__residuals_take_spare(squall_residuals *store, squall_tensor *t);

/* Zeroes every residual of the store (keeps the memory and the counts). */
squallResult_t squall__residuals_reset(squall_residuals *store, void *stream);

/* Bytes held by residuals in this process. */
size_t squall__residuals_process_bytes(void);

#endif

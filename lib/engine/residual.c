/* SPDX-License-Identifier: BSD-3-Clause */
/* residual.c - residual slots grouped by shape (see residual.h for the
 * identity rules). Shapes are few, slots per shape are as many as the
 * model has tensors of that shape: linear lists are enough. */
#include "common/internal.h"

#include <stdlib.h>

#include "engine/residual.h"

/* Empty slots (addresses without a residual) kept per shape: enough to
 * remember the tensors of a large model, small enough to stay bounded. */
#define MAX_EMPTY 64

typedef struct shape {
  size_t count;
  uint64_t kind;
  uint64_t calls;    /* eligible calls (warm-up) */
  uint64_t clock;    /* slot lookups and touches: the unit of a slot's age */
  uint64_t round;    /* the age at which the last known pair came back */
  uint64_t last_use; /* the store's clock at its last lookup or touch */
  float *spare;      /* count floats an encoder writes a slot's next residual into (squall__residuals_spare) */
  squall_tensor *slots;
  struct shape *next;
} shape;

struct squall_residuals {
  const squall_kernels *kernels;
  shape *shapes;
  uint64_t clock; /* lookups and touches of any shape: the unit of a shape's age */
};

static size_t process_bytes; /* atomically updated */

squall_residuals *squall__residuals_create(const squall_kernels *kernels) {
  squall_residuals *s = calloc(1, sizeof *s);
  if (s) s->kernels = kernels;
  return s;
}

static void release(squall_residuals *s, squall_tensor *t) {
  if (t->residual == NULL) return;
  s->kernels->free(NULL, t->residual);
  __atomic_sub_fetch(&process_bytes, t->count * sizeof(float), __ATOMIC_RELAXED);
  t->residual = NULL;
  t->unsent = 0;
}

static void release_spare(squall_residuals *s, shape *sh) {
  if (sh->spare == NULL) return;
  s->kernels->free(NULL, sh->spare);
  __atomic_sub_fetch(&process_bytes, sh->count * sizeof(float), __ATOMIC_RELAXED);
  sh->spare = NULL;
}

void squall__residuals_free(squall_residuals *s) {
  if (s == NULL) return;
  for (shape *sh = s->shapes; sh;) {
    release_spare(s, sh);
    for (squall_tensor *t = sh->slots; t;) {
      squall_tensor *next = t->next;
      release(s, t);
      free(t);
      t = next;
    }
    shape *next = sh->next;
    free(sh);
    sh = next;
  }
  free(s);
}

static shape *shape_of(squall_residuals *s, size_t count, uint64_t kind, int create) {
  for (shape *sh = s->shapes; sh; sh = sh->next)
    if (sh->count == count && sh->kind == kind) return sh;
  if (!create) return NULL;
  shape *sh = calloc(1, sizeof *sh);
  if (sh == NULL) return NULL;
  sh->count = count;
  sh->kind = kind;
  sh->next = s->shapes;
  s->shapes = sh;
  return sh;
}

int squall__residuals_add_shape(squall_residuals *s, size_t count, uint64_t kind) {
  return shape_of(s, count, kind, 1) ? 0 : -1;
}

uint64_t squall__residuals_count_call(squall_residuals *s, size_t count, uint64_t kind) {
  shape *sh = shape_of(s, count, kind, 1);
  return sh ? sh->calls++ : UINT64_MAX;
}

squall_tensor *squall__residuals_find(squall_residuals *s, squall_tensor_key key, size_t count, uint64_t kind) {
  shape *sh = shape_of(s, count, kind, 0);
  for (squall_tensor *t = sh ? sh->slots : NULL; t; t = t->next)
    if (squall__tensor_key_eq(t->key, key)) return t;
  return NULL;
}

squall_tensor *squall__residuals_latest_from(squall_residuals *s, const void *send, size_t count, uint64_t kind) {
  shape *sh = shape_of(s, count, kind, 0);
  squall_tensor *latest = NULL;
  for (squall_tensor *t = sh ? sh->slots : NULL; t; t = t->next)
    if (t->key.send == send && (latest == NULL || t->last_use > latest->last_use)) latest = t;
  return latest;
}

/* Drops the least recently used empty slot while there are too many:
 * what an allocate-each-step loop leaves behind. */
static void trim(shape *sh) {
  for (;;) {
    int empty = 0;
    squall_tensor **victim = NULL;
    for (squall_tensor **pp = &sh->slots; *pp; pp = &(*pp)->next) {
      squall_tensor *t = *pp;
      if (t->residual) continue;
      empty++;
      if (victim == NULL || t->last_use < (*victim)->last_use) victim = pp;
    }
    if (empty <= MAX_EMPTY) return;
    squall_tensor *t = *victim;
    *victim = t->next;
    free(t);
  }
}

/* A use of slot t at clock now: it came back. */
static void used(shape *sh, squall_tensor *t, uint64_t now) {
  t->period = now - t->last_use;
  sh->round = t->period;
  t->hits++;
  t->last_use = now;
}

/* Whether t's tensor may be gone at clock now, by its own history: it has
 * missed its return period twice, or it never came back (a buffer of an
 * allocate-each-step loop, or a tensor seen once so far). */
static int may_be_gone(const squall_tensor *t, uint64_t now) {
  return t->hits == 0 || now - t->last_use > 2 * t->period;
}

/* Whether slot t may give its residual away at all: not while a captured
 * CUDA graph uses it (graph replays never come back through here). */
static int movable(const squall_tensor *t) { return t->residual && !t->pinned && !t->key.exact; }

/* The donor for a pair not seen before (see Identity in residual.h).
 *
 * Kin: a slot that shares with the pair a buffer that recurs, one found in
 * at least two slots of the shape already (a tensor's stable send or
 * output); a buffer seen once (a temporary, a staging buffer on its first
 * use) says little about whose it is. Kin is the tensor's own past: its
 * residual is taken where that tensor may have moved on, the least recently
 * used first, and where none can give one the tensor starts afresh rather
 * than take an unrelated tensor's.
 *
 * A pair with no kin takes the least recently used residual that may be
 * gone and is older than a round (the age at which known pairs come back),
 * so that a live tensor keeps its own. */
static squall_tensor *donor_for(shape *sh, squall_tensor_key key, uint64_t now) {
  int sends = 0, recvs = 0;
  for (squall_tensor *t = sh->slots; t; t = t->next) {
    sends += t->key.send == key.send;
    recvs += t->key.recv == key.recv;
  }
  squall_tensor *kin = NULL, *other = NULL;
  int has_kin = 0;
  for (squall_tensor *t = sh->slots; t; t = t->next) {
    int is_kin = (sends >= 2 && t->key.send == key.send) || (recvs >= 2 && t->key.recv == key.recv);
    int may_give = movable(t) && may_be_gone(t, now);
    if (is_kin) {
      has_kin = 1;
      if (may_give && (kin == NULL || t->last_use < kin->last_use)) kin = t;
    } else if (may_give && now - t->last_use > sh->round && (other == NULL || t->last_use < other->last_use)) {
      other = t;
    }
  }
  return has_kin ? kin : other;
}

/* A use of shape sh by key (a lookup or a touch): the clocks move on, and
 * key's slot, if it has one, came back (returned); *now: the shape's clock. */
static squall_tensor *use_of(squall_residuals *s, shape *sh, squall_tensor_key key, uint64_t *now) {
  *now = ++sh->clock;
  sh->last_use = ++s->clock;
  for (squall_tensor *t = sh->slots; t; t = t->next)
    if (squall__tensor_key_eq(t->key, key)) {
      used(sh, t, *now);
      return t;
    }
  return NULL;
}

squall_tensor *squall__residuals_slot(squall_residuals *s, squall_tensor_key key, size_t count, uint64_t kind) {
  shape *sh = shape_of(s, count, kind, 1);
  if (sh == NULL) return NULL;
  uint64_t now;
  squall_tensor *known = use_of(s, sh, key, &now);
  if (known) return known;
  squall_tensor *donor = key.exact ? NULL : donor_for(sh, key, now);
  squall_tensor *t = calloc(1, sizeof *t);
  if (t == NULL) return NULL;
  t->key = key;
  t->count = count;
  t->kind = kind;
  if (donor) { /* the residual moves with the tensor to its new buffers */
    t->residual = donor->residual;
    t->no_residual = donor->no_residual;
    t->last_scale = donor->last_scale;
    t->unsent = donor->unsent;
    donor->unsent = 0;
    donor->residual = NULL;
    donor->no_residual = 0;
  }
  t->last_use = now;
  t->next = sh->slots;
  sh->slots = t;
  trim(sh);
  return t;
}

static int holds(const shape *sh, int pinned_only);

squall_tensor *squall__residuals_carrier(squall_residuals *s, squall_tensor_key key, size_t count, uint64_t kind) {
  shape *sh = shape_of(s, count, kind, 0);
  if (sh && holds(sh, 0)) return squall__residuals_slot(s, key, count, kind);
  uint64_t now;
  if (sh) use_of(s, sh, key, &now); /* as squall__residuals_touch */
  return NULL;
}

void squall__residuals_touch(squall_residuals *s, squall_tensor_key key, size_t count, uint64_t kind) {
  shape *sh = shape_of(s, count, kind, 0);
  uint64_t now;
  if (sh) use_of(s, sh, key, &now);
}

/* Whether a slot of sh holds a residual (pinned_only: one a graph uses). */
static int holds(const shape *sh, int pinned_only) {
  for (const squall_tensor *t = sh->slots; t; t = t->next)
    if (t->residual && (t->pinned || !pinned_only)) return 1;
  return 0;
}

/* At most SQ_RESIDUAL_MAX_SHAPES shapes keep residuals: a program whose
 * sizes vary (a sequence length, a last short batch) would otherwise keep
 * one for every size it ever saw, and memory would grow without end. The
 * least recently used shape's go (a size that does not come back never
 * delivers its residual anyway), said once per process; never one that a
 * captured CUDA graph uses. */
static void limit_shapes(squall_residuals *s) {
  for (;;) {
    int held = 0;
    shape *lru = NULL;
    for (shape *sh = s->shapes; sh; sh = sh->next) {
      if (!holds(sh, 0)) continue;
      held++;
      if (!holds(sh, 1) && (lru == NULL || sh->last_use < lru->last_use)) lru = sh;
    }
    if (held <= SQ_RESIDUAL_MAX_SHAPES || lru == NULL) return;
    SQ_WARN_ONCE("more than %d tensor sizes with error-feedback residuals on one communicator: the least "
                 "recently used size's residuals are dropped, what they had not yet sent with them (first: "
                 "%zu elements); a program whose sizes vary should run them with SQUALL_EF=0",
                 SQ_RESIDUAL_MAX_SHAPES, lru->count);
    for (squall_tensor *t = lru->slots; t; t = t->next) {
      release(s, t);
      t->last_scale = 0.0f;
    }
    release_spare(s, lru);
  }
}

/* Whether the cap leaves room for bytes more; where it does not and
 * spares_yield, the store's spares make room first: a residual is error
 * feedback itself, a spare only saves a copy. On success the bytes are
 * charged. */
static int charge(squall_residuals *s, size_t bytes, size_t max_bytes, int spares_yield) {
  size_t now = __atomic_add_fetch(&process_bytes, bytes, __ATOMIC_RELAXED);
  if (!max_bytes || now <= max_bytes) return 1;
  __atomic_sub_fetch(&process_bytes, bytes, __ATOMIC_RELAXED);
  if (!spares_yield) return 0;
  int freed = 0;
  for (shape *sh = s->shapes; sh; sh = sh->next) {
    freed |= sh->spare != NULL;
    release_spare(s, sh);
  }
  return freed && charge(s, bytes, max_bytes, 0);
}

squallResult_t squall__residuals_ensure(squall_residuals *s, squall_tensor *t, size_t max_bytes,
                                        void *stream) {
  if (t->residual || t->no_residual) return squallSuccess;
  size_t bytes = t->count * sizeof(float);
  if (!charge(s, bytes, max_bytes, 1)) {
    t->no_residual = 1;
    SQ_WARN_ONCE("SQUALL_EF_MAX_BYTES=%zu reached: tensors seen from now on (first: %zu elements) "
                 "run without error feedback",
                 max_bytes, t->count);
    return squallSuccess;
  }
  t->residual = s->kernels->alloc(stream, bytes); /* zeroed: zero on first sight */
  if (t->residual == NULL) {
    __atomic_sub_fetch(&process_bytes, bytes, __ATOMIC_RELAXED);
    return squall__fail(squallSystemError, "cannot allocate a %zu-byte residual (%s memory)", bytes,
                        s->kernels->name);
  }
  limit_shapes(s);
  return squallSuccess;
}

float *squall__residuals_spare(squall_residuals *s, squall_tensor *t, size_t max_bytes, void *stream,
                               int *created) {
  shape *sh = shape_of(s, t->count, t->kind, 0);
  *created = 0;
  if (sh == NULL || t->residual == NULL || t->pinned) return NULL;
  if (sh->spare) return sh->spare;
  size_t bytes = t->count * sizeof(float);
  if (!charge(s, bytes, max_bytes, 0)) return NULL;
  if ((sh->spare = s->kernels->alloc(stream, bytes)) == NULL) {
    __atomic_sub_fetch(&process_bytes, bytes, __ATOMIC_RELAXED);
    return NULL;
  }
  *created = 1;
  return sh->spare;
}

int squall__residuals_take_spare(squall_residuals *s, squall_tensor *t) {
  shape *sh = shape_of(s, t->count, t->kind, 0);
  if (sh == NULL || sh->spare == NULL || t->residual == NULL) return -1;
  float *old = t->residual;
  t->residual = sh->spare;
  sh->spare = old;
  return 0;
}

squallResult_t squall__residuals_reset(squall_residuals *s, void *stream) {
  if (s == NULL) return squallSuccess;
  for (shape *sh = s->shapes; sh; sh = sh->next)
    for (squall_tensor *t = sh->slots; t; t = t->next)
      if (t->residual) {
        SQ_FORWARD_IF_ERROR(s->kernels->zero(stream, t->residual, t->count * sizeof(float)));
        t->unsent = 0;
      }
  return squallSuccess;
}

size_t squall__residuals_process_bytes(void) {
  return __atomic_load_n(&process_bytes, __ATOMIC_RELAXED);
}

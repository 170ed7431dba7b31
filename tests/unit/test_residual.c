/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_residual.c - which residual a call finds (lib/engine/residual.c),
 * over call patterns that real programs make: tensors at stable addresses,
 * one staging buffer for several tensors, outputs allocated afresh,
 * alternating outputs, recycled allocations, calls the cost model passes
 * through.
 *
 * A model of error feedback with unit masses: tensor j's call delivers
 * whatever its residual holds (the previous calls' unsent mass), then keeps
 * one unit of its own back. The residual has one element per tensor, so a
 * delivery says whose mass it was: "foreign" mass is another tensor's,
 * delivered in this tensor's result (the fault that keying by the send
 * address alone had with a staging buffer). Every pattern conserves mass:
 * delivered + kept == calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "engine/residual.h"

enum { MAX_TENSORS = 4 };

typedef struct {
  squall_residuals *store;
  double own, foreign; /* delivered so far */
  int calls;
  int zero_starts; /* calls of a tensor seen before that found nothing kept */
  int seen[MAX_TENSORS];
} sim;

static void sim_init(sim *m) {
  memset(m, 0, sizeof *m);
  m->store = squall__residuals_create(&squall__kernels_host);
  ck_assert_ptr_nonnull(m->store);
}

/* A compressed call of tensor j from send into recv. Returns the foreign
 * mass it delivered. */
static double call(sim *m, int j, const void *send, const void *recv) {
  squall_tensor *t = squall__residuals_slot(m->store, (squall_tensor_key){send, recv}, MAX_TENSORS, 0);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(squall__residuals_ensure(m->store, t, 0, NULL), squallSuccess);
  float *r = t->residual;
  double foreign = 0;
  for (int i = 0; i < MAX_TENSORS; i++)
    if (i != j) foreign += r[i];
  if (m->seen[j] && r[j] == 0.0f) m->zero_starts++;
  m->own += r[j];
  m->foreign += foreign;
  memset(r, 0, MAX_TENSORS * sizeof(float));
  r[j] = 1.0f; /* this call's unsent mass */
  m->calls++;
  m->seen[j] = 1;
  return foreign;
}

/* A call of tensor j that, from step `from` on, must deliver exactly one
 * unit of its own mass (the call before's) and nothing of another's. */
static void call_own(sim *m, int step, int from, int j, const void *send, const void *recv) {
  double own0 = m->own, f = call(m, j, send, recv);
  if (step >= from)
    ck_assert_msg(f == 0 && m->own - own0 == 1, "step %d tensor %d: own %g foreign %g", step, j, m->own - own0, f);
}

/* A call the cost model passed through without looking its slot up. */
static void passed(sim *m, const void *send, const void *recv) {
  squall__residuals_touch(m->store, (squall_tensor_key){send, recv}, MAX_TENSORS, 0);
}

/* Mass kept in every residual of the shape. */
static double kept(sim *m, const void *const *sends, const void *const *recvs, int pairs) {
  double k = 0;
  for (int p = 0; p < pairs; p++) {
    squall_tensor *t = squall__residuals_find(m->store, (squall_tensor_key){sends[p], recvs[p]}, MAX_TENSORS, 0);
    for (int i = 0; t && t->residual && i < MAX_TENSORS; i++) k += t->residual[i];
  }
  return k;
}

static void sim_free(sim *m) { squall__residuals_free(m->store); }

static char buf[128][16]; /* distinct addresses */
#define A(i) ((const void *)buf[i])

/* Tensors at stable addresses: after the first step's documented move,
 * each delivers exactly its own mass, every step. */
START_TEST(test_stable_tensors) {
  sim m;
  sim_init(&m);
  for (int step = 0; step < 20; step++)
    for (int j = 0; j < 3; j++) call_own(&m, step, 2, j, A(j), A(10 + j));
  const void *s[] = {A(0), A(1), A(2)}, *r[] = {A(10), A(11), A(12)};
  ck_assert(m.own + m.foreign + kept(&m, s, r, 3) == m.calls);
  sim_free(&m);
}
END_TEST

/* Several tensors sent from one staging buffer, each into its own output:
 * the same as separate tensors (with the send address alone they shared
 * one residual and each delivered the others' mass). */
START_TEST(test_staging_buffer_own_outputs) {
  sim m;
  sim_init(&m);
  for (int step = 0; step < 20; step++)
    for (int j = 0; j < 3; j++) call_own(&m, step, 2, j, A(0), A(10 + j));
  sim_free(&m);
}
END_TEST

/* The same while the cost model passes calls through: a tensor whose
 * calls passed through is still live, and a tensor's first compressed
 * call, much later, must not take its residual. */
START_TEST(test_staging_buffer_with_passed_through_calls) {
  sim m;
  sim_init(&m);
  /* step 0: the busy tensor compressed, the zero one passed through */
  passed(&m, A(0), A(10));
  call(&m, 1, A(0), A(11));
  for (int step = 1; step < 3; step++) { /* both passed through */
    passed(&m, A(0), A(10));
    passed(&m, A(0), A(11));
  }
  for (int step = 3; step < 20; step++) {
    double f = call(&m, 0, A(0), A(10));
    ck_assert_msg(f == 0, "step %d: the zero tensor delivered %g of the busy one's mass", step, f);
    call_own(&m, step, 0, 1, A(0), A(11)); /* the busy tensor */
  }
  ck_assert_int_eq(m.zero_starts, 0);
  sim_free(&m);
}
END_TEST

/* A stable send buffer with an output allocated afresh every step (all
 * alive, so no address comes back), beside an in-place tensor that comes
 * only every 10th step: each fresh-output tensor carries its own residual
 * from step to step however long the in-place one takes to come back. */
START_TEST(test_fresh_outputs_beside_a_rare_tensor) {
  sim m;
  sim_init(&m);
  int next = 20;
  for (int step = 0; step < 40; step++) {
    for (int j = 0; j < 2; j++) /* after the first steps' moves (a send seen once is no kin yet) */
      call_own(&m, step, 3, j, A(j), A(next++));
    if (step % 10 == 0) call_own(&m, step, 20, 2, A(5), A(5)); /* in place */
  }
  ck_assert_int_le(next, 128);
  sim_free(&m);
}
END_TEST

/* Both buffers fresh every step: one tensor carries its residual from
 * step to step; several of one shape keep their mass (nothing is lost,
 * one residual per tensor) though, with no address to go by, the first
 * step's move keeps them passing residuals on (see residual.h). */
START_TEST(test_fresh_buffers) {
  sim m;
  sim_init(&m);
  int next = 0;
  for (int step = 0; step < 15; step++) {
    call_own(&m, step, 1, 0, A(next), A(next + 1));
    next += 2;
  }
  sim_free(&m);
  sim_init(&m);
  size_t bytes0 = squall__residuals_process_bytes();
  const void *s[64], *r[64];
  next = 0;
  for (int step = 0; step < 15; step++)
    for (int j = 0; j < 2; j++) {
      s[next / 2] = A(next);
      r[next / 2] = A(next + 1);
      call(&m, j, A(next), A(next + 1));
      next += 2;
    }
  ck_assert(m.own + m.foreign + kept(&m, s, r, next / 2) == m.calls);
  ck_assert_uint_le(squall__residuals_process_bytes() - bytes0, 2 * MAX_TENSORS * sizeof(float));
  sim_free(&m);
}
END_TEST

/* Several tensors sent from one temporary whose address moves every step
 * (comm.Allreduce(g * s, out) when the allocator moves the temporary),
 * each into its own stable output: each carries its own residual, and
 * memory stays at one residual per tensor. */
START_TEST(test_moving_temporary_into_stable_outputs) {
  sim m;
  sim_init(&m);
  size_t bytes0 = squall__residuals_process_bytes();
  for (int step = 0; step < 40; step++)
    for (int j = 0; j < 2; j++) call_own(&m, step, 3, j, A(20 + step), A(10 + j));
  ck_assert_uint_le(squall__residuals_process_bytes() - bytes0, 2 * MAX_TENSORS * sizeof(float));
  sim_free(&m);
}
END_TEST

/* A temporary shared by a tensor with a stable output and one whose
 * output is fresh every step: neither takes the other's residual, and
 * memory stays bounded. */
START_TEST(test_temporary_shared_with_a_fresh_tensor) {
  sim m;
  sim_init(&m);
  size_t bytes0 = squall__residuals_process_bytes();
  for (int step = 0; step < 40; step++) {
    call_own(&m, step, 3, 0, A(20 + step), A(10));
    call_own(&m, step, 3, 1, A(20 + step), A(70 + step % 50));
  }
  ck_assert_uint_le(squall__residuals_process_bytes() - bytes0, 3 * MAX_TENSORS * sizeof(float));
  sim_free(&m);
}
END_TEST

/* A residual a captured CUDA graph uses (pinned) is never given to another
 * pair, however long eager calls of its shape run without it. */
START_TEST(test_pinned_residual_stays) {
  sim m;
  sim_init(&m);
  call(&m, 0, A(0), A(1));
  squall_tensor *g = squall__residuals_find(m.store, (squall_tensor_key){A(0), A(1)}, MAX_TENSORS, 0);
  ck_assert(g && g->residual);
  float *mem = g->residual;
  g->pinned = 1;
  for (int step = 0; step < 30; step++) /* fresh buffers every step: they would inherit */
    ck_assert(call(&m, 1, A(10 + 2 * step), A(11 + 2 * step)) == 0);
  ck_assert(g->residual == mem && g->residual[0] == 1.0f);
  sim_free(&m);
}
END_TEST

/* One tensor whose output alternates between two buffers keeps a residual
 * per output (documented): each call delivers the mass of the call two
 * before it, nothing is lost, and memory stays at two residuals. */
START_TEST(test_alternating_outputs) {
  sim m;
  sim_init(&m);
  size_t bytes0 = squall__residuals_process_bytes(), bytes2 = 0;
  for (int step = 0; step < 20; step++) {
    double own0 = m.own, f = call(&m, 0, A(0), A(10 + step % 2));
    ck_assert(f == 0);
    if (step >= 3) ck_assert_msg(m.own - own0 == 1, "step %d: delivered %g", step, m.own - own0);
    if (step == 2) bytes2 = squall__residuals_process_bytes();
  }
  ck_assert_uint_eq(bytes2 - bytes0, 2 * MAX_TENSORS * sizeof(float));
  ck_assert_uint_eq(squall__residuals_process_bytes(), bytes2);
  const void *s[] = {A(0), A(0)}, *r[] = {A(10), A(11)};
  ck_assert(m.own + kept(&m, s, r, 2) == m.calls);
  sim_free(&m);
}
END_TEST

/* An allocator that recycles a few addresses in any order, for both
 * buffers of one tensor: nothing is lost, memory stays bounded by the
 * addresses in play. */
START_TEST(test_recycled_addresses) {
  sim m;
  sim_init(&m);
  size_t bytes0 = squall__residuals_process_bytes();
  unsigned x = 12345;
  const void *s[64], *r[64];
  int pairs = 0;
  for (int step = 0; step < 500; step++) {
    x = x * 1103515245u + 12345u;
    int a = (int)(x >> 16) % 3, b = 3 + (int)(x >> 8) % 3;
    ck_assert(call(&m, 0, A(a), A(b)) == 0);
    int known = 0;
    for (int p = 0; p < pairs; p++) known |= s[p] == A(a) && r[p] == A(b);
    if (!known) {
      s[pairs] = A(a);
      r[pairs++] = A(b);
    }
  }
  ck_assert(m.own + kept(&m, s, r, pairs) == m.calls);
  ck_assert_uint_le(squall__residuals_process_bytes() - bytes0, 9 * MAX_TENSORS * sizeof(float));
  sim_free(&m);
}
END_TEST

/* A program whose sizes vary (one new size per step, beside a tensor of a
 * fixed size): at most SQ_RESIDUAL_MAX_SHAPES sizes keep residuals, the
 * least recently used lose theirs, and the size in use every step keeps
 * its mass throughout. */
START_TEST(test_sizes_that_vary) {
  squall_residuals *st = squall__residuals_create(&squall__kernels_host);
  size_t bytes0 = squall__residuals_process_bytes();
  enum { SIZES = SQ_RESIDUAL_MAX_SHAPES + 50 };
  for (int i = 0; i < SIZES; i++) {
    squall_tensor *hot = squall__residuals_slot(st, (squall_tensor_key){A(0), A(1)}, 2, 0);
    ck_assert_int_eq(squall__residuals_ensure(st, hot, 0, NULL), squallSuccess);
    hot->residual[0] += 1.0f;
    squall_tensor *t = squall__residuals_slot(st, (squall_tensor_key){A(2), A(3)}, 4 + (size_t)i, 0);
    ck_assert_int_eq(squall__residuals_ensure(st, t, 0, NULL), squallSuccess);
    t->residual[0] = 1.0f;
    int created;
    ck_assert_ptr_nonnull(squall__residuals_spare(st, t, 0, NULL, &created)); /* dropped with the size */
  }
  squall_tensor *hot = squall__residuals_find(st, (squall_tensor_key){A(0), A(1)}, 2, 0);
  ck_assert(hot && hot->residual && hot->residual[0] == (float)SIZES);
  /* the hot size and the last MAX - 1 sizes hold residuals (and those
   * sizes their spares), no others */
  size_t want = 2 * sizeof(float);
  for (int i = SIZES - (SQ_RESIDUAL_MAX_SHAPES - 1); i < SIZES; i++) want += 2 * (4 + (size_t)i) * sizeof(float);
  ck_assert_uint_eq(squall__residuals_process_bytes() - bytes0, want);
  squall_tensor *first = squall__residuals_find(st, (squall_tensor_key){A(2), A(3)}, 4, 0);
  ck_assert(first && first->residual == NULL);
  squall__residuals_free(st);
  ck_assert_uint_eq(squall__residuals_process_bytes(), bytes0);
}
END_TEST

/* Tensors their caller keys (exact: squallColl's key, a DDP bucket's or
 * an FSDP gradient's place) are their keys alone: a key seen for the first
 * time (its first calls passed through) starts afresh rather than take the
 * residual of another tensor of its shape, which a new address pair would
 * inherit, and a new address pair never takes a keyed tensor's. */
START_TEST(test_exact_keys_keep_their_own) {
  squall_residuals *st = squall__residuals_create(&squall__kernels_host);
  squall_tensor *k2 = squall__residuals_slot(st, (squall_tensor_key){A(2), A(2), 1}, 8, 0);
  ck_assert_int_eq(squall__residuals_ensure(st, k2, 0, NULL), squallSuccess);
  k2->residual[0] = 5.0f;
  squall_tensor *k1 = squall__residuals_slot(st, (squall_tensor_key){A(1), A(1), 1}, 8, 0);
  ck_assert_ptr_ne(k1, k2);
  ck_assert_ptr_null(k1->residual); /* afresh */
  squall_tensor *fresh = squall__residuals_slot(st, (squall_tensor_key){A(7), A(8)}, 8, 0);
  ck_assert_ptr_null(fresh->residual); /* nor to a new pair of addresses */
  ck_assert(k2->residual && k2->residual[0] == 5.0f);
  /* a pair of addresses equal to a key's is another tensor */
  ck_assert_ptr_ne(squall__residuals_find(st, (squall_tensor_key){A(2), A(2)}, 8, 0), k2);
  squall__residuals_free(st);
}
END_TEST

/* The spare (squall__residuals_spare): one per shape, shared by its
 * slots, count floats charged like a residual and refused by the cap; a
 * swap (take_spare) makes it the slot's residual and the old buffer the
 * spare, with no copy; none for a slot without a residual or one a graph
 * uses; gone with the shape's residuals and with the store. */
START_TEST(test_spare_per_shape) {
  squall_residuals *st = squall__residuals_create(&squall__kernels_host);
  size_t bytes0 = squall__residuals_process_bytes();
  int created = -1;
  squall_tensor *t = squall__residuals_slot(st, (squall_tensor_key){A(0), A(1)}, 8, 0);
  squall_tensor *u = squall__residuals_slot(st, (squall_tensor_key){A(2), A(3)}, 8, 0);
  ck_assert_ptr_null(squall__residuals_spare(st, t, 0, NULL, &created)); /* no residual yet */
  ck_assert_int_eq(created, 0);
  ck_assert_int_eq(squall__residuals_take_spare(st, t), -1);
  ck_assert_int_eq(squall__residuals_ensure(st, t, 0, NULL), squallSuccess);
  ck_assert_int_eq(squall__residuals_ensure(st, u, 0, NULL), squallSuccess);
  ck_assert_int_eq(squall__residuals_take_spare(st, t), -1); /* none yet: nothing changes */
  /* the cap: two residuals fit, a spare beside them does not */
  ck_assert_ptr_null(squall__residuals_spare(st, t, bytes0 + 2 * 8 * sizeof(float), NULL, &created));
  ck_assert_uint_eq(squall__residuals_process_bytes() - bytes0, 2 * 8 * sizeof(float));
  float *spare = squall__residuals_spare(st, t, 0, NULL, &created), *old = t->residual;
  ck_assert_ptr_nonnull(spare);
  ck_assert_int_eq(created, 1);
  ck_assert_ptr_eq(squall__residuals_spare(st, u, 0, NULL, &created), spare); /* the shape's, shared */
  ck_assert_int_eq(created, 0);
  ck_assert_uint_eq(squall__residuals_process_bytes() - bytes0, 3 * 8 * sizeof(float));
  old[0] = 1.0f;
  spare[0] = 2.0f;
  ck_assert_int_eq(squall__residuals_take_spare(st, t), 0);
  ck_assert_ptr_eq(t->residual, spare);
  ck_assert(t->residual[0] == 2.0f);
  ck_assert_ptr_eq(squall__residuals_spare(st, u, 0, NULL, &created), old); /* the old buffer is the spare now */
  ck_assert_uint_eq(squall__residuals_process_bytes() - bytes0, 3 * 8 * sizeof(float));
  /* another shape has a spare of its own size */
  squall_tensor *w = squall__residuals_slot(st, (squall_tensor_key){A(0), A(1)}, 5, 0);
  ck_assert_int_eq(squall__residuals_ensure(st, w, 0, NULL), squallSuccess);
  ck_assert_ptr_nonnull(squall__residuals_spare(st, w, 0, NULL, &created));
  ck_assert_uint_eq(squall__residuals_process_bytes() - bytes0, (3 * 8 + 2 * 5) * sizeof(float));
  /* a residual comes before the spares: where the cap has room for it
   * only without them, they go (both shapes'), and it gets its own */
  size_t cap = bytes0 + (2 * 8 + 5 + 7) * sizeof(float);
  squall_tensor *x = squall__residuals_slot(st, (squall_tensor_key){A(0), A(1)}, 7, 0);
  ck_assert_int_eq(squall__residuals_ensure(st, x, cap, NULL), squallSuccess);
  ck_assert_ptr_nonnull(x->residual);
  ck_assert_int_eq(x->no_residual, 0);
  ck_assert_uint_eq(squall__residuals_process_bytes() - bytes0, (2 * 8 + 5 + 7) * sizeof(float));
  ck_assert_ptr_null(squall__residuals_spare(st, u, cap, NULL, &created)); /* and none comes back */
  ck_assert(t->residual[0] == 2.0f && u->residual && w->residual);         /* no residual lost anything */
  w->pinned = 1;                                                           /* a graph's: its residual never moves */
  ck_assert_ptr_null(squall__residuals_spare(st, w, 0, NULL, &created));
  squall__residuals_free(st);
  ck_assert_uint_eq(squall__residuals_process_bytes(), bytes0);
}
END_TEST

/* The VmFlags of the mapping that holds p (/proc/self/smaps), or "" */
static void vm_flags_of(const void *p, char *flags, size_t cap) {
  flags[0] = 0;
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return;
  char line[512];
  int inside = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
      inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      snprintf(flags, cap, "%s", line + 8);
      break;
    }
  }
  fclose(f);
}

/* The host memory residuals live in (kernels_host.c): zeroed, on 64-byte
 * lines, and from 2 MiB on at a 2 MiB boundary, asking for huge pages
 * (where the kernel has them: the mapping's "hg" flag); every byte
 * writable up to the end; a size that cannot be had is refused. */
START_TEST(test_host_memory_alignment) {
  ck_assert_ptr_null(squall__kernels_host.alloc(NULL, SIZE_MAX - 8));
  ck_assert_ptr_null(squall__kernels_host.alloc(NULL, SIZE_MAX / 2));
  const size_t sizes[] = {1, 4096, ((size_t)2 << 20) - 4, (size_t)2 << 20, ((size_t)5 << 20) + 12};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *p = squall__kernels_host.alloc(NULL, sizes[i]);
    ck_assert_ptr_nonnull(p);
    size_t align = sizes[i] >= ((size_t)2 << 20) ? (size_t)2 << 20 : 64;
    ck_assert_msg((uintptr_t)p % align == 0, "%zu bytes at %p: not on %zu", sizes[i], (void *)p, align);
    for (size_t j = 0; j < sizes[i]; j += 4093) ck_assert_int_eq(p[j], 0);
    ck_assert_int_eq(p[sizes[i] - 1], 0);
    FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (thp && align > 64) {
      char flags[512];
      vm_flags_of(p, flags, sizeof flags);
      ck_assert_msg(strstr(flags, " hg") != NULL, "%zu bytes: no huge-page hint (VmFlags:%s)", sizes[i], flags);
    }
    if (thp) fclose(thp);
    memset(p, 0xa5, sizes[i]);
    squall__kernels_host.free(NULL, p);
  }
}
END_TEST

static Suite *residual_suite(void) {
  Suite *s = suite_create("residual");
  TCase *tc = tcase_create("identity");
  tcase_add_test(tc, test_stable_tensors);
  tcase_add_test(tc, test_staging_buffer_own_outputs);
  tcase_add_test(tc, test_staging_buffer_with_passed_through_calls);
  tcase_add_test(tc, test_fresh_outputs_beside_a_rare_tensor);
  tcase_add_test(tc, test_fresh_buffers);
  tcase_add_test(tc, test_moving_temporary_into_stable_outputs);
  tcase_add_test(tc, test_temporary_shared_with_a_fresh_tensor);
  tcase_add_test(tc, test_pinned_residual_stays);
  tcase_add_test(tc, test_alternating_outputs);
  tcase_add_test(tc, test_recycled_addresses);
  tcase_add_test(tc, test_sizes_that_vary);
  tcase_add_test(tc, test_spare_per_shape);
  tcase_add_test(tc, test_exact_keys_keep_their_own);
  tcase_add_test(tc, test_host_memory_alignment);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(residual_suite()); }

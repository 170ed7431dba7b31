/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * cold_stores.c - which stores a decoder uses for an output that goes cold
 * before anything reads it (SQ_OUT_COLD_BYTES): plain ones, which read each
 * line for ownership before writing it, or non-temporal ones, which skip
 * that read but fill memory through the write-combining buffers.
 *
 * Which is faster depends on the host, not on the data: 16M fp16 codes
 * decoded with streamed stores in 0.55 against 0.78 ns per element on one
 * 2-core EPYC KVM machine (2026-12-02), and in 0.28 against 0.21 on another
 * of the same kind a day earlier. So each process learns it. Its first
 * cold decodes of at least SQ_COLD_TRIAL_ELEMS elements alternate the two,
 * timed in thread CPU time (a descheduled rank does not count against
 * either), and the kind with the smaller best time per element is kept
 * from then on (streaming must be faster by 5%). Until then other cold
 * decodes use plain stores, as do those whose vector loops cannot stream
 * (a scale without an exact reciprocal, an output at an odd address),
 * which are no trials either.
 *
 * Each family of decoders (sq_cold_site) learns on its own: their trials
 * would not compare. The bits are the same either way, so ranks may learn
 * differently: this is the one piece of state the codecs keep, and it
 * never reaches a result. Threads may decode at once: each trial takes its
 * own slot.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include <time.h>

#include "codecs/codec.h"

enum { TRIALS = 2 * SQ_COLD_TRIALS_PER_KIND };

static struct {
  unsigned started;  /* trials handed out */
  unsigned finished; /* trials timed */
  int learned;       /* SQ_STORE_PLAIN or SQ_STORE_STREAM once learned, else -1 */
  double per_elem[TRIALS];
} sites[SQ_COLD_SITES] = {{0, 0, -1, {0}}, {0, 0, -1, {0}}};
static int forced = -1; /* squall__cold_stores_force */

static double thread_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

sq_cold_trial squall__cold_stores_begin(sq_cold_site site, size_t n, int can_stream) {
  sq_cold_trial t = {SQ_STORE_PLAIN, -1, 0.0};
  if (!can_stream) return t; /* and no trial: it would time plain stores as streamed ones */
  int f = __atomic_load_n(&forced, __ATOMIC_RELAXED);
  int l = __atomic_load_n(&sites[site].learned, __ATOMIC_ACQUIRE);
  if (f >= 0 || l >= 0) {
    t.kind = f >= 0 ? f : l;
    return t;
  }
  if (n < SQ_COLD_TRIAL_ELEMS) return t; /* too short to time: fixed costs would decide */
  unsigned slot = __atomic_fetch_add(&sites[site].started, 1u, __ATOMIC_RELAXED);
  if (slot >= TRIALS) return t; /* the last trials are still running */
  t.slot = (int)slot;
  t.kind = slot % 2 ? SQ_STORE_STREAM : SQ_STORE_PLAIN;
  t.t0 = thread_seconds();
  return t;
}

void squall__cold_stores_end(sq_cold_site site, const sq_cold_trial *t, size_t n) {
  if (t->slot < 0) return;
  double *per_elem = sites[site].per_elem;
  per_elem[t->slot] = (thread_seconds() - t->t0) / (double)n;
  if (__atomic_add_fetch(&sites[site].finished, 1u, __ATOMIC_ACQ_REL) != TRIALS) return;
  /* the best of each kind: interruptions only ever add time; streaming
   * must win by SQ_COLD_MARGIN, so that a near tie keeps the plain stores
   * the output would have had anyway */
  double best[2] = {per_elem[0], per_elem[1]};
  for (int i = 2; i < TRIALS; i++)
    if (per_elem[i] < best[i % 2]) best[i % 2] = per_elem[i];
  int stream = best[1] < best[0] * (1.0 - SQ_COLD_MARGIN);
  __atomic_store_n(&sites[site].learned, stream ? SQ_STORE_STREAM : SQ_STORE_PLAIN, __ATOMIC_RELEASE);
}

int squall__cold_stores_learned(sq_cold_site site, double ns_per_elem[2]) {
  int l = __atomic_load_n(&sites[site].learned, __ATOMIC_ACQUIRE);
  if (l >= 0 && ns_per_elem) {
    const double *per_elem = sites[site].per_elem;
    ns_per_elem[0] = ns_per_elem[1] = -1.0;
    for (int i = 0; i < TRIALS; i++)
      if (ns_per_elem[i % 2] < 0 || per_elem[i] * 1e9 < ns_per_elem[i % 2]) ns_per_elem[i % 2] = per_elem[i] * 1e9;
  }
  return l;
}

void squall__cold_stores_force(int kind) {
  __atomic_store_n(&forced, kind, __ATOMIC_RELAXED);
}

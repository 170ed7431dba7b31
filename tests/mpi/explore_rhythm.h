/* SPDX-License-Identifier: BSD-3-Clause */
/* explore_rhythm.h - checks, call by call, the shape of the cost model's
 * rhythm in a size class it declines (squall(7), COST MODEL), from what
 * the public statistics show: whether each call compressed, and the
 * headers it exchanged. The periods follow the agreed loss, which a test
 * does not see, so the shape is what is checked:
 *   - after the codec's first `measured` compressed calls, a compressed
 *     call is an exploration, 32 << s declined calls after the class last
 *     compressed (s up to 4), each period at least twice the one before
 *     it, up to 512, with one to five rechecks between two explorations;
 *   - a declined call has a header where it settles the class (the first
 *     two declined calls after the measuring ones, the first after an
 *     exploration) or where it is a recheck, 16 << r declined calls after
 *     the last exploration or measuring call (r up to 4; one tensor in the
 *     class, of one codec, as the tests call it); no other has one.
 * Needs Check. */
#ifndef SQUALL_TESTS_MPI_EXPLORE_RHYTHM_H
#define SQUALL_TESTS_MPI_EXPLORE_RHYTHM_H

#include <check.h>
#include <string.h>

#include "engine/costmodel.h" /* SQ_COST_EXPLORE, SQ_COST_RECHECK */

#define RHYTHM_LONGEST (SQ_COST_EXPLORE << SQ_COST_EXPLORE_SHIFTS)

typedef struct {
  const char *what;
  int measured;   /* the codec's first compressed calls, which measure it */
  int compressed; /* so far */
  int declined;
  int last_compressed; /* the call, -1 before any */
  int settle_after;    /* declined calls after it that exchange a header to settle */
  int since;           /* declined calls since the last compressed one */
  int period;          /* between the last two explorations, 0 before */
  int rechecks;        /* since the last compressed call */
  int explorations;
} explore_rhythm;

static inline void rhythm_start(explore_rhythm *r, const char *what, int measured) {
  memset(r, 0, sizeof *r);
  r->what = what;
  r->measured = measured;
  r->last_compressed = -1;
}

static inline int rhythm_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* Call t compressed (c) or was declined, with `headed` headers. */
static inline void rhythm_call(explore_rhythm *r, int t, int c, int headed) {
  if (c) {
    if (r->compressed >= r->measured) {
      int p = r->since + 1, want = 2 * r->period < RHYTHM_LONGEST ? 2 * r->period : RHYTHM_LONGEST;
      ck_assert_msg(rhythm_power_of_two(p) && p >= SQ_COST_EXPLORE && p <= RHYTHM_LONGEST,
                    "%s, call %d: explored after %d declined calls", r->what, t, r->since);
      ck_assert_msg(p >= want, "%s, call %d: explored %d calls after the last exploration, %d before that", r->what, t,
                    p, r->period);
      ck_assert_msg(r->rechecks >= 1 && r->rechecks <= SQ_COST_RECHECK_SHIFTS + 1,
                    "%s, call %d: %d rechecks before the exploration", r->what, t, r->rechecks);
      r->period = p;
      r->explorations++;
    }
    r->compressed++;
    r->last_compressed = t;
    r->settle_after = r->declined > 0 ? 1 : 2;
    r->since = r->rechecks = 0;
    return;
  }
  if (r->last_compressed >= 0) {
    int settling = t - r->last_compressed <= r->settle_after, n = r->since + 1;
    int recheck = rhythm_power_of_two(n) && n >= SQ_COST_RECHECK && n <= RHYTHM_LONGEST / 2;
    if (settling) ck_assert_msg(headed == 1, "%s, call %d: settling without a header", r->what, t);
    else ck_assert_msg(!headed || recheck, "%s, call %d: a header %d declined calls after a compressed one", r->what,
                       t, r->since);
    r->rechecks += headed && !settling;
  }
  r->since++;
  r->declined++;
}

#endif

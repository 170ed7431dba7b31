/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_costmodel.c - the cost model's arithmetic (lib/engine/costmodel.c):
 * the link fit recovers a known latency and bandwidth, follows a link
 * that changes, SQUALL_LINK_GBPS fixes the bandwidth; predictions for
 * plain, compressed and pipelined calls; no prediction without figures;
 * a codec's first figure declining nothing; whole calls standing in for
 * the model where timed, the compressed call's from its own size class or
 * a smaller one;
 * the exploration rhythm; a reduce-scatter's plain call (plain_wire), half
 * a ring all-reduce's bytes, in its prediction and verdict.
 */
#include <math.h>
#include <string.h>

#include "check_util.h"
#include "engine/costmodel.h"
#include "squall.h" /* squallCodec_t */

#define MB 1e6

static void close_to(double got, double want, double rel, const char *what) {
  ck_assert_msg(fabs(got - want) <= rel * fabs(want), "%s: %.9g, expected %.9g", what, got, want);
}

/* samples of t = alpha * c + beta * MB, several shapes */
static void feed(squall_cost *m, double alpha, double beta_per_mb, int count) {
  for (int i = 0; i < count; i++) {
    int c = 1 + i % 3;
    uint64_t bytes = (uint64_t)(1000 + 997 * (i % 7)) * 1000;
    squall__cost_note_link(m, c, bytes, alpha * c + beta_per_mb * (double)bytes / MB);
  }
}

/* A codec's figure: the smaller of its first two samples (a slower first
 * one here). */
static void codec_figure(squall_cost *m, int kind, size_t n, double seconds) {
  squall__cost_note_codec(m, kind, n, 10 * seconds);
  squall__cost_note_codec(m, kind, n, seconds);
}

static squall_cost_call half_call(void) { /* 16M floats, fp16 two-phase, 4 ranks */
  /* clang-format off */
  squall_cost_call c = {.kind = 3, .n = 1 << 24, .bytes_in = 4u << 24, .wire = 2 * 3 * (2u << 24) / 4,
                        .collectives = 3, .chunks = 1, .nranks = 4};
  /* clang-format on */
  return c;
}

START_TEST(test_fit_recovers_the_link) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  feed(&m, 50e-6, 8e-3, 40);       /* 50 us per collective, 1 Gbit/s */
  codec_figure(&m, 3, 1000, 2e-6); /* 2 ns per element */
  squall_cost_call c = half_call();
  double plain, comp;
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  double ring = 2.0 * 3 / 4 * (double)c.bytes_in;
  close_to(plain, 50e-6 + 8e-3 * ring / MB, 1e-6, "plain");
  close_to(comp, 3 * 50e-6 + 8e-3 * (double)c.wire / MB + 2e-9 * (double)c.n, 1e-6, "compressed");
  ck_assert(comp < plain); /* half the bytes on a slow link: it pays */
}
END_TEST

/* A reduce-scatter of 64 MiB on 4 ranks: its plain call sends (P-1)/P of
 * the bytes (plain_wire), half of what a ring all-reduce of them does, and
 * its compressed call stops after one exchange of fp16 codes. A codec
 * slow enough (0.3 s) pays against the all-reduce's plain call and not
 * against the reduce-scatter's. */
START_TEST(test_reduce_scatter_call) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  feed(&m, 50e-6, 8e-3, 40); /* 1 Gbit/s */
  codec_figure(&m, 3, 1 << 24, 0.3);
  /* clang-format off */
  squall_cost_call rs = {.kind = 3, .n = 1 << 24, .bytes_in = 4u << 24, .plain_wire = 3 * (4u << 24) / 4,
                         .wire = 3 * (2u << 24) / 4, .collectives = 1, .chunks = 1, .nranks = 4};
  /* clang-format on */
  double plain, comp;
  ck_assert_int_eq(squall__cost_predict(&m, &rs, 0, &plain, &comp), 1);
  close_to(plain, 50e-6 + 8e-3 * (double)rs.plain_wire / MB, 1e-6, "reduce-scatter plain");
  close_to(comp, 50e-6 + 8e-3 * (double)rs.wire / MB + 0.3, 1e-6, "reduce-scatter compressed");
  ck_assert(!squall__cost_pays(comp, plain));
  squall_cost_call ar = rs; /* the same call, weighed against the all-reduce's plain bytes */
  ar.plain_wire = 0;
  double plain_ar, comp_ar;
  ck_assert_int_eq(squall__cost_predict(&m, &ar, 0, &plain_ar, &comp_ar), 1);
  close_to(plain_ar, 50e-6 + 8e-3 * 2.0 * 3 / 4 * (double)ar.bytes_in / MB, 1e-6, "all-reduce plain");
  close_to(comp_ar, comp, 1e-9, "compressed: the same either way");
  ck_assert(squall__cost_pays(comp_ar, plain_ar));
  /* a given speed: the reduce-scatter's plain bytes at it */
  memset(&m, 0, sizeof m);
  codec_figure(&m, 3, 1 << 24, 0.3);
  ck_assert_int_eq(squall__cost_predict(&m, &rs, 0.01, &plain, &comp), 1);
  close_to(plain, (double)rs.plain_wire * 8 / 0.01e9, 1e-9, "reduce-scatter plain at 10 Mbit/s");
  ck_assert(squall__cost_pays(comp, plain));
}
END_TEST

START_TEST(test_follows_a_changed_link) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  feed(&m, 50e-6, 8e-3, 40);    /* 1 Gbit/s ... */
  feed(&m, 20e-6, 0.8e-3, 200); /* ... then 10 Gbit/s */
  codec_figure(&m, 3, 1000, 2e-6);
  squall_cost_call c = half_call();
  double plain, comp;
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  close_to(plain, 20e-6 + 0.8e-3 * 2.0 * 3 / 4 * (double)c.bytes_in / MB, 1e-3, "plain after the change");
}
END_TEST

START_TEST(test_given_link_speed) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  codec_figure(&m, 3, 1000, 2e-6);
  squall_cost_call c = half_call();
  double plain, comp;
  /* no samples at all: the given speed alone, no latency */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 100.0, &plain, &comp), 1);
  close_to(plain, 2.0 * 3 / 4 * (double)c.bytes_in * 8 / 100e9, 1e-9, "plain at 100 Gbit/s");
  ck_assert(comp > plain); /* 2 ns per element costs more than 100 Gbit/s saves */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 1.0, &plain, &comp), 1);
  ck_assert(comp < plain);
}
END_TEST

START_TEST(test_no_figures_no_prediction) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  squall_cost_call c = half_call();
  double plain, comp;
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 0); /* nothing known */
  feed(&m, 50e-6, 8e-3, 10);
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 0); /* codec unknown */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 10.0, &plain, &comp), 0);
  memset(&m, 0, sizeof m);
  codec_figure(&m, 3, 1000, 2e-6);
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 0); /* link unknown */
  c.kind = SQ_COST_KINDS;                                              /* out of range */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 10.0, &plain, &comp), 0);
  /* nonsense samples are ignored */
  memset(&m, 0, sizeof m);
  squall__cost_note_link(&m, 0, 1000, 1.0);
  squall__cost_note_link(&m, 1, 1000, NAN);
  squall__cost_note_codec(&m, 3, 0, 1.0);
  squall__cost_note_codec(&m, -1, 10, 1.0);
  ck_assert_int_eq(m.link_samples, 0);
  ck_assert(m.spe[3] == 0);
  /* exchanges that took no time: the link looks free, plain cheap, and
   * that is a prediction (not none, which would make every rank compress) */
  memset(&m, 0, sizeof m);
  codec_figure(&m, 3, c.n, 1e-3);
  c.kind = 3;
  for (int i = 0; i < 4; i++) squall__cost_note_link(&m, 1, 4000, 0.0);
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  ck_assert(plain < SQ_COST_PROBE_CHEAP && comp >= 1e-3);
}
END_TEST

START_TEST(test_pipelined_overlap) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  codec_figure(&m, 3, 1000, 2e-6);
  squall_cost_call c = half_call();
  double plain, one, piped;
  ck_assert_int_eq(squall__cost_predict(&m, &c, 10.0, &plain, &one), 1);
  c.chunks = 16;
  ck_assert_int_eq(squall__cost_predict(&m, &c, 10.0, &plain, &piped), 1);
  double xfer = (double)c.wire * 8 / 10e9, codec = 2e-9 * (double)c.n;
  close_to(one, xfer + codec, 1e-9, "one chunk: codec, then the exchange");
  close_to(piped, fmax(xfer, codec) + fmin(xfer, codec) / 16, 1e-9, "16 chunks: overlapped");
}
END_TEST

/* A codec's first figure may be far too slow (memory and code used for
 * the first time): alone, it may compress but not decline. */
START_TEST(test_first_codec_figure_declines_nothing) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  feed(&m, 50e-6, 8e-3, 40);
  squall_cost_call c = half_call();
  double plain, comp;
  squall__cost_note_codec(&m, 3, 1000, 2e-6); /* fast: it pays */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  ck_assert(squall__cost_pays(comp, plain));
  memset(&m, 0, sizeof m);
  feed(&m, 50e-6, 8e-3, 40);
  squall__cost_note_codec(&m, 3, 1000, 2e-4); /* slow: no verdict, measure again */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 0);
  ck_assert_int_eq(squall__cost_predict(&m, &c, 1.0, &plain, &comp), 0); /* a given link too */
  squall__cost_note_codec(&m, 3, 1000, 2e-6);                            /* the smaller of the two */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  ck_assert(squall__cost_pays(comp, plain));
  squall__cost_note_codec(&m, 3, 1000, 2e-4); /* a third is smoothed, and declines */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  ck_assert(!squall__cost_pays(comp, plain));
}
END_TEST

START_TEST(test_codec_figure_is_smoothed) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  squall__cost_note_codec(&m, 5, 1000, 7e-6);
  close_to(m.spe[5], 7e-9, 1e-12, "the first call stands in");
  squall__cost_note_codec(&m, 5, 1000, 1e-6);
  close_to(m.spe[5], 1e-9, 1e-12, "the smaller of the first two");
  squall_cost k;
  memset(&k, 0, sizeof k);
  squall__cost_note_codec(&k, 5, 1000, 1e-6);
  squall__cost_note_codec(&k, 5, 1000, 9e-6); /* a slower second: the first stays */
  close_to(k.spe[5], 1e-9, 1e-12, "the smaller of the first two, the first");
  squall__cost_note_codec(&m, 5, 1000, 11e-6); /* one slow call moves it 30% of the way */
  close_to(m.spe[5], 0.7e-9 + 0.3 * 11e-9, 1e-12, "smoothed");
}
END_TEST

START_TEST(test_exploration_rhythm) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  int explored = 0;
  for (int i = 0; i < 3 * SQ_COST_EXPLORE; i++) {
    if (squall__cost_explore(&m, 1 << 20)) explored++;
    squall__cost_declined(&m, 1 << 20);
  }
  ck_assert_int_eq(explored, 3);
  /* size classes count apart */
  ck_assert_int_eq(squall__cost_explore(&m, 1 << 10), 0);
  ck_assert_int_eq(m.declined[10], 0);
}
END_TEST

/* Declined calls from..to-1 of class b under `codec`, as the engine runs
 * them: a header where the class is not settled, whose verdict declines
 * at the agreed `loss`, except on an exploring call, which compresses.
 * Adds the headers and explorations to *headers and *explored. */
static void run_codec_declined(squall_cost *m, uint64_t b, int codec, int from, int to, double loss, int *headers,
                               int *explored) {
  for (int i = from; i < to; i++) {
    int x = 0;
    if (!squall__cost_settled(m, b)) {
      x = squall__cost_explore(m, b); /* the exploring call compresses */
      ++*headers;
      *explored += x;
      squall__cost_header_verdict(m, b, !x, loss, x);
      squall__cost_count_restart(m, b, codec, x);
    }
    if (!x) squall__cost_declined(m, b);
  }
}

static void run_declined(squall_cost *m, uint64_t b, int from, int to, double loss, int *headers, int *explored) {
  run_codec_declined(m, b, squallCodecTopk, from, to, loss, headers, explored);
}

/* A model new to class b after its first `calls` declined calls at a
 * steady loss (b: 64 KiB, class 16). */
static void declined_from_new(squall_cost *m, uint64_t b, int calls, double loss, int *headers, int *explored) {
  memset(m, 0, sizeof *m);
  run_declined(m, b, 0, calls, loss, headers, explored);
}

/* The declined calls (counted from 0 here) at which class b of m explores
 * next, at a steady loss, up to `most` of them. */
static int explorations_from(squall_cost *m, uint64_t b, int codec, double loss, int *at, int most) {
  int n = 0, headers = 0, explored = 0;
  for (int i = 0; i < 4096 && n < most; i++) {
    int before = explored;
    run_codec_declined(m, b, codec, i, i + 1, loss, &headers, &explored);
    if (explored > before) at[n++] = i;
  }
  return n;
}

/* The same for a class new to the model: the period is the one whose
 * explorations cost at most 1% (loss - 1 plain calls each), and each
 * exploration at least doubles it. */
static int explorations_at(double loss, int *at, int most) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  return explorations_from(&m, 1 << 16, squallCodecTopk, loss, at, most);
}

/* A new codec's first call starts the class's count of declined calls
 * over, with its exploring period: 440 calls declined under an earlier
 * codec must not bring the new codec's first exploration early (counted
 * on, it came at the new codec's 72nd declined call, not its 512th). A
 * call of the same codec does not, nor one of a codec the class has
 * counted under before (a job alternating two codecs must still explore). */
START_TEST(test_new_codec_restarts_the_count) {
  squall_cost m;
  uint64_t b = 1 << 16;
  int headers = 0, explored = 0;
  declined_from_new(&m, b, 440, 5.0, &headers, &explored);
  squall__cost_count_restart(&m, b, squallCodecTopk, 0);
  ck_assert_int_eq(m.declined[16], 440);
  squall__cost_header_verdict(&m, b, 0, 0, 0); /* the new codec's first call compresses */
  squall__cost_count_restart(&m, b, squallCodecInt8, 0);
  int at[2];
  ck_assert_int_eq(explorations_from(&m, b, squallCodecInt8, 5.0, at, 2), 2);
  ck_assert_msg(at[0] == 511 && at[1] == 1023,
                "explorations at declined calls %d and %d of the new codec, not 511 and 1023", at[0], at[1]);
  run_codec_declined(&m, b, squallCodecInt8, 0, 100, 5.0, &headers, &explored);
  uint64_t counted = m.declined[16];
  squall__cost_count_restart(&m, b, squallCodecTopk, 0); /* back to a codec seen before */
  ck_assert_int_eq(m.declined[16], counted);
}
END_TEST

START_TEST(test_exploring_period_follows_loss) {
  static const struct {
    double loss;
    int at[5];
  } want[] = {
      {1.2, {31, 95, 223, 479, 991}},      /* doubling */
      {1.63, {63, 191, 447, 959, 1471}},   /* 64 calls keep 0.63 a call within 1% */
      {1.65, {127, 383, 895, 1407, 1919}}, /* 0.65 takes 128 */
      {2.27, {127, 383, 895, 1407, 1919}},
      {2.29, {255, 767, 1279, 1791, 2303}}, /* 1.29 takes 256 */
      {3.55, {255, 767, 1279, 1791, 2303}},
      {3.57, {511, 1023, 1535, 2047, 2559}}, /* 2.57 takes 512, the longest, at once */
      {50.0, {511, 1023, 1535, 2047, 2559}},
  };
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    int at[5];
    ck_assert_int_eq(explorations_at(want[k].loss, at, 5), 5);
    for (int i = 0; i < 5; i++)
      ck_assert_msg(at[i] == want[k].at[i], "loss %.2f: exploration %d at declined call %d, not %d", want[k].loss,
                    i + 1, at[i], want[k].at[i]);
  }
}
END_TEST

/* A loss of 5 sets the longest exploring period from the first decline
 * on: explorations at 511, then every 512th. */
START_TEST(test_large_loss_rhythm) {
  squall_cost m;
  int explored = 0, headers = 0;
  declined_from_new(&m, 1 << 16, 4096, 5.0, &headers, &explored);
  ck_assert_int_eq(explored, 8); /* 511, 1023, ... 4095 */
  /* 0 and 1 settle it; each exploration and the header after it (not
   * 4095's); a recheck half a period before each exploration (period 256):
   * 255, 767, ... 3839 */
  ck_assert_int_eq(headers, 2 + 2 * 8 - 1 + 8);
}
END_TEST

/* Hysteresis: a class whose last verdict of the model itself declined it
 * compresses again only 25% faster; one it compressed leaves at 5%; the
 * verdict is the codec's, so another codec starts at 5%. */
START_TEST(test_leave_margin) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  uint64_t b = 1 << 16;
  int fp16 = squallCodecFp16, int8 = squallCodecInt8;
  ck_assert(squall__cost_pays_class(&m, fp16, b, 1.0, 1.06));
  squall__cost_model_verdict(&m, fp16, b, 1);
  ck_assert(!squall__cost_pays_class(&m, fp16, b, 1.0, 1.2));
  ck_assert(squall__cost_pays_class(&m, fp16, b, 1.0, 1.3));
  ck_assert(squall__cost_pays_class(&m, fp16, b << 1, 1.0, 1.06)); /* size classes apart */
  ck_assert(squall__cost_pays_class(&m, int8, b, 1.0, 1.06));      /* and codecs */
  squall__cost_model_verdict(&m, fp16, b, 0);
  ck_assert(squall__cost_pays_class(&m, fp16, b, 1.0, 1.06));
}
END_TEST

/* Two declines in a row through the header settle a class until its
 * exploring call; any other verdict (a probe, a compressed call) starts
 * the count again. Every 16th declined call has its header at first; each
 * exploration that the model follows with a decline doubles the exploring
 * period, up to 32 << 4, and the recheck's with it, up to 16 << 4; both
 * count the declined calls since the class last ran compressed. */
START_TEST(test_settled_rhythm) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  uint64_t b = 1 << 20;
  ck_assert_int_eq(squall__cost_settled(&m, b), 0);
  squall__cost_header_verdict(&m, b, 1, 0, 0);
  squall__cost_count_restart(&m, b, squallCodecTopk, 0);
  squall__cost_declined(&m, b);
  ck_assert_int_eq(squall__cost_settled(&m, b), 0);
  squall__cost_header_verdict(&m, b, 0, 0, 0); /* a probe: starts again (not the count) */
  squall__cost_count_restart(&m, b, squallCodecTopk, 0);
  squall__cost_declined(&m, b);
  ck_assert_int_eq(squall__cost_settled(&m, b), 0);
  int headers = 0, explored = 0;
  run_declined(&m, b, 2, 64, 0, &headers, &explored);
  /* calls 2 and 3 settle it; the check at 15; the exploring call 31 and the
   * one after it (which settles it again); the recheck at 63, the 32nd
   * declined call after the exploration (period 64 now, the recheck's 32) */
  ck_assert_int_eq(headers, 2 + 1 + 2 + 1);
  ck_assert_int_eq(explored, 1);
  headers = 0;
  run_declined(&m, b, 64, 4096, 0, &headers, &explored);
  /* 95, 223, 479, 991 (periods 64 .. 512), then every 512th: 1503 ... 4063 */
  ck_assert_int_eq(explored, 1 + 4 + 6);
  /* each exploration and the header after it, and a recheck between
   * explorations, half their period after each from the second on: 159,
   * 351, 735, then every 512th: 1247 ... 3807 */
  ck_assert_int_eq(headers, 2 * (4 + 6) + 3 + 6);
  /* a verdict to compress starts the period over */
  squall__cost_header_verdict(&m, b, 0, 0, 0);
  ck_assert_int_eq(m.explore_shift[20], 0);
  ck_assert_int_eq(squall__cost_settled(&m, 1 << 10), 0); /* size classes count apart */
}
END_TEST

/* Whole calls measured at a size overrule the model there (not elsewhere,
 * and not when the link speed is given). */
START_TEST(test_measured_calls_win) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  feed(&m, 50e-6, 8e-3, 40);
  codec_figure(&m, 3, 1000, 2e-6);
  squall_cost_call c = half_call(); /* the model: compressing pays */
  double plain, comp;
  squall__cost_note_call(&m, -1, c.bytes_in, 5.0); /* the first of a kind is not taken */
  squall__cost_note_call(&m, -1, c.bytes_in, 0.5);
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  close_to(plain, 0.5, 1e-6, "measured plain");
  ck_assert(comp < plain);                                             /* compressed not seen: the model's */
  squall__cost_note_call(&m, 3, c.bytes_in, 0.01);                     /* the first: not taken */
  squall__cost_note_call(&m, 3, c.bytes_in + 1000, 1.8);               /* same class */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 0); /* one sample declines nothing */
  squall__cost_note_call(&m, 3, c.bytes_in, 0.9);                      /* the smaller of the first two */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  close_to(plain, 0.5, 1e-6, "measured plain");
  close_to(comp, 0.9, 1e-6, "measured compressed");
  ck_assert(comp > plain);
  ck_assert_int_eq(squall__cost_predict(&m, &c, 1.0, &plain, &comp), 1);
  ck_assert(comp < plain); /* a given link: the model */
  c.bytes_in /= 4;         /* a smaller size class: the model */
  c.n /= 4;
  c.wire /= 4;
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  ck_assert(comp < plain);
}
END_TEST

/* The compressed call's own whole calls stand in for the model's figure:
 * at its size, or where none was timed there, those of the nearest smaller
 * class timed (at most three classes down), at their time per byte; plain
 * from the model, or from its own whole calls at the size where timed;
 * not with a given link. */
START_TEST(test_compressed_calls_carry_up) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  feed(&m, 50e-3, 8e-3, 40);
  codec_figure(&m, 3, 1000, 3e-5); /* a slow codec: the model declines */
  squall_cost_call c = half_call();
  double plain, comp, model_plain, model_comp;
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &model_plain, &model_comp), 1);
  ck_assert(!squall__cost_pays(model_comp, model_plain));
  for (int i = 0; i < 2; i++) squall__cost_note_call(&m, 3, c.bytes_in / 4, 0.04); /* two classes down */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  close_to(plain, model_plain, 1e-9, "the model's plain");
  close_to(comp, 0.16, 1e-6, "compressed, per byte from two classes down");
  ck_assert(squall__cost_pays(comp, plain));
  ck_assert_int_eq(squall__cost_predict(&m, &c, 1.0, &plain, &comp), 1); /* a given link: the model */
  ck_assert(fabs(comp - 0.16) > 0.01);
  for (int i = 0; i < 2; i++) squall__cost_note_call(&m, 3, c.bytes_in / 2, 0.3); /* the nearer class */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  close_to(comp, 0.6, 1e-6, "compressed, per byte from one class down");
  for (int i = 0; i < 2; i++) squall__cost_note_call(&m, 3, c.bytes_in, 0.2); /* its own class */
  ck_assert_int_eq(squall__cost_predict(&m, &c, 0, &plain, &comp), 1);
  close_to(comp, 0.2, 1e-6, "compressed, its own class");
  close_to(plain, model_plain, 1e-9, "the model's plain");
  /* four classes up: too far; another codec's calls do not count */
  squall_cost_call far = c, other = c;
  far.bytes_in *= 16, far.n *= 16, far.wire *= 16;
  squall__cost_note_codec(&m, 3, 1000, 3e-4); /* slower still: declined at 16 times the size */
  ck_assert_int_eq(squall__cost_predict(&m, &far, 0, &plain, &comp), 1);
  ck_assert(!squall__cost_pays(comp, plain));
  for (int i = 0; i < 2; i++) squall__cost_note_call(&m, 3, far.bytes_in / 8, 0.1); /* three classes down */
  ck_assert_int_eq(squall__cost_predict(&m, &far, 0, &plain, &comp), 1);
  close_to(comp, 0.8, 1e-6, "compressed, per byte from three classes down");
  for (int i = 0; i < 3; i++) squall__cost_note_call(&m, -1, far.bytes_in, 2.0); /* plain timed there */
  ck_assert_int_eq(squall__cost_predict(&m, &far, 0, &plain, &comp), 1);
  close_to(plain, 2.0, 1e-6, "plain, measured at its size");
  close_to(comp, 0.8, 1e-6, "compressed, still from three classes down");
  other.kind = 11;
  codec_figure(&m, 11, 1000, 3e-5);
  ck_assert_int_eq(squall__cost_predict(&m, &other, 0, &plain, &comp), 1);
  close_to(comp, model_comp, 1e-9, "another codec: the model");
}
END_TEST

/* Variants of a call (two levels or flat, lossless or raw top-k slots):
 * each runs twice first, variant 0 first; one whose time has not come two
 * calls after its last run runs again (up to 4 runs); then the fastest
 * runs, and every 32nd call one of the others in turn. */
static int next_variant(squall_cost *m, int codec, unsigned allowed, uint64_t b) {
  int v = squall__cost_variant(m, codec, allowed, b);
  ck_assert_msg((v & ~(int)allowed) == 0, "variant %d outside %u", v, allowed);
  squall__cost_variant_count(m, codec, allowed, v, b);
  return v;
}

/* Plain's whole-call figure: the smaller of the first two taken samples,
 * and a slow one later counts at most 1.25 times the figure (3 times for a
 * compressed call): too slow a plain figure would compress calls that run
 * slower than plain. A faster one counts in full. */
START_TEST(test_plain_figure_errs_towards_plain) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  const uint64_t b = 1u << 20;
  const int cls = 20;
  squall__cost_note_call(&m, -1, b, 17e-3); /* the first: not taken */
  ck_assert(m.plain_spb[cls] == 0);
  squall__cost_note_call(&m, -1, b, 5.5e-3);
  squall__cost_note_call(&m, -1, b, 1.3e-3); /* the smaller of the two */
  close_to(m.plain_spb[cls] * (double)b, 1.3e-3, 1e-6, "plain: the smaller of the first two");
  squall__cost_note_call(&m, -1, b, 5.2e-3); /* slow: bounded at 1.25x */
  close_to(m.plain_spb[cls] * (double)b, 0.7 * 1.3e-3 + 0.3 * 1.25 * 1.3e-3, 1e-6, "a slow plain call");
  double v = m.plain_spb[cls] * (double)b;
  squall__cost_note_call(&m, -1, b, 0.1e-3); /* fast: in full */
  close_to(m.plain_spb[cls] * (double)b, 0.7 * v + 0.3 * 0.1e-3, 1e-6, "a fast plain call");
  ck_assert_uint_eq(m.plain_calls, 5);
  const uint64_t b2 = 1u << 22; /* another class: a slower second sample */
  squall__cost_note_call(&m, -1, b2, 60e-3);
  squall__cost_note_call(&m, -1, b2, 5.2e-3);
  squall__cost_note_call(&m, -1, b2, 22e-3); /* the first taken stays */
  close_to(m.plain_spb[22] * (double)b2, 5.2e-3, 1e-6, "plain: the first taken, the smaller");
}
END_TEST

START_TEST(test_variant_choice) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  uint64_t b = 1u << 24;
  const unsigned all = SQ_VARIANT_FLAT | SQ_VARIANT_RAW;
  ck_assert(squall__cost_call_seconds(&m, 5, b) == 0);
  squall__cost_note_call(&m, 5, b, 2.0); /* the first: connections, new pages */
  ck_assert(squall__cost_call_seconds(&m, 5, b) == 0);
  squall__cost_note_call(&m, 5, b, 0.3);
  close_to(squall__cost_call_seconds(&m, 5, b), 0.3, 1e-6, "whole call");
  squall__cost_note_call(&m, 5, b, 0.2); /* the smaller of the first two */
  close_to(squall__cost_call_seconds(&m, 5, b), 0.2, 1e-6, "the second whole call");
  squall__cost_note_call(&m, 6, b, 2.0);
  squall__cost_note_call(&m, 6, b, -1.0); /* ran, not timed: still only seen */
  squall__cost_note_call(&m, 6, b, 0.2);
  squall__cost_note_call(&m, 6, b, 0.4); /* a slower second: the first stays */
  close_to(squall__cost_call_seconds(&m, 6, b), 0.2, 1e-6, "the first whole call stays");
  squall__cost_note_call(&m, 5, b, 20.0); /* one stalled call: bounded at 3x */
  close_to(squall__cost_call_seconds(&m, 5, b), 0.7 * 0.2 + 0.3 * 0.6, 1e-6, "stalled call");
  squall__cost_note_call(&m, 5, b, 0.2);
  ck_assert(squall__cost_call_seconds(&m, 5, b / 4) == 0); /* another size class */
  ck_assert(squall__cost_call_seconds(&m, SQ_COST_KINDS, b) == 0);

  /* each variant twice, whatever the figures say meanwhile */
  const double t[SQ_COST_VARIANTS] = {0.2, 0.1, 0.3, 0.05};
  for (int v = 0; v < SQ_COST_VARIANTS; v++) {
    ck_assert_int_eq(next_variant(&m, 3, all, b), v);
    squall__cost_variant_agree(&m, 3, v, b, -1.0); /* some rank had none: still unknown */
    ck_assert_int_eq(next_variant(&m, 3, all, b), v);
    if (v != 2) squall__cost_variant_agree(&m, 3, v, b, t[v]);
  }
  /* variant 2's time never came: once more, two calls after its last run */
  ck_assert_int_eq(next_variant(&m, 3, all, b), 2);
  squall__cost_variant_agree(&m, 3, 2, b, t[2]);
  /* settled on the fastest; every EXPLORE-th call one of the others, in turn */
  int runs[SQ_COST_VARIANTS] = {0};
  for (int i = 0; i < 3 * SQ_COST_EXPLORE; i++) runs[next_variant(&m, 3, all, b)]++;
  ck_assert_int_eq(runs[3], 3 * SQ_COST_EXPLORE - 3);
  ck_assert_int_eq(runs[0] + runs[1] + runs[2], 3);
  ck_assert_int_eq(runs[0] && runs[1] && runs[2], 1);
  /* a changed figure changes the choice */
  squall__cost_variant_agree(&m, 3, 1, b, 0.01);
  ck_assert_int_eq(squall__cost_variant(&m, 3, all, b), 1);
  /* only what is allowed; other codecs and classes apart */
  ck_assert_int_eq(squall__cost_variant(&m, 3, SQ_VARIANT_RAW, b), 0); /* 0.2 against 0.3 */
  ck_assert_int_eq(squall__cost_variant(&m, 3, 0, b), 0);
  ck_assert_int_eq(squall__cost_variant(&m, 1, all, b), 0);
  ck_assert_int_eq(squall__cost_variant(&m, 3, all, b * 4), 0);
  ck_assert_int_eq(squall__cost_variant(&m, SQ_COST_CODECS, all, b), 0);
  /* other variants allowed (the nodes changed): the class starts over */
  squall__cost_variant_agree(&m, 3, 2, b, 0.001);
  ck_assert_int_eq(squall__cost_variant(&m, 3, all, b), 2);
  ck_assert_int_eq(next_variant(&m, 3, SQ_VARIANT_RAW, b), 0);
  ck_assert_int_eq(next_variant(&m, 3, SQ_VARIANT_RAW, b), 0); /* twice, the old figures gone */
  ck_assert_int_eq(next_variant(&m, 3, SQ_VARIANT_RAW, b), 2);
}
END_TEST

/* Plain probes: only where the model would compress by less than the
 * margin, from the third judged call of a class, until plain ran three
 * times (two timed), however clear the verdict in between (plain's figure
 * is the smaller of the two). And compressing pays only by a clear
 * margin. */
START_TEST(test_plain_probes) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  uint64_t b = 1u << 20;
  int probes = 0;
  for (int i = 0; i < 10; i++) {
    int p = squall__cost_probe_plain(&m, b, 1.0, 1.5); /* compressing looks 1.5x faster */
    ck_assert_int_eq(p, i >= 2 && i <= 4);
    probes += p;
    squall__cost_judged(&m, b, p);
  }
  ck_assert_int_eq(probes, 3);
  ck_assert_int_eq(squall__cost_probe_plain(&m, b * 4, 1.0, 1.5), 0); /* another class: not judged yet */
  for (int i = 10; i < 2 * SQ_COST_EXPLORE; i++) {                    /* then one in every EXPLORE judged calls, where close */
    int p = squall__cost_probe_plain(&m, b, 1.0, 1.2);
    ck_assert_int_eq(p, i % SQ_COST_EXPLORE == SQ_COST_EXPLORE - 1);
    ck_assert_int_eq(squall__cost_probe_plain(&m, b, 1.0, 1.5), 0); /* not close enough to probe again */
    squall__cost_judged(&m, b, p);
  }
  memset(&m, 0, sizeof m); /* 1.9x (fp16 on a slow link): still all three */
  probes = 0;
  for (int i = 0; i < 10; i++) {
    int p = squall__cost_probe_plain(&m, b, 1.0, 1.9);
    ck_assert_int_eq(p, i >= 2 && i <= 4);
    probes += p;
    squall__cost_judged(&m, b, p);
  }
  ck_assert_int_eq(probes, 3);
  memset(&m, 0, sizeof m);
  squall__cost_note_call(&m, -1, b * 4, 0.01); /* a plain call ran, at another size */
  for (int i = 0; i < 10; i++) {               /* 20x faster: no doubt, no probe */
    ck_assert_int_eq(squall__cost_probe_plain(&m, b, 1.0, 20.0), 0);
    squall__cost_judged(&m, b, 0);
  }
  memset(&m, 0, sizeof m); /* but no plain call ever: the link is a guess, probe anyway */
  probes = 0;
  for (int i = 0; i < 10; i++) {
    int p = squall__cost_probe_plain(&m, b, 1.0, 20.0);
    probes += p;
    squall__cost_judged(&m, b, p);
    if (p) squall__cost_note_call(&m, -1, b, 0.01);
  }
  ck_assert_int_eq(probes, 1); /* then a plain call has run: no doubt left at 20x */
  memset(&m, 0, sizeof m);     /* plain is fast: probing costs little, probe however clear the verdict */
  squall__cost_note_call(&m, -1, b * 4, 0.01);
  probes = 0;
  for (int i = 0; i < 10; i++) {
    int p = squall__cost_probe_plain(&m, b, 0.0001, 0.01);
    probes += p;
    squall__cost_judged(&m, b, p);
  }
  ck_assert_int_eq(probes, 3);
  memset(&m, 0, sizeof m); /* declined calls ran plain already: nothing to probe */
  for (int i = 0; i < 3; i++) squall__cost_judged(&m, b, 1);
  ck_assert_int_eq(squall__cost_probe_plain(&m, b, 1.0, 1.5), 0);
  /* plain calls of another origin (compression off, a warm-up), timed
   * twice at the class (three calls: the first is not taken), leave
   * nothing to probe but the exploring rhythm; once is not enough */
  memset(&m, 0, sizeof m);
  for (int i = 0; i < 2; i++) squall__cost_note_call(&m, -1, b, 0.01);
  for (int i = 0; i < 2; i++) squall__cost_judged(&m, b, 0);
  ck_assert_int_eq(squall__cost_probe_plain(&m, b, 1.0, 1.5), 1);
  squall__cost_note_call(&m, -1, b + 1000, 0.01); /* the same class */
  probes = 0;
  for (int i = 2; i < 2 * SQ_COST_EXPLORE; i++) {
    int p = squall__cost_probe_plain(&m, b, 1.0, 1.2);
    ck_assert_int_eq(p, i % SQ_COST_EXPLORE == SQ_COST_EXPLORE - 1);
    probes += p;
    squall__cost_judged(&m, b, p);
  }
  ck_assert_int_eq(probes, 2);
  ck_assert(squall__cost_pays(1.0, 1.06));
  ck_assert(!squall__cost_pays(1.0, 1.04)); /* 4% faster: not worth a lossy codec */
  ck_assert(!squall__cost_pays(1.0, 0.5));
}
END_TEST

/* A variant that never gets a figure (a route the model does not time) is
 * tried for a few calls only, then on the exploring rhythm. */
/* The device schedule's figures (squall__cost_whole): both sides need two
 * samples taken (three noted: the first is not), each the smaller of its
 * first two; another kind or class has none of its own. */
START_TEST(test_whole_calls_alone) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  double tp, tc;
  uint64_t b = 1 << 20;
  ck_assert_int_eq(squall__cost_whole(&m, 3, b, &tp, &tc), 0);
  for (int i = 0; i < 3; i++) squall__cost_note_call(&m, 3, b, i == 0 ? 9.0 : 0.02 + 0.01 * i);
  squall__cost_note_call(&m, -1, b, 9.0);
  squall__cost_note_call(&m, -1, b, 0.05);
  ck_assert_int_eq(squall__cost_whole(&m, 3, b, &tp, &tc), 0); /* plain: one sample taken */
  squall__cost_note_call(&m, -1, b, 0.04);
  ck_assert_int_eq(squall__cost_whole(&m, 3, b, &tp, &tc), 1);
  ck_assert(fabs(tc - 0.03) < 1e-6 && fabs(tp - 0.04) < 1e-6);
  ck_assert_int_eq(squall__cost_whole(&m, 4, b, &tp, &tc), 0);     /* another kind */
  ck_assert_int_eq(squall__cost_whole(&m, 3, b * 2, &tp, &tc), 0); /* another class */
  ck_assert_int_eq(squall__cost_whole(&m, SQ_COST_KINDS, b, &tp, &tc), 0);
  ck_assert_int_eq(squall__cost_class(b), 20);
  ck_assert_int_eq(squall__cost_class(b + 1), 20);
}
END_TEST

START_TEST(test_variant_unmeasured_gives_up) {
  squall_cost m;
  memset(&m, 0, sizeof m);
  uint64_t b = 1u << 20;
  int flat = 0;
  for (int i = 0; i < 4 * SQ_COST_EXPLORE; i++) {
    flat += next_variant(&m, 1, SQ_VARIANT_FLAT, b) == SQ_VARIANT_FLAT;
    squall__cost_variant_agree(&m, 1, 0, b, 0.1);
  }
  ck_assert_msg(flat == 4 + 4, "flat ran %d times: 4 tries, then 1 in 32", flat);
}
END_TEST

static Suite *costmodel_suite(void) {
  Suite *s = suite_create("costmodel");
  TCase *tc = tcase_create("model");
  tcase_add_test(tc, test_fit_recovers_the_link);
  tcase_add_test(tc, test_new_codec_restarts_the_count);
  tcase_add_test(tc, test_follows_a_changed_link);
  tcase_add_test(tc, test_reduce_scatter_call);
  tcase_add_test(tc, test_given_link_speed);
  tcase_add_test(tc, test_no_figures_no_prediction);
  tcase_add_test(tc, test_pipelined_overlap);
  tcase_add_test(tc, test_codec_figure_is_smoothed);
  tcase_add_test(tc, test_first_codec_figure_declines_nothing);
  tcase_add_test(tc, test_exploration_rhythm);
  tcase_add_test(tc, test_settled_rhythm);
  tcase_add_test(tc, test_leave_margin);
  tcase_add_test(tc, test_large_loss_rhythm);
  tcase_add_test(tc, test_exploring_period_follows_loss);
  tcase_add_test(tc, test_measured_calls_win);
  tcase_add_test(tc, test_compressed_calls_carry_up);
  tcase_add_test(tc, test_plain_figure_errs_towards_plain);
  tcase_add_test(tc, test_variant_choice);
  tcase_add_test(tc, test_variant_unmeasured_gives_up);
  tcase_add_test(tc, test_plain_probes);
  tcase_add_test(tc, test_whole_calls_alone);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(costmodel_suite()); }

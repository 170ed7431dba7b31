/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * costmodel.h - predicts, per call, whether compression beats the plain
 * all-reduce on this rank (SQUALL_COST_MODEL); the engine keeps a second
 * model of the same kind for reduce-scatters. Two measured inputs:
 *   - the link: t = alpha * collectives + beta * bytes, a least-squares fit
 *     over the communicator's own collectives (plain calls as the caller
 *     ran them, compressed calls' exchanges), recent samples weighing
 *     more; SQUALL_LINK_GBPS fixes beta instead;
 *   - the codec: host seconds per element of each codec and route, from
 *     this rank's own compressed calls.
 * Each rank predicts from its own figures; the engine shares the
 * predictions in the call header and compares the largest of each (the
 * slowest rank sets a collective's time), so every rank takes the same
 * path.
 * Knows no transport and no codec: figures in, a verdict out.
 */
#ifndef SQUALL_COSTMODEL_H
#define SQUALL_COSTMODEL_H

#include <stddef.h>
#include <stdint.h>

#define SQ_COST_CLASSES 64 /* size classes: log2 of the call's bytes */
#define SQ_COST_CODECS 8   /* squallCodec_t values */
/* kinds: codec x route slot, SQ_COST_SLOTS slots a codec (costing.c names them) */
#define SQ_COST_SLOTS 9
#define SQ_COST_KINDS (SQ_COST_CODECS * SQ_COST_SLOTS)

/* Variants of a compressed call, where they apply, chosen between by
 * whole-call times: a bit set runs the call the other way. */
#define SQ_VARIANT_FLAT 1 /* flat, where two levels apply */
#define SQ_VARIANT_RAW 2  /* top-k's slots sent raw, without the lossless stage */
#define SQ_COST_VARIANTS 4

typedef struct {
  /* the link: weighted sums of the normal equations (bytes in MB) */
  double scc, scb, sbb, sct, sbt;
  int link_samples;
  double spe[SQ_COST_KINDS];            /* seconds per element; 0: not measured */
  uint8_t codec_samples[SQ_COST_KINDS]; /* calls that gave spe (to 255) */
  /* whole calls as they ran, seconds per byte in, per size class: each
   * stands in for the model's figure where known (squall__cost_predict):
   * the model cannot see everything (ranks waiting for each other, caches,
   * a CPU shared by several ranks) */
  float plain_spb[SQ_COST_CLASSES];
  float comp_spb[SQ_COST_KINDS][SQ_COST_CLASSES];
  /* whole calls noted, per size class (to 255; the first is not taken).
   * Plain's decide plain probes, so every rank must count the same calls:
   * plain calls are collective, every rank makes them and times them. */
  uint8_t plain_seen[SQ_COST_CLASSES], comp_seen[SQ_COST_KINDS][SQ_COST_CLASSES];
  uint64_t plain_calls;               /* plain whole calls of any size: none means the link was fitted from compressed
                           calls alone */
  /* calls passed through as not paying, per size class, since its last
   * exploration or the first call of a codec new to it (counted_codecs: a
   * bit for each codec seen) */
  uint64_t declined[SQ_COST_CLASSES];
  uint8_t counted_codecs[SQ_COST_CLASSES];
  /* consecutive header verdicts of the model itself (not a probe) that
   * declined the class: from the agreed headers, the same on every rank */
  uint8_t declined_run[SQ_COST_CLASSES];
  /* exploring period SQ_COST_EXPLORE << explore_shift: doubled each time
   * an exploration is followed by the model declining again */
  uint8_t explore_shift[SQ_COST_CLASSES], explored_last[SQ_COST_CLASSES];
  /* the codec + 1 whose model's own last verdict on the class (an agreed
   * header's, not an exploration's or a plain probe's) declined it, 0 for
   * none: leaving that verdict takes SQ_COST_LEAVE_MARGIN */
  uint8_t leaning_plain[SQ_COST_CLASSES];
  /* calls the model judged (compressed, or declined), and of those the
   * ones that ran plain, per size class: for the plain probes */
  uint64_t judged[SQ_COST_CLASSES];
  uint8_t plain_runs[SQ_COST_CLASSES];
  /* variants of a compressed call (SQ_VARIANT_*): whole-call seconds per
   * byte in, per codec and size class, as agreed by the headers (the
   * largest over the ranks; 0 until every rank had a figure), and the
   * calls that could choose, per codec and class */
  float variant_spb[SQ_COST_CODECS][SQ_COST_VARIANTS][SQ_COST_CLASSES];
  uint64_t variant_calls[SQ_COST_CODECS][SQ_COST_CLASSES];
  uint8_t variant_runs[SQ_COST_CODECS][SQ_COST_VARIANTS][SQ_COST_CLASSES];  /* calls that ran it (to 255) */
  uint64_t variant_last[SQ_COST_CODECS][SQ_COST_VARIANTS][SQ_COST_CLASSES]; /* the last of them */
  uint8_t variant_mask[SQ_COST_CODECS][SQ_COST_CLASSES];                    /* the variants allowed when counted, + 1 (0: none yet):
                                                            variant numbers mean other routes under another mask */
} squall_cost;

/* The size class of a call of bytes_in: log2 of its bytes, below
 * SQ_COST_CLASSES. */
int squall__cost_class(uint64_t bytes_in);

/* What a compressed call would move. */
typedef struct {
  int kind;          /* codec x route slot, < SQ_COST_KINDS */
  size_t n;          /* elements through the codec */
  uint64_t bytes_in; /* the call's bytes (the plain all-reduce's payload) */
  uint64_t wire;     /* bytes this rank would send compressed */
  int collectives;   /* collectives the compressed call makes */
  size_t chunks;     /* pipeline chunks (codec and exchange overlap when > 1) */
  int nranks;
  /* bytes this rank sends in the plain collective (a ring all-reduce's
   * 2(P-1)/P of bytes_in, a reduce-scatter's (P-1)/P); 0: the all-reduce's */
  uint64_t plain_wire;
} squall_cost_call;

/* A collective of `collectives` calls that sent `bytes` from this rank in
 * `seconds`. */
void squall__cost_note_link(squall_cost *m, int collectives, uint64_t bytes, double seconds);

/* A whole call of bytes_in that took `seconds`: plain (kind < 0) or
 * compressed with codec kind `kind`. The first of each kind and size class
 * is not taken; the figure is the smaller of the next two (often still
 * slow), and later ones are smoothed, a slow one bounded: at 1.25 times
 * the figure for plain (a plain figure too slow compresses calls slower
 * than plain), 3 times for compressed calls. A compressed figure from
 * one sample alone declines nothing. seconds < 0:
 * a call that ran but is not timed (it touched new memory): it counts as
 * the first. */
void squall__cost_note_call(squall_cost *m, int kind, uint64_t bytes_in, double seconds);

/* A codec kind that took `seconds` for n elements. Its figure is the
 * smaller of its first two samples (smoothed from then on), and one
 * sample alone declines nothing (squall__cost_predict): the first calls
 * of a codec ran 4 to 7 times slower than the next ones (int8 at 64 MiB,
 * 4 ranks at 25 Gbit/s: 0.12 or 0.24 s of codec, then 0.03), on memory and
 * code paths they were the first to use, and one such figure made the
 * model decline int8 where it ran 2.4 times faster than plain, until the
 * class's 32nd call explored it. */
void squall__cost_note_codec(squall_cost *m, int kind, size_t n, double seconds);

/* Predicts the seconds of the plain collective (c->plain_wire) and of the
 * compressed call c. Where the link is not given, from whole calls: plain's of c's size
 * class, and the compressed call's of its kind, of c's class or failing
 * that of the nearest smaller class timed, at most SQ_COST_BELOW classes
 * (powers of two of bytes) down, at its time per byte. What those do not
 * give comes from the model; link_gbps > 0 fixes the link's bandwidth,
 * and the model then predicts both. 0 when the figures to tell are
 * missing (the codec never measured, the link never seen), or when the
 * compressed figure rests on one sample and would decline: the call is
 * compressed, to measure it again. */
#define SQ_COST_BELOW 3
int squall__cost_predict(const squall_cost *m, const squall_cost_call *c, double link_gbps, double *t_plain,
                         double *t_comp);

/* Whether compressing pays, from the agreed predictions: by at least
 * PAY_MARGIN, because a lossy codec that does not clearly win is not
 * worth its error, and whole-call figures carry a few percent of noise
 * (on shared memory, compressed and plain calls of 1 to 4 MiB came within
 * 5% of each other, and the choice then went either way). */
#define SQ_COST_PAY_MARGIN 1.05
int squall__cost_pays(double t_comp, double t_plain);

/* The verdict with hysteresis: a class whose last verdict of the model
 * itself declined it (squall__cost_model_verdict) compresses again only
 * where compressing is predicted faster by LEAVE_MARGIN. Single plain
 * calls on cores shared by several ranks vary by 2x and more (64 KiB
 * reduce-scatters on 4 ranks over 2 cores: 70 to 300 us), so a class
 * whose compressed call is about 1.5x slower than plain (int8 there)
 * flipped to compressing whenever plain's smoothed figure drifted up, and
 * each flip cost a compressed call and two headers; one class ran 6-8%
 * slower than plain. A class that compresses leaves at PAY_MARGIN, so a
 * clear loss is never kept. From agreed figures and agreed past verdicts,
 * the same on every rank. The verdict is the codec's (a squallSetConfig
 * that changes the codec starts it over). */
#define SQ_COST_LEAVE_MARGIN 1.25
int squall__cost_pays_class(const squall_cost *m, int codec, uint64_t bytes_in, double t_comp, double t_plain);
/* The model's own verdict on a class for codec (from an agreed header, not
 * forced): declined or not. */
void squall__cost_model_verdict(squall_cost *m, int codec, uint64_t bytes_in, int declined);

/* Every period-th call that the model declines (per size class, counted
 * since its last exploration or the first call of a codec new to it) is
 * compressed anyway, so that the codec's figures stay current: 1 when this
 * call is one. The period is EXPLORE at first, or longer where the loss is
 * large (squall__cost_header_verdict), and each exploration after which
 * the model declines again doubles it, up to EXPLORE << EXPLORE_SHIFTS: at
 * a small loss explorations come 32, 64, 128, ... 512 declined calls
 * apart. A lasting verdict so costs less and less (at 64 KiB on shared
 * memory one compressed call in 32 added 3% to the class's average); any
 * other verdict starts the period over (not the count: a job that changes
 * its configuration every few steps would never explore). Counted on from
 * an earlier codec's declines, a longer period could bring a new codec's
 * exploration sooner (after 440 declines under int8, top-k explored at its
 * 8th and 72nd declined calls). A codec the class has counted under
 * before does not restart it (a job that alternates two codecs every few
 * steps would never explore). Other compressed calls of the class (a
 * tensor of another type, another route) do not restart the count: they
 * do not measure the declined calls' codec kind. Depends only on past
 * decisions, the same on every rank. */
#define SQ_COST_EXPLORE 32
#define SQ_COST_EXPLORE_SHIFTS 4
int squall__cost_explore(const squall_cost *m, uint64_t bytes_in);

/* Whole calls alone, as the device schedule weighs them
 * (costing_device.c): the seconds of plain and of the compressed call of
 * codec kind `kind` at bytes_in, from this rank's own calls of its size
 * class; 1 only where each has at least two samples taken (its first
 * noted call is not taken, squall__cost_note_call), else 0. */
int squall__cost_whole(const squall_cost *m, int kind, uint64_t bytes_in, double *t_plain, double *t_comp);

/* The seconds of a whole call of bytes_in with codec kind `kind`, from
 * this rank's own calls of its size class; 0 when never measured. */
double squall__cost_call_seconds(const squall_cost *m, int kind, uint64_t bytes_in);

/* The variant to run (a subset of `allowed`, a mask of SQ_VARIANT_*
 * bits), from the agreed figures and the runs counted, both the same on
 * every rank:
 *   - each variant runs twice first, variant 0 (two levels, lossless)
 *     first (a variant's first run at a size is not timed), so that the
 *     choice settles within about 2 calls per variant;
 *   - one whose time has still not come two calls after its last run is
 *     run again, up to 4 runs in all;
 *   - then the fastest agreed one, except that every EXPLORE-th call runs
 *     one of the others in turn, so that all stay measured. */
int squall__cost_variant(const squall_cost *m, int codec, unsigned allowed, uint64_t bytes_in);
/* The header's verdict on a variant: the largest whole-call seconds over
 * the ranks, <= 0 when some rank had none (the agreed figure stays). */
void squall__cost_variant_agree(squall_cost *m, int codec, int variant, uint64_t bytes_in, double seconds);
/* A call of the class that could choose among `allowed`, and the variant
 * it ran (after the header, on every rank alike). Another mask than the
 * class's last one starts the class over: variant numbers then name other
 * routes (two levels became possible, or SQUALL_HIERARCHY changed). */
void squall__cost_variant_count(squall_cost *m, int codec, unsigned allowed, int variant, uint64_t bytes_in);

/* Plain probes: a model that never sees plain run cannot learn that it
 * guessed plain too slow. Where the model would compress, a size class
 * where plain has not run three times (declined calls count) passes its
 * calls through from the third judged one until it has (the first plain
 * call is not taken), so that whole calls of both decide from then on,
 * when:
 *   - the two predictions (seconds) are within PROBE_MARGIN of each other;
 *   - or plain is predicted under PROBE_CHEAP seconds: three probes cost
 *     little, and latency, which the model knows least, dominates there;
 *   - or no plain call has run at all: a link fitted from compressed calls
 *     of one shape alone puts their latency into the bandwidth (64 KiB
 *     top-k on shared memory predicted plain 40 times slower than it was).
 * All three run however clear the verdict after the first timed one:
 * plain's figure is the smaller of its first two timed calls
 * (squall__cost_note_call), because the first is often still slow, and a
 * verdict that rests on it alone could compress slower than plain for
 * good. A class where plain calls of any origin (passed through for
 * another reason: compression off, too small, a warm-up) have been timed
 * twice needs no first probes at all.
 * After that, every EXPLORE-th judged call of the class is a probe again
 * while plain stays cheap or the verdict within REPROBE_MARGIN, so that
 * plain's figure stays as current as the codec's: a job's first calls are
 * slow, and probes among them timed plain at 1 MiB on shared memory 3
 * times slower than it ran later, so that the class compressed at 0.8x
 * plain for good. (Not within PROBE_MARGIN: fp16 on a slow link stays near
 * 2x for good, and probing it would cost 3% of a long job.) 1 for a probe;
 * from counts and header times, the same on every rank. */
#define SQ_COST_PROBE_MARGIN 2.0
#define SQ_COST_PROBE_CHEAP 0.02
#define SQ_COST_REPROBE_MARGIN 1.25
int squall__cost_probe_plain(const squall_cost *m, uint64_t bytes_in, double t_comp, double t_plain);
/* A call the model judged: plain (declined or a probe) or compressed. */
void squall__cost_judged(squall_cost *m, uint64_t bytes_in, int plain);

/* Counts a declined call (after every rank agreed). */
void squall__cost_declined(squall_cost *m, uint64_t bytes_in);
/* A call of the class through the header whose codec every rank agreed
 * on: an exploration that ran, or the first call of a codec new to the
 * class, starts the count of declined calls toward the next exploration,
 * and the next recheck, over. */
void squall__cost_count_restart(squall_cost *m, uint64_t bytes_in, int codec, int explored);

/* Settled classes: once the agreed model itself (not a plain probe) has
 * declined a size class in SQ_COST_SETTLE headers in a row, its calls pass
 * through without a header, except the rechecks and the exploring call
 * (always a recheck), whose header starts the count again. A recheck
 * (which sees a configuration change: squallSetConfig on every rank) is
 * every RECHECK-th declined call of the count toward the next
 * exploration, and its period is half the exploring one, up to RECHECK <<
 * RECHECK_SHIFTS: at a small loss the rechecks come at declined calls 15,
 * then 31 after the first exploration, 63 after the second, ..., then
 * every 256th, and at a
 * loss above 3.56 every 256th from the first decline on (a configuration
 * change reaches a settled class within 256 of its calls). A header costs
 * a small all-reduce, which on cores shared by several ranks waits for
 * the scheduler (about 0.6 ms a call on 4 ranks over 2 cores at worst, and
 * about as long as a 64 KiB reduce-scatter at best): at 64 KiB on shared
 * memory, where a plain reduce-scatter takes 60-90 us, one header in 16
 * calls made a declined class 5-8% slower than plain, and one in 64 still
 * 2-4%. What it protects, the agreement on the configuration and on every
 * rank's allocations, a plain pass-through does not need. 1 when the call
 * of bytes_in may skip the header; from past headers only, the same on
 * every rank. */
#define SQ_COST_SETTLE 2
#define SQ_COST_RECHECK 16 /* divides SQ_COST_EXPLORE */
#define SQ_COST_RECHECK_SHIFTS 4
int squall__cost_settled(const squall_cost *m, uint64_t bytes_in);
/* After a header: whether the call was declined by the model's own verdict
 * (every other outcome, a probe included, starts the count again; an
 * exploring call leaves a settled class one header short of settled),
 * the agreed loss (the compressed call's predicted seconds over plain's; 0
 * where the verdict was forced), and whether the call was an exploring
 * call that ran compressed. Every decline sets the exploring period, where
 * that is longer, to the one whose explorations cost at most
 * EXPLORE_SHARE of the class's time, and a decline after an exploration
 * at least doubles it: an exploration costs about (loss - 1) plain calls,
 * and at 64 KiB on shared memory, where a plain reduce-scatter takes 60-90
 * us, one top-k exploration among 80 calls made them 9% slower. So the
 * first exploration comes at declined call 31 where the loss is at most
 * 1.32, 63 up to 1.64, 127 up to 2.28, 255 up to 3.56, else 511, and
 * every 512th at the longest. (The headers around an exploration, about a
 * plain call each at 64 KiB, are not counted.) The first decline's loss
 * rests on two timed compressed calls at least (squall__cost_predict):
 * where it set only the period after an exploration, a class's first
 * calls held an exploration and its headers (top-k at 64 KiB on shared
 * memory, 4 ranks, the 80 calls after 5 warm-ups: 0.948 of plain, their
 * mean 0.912; from the first decline 0.970 and 0.961;
 * bench/results/2026-12-07/reducescatter-40-decline).
 * From agreed predictions, the same on every rank. */
#define SQ_COST_EXPLORE_SHARE 0.01
void squall__cost_header_verdict(squall_cost *m, uint64_t bytes_in, int model_declined, double loss, int explored);

#endif

/*
 * costmodel.h - predicts, per call, whether compression beats the plain
 * all-reduce on this rank (SQUALL_COST_MODEL). Two measured inputs:
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

#define SQ_COST_KINDS 64   /* codec x route slots (engine.c maps them) */
#define SQ_COST_CLASSES 64 /* size classes: log2 of the call's bytes */

typedef struct {
  /* the link: weighted sums of the normal equations (bytes in MB) */
  double scc, scb, sbb, sct, sbt;
  int link_samples;
  double spe[SQ_COST_KINDS]; /* seconds per element; 0: not measured */
  /* whole calls as they ran, seconds per byte in, per size class: where
   * both are known they overrule the model, which cannot see everything
   * (ranks waiting for each other, caches, a CPU shared by several ranks) */
  float plain_spb[SQ_COST_CLASSES];
  float comp_spb[SQ_COST_KINDS][SQ_COST_CLASSES];
  uint64_t declined[SQ_COST_CLASSES]; /* calls passed through as not paying, per size class */
  /* two levels or flat, where both apply: the agreed choice per codec and
   * size class (1 = flat), and the calls that could choose, per class */
  uint8_t level_flat[SQ_COST_KINDS][SQ_COST_CLASSES];
  uint64_t level_calls[SQ_COST_CLASSES];
} squall_cost;

/* What a compressed call would move. */
typedef struct {
  int kind;           /* codec x route slot, < SQ_COST_KINDS */
  size_t n;           /* elements through the codec */
  uint64_t bytes_in;  /* the call's bytes (the plain all-reduce's payload) */
  uint64_t wire;      /* bytes this rank would send compressed */
  int collectives;    /* collectives the compressed call makes */
  size_t chunks;      /* pipeline chunks (codec and exchange overlap when > 1) */
  int nranks;
} squall_cost_call;

/* A collective of `collectives` calls that sent `bytes` from this rank in
 * `seconds`. */
void squall__cost_note_link(squall_cost *m, int collectives, uint64_t bytes, double seconds);

/* A whole call of bytes_in that took `seconds`: plain (kind < 0) or
 * compressed with codec kind `kind`. */
void squall__cost_note_call(squall_cost *m, int kind, uint64_t bytes_in, double seconds);

/* A codec kind that took `seconds` for n elements. */
void squall__cost_note_codec(squall_cost *m, int kind, size_t n, double seconds);

/* Predicts the seconds of the plain all-reduce and of the compressed call
 * c: from whole calls of c's size class when both kinds were measured and
 * the link is not given, else from the model; link_gbps > 0 fixes the
 * link's bandwidth. 0 when
 * the figures to tell are missing (the codec never measured, the link
 * never seen). */
int squall__cost_predict(const squall_cost *m, const squall_cost_call *c, double link_gbps, double *t_plain,
                         double *t_comp);

/* Every EXPLORE-th call that the model declines (per size class) is
 * compressed anyway, so that the codec's figures stay current: 1 when
 * this call is one. Depends only on past decisions, the same on every
 * rank. */
#define SQ_COST_EXPLORE 32
int squall__cost_explore(const squall_cost *m, uint64_t bytes_in);

/* Two levels or flat, where both apply (kind_tl: the codec's two-level
 * slot). squall__cost_level_flat: 1 when this call runs flat, from the
 * agreed choice, except that every EXPLORE-th call of a class runs the
 * other way so that both stay measured (the same on every rank). */
int squall__cost_level_flat(const squall_cost *m, int kind_tl, uint64_t bytes_in);
/* Whole-call times of both at this size (seconds): 0 when one is unknown. */
int squall__cost_level_predict(const squall_cost *m, int kind_tl, int kind_flat, uint64_t bytes_in,
                               double *t_two_level, double *t_flat);
/* The agreed choice for the class, and the call counted for the rhythm. */
void squall__cost_level_set(squall_cost *m, int kind_tl, uint64_t bytes_in, int flat);
void squall__cost_level_count(squall_cost *m, uint64_t bytes_in);

/* Counts a declined call, or an exploring one (after every rank agreed). */
void squall__cost_declined(squall_cost *m, uint64_t bytes_in);

#endif

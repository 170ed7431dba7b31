/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * costmodel.c - see costmodel.h. The link fit: minimise
 * sum w_i (t_i - alpha c_i - beta b_i)^2 with weights that halve every
 * ~14 samples, so that a link that changes (congestion, another job) is
 * followed within a few dozen calls.
 */
#include "engine/costmodel.h"

#include <math.h>

#define FORGET 0.95
#define MB 1e6

static int size_class(uint64_t bytes) {
  int c = 0;
  while (bytes > 1 && c < SQ_COST_CLASSES - 1) bytes >>= 1, c++;
  return c;
}

int squall__cost_class(uint64_t bytes_in) { return size_class(bytes_in); }

void squall__cost_note_link(squall_cost *m, int collectives, uint64_t bytes, double seconds) {
  if (!(seconds >= 0) || collectives < 1) return;
  double c = collectives, b = (double)bytes / MB;
  m->scc = FORGET * m->scc + c * c;
  m->scb = FORGET * m->scb + c * b;
  m->sbb = FORGET * m->sbb + b * b;
  m->sct = FORGET * m->sct + c * seconds;
  m->sbt = FORGET * m->sbt + b * seconds;
  m->link_samples++;
}

/* Whole calls: the first of a kind at a size is not taken (it pays what
 * later calls do not: connections made on first use, pages touched for the
 * first time), and the figure is the smaller of the next two: the second
 * is often still slow (a compressed call's also gives the codec's first
 * figure, squall__cost_note_codec; plain calls of 1 MiB on 4 ranks at 25
 * Gbit/s took 17, 5.5, then 1.3 ms). Later ones are smoothed, each
 * counting at most a bounded multiple of the figure, so that one stalled
 * call moves it a little and a lasting change still comes through within
 * a few calls. Plain's bound is the tighter one: a plain figure too slow
 * compresses calls that run slower than plain, the one error the model
 * must not make (the first plain call after compressed ones at that size
 * took 4 times the others, and at 3 times the figure it moved plain's by
 * 60%: fp16 then compressed at 0.8x plain), whereas a compressed figure too
 * slow only passes calls through until an exploration. A plain figure
 * still follows a link that became three times slower within about 15
 * plain calls (7.5% a call); a faster call counts in full. */
#define SLOW_CALL 3.0f
#define SLOW_PLAIN_CALL 1.25f
void squall__cost_note_call(squall_cost *m, int kind, uint64_t bytes_in, double seconds) {
  if (kind >= SQ_COST_KINDS || bytes_in == 0 || seconds != seconds) return;
  int cls = size_class(bytes_in);
  if (kind < 0) m->plain_calls++;
  uint8_t *seen = kind < 0 ? &m->plain_seen[cls] : &m->comp_seen[kind][cls];
  if (!*seen || seconds < 0) { /* the first, or one that ran but was not timed */
    if (!*seen) *seen = 1;
    return;
  }
  float x = (float)(seconds / (double)bytes_in);
  float *v = kind < 0 ? &m->plain_spb[cls] : &m->comp_spb[kind][cls];
  float bound = kind < 0 ? SLOW_PLAIN_CALL : SLOW_CALL;
  if (*v <= 0) *v = x;
  else if (*seen == 2) *v = fminf(*v, x);
  else *v = 0.7f * *v + 0.3f * fminf(x, bound * *v);
  if (*seen < UINT8_MAX) ++*seen;
}

/* Whole calls taken, from a count of those noted (the first is not). */
static int taken(uint8_t seen) { return seen > 1 ? seen - 1 : 0; }

void squall__cost_note_codec(squall_cost *m, int kind, size_t n, double seconds) {
  if (kind < 0 || kind >= SQ_COST_KINDS || n == 0 || !(seconds >= 0)) return;
  double x = seconds / (double)n;
  /* the smaller of the first two samples, smoothed from then on */
  if (m->spe[kind] <= 0) m->spe[kind] = x;
  else if (m->codec_samples[kind] == 1) m->spe[kind] = fmin(m->spe[kind], x);
  else m->spe[kind] = 0.7 * m->spe[kind] + 0.3 * x;
  if (m->codec_samples[kind] < UINT8_MAX) m->codec_samples[kind]++;
}

/* alpha (seconds per collective) and beta (seconds per MB); 0 with fewer
 * than two samples (and no given speed). */
static int link_fit(const squall_cost *m, double link_gbps, double *alpha, double *beta) {
  if (link_gbps > 0) { /* given: only the latency is fitted */
    *beta = 8.0 * MB / (link_gbps * 1e9);
    *alpha = m->link_samples && m->scc > 0 ? fmax(0.0, (m->sct - *beta * m->scb) / m->scc) : 0.0;
    return 1;
  }
  if (m->link_samples < 2) return 0;
  double det = m->scc * m->sbb - m->scb * m->scb;
  if (det > 1e-9 * m->scc * m->sbb) {
    *alpha = (m->sct * m->sbb - m->sbt * m->scb) / det;
    *beta = (m->scc * m->sbt - m->scb * m->sct) / det;
  } else { /* every sample of one shape: bandwidth only */
    *alpha = 0;
    *beta = m->sbb > 0 ? m->sbt / m->sbb : 0;
  }
  if (*alpha < 0) { /* noise: refit the bandwidth through the origin */
    *alpha = 0;
    *beta = m->sbb > 0 ? m->sbt / m->sbb : 0;
  }
  /* Exchanges that took no time (a rank that spends its whole call in the
   * codec: the last rank of 64 KiB top-k calls on shared memory) make the
   * link look free. Say so rather than nothing: a rank without figures
   * makes every rank compress for good, while a cheap plain sends the class
   * to the plain probes and then to whole-call times. */
  if (*beta < 0) { /* and the latency alone explains the times */
    *beta = 0;
    *alpha = m->scc > 0 ? fmax(0.0, m->sct / m->scc) : 0.0;
  }
  return 1;
}

/* The size class whose whole compressed calls of kind `kind` stand for a
 * call of class cls: cls itself, or else the nearest smaller one timed, at
 * most SQ_COST_BELOW classes down; -1 for none. The link's fit serves
 * plain well (one collective of known bytes), but a compressed route it
 * has not seen at this size less so: at 25 Gbit/s, where 4 ranks on 2
 * cores make the "link" the CPU, it put int8's pipelined 64 MiB call (20
 * collectives) at 0.34 s, which took 0.12 s, against plain's 0.28. A
 * smaller class's time per byte carries its fixed costs, so it errs
 * towards plain. */
static int comp_class(const squall_cost *m, int kind, int cls) {
  for (int b = cls; b >= 0 && b >= cls - SQ_COST_BELOW; b--)
    if (m->comp_spb[kind][b] > 0) return b;
  return -1;
}

int squall__cost_predict(const squall_cost *m, const squall_cost_call *c, double link_gbps, double *t_plain,
                         double *t_comp) {
  double alpha = 0, beta = 0;
  *t_plain = *t_comp = 0;
  if (c->kind < 0 || c->kind >= SQ_COST_KINDS || m->spe[c->kind] <= 0) return 0; /* measure it first */
  int cls = size_class(c->bytes_in);
  double bytes = (double)c->bytes_in;
  /* Whole calls, where the link is not given (a given speed is the user's
   * word on the link: it wins over what this run saw): plain's at this
   * size, the compressed call's at this size or a smaller one. */
  int measured = link_gbps <= 0;
  int from = measured ? comp_class(m, c->kind, cls) : -1;
  int plain_known = measured && m->plain_spb[cls] > 0;
  if ((!plain_known || from < 0) && !link_fit(m, link_gbps, &alpha, &beta)) return 0;
  double p = c->nranks;
  double ring = p > 1 ? 2 * (p - 1) / p * bytes : 0;
  if (c->plain_wire) ring = (double)c->plain_wire; /* a reduce-scatter's: half of that */
  *t_plain = plain_known ? m->plain_spb[cls] * bytes : alpha + beta * ring / MB;
  int first; /* the compressed figure is a first one, which declines nothing */
  if (from >= 0) {
    *t_comp = m->comp_spb[c->kind][from] * bytes;
    first = taken(m->comp_seen[c->kind][from]) < 2;
  } else {
    double xfer = alpha * c->collectives + beta * (double)c->wire / MB;
    double codec = m->spe[c->kind] * (double)c->n;
    /* pipelined: the longer of the two, plus one chunk of the other */
    *t_comp = c->chunks > 1 ? fmax(xfer, codec) + fmin(xfer, codec) / (double)c->chunks : xfer + codec;
    first = m->codec_samples[c->kind] < 2;
  }
  if (first && !squall__cost_pays_class(m, c->kind / SQ_COST_SLOTS, c->bytes_in, *t_comp, *t_plain)) {
    *t_plain = *t_comp = 0; /* measure it again */
    return 0;
  }
  return 1;
}

int squall__cost_pays(double t_comp, double t_plain) { return t_comp * SQ_COST_PAY_MARGIN < t_plain; }

int squall__cost_pays_class(const squall_cost *m, int codec, uint64_t bytes_in, double t_comp, double t_plain) {
  double margin = m->leaning_plain[size_class(bytes_in)] == codec + 1 ? SQ_COST_LEAVE_MARGIN : SQ_COST_PAY_MARGIN;
  return t_comp * margin < t_plain;
}

void squall__cost_model_verdict(squall_cost *m, int codec, uint64_t bytes_in, int declined) {
  m->leaning_plain[size_class(bytes_in)] = (uint8_t)(declined ? codec + 1 : 0);
}

int squall__cost_explore(const squall_cost *m, uint64_t bytes_in) {
  int cls = size_class(bytes_in);
  uint64_t period = (uint64_t)SQ_COST_EXPLORE << m->explore_shift[cls];
  return m->declined[cls] % period == period - 1;
}

void squall__cost_declined(squall_cost *m, uint64_t bytes_in) { m->declined[size_class(bytes_in)]++; }
void squall__cost_count_restart(squall_cost *m, uint64_t bytes_in, int codec, int explored) {
  int cls = size_class(bytes_in);
  unsigned bit = codec >= 0 && codec < SQ_COST_CODECS ? 1u << codec : 0;
  if (explored || (bit & ~(unsigned)m->counted_codecs[cls])) m->declined[cls] = 0;
  m->counted_codecs[cls] |= (uint8_t)bit;
}

_Static_assert(SQ_COST_EXPLORE % SQ_COST_RECHECK == 0, "every exploring call must be a header call");
_Static_assert(SQ_COST_RECHECK_SHIFTS <= SQ_COST_EXPLORE_SHIFTS, "every exploring call must be a header call");
int squall__cost_settled(const squall_cost *m, uint64_t bytes_in) {
  int cls = size_class(bytes_in);
  int shift = m->explore_shift[cls] < SQ_COST_RECHECK_SHIFTS ? m->explore_shift[cls] : SQ_COST_RECHECK_SHIFTS;
  uint64_t period = (uint64_t)SQ_COST_RECHECK << shift; /* divides the exploring period, 32 << explore_shift */
  return m->declined_run[cls] >= SQ_COST_SETTLE && m->declined[cls] % period != period - 1;
}

/* The exploring shift whose period keeps an exploration's extra time, the
 * compressed call's (loss - 1) plain calls, within SQ_COST_EXPLORE_SHARE of
 * the class's calls. */
static int shift_for_loss(double loss) {
  int s = 0;
  while (s < SQ_COST_EXPLORE_SHIFTS && (double)(SQ_COST_EXPLORE << s) * SQ_COST_EXPLORE_SHARE < loss - 1.0) s++;
  return s;
}

void squall__cost_header_verdict(squall_cost *m, uint64_t bytes_in, int model_declined, double loss, int explored) {
  int cls = size_class(bytes_in);
  uint8_t *run = &m->declined_run[cls], *shift = &m->explore_shift[cls];
  if (model_declined) {
    if (*run < UINT8_MAX) ++*run;
    int want = shift_for_loss(loss);
    if (m->explored_last[cls] && *shift + 1 > want) /* the exploration changed nothing */
      want = *shift + 1 < SQ_COST_EXPLORE_SHIFTS ? *shift + 1 : SQ_COST_EXPLORE_SHIFTS;
    if (want > *shift) *shift = (uint8_t)want;
  } else if (explored) {
    /* a settled class needs one header after its exploration, which weighs
     * the new figure, to settle again */
    *run = *run >= SQ_COST_SETTLE ? SQ_COST_SETTLE - 1 : 0;
  } else {
    *run = 0;
    *shift = 0;
  }
  m->explored_last[cls] = (uint8_t)(explored != 0);
}

#define PROBE_RUNS 3 /* two samples: its first is not taken */
int squall__cost_probe_plain(const squall_cost *m, uint64_t bytes_in, double t_comp, double t_plain) {
  int cls = size_class(bytes_in);
  int cheap = t_plain < SQ_COST_PROBE_CHEAP;
  if (m->judged[cls] < 2) return 0;
  if (m->plain_runs[cls] < PROBE_RUNS && taken(m->plain_seen[cls]) < PROBE_RUNS - 1) {
    return t_comp * SQ_COST_PROBE_MARGIN > t_plain || cheap || m->plain_calls == 0;
  }
  return m->judged[cls] % SQ_COST_EXPLORE == SQ_COST_EXPLORE - 1 && (t_comp * SQ_COST_REPROBE_MARGIN > t_plain || cheap);
}

void squall__cost_judged(squall_cost *m, uint64_t bytes_in, int plain) {
  int cls = size_class(bytes_in);
  m->judged[cls]++;
  if (plain && m->plain_runs[cls] < UINT8_MAX) m->plain_runs[cls]++;
}

int squall__cost_whole(const squall_cost *m, int kind, uint64_t bytes_in, double *t_plain, double *t_comp) {
  *t_plain = *t_comp = 0;
  if (kind < 0 || kind >= SQ_COST_KINDS || bytes_in == 0) return 0;
  int cls = size_class(bytes_in);
  if (taken(m->plain_seen[cls]) < 2 || taken(m->comp_seen[kind][cls]) < 2) return 0;
  *t_plain = m->plain_spb[cls] * (double)bytes_in;
  *t_comp = m->comp_spb[kind][cls] * (double)bytes_in;
  return *t_plain > 0 && *t_comp > 0;
}

/* ------------------------------------------------------------ variants */
double squall__cost_call_seconds(const squall_cost *m, int kind, uint64_t bytes_in) {
  if (kind < 0 || kind >= SQ_COST_KINDS) return 0;
  return m->comp_spb[kind][size_class(bytes_in)] * (double)bytes_in;
}

static int codec_ok(int codec) { return codec >= 0 && codec < SQ_COST_CODECS; }

/* Runs of each variant before the choice: its first is not taken (see
 * squall__cost_note_call). A variant whose time still has not come two
 * calls after its last run (a header carries a call's time to the next
 * call, which chooses before its header: one call of lag) is run again, up
 * to RETRY_RUNS in all: its runs touched new memory, or a rank missed it. */
#define SETTLE_RUNS 2
#define RETRY_RUNS 4

int squall__cost_variant(const squall_cost *m, int codec, unsigned allowed, uint64_t bytes_in) {
  if (!codec_ok(codec)) return 0;
  int cls = size_class(bytes_in);
  if (m->variant_mask[codec][cls] != allowed + 1) return 0; /* a class new to these variants */
  uint64_t calls = m->variant_calls[codec][cls];
  int vs[SQ_COST_VARIANTS], nv = 0;
  for (int v = 0; v < SQ_COST_VARIANTS; v++)
    if (!(v & ~(int)allowed)) vs[nv++] = v;
  for (int i = 0; i < nv; i++)
    if (m->variant_runs[codec][vs[i]][cls] < SETTLE_RUNS) return vs[i];
  int best = 0, others[SQ_COST_VARIANTS], n_others = 0;
  for (int i = 0; i < nv; i++) {
    int v = vs[i];
    float t = m->variant_spb[codec][v][cls], t_best = m->variant_spb[codec][best][cls];
    if (t <= 0 && m->variant_runs[codec][v][cls] < RETRY_RUNS && calls >= m->variant_last[codec][v][cls] + 2)
      return v;
    if (t > 0 && (t_best <= 0 || t < t_best)) best = v;
  }
  for (int i = 0; i < nv; i++)
    if (vs[i] != best) others[n_others++] = vs[i];
  if (n_others && calls % SQ_COST_EXPLORE == SQ_COST_EXPLORE - 1)
    return others[(calls / SQ_COST_EXPLORE) % (uint64_t)n_others];
  return best;
}

void squall__cost_variant_agree(squall_cost *m, int codec, int variant, uint64_t bytes_in, double seconds) {
  if (!codec_ok(codec) || variant < 0 || variant >= SQ_COST_VARIANTS || !(seconds > 0) || bytes_in == 0) return;
  m->variant_spb[codec][variant][size_class(bytes_in)] = (float)(seconds / (double)bytes_in);
}

void squall__cost_variant_count(squall_cost *m, int codec, unsigned allowed, int variant, uint64_t bytes_in) {
  if (!codec_ok(codec) || variant < 0 || variant >= SQ_COST_VARIANTS) return;
  int cls = size_class(bytes_in);
  if (m->variant_mask[codec][cls] != allowed + 1) { /* the variants mean other calls now: start over */
    for (int v = 0; v < SQ_COST_VARIANTS; v++) {
      m->variant_spb[codec][v][cls] = 0;
      m->variant_runs[codec][v][cls] = 0;
      m->variant_last[codec][v][cls] = 0;
    }
    m->variant_calls[codec][cls] = 0;
    m->variant_mask[codec][cls] = (uint8_t)(allowed + 1);
  }
  m->variant_last[codec][variant][cls] = m->variant_calls[codec][cls]++;
  if (m->variant_runs[codec][variant][cls] < UINT8_MAX) m->variant_runs[codec][variant][cls]++;
}

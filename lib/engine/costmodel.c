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

void squall__cost_note_call(squall_cost *m, int kind, uint64_t bytes_in, double seconds) {
  if (kind >= SQ_COST_KINDS || bytes_in == 0 || !(seconds >= 0)) return;
  float x = (float)(seconds / (double)bytes_in);
  float *v = kind < 0 ? &m->plain_spb[size_class(bytes_in)] : &m->comp_spb[kind][size_class(bytes_in)];
  *v = *v > 0 ? 0.7f * *v + 0.3f * x : x;
}

void squall__cost_note_codec(squall_cost *m, int kind, size_t n, double seconds) {
  if (kind < 0 || kind >= SQ_COST_KINDS || n == 0 || !(seconds >= 0)) return;
  double x = seconds / (double)n;
  m->spe[kind] = m->spe[kind] > 0 ? 0.7 * m->spe[kind] + 0.3 * x : x;
}

/* alpha (seconds per collective) and beta (seconds per MB); 0 when the
 * samples cannot tell. */
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
  return *beta > 0;
}

int squall__cost_predict(const squall_cost *m, const squall_cost_call *c, double link_gbps, double *t_plain,
                         double *t_comp) {
  double alpha, beta;
  *t_plain = *t_comp = 0;
  if (c->kind < 0 || c->kind >= SQ_COST_KINDS || m->spe[c->kind] <= 0) return 0; /* measure it first */
  int cls = size_class(c->bytes_in);
  /* both seen at this size, and the link not given (a given speed is the
   * user's word on the link: it wins over what this run saw) */
  if (link_gbps <= 0 && m->plain_spb[cls] > 0 && m->comp_spb[c->kind][cls] > 0) {
    *t_plain = m->plain_spb[cls] * (double)c->bytes_in;
    *t_comp = m->comp_spb[c->kind][cls] * (double)c->bytes_in;
    return 1;
  }
  if (!link_fit(m, link_gbps, &alpha, &beta)) return 0;
  double p = c->nranks;
  double ring = p > 1 ? 2 * (p - 1) / p * (double)c->bytes_in : 0;
  *t_plain = alpha + beta * ring / MB;
  double xfer = alpha * c->collectives + beta * (double)c->wire / MB;
  double codec = m->spe[c->kind] * (double)c->n;
  /* pipelined: the longer of the two, plus one chunk of the other */
  *t_comp = c->chunks > 1 ? fmax(xfer, codec) + fmin(xfer, codec) / (double)c->chunks : xfer + codec;
  return 1;
}

int squall__cost_explore(const squall_cost *m, uint64_t bytes_in) {
  return m->declined[size_class(bytes_in)] % SQ_COST_EXPLORE == SQ_COST_EXPLORE - 1;
}

void squall__cost_declined(squall_cost *m, uint64_t bytes_in) { m->declined[size_class(bytes_in)]++; }

/* ------------------------------------------------- two levels or flat */
static int kind_ok(int kind) { return kind >= 0 && kind < SQ_COST_KINDS; }

int squall__cost_level_flat(const squall_cost *m, int kind_tl, uint64_t bytes_in) {
  if (!kind_ok(kind_tl)) return 0;
  int cls = size_class(bytes_in), flat = m->level_flat[kind_tl][cls];
  int explore = m->level_calls[cls] % SQ_COST_EXPLORE == SQ_COST_EXPLORE - 1;
  return explore ? !flat : flat;
}

int squall__cost_level_predict(const squall_cost *m, int kind_tl, int kind_flat, uint64_t bytes_in,
                               double *t_two_level, double *t_flat) {
  if (!kind_ok(kind_tl) || !kind_ok(kind_flat)) return 0;
  int cls = size_class(bytes_in);
  if (!(m->comp_spb[kind_tl][cls] > 0 && m->comp_spb[kind_flat][cls] > 0)) return 0;
  *t_two_level = m->comp_spb[kind_tl][cls] * (double)bytes_in;
  *t_flat = m->comp_spb[kind_flat][cls] * (double)bytes_in;
  return 1;
}

void squall__cost_level_set(squall_cost *m, int kind_tl, uint64_t bytes_in, int flat) {
  if (kind_ok(kind_tl)) m->level_flat[kind_tl][size_class(bytes_in)] = flat ? 1 : 0;
}

void squall__cost_level_count(squall_cost *m, uint64_t bytes_in) { m->level_calls[size_class(bytes_in)]++; }

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * xchg_seg.h - inside the exchange core (xchg_seg.c, xchg_coll.c): the
 * layout of a communicator's shared segment and the barrier the
 * collectives meet at. The header is followed by DNX_MAX_RANKS slots of
 * DNX_SLOT_BYTES (the file is sparse: only touched pages take memory).
 */
#ifndef DEVNCCL_XCHG_SEG_H
#define DEVNCCL_XCHG_SEG_H

#include <stdatomic.h>

#include "xchg.h"

#define DNX_HDR_BYTES ((size_t)8192)

typedef struct {
  _Atomic int nranks;                          /* the first joiner's; the others must agree */
  _Atomic int pid[DNX_MAX_RANKS];              /* each rank's process, watched by the waiting ones */
  _Atomic uint64_t arrived[DNX_MAX_RANKS];     /* data barriers passed, per rank */
  _Atomic uint64_t ctl_arrived[DNX_MAX_RANKS]; /* control barriers (join, split) */
  _Atomic int aborted;                         /* 1: poisoned, abort_msg says why (2: being written) */
  char abort_msg[512];
  int64_t ctl[DNX_MAX_RANKS][2];
} dnx_hdr;
_Static_assert(sizeof(dnx_hdr) <= DNX_HDR_BYTES, "the header fits its page");

struct dnx_seg {
  dnx_hdr *hdr;
  char *base;
  size_t size;
  int rank, nranks;
  uint64_t seq, ctl_seq; /* barriers this rank has passed */
  double limit;          /* FAKENCCL_TIMEOUT when it joined, seconds */
  char name[DNX_NAME_MAX];
};

void *dnx__slot(const dnx_seg *s, int rank);
size_t dnx__slot_offset(int rank); /* in the segment file */
/* Waits for every rank at the next data barrier; what names it in errors. */
int dnx__sync(dnx_seg *s, const char *what, char *err, size_t len);
double dnx__now(void);
void dnx__fmt(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * preload_group.c - the user's ncclGroupStart/ncclGroupEnd as the NCCL
 * interposer sees them, per thread. NCCL runs a group's calls as one, at
 * the outermost ncclGroupEnd, which returns once they are enqueued; squall
 * keeps that where it can:
 *
 *   - a group that holds nothing but ncclAllReduce calls on ONE blocking
 *     communicator: each call is recorded, not run; the outermost
 *     ncclGroupEnd first closes NCCL's group (empty: the interposer kept
 *     the calls out of it), then runs each through squall, in the order
 *     issued, on its own stream, as if ungrouped. With one communicator
 *     this thread drives one rank of it, so the calls one after another
 *     mean what the group meant: on every rank they are the same calls in
 *     the same order, on the streams the caller named;
 *   - anything else passes through into NCCL's group, exactly as without
 *     squall (the reason goes with each call, and the communicator's rank
 *     0 says it once): another collective or a send/recv (the recorded
 *     all-reduces enter NCCL's group first, in their order, the moment it
 *     arrives, so that the group's order is the caller's); all-reduces on
 *     several communicators (one thread driving several GPUs must hand
 *     them to NCCL together, or the first waits for the others: NCCL's
 *     "group calls"); a non-blocking communicator (its calls may answer
 *     ncclInProgress); a group ended by ncclGroupSimulateEnd (NCCL
 *     estimates, runs nothing); a record that cannot grow.
 *
 * Every rank must see the same group on a communicator for all of them to
 * take the same path: NCCL asks the same collectives in the same order of
 * every rank, so a group differs only where it mixes in send/recv or
 * calls on other communicators on some ranks only (squall(7), GROUPS).
 */
#include "common/internal.h"

#include <stdlib.h>

#include "api/api_nccl.h"
#include "interpose/preload_group.h"

static __thread struct {
  int depth;
  const char *why; /* non-NULL: this group passes through, and why */
  char why_buf[96];
  squall_group_call *calls;
  int n, cap;
  ncclResult_t first_error; /* of a recorded call run into NCCL's group */
} g;

int squall__group_depth(void) { return g.depth; }

void squall__group_started(void) {
  if (g.depth++ == 0) {
    g.why = NULL;
    g.n = 0;
    g.first_error = ncclSuccess;
  }
}

/* From now on the group passes through: the recorded calls enter NCCL's
 * group first, in their order. */
static void pass_from_now(const char *why, squall_group_run_fn run) {
  if (g.why) return;
  snprintf(g.why_buf, sizeof g.why_buf, "%s", why);
  g.why = g.why_buf;
  for (int i = 0; i < g.n; i++) {
    ncclResult_t r = run(&g.calls[i], g.why);
    if (g.first_error == ncclSuccess && r != ncclSuccess) g.first_error = r;
  }
  g.n = 0;
}

static int record(const squall_group_call *c) {
  if (g.n == g.cap) {
    int cap = g.cap ? 2 * g.cap : 16;
    squall_group_call *more = realloc(g.calls, (size_t)cap * sizeof *more);
    if (more == NULL) return 0;
    g.calls = more;
    g.cap = cap;
  }
  g.calls[g.n++] = *c;
  return 1;
}

ncclResult_t squall__group_allreduce(const squall_group_call *c, squall_group_run_fn run) {
  if (!g.why) {
    if (g.n > 0 && g.calls[0].comm != c->comm)
      pass_from_now("holds all-reduces on several communicators", run);
    else if (squall__nccl_is_nonblocking(c->comm))
      pass_from_now("is on a non-blocking communicator", run);
    else if (record(c))
      return ncclSuccess;
    else
      pass_from_now("could not be recorded (out of memory)", run);
  }
  return run(c, g.why);
}

void squall__group_other(const char *fn, squall_group_run_fn run) {
  if (g.depth == 0 || g.why) return;
  char why[96];
  snprintf(why, sizeof why, "mixes ncclAllReduce with %s", fn);
  pass_from_now(why, run);
}

/* The recorded calls of a closed group, through squall in their order.
 * A failure does not stop the rest: every rank runs the same calls, so
 * stopping where one rank failed could leave its peers waiting in the
 * next; the first failure is returned, as NCCL returns a group's. */
static ncclResult_t run_recorded(squall_group_call *calls, int n, squall_group_run_fn run) {
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n; i++) {
    ncclResult_t r = run(&calls[i], NULL);
    if (first == ncclSuccess && r != ncclSuccess) first = r;
  }
  return first;
}

ncclResult_t squall__group_end(squall_group_end_fn end, void *arg, int simulate, squall_group_run_fn run) {
  if (g.depth == 0) return end(arg); /* NCCL reports the stray end */
  if (g.depth == 1 && simulate) pass_from_now("is ended by ncclGroupSimulateEnd", run);
  /* NCCL leaves a level on every end inside a group, whatever it returns */
  ncclResult_t r = end(arg);
  if (--g.depth > 0) return r;
  int n = g.n;
  g.n = 0;
  if (g.first_error != ncclSuccess) return g.first_error;
  if (r != ncclSuccess || n == 0) return r; /* NCCL's group failed: none of it ran */
  squall__nccl_note_group(g.calls[0].comm, n);
  /* the records stay this thread's until the next outermost group starts,
   * and a grouped call's squall never opens one through the interposer */
  return run_recorded(g.calls, n, run);
}

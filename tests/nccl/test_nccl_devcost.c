/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_nccl_devcost.c - the cost model's device schedule
 * (lib/engine/costing_device.c), run on host memory through
 * squallAllReduce and the test NCCL: SQUALL_TEST_DEVICE_SCHEDULE=2 makes
 * the host engine exchange its header only on the device schedule and read
 * its whole-call timings two calls late, as a device's would be. Checks,
 * on one size class over a link whose latency dominates
 * (FAKENCCL_NS_PER_CALL) and another over a slow link
 * (FAKENCCL_NS_PER_BYTE), both on shared memory of one node:
 *   - every rank takes the same path at every call;
 *   - once measured, headers come only on every 16th call of the class;
 *   - where latency dominates, the class ends up passing through as not
 *     paying (int8's exchange and all-gather wait twice, plain once), on
 *     the slow link compressed (top-k sends 1/50 of the bytes).
 * Timing decides, so the delays are chosen far above what the scheduler of
 * a loaded machine adds to a call (tens of milliseconds now and then).
 * Run on 2 and 3 ranks (tests/nccl/runs.list).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <squall_nccl.h>

#include "nccl_comm.h"
#include "nccl_test_util.h"

#define CALLS 112
#define HEADER_EVERY 16 /* SQ_DEV_HEADER_EVERY */
#define SETTLED 32      /* calls by which measuring is over (it takes about 10) */

static int rank, nranks, failed;

static void check(int ok, const char *what) {
  if (!ok) failed++;
  if (!ok || rank == 0) printf("rank %d: %s: %s\n", rank, ok ? "ok" : "FAIL", what);
}

static int same_on_all_ranks(const void *buf, size_t bytes) {
  unsigned char *all = malloc(bytes * (size_t)nranks);
  MPI_Allgather(buf, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  int ok = 1;
  for (int r = 1; r < nranks; r++) ok &= memcmp(all, all + (size_t)r * bytes, bytes) == 0;
  free(all);
  return ok;
}

/* CALLS calls of n floats; path[i]: 1 compressed, 2 passed through as not
 * paying, 3 otherwise; headed[i]: the call exchanged a header. */
static void run(ncclComm_t comm, size_t n, char *path, char *headed) {
  float *g = malloc(n * 4), *out = malloc(n * 4);
  for (int i = 0; i < CALLS; i++) {
    for (size_t j = 0; j < n; j++) g[j] = gen(i, rank, j);
    squallStats_t a, b;
    squallStatsGet(&a);
    if (squallAllReduce(g, out, n, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess) {
      check(0, "squallAllReduce succeeds");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    squallStatsGet(&b);
    path[i] = b.compressedCalls > a.compressedCalls                                     ? 1
              : b.passthrough[squallPassNotPaying] > a.passthrough[squallPassNotPaying] ? 2
                                                                                        : 3;
    headed[i] = (char)(b.headers - a.headers);
  }
  free(g);
  free(out);
}

/* at_least: of the calls after SETTLED, those that must take want_path */
static void expect(const char *what, const char *path, const char *headed, int want_path, int at_least) {
  char line[200];
  int on_schedule = 1, settled = 0, others = 0;
  for (int i = SETTLED; i < CALLS; i++) {
    on_schedule &= headed[i] == (i % HEADER_EVERY == 0);
    settled += path[i] == want_path;
    others += path[i] == 3;
  }
  int window = CALLS - SETTLED;
  snprintf(line, sizeof line, "%s: the same path on every rank at every call", what);
  check(same_on_all_ranks(path, CALLS) && same_on_all_ranks(headed, CALLS), line);
  snprintf(line, sizeof line, "%s: after call %d, a header on every %dth call only", what, SETTLED, HEADER_EVERY);
  check(on_schedule, line);
  if (rank == 0) { /* the calls that took the other side, for the log */
    printf("%s: calls %d to %d not %s:", what, SETTLED, CALLS - 1, want_path == 1 ? "compressed" : "passed through");
    for (int i = SETTLED; i < CALLS; i++)
      if (path[i] != want_path) printf(" %d", i);
    printf("\n");
  }
  snprintf(line, sizeof line, "%s: %d of the last %d calls %s (at least %d), none for another reason", what, settled,
           window, want_path == 1 ? "compressed" : "passed through as not paying", at_least);
  check(settled >= at_least && others == 0, line);
}

int main(int argc, char **argv) {
  setenv("SQUALL_TEST_DEVICE_SCHEDULE", "2", 1); /* before the engine exists */
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclComm_t comm = test_nccl_comm(rank, nranks);
  char path[CALLS], headed[CALLS];

  /* Latency: 256 KiB calls, 40 ms a collective. All ranks are on one
   * node: unmeasured, the class passes through but for the measuring
   * calls. */
  use("SQUALL_COMPRESS=int8 SQUALL_COST_MODEL=on");
  setenv("FAKENCCL_NS_PER_CALL", "40000000", 1);
  run(comm, 65536, path, headed);
  unsetenv("FAKENCCL_NS_PER_CALL");
  /* plain is sampled on every call here, the codec only every 32nd: a
   * stall of a second or two can lift plain's figure for a while, and the
   * verdict with it until the next header */
  expect("latency", path, headed, 2, (CALLS - SETTLED) / 2);
  int measured = 0, first_plain = path[0] != 1;
  for (int i = 0; i < SETTLED; i++) measured += path[i] == 1;
  check(measured > 0 && first_plain, "latency: the first call on one node passes through; while measured, some "
                                     "calls are compressed (to time the codec)");

  /* A slow link (about 5 Mbit/s): 128 KiB calls, another size class. A
   * plain call waits about 0.2 s, a compressed one 50 times less, far
   * beyond any stall: all calls compressed but the plain probes (every
   * 32nd call), and the calls that a stall may still turn. */
  use("SQUALL_COMPRESS=topk:0.01 SQUALL_COST_MODEL=on");
  setenv("FAKENCCL_NS_PER_BYTE", "1500", 1);
  run(comm, 32768, path, headed);
  unsetenv("FAKENCCL_NS_PER_BYTE");
  expect("slow link", path, headed, 1, CALLS - SETTLED - 8);

  check(squallCommForget(comm) == ncclSuccess, "forget");
  ncclCommDestroy(comm);
  int all = 0;
  MPI_Allreduce(&failed, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", all ? "FAILED" : "all passed");
  MPI_Finalize();
  return all ? 1 : 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * preload_dlmod.c - a small shared library that uses NCCL the way PyTorch's
 * libtorch_cuda does: linked with -lnccl, and itself loaded by its host with
 * dlopen(RTLD_LOCAL), so that libnccl.so.2 lands in a local scope that
 * dlsym(RTLD_NEXT) from an LD_PRELOAD library cannot see. The host,
 * tests/interpose/test_preload_dlopen.c, brings MPI and passes a broadcast for the
 * unique id (PyTorch passes it through its store).
 *
 * The all-reduces use sparse inputs, at most 600 non-zeros per rank in 65536
 * floats, so that top-k at 1% (656 entries) sends all of them: the result is
 * the exact sum whether squall compresses or not, and the statistics say
 * which it did.
 */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 65536
#define CALLS 3

__attribute__((visibility("default"))) int dlmod_run(int rank, int nranks,
                                                     void (*bcast)(void *buf, int bytes));

static int failed;

static void expect(int ok, const char *what, int rank) {
  if (!ok) {
    fprintf(stderr, "preload_dlmod: rank %d: FAIL: %s\n", rank, what);
    failed++;
  }
}

/* Rank r's input: (r+1) * (1 + i/128) at i = 100*j + r for j < 600, else 0. */
static float input(int r, size_t i) {
  return i % 100 == (size_t)r && i / 100 < 600 ? (float)(r + 1) * (1.0f + (float)(i / 100) / 128.0f) : 0.0f;
}

/* Runs CALLS float sums on a new communicator; returns the failures. */
int dlmod_run(int rank, int nranks, void (*bcast)(void *buf, int bytes)) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) expect(0, "ncclGetUniqueId", rank);
  bcast(&id, (int)sizeof id);
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
  if (r != ncclSuccess) {
    fprintf(stderr, "preload_dlmod: rank %d: ncclCommInitRank: %s\n", rank, ncclGetErrorString(r));
    return 1;
  }
  float *send = malloc(N * sizeof *send), *recv = malloc(N * sizeof *recv);
  for (size_t i = 0; i < N; i++) send[i] = input(rank, i);
  for (int c = 0; c < CALLS; c++) {
    memset(recv, 0xff, N * sizeof *recv);
    r = ncclAllReduce(send, recv, N, ncclFloat32, ncclSum, comm, NULL);
    expect(r == ncclSuccess, "ncclAllReduce returned an error", rank);
    size_t bad = 0;
    for (size_t i = 0; i < N; i++) {
      float want = 0.0f;
      for (int p = 0; p < nranks; p++) want += input(p, i);
      bad += recv[i] != want;
    }
    expect(bad == 0, "the sum is not exact", rank);
  }
  expect(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy", rank);
  free(send);
  free(recv);
  return failed;
}

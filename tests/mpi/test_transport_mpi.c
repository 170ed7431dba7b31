/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_transport_mpi.c - the MPI transport's blocks of more than INT_MAX
 * bytes (tests/mpi/runs.list: 3 ranks). MPI's counts are int, and a legal
 * MPI_Allreduce of 2^31 - 1 floats makes top-k slots, two-phase blocks and
 * two-level shards larger than that; such blocks go in pieces. The
 * threshold, which is also the piece size, is lowered here
 * (squall__transport_mpi_big_bytes) so that the path runs on megabytes:
 *  - every collective of the transport delivers exactly the bytes the
 *    plain one delivers, on both sides of the threshold, with blocks of
 *    whole pieces and a short last one, while a message of the
 *    application's (tag 0) is in flight on the same communicator;
 *  - whole compressed calls (top-k raw and through zstd in one exchange,
 *    fp16 and int8 two-phase in one chunk and pipelined, top-k in rounds)
 *    give the same bits above the threshold as below it.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"
#include "squall.h"
#include "squall_mpi.h"
#include "transports/transport_mpi.h"

static int rank, nranks;

static unsigned char pattern(int from, int to, size_t i) {
  return (unsigned char)(from * 131 + to * 31 + i * 7 + (i >> 9));
}

/* Block sizes, with the threshold (and piece) at BIG_TEST bytes: pieces
 * and a short last one, one block below the threshold, whole pieces. */
static const size_t sizes[] = {(3u << 18) + 5, 777, 256000};
#define BIG_TEST 1000
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void with_threshold(size_t big, squall_transport *tr, squall_mpi_ctx *ctx) {
  squall__transport_mpi_big_bytes = big;
  ck_assert_int_eq(squall__transport_mpi_init(tr, ctx, MPI_COMM_WORLD), squallSuccess);
}

START_TEST(test_allgather_and_alltoall_bytes) {
  for (int big = 0; big < 2; big++)
    for (size_t s = 0; s < NSIZES; s++) {
      size_t b = sizes[s];
      squall_transport tr;
      squall_mpi_ctx ctx;
      with_threshold(big ? BIG_TEST : INT_MAX, &tr, &ctx);
      unsigned char *send = malloc(b * (size_t)nranks), *recv = malloc(b * (size_t)nranks);
      ck_assert_ptr_nonnull(send);
      ck_assert_ptr_nonnull(recv);
      /* the application's own message, in flight on the same communicator
       * with tag 0 while squall's collectives run, is neither taken by
       * them nor disturbs them */
      unsigned char note[64], got[64];
      for (size_t i = 0; i < sizeof note; i++) note[i] = pattern(rank, 99, i);
      MPI_Request sent;
      MPI_Isend(note, (int)sizeof note, MPI_BYTE, (rank + 1) % nranks, 0, MPI_COMM_WORLD, &sent);
      for (int blocking = 0; blocking < 2; blocking++) {
        /* all-gather: rank r's block at r * b */
        for (size_t i = 0; i < b; i++) send[i] = pattern(rank, 0, i);
        memset(recv, 0xee, b * (size_t)nranks);
        if (blocking) {
          ck_assert_int_eq(tr.allgather(tr.ctx, NULL, send, recv, b), squallSuccess);
        } else {
          squall_request req;
          ck_assert_int_eq(tr.iallgather(tr.ctx, send, recv, b, &req), squallSuccess);
          ck_assert_int_eq(tr.wait(tr.ctx, &req), squallSuccess);
        }
        for (int r = 0; r < nranks; r++)
          for (size_t i = 0; i < b; i++)
            MC_CHECK(recv[(size_t)r * b + i] == pattern(r, 0, i), "all-gather (big %d, blocking %d) of %zu bytes: "
                                                                  "rank %d's byte %zu wrong",
                     big, blocking, b, r, i);
        /* all-to-all: block t of rank r goes to rank t */
        for (int t = 0; t < nranks; t++)
          for (size_t i = 0; i < b; i++) send[(size_t)t * b + i] = pattern(rank, t, i);
        memset(recv, 0xee, b * (size_t)nranks);
        if (blocking) {
          ck_assert_int_eq(tr.alltoall(tr.ctx, NULL, send, recv, b), squallSuccess);
        } else {
          squall_request req;
          ck_assert_int_eq(tr.ialltoall(tr.ctx, send, recv, b, &req), squallSuccess);
          ck_assert_int_eq(tr.wait(tr.ctx, &req), squallSuccess);
        }
        for (int r = 0; r < nranks; r++)
          for (size_t i = 0; i < b; i++)
            MC_CHECK(recv[(size_t)r * b + i] == pattern(r, rank, i), "all-to-all (big %d, blocking %d) of %zu "
                                                                     "bytes: the block from rank %d, byte %zu wrong",
                     big, blocking, b, r, i);
      }
      int left = (rank + nranks - 1) % nranks;
      MPI_Recv(got, (int)sizeof got, MPI_BYTE, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Wait(&sent, MPI_STATUS_IGNORE);
      for (size_t i = 0; i < sizeof got; i++)
        MC_CHECK(got[i] == pattern(left, 99, i), "the application's message from rank %d changed (byte %zu)", left, i);
      free(send);
      free(recv);
      squall__transport_mpi_fini(&ctx);
    }
  squall__transport_mpi_big_bytes = INT_MAX;
}
END_TEST

/* All-gather-v: rank r sends (r + 1) * b / 2 bytes, packed in rank order. */
START_TEST(test_allgatherv_bytes) {
  for (int big = 0; big < 2; big++) {
    squall_transport tr;
    squall_mpi_ctx ctx;
    with_threshold(big ? BIG_TEST : INT_MAX, &tr, &ctx);
    size_t b = sizes[0], mine = ((size_t)rank + 1) * b / 2, capacity = (size_t)nranks * b;
    unsigned char *send = malloc(mine), *recv = malloc(capacity);
    size_t *got = malloc(2 * sizeof(size_t) * (size_t)nranks);
    for (size_t i = 0; i < mine; i++) send[i] = pattern(rank, 1, i);
    memset(recv, 0xee, capacity);
    ck_assert_int_eq(tr.allgatherv(tr.ctx, NULL, send, mine, recv, capacity, got, got + nranks), squallSuccess);
    size_t at = 0;
    for (int r = 0; r < nranks; r++) {
      size_t n = ((size_t)r + 1) * b / 2;
      ck_assert_uint_eq(got[r], n);
      ck_assert_uint_eq(got[nranks + r], at);
      for (size_t i = 0; i < n; i++)
        MC_CHECK(recv[at + i] == pattern(r, 1, i), "all-gather-v (big %d): rank %d's byte %zu wrong", big, r, i);
      at += n;
    }
    free(send);
    free(recv);
    free(got);
    squall__transport_mpi_fini(&ctx);
  }
  squall__transport_mpi_big_bytes = INT_MAX;
}
END_TEST

static float value(int r, int step, size_t i) {
  uint64_t x = (uint64_t)r * 0x9e3779b97f4a7c15ull + (uint64_t)step * 0xbf58476d1ce4e5b9ull + i * 0x94d049bb133111ebull;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return (float)((double)(x >> 40) / (double)(1 << 23) - 1.0);
}

/* Three steps of one tensor on a communicator of its own (its own
 * residuals), with blocks above `big` bytes taking the pieces path. */
static float *run_steps(const char *spec, size_t n, size_t big) {
  mc_use_config(spec);
  squall__transport_mpi_big_bytes = big;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  squallStats_t before, after;
  squallStatsGet(&before);
  float *g = malloc(n * sizeof *g), *out = malloc(3 * n * sizeof *out);
  for (int step = 0; step < 3; step++) {
    for (size_t i = 0; i < n; i++) g[i] = value(rank, step, i);
    ck_assert_msg(squallMpiAllreduce(g, out + (size_t)step * n, (int)n, MPI_FLOAT, MPI_SUM, comm) == MPI_SUCCESS,
                  "%s, step %d: %s", spec, step, squallGetLastError());
  }
  squallStatsGet(&after);
  ck_assert_msg(after.compressedCalls - before.compressedCalls == 3, "%s: %llu of 3 calls compressed", spec,
                (unsigned long long)(after.compressedCalls - before.compressedCalls));
  MPI_Comm_free(&comm);
  free(g);
  squall__transport_mpi_big_bytes = INT_MAX;
  return out;
}

static const char *calls[] = {
    "SQUALL_COMPRESS=topk:0.3 SQUALL_ZSTD=0 SQUALL_CHUNK_BYTES=0",
    "SQUALL_COMPRESS=topk:0.3 SQUALL_ZSTD=1 SQUALL_CHUNK_BYTES=0",
    "SQUALL_COMPRESS=topk:0.3 SQUALL_ZSTD=0 SQUALL_CHUNK_BYTES=256K", "SQUALL_COMPRESS=fp16 SQUALL_CHUNK_BYTES=0",
    "SQUALL_COMPRESS=int8 SQUALL_CHUNK_BYTES=0", "SQUALL_COMPRESS=fp16 SQUALL_CHUNK_BYTES=1M"};

START_TEST(test_calls_same_bits_above_the_threshold) {
  const size_t n = (size_t)1 << 20; /* 4 MiB of floats: slots and blocks of about 1-2.5 MiB */
  for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
    float *plain = run_steps(calls[c], n, INT_MAX), *pieces = run_steps(calls[c], n, 4096);
    ck_assert_msg(memcmp(plain, pieces, 3 * n * sizeof(float)) == 0, "%s: blocks in pieces changed the result",
                  calls[c]);
    free(plain);
    free(pieces);
  }
}
END_TEST

int main(int argc, char **argv) {
  /* clang-format off */
  const mc_suite m = {
      .name = "transport_mpi", .rank = &rank, .nranks = &nranks,
      .cases = MC_CASES(
          {"big", 300, MC_TESTS(test_allgather_and_alltoall_bytes, test_allgatherv_bytes,
                                test_calls_same_bits_above_the_threshold)}),
  };
  /* clang-format on */
  return mc_main(argc, argv, &m);
}

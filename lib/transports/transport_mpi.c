/* SPDX-License-Identifier: BSD-3-Clause */
/* transport_mpi.c - MPI collectives for the engine (host memory). */
#include "common/internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/fpenv.h"
#include "common/halfmath.h" /* squall__half_sum */
#include "transports/transport_mpi.h"
#include "transports/topology_mpi.h" /* two-level all-reduce */

/* MPI has no 16-bit float sum in Open MPI 4: user ops add in float and
 * round back, exactly as a 16-bit accumulator would. */
static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  squall__half_sum(SQ_HALF_FP16, in, inout, (size_t)*len);
}

static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  squall__half_sum(SQ_HALF_BF16, in, inout, (size_t)*len);
}

static MPI_Op op_f16 = MPI_OP_NULL, op_bf16 = MPI_OP_NULL;
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;
static void create_ops(void) {
  MPI_Op_create(sum_f16, 1, &op_f16);
  MPI_Op_create(sum_bf16, 1, &op_bf16);
}

/* The code of the last failed MPI call on this thread: the entry point
 * returns it as is (thread-local, like squallGetLastError). */
static __thread int last_mpi_error;
#define mpi_result squall__transport_mpi_result

squallResult_t squall__transport_mpi_result(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return squallSuccess;
  last_mpi_error = rc;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return squall__fail(squallSystemError, "%s failed: %s", what, msg);
}

/* MPI counts are int: large buffers go in pieces. */
#define CHUNK ((size_t)1 << 30)

/* MPI sums in the calling thread's floating-point environment: squall's
 * own collectives run in the default one (common/fpenv.h), so that a rank's
 * rounding mode or flush-to-zero cannot change the sum every rank gets. */
static squallResult_t allreduce_chunked(MPI_Comm comm, const void *send, void *recv, size_t n,
                                        size_t elsize, MPI_Datatype t, MPI_Op op, const char *what) {
  const unsigned fp = squall__fp_default_begin();
  squallResult_t r = squallSuccess;
  for (size_t off = 0; off < n && r == squallSuccess; off += CHUNK) {
    size_t m = n - off < CHUNK ? n - off : CHUNK;
    const void *s = send == MPI_IN_PLACE ? MPI_IN_PLACE : (const char *)send + off * elsize;
    r = mpi_result(PMPI_Allreduce(s, (char *)recv + off * elsize, (int)m, t, op, comm), what);
  }
  squall__fp_default_end(fp);
  return r;
}

/* ---- blocks of more than INT_MAX bytes
 * A top-k slot, a two-phase block or a shard of a very large call can
 * exceed MPI's int count (a legal MPI_Allreduce of 2^31 - 1 floats is 8
 * GiB). Such blocks go in pieces of at most 1 GiB: all-gathers as
 * broadcasts from each rank in turn, an all-to-all as one all-to-all-v
 * per pair of ranks and piece. Every rank takes that path together, since
 * all of them see the same sizes; it uses collectives only (point-to-point
 * messages on the caller's communicator could match the application's
 * own), and nothing on it can fail on one rank alone (its counts were
 * allocated with the transport). Slower than one collective, and only
 * ever taken above 2 GiB per block. */
size_t squall__transport_mpi_big_bytes = INT_MAX;

static int is_big(size_t bytes) { return bytes > squall__transport_mpi_big_bytes; }

/* The piece of [off, bytes) to move next. */
static size_t piece(size_t off, size_t bytes) {
  size_t most = squall__transport_mpi_big_bytes < CHUNK ? squall__transport_mpi_big_bytes : CHUNK;
  return bytes - off < most ? bytes - off : most;
}

static squallResult_t bcast_pieces(MPI_Comm comm, char *buf, size_t bytes, int root) {
  int rc = MPI_SUCCESS;
  for (size_t off = 0, m; off < bytes && rc == MPI_SUCCESS; off += m) {
    m = piece(off, bytes);
    rc = PMPI_Bcast(buf + off, (int)m, MPI_BYTE, root, comm);
  }
  return mpi_result(rc, "MPI_Bcast (a block over INT_MAX bytes, in pieces)");
}

/* recv holds rank i's sizes[i] bytes at displs[i]; this rank's come from
 * send. */
static squallResult_t allgatherv_big(MPI_Comm comm, const void *send, void *recv, const size_t *sizes,
                                     const size_t *displs) {
  int me, p;
  PMPI_Comm_rank(comm, &me);
  PMPI_Comm_size(comm, &p);
  if ((char *)recv + displs[me] != send) memmove((char *)recv + displs[me], send, sizes[me]);
  squallResult_t r = squallSuccess;
  for (int i = 0; i < p && r == squallSuccess; i++) r = bcast_pieces(comm, (char *)recv + displs[i], sizes[i], i);
  return r;
}

static squallResult_t allgather_big(MPI_Comm comm, const void *send, void *recv, size_t bytes) {
  int me, p;
  PMPI_Comm_rank(comm, &me);
  PMPI_Comm_size(comm, &p);
  char *mine = (char *)recv + (size_t)me * bytes;
  if (mine != send) memmove(mine, send, bytes);
  squallResult_t r = squallSuccess;
  for (int i = 0; i < p && r == squallSuccess; i++) r = bcast_pieces(comm, (char *)recv + (size_t)i * bytes, bytes, i);
  return r;
}

/* Step d sends block me + d to rank me + d and receives block me - d from
 * rank me - d: an all-to-all-v in which only those two counts are not 0,
 * every displacement 0 and the buffers moved to the piece. */
static squallResult_t alltoall_big(squall_mpi_ctx *c, const void *send, void *recv, size_t bytes) {
  int me, p;
  PMPI_Comm_rank(c->comm, &me);
  PMPI_Comm_size(c->comm, &p);
  int *scounts = c->counts, *rcounts = scounts + p, *zeros = scounts + 2 * p;
  memset(scounts, 0, 3 * (size_t)p * sizeof *scounts);
  memcpy((char *)recv + (size_t)me * bytes, (const char *)send + (size_t)me * bytes, bytes);
  int rc = MPI_SUCCESS;
  for (int d = 1; d < p && rc == MPI_SUCCESS; d++) {
    int to = (me + d) % p, from = (me - d + p) % p;
    const char *s = (const char *)send + (size_t)to * bytes;
    char *q = (char *)recv + (size_t)from * bytes;
    for (size_t off = 0, m; off < bytes && rc == MPI_SUCCESS; off += m) {
      m = piece(off, bytes);
      scounts[to] = rcounts[from] = (int)m;
      rc = PMPI_Alltoallv(s + off, scounts, zeros, MPI_BYTE, q + off, rcounts, zeros, MPI_BYTE, c->comm);
      scounts[to] = rcounts[from] = 0;
    }
  }
  return mpi_result(rc, "MPI_Alltoallv (an all-to-all block over INT_MAX bytes, in pieces)");
}

static squallResult_t mpi_allreduce_half(void *ctx, void *stream, uint16_t *buf, size_t n, sq_half_kind kind) {
  squall_mpi_ctx *c = ctx;
  pthread_once(&ops_once, create_ops);
  return allreduce_chunked(c->comm, MPI_IN_PLACE, buf, n, 2, MPI_UINT16_T,
                           kind == SQ_HALF_BF16 ? op_bf16 : op_f16, "MPI_Allreduce (16-bit sum)");
}

static squallResult_t mpi_allreduce_max_f32(void *ctx, void *stream, float *buf, size_t n) {
  squall_mpi_ctx *c = ctx;
  return allreduce_chunked(c->comm, MPI_IN_PLACE, buf, n, 4, MPI_FLOAT, MPI_MAX, "MPI_Allreduce (max)");
}

static squallResult_t mpi_allreduce_sum_f32(void *ctx, void *stream, const float *send, float *recv, size_t n) {
  squall_mpi_ctx *c = ctx;
  return allreduce_chunked(c->comm, send == recv ? MPI_IN_PLACE : (const void *)send, recv, n, 4,
                           MPI_FLOAT, MPI_SUM, "MPI_Allreduce (dense fallback)");
}

static squallResult_t mpi_allgather(void *ctx, void *stream, const void *send, void *recv, size_t bytes) {
  squall_mpi_ctx *c = ctx;
  if (is_big(bytes)) return allgather_big(c->comm, send, recv, bytes);
  return mpi_result(PMPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm),
                    "MPI_Allgather");
}

static squallResult_t mpi_allgatherv(void *ctx, void *stream, const void *send, size_t bytes, void *recv,
                                     size_t capacity, size_t *sizes, size_t *displs) {
  squall_mpi_ctx *c = ctx;
  int p;
  PMPI_Comm_size(c->comm, &p);
  uint64_t mine = bytes, *all = c->sizes;
  int *counts = c->counts;
  squallResult_t r = mpi_result(PMPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, c->comm),
                                "MPI_Allgather (sizes)");
  size_t total = 0;
  int bad = -1;
  for (int i = 0; r == squallSuccess && i < p; i++) {
    sizes[i] = (size_t)all[i];
    displs[i] = total;
    if (all[i] > capacity - total) {
      bad = i;
      break;
    }
    total += sizes[i];
    counts[i] = (int)sizes[i];
    counts[p + i] = (int)displs[i];
  }
  /* Every rank sees the same sizes, so every rank stops here together,
   * and takes the path for more than INT_MAX bytes together. */
  if (r == squallSuccess && bad >= 0)
    r = squall__fail(squallRemoteError, "rank %d announced a %llu-byte payload: more than the %zu bytes "
                                        "its slot can take",
                     bad, (unsigned long long)all[bad], capacity - displs[bad]);
  if (r == squallSuccess && is_big(total)) return allgatherv_big(c->comm, send, recv, sizes, displs);
  if (r == squallSuccess)
    r = mpi_result(PMPI_Allgatherv(send, (int)bytes, MPI_BYTE, recv, counts, counts + p, MPI_BYTE, c->comm),
                   "MPI_Allgatherv");
  return r;
}

static squallResult_t mpi_allreduce_min_i64(void *ctx, void *stream, int64_t *buf, size_t n) {
  squall_mpi_ctx *c = ctx;
  SQ_RETURN_ERROR_IF(n > INT_MAX, squallInternalError, "call header of %zu values", n);
  return mpi_result(PMPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_INT64_T, MPI_MIN, c->comm),
                    "MPI_Allreduce (call header)");
}

void squall__transport_mpi_fini(squall_mpi_ctx *ctx) {
  free(ctx->sizes);
  free(ctx->counts);
  ctx->sizes = NULL;
  ctx->counts = NULL;
}

int squall__transport_mpi_take_error(void) {
  int rc = last_mpi_error;
  last_mpi_error = MPI_SUCCESS;
  return rc;
}

/* The exchange of the two-phase all-reduce. */
static squallResult_t mpi_alltoall(void *ctx, void *stream, const void *send, void *recv, size_t bytes) {
  squall_mpi_ctx *c = ctx;
  if (is_big(bytes)) return alltoall_big(c, send, recv, bytes);
  return mpi_result(PMPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm),
                    "MPI_Alltoall");
}

/* ---- pipelining: non-blocking collectives (MPI-3) */
_Static_assert(sizeof(MPI_Request) <= sizeof(squall_request), "an MPI_Request must fit a squall_request");

static squallResult_t mpi_ialltoall(void *ctx, const void *send, void *recv, size_t bytes,
                                    squall_request *req) {
  squall_mpi_ctx *c = ctx;
  if (is_big(bytes)) { /* done now: the wait finds nothing left to do */
    *(MPI_Request *)req = MPI_REQUEST_NULL;
    return alltoall_big(c, send, recv, bytes);
  }
  return mpi_result(PMPI_Ialltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm,
                                   (MPI_Request *)req),
                    "MPI_Ialltoall");
}

static squallResult_t mpi_iallgather(void *ctx, const void *send, void *recv, size_t bytes,
                                     squall_request *req) {
  squall_mpi_ctx *c = ctx;
  if (is_big(bytes)) {
    *(MPI_Request *)req = MPI_REQUEST_NULL;
    return allgather_big(c->comm, send, recv, bytes);
  }
  return mpi_result(PMPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm,
                                    (MPI_Request *)req),
                    "MPI_Iallgather");
}

static squallResult_t mpi_wait(void *ctx, squall_request *req) {
  (void)ctx;
  return mpi_result(PMPI_Wait((MPI_Request *)req, MPI_STATUS_IGNORE), "MPI_Wait");
}

static squallResult_t mpi_progress(void *ctx, squall_request *req) {
  (void)ctx;
  int done = 0;
  if (*(MPI_Request *)req == MPI_REQUEST_NULL) return squallSuccess;
  return mpi_result(PMPI_Test((MPI_Request *)req, &done, MPI_STATUS_IGNORE), "MPI_Test");
}

/* Asked per call: a program may set another error handler at any time. */
static int mpi_failures_fatal(void *ctx) {
  squall_mpi_ctx *c = ctx;
  MPI_Errhandler h = MPI_ERRHANDLER_NULL;
  if (PMPI_Comm_get_errhandler(c->comm, &h) != MPI_SUCCESS) return 0;
  int fatal = h == MPI_ERRORS_ARE_FATAL;
  if (h != MPI_ERRHANDLER_NULL) PMPI_Errhandler_free(&h);
  return fatal;
}

squallResult_t squall__transport_mpi_init(squall_transport *tr, squall_mpi_ctx *ctx, MPI_Comm comm) {
  memset(tr, 0, sizeof *tr);
  memset(ctx, 0, sizeof *ctx);
  ctx->comm = comm;
  tr->ctx = ctx;
  SQ_FORWARD_IF_ERROR(mpi_result(PMPI_Comm_rank(comm, &tr->rank), "MPI_Comm_rank"));
  SQ_FORWARD_IF_ERROR(mpi_result(PMPI_Comm_size(comm, &tr->nranks), "MPI_Comm_size"));
  ctx->sizes = malloc(sizeof(uint64_t) * (size_t)tr->nranks);
  ctx->counts = malloc(sizeof(int) * 3 * (size_t)tr->nranks); /* all-gather-v: 2; big all-to-all: 3 */
  if (ctx->sizes == NULL || ctx->counts == NULL) {
    squall__transport_mpi_fini(ctx);
    return squall__fail(squallSystemError, "out of memory for all-gather-v sizes of %d ranks", tr->nranks);
  }
  tr->allreduce_half = mpi_allreduce_half;
  tr->allreduce_max_f32 = mpi_allreduce_max_f32;
  tr->allreduce_sum_f32 = mpi_allreduce_sum_f32;
  tr->allgather = mpi_allgather;
  tr->allgatherv = mpi_allgatherv;
  tr->allreduce_min_i64_host = mpi_allreduce_min_i64; /* host memory already */
  tr->alltoall = mpi_alltoall;
  tr->ialltoall = mpi_ialltoall;
  tr->iallgather = mpi_iallgather;
  tr->wait = mpi_wait;
  tr->progress = mpi_progress;
  tr->failures_fatal = mpi_failures_fatal;
  squall__topology_mpi_attach(tr); /* two-level all-reduce: node discovery, split, reduce-scatter */
  return squallSuccess;
}

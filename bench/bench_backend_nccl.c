/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_backend_nccl.c - the device-memory backend: buffers from
 * cudaMalloc, all-reduce by squallAllReduce (ncclAllReduce's signature),
 * reduce-scatter by squallReduceScatter (ncclReduceScatter's), each on
 * one stream per rank, synchronised inside the timed call as nccl-tests
 * does. One rank per GPU: each rank takes the GPU of its index on the node.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench_backend.h"
#include "squall_nccl.h"

static ncclComm_t nccl_comm;
static cudaStream_t stream;

static int nccl_usable(char *why, size_t len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    snprintf(why, len, "no GPU visible (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    cudaGetLastError();
    return 0;
  }
  return 1;
}

/* The types squallAllReduce compresses (the driver converts the float
 * data it generates into them); double would pass through. */
static int nccl_supports(bench_dtype t) { return t == BENCH_F32 || t == BENCH_F16 || t == BENCH_BF16; }

/* comm returns MPI errors (squall-bench checks its timed calls); one here
 * ends the job, as MPI's default handler would have. */
static void mpi_or_abort(int e, const char *call, int rank, MPI_Comm comm, FILE *err) {
  if (e == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  fprintf(err, "squall-bench: rank %d: %s failed: %s\n", rank, call, bench_mpi_error_text(e, text, sizeof text));
  MPI_Abort(comm, 3);
}

static int nccl_setup(MPI_Comm comm, FILE *err) {
  int rank, size, local = 0, ndev = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm node;
  mpi_or_abort(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type",
               rank, comm, err);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  cudaGetDeviceCount(&ndev);
  cudaError_t ce = cudaSetDevice(local % (ndev > 0 ? ndev : 1));
  if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (ce != cudaSuccess) {
    fprintf(err, "squall-bench: rank %d: CUDA set-up failed: %s\n", rank, cudaGetErrorString(ce));
    return -1;
  }
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) memset(&id, 0, sizeof id);
  mpi_or_abort(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm), "MPI_Bcast of the NCCL id", rank, comm, err);
  ncclResult_t r = ncclCommInitRank(&nccl_comm, size, id, rank);
  if (r != ncclSuccess) {
    fprintf(err, "squall-bench: rank %d: ncclCommInitRank failed: %s (%s)\n", rank, ncclGetErrorString(r),
            ncclGetLastError(NULL));
    return -1;
  }
  return 0;
}

static void nccl_teardown(void) {
  squallCommForget(nccl_comm);
  ncclCommDestroy(nccl_comm);
  cudaStreamDestroy(stream);
}

static void *nccl_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess || cudaMemset(p, 0, bytes ? bytes : 1) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(p);
    return NULL;
  }
  return p;
}

static void nccl_release(void *p) { cudaFree(p); }

static int nccl_upload(void *dst, const void *src, size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -1;
}

static int nccl_download(void *dst, const void *src, size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

typedef ncclResult_t (*nccl_allreduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                          cudaStream_t);

static int run(nccl_allreduce_fn fn, const char *name, const void *send, void *recv, size_t count, bench_dtype t,
               bench_op op, char *why, size_t len) {
  ncclDataType_t dt = t == BENCH_F16 ? ncclFloat16 : t == BENCH_BF16 ? ncclBfloat16
                                                                     : ncclFloat32;
  ncclResult_t r = fn(send, recv, count, dt, op == BENCH_AVG ? ncclAvg : ncclSum, nccl_comm, stream);
  cudaError_t ce = r == ncclSuccess ? cudaStreamSynchronize(stream) : cudaSuccess;
  if (r != ncclSuccess || ce != cudaSuccess) {
    snprintf(why, len, "%s(count=%zu) failed: %s", name, count,
             r != ncclSuccess ? ncclGetErrorString(r) : cudaGetErrorString(ce));
    return -1;
  }
  return 0;
}

static int nccl_allreduce(const void *send, void *recv, size_t count, bench_dtype t, bench_op op, MPI_Comm comm,
                          char *why, size_t len) {
  return run(squallAllReduce, "squallAllReduce", send, recv, count, t, op, why, len);
}

/* NCCL's profiling name: the real all-reduce even under squall's
 * interposer. */
static int nccl_plain_allreduce(const void *send, void *recv, size_t count, bench_dtype t, bench_op op,
                                MPI_Comm comm, char *why, size_t len) {
  return run(pncclAllReduce, "pncclAllReduce", send, recv, count, t, op, why, len);
}

/* --coll reducescatter through squall: squallReduceScatter, with
 * ncclReduceScatter's signature, takes the block per rank (recvcount);
 * count is the send buffer's elements, a multiple of the ranks. */
static int nccl_reduce_scatter(const void *send, void *recv, size_t count, bench_dtype t, bench_op op, MPI_Comm comm,
                               char *why, size_t len) {
  int p = 1;
  MPI_Comm_size(comm, &p);
  return run(squallReduceScatter, "squallReduceScatter", send, recv, count / (size_t)p, t, op, why, len);
}

/* squallReduceScatter compresses float32 only (squall_nccl.h): 16-bit
 * types would pass through. */
static int nccl_supports_reduce_scatter(bench_dtype t) { return t == BENCH_F32; }

/* --coll reducescatter, plain: NCCL's reduce-scatter takes the block per
 * rank (recvcount), with ncclAllReduce's argument types. */
static int nccl_plain_reduce_scatter(const void *send, void *recv, size_t count, bench_dtype t, bench_op op,
                                     MPI_Comm comm, char *why, size_t len) {
  int p = 1;
  MPI_Comm_size(comm, &p);
  return run(pncclReduceScatter, "pncclReduceScatter", send, recv, count / (size_t)p, t, op, why, len);
}

static int nccl_reset_residuals(MPI_Comm comm) { return squallResetResiduals(nccl_comm) == ncclSuccess ? 0 : -1; }

static int nccl_free_state(MPI_Comm comm) { return squallCommForget(nccl_comm) == ncclSuccess ? 0 : -1; }

static const char *nccl_version(void) {
  static char text[32];
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return NULL;
  /* NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9 */
  snprintf(text, sizeof text, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  return text;
}

const bench_backend bench_backend_nccl = {
    .version = nccl_version,
    .name = "nccl",
    .memory = "device memory",
    .usable = nccl_usable,
    .supports = nccl_supports,
    .setup = nccl_setup,
    .teardown = nccl_teardown,
    .alloc = nccl_alloc,
    .release = nccl_release,
    .host_accessible = 0,
    .upload = nccl_upload,
    .download = nccl_download,
    .allreduce = nccl_allreduce,
    .plain_allreduce = nccl_plain_allreduce,
    .reduce_scatter = nccl_reduce_scatter,
    .plain_reduce_scatter = nccl_plain_reduce_scatter,
    .supports_reduce_scatter = nccl_supports_reduce_scatter,
    .reset_residuals = nccl_reset_residuals,
    .free_state = nccl_free_state,
};

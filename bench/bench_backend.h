/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_backend.h - where the benchmark's buffers live and which squall
 * entry point all-reduces them. The driver (squall-bench.c) only talks to
 * this table, so a backend is one more file: bench_backend_mpi.c (host
 * memory, squallMpiAllreduce) now; an NCCL one (device memory,
 * squallAllReduce on a stream) joins the list in bench_backend.c when the
 * NCCL transport is built.
 *
 * MPI is always there: it launches the ranks, times them and combines the
 * results, whatever memory the data lives in.
 */
#ifndef SQUALL_BENCH_BACKEND_H
#define SQUALL_BENCH_BACKEND_H

#include <mpi.h>

#include "bench.h"

typedef struct bench_backend {
  const char *name;   /* as --backend spells it */
  const char *memory; /* "host memory", "device memory" */
  /* 1 when it can run here; otherwise 0 and why (e.g. "no GPU visible"). */
  int (*usable)(char *why, size_t len);
  /* 1 when it benchmarks this element type. */
  int (*supports)(bench_dtype t);
  /* Per-run setup on the benchmark's communicator (e.g. an NCCL
   * communicator built from it); 0 or an error printed to err. */
  int (*setup)(MPI_Comm comm, FILE *err);
  void (*teardown)(void);
  /* Buffers of the backend's memory: zeroed, NULL when out of memory. */
  void *(*alloc)(size_t bytes);
  void (*release)(void *p);
  /* 1 when the driver may read and write the backend's buffers directly. */
  int host_accessible;
  /* Copies between host memory and a backend buffer (only needed when not
   * host_accessible; may be NULL otherwise). 0 on success. */
  int (*upload)(void *dst, const void *src, size_t bytes);
  int (*download)(void *dst, const void *src, size_t bytes);
  /* One complete all-reduce through squall, finished when it returns (a
   * device backend synchronises its stream): what the timer measures.
   * avg is the op the user asked for; a backend without an average op sums
   * and divides, inside the call. 0 on success, else an error in `why`. */
  int (*allreduce)(const void *send, void *recv, size_t count, bench_dtype t, bench_op op,
                   MPI_Comm comm, char *why, size_t len);
  /* The same all-reduce by the collective library itself, not through
   * squall (its profiling name, so that an interposer does not catch it):
   * the plain figure every codec is compared with. */
  int (*plain_allreduce)(const void *send, void *recv, size_t count, bench_dtype t, bench_op op,
                         MPI_Comm comm, char *why, size_t len);
  /* --coll reducescatter: the same two calls for a reduce-scatter, with
   * MPI_Reduce_scatter_block's layout: count is the send buffer's
   * elements (a multiple of the ranks), recv gets this rank's count/P
   * block of the sum. NULL where the backend has none; then
   * no_reduce_scatter says why. */
  int (*reduce_scatter)(const void *send, void *recv, size_t count, bench_dtype t, bench_op op, MPI_Comm comm,
                        char *why, size_t len);
  int (*plain_reduce_scatter)(const void *send, void *recv, size_t count, bench_dtype t, bench_op op,
                              MPI_Comm comm, char *why, size_t len);
  /* 1 when the reduce-scatter benchmarks this element type (squall may
   * compress fewer types there than in an all-reduce); NULL: as supports. */
  int (*supports_reduce_scatter)(bench_dtype t);
  const char *no_reduce_scatter;
  /* Zeroes squall's error-feedback residuals (between codecs). */
  int (*reset_residuals)(MPI_Comm comm);
  /* Frees squall's per-communicator state (after each size). */
  int (*free_state)(MPI_Comm comm);
  /* The collective library's version where it is not MPI ("2.28.3"), for
   * the JSON; NULL: none. */
  const char *(*version)(void);
} bench_backend;

/* The backend for --backend NAME ("auto" picks the best usable one).
 * NULL after writing why to why (unknown name, not built, not usable). */
const bench_backend *bench_backend_find(const char *name, char *why, size_t len);

/* The backends compiled into this binary, comma-separated, for -h. */
const char *bench_backend_list(void);

/* MPI's text for error code err in buf (len bytes), or "MPI error N" where
 * MPI has none; returns buf. For messages about squall-bench's own MPI
 * calls, which return errors rather than end the job. */
const char *bench_mpi_error_text(int err, char *buf, size_t len);

extern const bench_backend bench_backend_mpi;

#endif

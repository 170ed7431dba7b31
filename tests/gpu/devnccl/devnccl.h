/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * devnccl.h - internals of the device-memory test NCCL (tests/gpu/devnccl,
 * README there): libnccl.so.2 for 2-8 processes that share one GPU,
 * built against the real nccl.h. Each operation is put on the caller's
 * stream as a copy of the device input to pinned host memory, a host
 * callback that exchanges it with the peers through the communicator's
 * shared segment (xchg.h), and a copy of the result back, so stream order
 * and CUDA-graph capture work as with NCCL. Public functions are pncclX,
 * exported again as weak aliases ncclX, as the real library does.
 */
#ifndef DEVNCCL_H
#define DEVNCCL_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "xchg.h"

#define DEV_API __attribute__((visibility("default")))
#define DEV_ALIAS(name) \
  extern __typeof__(p##name) name __attribute__((weak, alias("p" #name), visibility("default")))

#define DEV_MAGIC 0x6465766e63636c32ULL /* guards against stale or foreign handles */

/* A pinned host buffer of a communicator's pool. */
typedef struct dev_buf {
  void *p;
  size_t bytes;
  struct dev_buf *next;
} dev_buf;

/* A device range and where it goes in the staging buffer. */
typedef struct {
  void *dev;
  size_t off, bytes;
} dev_copy;

/* One operation on a stream: what the host callback runs. A captured one
 * belongs to its graph (replayed any number of times) and lives until the
 * communicator is destroyed; the others are freed after their last copy. */
typedef struct dev_task {
  struct ncclComm *comm;
  const char *fn;
  dnx_op op;
  dev_copy *in, *out; /* device -> staging before, staging -> device after */
  int nin, nout;
  dev_buf *stage;
  int captured;
  struct dev_task *next;
} dev_task;

struct ncclComm {
  uint64_t magic;
  dnx_seg *seg;
  int rank, nranks, device;
  unsigned splits;         /* ncclCommSplit calls, which name the children */
  _Atomic int inflight;    /* uncaptured tasks not yet done */
  _Atomic int async_error; /* ncclResult_t of a failed callback; then every call fails */
  char async_msg[512];
  pthread_mutex_t lock;  /* pool and kept */
  dev_buf *pool;         /* free staging buffers */
  dev_task *kept;        /* captured tasks */
  struct ncclComm *next; /* registry of live communicators */
};

/* Records msg as the last error (NCCL_DEBUG=WARN prints it), notes it for
 * ncclGroupEnd inside a group, returns code. */
ncclResult_t dev__error(ncclResult_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ncclInvalidArgument unless comm is live; its asynchronous error if it has one. */
ncclResult_t dev__comm_ready(const struct ncclComm *comm, const char *fn);
/* Inside ncclGroupStart/End: the first error, for ncclGroupEnd. */
void dev__group_note(ncclResult_t code);

/* Puts task on stream: the input copies, the exchange, the output copies,
 * and (uncaptured) the release. stage_bytes of pinned memory come from the
 * pool; task->op's buffers are set from offsets into it by the caller's
 * setup(task, stage base). Frees task on failure. */
ncclResult_t dev__enqueue(dev_task *task, size_t stage_bytes, cudaStream_t stream,
                          void (*setup)(dev_task *, char *));
/* Pinned buffers and captured tasks, at destroy. */
void dev__free_staging(struct ncclComm *comm);

#endif

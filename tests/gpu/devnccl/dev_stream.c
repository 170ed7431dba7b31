/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * dev_stream.c - how the device-memory test NCCL puts an operation on a
 * stream: device -> pinned host copies, a host callback (cudaLaunchHostFunc)
 * that runs the exchange (xchg.h) and may block until the peers come,
 * host -> device copies, and a second callback that returns the staging
 * buffer to the communicator's pool. A host callback must not call CUDA,
 * so buffers are only allocated and freed on the calling thread. Under
 * stream capture the same calls become graph nodes; the task then belongs
 * to the graph and is kept until the communicator is destroyed.
 */
#include "devnccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The staging buffer for bytes: the smallest free one big enough, or a new
 * one (allocated in relaxed capture mode: allowed while a stream captures). */
static dev_buf *pool_take(struct ncclComm *c, size_t bytes) {
  pthread_mutex_lock(&c->lock);
  dev_buf **best = NULL;
  for (dev_buf **b = &c->pool; *b; b = &(*b)->next)
    if ((*b)->bytes >= bytes && (!best || (*b)->bytes < (*best)->bytes)) best = b;
  dev_buf *got = NULL;
  if (best) {
    got = *best;
    *best = got->next;
  }
  pthread_mutex_unlock(&c->lock);
  if (got) return got;
  got = calloc(1, sizeof *got);
  if (!got) return NULL;
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  cudaError_t e = cudaMallocHost(&got->p, bytes ? bytes : 1);
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (e != cudaSuccess) {
    cudaGetLastError();
    free(got);
    return NULL;
  }
  got->bytes = bytes;
  return got;
}

static void pool_put(struct ncclComm *c, dev_buf *b) {
  pthread_mutex_lock(&c->lock);
  b->next = c->pool;
  c->pool = b;
  pthread_mutex_unlock(&c->lock);
}

static void task_free(dev_task *t) {
  free(t->op.p2p);
  free(t->in);
  free(t->out);
  free(t);
}

/* The exchange. A failure poisons the communicator (its peers fail too):
 * NCCL's asynchronous error, which ncclCommGetAsyncError reports and every
 * later call returns; the output is filled with 0xff so that it cannot pass
 * for a result. */
static void CUDART_CB run_cb(void *arg) {
  dev_task *t = arg;
  struct ncclComm *c = t->comm;
  char err[512];
  int r = atomic_load(&c->async_error); /* failed before: the peers failed too, nothing to exchange */
  if (r == 0) r = dnx_run(c->seg, &t->op, err, sizeof err);
  if (r == DNX_OK) return;
  int none = 0;
  if (atomic_compare_exchange_strong(&c->async_error, &none, -1)) {
    snprintf(c->async_msg, sizeof c->async_msg, "%.40s on rank %d: %.400s", t->fn, c->rank, err);
    fprintf(stderr, "devnccl: %s (reported by ncclCommGetAsyncError)\n", c->async_msg);
    atomic_store(&c->async_error, r);
  }
  for (int i = 0; i < t->nout; i++) memset((char *)t->stage->p + t->out[i].off, 0xff, t->out[i].bytes);
}

static void CUDART_CB release_cb(void *arg) {
  dev_task *t = arg;
  struct ncclComm *c = t->comm;
  pool_put(c, t->stage);
  task_free(t);
  atomic_fetch_sub(&c->inflight, 1);
}

static ncclResult_t cuda_failed(const char *fn, const char *what, cudaError_t e) {
  cudaGetLastError();
  return dev__error(ncclUnhandledCudaError, "%s: %s failed: %s", fn, what, cudaGetErrorString(e));
}

ncclResult_t dev__enqueue(dev_task *t, size_t stage_bytes, cudaStream_t stream, void (*setup)(dev_task *, char *)) {
  struct ncclComm *c = t->comm;
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(stream, &cap);
  if (e != cudaSuccess) {
    const char *fn = t->fn;
    task_free(t);
    return cuda_failed(fn, "cudaStreamIsCapturing", e);
  }
  t->captured = cap != cudaStreamCaptureStatusNone;
  if ((t->stage = pool_take(c, stage_bytes)) == NULL) {
    const char *fn = t->fn;
    task_free(t);
    return dev__error(ncclSystemError, "%s: no pinned host memory for %zu bytes of staging", fn, stage_bytes);
  }
  setup(t, t->stage->p);
  for (int i = 0; i < t->nin && e == cudaSuccess; i++)
    if (t->in[i].bytes)
      e = cudaMemcpyAsync((char *)t->stage->p + t->in[i].off, t->in[i].dev, t->in[i].bytes, cudaMemcpyDefault, stream);
  if (e == cudaSuccess) e = cudaLaunchHostFunc(stream, run_cb, t);
  for (int i = 0; i < t->nout && e == cudaSuccess; i++)
    if (t->out[i].bytes)
      e = cudaMemcpyAsync(t->out[i].dev, (char *)t->stage->p + t->out[i].off, t->out[i].bytes, cudaMemcpyDefault,
                          stream);
  if (e == cudaSuccess && !t->captured) {
    atomic_fetch_add(&c->inflight, 1);
    e = cudaLaunchHostFunc(stream, release_cb, t);
    if (e != cudaSuccess) atomic_fetch_sub(&c->inflight, 1);
  }
  if (e != cudaSuccess) /* what was queued may still run: the task and its buffer stay (a leak, not a fault) */
    return cuda_failed(t->fn, "putting the operation on the stream", e);
  if (t->captured) { /* the graph owns it */
    pthread_mutex_lock(&c->lock);
    t->next = c->kept;
    c->kept = t;
    pthread_mutex_unlock(&c->lock);
  }
  return ncclSuccess;
}

void dev__free_staging(struct ncclComm *c) {
  for (dev_task *t = c->kept, *n; t; t = n) {
    n = t->next;
    cudaFreeHost(t->stage->p);
    free(t->stage);
    task_free(t);
  }
  for (dev_buf *b = c->pool, *n; b; b = n) {
    n = b->next;
    cudaFreeHost(b->p);
    free(b);
  }
  c->kept = NULL;
  c->pool = NULL;
}

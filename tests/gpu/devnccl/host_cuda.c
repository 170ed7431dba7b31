/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * host_cuda.c - the CUDA runtime calls of the device-memory test NCCL's
 * CUDA layer (dev_*.c), done on host memory, for make check on machines
 * without a GPU: tests/gpu/devnccl-host/libnccl.so.2 is that layer linked
 * with these instead of libcudart, so squall's NCCL tests on host buffers
 * (tests/nccl/runs.list, rows devnccl-*) run through its staging, groups,
 * splits and error paths. A copy is memcpy, a host function runs at once
 * (so each operation completes before it returns), nothing is ever
 * captured. Hidden (-fvisibility=hidden): the program's own CUDA calls
 * still go to the real runtime.
 */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
  (void)kind, (void)stream;
  memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
  (void)stream;
  fn(userData);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status) {
  (void)stream;
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  (void)mode;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
  *ptr = malloc(size); /* not calloc: tests/nccl/test_nccl_faults fails one large calloc on purpose */
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *ptr) {
  free(ptr);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }

const char *cudaGetErrorString(cudaError_t error) { return error == cudaSuccess ? "no error" : "a host stand-in failed"; }

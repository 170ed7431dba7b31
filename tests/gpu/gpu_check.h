/*
 * gpu_check.h - what the GPU test programs share: the pass/fail counters,
 * CK() for CUDA calls that must succeed (after a fault the context is
 * unusable, so a failure ends the run with the closing "N passed, N failed"
 * line), and allocations that end the run when memory runs out. Define
 * GPU_TEST_NAME (the program's name, a string literal) before including.
 */
#ifndef SQUALL_GPU_CHECK_H
#define SQUALL_GPU_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

static int g_passed, g_failed;

#define CK(call)                                                                                \
  do {                                                                                          \
    cudaError_t ck_e_ = (call);                                                                 \
    if (ck_e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, GPU_TEST_NAME ": %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,      \
              cudaGetErrorString(ck_e_));                                                       \
      printf("%d passed, %d failed\n", g_passed, g_failed + 1);                                 \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

static __attribute__((unused)) void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, GPU_TEST_NAME ": out of host memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

static __attribute__((unused)) void *dmalloc(size_t bytes) {
  void *p = NULL;
  CK(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

#endif

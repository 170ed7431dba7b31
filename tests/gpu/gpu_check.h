/* SPDX-License-Identifier: BSD-3-Clause */
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

#define CK(call)                                                                           \
  do {                                                                                     \
    cudaError_t ck_e_ = (call);                                                            \
    if (ck_e_ != cudaSuccess) {                                                            \
      fprintf(stderr, GPU_TEST_NAME ": %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, \
              cudaGetErrorString(ck_e_));                                                  \
      printf("%d passed, %d failed\n", g_passed, g_failed + 1);                            \
      exit(1);                                                                             \
    }                                                                                      \
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

/* Whether this machine has a CUDA device to test: 1 yes, 0 none here
 * (skip: the machine has no NVIDIA device node, or the runtime finds no
 * device), -1 one is here but unusable (fail: a driver too old for the
 * runtime that the bundle links statically reports itself as "insufficient",
 * which must not read as a skip on the GPU machine). */
#include <unistd.h>
static __attribute__((unused)) int gpu_device_state(void) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return 1;
  int node = access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
  if (e == cudaSuccess || e == cudaErrorNoDevice || !node) {
    printf(GPU_TEST_NAME ": SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices; %s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "ok", count,
           node ? "an NVIDIA device node exists" : "no /dev/nvidiactl or /dev/nvidia0");
    return 0;
  }
  fprintf(stderr, GPU_TEST_NAME ": an NVIDIA device is here, but CUDA cannot use it: %s\n", cudaGetErrorString(e));
  printf("0 passed, 1 failed\n");
  return -1;
}

#endif

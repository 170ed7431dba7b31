/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * cuda_loaded.c - whether this process has loaded the CUDA driver. Only a
 * process that has can hold device memory, and asking the CUDA runtime
 * about a pointer in one that has not would load the driver and create a
 * context on a GPU for a job that never uses one (on a GPU node, every rank
 * of a host-only MPI job). A file of its own: tests replace the answer by
 * defining this one function.
 *
 * Asked per call, so it must cost little: dlopen(RTLD_NOLOAD) searches the
 * loader's cache and the file system for a name not loaded (hundreds of
 * microseconds a call here), so the loaded objects are looked at instead,
 * and only when their count of additions has moved since the last look.
 */
#define _GNU_SOURCE /* dl_iterate_phdr's dlpi_adds */
#include <link.h>
#include <string.h>

#include "engine/kernels.h"

static int first_adds(struct dl_phdr_info *info, size_t size, void *out) {
  (void)size;
  *(unsigned long long *)out = info->dlpi_adds;
  return 1; /* the count is the same in every entry: one is enough */
}

static int is_driver(struct dl_phdr_info *info, size_t size, void *found) {
  (void)size;
  const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  const char *base = slash ? slash + 1 : info->dlpi_name;
  if (base && strncmp(base, "libcuda.so", 10) == 0) *(int *)found = 1;
  return *(int *)found;
}

int squall__cuda_driver_loaded(void) {
  static int loaded;                          /* once loaded, a driver stays */
  static unsigned long long looked = ~0ull;   /* dlpi_adds at the last look */
  if (__atomic_load_n(&loaded, __ATOMIC_RELAXED)) return 1;
  unsigned long long adds = 0;
  dl_iterate_phdr(first_adds, &adds);
  if (adds == __atomic_load_n(&looked, __ATOMIC_RELAXED)) return 0;
  int found = 0;
  dl_iterate_phdr(is_driver, &found);
  if (found) __atomic_store_n(&loaded, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&looked, adds, __ATOMIC_RELAXED);
  return found;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * cuda_pointer.c - whether a buffer handed to the MPI entry point is
 * device memory (a CUDA-aware MPI's), which the host codecs cannot read.
 *
 * Asked without ever creating a CUDA context: only a process that has
 * loaded the CUDA driver can hold device memory, and there the driver's
 * own cuPointerGetAttribute answers (it fails, for "host", where the
 * process never initialised CUDA). The runtime's cudaPointerGetAttributes
 * would initialise the runtime and create a context on a GPU in every rank
 * of a host-only job (a CUDA-aware Open MPI or UCX loads the driver at
 * MPI_Init). The driver is looked for among the loaded objects, again only
 * when objects were added since the last look: dlopen(RTLD_NOLOAD) of a
 * name that is not loaded searches the loader's cache and the file system
 * (200 us a call here). A file of its own: tests replace the answer by
 * defining squall__cuda_pointer_is_device.
 */
#define _GNU_SOURCE /* dl_iterate_phdr's dlpi_adds, RTLD_NOLOAD */
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#include "api/cuda_pointer.h"

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

/* cuPointerGetAttribute(void *data, CUpointer_attribute, CUdeviceptr):
 * the driver API's own types, declared here so that no CUDA header is
 * needed (the values are the driver API's, stable since CUDA 4). */
typedef int (*get_attribute_fn)(void *data, int attribute, uintptr_t ptr);
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_MEMORYTYPE_DEVICE 2

/* The driver's cuPointerGetAttribute once the driver is loaded, else NULL. */
static get_attribute_fn driver_query(void) {
  static get_attribute_fn fn;
  static unsigned long long looked = ~0ull; /* dlpi_adds at the last look */
  get_attribute_fn f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);
  if (f) return f; /* once loaded, a driver stays */
  unsigned long long adds = 0;
  dl_iterate_phdr(first_adds, &adds);
  if (adds == __atomic_load_n(&looked, __ATOMIC_RELAXED)) return NULL;
  int found = 0;
  dl_iterate_phdr(is_driver, &found);
  if (found) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h) {
      f = (get_attribute_fn)dlsym(h, "cuPointerGetAttribute");
      dlclose(h); /* loaded by someone else: it stays */
    }
  }
  if (f) __atomic_store_n(&fn, f, __ATOMIC_RELEASE);
  __atomic_store_n(&looked, adds, __ATOMIC_RELAXED);
  return f;
}

int squall__cuda_pointer_is_device(const void *p) {
  get_attribute_fn get = driver_query();
  if (get == NULL || p == NULL) return 0;
  unsigned int type = 0, managed = 0;
  if (get(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (uintptr_t)p) != 0) return 0; /* host, or no context */
  if (type != CU_MEMORYTYPE_DEVICE) return 0;
  /* managed memory the host codecs can read */
  if (get(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (uintptr_t)p) == 0 && managed) return 0;
  return 1;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_preload_dlopen.c - a host program that loads an NCCL-using library
 * with dlopen(RTLD_LOCAL), as Python loads PyTorch, run by
 * tests/interpose/preload-dlopen.sh with LD_PRELOAD=libsquall-preload.so.
 *
 *   test_preload_dlopen MODULE
 *   test_preload_dlopen --no-nccl PRELOAD_LIBRARY
 *   test_preload_dlopen --old-nccl OLD_LIBNCCL PRELOAD_LIBRARY
 *
 * The host links MPI but not NCCL. It first proves the situation under test:
 * after the dlopen, NCCL's profiling names are not in the global scope
 * (dlsym(RTLD_DEFAULT) finds none), so the interposer can only reach the
 * real functions through dlopen("libnccl.so.2", RTLD_NOLOAD). Then the
 * module runs its all-reduces; the driver checks the statistics and the
 * interposer's INFO line saying which route it took.
 *
 * With --no-nccl (no MPI, no NCCL anywhere in the process) it dlopens the
 * interposer itself and calls it: every call must return ncclSystemError,
 * not abort, and the driver checks the one-time message naming libnccl.so.2.
 * With --old-nccl it first loads a partial libnccl.so.2 (tests/interpose/
 * preload_oldnccl.c): what it has is forwarded, a newer function it lacks
 * (ncclCommShrink) answers ncclInvalidUsage, a required one ncclSystemError.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

/* NCCL's numbering, spelled out: this program does not include nccl.h. */
enum { NCCL_SUCCESS = 0,
       NCCL_SYSTEM_ERROR = 2,
       NCCL_INVALID_USAGE = 5,
       NCCL_FLOAT32 = 7,
       NCCL_SUM = 0 };

static int expect_rc(int got, int want, const char *call) {
  if (got == want) return 0;
  fprintf(stderr, "test_preload_dlopen: FAIL: %s returned %d, expected %d\n", call, got, want);
  return 1;
}

static int old_nccl(const char *old, const char *lib) {
  if (dlopen(old, RTLD_NOW | RTLD_GLOBAL) == NULL) {
    fprintf(stderr, "test_preload_dlopen: dlopen(%s): %s\n", old, dlerror());
    return 2;
  }
  void *h = dlopen(lib, RTLD_LOCAL | RTLD_NOW);
  if (h == NULL) {
    fprintf(stderr, "test_preload_dlopen: dlopen(%s): %s\n", lib, dlerror());
    return 2;
  }
  int (*shrink)(void *, int *, int, void **, void *, int) =
      (int (*)(void *, int *, int, void **, void *, int))dlsym(h, "ncclCommShrink");
  int (*allreduce)(const void *, void *, size_t, int, int, void *, void *) =
      (int (*)(const void *, void *, size_t, int, int, void *, void *))dlsym(h, "ncclAllReduce");
  int (*group_start)(void) = (int (*)(void))dlsym(h, "ncclGroupStart");
  int (*group_end)(void) = (int (*)(void))dlsym(h, "ncclGroupEnd");
  int (*destroy)(void *) = (int (*)(void *))dlsym(h, "ncclCommDestroy");
  if (!shrink || !allreduce || !group_start || !group_end || !destroy) {
    fprintf(stderr, "test_preload_dlopen: FAIL: %s does not export the NCCL names\n", lib);
    return 1;
  }
  int failed = 0, x = 0;
  void *out = NULL;
  for (int i = 0; i < 2; i++) failed += expect_rc(shrink(&x, &x, 1, &out, NULL, 0), NCCL_INVALID_USAGE, "ncclCommShrink");
  float f = 1.0f, g;
  failed += expect_rc(allreduce(&f, &g, 1, NCCL_FLOAT32, NCCL_SUM, &x, NULL), NCCL_SYSTEM_ERROR, "ncclAllReduce");
  failed += expect_rc(group_start(), NCCL_SUCCESS, "ncclGroupStart");
  failed += expect_rc(group_end(), NCCL_SUCCESS, "ncclGroupEnd");
  failed += expect_rc(group_end(), NCCL_INVALID_USAGE, "a second ncclGroupEnd");
  failed += expect_rc(destroy(NULL), NCCL_SUCCESS, "ncclCommDestroy(NULL)");
  printf("test_preload_dlopen: with a partial NCCL: %d failures\n", failed);
  return failed ? 1 : 0;
}

static int no_nccl(const char *lib) {
  void *h = dlopen(lib, RTLD_LOCAL | RTLD_NOW);
  if (h == NULL) {
    fprintf(stderr, "test_preload_dlopen: dlopen(%s): %s\n", lib, dlerror());
    return 2;
  }
  int failed = 0;
  int (*allreduce)(const void *, void *, size_t, int, int, void *, void *) =
      (int (*)(const void *, void *, size_t, int, int, void *, void *))dlsym(h, "ncclAllReduce");
  int (*group_start)(void) = (int (*)(void))dlsym(h, "ncclGroupStart");
  int (*destroy)(void *) = (int (*)(void *))dlsym(h, "ncclCommDestroy");
  if (!allreduce || !group_start || !destroy) {
    fprintf(stderr, "test_preload_dlopen: FAIL: %s does not export the NCCL names\n", lib);
    return 1;
  }
  float x = 1.0f, y = 0.0f;
  for (int i = 0; i < 2; i++) { /* the message comes once, the error every time */
    int r = allreduce(&x, &y, 1, NCCL_FLOAT32, NCCL_SUM, &x, NULL);
    if (r != NCCL_SYSTEM_ERROR) {
      fprintf(stderr, "test_preload_dlopen: FAIL: ncclAllReduce without NCCL returned %d, expected %d\n", r,
              NCCL_SYSTEM_ERROR);
      failed++;
    }
  }
  int r1 = group_start(), r2 = destroy(&x);
  if (r1 != NCCL_SYSTEM_ERROR || r2 != NCCL_SYSTEM_ERROR) {
    fprintf(stderr, "test_preload_dlopen: FAIL: ncclGroupStart/ncclCommDestroy without NCCL returned %d/%d\n",
            r1, r2);
    failed++;
  }
  printf("test_preload_dlopen: without NCCL: %d failures\n", failed);
  return failed ? 1 : 0;
}

static void bcast(void *buf, int bytes) { MPI_Bcast(buf, bytes, MPI_BYTE, 0, MPI_COMM_WORLD); }

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--no-nccl")) return no_nccl(argv[2]);
  if (argc == 4 && !strcmp(argv[1], "--old-nccl")) return old_nccl(argv[2], argv[3]);
  if (argc != 2) {
    fprintf(stderr, "usage: test_preload_dlopen MODULE.so | --no-nccl PRELOAD_LIBRARY |\n"
                    "       --old-nccl OLD_LIBNCCL PRELOAD_LIBRARY\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank, nranks, failed = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (dlsym(RTLD_DEFAULT, "pncclAllReduce") != NULL) {
    fprintf(stderr, "test_preload_dlopen: rank %d: FAIL: NCCL is global before the dlopen\n", rank);
    failed++;
  }
  void *h = dlopen(argv[1], RTLD_LOCAL | RTLD_NOW);
  if (h == NULL) {
    fprintf(stderr, "test_preload_dlopen: rank %d: dlopen(%s): %s\n", rank, argv[1], dlerror());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (dlsym(RTLD_DEFAULT, "pncclAllReduce") != NULL) {
    fprintf(stderr, "test_preload_dlopen: rank %d: FAIL: pncclAllReduce is in the global scope, so this "
                    "does not test the RTLD_LOCAL case\n",
            rank);
    failed++;
  }
  int (*run)(int, int, void (*)(void *, int)) = (int (*)(int, int, void (*)(void *, int)))dlsym(h, "dlmod_run");
  if (run == NULL) {
    fprintf(stderr, "test_preload_dlopen: rank %d: dlmod_run not in %s\n", rank, argv[1]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  failed += run(rank, nranks, bcast);
  int total = 0;
  MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_preload_dlopen: %d ranks, %d failures\n", nranks, total);
  MPI_Finalize();
  return total ? 1 : 0;
}

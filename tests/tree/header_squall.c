/* SPDX-License-Identifier: BSD-3-Clause */
/* header_squall.c - squall.h and squall_coll.h stand alone: this file is
 * built with only include/ on the include path (no MPI, NCCL or CUDA), and
 * they must not pull in any of their headers when they happen to be
 * reachable. */
#include "squall.h"
#include "squall_coll.h"

#if defined(NCCL_H_) || defined(MPI_VERSION) || defined(__CUDA_RUNTIME_H__) || defined(CUDA_VERSION)
#error "squall.h included an NCCL, MPI or CUDA header"
#endif

#include <stdio.h>
#include <string.h>

int main(void) {
  /* Uses the declarations, so that a missing one fails to compile or link. */
  squallConfig_t cfg;
  squallOption_t opt;
  int version = 0, n = 0;
  if (squallConfigDefault(&cfg) != squallSuccess || squallGetVersion(&version) != squallSuccess ||
      version != SQUALL_VERSION_CODE) {
    fprintf(stderr, "header_squall: library and header disagree: %s\n", squallGetLastError());
    return 1;
  }
  while (squallConfigOption(&cfg, n, &opt) == squallSuccess) n++;
  /* the initializers, as callers write them (squall.h: structs that can grow) */
  squallConfig_t sized = SQUALL_CONFIG_INITIALIZER;
  squallStats_t stats = SQUALL_STATS_INITIALIZER;
  squallOption_t first = SQUALL_OPTION_INITIALIZER;
  if (squallGetConfig(&sized) != squallSuccess || sized.size != sizeof sized || squallStatsGet(&stats) != squallSuccess ||
      stats.magic != SQUALL_STATS_MAGIC || squallConfigOption(&sized, 0, &first) != squallSuccess) {
    fprintf(stderr, "header_squall: the initialized structs were refused: %s\n", squallGetLastError());
    return 1;
  }
  /* squall_coll.h: a table without functions is refused, by name */
  squallCollectives_t coll = SQUALL_COLLECTIVES_INIT;
  coll.nranks = 1;
  squallColl_t c = NULL;
  if (squallCollCreate(&coll, NULL, &c) != squallInvalidArgument || c != NULL ||
      strstr(squallGetLastError(), "allReduce") == NULL || squallCollDestroy(NULL) != squallSuccess) {
    fprintf(stderr, "header_squall: squallCollCreate took a table without functions: %s\n", squallGetLastError());
    return 1;
  }
  if (n == 0 || strcmp(squallGetErrorString(squallSuccess), "no error") != 0) {
    fprintf(stderr, "header_squall: %d options, success reads '%s'\n", n, squallGetErrorString(squallSuccess));
    return 1;
  }
  printf("squall.h and squall_coll.h alone: %s, %d options\n", squallVersionString(), n);
  return 0;
}

/*
 * stats_writer.c - a process that names its SQUALL_STATS file by a
 * communicator's rank, as the NCCL side does, and exits after the given
 * milliseconds, writing the file (tests/stats-ranks.sh):
 *
 *   stats_writer RANK MILLISECONDS
 *
 * No MPI, no NCCL: two of them at once stand for two processes of one
 * run that got the same rank in their first communicators.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "squall.h"
#include "common/stats.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: stats_writer RANK MILLISECONDS\n");
    return 2;
  }
  squallConfig_t cfg;
  if (squallConfigFromEnv(&cfg) != squallSuccess || squallSetConfig(&cfg) != squallSuccess) {
    fprintf(stderr, "stats_writer: %s\n", squallGetLastError());
    return 1;
  }
  squall__stats_set_rank(atoi(argv[1]), 0);
  long ms = atol(argv[2]);
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
  return 0; /* the file is written at exit */
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * stats_writer.c - a process that names its SQUALL_STATS file by a
 * communicator's rank and size, as the NCCL side does, and exits after the
 * given milliseconds, writing the file (tests/unit/stats-ranks.sh):
 *
 *   stats_writer RANK SIZE MILLISECONDS [fork]
 *
 * No MPI, no NCCL: two of them at once stand for two processes of one
 * run that got the same rank in their first communicators. With fork, a
 * child forked after that exits at once through exit() (a data loader's
 * worker, say): the parent's file stays the parent's.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "squall.h"
#include "common/stats.h"

int main(int argc, char **argv) {
  if (argc != 4 && !(argc == 5 && strcmp(argv[4], "fork") == 0)) {
    fprintf(stderr, "usage: stats_writer RANK SIZE MILLISECONDS [fork]\n");
    return 2;
  }
  squallConfig_t cfg;
  if (squallConfigFromEnv(&cfg) != squallSuccess || squallSetConfig(&cfg) != squallSuccess) {
    fprintf(stderr, "stats_writer: %s\n", squallGetLastError());
    return 1;
  }
  squall__stats_set_rank(atoi(argv[1]), atoi(argv[2]), 0);
  if (argc == 5) {
    pid_t child = fork();
    if (child == 0) exit(0);
    if (child < 0 || waitpid(child, NULL, 0) != child) return 1;
  }
  long ms = atol(argv[3]);
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
  return 0; /* the file is written at exit */
}

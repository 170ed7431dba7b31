/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * stats.h - statistics counters: process-wide (squallStatsGet, SQUALL_STATS
 * JSON at exit) and per communicator (the INFO summary at teardown).
 */
#ifndef SQUALL_STATS_H
#define SQUALL_STATS_H

#include <stdio.h>

#include "squall.h"

/* Adds one call's figures to *local (a communicator's, may be NULL) and to
 * the process-wide counters. reason < 0 means the call was compressed. */
void squall__stats_record(squallStats_t *local, int reason, uint64_t bytes_in,
                          uint64_t bytes_wire, double codec_seconds);

/* Adds one call's path to *local (may be NULL) and to the process-wide
 * counters (the call itself is counted by squall__stats_record): path 0 =
 * pass-through (only the byte split is added), 1 = flat compressed (with
 * flat_reason), 2 = two-level compressed. inter + intra are the call's
 * bytes on the wire, split at the node boundary. */
void squall__stats_record_path(squallStats_t *local, int path, int flat_reason, uint64_t inter,
                               uint64_t intra);

/* A passed-through call: squall__stats_record and squall__stats_record_path
 * (path 0) under one lock, for the calls squall adds least to. */
void squall__stats_record_pass(squallStats_t *local, int reason, uint64_t bytes_in, uint64_t inter,
                               uint64_t intra);

/* Counts a call header exchanged. */
void squall__stats_record_header(squallStats_t *local);

/* Counts a compressed call that ran in `chunks` pipeline chunks (> 1). */
void squall__stats_record_chunks(squallStats_t *local, uint64_t chunks);

/* A rank that may name the SQUALL_STATS file; the first call arms the
 * at-exit writer. unique: the process's own rank (MPI_COMM_WORLD's),
 * which wins; else `rank` of a communicator of `size` ranks, which names
 * the file only where the launcher's environment gives no rank for a
 * world of at least that size (RANK with WORLD_SIZE, OMPI_COMM_WORLD_RANK,
 * PMI_RANK, SLURM_PROCID, with their sizes), the first such call winning.
 * A forked child that calls it starts counters and a file of its own. */
void squall__stats_set_rank(int rank, int size, int unique);

/* Writes the process-wide counters to SQUALL_STATS now, the last time
 * (later calls, and the interval's writes, do nothing). Also runs at exit.
 * Before it, every SQUALL_STATS_INTERVAL seconds a call writes them too. */
void squall__stats_write_file(void);

/* The SQUALL_STATS file from a signal handler: async-signal-safe, once,
 * as squall__stats_write_file would (no file after that one's). */
void squall__stats_write_signal(void);

/* stats_file.c: stats as one JSON object and a newline in b (at most cap
 * bytes, terminated); returns its length. Async-signal-safe. */
size_t squall__stats_format(char *b, size_t cap, const squallStats_t *stats, int rank);

/* stats_file.c: writes json (len bytes) to a file beside path (path,
 * suffix, pid) and renames it over path, so that a reader never sees half
 * a file; own: path is this process's (written by it before). Otherwise
 * a file at path that changed since `loaded` is another process's: then
 * path.<pid> is written, into path (cap bytes), and *taken is 1. A path
 * that is no plain file (/dev/null) is written in place. 0, or -1 with
 * errno. Async-signal-safe. */
struct timespec;
int squall__stats_file_put(char *path, size_t cap, const char *json, size_t len, const char *suffix, int own,
                           const struct timespec *loaded, int *taken);

/* stats_file.c: writes the file on SIGTERM and SIGINT, where the program
 * left their default action (termination), which then follows. */
void squall__stats_catch_signals(void);

/* Monotonic seconds. */
double squall__now(void);

/* Copies *mine into the caller's *caller as squallStatsGet does: as many
 * bytes as the caller's struct (its head) and squall's both have; an
 * error names `who`. */
squallResult_t squall__stats_out(squallStats_t *caller, const squallStats_t *mine, const char *who);

#endif

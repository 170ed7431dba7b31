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

/* Writes the process-wide counters to SQUALL_STATS now (once; later calls
 * do nothing). Also runs at exit. */
void squall__stats_write_file(void);

/* Writes stats as one JSON object. */
void squall__stats_json(FILE *out, const squallStats_t *stats, int rank);

/* Monotonic seconds. */
double squall__now(void);

/* Copies *mine into the caller's *caller as squallStatsGet does: as many
 * bytes as the caller's struct (its head) and squall's both have; an
 * error names `who`. */
squallResult_t squall__stats_out(squallStats_t *caller, const squallStats_t *mine, const char *who);

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * stats_path.h - the SQUALL_STATS file of a rank: its name, and whether it
 * can be written. One rule for the library, which writes the file at exit,
 * and for the tools that check it before a run starts (squall-info, and
 * squall-run through it; squall-bench), so that a check never passes a
 * path the library would then fail on. The tools compile stats_path.c into
 * themselves: the library exports no internal symbol.
 */
#ifndef SQUALL_STATS_PATH_H
#define SQUALL_STATS_PATH_H

#include <stddef.h>

/* The longest file name the library writes, terminator included. */
#define SQ_STATS_PATH_MAX 600

/* The file of `rank`: every "%r" in pattern becomes the rank; without one,
 * ".<rank>" is appended. 0, or -1 when it does not fit in len (a cut name
 * could be another rank's file). */
int squall__stats_path(const char *pattern, int rank, char *out, size_t len);

/* Whether `rank` can create or overwrite its file (checked without creating
 * it): 0, or -1 with the reason, naming the file, in why. */
int squall__stats_path_check(const char *pattern, int rank, char *why, size_t len);

#endif

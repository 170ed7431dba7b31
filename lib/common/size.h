/* SPDX-License-Identifier: BSD-3-Clause */
/* size.h - the one parser of sizes in bytes, for SQUALL_MIN_BYTES,
 * SQUALL_EF_MAX_BYTES and squall-bench's -b/-e/-i. Self-contained (no other
 * squall header), so that squall-bench compiles the same source: it links
 * libsquall.so, whose internal symbols are hidden. */
#ifndef SQUALL_SIZE_H
#define SQUALL_SIZE_H

#include <stddef.h>

/* The accepted spellings, for error messages and documentation. */
#define SQUALL_SIZE_SPELLINGS                                                        \
  "an integer number of bytes with an optional K, M or G suffix (also written KiB, " \
  "MiB, GiB or KB, MB, GB, in any case; powers of 1024: 64M = 64MiB = 67108864)"

/* Parses exactly: decimal digits, then nothing or one of K, M, G, KiB, MiB,
 * GiB, KB, MB, GB in any case, all 1024-based (nccl-tests reads 64m and
 * 64M alike, and 1KB as 1K). No sign, blank, fraction, exponent, hex or
 * other suffix: nccl-tests would read "1.5M" or "1e6" as 1 byte, which
 * here is an error instead. Returns 0, or -1 (also when the size does not
 * fit a size_t) with *out unchanged. */
int squall__parse_size(const char *text, size_t *out);

#endif

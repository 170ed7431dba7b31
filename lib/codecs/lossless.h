/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * lossless.h - the lossless stage for top-k slots on the host transport:
 * index gaps and values rearranged into byte planes (lossless.c), then
 * zstd-compressed. Sizes vary per rank, so the engine exchanges sizes
 * before the payloads. Pure functions: no communication.
 */
#ifndef SQUALL_LOSSLESS_H
#define SQUALL_LOSSLESS_H

#include <stddef.h>
#include "squall.h"

/* Largest encoded size of a slot of k entries (capacity for encode). */
size_t squall__lossless_bound(size_t k, squallValueType_t values);

/* Scratch bytes encode and decode need. */
size_t squall__lossless_scratch_bytes(size_t k, squallValueType_t values);

/* Encodes one slot (squall__topk_slot_bytes(k, values) bytes) into out.
 * Returns the size written, or 0 on failure. */
size_t squall__lossless_encode(const void *slot, size_t k, squallValueType_t values, int level,
                               void *out, size_t capacity, void *scratch);

/* Decodes a peer's payload back into a slot of k entries with indices
 * below n. Returns 0, or -1 for a corrupt or truncated payload: never reads
 * or writes out of bounds. */
int squall__lossless_decode(const void *in, size_t size, size_t k, squallValueType_t values,
                            size_t n, void *slot, void *scratch);

#endif

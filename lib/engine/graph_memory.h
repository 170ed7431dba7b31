/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * graph_memory.h - kernel memory that a captured CUDA graph may still use.
 * A graph replays the addresses of its capture: once a call has been
 * captured, scratch that grows for a later (uncaptured, larger) call must
 * not be freed, or every replay of the older graph would read and write
 * freed memory. Such blocks are kept until their owner (an engine, a
 * two-level setup) is freed. Before any capture, a replaced block is freed
 * at once, as before.
 */
#ifndef SQUALL_ENGINE_GRAPH_MEMORY_H
#define SQUALL_ENGINE_GRAPH_MEMORY_H

#include "kernels/kernels.h"

typedef struct squall_kept_block squall_kept_block;

typedef struct {
  int captured;            /* a call using this owner's memory has been captured */
  squall_kept_block *kept; /* blocks replaced since then */
} squall_graph_memory;

/* A block that a larger one replaces: freed now, or kept when a graph
 * may still use it (if even the note cannot be allocated, the block is
 * leaked: a leak is safer than memory freed under a graph). */
void squall__graph_memory_retire(squall_graph_memory *g, const squall_kernels *k, void *stream, void *p);

/* A block of at least *bytes to replace old (old_bytes of it), which is
 * then retired; *bytes becomes the new block's size. After a capture it
 * asks for twice old_bytes where that is more (the exact size if twice
 * cannot be had), so that what is kept stays below what is in use however
 * the sizes creep up. NULL when nothing could be allocated: old stays. */
void *squall__graph_memory_replace(squall_graph_memory *g, const squall_kernels *k, void *stream, void *old,
                                   size_t old_bytes, size_t *bytes);

/* The owner is freed: every kept block goes too. */
void squall__graph_memory_free(squall_graph_memory *g, const squall_kernels *k);

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/* graph_memory.c - see graph_memory.h. */
#include "engine/graph_memory.h"

#include <stdlib.h>

struct squall_kept_block {
  squall_kept_block *next;
  void *p;
};

void squall__graph_memory_retire(squall_graph_memory *g, const squall_kernels *k, void *stream, void *p) {
  if (p == NULL) return;
  if (!g->captured) {
    k->free(stream, p);
    return;
  }
  squall_kept_block *b = malloc(sizeof *b);
  if (b == NULL) return;
  b->p = p;
  b->next = g->kept;
  g->kept = b;
}

void *squall__graph_memory_replace(squall_graph_memory *g, const squall_kernels *k, void *stream, void *old,
                                   size_t old_bytes, size_t *bytes) {
  void *p = NULL;
  if (g->captured && *bytes < 2 * old_bytes) {
    p = k->alloc(stream, 2 * old_bytes);
    if (p) *bytes = 2 * old_bytes;
  }
  if (p == NULL) p = k->alloc(stream, *bytes);
  if (p) squall__graph_memory_retire(g, k, stream, old);
  return p;
}

void squall__graph_memory_free(squall_graph_memory *g, const squall_kernels *k) {
  while (g->kept) {
    squall_kept_block *b = g->kept;
    g->kept = b->next;
    k->free(NULL, b->p);
    free(b);
  }
  g->captured = 0;
}

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

void squall__graph_memory_free(squall_graph_memory *g, const squall_kernels *k) {
  while (g->kept) {
    squall_kept_block *b = g->kept;
    g->kept = b->next;
    k->free(NULL, b->p);
    free(b);
  }
  g->captured = 0;
}

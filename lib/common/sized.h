/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sized.h - the head of the public structs that can grow (squallConfig_t,
 * squallStats_t, squallOption_t): size, magic and version first, as
 * squall.h explains. The library reads and writes only as many bytes of a
 * caller's struct as both know.
 */
#ifndef SQUALL_SIZED_H
#define SQUALL_SIZED_H

#include <stddef.h>
#include <string.h>

#include "squall.h"

/* The three members every growable struct begins with. */
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
} squall_head;

/* The size of a struct up to the end of its member `last`: the size that
 * every caller's struct has at least, where `last` is the last member of
 * the struct's first layout under this soname. */
#define SQ_FIRST_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))

/* The head of the caller's struct *s as squall takes it: its own where the
 * magic shows that an initializer (or squall) set it; else that of the
 * first layout (`first` bytes, this library's version), which every
 * caller's struct has. The caller then gets squallInvalidArgument where
 * size < first (squall__head_ok). */
static inline squall_head squall__head(const void *s, unsigned int magic, size_t first) {
  squall_head h;
  memcpy(&h, s, sizeof h);
  if (h.magic != magic) {
    h.size = first;
    h.magic = magic;
    h.version = SQUALL_VERSION_CODE;
  }
  return h;
}

static inline int squall__head_ok(squall_head h, size_t first) { return h.size >= first; }

/* The bytes squall reads and writes: what both the caller's struct and the
 * library's (`mine`) have. */
static inline size_t squall__head_bytes(squall_head h, size_t mine) { return h.size < mine ? h.size : mine; }

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * preload_resolve.h - finding the real functions behind an LD_PRELOAD
 * interposer. The interposer's own symbols shadow the library's public names,
 * so the real ones are looked up by their profiling names (pncclAllReduce):
 * first with dlsym(RTLD_NEXT), which sees libraries in the global scope
 * loaded after the interposer; then in the library itself, reached with
 * dlopen(soname, RTLD_NOLOAD), which also finds a library that its user
 * loaded with RTLD_LOCAL (PyTorch does that with NCCL).
 */
#ifndef SQUALL_PRELOAD_RESOLVE_H
#define SQUALL_PRELOAD_RESOLVE_H

#include <stddef.h>

/* Where a symbol came from. */
typedef enum {
  squall_resolved_none = 0,  /* not found, or only the interposer's own */
  squall_resolved_next = 1,  /* dlsym(RTLD_NEXT) */
  squall_resolved_noload = 2 /* dlsym on dlopen(soname, RTLD_NOLOAD) */
} squall_resolved_how;

/* One library to search. Zero-initialise, set soname (e.g. "libnccl.so.2")
 * and self (the address of any function of the interposer, to recognise
 * its own symbols). Not thread-safe: use it under pthread_once. */
typedef struct {
  const char *soname;
  const void *self;
  void *handle; /* from dlopen(soname, RTLD_NOLOAD), once tried */
  int handle_tried;
  char handle_error[200]; /* dlerror() of that dlopen when it failed */
} squall_preload_lib;

/* Looks up `name` (a profiling name). Returns the function, or NULL with
 * why (at least 256 bytes) saying what was tried: a NULL result means the
 * name is in neither place, or only in the interposer itself. *how tells
 * which route found it. Keeps the RTLD_NOLOAD handle open for the life of
 * the process (it only pins a library that is already loaded). */
void *squall__preload_lookup(squall_preload_lib *lib, const char *name, squall_resolved_how *how,
                             char *why, size_t why_len);

/* File name of the shared object holding addr ("?" when unknown). */
const char *squall__preload_object_of(const void *addr);

#endif

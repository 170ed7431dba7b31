/* SPDX-License-Identifier: BSD-3-Clause */
/* preload_resolve.c - RTLD_NEXT first, then the already-loaded library by
 * soname; never the interposer's own symbol. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT, RTLD_NOLOAD, dladdr */
#endif
#include "interpose/preload_resolve.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

const char *squall__preload_object_of(const void *addr) {
  Dl_info info;
  if (addr == NULL || !dladdr(addr, &info) || info.dli_fname == NULL) return "?";
  return info.dli_fname;
}

/* 1 when sym lies in the same shared object as self. */
static int is_self(const void *sym, const void *self) {
  Dl_info a, b;
  if (!dladdr(sym, &a) || !dladdr(self, &b)) return 0;
  return a.dli_fbase == b.dli_fbase;
}

/* Path of a dlopen handle's object. */
static const char *path_of_handle(void *handle) {
  struct link_map *map = NULL;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == NULL || map->l_name == NULL) return "?";
  return map->l_name;
}

static void open_noload(squall_preload_lib *lib) {
  if (lib->handle_tried) return;
  lib->handle_tried = 1;
  dlerror();
  /* RTLD_NOLOAD: never load a second NCCL; only find the one the program
   * (or a library it dlopened) already has. RTLD_LAZY is required with it. */
  lib->handle = dlopen(lib->soname, RTLD_NOLOAD | RTLD_LAZY);
  if (lib->handle == NULL) {
    const char *e = dlerror(); /* often none: "not loaded" is not an error to dlopen */
    snprintf(lib->handle_error, sizeof lib->handle_error, "%s", e ? e : "");
  }
}

void *squall__preload_lookup(squall_preload_lib *lib, const char *name, squall_resolved_how *how,
                             char *why, size_t why_len) {
  *how = squall_resolved_none;
  why[0] = 0;
  int found_self = 0;
  void *sym = dlsym(RTLD_NEXT, name);
  if (sym != NULL && is_self(sym, lib->self)) {
    found_self = 1;
    sym = NULL;
  }
  if (sym != NULL) {
    *how = squall_resolved_next;
    return sym;
  }
  open_noload(lib);
  if (lib->handle != NULL) {
    sym = dlsym(lib->handle, name);
    if (sym != NULL && is_self(sym, lib->self)) {
      found_self = 1;
      sym = NULL;
    }
    if (sym != NULL) {
      *how = squall_resolved_noload;
      return sym;
    }
  }
  if (found_self)
    snprintf(why, why_len,
             "%s resolves to squall's own interposer (%s), not to %s: is squall's preload library "
             "installed under the name %s, or is NCCL linked statically into the program?",
             name, squall__preload_object_of(lib->self), lib->soname, lib->soname);
  else if (lib->handle != NULL)
    snprintf(why, why_len, "%s is not in the loaded %s (%s) nor later in the global scope", name,
             lib->soname, path_of_handle(lib->handle));
  else
    snprintf(why, why_len, "%s not found: dlsym(RTLD_NEXT) has none and %s is not loaded in this process%s%s%s",
             name, lib->soname, lib->handle_error[0] ? " (dlopen RTLD_NOLOAD: " : "", lib->handle_error,
             lib->handle_error[0] ? ")" : "");
  return NULL;
}

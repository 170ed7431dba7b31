/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_backend.c - the list of backends this build has and --backend's
 * choice among them. An NCCL backend, when the NCCL transport exists, is
 * declared in bench_backend.h, defined in its own file and listed here
 * under SQUALL_BENCH_HAVE_NCCL; until then --backend nccl says it was not
 * built. Also the text of an MPI error code, for every backend's messages.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "bench_backend.h"

#ifdef SQUALL_BENCH_HAVE_NCCL
extern const bench_backend bench_backend_nccl;
#endif

/* Best first: auto takes the first usable one. */
static const bench_backend *const backends[] = {
#ifdef SQUALL_BENCH_HAVE_NCCL
    &bench_backend_nccl,
#endif
    &bench_backend_mpi,
};

#define NBACKENDS (sizeof backends / sizeof backends[0])

const char *bench_backend_list(void) {
  static char list[128];
  if (!list[0])
    for (size_t i = 0; i < NBACKENDS; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
               backends[i]->name);
  return list;
}

const bench_backend *bench_backend_find(const char *name, char *why, size_t len) {
  char reason[256];
  if (!strcasecmp(name, "auto")) {
    for (size_t i = 0; i < NBACKENDS; i++)
      if (backends[i]->usable(reason, sizeof reason)) return backends[i];
    snprintf(why, len, "--backend auto: no backend can run here (mpi: %s)", reason);
    return NULL;
  }
  for (size_t i = 0; i < NBACKENDS; i++) {
    if (strcasecmp(name, backends[i]->name)) continue;
    if (backends[i]->usable(reason, sizeof reason)) return backends[i];
    snprintf(why, len, "--backend %s: not available here: %s", name, reason);
    return NULL;
  }
  if (!strcasecmp(name, "nccl")) {
    snprintf(why, len,
             "--backend nccl: not built: this squall-bench has no NCCL backend (squall's NCCL "
             "transport is not part of this build); use --backend mpi (host memory)");
    return NULL;
  }
  snprintf(why, len, "--backend '%s' is unknown: accepted values are auto, mpi and nccl (built: %s)",
           name, bench_backend_list());
  return NULL;
}

const char *bench_mpi_error_text(int err, char *buf, size_t len) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(err, text, &n) == MPI_SUCCESS)
    snprintf(buf, len, "%s", text);
  else
    snprintf(buf, len, "MPI error %d", err);
  return buf;
}

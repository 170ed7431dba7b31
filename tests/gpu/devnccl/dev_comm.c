/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * dev_comm.c - unique ids, communicators (init, split, destroy, queries)
 * and errors of the device-memory test NCCL. An id names a shared-memory
 * segment (xchg.h): the process that made it passes it to the others
 * (forked, or by any other means), and each calls ncclCommInitRank with its
 * rank. Non-blocking communicators are not implemented and are refused.
 */
#include "devnccl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ------------------------------------------------------------ errors */
static char last_error[640];

ncclResult_t dev__error(ncclResult_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  const char *dbg = getenv("NCCL_DEBUG");
  if (dbg && (!strcasecmp(dbg, "WARN") || !strcasecmp(dbg, "INFO") || !strcasecmp(dbg, "TRACE")))
    fprintf(stderr, "devnccl WARN %s\n", last_error);
  dev__group_note(code);
  return code;
}

DEV_API const char *pncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return last_error;
}
DEV_ALIAS(ncclGetLastError);

DEV_API const char *pncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "a CUDA call failed";
  case ncclSystemError: return "a system call failed, a peer died or timed out, or a fault was injected";
  case ncclInternalError: return "internal error of the library";
  case ncclInvalidArgument: return "invalid argument (see ncclGetLastError)";
  case ncclInvalidUsage: return "invalid usage (see ncclGetLastError)";
  case ncclRemoteError: return "a remote rank failed";
  case ncclInProgress: return "operation in progress";
  default: return "unknown ncclResult_t value";
  }
}
DEV_ALIAS(ncclGetErrorString);

DEV_API ncclResult_t pncclGetVersion(int *version) {
  if (!version) return dev__error(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE; /* the header it was built with */
  return ncclSuccess;
}
DEV_ALIAS(ncclGetVersion);

/* ------------------------------------------------------------ registry */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *registry;

static int registered(const struct ncclComm *comm, int remove) {
  int found = 0;
  pthread_mutex_lock(&registry_lock);
  for (struct ncclComm **p = &registry; *p && !found; p = &(*p)->next)
    if (*p == comm) {
      found = 1;
      if (remove) *p = comm->next;
    }
  pthread_mutex_unlock(&registry_lock);
  return found;
}

static ncclResult_t comm_live(const struct ncclComm *comm, const char *fn) {
  if (!comm) return dev__error(ncclInvalidArgument, "%s: comm is NULL", fn);
  if (!registered(comm, 0) || comm->magic != DEV_MAGIC)
    return dev__error(ncclInvalidArgument, "%s: comm %p is not a live communicator (destroyed, or never made)", fn,
                      (const void *)comm);
  return ncclSuccess;
}

ncclResult_t dev__comm_ready(const struct ncclComm *comm, const char *fn) {
  ncclResult_t r = comm_live(comm, fn);
  if (r != ncclSuccess) return r;
  int a = atomic_load(&((struct ncclComm *)comm)->async_error);
  if (a > 0) return dev__error((ncclResult_t)a, "%s: the communicator failed earlier: %s", fn, comm->async_msg);
  return ncclSuccess;
}

/* ------------------------------------------------------------ ids */
static const char id_tag[8] = "devnccl";

DEV_API ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (!uniqueId) return dev__error(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  memset(uniqueId, 0, sizeof *uniqueId);
  memcpy(uniqueId->internal, id_tag, sizeof id_tag);
  dnx_make_name(uniqueId->internal + sizeof id_tag, sizeof uniqueId->internal - sizeof id_tag);
  return ncclSuccess;
}
DEV_ALIAS(ncclGetUniqueId);

/* ------------------------------------------------------------ creation */
static ncclResult_t config_check(const ncclConfig_t *config, const char *fn) {
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  if (!config) return ncclSuccess;
  if (config->magic != init.magic)
    return dev__error(ncclInvalidArgument, "%s: config magic 0x%x, expected 0x%x (use NCCL_CONFIG_INITIALIZER)",
                      fn, config->magic, init.magic);
  if (config->blocking == 0)
    return dev__error(ncclInvalidArgument, "%s: config blocking 0: the device test NCCL has blocking communicators "
                                           "only (tests/gpu/devnccl/README)",
                      fn);
  return ncclSuccess;
}

static ncclResult_t comm_join(const char *name, int nranks, int rank, const char *fn, ncclComm_t *out) {
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return dev__error(ncclSystemError, "%s: out of memory", fn);
  char err[512];
  int r = dnx_join(name, nranks, rank, &c->seg, err, sizeof err);
  if (r != DNX_OK) {
    free(c);
    return dev__error((ncclResult_t)r, "%s: %s", fn, err);
  }
  c->magic = DEV_MAGIC;
  c->rank = rank;
  c->nranks = nranks;
  if (cudaGetDevice(&c->device) != cudaSuccess) {
    cudaGetLastError();
    c->device = 0;
  }
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_lock(&registry_lock);
  c->next = registry;
  registry = c;
  pthread_mutex_unlock(&registry_lock);
  *out = c;
  return ncclSuccess;
}

static ncclResult_t init_rank(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank, ncclConfig_t *config,
                              const char *fn) {
  if (!comm) return dev__error(ncclInvalidArgument, "%s: comm is NULL", fn);
  *comm = NULL;
  ncclResult_t r = config_check(config, fn);
  if (r != ncclSuccess) return r;
  if (memcmp(id->internal, id_tag, sizeof id_tag) != 0)
    return dev__error(ncclInvalidArgument, "%s: the id was not made by this library's ncclGetUniqueId", fn);
  char name[DNX_NAME_MAX];
  snprintf(name, sizeof name, "%s", id->internal + sizeof id_tag);
  return comm_join(name, nranks, rank, fn, comm);
}

DEV_API ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank(comm, nranks, &commId, rank, NULL, "ncclCommInitRank");
}
DEV_ALIAS(ncclCommInitRank);

DEV_API ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                             ncclConfig_t *config) {
  return init_rank(comm, nranks, &commId, rank, config, "ncclCommInitRankConfig");
}
DEV_ALIAS(ncclCommInitRankConfig);

/* Colors and keys over the parent's control channel; the child's name is
 * the parent's, the split's number and the color, alike on its ranks.
 * FAKENCCL_FAIL_SPLIT=1 fails it before any communication, as in the host
 * test NCCL. */
DEV_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
  const char *fn = "ncclCommSplit";
  ncclResult_t r = dev__comm_ready(comm, fn);
  if (r != ncclSuccess) return r;
  if (!newcomm) return dev__error(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return dev__error(ncclInvalidArgument, "%s: color %d (accepted: >= 0, or NCCL_SPLIT_NOCOLOR)", fn, color);
  if ((r = config_check(config, fn)) != ncclSuccess) return r;
  const char *fail = getenv("FAKENCCL_FAIL_SPLIT");
  if (fail && !strcmp(fail, "1")) return dev__error(ncclSystemError, "%s: failed on purpose (FAKENCCL_FAIL_SPLIT=1)", fn);
  int64_t all[DNX_MAX_RANKS][2];
  char err[512];
  int x = dnx_ctl_allgather(comm->seg, color, key, all, err, sizeof err);
  if (x != DNX_OK) return dev__error((ncclResult_t)x, "%s: %s", fn, err);
  unsigned serial = ++comm->splits;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  int n = 0, me = 0;
  for (int q = 0; q < comm->nranks; q++) {
    if (all[q][0] != color) continue;
    n++;
    me += all[q][1] < key || (all[q][1] == key && q < comm->rank); /* ordered by key, then parent rank */
  }
  char name[DNX_NAME_MAX];
  if (snprintf(name, sizeof name, "%s.s%u.%d", dnx_name(comm->seg), serial, color) >= (int)sizeof name)
    return dev__error(ncclInvalidUsage, "%s: splits nested too deep for a shared-memory name", fn);
  return comm_join(name, n, me, fn, newcomm);
}
DEV_ALIAS(ncclCommSplit);

/* ------------------------------------------------------------ teardown */
/* Waits (FAKENCCL_TIMEOUT at most) for the uncaptured operations still on
 * a stream: their callbacks use the segment and the staging buffers. */
static ncclResult_t comm_free(struct ncclComm *c, const char *fn) {
  const char *v = getenv("FAKENCCL_TIMEOUT");
  double limit = v && atof(v) > 0 ? atof(v) : 60, waited = 0;
  while (atomic_load(&c->inflight) > 0 && waited < limit) {
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
    waited += 0.001;
  }
  if (atomic_load(&c->inflight) > 0) /* freeing now could crash a late callback: keep it */
    return dev__error(ncclSystemError, "%s: %d operations still on their streams after %.0f s; communicator leaked",
                      fn, atomic_load(&c->inflight), limit);
  dev__free_staging(c);
  dnx_leave(c->seg);
  pthread_mutex_destroy(&c->lock);
  c->magic = 0;
  free(c);
  return ncclSuccess;
}

DEV_API ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess; /* as NCCL */
  ncclResult_t r = comm_live(comm, "ncclCommDestroy");
  if (r != ncclSuccess) return r;
  registered(comm, 1);
  return comm_free(comm, "ncclCommDestroy");
}
DEV_ALIAS(ncclCommDestroy);

DEV_API ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  ncclResult_t r = comm_live(comm, "ncclCommAbort");
  if (r != ncclSuccess) return r;
  dnx_abort(comm->seg, "a rank called ncclCommAbort");
  registered(comm, 1);
  return comm_free(comm, "ncclCommAbort");
}
DEV_ALIAS(ncclCommAbort);

/* ------------------------------------------------------------ queries */
DEV_API ncclResult_t pncclCommCount(const ncclComm_t comm, int *count) {
  ncclResult_t r = comm_live(comm, "ncclCommCount");
  if (r != ncclSuccess) return r;
  if (!count) return dev__error(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}
DEV_ALIAS(ncclCommCount);

DEV_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank) {
  ncclResult_t r = comm_live(comm, "ncclCommUserRank");
  if (r != ncclSuccess) return r;
  if (!rank) return dev__error(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}
DEV_ALIAS(ncclCommUserRank);

DEV_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device) {
  ncclResult_t r = comm_live(comm, "ncclCommCuDevice");
  if (r != ncclSuccess) return r;
  if (!device) return dev__error(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = comm->device; /* current when the communicator was made */
  return ncclSuccess;
}
DEV_ALIAS(ncclCommCuDevice);

DEV_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  ncclResult_t r = comm_live(comm, "ncclCommGetAsyncError");
  if (r != ncclSuccess) return r;
  if (!asyncError) return dev__error(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  int a = atomic_load(&comm->async_error);
  *asyncError = a > 0 ? (ncclResult_t)a : ncclSuccess;
  return ncclSuccess;
}
DEV_ALIAS(ncclCommGetAsyncError);

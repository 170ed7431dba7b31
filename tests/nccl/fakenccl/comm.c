/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * comm.c - unique ids and communicators: creation, split, shrink, teardown
 * and queries.
 *
 * A communicator is an MPI communicator whose ranks are ordered as the NCCL
 * ranks. ncclCommInitRank* is MPI_Comm_split of MPI_COMM_WORLD with a color
 * hashed from the unique id and key = rank, so EVERY rank of MPI_COMM_WORLD
 * must take part in each init call (ranks of other communicators with their
 * own ids, in the same order), which is what the tests do. A rank that
 * fails an argument check before that split leaves the others waiting, as
 * it would leave real NCCL's bootstrap waiting.
 */
#include "fakenccl.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- registry */
/* Live communicators, so that a destroyed or foreign handle is refused
 * instead of read. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *registry;

static void registry_add(struct ncclComm *c) {
  pthread_mutex_lock(&registry_lock);
  c->next = registry;
  registry = c;
  pthread_mutex_unlock(&registry_lock);
}

static int registry_remove(struct ncclComm *c) {
  int found = 0;
  pthread_mutex_lock(&registry_lock);
  for (struct ncclComm **p = &registry; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      found = 1;
      break;
    }
  pthread_mutex_unlock(&registry_lock);
  return found;
}

ncclResult_t fake__comm_check(const struct ncclComm *comm, const char *fn) {
  if (!comm) return fake__error(ncclInvalidArgument, "%s: comm is NULL", fn);
  int found = 0;
  pthread_mutex_lock(&registry_lock);
  for (const struct ncclComm *c = registry; c && !found; c = c->next) found = c == comm;
  pthread_mutex_unlock(&registry_lock);
  if (!found || comm->magic != FAKE_MAGIC)
    return fake__error(ncclInvalidArgument, "%s: comm %p is not a live communicator (destroyed, or never made)",
                       fn, (const void *)comm);
  return ncclSuccess;
}

ncclResult_t fake__comm_ready(const struct ncclComm *comm, const char *fn) {
  ncclResult_t r = fake__comm_check(comm, fn);
  if (r != ncclSuccess) return r;
  if (comm->pending) /* NCCL's answer to using a comm before its init (or last call) was seen to finish */
    return fake__error(ncclInvalidArgument,
                       "%s: comm %p is non-blocking and its init or last call has not been reported done; "
                       "poll ncclCommGetAsyncError until it is not ncclInProgress",
                       fn, (const void *)comm);
  return ncclSuccess;
}

ncclResult_t fake__call_result(struct ncclComm *comm, ncclResult_t r) {
  const char *mode = getenv("FAKENCCL_NONBLOCKING_CALLS");
  if (r != ncclSuccess || comm->blocking || !mode || strcmp(mode, "inprogress")) return r;
  comm->pending = 1;
  return ncclInProgress;
}

/* ---------------------------------------------------------------- MPI */
static int mpi_ours; /* this library called MPI_Init, so it finalises at exit */

static void mpi_finalize_at_exit(void) {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

ncclResult_t fake__mpi_ready(const char *fn) {
  int up = 0, done = 0;
  MPI_Finalized(&done);
  if (done) return fake__error(ncclSystemError, "%s: MPI is already finalized", fn);
  MPI_Initialized(&up);
  if (up) return ncclSuccess;
  int provided;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return fake__error(ncclSystemError, "%s: MPI_Init_thread failed", fn);
  if (!mpi_ours) atexit(mpi_finalize_at_exit);
  mpi_ours = 1;
  return ncclSuccess;
}

static ncclResult_t mpi_failed(const char *fn, const char *call, int err) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(err, msg, &len);
  return fake__error(ncclSystemError, "%s: %s failed: %s", fn, call, msg);
}

/* ---------------------------------------------------------------- unique ids */
/* What ncclGetUniqueId writes at the start of the 128 bytes (rest zero). */
typedef struct fake_id {
  char tag[8];        /* "fakencl": refuses ids from elsewhere */
  uint64_t host_hash; /* with pid and counter: unique per call on a cluster */
  uint64_t nanos;     /* distinguishes a recycled pid */
  int32_t pid;
  uint32_t counter;
} fake_id;
static const char id_tag[8] = "fakencl";

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

FAKE_API ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId) {
  static uint32_t counter;
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  if (!uniqueId) return fake__error(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  fake_id id;
  memset(&id, 0, sizeof id);
  memcpy(id.tag, id_tag, sizeof id.tag);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  id.host_hash = fnv1a(0xcbf29ce484222325ULL, host, strlen(host));
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  id.nanos = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  id.pid = (int32_t)getpid();
  pthread_mutex_lock(&lock);
  id.counter = ++counter;
  pthread_mutex_unlock(&lock);
  memset(uniqueId, 0, sizeof *uniqueId);
  memcpy(uniqueId->internal, &id, sizeof id);
  return ncclSuccess;
}
FAKE_ALIAS(ncclGetUniqueId);

/* ---------------------------------------------------------------- creation */
/* config == NULL means the defaults, which are blocking. */
static ncclResult_t config_blocking(const ncclConfig_t *config, const char *fn, int *blocking) {
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  *blocking = 1;
  if (!config) return ncclSuccess;
  if (config->magic != init.magic)
    return fake__error(ncclInvalidArgument, "%s: config magic 0x%x, expected 0x%x (use NCCL_CONFIG_INITIALIZER)",
                       fn, config->magic, init.magic);
  if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1)
    return fake__error(ncclInvalidArgument, "%s: config blocking %d (accepted: 0, 1)", fn, config->blocking);
  if (config->blocking == 0) *blocking = 0;
  return ncclSuccess;
}

/* NCCL_COMM_BLOCKING=0 or 1 overrides the config and the parent's mode,
 * as in NCCL (envConfigOverride); NCCL reads it with strtoll base 0, and
 * any other value leaves the mode alone. */
static int env_blocking(int blocking) {
  const char *env = getenv("NCCL_COMM_BLOCKING");
  if (!env || !*env) return blocking;
  errno = 0;
  long long v = strtoll(env, NULL, 0);
  return !errno && (v == 0 || v == 1) ? (int)v : blocking;
}

/* Wraps an MPI communicator already ordered by NCCL rank. A non-blocking
 * one reports ncclInProgress once through ncclCommGetAsyncError, so that
 * callers exercise NCCL's polling protocol. The call itself returns
 * ncclSuccess, one of the two answers real NCCL gives;
 * FAKENCCL_NONBLOCKING_INIT=inprogress makes it return the other,
 * ncclInProgress. */
static ncclResult_t comm_wrap(MPI_Comm mc, int blocking, const char *fn, ncclComm_t *newcomm) {
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) {
    MPI_Comm_free(&mc);
    return fake__error(ncclSystemError, "%s: out of memory", fn);
  }
  c->magic = FAKE_MAGIC;
  c->mpi = mc;
  MPI_Comm_rank(mc, &c->rank);
  MPI_Comm_size(mc, &c->nranks);
  c->blocking = blocking = env_blocking(blocking);
  c->pending = !blocking;
  registry_add(c);
  *newcomm = c;
  const char *mode = getenv("FAKENCCL_NONBLOCKING_INIT");
  return !blocking && mode && !strcmp(mode, "inprogress") ? ncclInProgress : ncclSuccess;
}

static ncclResult_t comm_create(const char *fn, ncclComm_t *newcomm, int nranks, int rank,
                                const ncclUniqueId *ids, int nid, const ncclConfig_t *config) {
  if (!newcomm) return fake__error(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  int blocking;
  ncclResult_t r = config_blocking(config, fn, &blocking);
  if (r != ncclSuccess) return r;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fake__error(ncclInvalidArgument, "%s: rank %d with nranks %d (accepted: 0 <= rank < nranks)", fn, rank,
                       nranks);
  if (nid < 1 || nid > nranks)
    return fake__error(ncclInvalidArgument, "%s: nId %d (accepted: 1..nranks=%d)", fn, nid, nranks);
  if (!ids) return fake__error(ncclInvalidArgument, "%s: commId is NULL", fn);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int i = 0; i < nid; i++) {
    if (memcmp(ids[i].internal, id_tag, sizeof id_tag))
      return fake__error(ncclInvalidArgument, "%s: commId %d was not made by this library's ncclGetUniqueId", fn, i);
    h = fnv1a(h, ids[i].internal, sizeof ids[i].internal);
  }
  if ((r = fake__mpi_ready(fn)) != ncclSuccess) return r;

  MPI_Comm mc;
  int color = (int)((h ^ (h >> 32)) & 0x7fffffff), err;
  if ((err = MPI_Comm_split(MPI_COMM_WORLD, color, rank, &mc)) != MPI_SUCCESS)
    return mpi_failed(fn, "MPI_Comm_split", err);
  int size, me, ok, all_ok;
  MPI_Comm_size(mc, &size);
  MPI_Comm_rank(mc, &me);
  ok = size == nranks && me == rank;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mc); /* all members fail together */
  if (!all_ok) {
    MPI_Comm_free(&mc);
    if (size != nranks)
      return fake__error(ncclInvalidUsage, "%s: %d ranks called with this id, but nranks is %d", fn, size, nranks);
    return fake__error(ncclInvalidUsage, "%s: ranks are not unique (rank %d%s)", fn, rank,
                       ok ? " is fine here, another rank clashes" : " was given to several callers");
  }
  return comm_wrap(mc, blocking, fn, newcomm);
}

FAKE_API ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  return comm_create("ncclCommInitRank", comm, nranks, rank, &commId, 1, NULL);
}
FAKE_ALIAS(ncclCommInitRank);

FAKE_API ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                              ncclConfig_t *config) {
  return comm_create("ncclCommInitRankConfig", comm, nranks, rank, &commId, 1, config);
}
FAKE_ALIAS(ncclCommInitRankConfig);

FAKE_API ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                                ncclUniqueId *commIds, ncclConfig_t *config) {
  return comm_create("ncclCommInitRankScalable", newcomm, nranks, myrank, commIds, nId, config);
}
FAKE_ALIAS(ncclCommInitRankScalable);

/* One process is one rank here, so only a single-device clique can be made. */
FAKE_API ncclResult_t pncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  const char *fn = "ncclCommInitAll";
  if (!comms) return fake__error(ncclInvalidArgument, "%s: comms is NULL", fn);
  if (ndev < 0) return fake__error(ncclInvalidArgument, "%s: ndev %d is negative", fn, ndev);
  if (ndev == 0) return ncclSuccess;
  if (ndev > 1)
    return fake__error(ncclInvalidUsage, "%s: ndev %d, but the test NCCL drives one rank per process (accepted: 1)",
                       fn, ndev);
  if (devlist && devlist[0] != 0)
    return fake__error(ncclInvalidArgument, "%s: device %d (the test NCCL has device 0 only)", fn, devlist[0]);
  ncclResult_t r = fake__mpi_ready(fn);
  if (r != ncclSuccess) return r;
  MPI_Comm mc;
  int err = MPI_Comm_dup(MPI_COMM_SELF, &mc);
  if (err != MPI_SUCCESS) return mpi_failed(fn, "MPI_Comm_dup", err);
  return comm_wrap(mc, 1, fn, &comms[0]);
}
FAKE_ALIAS(ncclCommInitAll);

/* FAKENCCL_NO_SPLIT builds an NCCL older than 2.18, which lacks it: what
 * dlsym finds (or not) is what squall's two-level all-reduce sees. */
#ifndef FAKENCCL_NO_SPLIT
FAKE_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                     ncclConfig_t *config) {
  const char *fn = "ncclCommSplit";
  ncclResult_t r = fake__comm_ready(comm, fn);
  if (r != ncclSuccess) return r;
  if (!newcomm) return fake__error(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fake__error(ncclInvalidArgument, "%s: color %d (accepted: >= 0, or NCCL_SPLIT_NOCOLOR)", fn, color);
  if ((r = fake__split_fault(fn)) != ncclSuccess) return r; /* FAKENCCL_FAIL_SPLIT (split_fault.c) */
  int blocking = comm->blocking;                            /* no config: the child inherits the parent's */
  if (config && (r = config_blocking(config, fn, &blocking)) != ncclSuccess) return r;
  MPI_Comm mc;
  int err = MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &mc);
  if (err != MPI_SUCCESS) return mpi_failed(fn, "MPI_Comm_split", err);
  if (mc == MPI_COMM_NULL) return ncclSuccess; /* NCCL_SPLIT_NOCOLOR: no communicator */
  return comm_wrap(mc, blocking, fn, newcomm);
}
FAKE_ALIAS(ncclCommSplit);
#endif

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Only the ranks that stay call it, as in NCCL: MPI_Comm_create_group is
 * collective over exactly those. */
FAKE_API ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                      ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  const char *fn = "ncclCommShrink";
  ncclResult_t r = fake__comm_ready(comm, fn);
  if (r != ncclSuccess) return r;
  if (!newcomm) return fake__error(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  if (!excludeRanksList) return fake__error(ncclInvalidArgument, "%s: excludeRanksList is NULL", fn);
  if (excludeRanksCount <= 0 || excludeRanksCount >= comm->nranks)
    return fake__error(ncclInvalidArgument, "%s: excludeRanksCount %d (accepted: 1..%d)", fn, excludeRanksCount,
                       comm->nranks - 1);
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return fake__error(ncclInvalidArgument,
                       "%s: shrinkFlags %d (accepted: NCCL_SHRINK_DEFAULT, NCCL_SHRINK_ABORT)", fn, shrinkFlags);
  int blocking = comm->blocking;
  if (config && (r = config_blocking(config, fn, &blocking)) != ncclSuccess) return r;
  int *ex = malloc((size_t)excludeRanksCount * sizeof *ex);
  if (!ex) return fake__error(ncclSystemError, "%s: out of memory", fn);
  memcpy(ex, excludeRanksList, (size_t)excludeRanksCount * sizeof *ex); /* sorted copy; the caller's stays */
  qsort(ex, (size_t)excludeRanksCount, sizeof *ex, cmp_int);
  for (int i = 0; i < excludeRanksCount && r == ncclSuccess; i++) {
    if (ex[i] < 0 || ex[i] >= comm->nranks)
      r = fake__error(ncclInvalidArgument, "%s: excluded rank %d (accepted: 0..%d)", fn, ex[i], comm->nranks - 1);
    else if (i > 0 && ex[i] == ex[i - 1])
      r = fake__error(ncclInvalidArgument, "%s: excluded rank %d is listed twice", fn, ex[i]);
    else if (ex[i] == comm->rank)
      r = fake__error(ncclInvalidArgument, "%s: rank %d is excluded and must not call ncclCommShrink", fn, ex[i]);
  }
  MPI_Group all, kept;
  MPI_Comm mc = MPI_COMM_NULL;
  int err = MPI_SUCCESS;
  if (r == ncclSuccess) {
    MPI_Comm_group(comm->mpi, &all);
    MPI_Group_excl(all, excludeRanksCount, ex, &kept);
    err = MPI_Comm_create_group(comm->mpi, kept, 0x5a11, &mc);
    MPI_Group_free(&kept);
    MPI_Group_free(&all);
  }
  free(ex);
  if (r != ncclSuccess) return r;
  if (err != MPI_SUCCESS) return mpi_failed(fn, "MPI_Comm_create_group", err);
  return comm_wrap(mc, blocking, fn, newcomm);
}
FAKE_ALIAS(ncclCommShrink);

/* ---------------------------------------------------------------- teardown */
static void comm_free(struct ncclComm *c) {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Comm_free(&c->mpi);
  c->magic = 0;
  free(c->ops);
  free(c);
}

FAKE_API ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess; /* as NCCL */
  ncclResult_t r = fake__comm_ready(comm, "ncclCommDestroy");
  if (r != ncclSuccess) return r;
  registry_remove(comm);
  comm_free(comm);
  return ncclSuccess;
}
FAKE_ALIAS(ncclCommDestroy);

/* Nothing is ever in flight here, so aborting is destroying, in any state. */
FAKE_API ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  ncclResult_t r = fake__comm_check(comm, "ncclCommAbort");
  if (r != ncclSuccess) return r;
  registry_remove(comm);
  comm_free(comm);
  return ncclSuccess;
}
FAKE_ALIAS(ncclCommAbort);

FAKE_API ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  ncclResult_t r = fake__comm_ready(comm, "ncclCommFinalize");
  if (r != ncclSuccess) return r;
  if (comm->finalized) return fake__error(ncclInvalidArgument, "ncclCommFinalize: comm %p is already finalized",
                                          (void *)comm);
  comm->finalized = 1; /* operations completed when they were called: nothing to flush */
  return ncclSuccess;
}
FAKE_ALIAS(ncclCommFinalize);

FAKE_API ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  const char *fn = "ncclCommRevoke";
  if (!comm) return ncclSuccess;
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return fake__error(ncclInvalidArgument, "%s: revokeFlags %d (accepted: NCCL_REVOKE_DEFAULT)", fn, revokeFlags);
  ncclResult_t r = fake__comm_check(comm, fn);
  if (r != ncclSuccess) return r;
  if (comm->finalized || comm->revoked)
    return fake__error(ncclInvalidArgument, "%s: comm %p is already %s", fn, (void *)comm,
                       comm->revoked ? "revoked" : "finalized");
  comm->revoked = 1; /* later collectives fail with ncclInvalidUsage; destroy still works */
  comm->pending = 0;
  return ncclSuccess;
}
FAKE_ALIAS(ncclCommRevoke);

/* ---------------------------------------------------------------- queries */
FAKE_API ncclResult_t pncclCommCount(const ncclComm_t comm, int *count) {
  ncclResult_t r = fake__comm_ready(comm, "ncclCommCount");
  if (r != ncclSuccess) return r;
  if (!count) return fake__error(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}
FAKE_ALIAS(ncclCommCount);

FAKE_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank) {
  ncclResult_t r = fake__comm_ready(comm, "ncclCommUserRank");
  if (r != ncclSuccess) return r;
  if (!rank) return fake__error(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}
FAKE_ALIAS(ncclCommUserRank);

FAKE_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device) {
  ncclResult_t r = fake__comm_ready(comm, "ncclCommCuDevice");
  if (r != ncclSuccess) return r;
  if (!device) return fake__error(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = 0; /* every rank "owns" device 0 */
  return ncclSuccess;
}
FAKE_ALIAS(ncclCommCuDevice);

FAKE_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  ncclResult_t r = fake__comm_check(comm, "ncclCommGetAsyncError");
  if (r != ncclSuccess) return r;
  if (!asyncError) return fake__error(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  *asyncError = comm->pending ? ncclInProgress : ncclSuccess;
  comm->pending = 0; /* the non-blocking init is "done" once it has been seen in progress */
  return ncclSuccess;
}
FAKE_ALIAS(ncclCommGetAsyncError);

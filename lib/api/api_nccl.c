/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * api_nccl.c - the NCCL side shared by squallAllReduce() and the
 * LD_PRELOAD interposer: per-communicator engines (one for device buffers,
 * one for host buffers), PreMulSum tracking, and the all-reduce that asks
 * the engine and otherwise hands the call to the real ncclAllReduce.
 */
#include "common/internal.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/kernels.h"
#include "common/stats.h"
#include "api/api_nccl.h"
#include "squall_nccl.h"
#include "transports/transport_nccl.h"

typedef struct premul {
  ncclRedOp_t op;
  int on_device;           /* ncclScalarDevice: not readable without a sync */
  float scalar;            /* host immediate, as float */
  ncclDataType_t datatype; /* an op is valid only for calls of its type: others go to NCCL,
                              which refuses them */
  struct premul *next;
} premul;

typedef struct nccl_state {
  ncclComm_t comm;
  squall_nccl_ctx tctx[2]; /* [0] host buffers, [1] device buffers */
  squall_engine *engine[2];
  premul *ops;
  int nonblocking;
  int said_group;            /* a grouped call that squall would compress passed through: said once */
  int said_compressed_group; /* a group was run through squall: said once (INFO) */
  int users;                 /* all-reduces running on this state right now */
  int forgotten;             /* torn down while in use: the last user frees it */
  struct nccl_state *next;
} nccl_state;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static nccl_state *states;

/* What could not be recorded for lack of memory: a PreMulSum op (its calls
 * would pass through here while the peers, who recorded it, compress them)
 * or a communicator's non-blocking mark (the call header would still make
 * every rank pass through where a peer has the mark, but not where every
 * rank lost it). A lost op makes this rank take another path than its
 * peers: a hang or a wrong sum. Such calls fail
 * instead, with ncclSystemError and the reason, as NCCL fails a call it
 * cannot set up; the caller then aborts the communicator as after any
 * NCCL error. Failing was chosen over preallocating because the ops and
 * communicators a program makes have no bound to preallocate for. The
 * table itself is fixed, so recording a loss cannot fail; when it is full,
 * every call on every communicator fails. Caller holds the lock. */
#define LOST_MAX 32
#define LOST_ALL_OPS (-1)
static struct {
  ncclComm_t comm;
  int op; /* LOST_ALL_OPS: the non-blocking mark */
} lost[LOST_MAX];
static int nlost, lost_overflow;

static void lose(ncclComm_t comm, int op, const char *what) {
  SQ_WARN("out of memory recording %s for NCCL communicator %p: its all-reduces%s fail with ncclSystemError "
          "from now on, rather than take another path than the other ranks",
          what, (void *)comm, op == LOST_ALL_OPS ? "" : " with that op");
  for (int i = 0; i < nlost; i++)
    if (lost[i].comm == comm && (lost[i].op == op || lost[i].op == LOST_ALL_OPS)) return;
  if (nlost == LOST_MAX) {
    lost_overflow = 1;
    return;
  }
  lost[nlost].comm = comm;
  lost[nlost].op = op;
  nlost++;
}

static int is_lost(ncclComm_t comm, int op) {
  if (lost_overflow) return 1;
  for (int i = 0; i < nlost; i++)
    if (lost[i].comm == comm && (lost[i].op == op || lost[i].op == LOST_ALL_OPS)) return 1;
  return 0;
}

/* Forgets the losses of comm (all ops when op is LOST_ALL_OPS). */
static void unlose(ncclComm_t comm, int op) {
  for (int i = 0; i < nlost;)
    if (lost[i].comm == comm && (op == LOST_ALL_OPS || lost[i].op == op)) lost[i] = lost[--nlost];
    else i++;
}

/* Caller holds the lock. */
static nccl_state *find(ncclComm_t comm, int create) {
  for (nccl_state *s = states; s; s = s->next)
    if (s->comm == comm) return s;
  if (!create) return NULL;
  nccl_state *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->comm = comm;
  s->next = states;
  states = s;
  return s;
}

static void free_state(nccl_state *s) {
  for (int i = 0; i < 2; i++) squall__engine_free(s->engine[i]);
  for (premul *p = s->ops; p;) {
    premul *next = p->next;
    free(p);
    p = next;
  }
  free(s);
}

void squall__nccl_comm_forget(ncclComm_t comm) {
  pthread_mutex_lock(&lock);
  unlose(comm, LOST_ALL_OPS); /* a later communicator may get the same address */
  for (nccl_state **pp = &states; *pp; pp = &(*pp)->next)
    if ((*pp)->comm == comm) {
      nccl_state *s = *pp;
      *pp = s->next;
      /* An abort from another thread (a framework's watchdog) can arrive
       * while an all-reduce is inside the engine: that call frees it. */
      int in_use = s->users > 0;
      if (in_use) s->forgotten = 1;
      pthread_mutex_unlock(&lock);
      if (!in_use) free_state(s);
      return;
    }
  pthread_mutex_unlock(&lock);
}

void squall__nccl_mark_nonblocking(ncclComm_t comm) {
  pthread_mutex_lock(&lock);
  nccl_state *s = find(comm, 1);
  if (s) s->nonblocking = 1;
  else lose(comm, LOST_ALL_OPS, "that it is non-blocking");
  pthread_mutex_unlock(&lock);
}

int squall__nccl_is_nonblocking(ncclComm_t comm) {
  pthread_mutex_lock(&lock);
  nccl_state *s = find(comm, 0);
  int nb = s && s->nonblocking;
  pthread_mutex_unlock(&lock);
  return nb;
}

static float scalar_as_float(const void *p, ncclDataType_t t, int *ok) {
  *ok = 1;
  switch (t) {
  case ncclFloat32: return *(const float *)p;
  case ncclFloat64: return (float)*(const double *)p;
  case ncclFloat16: return sq_f16_to_f32(*(const uint16_t *)p);
  case ncclBfloat16: return sq_bf16_to_f32(*(const uint16_t *)p);
  default: *ok = 0; return 0.0f;
  }
}

void squall__nccl_premul_add(ncclComm_t comm, ncclRedOp_t op, const void *scalar, ncclDataType_t datatype,
                             ncclScalarResidence_t residence) {
  premul *p = calloc(1, sizeof *p);
  int ok = 1;
  if (p == NULL) {
    pthread_mutex_lock(&lock);
    lose(comm, (int)op, "a PreMulSum op");
    pthread_mutex_unlock(&lock);
    return;
  }
  p->op = op;
  p->datatype = datatype;
  p->on_device = residence == ncclScalarDevice;
  if (!p->on_device) p->scalar = scalar ? scalar_as_float(scalar, datatype, &ok) : 0.0f;
  if (!ok || scalar == NULL) p->on_device = 1; /* not a float scalar: treat as unreadable */
  pthread_mutex_lock(&lock);
  nccl_state *s = find(comm, 1);
  if (s) {
    p->next = s->ops;
    s->ops = p;
  } else {
    free(p);
    lose(comm, (int)op, "a PreMulSum op");
  }
  pthread_mutex_unlock(&lock);
}

void squall__nccl_premul_remove(ncclComm_t comm, ncclRedOp_t op) {
  pthread_mutex_lock(&lock);
  unlose(comm, (int)op); /* NCCL may hand out the op's number again */
  nccl_state *s = find(comm, 0);
  if (s)
    for (premul **pp = &s->ops; *pp; pp = &(*pp)->next)
      if ((*pp)->op == op) {
        premul *p = *pp;
        *pp = p->next;
        free(p);
        break;
      }
  pthread_mutex_unlock(&lock);
}

static int dtype_of(ncclDataType_t t, size_t *elsize) {
  switch (t) {
  case ncclFloat32: *elsize = 4; return SQ_DT_F32;
  case ncclFloat16: *elsize = 2; return SQ_DT_F16;
  case ncclBfloat16: *elsize = 2; return SQ_DT_BF16;
  case ncclInt8:
  case ncclUint8: *elsize = 1; return -1;
  case ncclInt32:
  case ncclUint32: *elsize = 4; return -1;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64: *elsize = 8; return -1;
  default: *elsize = 1; return -1;
  }
}

/* The engine for this memory kind, created on first use. Caller holds the lock. */
static squall_engine *engine_of(nccl_state *s, const squall_nccl_api *api, int device) {
  if (s->engine[device]) return s->engine[device];
  squall_nccl_ctx *c = &s->tctx[device];
  c->api = api;
  c->comm = s->comm;
  c->device_memory = device;
  squall_transport tr;
  if (squall__transport_nccl_init(&tr, c) != squallSuccess) return NULL;
  squall__stats_set_rank(tr.rank, tr.nranks, 0); /* may name the SQUALL_STATS file (stats.h) */
  /* NCCL is only built with CUDA: the device kernel set is always there. */
  s->engine[device] = squall__engine_create(&tr, device ? &squall__kernels_cuda : &squall__kernels_host);
  return s->engine[device];
}

/* Never a silent no-op: a grouped call that squall would compress
 * passes through (reason in_group) where its group cannot be compressed
 * (why: what the group holds, lib/interpose/preload_group.c). Said once
 * per communicator, by its rank 0. */
static void say_grouped(const squall_nccl_api *api, ncclComm_t comm, const char *why) {
  int rank = 0, n = 0;
  if (api->commUserRank) api->commUserRank(comm, &rank);
  if (api->commCount) api->commCount(comm, &n);
  if (rank == 0)
    SQ_WARN("rank 0/%d: a ncclGroupStart/ncclGroupEnd group %s: its all-reduces on this communicator pass "
            "through uncompressed (reason in_group); squall compresses a group only where it holds nothing but "
            "ncclAllReduce calls on one blocking communicator (said once per communicator)",
            n, why);
}

void squall__nccl_note_group(ncclComm_t comm, int calls) {
  pthread_mutex_lock(&lock);
  nccl_state *s = find(comm, 1); /* a first group comes before the state's first call */
  int say = s && !s->said_compressed_group;
  if (say) s->said_compressed_group = 1;
  pthread_mutex_unlock(&lock);
  if (say)
    SQ_INFO("NCCL communicator %p: grouped all-reduces (%d in the first group) run through squall one by one "
            "at the outermost ncclGroupEnd",
            (void *)comm, calls);
}

/* One call as the caller made it: ncclAllReduce's arguments, or
 * ncclReduceScatter's (count: its recvcount). */
typedef struct {
  squall_coll coll;
  const void *send;
  void *recv;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op;
  ncclComm_t comm;
  cudaStream_t stream;
  const char *group_why; /* non-NULL: inside a group that passes through, and why */
  int interposed;        /* the interposer's call: SQUALL_COLLECTIVES decides */
  const char *caller;    /* the function the application called, as messages name it */
} nccl_args;

/* The call handed to NCCL as it came. */
static ncclResult_t plain(const squall_nccl_api *api, const nccl_args *a) {
  if (a->coll == SQ_COLL_REDUCE_SCATTER)
    return api->reduceScatter(a->send, a->recv, a->count, a->datatype, a->op, a->comm, a->stream);
  return api->allReduce(a->send, a->recv, a->count, a->datatype, a->op, a->comm, a->stream);
}

static ncclResult_t invalid(const nccl_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ncclResult_t invalid(const nccl_args *a, const char *fmt, ...) {
  char why[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  squall__fail(squallInvalidArgument, "%s: %s", a->caller, why);
  SQ_WARN("%s", squallGetLastError());
  return ncclInvalidArgument;
}

/* A reduce-scatter's send buffer holds recvcount elements per rank: the
 * engine's count, which must fit a size_t (NCCL's own sizes are size_t
 * too); recvbuff may overlap sendbuff only where NCCL's in-place rule puts
 * it, at this rank's block (sendbuff + rank * recvcount). Both are local
 * argument errors, the same on every rank that makes them (as NCCL's own
 * checks). ncclSuccess, or ncclInvalidArgument (logged). */
static ncclResult_t scatter_count(const squall_nccl_api *api, const nccl_args *a, squall_call *call) {
  int nranks = 0, rank = 0;
  if (api->commCount(a->comm, &nranks) != ncclSuccess || api->commUserRank(a->comm, &rank) != ncclSuccess ||
      nranks < 1)
    return invalid(a, "cannot read the communicator's size and rank");
  if (a->count > SIZE_MAX / (size_t)nranks)
    return invalid(a, "recvcount %zu times %d ranks overflows size_t", a->count, nranks);
  call->count = a->count * (size_t)nranks;
  if (a->count == 0 || call->count > SIZE_MAX / call->elsize) return ncclSuccess; /* the caller says so */
  uintptr_t s = (uintptr_t)a->send, r = (uintptr_t)a->recv, rb = a->count * call->elsize;
  int overlap = r < s + call->count * call->elsize && s < r + rb;
  if (overlap && r != s + (uintptr_t)rank * rb)
    return invalid(a, "recvbuff %p overlaps sendbuff %p other than at this rank's block (sendbuff + rank %d * "
                      "recvcount %zu elements), NCCL's only in-place reduce-scatter",
                   a->recv, a->send, rank, a->count);
  return ncclSuccess;
}

static ncclResult_t run_on_state(const squall_nccl_api *api, squall_engine *e, squall_call *c, int device,
                                 const nccl_args *a, int *raised);

/* The call through the engine, once the arguments made a squall_call. */
static ncclResult_t run_call(const squall_nccl_api *api, const nccl_args *a, squall_call *call, int *raised) {
  int device = squall__cuda_is_device_pointer(a->send);
  pthread_mutex_lock(&lock);
  if (is_lost(a->comm, (int)a->op)) {
    pthread_mutex_unlock(&lock);
    squall__fail(squallSystemError, "%s(count=%zu): squall lost track of this communicator's "
                                    "state for lack of memory (logged when it happened)",
                 a->caller, a->count);
    SQ_WARN("%s", squallGetLastError());
    return ncclSystemError;
  }
  nccl_state *s = find(a->comm, 1);
  call->op = a->op == ncclSum ? SQ_OP_SUM : a->op == ncclAvg ? SQ_OP_AVG
                                                             : SQ_OP_OTHER;
  for (premul *p = s ? s->ops : NULL; p && call->op == SQ_OP_OTHER; p = p->next)
    if (p->op == a->op && !p->on_device && p->datatype == a->datatype) {
      call->op = SQ_OP_SUM;
      call->premul = p->scalar;
    }
  /* A non-blocking communicator's calls pass through, but only the engine
   * can say so to every rank (the call header): a rank whose communicator
   * is blocking would otherwise run compressed collectives against this
   * rank's plain one. */
  call->nonblocking = s && s->nonblocking;
  squall_engine *e = s ? engine_of(s, api, device) : NULL;
  if (e) s->users++;
  int say_group = e && a->group_why && call->dtype >= 0 && call->op != SQ_OP_OTHER && !s->said_group;
  if (say_group) {
    /* only where the configuration would compress it otherwise */
    squallConfig_t cfg;
    squall__config_get(&cfg, NULL);
    int bit = a->coll == SQ_COLL_REDUCE_SCATTER ? squallCollectiveReduceScatter : squallCollectiveAllReduce;
    say_group = cfg.codec != squallCodecNone && call->count > 0 && call->count * call->elsize >= cfg.minBytes &&
                (!a->interposed || (cfg.collectives & bit));
    if (say_group) s->said_group = 1;
  }
  pthread_mutex_unlock(&lock);
  if (say_group) say_grouped(api, a->comm, a->group_why);
  if (e == NULL) {
    /* Passing through alone could pair this rank's plain call with its
     * peers' compressed collectives: fail, as NCCL would. */
    char why[256]; /* the engine's reason where it gave one (a failed find() gives none) */
    snprintf(why, sizeof why, "%s", s ? squallGetLastError() : "out of memory");
    squall__fail(squallSystemError, "%s(count=%zu): cannot set up squall state for the NCCL "
                                    "communicator: %s",
                 a->caller, a->count, why);
    SQ_WARN("%s", squallGetLastError());
    return ncclSystemError;
  }
  ncclResult_t result = run_on_state(api, e, call, device, a, raised);
  pthread_mutex_lock(&lock);
  int free_now = --s->users == 0 && s->forgotten;
  pthread_mutex_unlock(&lock);
  if (free_now) free_state(s);
  return result;
}

/* Either collective: compress through the engine, or hand it to NCCL. */
static ncclResult_t collective(const squall_nccl_api *api, const nccl_args *a, int *raised) {
  int raised_here;
  if (!raised) raised = &raised_here;
  *raised = 1; /* squall's, but on each way to NCCL */
#define PASS() (*raised = 0, plain(api, a))
  if (a->comm == NULL || a->recv == NULL || (a->send == NULL && a->count > 0)) return PASS(); /* NCCL reports it */
  /* A communicator that is not (or no longer) one, one still initialising
   * (non-blocking: ncclInProgress), or one in error is NCCL's business: the
   * call goes to NCCL as it is, which reports it. */
  ncclResult_t async = ncclSuccess;
  if (api->commGetAsyncError(a->comm, &async) != ncclSuccess || async != ncclSuccess) return PASS();
  /* clang-format off */
  squall_call call = {.send = a->send, .recv = a->recv, .count = a->count, .coll = a->coll, .premul = 1.0f,
                      .in_group = a->group_why != NULL, .interposed = a->interposed, .stream = (void *)a->stream};
  /* clang-format on */
  call.dtype = dtype_of(a->datatype, &call.elsize);
  if (a->coll == SQ_COLL_REDUCE_SCATTER) {
    ncclResult_t bad = scatter_count(api, a, &call);
    if (bad != ncclSuccess) return bad;
  }
  /* count * size must fit a size_t before anything (NCCL itself refuses
   * such a count with ncclInvalidArgument). */
  if (call.count > SIZE_MAX / call.elsize)
    return invalid(a, "count %zu of %zu-byte elements overflows size_t", call.count, call.elsize);
  return run_call(api, a, &call, raised);
#undef PASS
}

ncclResult_t squall__nccl_allreduce(const squall_nccl_api *api, const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
                                    const char *group_why, int interposed, int *raised) {
  nccl_args a = {SQ_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op,
                 comm, stream, group_why, interposed, api->caller};
  return collective(api, &a, raised);
}

ncclResult_t squall__nccl_reduce_scatter(const squall_nccl_api *api, const void *sendbuff, void *recvbuff,
                                         size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream, const char *group_why, int interposed, int *raised) {
  nccl_args a = {SQ_COLL_REDUCE_SCATTER, sendbuff, recvbuff, recvcount,
                 datatype, op, comm, stream,
                 group_why, interposed, interposed ? "ncclReduceScatter" : "squallReduceScatter"};
  return collective(api, &a, raised);
}

/* The engine's part of a call, with the state held (users > 0). */
static ncclResult_t run_on_state(const squall_nccl_api *api, squall_engine *e, squall_call *c, int device,
                                 const nccl_args *a, int *raised) {
  cudaStream_t stream = (cudaStream_t)c->stream;
  int prev = -1, dev = -1;
  if (device) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess) cudaGetLastError();
    c->capturing = cap != cudaStreamCaptureStatusNone;
    if (api->commCuDevice(a->comm, &dev) == ncclSuccess && cudaGetDevice(&prev) == cudaSuccess && prev != dev)
      cudaSetDevice(dev);
  }
  squall_decision d;
  squallResult_t r = squall__engine_allreduce(e, c, &d);
  if (device && prev >= 0 && prev != dev) cudaSetDevice(prev);
  /* The engine logged the failure; after it, a pass-through could count
   * data twice or pair collectives wrongly: the caller gets the error. */
  if (r != squallSuccess) return (ncclResult_t)r;
  if (d.route != SQ_ROUTE_PASS) return ncclSuccess;
  *raised = 0;
  ncclResult_t nr = plain(api, a);
  squall__engine_plain_ran(e, &d, stream, nr == ncclSuccess); /* the device cost model's timing */
  return nr;
}

ncclResult_t squallCommForget(ncclComm_t comm) {
  squall__nccl_comm_forget(comm);
  return ncclSuccess;
}

ncclResult_t squallResetResiduals(ncclComm_t comm) {
  pthread_mutex_lock(&lock);
  nccl_state *s = find(comm, 0);
  squallResult_t r = squallSuccess;
  for (int i = 0; s && i < 2 && r == squallSuccess; i++)
    if (s->engine[i]) r = squall__engine_reset_residuals(s->engine[i]);
  pthread_mutex_unlock(&lock);
  return (ncclResult_t)r;
}

ncclResult_t squall__nccl_get_scatter_residual(ncclComm_t comm, const void *sendbuff, size_t recvcount,
                                               ncclDataType_t datatype, float *out) {
  size_t elsize;
  int device = squall__cuda_is_device_pointer(sendbuff), nranks = 0;
  pthread_mutex_lock(&lock);
  nccl_state *s = find(comm, 0);
  squall_engine *e = s ? s->engine[device] : NULL;
  squallResult_t r = squallInvalidArgument;
  if (e && out && s->tctx[device].api->commCount(comm, &nranks) == ncclSuccess && nranks > 0 &&
      recvcount <= SIZE_MAX / (size_t)nranks)
    r = squall__engine_get_scatter_residual(e, sendbuff, recvcount * (size_t)nranks, dtype_of(datatype, &elsize), out);
  pthread_mutex_unlock(&lock);
  return (ncclResult_t)r;
}

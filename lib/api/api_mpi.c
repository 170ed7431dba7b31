/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * api_mpi.c - squallMpiAllreduce(): MPI_Allreduce's contract on host
 * buffers, through the engine with the host codecs. Each communicator's
 * engine hangs off the communicator as an MPI attribute, so MPI frees it
 * with the communicator (MPI_Comm_free, or MPI_Finalize for COMM_SELF).
 */
#include "common/internal.h"

#include <pthread.h>
#include <stdlib.h>

#include "api/cuda_pointer.h"
#include "api/api_mpi.h"
#include "engine/engine.h"
#include "engine/entry.h"
#include "kernels/kernels.h"
#include "squall_mpi.h"
#include "common/stats.h"
#include "transports/transport_mpi.h"

typedef struct {
  squall_mpi_ctx mpi;
  squall_engine *engine;
  int said_uneven; /* MPI_Reduce_scatter's uneven counts were logged (once) */
} comm_state;

static int keyval = MPI_KEYVAL_INVALID;
static pthread_mutex_t keyval_lock = PTHREAD_MUTEX_INITIALIZER;

static int delete_state(MPI_Comm comm, int key, void *value, void *extra) {
  comm_state *s = value;
  squall__engine_free(s->engine);
  squall__transport_mpi_fini(&s->mpi);
  free(s);
  return MPI_SUCCESS;
}

/* MPI_Finalize deletes COMM_SELF's attributes first: write statistics then,
 * while the rank is still known. */
static int at_finalize(MPI_Comm comm, int key, void *value, void *extra) {
  /* MPI never deletes COMM_WORLD's attributes: free its state here, which
   * also logs its summary at SQUALL_DEBUG=INFO. */
  if (keyval != MPI_KEYVAL_INVALID) squallMpiCommFree(MPI_COMM_WORLD);
  squall__stats_write_file();
  return MPI_SUCCESS;
}

/* Every call passes here: after the first, one atomic load, no lock. */
static int ensure_keyval(void) {
  if (__atomic_load_n(&keyval, __ATOMIC_ACQUIRE) != MPI_KEYVAL_INVALID) return 1;
  pthread_mutex_lock(&keyval_lock);
  if (keyval == MPI_KEYVAL_INVALID) {
    int key = MPI_KEYVAL_INVALID, self_key;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &key, NULL);
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &self_key, NULL) == MPI_SUCCESS)
      MPI_Comm_set_attr(MPI_COMM_SELF, self_key, NULL);
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    squall__stats_set_rank(rank, 0, 1);
    __atomic_store_n(&keyval, key, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&keyval_lock);
  return keyval != MPI_KEYVAL_INVALID;
}

/* The communicator's state, created on first use (NULL on failure). */
static comm_state *state_of(MPI_Comm comm, int create) {
  if (!ensure_keyval()) return NULL;
  void *v = NULL;
  int found = 0;
  MPI_Comm_get_attr(comm, keyval, &v, &found);
  if (found) return v;
  if (!create) return NULL;
  comm_state *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  squall_transport tr;
  if (squall__transport_mpi_init(&tr, &s->mpi, comm) != squallSuccess ||
      (s->engine = squall__engine_create(&tr, &squall__kernels_host)) == NULL) {
    squall__transport_mpi_fini(&s->mpi);
    free(s);
    return NULL;
  }
  MPI_Comm_set_attr(comm, keyval, s);
  return s;
}

static int dtype_of(MPI_Datatype t) {
  if (t == MPI_FLOAT) return SQ_DT_F32;
  return -1;
}

/* MPI's own error class for a failed MPI call inside squall; squall's
 * classes for the rest. */
static int to_mpi_error(squallResult_t r) {
  int native = squall__transport_mpi_take_error();
  if (r == squallSuccess) return MPI_SUCCESS;
  if (native != MPI_SUCCESS) return native;
  switch (r) {
  case squallInvalidArgument: return MPI_ERR_ARG;
  case squallSystemError: return MPI_ERR_NO_MEM;
  case squallInternalError: return MPI_ERR_INTERN;
  default: return MPI_ERR_OTHER;
  }
}

/* An error goes to the communicator's error handler, as MPI_Allreduce's
 * own would (fatal by default; MPI_ERRORS_RETURN returns it). The engine
 * counts on it: on a fatal communicator no error of a call returns, so it
 * keeps no way back (transport.h, failures_fatal). */
static int fail(MPI_Comm comm, int code) {
  PMPI_Comm_call_errhandler(comm, code);
  return code;
}

/* A call's arguments as the caller made them (count: a reduce-scatter's
 * recvcount), for its plain collective and squall's checks of them. */
typedef struct {
  comm_state *s;
  const void *sendbuf; /* MPI_IN_PLACE where one aliased element is in place (check_buffers) */
  void *recvbuf;
  int count;
  const int *recvcounts; /* the MPI interposer's MPI_Reduce_scatter's, or NULL */
  MPI_Datatype datatype;
  MPI_Op op;
  MPI_Comm comm;
} mpi_args;

/* The plain all-reduce of a call squall passed through; a fold sends
 * g + residual instead of sendbuf. */
static int plain_allreduce(void *ctx, const squall_decision *d) {
  const mpi_args *a = ctx;
  /* a fold in place is in recvbuf already */
  const void *send = d->fold && a->sendbuf != MPI_IN_PLACE ? (const void *)d->fold : a->sendbuf;
  return PMPI_Allreduce(send, a->recvbuf, a->count, a->datatype, a->op, a->comm);
}

/* The call through the engine (engine/entry.h), with the caller's plain
 * collective and squall's checks of the call: MPI's code of the plain
 * collective or of the checks, or the engine's error for the
 * communicator's handler. */
static int through_engine(mpi_args *a, squall_call *call, int (*plain)(void *, const squall_decision *),
                          int (*check)(void *, squall_call *), uint64_t bytes) {
  squall_entry x = {.plain = plain, .check = check, .ctx = a, .bytes = bytes};
  int rc = MPI_SUCCESS;
  squallResult_t r = squall__engine_call(a->s->engine, call, &x, &rc);
  return r != squallSuccess ? fail(a->comm, to_mpi_error(r)) : rc; /* the engine logged it */
}

/* What MPI would refuse in a call's buffers (NULL: nothing). MPI refuses
 * aliased buffers without MPI_IN_PLACE; Open MPI accepts them for one
 * element, where reading and writing the same element cannot clash, and
 * reduces in place (MPICH refuses even that; passing it is harmless). A
 * null buffer holds no floats (MPI_BOTTOM means something only with a
 * derived type, which passes through): MPI itself would fault, and a codec
 * that finds no output must not take the call as sent. Nor is
 * MPI_IN_PLACE a receive buffer. */
static const char *buffer_problem(const void *sendbuf, const void *recvbuf, int count) {
  if (sendbuf == recvbuf && sendbuf != MPI_IN_PLACE && count > 1)
    return "sendbuf and recvbuf are the same buffer; use MPI_IN_PLACE for an in-place all-reduce";
  if (recvbuf == NULL) return "recvbuf is NULL";
  if (sendbuf == NULL) return "sendbuf is NULL";
  if (recvbuf == MPI_IN_PLACE) return "recvbuf is MPI_IN_PLACE";
  return NULL;
}

/* squall's own checks of a call it handles, before anything collective
 * (a local argument error, the same on every rank that makes it, as with
 * MPI itself): MPI_SUCCESS, or the error for the communicator's handler
 * (logged). One aliased element becomes the in-place call it means. */
static int check_buffers(const void **sendbuf, void *recvbuf, int count) {
  const char *why = buffer_problem(*sendbuf, recvbuf, count);
  if (why) {
    SQ_WARN("squallMpiAllreduce(count=%d): %s", count, why);
    return MPI_ERR_BUFFER;
  }
  if (*sendbuf == recvbuf) *sendbuf = MPI_IN_PLACE;
  return MPI_SUCCESS;
}

/* A CUDA-aware MPI takes device buffers; the host codecs cannot read them
 * (managed memory they can). Whether a rank's buffers are device memory is
 * its own affair: the call header tells every rank, and all pass the call
 * through together (lib/api/cuda_pointer.c asks without making a context). */
static int device_memory(const void *sendbuf, const void *recvbuf) {
#ifdef HAVE_CUDA
  return squall__cuda_pointer_is_device(recvbuf) ||
         (sendbuf != MPI_IN_PLACE && squall__cuda_pointer_is_device(sendbuf));
#else
  (void)sendbuf;
  (void)recvbuf;
  return 0; /* built without CUDA: nothing to ask */
#endif
}

/* The engine asks before a fold reads the buffers (squall_call.on_device). */
static int call_on_device(const squall_call *c) { return device_memory(c->send, c->recv); }

/* squall's checks of an all-reduce it does not pass through at once, and
 * what they tell the engine (squall_entry.check). */
static int check_allreduce(void *ctx, squall_call *c) {
  mpi_args *a = ctx;
  int bad = check_buffers(&a->sendbuf, a->recvbuf, a->count);
  if (bad != MPI_SUCCESS) return fail(a->comm, bad);
  c->send = a->sendbuf == MPI_IN_PLACE ? a->recvbuf : a->sendbuf;
  c->foreign = device_memory(a->sendbuf, a->recvbuf);
  squall__transport_mpi_take_error(); /* what follows is this call's */
  return MPI_SUCCESS;
}

/* Any call names this rank's SQUALL_STATS file and arms its writer, also
 * one that MPI refuses or that passes through (asked of MPI only until
 * the first call has done it). */
static void arm_stats(void) {
  int up = 0, down = 0;
  if (__atomic_load_n(&keyval, __ATOMIC_ACQUIRE) == MPI_KEYVAL_INVALID && PMPI_Initialized(&up) == MPI_SUCCESS &&
      up && PMPI_Finalized(&down) == MPI_SUCCESS && !down)
    ensure_keyval();
}

/* squallMpiAllreduce's body; interposed: the MPI interposer's call, which
 * SQUALL_COLLECTIVES may leave to MPI. */
static int allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                     int interposed) {
  int size = 0, inter = 0;
  arm_stats();
  if (count < 0 || comm == MPI_COMM_NULL || datatype == MPI_DATATYPE_NULL || op == MPI_OP_NULL ||
      PMPI_Type_size(datatype, &size) != MPI_SUCCESS || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS)
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm); /* MPI reports it */
  comm_state *s = state_of(comm, 1);
  squall_call call = {
      .send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf,
      .recv = recvbuf,
      .count = (size_t)count,
      .dtype = dtype_of(datatype),
      .elsize = (size_t)size,
      .op = op == MPI_SUM ? SQ_OP_SUM : SQ_OP_OTHER,
      .premul = 1.0f,
      .intercomm = inter,
      .interposed = interposed,
      /* a fold reads the buffers before MPI has seen them: only buffers
       * MPI would take (squall's own checks run later, and not on every
       * call), and only host memory (asked when a fold is due) */
      .can_fold = buffer_problem(sendbuf, recvbuf, count) == NULL,
      .on_device = call_on_device,
  };
  /* What squall never touches goes to MPI as it came: MPI's answer,
   * errors included, and nothing logged. */
  if (s == NULL && squall__engine_never_compresses(&call))
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm); /* the same on every rank */
  if (s == NULL) {
    /* Passing through here alone could pair this rank's plain all-reduce
     * with its peers' compressed collectives: fail instead. */
    SQ_WARN("squallMpiAllreduce(count=%d): cannot set up squall state for the communicator (out of memory)",
            count);
    return fail(comm, MPI_ERR_NO_MEM);
  }
  mpi_args a = {s, sendbuf, recvbuf, count, NULL, datatype, op, comm};
  return through_engine(&a, &call, plain_allreduce, check_allreduce, (uint64_t)count * (uint64_t)size);
}

int squallMpiAllreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                       MPI_Comm comm) {
  return allreduce(sendbuf, recvbuf, count, datatype, op, comm, 0);
}

int squall__mpi_allreduce_interposed(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                     MPI_Comm comm) {
  return allreduce(sendbuf, recvbuf, count, datatype, op, comm, 1);
}

/* ------------------------------------------------------- reduce-scatter */

/* The caller's own collective: MPI_Reduce_scatter where recvcounts is
 * given (the MPI interposer's), so that a call passed through gets the
 * very answer MPI gives it, else MPI_Reduce_scatter_block. */
static int plain_rs(const void *sendbuf, void *recvbuf, int recvcount, const int *recvcounts, MPI_Datatype datatype,
                    MPI_Op op, MPI_Comm comm) {
  if (recvcounts != NULL) return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
  return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

/* What MPI would refuse in a compressed reduce-scatter's buffers (NULL:
 * nothing), as buffer_problem() for the all-reduce. */
static const char *rs_buffer_problem(const void *sendbuf, const void *recvbuf) {
  if (sendbuf == recvbuf && sendbuf != MPI_IN_PLACE)
    return "sendbuf and recvbuf are the same buffer; use MPI_IN_PLACE for an in-place reduce-scatter";
  if (recvbuf == NULL) return "recvbuf is NULL";
  if (sendbuf == NULL) return "sendbuf is NULL";
  if (recvbuf == MPI_IN_PLACE) return "recvbuf is MPI_IN_PLACE";
  return NULL;
}

/* Never silent: an MPI_Reduce_scatter that passes through for its uneven
 * counts says so at INFO, once per communicator (the statistics count
 * every one). */
static void say_uneven(comm_state *s, const int *recvcounts, MPI_Comm comm) {
  int rank = 0, nranks = 0, i = 1;
  if (s->said_uneven) return;
  s->said_uneven = 1;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &nranks);
  while (i < nranks - 1 && recvcounts[i] == recvcounts[0]) i++;
  SQ_INFO("rank %d/%d: MPI_Reduce_scatter with unequal recvcounts (%d for rank 0, %d for rank %d) passes through "
          "uncompressed (reason uneven_counts): squall compresses equal counts only",
          rank, nranks, recvcounts[0], recvcounts[i], i);
}

/* The plain reduce-scatter of a call squall passed through; a fold sends
 * g + residual instead of sendbuf. Its time is a sample for the cost
 * model's reduce-scatter figures, of the whole send buffer's bytes (the
 * call's size class). */
static int plain_reduce_scatter(void *ctx, const squall_decision *d) {
  const mpi_args *a = ctx;
  if (d->reason == squallPassUnevenCounts) say_uneven(a->s, a->recvcounts, a->comm);
  /* a fold is never in recvbuf (squall__fold_into_plain): sent from its own
   * buffer, in place or not, the result lands where MPI_IN_PLACE puts it */
  const void *send = d->fold ? (const void *)d->fold : a->sendbuf;
  return plain_rs(send, a->recvbuf, a->count, a->recvcounts, a->datatype, a->op, a->comm);
}

/* squall's checks of a reduce-scatter it does not pass through at once
 * (MPI's own argument checks have passed), and what they tell the engine
 * (squall_entry.check). */
static int check_reduce_scatter(void *ctx, squall_call *c) {
  const mpi_args *a = ctx;
  const char *why = rs_buffer_problem(a->sendbuf, a->recvbuf);
  if (why) {
    SQ_WARN("squallMpiReduceScatterBlock(recvcount=%d): %s", a->count, why);
    return fail(a->comm, MPI_ERR_BUFFER);
  }
  c->foreign = device_memory(a->sendbuf, a->recvbuf);
  squall__transport_mpi_take_error(); /* what follows is this call's */
  return MPI_SUCCESS;
}

/* squallMpiReduceScatterBlock's body. recvcounts: the MPI interposer's
 * MPI_Reduce_scatter (nranks counts, checked non-negative by the caller),
 * compressed as the block call of recvcount where they are all equal,
 * else passed through (uneven_counts; recvcount is then -1); NULL: the
 * block call itself. interposed: the interposer's call, which
 * SQUALL_COLLECTIVES may leave to MPI. */
static int rs_entry(const void *sendbuf, void *recvbuf, int recvcount, const int *recvcounts, MPI_Datatype datatype,
                    MPI_Op op, MPI_Comm comm, int interposed) {
  int size = 0, inter = 0, nranks = 0;
  arm_stats();
  if ((recvcounts == NULL && recvcount < 0) || comm == MPI_COMM_NULL || datatype == MPI_DATATYPE_NULL ||
      op == MPI_OP_NULL || PMPI_Type_size(datatype, &size) != MPI_SUCCESS ||
      PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || PMPI_Comm_size(comm, &nranks) != MPI_SUCCESS)
    return plain_rs(sendbuf, recvbuf, recvcount, recvcounts, datatype, op, comm); /* MPI reports it */
  /* size_t: recvcount * nranks cannot overflow it, where MPI's int could */
  size_t count = (size_t)recvcount * (size_t)nranks;
  if (recvcount < 0) { /* uneven: the whole send buffer, passed through */
    count = 0;
    for (int i = 0; i < nranks; i++) count += (size_t)recvcounts[i];
  }
  comm_state *s = state_of(comm, 1);
  squall_call call = {
      .send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf,
      .recv = recvbuf,
      .count = count,
      .coll = SQ_COLL_REDUCE_SCATTER,
      .dtype = dtype_of(datatype),
      .elsize = (size_t)size,
      .op = op == MPI_SUM ? SQ_OP_SUM : SQ_OP_OTHER,
      .premul = 1.0f,
      .intercomm = inter,
      .uneven = recvcount < 0,
      .interposed = interposed,
      /* as the all-reduce's: only buffers MPI would take, host memory */
      .can_fold = rs_buffer_problem(sendbuf, recvbuf) == NULL,
      .on_device = call_on_device,
  };
  if (s == NULL && squall__engine_never_compresses(&call))
    return plain_rs(sendbuf, recvbuf, recvcount, recvcounts, datatype, op, comm);
  if (s == NULL) {
    SQ_WARN("squallMpiReduceScatterBlock(recvcount=%d): cannot set up squall state for the communicator "
            "(out of memory)",
            recvcount);
    return fail(comm, MPI_ERR_NO_MEM);
  }
  mpi_args a = {s, sendbuf, recvbuf, recvcount, recvcounts, datatype, op, comm};
  return through_engine(&a, &call, plain_reduce_scatter, check_reduce_scatter, (uint64_t)count * (uint64_t)size);
}

int squallMpiReduceScatterBlock(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
                                MPI_Op op, MPI_Comm comm) {
  return rs_entry(sendbuf, recvbuf, recvcount, NULL, datatype, op, comm, 0);
}

int squall__mpi_reduce_scatter_block_interposed(const void *sendbuf, void *recvbuf, int recvcount,
                                                MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return rs_entry(sendbuf, recvbuf, recvcount, NULL, datatype, op, comm, 1);
}

int squall__mpi_reduce_scatter_interposed(const void *sendbuf, void *recvbuf, const int recvcounts[],
                                          MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  int nranks = 0, even = 1;
  /* what MPI must report (no counts, a bad communicator, a negative
   * count) it reports, with its own answer */
  if (recvcounts == NULL || comm == MPI_COMM_NULL || PMPI_Comm_size(comm, &nranks) != MPI_SUCCESS || nranks < 1)
    return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
  for (int i = 0; i < nranks; i++) {
    if (recvcounts[i] < 0) return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
    even &= recvcounts[i] == recvcounts[0];
  }
  return rs_entry(sendbuf, recvbuf, even ? recvcounts[0] : -1, recvcounts, datatype, op, comm, 1);
}

int squallMpiResetResiduals(MPI_Comm comm) {
  comm_state *s = state_of(comm, 0);
  return s ? to_mpi_error(squall__engine_reset_residuals(s->engine)) : MPI_SUCCESS;
}

int squallMpiCommFree(MPI_Comm comm) {
  if (keyval == MPI_KEYVAL_INVALID) return MPI_SUCCESS;
  void *v = NULL;
  int found = 0;
  MPI_Comm_get_attr(comm, keyval, &v, &found);
  return found ? MPI_Comm_delete_attr(comm, keyval) : MPI_SUCCESS; /* runs delete_state */
}

int squall__mpi_get_scatter_residual(MPI_Comm comm, const void *sendbuf, int recvcount, MPI_Datatype datatype,
                                     float *out) {
  comm_state *s = state_of(comm, 0);
  int nranks = 0;
  if (s == NULL || recvcount < 0 || out == NULL || PMPI_Comm_size(comm, &nranks) != MPI_SUCCESS) return MPI_ERR_ARG;
  return to_mpi_error(squall__engine_get_scatter_residual(s->engine, sendbuf, (size_t)recvcount * (size_t)nranks,
                                                          dtype_of(datatype), out));
}

int squall__mpi_get_residual(MPI_Comm comm, const void *sendbuf, int count, MPI_Datatype datatype, float *out) {
  comm_state *s = state_of(comm, 0);
  if (s == NULL || count < 0 || out == NULL) return MPI_ERR_ARG;
  return to_mpi_error(squall__engine_get_residual(s->engine, sendbuf, (size_t)count, dtype_of(datatype), 0, out));
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fakenccl.h - internals of the test-only host-memory NCCL (tests/nccl/fakenccl).
 *
 * The library implements the NCCL API of the real nccl.h (included here, so
 * types, enums and signatures are the real ones) on host buffers over MPI.
 * Every operation completes before it returns; streams are ignored. Each
 * public function is defined under its profiling name (pncclX) and exported
 * again as a weak alias ncclX, which is how the real libnccl.so.2 exports
 * them (nm -D shows "W ncclAllReduce", "T pncclAllReduce").
 */
#ifndef FAKENCCL_H
#define FAKENCCL_H

#include <mpi.h>
#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

/* The build uses -fvisibility=hidden: only the NCCL API is exported. */
#define FAKE_API __attribute__((visibility("default")))
/* ncclX: a weak alias of pncclX with exactly its type. */
#define FAKE_ALIAS(name) \
  extern __typeof__(p##name) name __attribute__((weak, alias("p" #name), visibility("default")))

#define FAKE_MAGIC 0x66616b656e63636cULL /* "fakenccl": guards against stale or foreign handles */

/* A PreMulSum operator: value holds a host-immediate scalar, ptr a
 * "device" (here: host) scalar read at each call. */
typedef struct fake_premul {
  int in_use;
  ncclDataType_t datatype;
  ncclScalarResidence_t residence;
  unsigned char value[8];
  const void *ptr;
} fake_premul;

struct ncclComm {
  uint64_t magic;
  MPI_Comm mpi; /* ranks ordered as NCCL ranks */
  int rank, nranks;
  int blocking; /* config.blocking (1 unless 0 was asked for) */
  int pending;  /* non-blocking: an init or a call in progress, not yet reported
                      done by GetAsyncError */
  int finalized, revoked;
  fake_premul *ops; /* op id ncclNumOps + i is ops[i] */
  int nops;
  struct ncclComm *next; /* registry of live communicators */
};

/* Records msg (printf format) as the last error, prints it when NCCL_DEBUG
 * asks for warnings, notes it for ncclGroupEnd inside a group, and returns
 * code. */
ncclResult_t fake__error(ncclResult_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Inside ncclGroupStart/End, keeps the first error for ncclGroupEnd. */
void fake__group_note(ncclResult_t code);
/* the depth of this thread's group nesting, and the posting
 * of the send/recv queued inside it (p2p.c) at the outermost end. */
int fake__group_depth(void);
ncclResult_t fake__p2p_flush(void);
/* FAKENCCL_NS_PER_BYTE and _PER_CALL (delay.c): waits as a slow link would
 * for bytes_sent; ncclInvalidArgument, named, where either is not a number. */
ncclResult_t fake__link_delay(double bytes_sent);

/* ncclInvalidArgument unless comm is a live communicator of this library. */
ncclResult_t fake__comm_check(const struct ncclComm *comm, const char *fn);
/* fake__comm_check, then refuses a communicator whose non-blocking init or
 * last call has not been reported complete (ncclInvalidArgument). */
ncclResult_t fake__comm_ready(const struct ncclComm *comm, const char *fn);
/* The answer of a call on comm that ended with r: with
 * FAKENCCL_NONBLOCKING_CALLS=inprogress, a successful call on a non-blocking
 * communicator answers ncclInProgress, as real NCCL may while it enqueues,
 * and the communicator refuses calls until ncclCommGetAsyncError has
 * reported it in progress once. */
ncclResult_t fake__call_result(struct ncclComm *comm, ncclResult_t r);
/* MPI_Init_thread when the program has not initialised MPI yet. */
ncclResult_t fake__mpi_ready(const char *fn);

/* The injected failure of ncclCommSplit (FAKENCCL_FAIL_SPLIT), or ncclSuccess. */
ncclResult_t fake__split_fault(const char *fn);

/* Bytes per element, 0 for an invalid datatype. */
size_t fake__type_size(ncclDataType_t t);
const char *fake__type_name(ncclDataType_t t);

/* A reduction resolved against one call: the combining step, the scalar
 * each rank applies to its own input first (PreMulSum, float average) and
 * the divisor applied to the result (integer average). */
typedef enum { FAKE_SUM,
               FAKE_PROD,
               FAKE_MAX,
               FAKE_MIN } fake_combine;
typedef struct fake_redop {
  fake_combine combine;
  int premul;              /* scale own input by scalar before the sum */
  unsigned char scalar[8]; /* a value of the call's datatype */
  int postdiv;             /* divide the integer sum by this (0: none) */
} fake_redop;

/* Checks op and datatype for a reduction on comm and resolves them. */
ncclResult_t fake__redop_resolve(const struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t t,
                                 const char *fn, fake_redop *out);
/* dst[i] = src[i] * scalar in the datatype (dst may equal src). */
void fake__scale(void *dst, const void *src, size_t count, ncclDataType_t t, const void *scalar);
/* out[i] = in_0[i] op in_1[i] op ... in rank order, where in_r starts at
 * in + r*stride bytes; then the integer post-division. out may alias in_0. */
void fake__combine(void *out, const void *in, size_t stride, int nin, size_t count,
                   ncclDataType_t t, const fake_redop *op);

/* IEEE binary16 and bfloat16 to and from float, rounding to nearest even. */
float fake__half_to_float(uint16_t h);
uint16_t fake__float_to_half(float f);
float fake__bf16_to_float(uint16_t b);
uint16_t fake__float_to_bf16(float f);

#endif

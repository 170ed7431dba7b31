/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * xchg.h - the exchange core of the device-memory test NCCL
 * (tests/gpu/devnccl): processes of one communicator meet in a POSIX
 * shared-memory segment and run NCCL's collectives on HOST buffers there.
 * No CUDA and no NCCL header: the CUDA layer (dev_*.c) stages device
 * buffers through pinned host memory and calls dnx_run from a stream's host
 * callback; tests/gpu/test_devnccl_core.c drives the same functions with
 * fork()ed processes where there is no GPU.
 *
 * A collective is a sequence of rounds through fixed per-rank slots: each
 * rank writes its part into its own slot, all meet at a barrier, each reads
 * what it needs from every slot (reductions in rank order, so every rank
 * computes the same bits), all meet again. Barriers wait with a time limit
 * (FAKENCCL_TIMEOUT seconds, default 60) and watch the peers' processes, so
 * a peer that died or hangs is an error on every rank, never a hang; after
 * it the segment is poisoned (every later call fails), as a real NCCL
 * communicator is after an asynchronous error.
 */
#ifndef DEVNCCL_XCHG_H
#define DEVNCCL_XCHG_H

#include <stddef.h>
#include <stdint.h>

#define DNX_MAX_RANKS 8
#define DNX_SLOT_BYTES ((size_t)1 << 20) /* per rank and round */
#define DNX_NAME_MAX 200

/* Results, with NCCL's numbers (ncclResult_t) so the CUDA layer passes them on. */
enum { DNX_OK = 0,
       DNX_ESYS = 2,   /* ncclSystemError: timeout, a peer died, shared memory, injected */
       DNX_EINVAL = 4, /* ncclInvalidArgument */
       DNX_EUSAGE = 5, /* ncclInvalidUsage: ranks disagree */
       DNX_EREMOTE = 6 /* ncclRemoteError: a peer poisoned the communicator */
};

/* Element types and operators, numbered as ncclDataType_t and ncclRedOp_t. */
enum { DNX_INT8,
       DNX_UINT8,
       DNX_INT32,
       DNX_UINT32,
       DNX_INT64,
       DNX_UINT64,
       DNX_FLOAT16,
       DNX_FLOAT32,
       DNX_FLOAT64,
       DNX_BFLOAT16,
       DNX_NUM_TYPES };
enum { DNX_SUM,
       DNX_PROD,
       DNX_MAX,
       DNX_MIN,
       DNX_AVG,
       DNX_NUM_OPS };

typedef struct dnx_seg dnx_seg;

/* Joins the communicator named name (from dnx_make_name) as rank of
 * nranks, waiting for all of them (every rank must call it with the same
 * nranks and a rank of its own). On failure *out is NULL, err says why. */
int dnx_join(const char *name, int nranks, int rank, dnx_seg **out, char *err, size_t errlen);
/* Unmaps; the segment's name was removed once every rank had joined. */
void dnx_leave(dnx_seg *s);
/* A name no other communicator has (pid, a counter, the time). */
void dnx_make_name(char *name, size_t len);
const char *dnx_name(const dnx_seg *s);
int dnx_rank(const dnx_seg *s);
int dnx_nranks(const dnx_seg *s);

/* Every rank contributes two numbers (ncclCommSplit's color and key) and
 * receives everyone's, in rank order. A channel of its own: it may run on
 * the calling thread while stream callbacks use the data slots. */
int dnx_ctl_allgather(dnx_seg *s, int64_t a, int64_t b, int64_t (*all)[2], char *err, size_t errlen);

/* Poisons the communicator for every rank, with a message they report. */
void dnx_abort(dnx_seg *s, const char *msg);

size_t dnx_type_size(int type); /* 0: not a type */
const char *dnx_type_name(int type);

/* One send or receive of a group. */
typedef struct {
  int is_send, peer;
  void *buf; /* host */
  size_t bytes;
} dnx_p2p;

enum { DNX_ALLREDUCE,
       DNX_ALLGATHER,
       DNX_REDUCESCATTER,
       DNX_BROADCAST,
       DNX_GROUP_P2P };

/* One operation on host buffers. count: elements of one rank's share
 * (all-reduce and broadcast: of the buffer; all-gather: sent;
 * reduce-scatter: received). in and out may be the same buffer, or in the
 * in-place layout NCCL defines (all-gather: in = out + rank * share;
 * reduce-scatter: out = in + rank * share). */
typedef struct {
  int kind, type, op, root;
  const void *in;
  void *out;
  size_t count;
  dnx_p2p *p2p; /* DNX_GROUP_P2P: sends to each peer in order, receives likewise */
  int np2p;
  int corrupt;        /* FAKENCCL_FAULT=corrupt: overwrite what arrived with 0xff */
  double ns_per_byte; /* FAKENCCL_NS_PER_BYTE: a slow link, delay x bytes sent */
  double ns_per_call; /* FAKENCCL_NS_PER_CALL: a link's latency, once per operation */
} dnx_op;

/* Runs op with the peers (each running its matching op); DNX_OK, or an
 * error with err filled, after which the communicator is poisoned. */
int dnx_run(dnx_seg *s, const dnx_op *op, char *err, size_t errlen);

/* Checks op's type and operator; DNX_OK or DNX_EINVAL with err. */
int dnx_check_types(const dnx_op *op, char *err, size_t errlen);

/* FAKENCCL_FAULT, as the host test NCCL reads it (tests/nccl/fakenccl/coll.c):
 * "fail:N" or "corrupt:N" hits the N-th all-reduce or all-gather of this
 * process, counted from when the variable last changed value;
 * FAKENCCL_FAULT_RANK=r limits it to rank r. Call once per all-reduce or
 * all-gather, when it is issued. */
enum { DNX_FAULT_NONE,
       DNX_FAULT_FAIL,
       DNX_FAULT_CORRUPT };
int dnx_fault_next(int rank, char *spec, size_t speclen);

/* What issuing op means, before it runs: checks its types and operator
 * (DNX_EINVAL: do not run it), takes the emulated link from the environment
 * (FAKENCCL_NS_PER_BYTE and FAKENCCL_NS_PER_CALL, read as the host test NCCL
 * reads them: tests/nccl/fakenccl/link_env.h; a bad value is DNX_EINVAL),
 * and for an all-reduce or all-gather the next fault: corrupt sets
 * op->corrupt, fail answers DNX_ESYS with err, and the op must still run
 * on this rank as usual (the peers run theirs), the error reported after. */
int dnx_prepare(dnx_seg *s, dnx_op *op, char *err, size_t errlen);

/* Reductions (xchg_reduce.c): out[i] = in_0[i] op in_1[i] op ... in rank
 * order, in[r] the contributions; out may alias any of them. Averages
 * divide integers after the sum (the caller pre-scales floats with
 * dnx_scale by 1/nin, as NCCL does). 16-bit floats round after each step. */
void dnx_combine(void *out, const void *const *in, int nin, size_t count, int type, int op);
void dnx_scale_recip(void *dst, const void *src, size_t count, int type, int divisor);
float dnx_half_to_float(uint16_t h);
uint16_t dnx_float_to_half(float f);
float dnx_bf16_to_float(uint16_t b);
uint16_t dnx_float_to_bf16(float f);

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * transport.h - what the engine needs from a collective library, and
 * nothing about which one it is. transport_mpi.c fills it with MPI on host
 * memory; the NCCL transport fills it with NCCL on device memory. Every
 * call is collective over the transport's ranks, in the same order on each.
 * `stream` is the call's stream (a cudaStream_t for NCCL; MPI ignores it):
 * it travels with each call, never through the context.
 *
 * lib/transports/ (below the kernel sets and the engine; transports
 * include common only, never a codec):
 *   transport.h           this table of collectives
 *   transport_mpi.c/.h    MPI on host memory, through PMPI names
 *   topology_mpi.c/.h     two-level over MPI: node key, split, reduce-scatter
 *   nccl_functions.h      the NCCL functions squall calls, written once
 *   nccl_table.h          those as a table of function pointers
 *   nccl_table_linked.c   libsquall's table: NCCL's profiling names
 *   transport_nccl.c/.h   NCCL through the table, on the call's stream
 *   topology_nccl.c/.h    two-level over NCCL: ncclCommSplit, ncclReduceScatter
 *   node_id.c/.h          this machine's identity: hostname and boot id
 *   transport_coll.c/.h   the caller's own functions (squall_coll.h)
 */
#ifndef SQUALL_TRANSPORT_H
#define SQUALL_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include "common/halfmath.h" /* sq_half_kind */
#include "squall.h"

/* A non-blocking collective in flight: the transport's own handle. */
typedef struct {
  uint64_t opaque[2];
} squall_request;

typedef struct squall_transport {
  void *ctx;
  int rank, nranks;
  /* Sum of 16-bit values (kind's format) over all ranks, in place. */
  squallResult_t (*allreduce_half)(void *ctx, void *stream, uint16_t *buf, size_t n, sq_half_kind kind);
  /* Elementwise max of n floats over all ranks, in place (buffer in the
   * transport's memory space). */
  squallResult_t (*allreduce_max_f32)(void *ctx, void *stream, float *buf, size_t n);
  /* recv[r*bytes ..] = rank r's send, for every rank. */
  squallResult_t (*allgather)(void *ctx, void *stream, const void *send, void *recv, size_t bytes);
  /* Optional (NULL when the sizes must stay fixed, as on the device path):
   * variable-size all-gather of host bytes; sizes[r] is filled first. */
  squallResult_t (*allgatherv)(void *ctx, void *stream, const void *send, size_t bytes, void *recv,
                               size_t recv_capacity, size_t *sizes, size_t *displs);
  /* Sum of n floats over all ranks (send may equal recv). The dense
   * fallback of top-k, where sparsity cannot pay. */
  squallResult_t (*allreduce_sum_f32)(void *ctx, void *stream, const float *send, float *recv, size_t n);
  /* Elementwise minimum of n int64 in HOST memory, in place, result on the
   * host when it returns (the engine's call header: ok flags and the
   * configuration digest; on a device transport it synchronises, so the
   * engine uses it there only when the configuration changed or memory
   * must grow). */
  squallResult_t (*allreduce_min_i64_host)(void *ctx, void *stream, int64_t *buf, size_t n);
  /* All-to-all (the two-phase all-reduce): send[r*bytes ..] goes to rank
   * r, and recv[r*bytes ..] comes from rank r, in the transport's memory
   * space. NULL where the library cannot (an NCCL without send/recv). */
  squallResult_t (*alltoall)(void *ctx, void *stream, const void *send, void *recv, size_t bytes);

  /* ---- two-level all-reduce (engine/hierarchy.c). Each may be NULL: the
   * engine then stays flat, with the reason in its statistics. */
  /* Dense fp32 sum, scattered: send holds nranks blocks of recvcount
   * floats; rank r receives the sum of every rank's block r. */
  squallResult_t (*reduce_scatter_f32)(void *ctx, void *stream, const float *send, float *recv,
                                       size_t recvcount);
  /* Allocates now (locally, before the call header) whatever
   * reduce_scatter_f32 of recvcount floats will need, so that nothing
   * allocates inside the collective. NULL: it needs nothing. */
  squallResult_t (*reserve_reduce_scatter)(void *ctx, size_t recvcount);
  /* This rank's node identity: equal on ranks that share a node, different
   * otherwise (collective over all ranks; may synchronise). NULL: a hash of
   * the hostname and the boot id (node_id.h). */
  squallResult_t (*node_key)(void *ctx, void *stream, uint64_t *key);
  /* A transport over the ranks that pass the same color, ordered by key
   * (collective over all ranks, like MPI_Comm_split). The new transport
   * owns its communicator and has destroy set. */
  squallResult_t (*split)(void *ctx, void *stream, int color, int key, struct squall_transport *sub);
  /* Frees a transport made by split (its communicator and ctx). */
  void (*destroy)(void *ctx);

  /* ---- pipelining (engine/twophase.c). Each may be NULL (a library
   * without non-blocking collectives): calls then run in one chunk. The
   * non-blocking twins of alltoall and allgather, on host memory; several
   * may be in flight, started in the same order on every rank. */
  squallResult_t (*ialltoall)(void *ctx, const void *send, void *recv, size_t bytes, squall_request *req);
  squallResult_t (*iallgather)(void *ctx, const void *send, void *recv, size_t bytes, squall_request *req);
  /* Waits for req to finish. */
  squallResult_t (*wait)(void *ctx, squall_request *req);
  /* Lets req (and whatever else is in flight) progress without waiting:
   * MPI libraries move data only inside MPI calls. An error is returned
   * here: a request that fails while tested may be freed (MPI_REQUEST_NULL),
   * and its wait would then report success. */
  squallResult_t (*progress)(void *ctx, squall_request *req);

  /* Optional: 1 when any failure ends the process instead of returning,
   * so that nothing needs undoing after one: MPI_ERRORS_ARE_FATAL on the
   * communicator (as by default) ends it at a failed MPI call, and the MPI
   * entry points (api_mpi.c) hand squall's own errors to the same error
   * handler. NULL or 0: failures return. */
  int (*failures_fatal)(void *ctx);
} squall_transport;

#endif

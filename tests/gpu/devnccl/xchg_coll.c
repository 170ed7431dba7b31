/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * xchg_coll.c - the collectives and grouped send/receive of the
 * device-memory test NCCL on host buffers, in rounds through the ranks'
 * slots (xchg.h). Every rank of the communicator takes part in each
 * operation, also in a group of sends and receives (which is how squall's
 * all-to-all uses them); sizes that do not pair up are an error on every
 * rank, found from what all ranks published.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nanosleep */
#endif
#include "xchg_seg.h"
#include "../../nccl/fakenccl/link_env.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define TRY(call)                        \
  do {                                   \
    int try_r_ = (call);                 \
    if (try_r_ != DNX_OK) return try_r_; \
  } while (0)

static int reduction(int kind) { return kind == DNX_ALLREDUCE || kind == DNX_REDUCESCATTER; }

int dnx_check_types(const dnx_op *op, char *err, size_t len) {
  if (op->kind != DNX_GROUP_P2P && !dnx_type_size(op->type)) {
    dnx__fmt(err, len, "datatype %d is not one the test NCCL knows (0..%d)", op->type, DNX_NUM_TYPES - 1);
    return DNX_EINVAL;
  }
  if (reduction(op->kind) && (op->op < 0 || op->op >= DNX_NUM_OPS)) {
    dnx__fmt(err, len, "reduction operation %d: the device test NCCL has sum, prod, max, min and avg (0..%d)",
             op->op, DNX_NUM_OPS - 1);
    return DNX_EINVAL;
  }
  return DNX_OK;
}

/* This rank's contribution: its own chunk, pre-scaled by 1/P for a float average. */
static void put(const dnx_op *op, int nranks, void *dst, const char *src, size_t count) {
  if (op->op == DNX_AVG) dnx_scale_recip(dst, src, count, op->type, nranks);
  else memcpy(dst, src, count * dnx_type_size(op->type));
}

static int allreduce(dnx_seg *s, const dnx_op *op, char *err, size_t len) {
  size_t es = dnx_type_size(op->type), per = DNX_SLOT_BYTES / es;
  const void *from[DNX_MAX_RANKS];
  for (int q = 0; q < s->nranks; q++) from[q] = dnx__slot(s, q);
  for (size_t off = 0; off < op->count; off += per) {
    size_t c = MIN(per, op->count - off);
    put(op, s->nranks, dnx__slot(s, s->rank), (const char *)op->in + off * es, c);
    TRY(dnx__sync(s, "ncclAllReduce", err, len));
    dnx_combine((char *)op->out + off * es, from, s->nranks, c, op->type, op->op);
    TRY(dnx__sync(s, "ncclAllReduce", err, len));
  }
  return DNX_OK;
}

static int allgather(dnx_seg *s, const dnx_op *op, char *err, size_t len) {
  size_t bytes = op->count * dnx_type_size(op->type);
  for (size_t off = 0; off < bytes; off += DNX_SLOT_BYTES) {
    size_t c = MIN(DNX_SLOT_BYTES, bytes - off);
    memcpy(dnx__slot(s, s->rank), (const char *)op->in + off, c);
    TRY(dnx__sync(s, "ncclAllGather", err, len));
    for (int q = 0; q < s->nranks; q++) memcpy((char *)op->out + (size_t)q * bytes + off, dnx__slot(s, q), c);
    TRY(dnx__sync(s, "ncclAllGather", err, len));
  }
  return DNX_OK;
}

/* Block j of every rank's input goes to rank j, summed there in rank order. */
static int reducescatter(dnx_seg *s, const dnx_op *op, char *err, size_t len) {
  size_t es = dnx_type_size(op->type), per = DNX_SLOT_BYTES / (es * (size_t)s->nranks);
  const void *from[DNX_MAX_RANKS];
  for (size_t off = 0; off < op->count; off += per) {
    size_t c = MIN(per, op->count - off);
    char *mine = dnx__slot(s, s->rank);
    for (int j = 0; j < s->nranks; j++)
      put(op, s->nranks, mine + (size_t)j * c * es, (const char *)op->in + ((size_t)j * op->count + off) * es, c);
    TRY(dnx__sync(s, "ncclReduceScatter", err, len));
    for (int q = 0; q < s->nranks; q++) from[q] = (char *)dnx__slot(s, q) + (size_t)s->rank * c * es;
    dnx_combine((char *)op->out + off * es, from, s->nranks, c, op->type, op->op);
    TRY(dnx__sync(s, "ncclReduceScatter", err, len));
  }
  return DNX_OK;
}

static int broadcast(dnx_seg *s, const dnx_op *op, char *err, size_t len) {
  size_t bytes = op->count * dnx_type_size(op->type);
  for (size_t off = 0; off < bytes; off += DNX_SLOT_BYTES) {
    size_t c = MIN(DNX_SLOT_BYTES, bytes - off);
    if (s->rank == op->root) memcpy(dnx__slot(s, s->rank), (const char *)op->in + off, c);
    TRY(dnx__sync(s, "ncclBroadcast", err, len));
    memcpy((char *)op->out + off, dnx__slot(s, op->root), c);
    TRY(dnx__sync(s, "ncclBroadcast", err, len));
  }
  return DNX_OK;
}

/* ------------------------------------------------------------ send/receive */
/* A slot in a round of a group: a header of 3P+1 words (this round's bytes
 * to each peer, the group's totals to and from each peer, bytes still to
 * send after this round), then a part for each peer. */
#define P2P_HDR 256

typedef struct {
  int idx;
  size_t off;
} cursor;

/* Moves up to want bytes between buf and the sends to (or receives from)
 * peer, in their order, from cur on; the bytes moved. */
static size_t stream_move(const dnx_op *op, int is_send, int peer, cursor *cur, char *buf, size_t want) {
  size_t done = 0;
  while (done < want && cur->idx < op->np2p) {
    const dnx_p2p *p = &op->p2p[cur->idx];
    if (p->is_send != is_send || p->peer != peer || cur->off == p->bytes) {
      cur->idx++;
      cur->off = 0;
      continue;
    }
    size_t c = MIN(p->bytes - cur->off, want - done);
    if (is_send) memcpy(buf + done, (const char *)p->buf + cur->off, c);
    else memcpy((char *)p->buf + cur->off, buf + done, c);
    cur->off += c;
    done += c;
  }
  return done;
}

/* Every pair's totals agree; else the first that does not, on every rank. */
static int p2p_pairs_agree(dnx_seg *s, char *err, size_t len) {
  int P = s->nranks;
  for (int i = 0; i < P; i++)
    for (int j = 0; j < P; j++) {
      const uint64_t *hi = dnx__slot(s, i), *hj = dnx__slot(s, j);
      if (hi[P + j] != hj[2 * P + i]) {
        dnx__fmt(err, len, "ncclSend/ncclRecv: rank %d sends %llu bytes to rank %d in this group, which receives "
                           "%llu from it",
                 i, (unsigned long long)hi[P + j], j, (unsigned long long)hj[2 * P + i]);
        return DNX_EUSAGE;
      }
    }
  return DNX_OK;
}

static int group_p2p(dnx_seg *s, const dnx_op *op, char *err, size_t len) {
  int P = s->nranks, me = s->rank;
  size_t sub = ((DNX_SLOT_BYTES - P2P_HDR) / (size_t)P) & ~(size_t)63;
  uint64_t to[DNX_MAX_RANKS] = {0}, from[DNX_MAX_RANKS] = {0}, sent[DNX_MAX_RANKS] = {0};
  cursor scur[DNX_MAX_RANKS] = {{0, 0}}, rcur[DNX_MAX_RANKS] = {{0, 0}};
  for (int k = 0; k < op->np2p; k++) {
    if (op->p2p[k].peer < 0 || op->p2p[k].peer >= P) {
      dnx__fmt(err, len, "ncclSend/ncclRecv: peer %d of a %d-rank communicator", op->p2p[k].peer, P);
      return DNX_EINVAL; /* found when queued, in the NCCL layer; here for direct callers */
    }
    (op->p2p[k].is_send ? to : from)[op->p2p[k].peer] += op->p2p[k].bytes;
  }
  for (int round = 0;; round++) {
    uint64_t *h = dnx__slot(s, me), left = 0;
    for (int j = 0; j < P; j++) {
      size_t c = (size_t)MIN((uint64_t)sub, to[j] - sent[j]);
      h[j] = stream_move(op, 1, j, &scur[j], (char *)h + P2P_HDR + (size_t)j * sub, c);
      sent[j] += h[j];
      h[P + j] = to[j];
      h[2 * P + j] = from[j];
      left += to[j] - sent[j];
    }
    h[3 * P] = left;
    TRY(dnx__sync(s, "ncclGroupEnd (send/recv)", err, len));
    int r = round == 0 ? p2p_pairs_agree(s, err, len) : DNX_OK;
    uint64_t any_left = 0;
    for (int i = 0; i < P && r == DNX_OK; i++) {
      const uint64_t *hi = dnx__slot(s, i);
      stream_move(op, 0, i, &rcur[i], (char *)hi + P2P_HDR + (size_t)me * sub, hi[me]);
      any_left |= hi[3 * P];
    }
    TRY(dnx__sync(s, "ncclGroupEnd (send/recv)", err, len));
    if (r != DNX_OK || !any_left) return r;
  }
}

/* ------------------------------------------------------------ one operation */
static size_t bytes_sent(const dnx_seg *s, const dnx_op *op) {
  size_t es = dnx_type_size(op->type), b = 0;
  switch (op->kind) {
  case DNX_REDUCESCATTER: return op->count * es * (size_t)s->nranks;
  case DNX_BROADCAST: return s->rank == op->root ? op->count * es : 0;
  case DNX_GROUP_P2P:
    for (int k = 0; k < op->np2p; k++) b += op->p2p[k].is_send ? op->p2p[k].bytes : 0;
    return b;
  default: return op->count * es;
  }
}

int dnx_run(dnx_seg *s, const dnx_op *op, char *err, size_t len) {
  TRY(dnx_check_types(op, err, len));
  if (op->kind == DNX_BROADCAST && (op->root < 0 || op->root >= s->nranks)) {
    dnx__fmt(err, len, "ncclBroadcast: root %d (0..%d)", op->root, s->nranks - 1);
    return DNX_EINVAL;
  }
  /* the emulated link: the bytes take this long to leave, and its latency */
  fakenccl_link_wait(&(fakenccl_link){op->ns_per_byte, op->ns_per_call}, (double)bytes_sent(s, op));
  int r;
  switch (op->kind) {
  case DNX_ALLREDUCE: r = allreduce(s, op, err, len); break;
  case DNX_ALLGATHER: r = allgather(s, op, err, len); break;
  case DNX_REDUCESCATTER: r = reducescatter(s, op, err, len); break;
  case DNX_BROADCAST: r = broadcast(s, op, err, len); break;
  case DNX_GROUP_P2P: r = group_p2p(s, op, err, len); break;
  default:
    dnx__fmt(err, len, "operation kind %d is unknown", op->kind);
    return DNX_EINVAL;
  }
  if (r == DNX_OK && op->corrupt) { /* after the exchange, as a transfer found bad afterwards */
    size_t es = dnx_type_size(op->type);
    memset(op->out, 0xff, op->kind == DNX_ALLGATHER ? op->count * es * (size_t)s->nranks : op->count * es);
  }
  return r;
}

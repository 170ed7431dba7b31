/* SPDX-License-Identifier: BSD-3-Clause */
/* topology_nccl.h - the NCCL transport's operations for the two-level
 * all-reduce: sub-communicators (ncclCommSplit) and reduce-scatter. */
#ifndef SQUALL_TOPOLOGY_NCCL_H
#define SQUALL_TOPOLOGY_NCCL_H

#include "transports/transport_nccl.h"

/* Sets the two-level operations of an NCCL transport whose ctx is ctx;
 * leaves split NULL where the table lacks ncclCommSplit, ncclReduceScatter
 * or ncclCommDestroy (the engine then stays flat and says why). */
void squall__topology_nccl_attach(squall_transport *tr, squall_nccl_ctx *ctx);

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nccl_table.h - the NCCL functions squall itself calls, as a table, one
 * member per row of nccl_functions.h. The direct API (libsquall, linked
 * with -lnccl) fills it with NCCL's profiling names (nccl_table_linked.c);
 * the LD_PRELOAD interposer, which must not link NCCL and whose own ncclX
 * symbols shadow the real ones, fills it with dlsym results. Either way
 * squall's internal collectives never re-enter an interposer. Members a
 * row marks optional (core 0) may be NULL where the loaded NCCL lacks them.
 */
#ifndef SQUALL_NCCL_TABLE_H
#define SQUALL_NCCL_TABLE_H

#include <nccl.h>

#include "transports/nccl_functions.h"

typedef struct squall_nccl_api {
  const char *caller; /* the all-reduce the application called, as messages name it */
#define SQ_NCCL_MEMBER(field, Name, req, core, ret, params) ret(*field) params;
  SQ_NCCL_FUNCTIONS(SQ_NCCL_MEMBER)
#undef SQ_NCCL_MEMBER
} squall_nccl_api;

/* The table of the NCCL that libsquall was linked with (profiling names). */
const squall_nccl_api *squall__nccl_api_linked(void);

#endif /* SQUALL_NCCL_TABLE_H */

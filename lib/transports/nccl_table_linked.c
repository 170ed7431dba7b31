/* SPDX-License-Identifier: BSD-3-Clause */
/* nccl_table_linked.c - the NCCL table of libsquall, which links -lnccl:
 * NCCL's profiling names, so that an NCCL interposer loaded beside
 * libsquall never sees squall's own collectives. squallAllReduce, which
 * uses it, is the API's (api/api_nccl_direct.c). */
#include "transports/nccl_table.h"

static const squall_nccl_api linked = {
    .caller = "squallAllReduce",
#define SQ_NCCL_LINKED(field, Name, req, core, ret, params) .field = pnccl##Name,
    SQ_NCCL_FUNCTIONS(SQ_NCCL_LINKED)
#undef SQ_NCCL_LINKED
};

const squall_nccl_api *squall__nccl_api_linked(void) { return &linked; }

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * transport_coll.h - a squall_transport over the caller's own collectives
 * (squall_coll.h): each function translates to one of the caller's, and a
 * failure there becomes squallSystemError naming it.
 */
#ifndef SQUALL_TRANSPORT_COLL_H
#define SQUALL_TRANSPORT_COLL_H

#include "squall_coll.h"
#include "transports/transport.h"

/* Fills tr from coll (which must outlive tr). squallInvalidArgument names
 * what is missing or wrong in coll. */
squallResult_t squall__transport_coll_init(squall_transport *tr, const squallCollectives_t *coll);

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/* node_id.h - which machine this process runs on, for finding the ranks
 * that share a node (the two-level all-reduce): the default where a
 * transport has no node_key of its own, or it fails. */
#ifndef SQUALL_TRANSPORTS_NODE_ID_H
#define SQUALL_TRANSPORTS_NODE_ID_H

#include <stdint.h>

/* A hash of the hostname and the kernel's boot id: equal for processes on
 * one machine, different (but for a hash collision) across machines.
 * Local: no communication. */
uint64_t squall__node_id(void);

#endif /* SQUALL_TRANSPORTS_NODE_ID_H */

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * costing_device.h - the cost model's schedule for engines whose header
 * costs a host synchronisation (device memory): the state it keeps per
 * engine. Its functions, which take the engine and the plan, are declared
 * in plan.h (costing_device.c).
 *
 * A device call cannot exchange a header on every call, nor wait for its
 * own time, so:
 *   - whole calls are timed with the kernel set's timer (kernels.h) and
 *     read back when ready, some calls later;
 *   - a size class exchanges the header on every call only while it is
 *     being measured, then on every SQ_DEV_HEADER_EVERY-th call; the
 *     verdict the last header agreed holds until the next one;
 *   - the side the verdict does not take runs on every
 *     SQ_DEV_OTHER_EVERY-th call (counted from SQ_DEV_HEADER_EVERY / 2,
 *     between two headers), so that both stay measured.
 * Every choice is a function of the class's call count and of past
 * headers: the same on every rank.
 */
#ifndef SQUALL_ENGINE_COSTING_DEVICE_H
#define SQUALL_ENGINE_COSTING_DEVICE_H

#include <stdint.h>

#include "engine/costmodel.h"

#define SQ_DEV_HEADER_EVERY 16
#define SQ_DEV_OTHER_EVERY 32
#define SQ_DEV_PENDING 8 /* timings in flight: more are not taken until some are read */

/* A size class's verdict, from its last header. */
enum { SQ_DEV_MEASURING = 0,
       SQ_DEV_COMPRESS,
       SQ_DEV_PLAIN };

typedef struct {
  void *start, *end; /* the kernel set's marks, made on first use, kept */
  int state;         /* 0 free, 1 started (its end not recorded yet), 2 waiting to be read */
  int kind;          /* the cost model's codec x route slot; -1: plain */
  uint64_t bytes_in;
  uint64_t due; /* read no earlier than this tick (the test-only lag) */
} squall_dev_timing;

typedef struct {
  int on; /* this engine runs the schedule: a device kernel set with a timer, or the test switch */
  /* Test only (SQUALL_TEST_DEVICE_SCHEDULE=K on a host engine): readings
   * are taken no earlier than K scheduled calls after they were recorded,
   * as a device's would be once its stream got there. */
  int lag;
  uint64_t ticks;                   /* scheduled calls of this engine */
  uint64_t calls[SQ_COST_CLASSES];  /* scheduled calls, per size class */
  uint8_t verdict[SQ_COST_CLASSES]; /* SQ_DEV_* */
  squall_dev_timing t[SQ_DEV_PENDING];
} squall_devcost;

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * timer_host.c - the host kernel set's timer (kernels.h, timer_record):
 * a mark is a clock reading, taken when recorded, since host work is done
 * when its function returns; a reading is therefore ready at once. The
 * device cost model's schedule runs on host memory in the tests through
 * it (engine/costing_device.c).
 */
#include "kernels/kernels.h"

#include <stdlib.h>

#include "common/internal.h"
#include "common/stats.h"

squallResult_t squall__host_timer_record(void **mark, void *stream) {
  (void)stream;
  if (*mark == NULL) {
    *mark = malloc(sizeof(double));
    SQ_RETURN_ERROR_IF(*mark == NULL, squallSystemError, "out of memory for a timer mark (%zu bytes)",
                       sizeof(double));
  }
  *(double *)*mark = squall__now();
  return squallSuccess;
}

int squall__host_timer_elapsed(void *start, void *end, double *seconds) {
  if (start == NULL || end == NULL) return -1;
  *seconds = *(const double *)end - *(const double *)start;
  return 1;
}

void squall__host_timer_free(void *mark) { free(mark); }

/* SPDX-License-Identifier: BSD-3-Clause */
/* version.c - what this build is. */
#include "common/internal.h"

squallResult_t squallGetVersion(int *version) {
  SQ_RETURN_ERROR_IF(version == NULL, squallInvalidArgument, "squallGetVersion: version is NULL");
  *version = SQUALL_VERSION_CODE;
  return squallSuccess;
}

/* What the build contains, not what a process uses: an MPI job on a
 * machine without a GPU prints "built with cuda kernels" all the same. */
const char *squallVersionString(void) {
  return PACKAGE_VERSION
#ifdef HAVE_CUDA
      " (built with cuda kernels"
#ifdef HAVE_NCCL
      "; nccl transport"
#endif
      ")"
#else
      " (built with host codecs only)"
#endif
      ;
}

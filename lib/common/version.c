/* version.c - what this build is. */
#include "common/internal.h"

squallResult_t squallGetVersion(int *version) {
  SQ_RETURN_ERROR_IF(version == NULL, squallInvalidArgument, "squallGetVersion: version is NULL");
  *version = SQUALL_VERSION_CODE;
  return squallSuccess;
}

const char *squallVersionString(void) {
  return PACKAGE_VERSION
#ifdef HAVE_CUDA
      " (cuda kernels"
#ifdef HAVE_NCCL
      "; nccl transport"
#endif
      ")"
#else
      " (host codecs only)"
#endif
      ;
}

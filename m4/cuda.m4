# SPDX-License-Identifier: BSD-3-Clause
# SQUALL_CHECK_CUDA: find nvcc and cudart, test-compile a kernel.
# Defines HAVE_CUDA (AM_CONDITIONAL and config.h), NVCC, NVCCFLAGS, CUDA_CFLAGS, CUDA_LIBS.
AC_DEFUN([SQUALL_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda=DIR], [CUDA toolkit prefix (default /usr/local/cuda); --without-cuda builds the host codecs only])],
    [], [with_cuda=check])
  AC_ARG_WITH([cuda-arch],
    [AS_HELP_STRING([--with-cuda-arch=LIST], [comma-separated SM numbers to build SASS for, PTX for the last (default 80,90,100)])],
    [], [with_cuda_arch=80,90,100])
  have_cuda=no; CUDA_SUMMARY=
  AS_IF([test "x$with_cuda" != xno], [
    AS_CASE([$with_cuda], [check|yes], [cuda_dir=/usr/local/cuda], [cuda_dir=$with_cuda])
    AC_PATH_PROG([NVCC], [nvcc], [], [$cuda_dir/bin:$PATH])
    cuda_libdir=$cuda_dir/lib64
    test -d "$cuda_libdir" || cuda_libdir=$cuda_dir/lib
    save_CPPFLAGS=$CPPFLAGS; save_LIBS=$LIBS; save_LDFLAGS=$LDFLAGS
    CPPFLAGS="$CPPFLAGS -I$cuda_dir/include"; LDFLAGS="$LDFLAGS -L$cuda_libdir"
    cuda_ok=yes
    AS_IF([test -z "$NVCC"], [cuda_ok=no; cuda_why="nvcc not found in $cuda_dir/bin or PATH"])
    AS_IF([test $cuda_ok = yes], [AC_CHECK_HEADER([cuda_runtime_api.h], [], [cuda_ok=no; cuda_why="cuda_runtime_api.h not found"])])
    AS_IF([test $cuda_ok = yes], [AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [], [cuda_ok=no; cuda_why="libcudart not found in $cuda_libdir"])])
    CPPFLAGS=$save_CPPFLAGS; LIBS=$save_LIBS; LDFLAGS=$save_LDFLAGS
    NVCC_GENCODE=
    last_arch=
    for a in `echo "$with_cuda_arch" | tr ',' ' '`; do
      NVCC_GENCODE="$NVCC_GENCODE -gencode arch=compute_$a,code=sm_$a"; last_arch=$a
    done
    NVCC_GENCODE="$NVCC_GENCODE -gencode arch=compute_$last_arch,code=compute_$last_arch"
    AS_IF([test $cuda_ok = yes], [
      AC_MSG_CHECKING([whether nvcc compiles a kernel for $with_cuda_arch])
      cat > conftest.cu <<_SQEOF
#include <cub/cub.cuh>
__global__ void k(float *x) { x[[threadIdx.x]] *= 2.0f; }
_SQEOF
      AS_IF([$NVCC $NVCC_GENCODE -c conftest.cu -o conftest.o >&AS_MESSAGE_LOG_FD 2>&1],
        [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); cuda_ok=no; cuda_why="nvcc failed to compile a test kernel (see config.log)"])
      rm -f conftest.cu conftest.o
    ])
    AS_IF([test $cuda_ok = yes], [
      have_cuda=yes; CUDA_SUMMARY="($cuda_dir, sm $with_cuda_arch)"
      CUDA_CFLAGS="-I$cuda_dir/include"; CUDA_LIBS="-L$cuda_libdir -Wl,-rpath,$cuda_libdir -lcudart"
      CUDA_DIR=$cuda_dir
      AC_DEFINE([HAVE_CUDA], [1], [CUDA kernels are built])
    ], [
      AS_IF([test "x$with_cuda" != xcheck], [AC_MSG_ERROR([CUDA requested but unusable: $cuda_why])])
      AC_MSG_WARN([CUDA kernels disabled: $cuda_why (install the CUDA toolkit or pass --with-cuda=DIR)])
      CUDA_SUMMARY="($cuda_why)"
    ])
  ], [CUDA_SUMMARY="(--without-cuda)"])
  # -fmad=false: a * b + c stays two roundings, as in the host twins (nvcc
  # would contract it into one fma; the codecs' products are exact, but an
  # overflowing one, from a corrupt scale, would then differ from the host's)
  NVCCFLAGS="-O3 -std=c++17 -fmad=false $NVCC_GENCODE"
  AC_SUBST([NVCC])
  AC_SUBST([NVCCFLAGS])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([CUDA_DIR])
  AM_CONDITIONAL([HAVE_CUDA], [test $have_cuda = yes])
])

# SQUALL_CHECK_NCCL: nccl.h and libnccl (the direct API links it; the preload library does not).
AC_DEFUN([SQUALL_CHECK_NCCL], [
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl=DIR], [NCCL prefix (default: the CUDA prefix, then the system)])],
    [], [with_nccl=check])
  have_nccl=no; NCCL_SUMMARY=
  AS_IF([test "x$with_nccl" != xno && test "x$have_cuda" = xyes], [
    AS_CASE([$with_nccl], [check|yes], [nccl_dir=$CUDA_DIR], [nccl_dir=$with_nccl])
    nccl_libdir=$nccl_dir/lib64; test -d "$nccl_libdir" || nccl_libdir=$nccl_dir/lib
    save_CPPFLAGS=$CPPFLAGS; save_LIBS=$LIBS; save_LDFLAGS=$LDFLAGS
    CPPFLAGS="$CPPFLAGS -I$nccl_dir/include $CUDA_CFLAGS"; LDFLAGS="$LDFLAGS -L$nccl_libdir"
    AC_CHECK_HEADER([nccl.h], [AC_CHECK_LIB([nccl], [ncclAllReduce], [have_nccl=yes])])
    CPPFLAGS=$save_CPPFLAGS; LIBS=$save_LIBS; LDFLAGS=$save_LDFLAGS
    AS_IF([test $have_nccl = yes], [
      NCCL_CFLAGS="-I$nccl_dir/include"; NCCL_LIBS="-L$nccl_libdir -Wl,-rpath,$nccl_libdir -lnccl"
      NCCL_SUMMARY="($nccl_dir)"
      AC_DEFINE([HAVE_NCCL], [1], [NCCL transport is built])
    ], [
      AS_IF([test "x$with_nccl" != xcheck], [AC_MSG_ERROR([NCCL requested but nccl.h/libnccl not found under $nccl_dir])])
      AC_MSG_WARN([NCCL transport disabled: nccl.h or libnccl not found under $nccl_dir (pass --with-nccl=DIR)])
      NCCL_SUMMARY="(not found)"
    ])
  ], [NCCL_SUMMARY="(needs CUDA)"])
  AC_SUBST([NCCL_CFLAGS])
  AC_SUBST([NCCL_LIBS])
  AM_CONDITIONAL([HAVE_NCCL], [test $have_nccl = yes])
])

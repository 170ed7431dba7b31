# SPDX-License-Identifier: BSD-3-Clause
# SQUALL_CHECK_MPI: MPI's compile and link flags, from the user (MPI_CFLAGS,
# MPI_LIBS) or from an MPI compiler wrapper (MPICC, default mpicc), which is
# how every MPI says where it is: Open MPI answers --showme:compile and
# --showme:link, MPICH (and Intel MPI, Cray MPICH, MVAPICH) -compile_info
# and -link_info, which print a whole command line that is filtered here.
# --without-mpi leaves MPI out. Defines HAVE_MPI (AM_CONDITIONAL and
# config.h), MPI_CFLAGS, MPI_LIBS, MPIEXEC, MPI_SUMMARY.

# SQUALL_MPI_FILTER(WORDS, compile|link): the words of a wrapper's command
# line that a compile (-I, -D, -pthread, -isystem DIR) or a link (-L, -l,
# -Wl, -pthread, -Xlinker ARG, a library file) needs; the compiler's name,
# -c and optimisation flags are dropped.
AC_DEFUN([SQUALL_MPI_FILTER], [`
  squall_next=; squall_out=
  for squall_w in $1; do
    if test -n "$squall_next"; then squall_out="$squall_out $squall_w"; squall_next=; continue; fi
    case $2:$squall_w in
      compile:-I*|compile:-D*|*:-pthread) squall_out="$squall_out $squall_w" ;;
      compile:-isystem) squall_out="$squall_out $squall_w"; squall_next=1 ;;
      link:-L*|link:-l*|link:-Wl,*|link:*.so|link:*.so.*|link:*.a) squall_out="$squall_out $squall_w" ;;
      link:-Xlinker) squall_out="$squall_out $squall_w"; squall_next=1 ;;
    esac
  done
  echo $squall_out`])

AC_DEFUN([SQUALL_CHECK_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--without-mpi], [build without MPI: leaves out libsquall-mpi (squallMpiAllreduce), the MPI interposer, squall-bench, squall-train and the tests that run ranks; the NCCL path, squallColl and the host codecs are built])],
    [], [with_mpi=check])
  AC_ARG_VAR([MPICC], [MPI compiler wrapper asked for MPI's flags (default mpicc): Open MPI's --showme:compile/--showme:link, or MPICH's -compile_info/-link_info (also Intel MPI, Cray MPICH)])
  AC_ARG_VAR([MPI_CFLAGS], [MPI's compiler flags; with MPI_LIBS, used as given instead of asking MPICC])
  AC_ARG_VAR([MPI_LIBS], [MPI's linker flags; with MPI_CFLAGS, used as given instead of asking MPICC])
  AC_ARG_VAR([MPIEXEC], [MPI launcher for the tests (default: mpiexec or mpirun beside MPICC, with its suffix)])
  have_mpi=no; MPI_SUMMARY=; mpi_flavour=
  AS_IF([test "x$with_mpi" = xno], [MPI_CFLAGS=; MPI_LIBS=; MPI_SUMMARY="(--without-mpi)"], [
    AS_CASE([$with_mpi], [yes|check], [],
      [AC_MSG_ERROR([--with-mpi takes no value ('$with_mpi'): name the MPI wrapper with MPICC=...])])
    AS_IF([test -n "$MPI_CFLAGS$MPI_LIBS"], [mpi_flavour="MPI_CFLAGS/MPI_LIBS as given"], [
      mpi_wrapper=${MPICC:-mpicc}
      AC_PATH_PROG([MPICC_PATH], [$mpi_wrapper], [])
      AS_IF([test -z "$MPICC_PATH"], [
        AC_MSG_ERROR([no MPI compiler wrapper '$mpi_wrapper' in PATH: install MPI (Debian: libopenmpi-dev openmpi-bin, or mpich libmpich-dev), name its wrapper with MPICC=..., give MPI_CFLAGS and MPI_LIBS, or configure --without-mpi])])
      AC_MSG_CHECKING([how to ask $mpi_wrapper for MPI's flags])
      AS_IF([mpi_c=`"$MPICC_PATH" --showme:compile 2>/dev/null` && mpi_l=`"$MPICC_PATH" --showme:link 2>/dev/null`], [
        mpi_flavour="Open MPI's --showme"
      ], [mpi_c=`"$MPICC_PATH" -compile_info 2>/dev/null` && mpi_l=`"$MPICC_PATH" -link_info 2>/dev/null`], [
        mpi_flavour="MPICH's -compile_info"
      ], [
        AC_MSG_RESULT([neither])
        AC_MSG_ERROR([$MPICC_PATH answers neither --showme:compile (Open MPI) nor -compile_info (MPICH): give MPI_CFLAGS and MPI_LIBS, or configure --without-mpi])
      ])
      AC_MSG_RESULT([$mpi_flavour])
      MPI_CFLAGS=SQUALL_MPI_FILTER([$mpi_c], [compile])
      MPI_LIBS=SQUALL_MPI_FILTER([$mpi_l], [link])
      mpi_flavour="$mpi_flavour of $MPICC_PATH"
    ])
    save_CFLAGS=$CFLAGS; save_LIBS=$LIBS
    CFLAGS="$CFLAGS $MPI_CFLAGS"; LIBS="$MPI_LIBS $LIBS"
    AC_MSG_CHECKING([whether an MPI program links with '$MPI_CFLAGS $MPI_LIBS'])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]], [[MPI_Init(0, 0);]])], [AC_MSG_RESULT([yes])], [
      AC_MSG_RESULT([no])
      AC_MSG_ERROR([cannot link an MPI program with MPI_CFLAGS='$MPI_CFLAGS' MPI_LIBS='$MPI_LIBS' ($mpi_flavour; see config.log), or configure --without-mpi])])
    CFLAGS=$save_CFLAGS; LIBS=$save_LIBS
    # The launcher that belongs to the wrapper: mpicc.mpich goes with
    # mpiexec.mpich, in the wrapper's folder first.
    AS_IF([test -z "$MPIEXEC"], [
      mpi_suffix=; mpi_dir=
      AS_IF([test -n "$MPICC_PATH"], [
        mpi_dir=`dirname "$MPICC_PATH"`
        mpi_suffix=`basename "$MPICC_PATH" | $SED -n 's/^mpicc//p'`])
      AC_PATH_PROGS([MPIEXEC], [mpiexec$mpi_suffix mpirun$mpi_suffix], [], [$mpi_dir$PATH_SEPARATOR$PATH])])
    have_mpi=yes; MPI_SUMMARY="($mpi_flavour; launcher ${MPIEXEC:-none found})"
    AC_DEFINE([HAVE_MPI], [1], [the MPI transport and libsquall-mpi are built])
  ])
  AC_SUBST([MPI_CFLAGS])
  AC_SUBST([MPI_LIBS])
  AC_SUBST([MPIEXEC])
  AM_CONDITIONAL([HAVE_MPI], [test $have_mpi = yes])
])

# SPDX-License-Identifier: BSD-3-Clause
# Small helpers local to squall.

AC_DEFUN([AX_CHECK_COMPILE_FLAG_SIMPLE], [
  AC_MSG_CHECKING([whether $CC accepts $1])
  save_CFLAGS=$CFLAGS; CFLAGS="$CFLAGS $1 -Werror"
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])], [AC_MSG_RESULT([yes]); $2], [AC_MSG_RESULT([no]); $3])
  CFLAGS=$save_CFLAGS
])

AC_DEFUN([AX_PTHREAD_SIMPLE], [
  AC_CHECK_HEADER([pthread.h], [], [AC_MSG_ERROR([pthread.h not found])])
  AC_SEARCH_LIBS([pthread_once], [pthread])
])

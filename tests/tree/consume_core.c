/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * consume_core.c - a program that uses only <squall.h> and <squall_coll.h>,
 * built by tests/tree/consume.sh against an installed squall (through CMake
 * and pkg-config): one rank's squallColl all-reduce over collectives that
 * copy, so that it runs anywhere, with no MPI, NCCL or CUDA present.
 */
#include <stdio.h>
#include <string.h>

#include <squall.h>
#include <squall_coll.h>

static int one_rank_reduce(void *ctx, const void *send, void *recv, size_t count, squallDataType_t type,
                           squallRedOp_t op, void *stream) {
  (void)ctx, (void)op, (void)stream;
  size_t width = type == squallInt64 ? 8 : type == squallFloat32 ? 4 : 2;
  if (send != recv) memmove(recv, send, count * width);
  return 0;
}

static int one_rank_gather(void *ctx, const void *send, void *recv, size_t bytes, void *stream) {
  (void)ctx, (void)stream;
  if (send != recv) memmove(recv, send, bytes);
  return 0;
}

int main(void) {
  enum { n = 4096 };
  static float send[n], recv[n];
  for (int i = 0; i < n; i++) send[i] = (float)(i % 64);
  squallCollectives_t t = SQUALL_COLLECTIVES_INIT;
  t.rank = 0, t.nranks = 1, t.allReduce = one_rank_reduce, t.allGather = one_rank_gather;
  squallColl_t coll;
  if (squallCollCreate(&t, NULL, &coll) != squallSuccess) {
    fprintf(stderr, "consume_core: squallCollCreate: %s\n", squallGetLastError());
    return 1;
  }
  if (squallCollAllReduce(coll, send, recv, n, squallFloat32, squallSum, NULL, NULL) != squallSuccess) {
    fprintf(stderr, "consume_core: squallCollAllReduce: %s\n", squallGetLastError());
    return 1;
  }
  squallCollDestroy(coll);
  for (int i = 0; i < n; i++)
    if (recv[i] != send[i]) {
      fprintf(stderr, "consume_core: element %d is %g, not %g\n", i, recv[i], send[i]);
      return 1;
    }
  printf("consume_core: squall %s, %d elements all-reduced on one rank\n", squallVersionString(), n);
  return 0;
}

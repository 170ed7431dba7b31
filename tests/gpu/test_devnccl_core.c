/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_devnccl_core.c - the exchange core of the device-memory test NCCL
 * (tests/gpu/devnccl/xchg*.c) without a GPU: host buffers, 2, 3 and 4
 * fork()ed ranks. Checked: all-reduce (every type squall uses, sum, max,
 * min, average; 16-bit rounding in rank order), all-gather, reduce-scatter,
 * broadcast (also in place, over several rounds of a slot) and groups of
 * send/receive give exact results, bit-identical on every rank; sizes that
 * do not pair up fail on every rank; FAKENCCL_FAULT fails or corrupts the
 * N-th call as the host test NCCL does; FAKENCCL_NS_PER_BYTE slows a call
 * down, FAKENCCL_NS_PER_CALL adds to each (a group once), bad values are
 * named; a peer that exits, or never comes, is an error on the others
 * within the time limit, not a hang; disagreeing ranks at join fail everywhere.
 * Prints "N passed, N failed"; exit 0 or 1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devnccl/xchg.h"

typedef struct {
  int passed, failed;
} tally;
static tally *g_tally; /* shared by all processes (MAP_SHARED) */
static int g_rank = -1;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
  __atomic_add_fetch(ok ? &g_tally->passed : &g_tally->failed, 1, __ATOMIC_SEQ_CST);
  if (ok) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: FAIL: ", g_rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Dyadic values in [-8, 8] in steps of 1/8: sums of a few are exact in
 * float and in binary16 (|sum| <= 32). */
static float gen(int seed, int r, size_t i) {
  unsigned x = (unsigned)(seed * 2654435761u) ^ (unsigned)(r * 40503u) ^ (unsigned)(i * 2246822519u);
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return (float)((int)(x % 129) - 64) / 8.0f;
}

/* Issues and runs one op as the NCCL layer does: prepare (faults, slow
 * link), run, the prepared error after a successful run. */
static int issue(dnx_seg *s, dnx_op op, char *err, size_t len) {
  int r = dnx_prepare(s, &op, err, len);
  if (r == DNX_EINVAL) return r;
  char run_err[512];
  int rr = dnx_run(s, &op, run_err, sizeof run_err);
  if (rr != DNX_OK) snprintf(err, len, "%s", run_err);
  return rr != DNX_OK ? rr : r;
}

static int allreduce(dnx_seg *s, const void *in, void *out, size_t n, int type, int op) {
  char err[512];
  dnx_op o = {.kind = DNX_ALLREDUCE, .type = type, .op = op, .in = in, .out = out, .count = n};
  int r = issue(s, o, err, sizeof err);
  if (r != DNX_OK && r != DNX_ESYS) fprintf(stderr, "rank %d: all-reduce: %s\n", g_rank, err);
  return r;
}

/* ------------------------------------------------------------ all-reduce */
static void check_f32(dnx_seg *s, int P, int me, size_t n, int op, const char *what) {
  float *in = malloc(n * 4), *out = malloc(n * 4);
  for (size_t i = 0; i < n; i++) in[i] = gen(op + 1, me, i);
  check(allreduce(s, in, out, n, DNX_FLOAT32, op) == DNX_OK, "%s: status", what);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = op == DNX_AVG ? gen(op + 1, 0, i) * (1.0f / (float)P) : gen(op + 1, 0, i);
    for (int r = 1; r < P; r++) {
      float x = gen(op + 1, r, i);
      if (op == DNX_SUM) want += x;
      else if (op == DNX_MAX) want = fmaxf(want, x);
      else if (op == DNX_MIN) want = fminf(want, x);
      else want += x * (1.0f / (float)P);
    }
    bad += memcmp(&want, &out[i], 4) != 0;
  }
  check(bad == 0, "%s: %zu of %zu elements wrong", what, bad, n);
  free(in);
  free(out);
}

static void check_integers(dnx_seg *s, int P, int me) {
  size_t n = 5003;
  int64_t *a = malloc(n * 8), *b = malloc(n * 8);
  int32_t *c = malloc(n * 4), *d = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    a[i] = (int64_t)(i * 7919 % 1000) - 500 + me * 3;
    c[i] = (int32_t)(0x7ffffff0 + (int32_t)me); /* the sum wraps, as on the GPU */
  }
  check(allreduce(s, a, b, n, DNX_INT64, DNX_MIN) == DNX_OK, "int64 min: status");
  check(allreduce(s, c, d, n, DNX_INT32, DNX_SUM) == DNX_OK, "int32 sum: status");
  uint32_t want = 0;
  for (int r = 0; r < P; r++) want += 0x7ffffff0u + (uint32_t)r;
  int ok_min = 1, ok_sum = 1;
  for (size_t i = 0; i < n; i++) {
    ok_min &= b[i] == (int64_t)(i * 7919 % 1000) - 500;
    ok_sum &= (uint32_t)d[i] == want;
  }
  check(ok_min, "int64 min (squall's call header)");
  check(ok_sum, "int32 sum wraps modulo 2^32");
  for (size_t i = 0; i < n; i++) c[i] = (int32_t)(10 * me + 1);
  check(allreduce(s, c, d, n, DNX_INT32, DNX_AVG) == DNX_OK && d[0] == (10 * (P - 1) * P / 2 + P) / P,
        "int32 average divides the sum (%d)", d[0]);
  free(a), free(b), free(c), free(d);
}

/* Exact dyadic sums over two rounds of the slot, and rounding in rank
 * order: rank 0 holds 2048 (fp16) or 256 (bf16), the others 1; each step
 * rounds the tie back to even, so the sum stays put; summed in another
 * order it would not. */
static void check_16bit(dnx_seg *s, int P, int me) {
  size_t n = 600001;
  uint16_t *in = malloc(n * 2), *out = malloc(n * 2);
  for (int bf = 0; bf < 2; bf++) {
    const char *name = bf ? "bfloat16" : "float16";
    for (size_t i = 0; i < n; i++) {
      float v = gen(7, me, i) / (bf ? 64.0f : 1.0f); /* bf16: values with few bits */
      in[i] = bf ? dnx_float_to_bf16(v) : dnx_float_to_half(v);
    }
    check(allreduce(s, in, out, n, bf ? DNX_BFLOAT16 : DNX_FLOAT16, DNX_SUM) == DNX_OK, "%s sum: status", name);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      for (int r = 0; r < P; r++) want += gen(7, r, i) / (bf ? 64.0f : 1.0f);
      bad += (bf ? dnx_bf16_to_float(out[i]) : dnx_half_to_float(out[i])) != want;
    }
    check(bad == 0, "%s sum of dyadic values exact: %zu of %zu wrong", name, bad, n);
    float big = bf ? 256.0f : 2048.0f, one = me == 0 ? big : 1.0f;
    uint16_t x = bf ? dnx_float_to_bf16(one) : dnx_float_to_half(one), y = 0;
    check(allreduce(s, &x, &y, 1, bf ? DNX_BFLOAT16 : DNX_FLOAT16, DNX_SUM) == DNX_OK &&
              (bf ? dnx_bf16_to_float(y) : dnx_half_to_float(y)) == big,
          "%s: %g + 1 + ... rounds at each step in rank order (got %g)", name, big,
          bf ? dnx_bf16_to_float(y) : dnx_half_to_float(y));
  }
  free(in);
  free(out);
}

/* ------------------------------------------------------------ the others */
static unsigned char byte_of(int r, size_t i) { return (unsigned char)(r * 37 + i * 11 + (i >> 9)); }

static void check_allgather(dnx_seg *s, int P, int me, int in_place) {
  size_t b = 1100003; /* two rounds */
  unsigned char *out = malloc(b * (size_t)P), *in = in_place ? out + (size_t)me * b : malloc(b);
  for (size_t i = 0; i < b; i++) in[i] = byte_of(me, i);
  char err[512];
  dnx_op o = {.kind = DNX_ALLGATHER, .type = DNX_UINT8, .in = in, .out = out, .count = b};
  int r = issue(s, o, err, sizeof err);
  size_t bad = 0;
  for (int q = 0; q < P; q++)
    for (size_t i = 0; i < b; i++) bad += out[(size_t)q * b + i] != byte_of(q, i);
  check(r == DNX_OK && bad == 0, "all-gather%s: status %d, %zu bytes wrong", in_place ? " in place" : "", r, bad);
  if (!in_place) free(in);
  free(out);
}

static void check_reducescatter(dnx_seg *s, int P, int me, int in_place) {
  size_t n = 70001; /* two rounds with 4 ranks */
  float *in = malloc(n * (size_t)P * 4), *out = in_place ? in + (size_t)me * n : malloc(n * 4);
  for (size_t i = 0; i < n * (size_t)P; i++) in[i] = gen(9, me, i);
  char err[512];
  dnx_op o = {.kind = DNX_REDUCESCATTER, .type = DNX_FLOAT32, .op = DNX_SUM, .in = in, .out = out, .count = n};
  int r = issue(s, o, err, sizeof err);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int q = 0; q < P; q++) want += gen(9, q, (size_t)me * n + i);
    bad += out[i] != want;
  }
  check(r == DNX_OK && bad == 0, "reduce-scatter%s: status %d, %zu wrong", in_place ? " in place" : "", r, bad);
  if (!in_place) free(out);
  free(in);
}

static void check_broadcast(dnx_seg *s, int P, int me) {
  size_t b = 1500000;
  unsigned char *buf = malloc(b);
  memset(buf, me == P - 1 ? 0x3c : 0, b);
  char err[512];
  dnx_op o = {.kind = DNX_BROADCAST, .type = DNX_UINT8, .root = P - 1, .in = buf, .out = buf, .count = b};
  int r = issue(s, o, err, sizeof err), ok = 1;
  for (size_t i = 0; i < b; i++) ok &= buf[i] == 0x3c;
  check(r == DNX_OK && ok, "broadcast from the last rank, in place");
  free(buf);
}

/* Two messages to each peer, itself included, of sizes that differ by pair
 * and span several rounds, as squall's all-to-all posts them. */
static size_t msg_bytes(int from, int to, int k) { return k == 0 ? 1000 * (size_t)(from + 1) + (size_t)to : 300000 + 7 * (size_t)to + (size_t)from; }
static unsigned char msg_byte(int from, int to, int k, size_t i) { return (unsigned char)(from * 31 + to * 7 + k * 3 + i); }

static void check_p2p(dnx_seg *s, int P, int me) {
  dnx_p2p ops[4 * DNX_MAX_RANKS];
  int n = 0;
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < P; j++) {
      ops[n] = (dnx_p2p){1, j, malloc(msg_bytes(me, j, k)), msg_bytes(me, j, k)};
      for (size_t i = 0; i < ops[n].bytes; i++) ((unsigned char *)ops[n].buf)[i] = msg_byte(me, j, k, i);
      n++;
      ops[n] = (dnx_p2p){0, j, calloc(1, msg_bytes(j, me, k)), msg_bytes(j, me, k)};
      n++;
    }
  char err[512];
  dnx_op o = {.kind = DNX_GROUP_P2P, .p2p = ops, .np2p = n};
  int r = issue(s, o, err, sizeof err);
  size_t bad = 0;
  for (int m = 0; m < n; m++) {
    if (ops[m].is_send) continue;
    int k = m >= 2 * P, j = ops[m].peer;
    for (size_t i = 0; i < ops[m].bytes; i++) bad += ((unsigned char *)ops[m].buf)[i] != msg_byte(j, me, k, i);
  }
  check(r == DNX_OK && bad == 0, "send/recv group, two messages per pair: status %d (%s), %zu bytes wrong", r,
        r ? err : "", bad);
  for (int m = 0; m < n; m++) free(ops[m].buf);
  /* rank 0 sends 10 bytes to rank P-1, which expects 11: every rank fails alike */
  char buf[16] = {0};
  dnx_p2p bad_ops[2];
  int nb = 0;
  if (me == 0) bad_ops[nb++] = (dnx_p2p){1, P - 1, buf, 10};
  if (me == P - 1) bad_ops[nb++] = (dnx_p2p){0, 0, buf, 11};
  o = (dnx_op){.kind = DNX_GROUP_P2P, .p2p = bad_ops, .np2p = nb};
  r = issue(s, o, err, sizeof err);
  check(r == DNX_EUSAGE && strstr(err, "sends 10 bytes") && strstr(err, "receives 11"),
        "sizes that do not pair up: ncclInvalidUsage on every rank (%d: %s)", r, err);
}

/* FAKENCCL_NS_PER_CALL: 30 ms more per operation, whatever its size, a
 * group of sends and receives once; added to FAKENCCL_NS_PER_BYTE's. a and
 * b: n floats. */
static void check_latency(dnx_seg *s, int me, float *a, float *b, size_t n) {
  char err[512];
  setenv("FAKENCCL_NS_PER_CALL", "30000000", 1);
  double t0 = now();
  int r = allreduce(s, a, b, 1, DNX_FLOAT32, DNX_SUM);
  double one = now() - t0;
  check(r == DNX_OK && one >= 0.03, "FAKENCCL_NS_PER_CALL=3e7: a 4-byte all-reduce took %.3f s (at least 0.03)", one);
  float x = 1, y = 0;
  dnx_p2p self[2] = {{1, me, &x, 4}, {0, me, &y, 4}};
  dnx_op o = {.kind = DNX_GROUP_P2P, .p2p = self, .np2p = 2};
  t0 = now();
  r = issue(s, o, err, sizeof err);
  one = now() - t0;
  check(r == DNX_OK && y == 1 && one >= 0.03, "FAKENCCL_NS_PER_CALL=3e7: a send/recv group took %.3f s (%d: %s)", one,
        r, r ? err : "");
  setenv("FAKENCCL_NS_PER_BYTE", "100", 1);
  t0 = now();
  r = allreduce(s, a, b, n, DNX_FLOAT32, DNX_SUM);
  one = now() - t0;
  check(r == DNX_OK && one >= 0.07, "both: 400 kB at 100 ns a byte and 30 ms a call took %.3f s (at least 0.07)", one);
  unsetenv("FAKENCCL_NS_PER_BYTE");
  setenv("FAKENCCL_NS_PER_CALL", "-1", 1);
  dnx_op bad_env = {.kind = DNX_ALLREDUCE, .type = DNX_FLOAT32, .in = a, .out = b, .count = 1};
  check(dnx_prepare(s, &bad_env, err, sizeof err) == DNX_EINVAL && strstr(err, "FAKENCCL_NS_PER_CALL='-1'"),
        "a bad FAKENCCL_NS_PER_CALL is refused, named (%s)", err);
  unsetenv("FAKENCCL_NS_PER_CALL");
}

/* ------------------------------------------------------------ environment */
static void check_faults(dnx_seg *s, int P, int me) {
  float x = 1.0f, y = 0;
  setenv("FAKENCCL_FAULT", "fail:2", 1);
  int r1 = allreduce(s, &x, &y, 1, DNX_FLOAT32, DNX_SUM), r2 = allreduce(s, &x, &y, 1, DNX_FLOAT32, DNX_SUM);
  float y2 = y;
  int r3 = allreduce(s, &x, &y, 1, DNX_FLOAT32, DNX_SUM);
  check(r1 == DNX_OK && r2 == DNX_ESYS && r3 == DNX_OK && y2 == (float)P,
        "FAKENCCL_FAULT=fail:2: the second call fails after it completed (%d %d %d, %g)", r1, r2, r3, y2);
  setenv("FAKENCCL_FAULT", "corrupt:1", 1);
  unsigned char g[64], out[64 * DNX_MAX_RANKS];
  memset(g, me, sizeof g);
  char err[512];
  dnx_op o = {.kind = DNX_ALLGATHER, .type = DNX_UINT8, .in = g, .out = out, .count = sizeof g};
  int r = issue(s, o, err, sizeof err), all_ff = 1;
  for (size_t i = 0; i < sizeof g * (size_t)P; i++) all_ff &= out[i] == 0xff;
  check(r == DNX_OK && all_ff, "FAKENCCL_FAULT=corrupt:1: the all-gather's result is 0xff bytes");
  setenv("FAKENCCL_FAULT", "fail:1", 1);
  setenv("FAKENCCL_FAULT_RANK", "1", 1);
  r = allreduce(s, &x, &y, 1, DNX_FLOAT32, DNX_SUM);
  check(r == (me == 1 ? DNX_ESYS : DNX_OK), "FAKENCCL_FAULT_RANK=1: only rank 1 fails (%d)", r);
  unsetenv("FAKENCCL_FAULT");
  unsetenv("FAKENCCL_FAULT_RANK");
  /* a slow link: 400 kB at 100 ns a byte is 40 ms at least */
  size_t n = 100000;
  float *a = calloc(n, 4), *b = calloc(n, 4);
  setenv("FAKENCCL_NS_PER_BYTE", "100", 1);
  double t0 = now();
  r = allreduce(s, a, b, n, DNX_FLOAT32, DNX_SUM);
  double slow = now() - t0;
  unsetenv("FAKENCCL_NS_PER_BYTE");
  check(r == DNX_OK && slow >= 0.04, "FAKENCCL_NS_PER_BYTE=100: 400 kB took %.3f s (at least 0.04)", slow);
  setenv("FAKENCCL_NS_PER_BYTE", "fast", 1);
  dnx_op bad_env = {.kind = DNX_ALLREDUCE, .type = DNX_FLOAT32, .in = a, .out = b, .count = 1};
  check(dnx_prepare(s, &bad_env, err, sizeof err) == DNX_EINVAL && strstr(err, "FAKENCCL_NS_PER_BYTE='fast'"),
        "a bad FAKENCCL_NS_PER_BYTE is refused, named");
  unsetenv("FAKENCCL_NS_PER_BYTE");
  check_latency(s, me, a, b, n);
  free(a), free(b);
  int64_t all[DNX_MAX_RANKS][2];
  int ok = dnx_ctl_allgather(s, 10 * me, -me, all, err, sizeof err) == DNX_OK;
  for (int q = 0; q < P; q++) ok &= all[q][0] == 10 * q && all[q][1] == -q;
  check(ok, "control exchange (ncclCommSplit's colors and keys)");
}

static void rank_body(const char *name, int P, int me) {
  dnx_seg *s;
  char err[512];
  if (dnx_join(name, P, me, &s, err, sizeof err) != DNX_OK) {
    check(0, "join: %s", err);
    return;
  }
  check(dnx_rank(s) == me && dnx_nranks(s) == P, "rank and size");
  check_f32(s, P, me, 300007, DNX_SUM, "float32 sum, two rounds");
  check_f32(s, P, me, 3001, DNX_MAX, "float32 max");
  check_f32(s, P, me, 3001, DNX_MIN, "float32 min");
  check_f32(s, P, me, 3001, DNX_AVG, "float32 average");
  check_integers(s, P, me);
  check_16bit(s, P, me);
  check_allgather(s, P, me, 0);
  check_allgather(s, P, me, 1);
  check_reducescatter(s, P, me, 0);
  check_reducescatter(s, P, me, 1);
  check_broadcast(s, P, me);
  check_p2p(s, P, me);
  check_faults(s, P, me);
  dnx_leave(s);
}

/* ------------------------------------------------------------ processes */
typedef void (*body_fn)(const char *name, int P, int me);

/* Runs body on P forked ranks; the seconds it took. */
static double run_ranks(int P, body_fn body) {
  char name[64];
  dnx_make_name(name, sizeof name);
  pid_t pid[DNX_MAX_RANKS];
  double t0 = now();
  for (int r = 0; r < P; r++) {
    fflush(NULL);
    pid[r] = fork();
    if (pid[r] == 0) {
      g_rank = r;
      body(name, P, r);
      fflush(NULL);
      _exit(0);
    }
  }
  for (int r = 0; r < P; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !(WIFEXITED(st) && WEXITSTATUS(st) == 3))
      check(0, "rank %d of %d ended with status 0x%x", r, P, st);
  }
  return now() - t0;
}

/* Rank 2 leaves after the first call; the others must say so, not hang. */
static void dead_peer(const char *name, int P, int me) {
  dnx_seg *s;
  char err[512];
  if (dnx_join(name, P, me, &s, err, sizeof err) != DNX_OK) {
    check(0, "join: %s", err);
    return;
  }
  float x = 1, y;
  check(allreduce(s, &x, &y, 1, DNX_FLOAT32, DNX_SUM) == DNX_OK, "the call before a rank exits");
  if (me == 2) _exit(3);
  dnx_op o = {.kind = DNX_ALLREDUCE, .type = DNX_FLOAT32, .in = &x, .out = &y, .count = 1};
  int r = dnx_run(s, &o, err, sizeof err);
  check((r == DNX_ESYS && strstr(err, "rank 2") && strstr(err, "exited")) || (r == DNX_EREMOTE && strstr(err, "exited")),
        "a peer that exited is an error naming it (%d: %s)", r, err);
  r = dnx_run(s, &o, err, sizeof err);
  check(r == DNX_EREMOTE && strstr(err, "poisoned"), "and the communicator stays failed (%d: %s)", r, err);
  dnx_leave(s);
}

/* Rank 1 is alive but never comes: rank 0 gives up after FAKENCCL_TIMEOUT. */
static void late_peer(const char *name, int P, int me) {
  dnx_seg *s;
  char err[512];
  if (dnx_join(name, P, me, &s, err, sizeof err) != DNX_OK) {
    check(0, "join: %s", err);
    return;
  }
  float x = 1, y;
  if (me == 1) sleep(3);
  dnx_op o = {.kind = DNX_ALLREDUCE, .type = DNX_FLOAT32, .in = &x, .out = &y, .count = 1};
  int r = dnx_run(s, &o, err, sizeof err);
  if (me == 0)
    check(r == DNX_ESYS && strstr(err, "gave up") && strstr(err, "FAKENCCL_TIMEOUT"),
          "a peer that does not come: the time limit, named (%d: %s)", r, err);
  else
    check(r == DNX_EREMOTE && strstr(err, "gave up"), "the late rank learns why (%d: %s)", r, err);
  dnx_leave(s);
}

/* Ranks that disagree on the count, or share a rank, fail everywhere. */
static void bad_join(const char *name, int P, int me) {
  dnx_seg *s;
  char err[512];
  int r = me == 2 ? dnx_join(name, P, 1, &s, err, sizeof err) : dnx_join(name, P + (me == 1), me, &s, err, sizeof err);
  check(r == DNX_EUSAGE || r == DNX_EREMOTE || (r == DNX_ESYS && strstr(err, "gave up")), "a bad join fails on rank %d (%d: %s)", me, r, err);
  /* a rank that comes after the others failed (and rank 0 removed the
   * name) waits alone until its time limit, and says so */
  check(strstr(err, "disagree") || strstr(err, "two callers") || strstr(err, "exited") || strstr(err, "gave up"),
        "and says why (rank %d: %s)", me, err);
}

int main(void) {
  g_tally = mmap(NULL, sizeof *g_tally, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_tally == MAP_FAILED) return 1;
  setenv("FAKENCCL_TIMEOUT", "20", 1);
  check(dnx_float_to_half(65504.0f) == 0x7bff && dnx_float_to_half(65520.0f) == 0x7c00 &&
            dnx_float_to_half(0x1p-24f) == 1 && dnx_float_to_half(0x1p-25f) == 0 &&
            dnx_float_to_half(0x3p-25f) == 2 && dnx_float_to_half(1.0f + 0x1p-11f) == 0x3c00 &&
            dnx_float_to_half(1.0f + 0x3p-11f) == 0x3c02 && dnx_float_to_half(-0.0f) == 0x8000 &&
            dnx_float_to_bf16(1.0f + 0x1p-8f) == 0x3f80 && dnx_float_to_bf16(1.0f + 0x3p-8f) == 0x3f82,
        "16-bit rounding to nearest even at the edges");
  int round_trip = 1;
  for (uint32_t h = 0; h < 65536; h++) {
    int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    round_trip &= nan || dnx_float_to_half(dnx_half_to_float((uint16_t)h)) == h;
    round_trip &= nan || dnx_float_to_bf16(dnx_bf16_to_float((uint16_t)h)) == h;
  }
  check(round_trip, "every 16-bit value survives a trip through float");
  for (int P = 2; P <= 4; P++) {
    double t = run_ranks(P, rank_body);
    printf("%d ranks: %.2f s\n", P, t);
  }
  double t = run_ranks(3, dead_peer);
  check(t < 10, "a dead peer was noticed in %.1f s (limit 20)", t);
  setenv("FAKENCCL_TIMEOUT", "1", 1);
  run_ranks(2, late_peer);
  run_ranks(3, bad_join);
  printf("%d passed, %d failed\n", g_tally->passed, g_tally->failed);
  return g_tally->failed ? 1 : 0;
}

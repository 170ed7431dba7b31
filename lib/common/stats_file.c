/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * stats_file.c - writing the SQUALL_STATS file: at exit, at an interval
 * (stats.c's tick) and from a SIGTERM or SIGINT handler. Everything a
 * write does after the path is known is async-signal-safe (open, write,
 * link, rename, unlink, stat; the JSON is formatted by hand, without stdio
 * or locks), so that the handler runs the same code as the call path.
 * Every write goes to a temporary file that is then renamed over the
 * file (or linked, the first time): a reader never sees half of one.
 */
#define _POSIX_C_SOURCE 200809L /* st_mtim, link, sigaction under -std=c11 */
#include "common/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/stats.h"
#include "common/stats_path.h"

/* ------------------------------------------------ JSON without stdio */
typedef struct {
  char *b;
  size_t cap, len;
} out_buf;

static void put_str(out_buf *o, const char *s) {
  for (; *s; s++)
    if (o->len + 1 < o->cap) o->b[o->len++] = *s;
  o->b[o->len < o->cap ? o->len : o->cap - 1] = 0;
}

static void put_u64(out_buf *o, uint64_t v) {
  char d[24];
  int n = 0;
  do d[n++] = (char)('0' + v % 10), v /= 10;
  while (v);
  char s[24];
  for (int i = 0; i < n; i++) s[i] = d[n - 1 - i];
  s[n] = 0;
  put_str(o, s);
}

static void put_int(out_buf *o, int v) {
  if (v < 0) put_str(o, "-");
  put_u64(o, v < 0 ? (uint64_t)(-(int64_t)v) : (uint64_t)v);
}

/* %.6f of a non-negative number of seconds. */
static void put_seconds(out_buf *o, double s) {
  uint64_t us = s > 0 && s < 1e12 ? (uint64_t)(s * 1e6 + 0.5) : 0;
  put_u64(o, us / 1000000);
  char f[8] = ".000000";
  for (int i = 6; i >= 1; i--, us /= 10) f[i] = (char)('0' + us % 10);
  put_str(o, f);
}

static void put_key(out_buf *o, const char *sep, const char *key, uint64_t v) {
  put_str(o, sep);
  put_str(o, "\"");
  put_str(o, key);
  put_str(o, "\": ");
  put_u64(o, v);
}

size_t squall__stats_format(char *b, size_t cap, const squallStats_t *s, int rank) {
  out_buf o = {b, cap, 0};
  put_str(&o, "{\"rank\": ");
  put_int(&o, rank);
  put_key(&o, ", ", "calls", s->calls);
  put_key(&o, ", ", "compressed_calls", s->compressedCalls);
  put_key(&o, ", ", "passthrough_calls", s->passthroughCalls);
  put_str(&o, ", \"passthrough\": {");
  for (int r = 0; r < squallPassNumReasons; r++)
    put_key(&o, r ? ", " : "", squallPassReasonName((squallPassReason_t)r), s->passthrough[r]);
  put_key(&o, "}, ", "bytes_in", s->bytesIn);
  put_key(&o, ", ", "bytes_wire", s->bytesWire);
  put_str(&o, ", \"codec_seconds\": ");
  put_seconds(&o, s->codecSeconds);
  put_key(&o, ", ", "flat_calls", s->flatCalls);
  put_key(&o, ", ", "two_level_calls", s->twoLevelCalls);
  put_str(&o, ", \"flat\": {");
  for (int r = 0; r < squallFlatNumReasons; r++)
    put_key(&o, r ? ", " : "", squallFlatReasonName((squallFlatReason_t)r), s->flat[r]);
  put_key(&o, "}, ", "bytes_inter_node", s->bytesInterNode);
  put_key(&o, ", ", "bytes_intra_node", s->bytesIntraNode);
  put_key(&o, ", ", "pipelined_calls", s->pipelinedCalls);
  put_key(&o, ", ", "pipeline_chunks", s->pipelineChunks);
  put_key(&o, ", ", "headers", s->headers);
  put_str(&o, "}\n");
  return o.len;
}

/* ------------------------------------------------ the file */
static int write_all(int fd, const char *b, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

static int newer_than(const struct stat *st, const struct timespec *t) {
  return st->st_mtim.tv_sec > t->tv_sec || (st->st_mtim.tv_sec == t->tv_sec && st->st_mtim.tv_nsec >= t->tv_nsec);
}

/* tmp = path + suffix + pid; -1 when it does not fit. */
static int temp_name(const char *path, const char *suffix, char *tmp, size_t cap) {
  out_buf o = {tmp, cap, 0};
  put_str(&o, path);
  put_str(&o, suffix);
  put_u64(&o, (uint64_t)getpid());
  return o.len + 1 < cap ? 0 : -1;
}

/* Moves the whole file tmp to path (or to path.<pid>, into *path, where
 * another process of this run wrote path since loaded: two processes
 * that found the same rank; *taken then says so). The first write of a
 * process links, which fails where a file is there, so that of two such
 * processes exactly one gets path; an earlier run's file is replaced.
 * Later writes (own: path is this process's) rename over it. */
static int place(const char *tmp, char *path, size_t cap, int own, const struct timespec *loaded, int *taken) {
  if (own) return rename(tmp, path);
  struct stat st;
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && !newer_than(&st, loaded)) unlink(path); /* an earlier run's */
  if (link(tmp, path) == 0) return unlink(tmp), 0;
  if (errno != EEXIST) return -1;
  *taken = 1;
  size_t n = strlen(path);
  out_buf o = {path + n, cap - n, 0};
  put_str(&o, ".");
  put_u64(&o, (uint64_t)getpid());
  if (n + o.len + 1 >= cap) return path[n] = 0, errno = ENAMETOOLONG, -1;
  return rename(tmp, path);
}

int squall__stats_file_put(char *path, size_t cap, const char *json, size_t len, const char *suffix, int own,
                           const struct timespec *loaded, int *taken) {
  struct stat st;
  *taken = 0;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) { /* not a plain file (/dev/null): written as it is */
    int fd = open(path, O_WRONLY | O_TRUNC);
    if (fd < 0) return -1;
    int r = write_all(fd, json, len);
    return close(fd) != 0 || r != 0 ? -1 : 0;
  }
  char tmp[SQ_STATS_PATH_MAX + 48];
  if (temp_name(path, suffix, tmp, sizeof tmp) != 0) return errno = ENAMETOOLONG, -1;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0) return -1;
  int failed = write_all(fd, json, len) != 0;
  int saved = errno;
  if (close(fd) != 0 && !failed) failed = 1, saved = errno;
  if (!failed && place(tmp, path, cap, own, loaded, taken) != 0) failed = 1, saved = errno;
  if (failed) {
    unlink(tmp);
    errno = saved;
    return -1;
  }
  return 0;
}

/* ------------------------------------------------ SIGTERM, SIGINT */
static void on_signal(int sig) {
  int saved = errno;
  squall__stats_write_signal();
  errno = saved;
  /* Delivered here by the kernel, SA_RESETHAND left the default action:
   * raise it again, and the process ends by the signal. Called by a
   * handler the program installed later, the program decides: raising
   * would call that handler again, and it this one, without end. */
  struct sigaction cur;
  if (sigaction(sig, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) raise(sig);
}

void squall__stats_catch_signals(void) {
  static const int sigs[] = {SIGTERM, SIGINT};
  for (size_t i = 0; i < SQ_ARRAY_SIZE(sigs); i++) {
    struct sigaction old, sa;
    /* only where the program left the default (termination): its own
     * handler, or an ignored signal, is not squall's to change */
    if (sigaction(sigs[i], NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(sigs[i], &sa, NULL);
  }
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * xchg_seg.c - the shared-memory segment of one communicator of the
 * device-memory test NCCL: joining it, barriers with a time limit that
 * notice a dead peer, poisoning, and the control channel ncclCommSplit
 * uses. The segment starts zeroed (ftruncate), which is every field's
 * initial state, so no rank has to set it up first; rank 0 removes its
 * name once all ranks have it mapped, so nothing is left in /dev/shm.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "xchg_seg.h"
#include "../../nccl/fakenccl/link_env.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double dnx__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dnx__fmt(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

void dnx_make_name(char *name, size_t len) {
  static _Atomic unsigned counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(name, len, "/devnccl.%d.%u.%ld", (int)getpid(), ++counter, (long)(ts.tv_nsec ^ ts.tv_sec));
}

const char *dnx_name(const dnx_seg *s) { return s->name; }
int dnx_rank(const dnx_seg *s) { return s->rank; }
int dnx_nranks(const dnx_seg *s) { return s->nranks; }
size_t dnx__slot_offset(int rank) { return DNX_HDR_BYTES + (size_t)rank * DNX_SLOT_BYTES; }
void *dnx__slot(const dnx_seg *s, int rank) { return s->base + dnx__slot_offset(rank); }

static double timeout_s(void) {
  const char *v = getenv("FAKENCCL_TIMEOUT");
  double t = v && *v ? strtod(v, NULL) : 60.0;
  return t > 0 ? t : 60.0;
}

void dnx_abort(dnx_seg *s, const char *msg) {
  int idle = 0;
  if (atomic_compare_exchange_strong(&s->hdr->aborted, &idle, 2)) { /* 2: the message is being written */
    snprintf(s->hdr->abort_msg, sizeof s->hdr->abort_msg, "%s", msg);
    atomic_store(&s->hdr->aborted, 1);
  }
}

/* The first message of whoever poisoned the segment. */
static void abort_text(dnx_seg *s, char *err, size_t len) {
  double t0 = dnx__now();
  while (atomic_load(&s->hdr->aborted) == 2 && dnx__now() - t0 < 1) sched_yield();
  dnx__fmt(err, len, "communicator poisoned: %s", s->hdr->abort_msg);
}

/* Whether process pid is gone: no such process, or a zombie (a forked rank
 * its parent has not reaped yet). */
static int process_dead(int pid) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Marks this rank at target in ctr and waits until every rank is there. */
static int wait_all(dnx_seg *s, _Atomic uint64_t *ctr, uint64_t target, const char *what, char *err, size_t len) {
  atomic_store(&ctr[s->rank], target);
  double t0 = dnx__now(), limit = s->limit, next_look = t0 + 0.001;
  for (unsigned spins = 0;; spins++) {
    int missing = -1;
    for (int r = 0; r < s->nranks && missing < 0; r++)
      if (atomic_load(&ctr[r]) < target) missing = r;
    if (missing < 0) return DNX_OK;
    if (atomic_load(&s->hdr->aborted)) {
      abort_text(s, err, len);
      return DNX_EREMOTE;
    }
    if (spins < 200) {
      sched_yield();
      continue;
    }
    double t = dnx__now();
    if (t >= next_look) {
      int pid = atomic_load(&s->hdr->pid[missing]);
      char why[400] = "";
      if (process_dead(pid))
        snprintf(why, sizeof why, "rank %d (pid %d) exited while rank %d waited for it in %s", missing, pid, s->rank,
                 what);
      else if (t - t0 > limit)
        snprintf(why, sizeof why, "rank %d waited %.0f s for rank %d in %s and gave up (FAKENCCL_TIMEOUT=%g s)",
                 s->rank, t - t0, missing, what, limit);
      if (why[0]) {
        dnx__fmt(err, len, "%s", why);
        dnx_abort(s, why);
        return DNX_ESYS;
      }
      next_look = t + 0.01;
    }
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
}

int dnx__sync(dnx_seg *s, const char *what, char *err, size_t len) {
  if (atomic_load(&s->hdr->aborted)) {
    abort_text(s, err, len);
    return DNX_EREMOTE;
  }
  return wait_all(s, s->hdr->arrived, ++s->seq, what, err, len);
}

static int ctl_sync(dnx_seg *s, const char *what, char *err, size_t len) {
  return wait_all(s, s->hdr->ctl_arrived, ++s->ctl_seq, what, err, len);
}

int dnx_ctl_allgather(dnx_seg *s, int64_t a, int64_t b, int64_t (*all)[2], char *err, size_t len) {
  if (atomic_load(&s->hdr->aborted)) {
    abort_text(s, err, len);
    return DNX_EREMOTE;
  }
  s->hdr->ctl[s->rank][0] = a;
  s->hdr->ctl[s->rank][1] = b;
  int r = ctl_sync(s, "a control exchange (ncclCommSplit)", err, len);
  if (r == DNX_OK) memcpy(all, s->hdr->ctl, (size_t)s->nranks * sizeof all[0]);
  if (r == DNX_OK) r = ctl_sync(s, "a control exchange (ncclCommSplit)", err, len); /* before anyone writes again */
  return r;
}

/* Maps the segment, creating it zeroed where this rank is the first. The
 * pages this rank's slot will use are reserved now: a full /dev/shm is an
 * error here, not a SIGBUS in a stream callback later. */
static int map_segment(const char *name, dnx_seg *s, char *err, size_t len) {
  size_t size = DNX_HDR_BYTES + DNX_MAX_RANKS * DNX_SLOT_BYTES;
  int fd = shm_open(name, O_RDWR | O_CREAT, 0600), e = 0;
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || ((size_t)st.st_size < size && ftruncate(fd, (off_t)size) != 0))
    e = errno;
  else
    e = posix_fallocate(fd, (off_t)dnx__slot_offset(s->rank), (off_t)DNX_SLOT_BYTES);
  if (e) {
    dnx__fmt(err, len, "shared memory %s (/dev/shm): %s", name, strerror(e));
    if (fd >= 0) close(fd);
    return DNX_ESYS;
  }
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    dnx__fmt(err, len, "mmap of %zu bytes of %s: %s", size, name, strerror(errno));
    return DNX_ESYS;
  }
  s->base = p;
  s->size = size;
  s->hdr = p;
  return DNX_OK;
}

int dnx_join(const char *name, int nranks, int rank, dnx_seg **out, char *err, size_t len) {
  *out = NULL;
  if (nranks < 1 || nranks > DNX_MAX_RANKS || rank < 0 || rank >= nranks) {
    dnx__fmt(err, len, "rank %d of %d ranks (the device test NCCL takes 1..%d ranks, 0 <= rank < nranks)", rank,
             nranks, DNX_MAX_RANKS);
    return DNX_EINVAL;
  }
  if (name == NULL || name[0] != '/' || strlen(name) >= DNX_NAME_MAX) {
    dnx__fmt(err, len, "the communicator's name '%s' is not one dnx_make_name made", name ? name : "(null)");
    return DNX_EINVAL;
  }
  dnx_seg *s = calloc(1, sizeof *s);
  if (s == NULL) {
    dnx__fmt(err, len, "out of memory");
    return DNX_ESYS;
  }
  snprintf(s->name, sizeof s->name, "%s", name);
  s->rank = rank;
  s->nranks = nranks;
  s->limit = timeout_s(); /* read once: stream callbacks must not race a setenv */
  int r = map_segment(name, s, err, len);
  if (r != DNX_OK) {
    free(s);
    return r;
  }
  int zero = 0, pid = (int)getpid();
  char msg[256] = "";
  if (!atomic_compare_exchange_strong(&s->hdr->nranks, &zero, nranks) && zero != nranks)
    snprintf(msg, sizeof msg, "ranks disagree on the rank count: %d here (rank %d), %d elsewhere", nranks, rank, zero);
  zero = 0;
  if (!msg[0] && !atomic_compare_exchange_strong(&s->hdr->pid[rank], &zero, pid))
    snprintf(msg, sizeof msg, "rank %d was given to two callers (pids %d and %d)", rank, zero, pid);
  if (msg[0]) dnx_abort(s, msg); /* every rank fails, as NCCL's bootstrap would */
  r = ctl_sync(s, "joining the communicator", err, len);
  if (r == DNX_EREMOTE && msg[0]) r = DNX_EUSAGE;
  /* All have it mapped now; after a failure every rank removes it, for one
   * that comes late would make it anew and wait there alone. */
  if (rank == 0 || r != DNX_OK) shm_unlink(name);
  if (r != DNX_OK) {
    dnx_leave(s);
    return r;
  }
  *out = s;
  return DNX_OK;
}

void dnx_leave(dnx_seg *s) {
  if (s == NULL) return;
  munmap(s->base, s->size);
  free(s);
}

/* ------------------------------------------------------------ environment */
int dnx_fault_next(int rank, char *spec, size_t speclen) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static char armed[64];
  static long seen;
  const char *v = getenv("FAKENCCL_FAULT");
  if (v == NULL) v = "";
  pthread_mutex_lock(&lock);
  if (strncmp(v, armed, sizeof armed - 1) != 0) { /* a new setting: count from zero */
    snprintf(armed, sizeof armed, "%s", v);
    seen = 0;
  }
  snprintf(spec, speclen, "%s", armed);
  int corrupt = !strncmp(armed, "corrupt:", 8), fail = !strncmp(armed, "fail:", 5);
  const char *only = getenv("FAKENCCL_FAULT_RANK");
  int hit = (corrupt || fail) && !(only && *only && atoi(only) != rank) && ++seen == atol(strchr(armed, ':') + 1);
  pthread_mutex_unlock(&lock);
  return !hit ? DNX_FAULT_NONE : corrupt ? DNX_FAULT_CORRUPT
                                         : DNX_FAULT_FAIL;
}

int dnx_prepare(dnx_seg *s, dnx_op *op, char *err, size_t len) {
  int r = dnx_check_types(op, err, len);
  if (r != DNX_OK) return r;
  fakenccl_link link;
  if (fakenccl_link_read(&link, err, len) != 0) return DNX_EINVAL;
  op->ns_per_byte = link.ns_per_byte;
  op->ns_per_call = link.ns_per_call;
  if (op->kind != DNX_ALLREDUCE && op->kind != DNX_ALLGATHER) return DNX_OK;
  char spec[64];
  switch (dnx_fault_next(s->rank, spec, sizeof spec)) {
  case DNX_FAULT_CORRUPT: op->corrupt = 1; return DNX_OK;
  case DNX_FAULT_FAIL: dnx__fmt(err, len, "injected failure (FAKENCCL_FAULT=%s)", spec); return DNX_ESYS;
  default: return DNX_OK;
  }
}

/* SPDX-License-Identifier: BSD-3-Clause */
/* stats.c - the counters behind squallStatsGet() and SQUALL_STATS, and
 * when the file is written (stats_file.c writes it) and the summary said. */
#define _POSIX_C_SOURCE 200809L /* st_mtim, fdopen, CLOCK_REALTIME under -std=c11 */
#include "common/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/sized.h"
#include "common/stats.h"
#include "common/stats_path.h"

/* A new reason takes a slot of squallStats_t's fixed arrays; past their
 * capacity, the members after them would move (squall.h). */
_Static_assert(squallPassNumReasons <= SQUALL_PASS_REASONS_MAX, "raise SQUALL_PASS_REASONS_MAX: a new soname");
_Static_assert(squallFlatNumReasons <= SQUALL_FLAT_REASONS_MAX, "raise SQUALL_FLAT_REASONS_MAX: a new soname");
/* The first layout of libsquall.so.4, which every caller's struct has. */
#define STATS_FIRST SQ_FIRST_SIZE(squallStats_t, headers)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static squallStats_t process;
/* The process's bytes by what became of them, for the summary at exit
 * (not in squallStats_t: its layout is the ABI's) */
static uint64_t compressed_bytes, pass_bytes[squallPassNumReasons];
/* What names the SQUALL_STATS file (squall__stats_set_rank): */
static int stats_rank = -1, stats_size; /* the first communicator's rank and size */
static int stats_rank_unique;           /* stats_rank is the process's own (MPI_COMM_WORLD's) */
static pid_t writer;                    /* the process that armed the writer (0: none did) */
static struct timespec loaded;          /* when this process loaded squall, or forked (open_stats_file) */
/* The final write of the file: none yet, one under way (a signal in it
 * writes again), or done (nothing more is written). */
enum { NOT_WRITTEN, WRITING_FINAL, WRITTEN_FINAL };
static int written = NOT_WRITTEN;

__attribute__((constructor)) static void note_load_time(void) { clock_gettime(CLOCK_REALTIME, &loaded); }

double squall__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void add(squallStats_t *s, int reason, uint64_t in, uint64_t wire, double secs) {
  s->calls++;
  if (reason < 0) {
    s->compressedCalls++;
  } else {
    s->passthroughCalls++;
    s->passthrough[reason]++;
  }
  s->bytesIn += in;
  s->bytesWire += wire;
  s->codecSeconds += secs;
}

static void tick(void);

static void add_bytes(int reason, uint64_t in) {
  if (reason < 0) compressed_bytes += in;
  else if (reason < squallPassNumReasons) pass_bytes[reason] += in;
}

void squall__stats_record(squallStats_t *local, int reason, uint64_t in, uint64_t wire, double secs) {
  pthread_mutex_lock(&lock);
  add(&process, reason, in, wire, secs);
  add_bytes(reason, in);
  if (local) add(local, reason, in, wire, secs);
  pthread_mutex_unlock(&lock);
  tick();
}

static void add_path(squallStats_t *s, int path, int flat_reason, uint64_t inter, uint64_t intra) {
  if (path == 1) {
    s->flatCalls++;
    if (flat_reason >= 0 && flat_reason < squallFlatNumReasons) s->flat[flat_reason]++;
  } else if (path == 2) {
    s->twoLevelCalls++;
  }
  s->bytesInterNode += inter;
  s->bytesIntraNode += intra;
}

void squall__stats_record_path(squallStats_t *local, int path, int flat_reason, uint64_t inter,
                               uint64_t intra) {
  pthread_mutex_lock(&lock);
  add_path(&process, path, flat_reason, inter, intra);
  if (local) add_path(local, path, flat_reason, inter, intra);
  pthread_mutex_unlock(&lock);
}

void squall__stats_record_pass(squallStats_t *local, int reason, uint64_t in, uint64_t inter, uint64_t intra) {
  pthread_mutex_lock(&lock);
  add(&process, reason, in, inter + intra, 0.0);
  add_bytes(reason, in);
  add_path(&process, 0, -1, inter, intra);
  if (local) {
    add(local, reason, in, inter + intra, 0.0);
    add_path(local, 0, -1, inter, intra);
  }
  pthread_mutex_unlock(&lock);
  tick();
}

void squall__stats_record_header(squallStats_t *local) {
  pthread_mutex_lock(&lock);
  process.headers++;
  if (local) local->headers++;
  pthread_mutex_unlock(&lock);
}

void squall__stats_record_chunks(squallStats_t *local, uint64_t chunks) {
  if (chunks < 2) return;
  pthread_mutex_lock(&lock);
  process.pipelinedCalls++;
  process.pipelineChunks += chunks;
  if (local) {
    local->pipelinedCalls++;
    local->pipelineChunks += chunks;
  }
  pthread_mutex_unlock(&lock);
}

const char *squallFlatReasonName(squallFlatReason_t reason) {
  switch (reason) {
#define SQUALL_FLAT_CASE(name, key, doc) \
  case name:                             \
    return key;
    SQUALL_FLAT_REASON_TABLE(SQUALL_FLAT_CASE)
#undef SQUALL_FLAT_CASE
  default:
    return "unknown";
  }
}

squallResult_t squall__stats_out(squallStats_t *caller, const squallStats_t *mine, const char *who) {
  SQ_RETURN_ERROR_IF(caller == NULL, squallInvalidArgument, "%s: stats is NULL", who);
  squall_head h = squall__head(caller, SQUALL_STATS_MAGIC, STATS_FIRST);
  SQ_RETURN_ERROR_IF(!squall__head_ok(h, STATS_FIRST), squallInvalidArgument,
                     "%s: stats->size is %zu, below the %zu bytes of every squallStats_t since "
                     "libsquall.so.4 (initialize it with SQUALL_STATS_INITIALIZER)",
                     who, h.size, (size_t)STATS_FIRST);
  squallStats_t s = *mine;
  memcpy(&s, &h, sizeof h); /* the caller's head, as it was */
  memcpy(caller, &s, squall__head_bytes(h, sizeof s));
  return squallSuccess;
}

squallResult_t squallStatsGet(squallStats_t *stats) {
  pthread_mutex_lock(&lock);
  squallStats_t s = process;
  pthread_mutex_unlock(&lock);
  return squall__stats_out(stats, &s, "squallStatsGet");
}

void squallStatsReset(void) {
  pthread_mutex_lock(&lock);
  memset(&process, 0, sizeof process);
  pthread_mutex_unlock(&lock);
}

/* The process's rank as its launcher gave it, or -1: torchrun's RANK
 * (it sets RANK and WORLD_SIZE for each process it starts, over what its
 * own launcher gave it), Open MPI's, PMI's (MPICH), Slurm's. Only where
 * the launcher's world is at least as large as the first communicator
 * (comm_size; 0: none known): processes that the application started
 * itself, after its launcher (mp.spawn inside one Slurm task, workers of
 * one MPI process per node), share its variables, and their communicator
 * is larger than that world. */
static int launcher_rank(int comm_size) {
  static const char *const names[][2] = {{"RANK", "WORLD_SIZE"},
                                         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                         {"PMI_RANK", "PMI_SIZE"},
                                         {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *rv = getenv(names[i][0]), *sv = getenv(names[i][1]);
    if (rv == NULL || sv == NULL) continue;
    char *re, *se;
    errno = 0;
    long r = strtol(rv, &re, 10), n = strtol(sv, &se, 10);
    if (re == rv || *re || se == sv || *se || errno || r < 0 || n <= r || n > 0x7fffffff) continue;
    return n >= comm_size ? (int)r : -1;
  }
  return -1;
}

/* The rank this process's file and summary speak for. Caller holds lock. */
static int process_rank(void) {
  int rank = stats_rank_unique ? stats_rank : launcher_rank(stats_size);
  return rank >= 0 ? rank : stats_rank < 0 ? 0
                                           : stats_rank;
}

/* The file this process writes once it has written it (own_path), and
 * the one the signal handler would write before that (sig_path[sig_cur],
 * published whole by an atomic index: the handler takes no lock). */
static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;
static char own_path[SQ_STATS_PATH_MAX], sig_path[2][SQ_STATS_PATH_MAX];
static int own, sig_cur = -1, sig_rank, said_failure;

/* final: the write at exit (or MPI_Finalize), after which none follows. */
static void write_stats(int final) {
  squallConfig_t cfg;
  squall__config_get(&cfg, NULL);
  pthread_mutex_lock(&lock);
  /* a forked child that never used squall itself exits with the parent's
   * counters: they are the parent's to write */
  if (written || !cfg.statsPath[0] || (writer != 0 && writer != getpid())) {
    pthread_mutex_unlock(&lock);
    return;
  }
  if (final) __atomic_store_n(&written, WRITING_FINAL, __ATOMIC_RELAXED);
  squallStats_t s = process;
  int rank = process_rank();
  struct timespec since = loaded;
  pthread_mutex_unlock(&lock);
  pthread_mutex_lock(&file_lock);
  char path[SQ_STATS_PATH_MAX], json[4096];
  if (!final && __atomic_load_n(&written, __ATOMIC_RELAXED)) { /* the final write came first */
  } else if (!own && squall__stats_path(cfg.statsPath, rank, path, sizeof path) != 0) {
    SQ_WARN("SQUALL_STATS: '%s' with the rank in place of %%r is longer than %zu bytes: not written",
            cfg.statsPath, sizeof path - 1);
  } else {
    if (own) memcpy(path, own_path, sizeof path);
    size_t n = squall__stats_format(json, sizeof json, &s, rank);
    int taken;
    /* nobody can act on a failure at exit: say why (once), so that the next run can */
    if (squall__stats_file_put(path, sizeof path, json, n, ".tmp.", own, &since, &taken) != 0) {
      if (final || !said_failure) SQ_WARN("SQUALL_STATS: cannot write '%s': %s", path, strerror(errno));
      said_failure = 1;
    } else {
      if (taken)
        SQ_WARN("SQUALL_STATS: the file was written by another process of this run (the same rank in the file "
                "name): this one's counters go to '%s'",
                path);
      memcpy(own_path, path, sizeof path);
      __atomic_store_n(&own, 1, __ATOMIC_RELEASE);
    }
  }
  if (final) __atomic_store_n(&written, WRITTEN_FINAL, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&file_lock);
}

void squall__stats_write_file(void) { write_stats(1); }

/* Async-signal-safe: no lock, no stdio. The counters are read as they
 * are: a call being counted in this thread may be half in them. */
void squall__stats_write_signal(void) {
  int cur = __atomic_load_n(&sig_cur, __ATOMIC_ACQUIRE);
  /* a final write under way when the signal came may never end: write
   * again, through a temporary file of the handler's own (".sig.") */
  if (cur < 0 || writer != getpid() || __atomic_exchange_n(&written, WRITTEN_FINAL, __ATOMIC_ACQ_REL) == WRITTEN_FINAL)
    return;
  squallStats_t s = process;
  char path[SQ_STATS_PATH_MAX], json[4096];
  int mine = __atomic_load_n(&own, __ATOMIC_ACQUIRE), taken;
  memcpy(path, mine ? own_path : sig_path[cur], sizeof path);
  size_t n = squall__stats_format(json, sizeof json, &s, sig_rank);
  (void)squall__stats_file_put(path, sizeof path, json, n, ".sig.", mine, &loaded, &taken);
}

/* Where the signal handler would write, for the rank as now known. */
static void publish_signal_path(const squallConfig_t *cfg) {
  pthread_mutex_lock(&lock);
  int rank = process_rank();
  pthread_mutex_unlock(&lock);
  int next = __atomic_load_n(&sig_cur, __ATOMIC_RELAXED) == 0 ? 1 : 0;
  if (!cfg->statsPath[0] || squall__stats_path(cfg->statsPath, rank, sig_path[next], SQ_STATS_PATH_MAX) != 0)
    return;
  sig_rank = rank;
  __atomic_store_n(&sig_cur, next, __ATOMIC_RELEASE);
}

/* What to do about each reason a call squall could compress passed
 * through (the summary at exit). */
static const char *fix_for(int reason) {
  switch (reason) {
  case squallPassDisabled: return "compression is off: set SQUALL_COMPRESS (squall-run --compress fp16)";
  case squallPassSmall: return "smaller than SQUALL_MIN_BYTES: lower it";
  case squallPassSingleRank: return "fewer ranks than SQUALL_MIN_RANKS";
  case squallPassInGroup:
    return "in a ncclGroupStart/End group that also holds other calls, several communicators or a non-blocking "
           "one: group the all-reduces alone (squall(7), GROUPS)";
  case squallPassMismatch: return "the ranks' configurations differ: give every rank the same SQUALL_* variables";
  case squallPassWarmup: return "SQUALL_WARMUP's dense steps";
  case squallPassCapture: return "captured in a CUDA graph before squall's memory was ready: run a step first";
  case squallPassNonblocking: return "a non-blocking NCCL communicator";
  case squallPassError: return "a rank could not prepare the call (see the warnings above)";
  case squallPassNotPaying:
    return "the cost model found plain faster (one node, or a fast link): SQUALL_COST_MODEL=off compresses anyway";
  case squallPassDeviceMemory: return "device buffers on the MPI path: use the NCCL interposer (squall-run --nccl)";
  case squallPassCollectiveOff:
    return "an interposed collective that SQUALL_COLLECTIVES leaves out: add it "
           "(SQUALL_COLLECTIVES=allreduce,reducescatter)";
  case squallPassUnevenCounts:
    return "MPI_Reduce_scatter with unequal recvcounts: squall compresses equal ones only (pad the shards to one "
           "size, or call MPI_Reduce_scatter_block)";
  default: return NULL; /* type, op, intercommunicator: never squall's to compress */
  }
}

/* Never a silent no-op: rank 0 says at exit (and, "so far", every
 * SQUALL_SUMMARY_INTERVAL seconds), in one line, when less than half of
 * the bytes squall could have compressed were, and why. Those are the
 * bytes of calls of a type and op squall compresses, on an
 * intracommunicator: every reason but those fix_for has no fix for. */
static void say_summary(int rank, int so_far) {
  pthread_mutex_lock(&lock);
  uint64_t done = compressed_bytes, eligible = compressed_bytes, bytes[squallPassNumReasons];
  memcpy(bytes, pass_bytes, sizeof bytes);
  pthread_mutex_unlock(&lock);
  for (int r = 0; r < squallPassNumReasons; r++)
    if (fix_for(r)) eligible += bytes[r];
  if (rank != 0 || eligible == 0 || 2 * done >= eligible) return;
  char why[1024] = "";
  size_t used = 0;
  int top = -1;
  for (int k = 0; k < 3; k++) { /* the three largest reasons */
    int best = -1;
    for (int r = 0; r < squallPassNumReasons; r++)
      if (fix_for(r) && bytes[r] > 0 && (best < 0 || bytes[r] > bytes[best])) best = r;
    if (best < 0) break;
    if (k == 0) top = best;
    int w = snprintf(why + used, sizeof why - used, "%s%.0f%% %s (%s)", k ? "; " : "",
                     100.0 * (double)bytes[best] / (double)eligible, squallPassReasonName((squallPassReason_t)best),
                     fix_for(best));
    if (w < 0 || (size_t)w >= sizeof why - used) break;
    used += (size_t)w;
    bytes[best] = 0;
  }
  /* during the run, only when the share compressed (in whole percents)
   * or the largest reason changed since the line last said: a job that
   * passes through by design (one node) is told once, not every interval */
  static int said_percent = -1, said_top = -1;
  int percent = (int)(100.0 * (double)done / (double)eligible);
  if (so_far && percent == said_percent && top == said_top) return;
  said_percent = percent;
  said_top = top;
  SQ_WARN("rank 0 %scompressed %.0f%% of the %llu bytes squall could have compressed%s; the rest passed through: %s",
          so_far ? "has " : "", 100.0 * (double)done / (double)eligible, (unsigned long long)eligible,
          so_far ? " so far" : "", why);
}

static void at_exit(void) {
  squall__stats_write_file();
  pthread_mutex_lock(&lock);
  int mine = writer == getpid(); /* not a forked child's copy of the parent's counters */
  int rank = process_rank();
  pthread_mutex_unlock(&lock);
  if (mine) say_summary(rank, 0);
}

/* ------------------------------------------------ during the run
 * Checked on the call path (no thread of squall's own): one clock read
 * and two atomic loads per call until the earlier interval is due. */
static int64_t next_due_ms;              /* 0: at the next call */
static uint64_t tick_generation;         /* the configuration's, when next_due_ms was set */
static double last_write_s, last_said_s; /* monotonic */
static pthread_mutex_t tick_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor)) static void note_start(void) { last_write_s = last_said_s = squall__now(); }

static void tick(void) {
  double now = squall__now();
  uint64_t gen = squall__config_generation();
  if ((int64_t)(now * 1e3) < __atomic_load_n(&next_due_ms, __ATOMIC_RELAXED) &&
      gen == __atomic_load_n(&tick_generation, __ATOMIC_RELAXED))
    return;
  if (pthread_mutex_trylock(&tick_lock) != 0) return; /* another thread is at it */
  squallConfig_t cfg;
  squall__config_get(&cfg, NULL);
  double due = 1e300;
  if (cfg.statsInterval > 0 && cfg.statsPath[0]) {
    if (now >= last_write_s + cfg.statsInterval) {
      last_write_s = now;
      write_stats(0);
    }
    due = last_write_s + cfg.statsInterval;
  }
  if (cfg.summaryInterval > 0) {
    if (now >= last_said_s + cfg.summaryInterval) {
      last_said_s = now;
      pthread_mutex_lock(&lock);
      int mine = writer == getpid(), rank = process_rank();
      pthread_mutex_unlock(&lock);
      if (mine) say_summary(rank, 1);
    }
    if (last_said_s + cfg.summaryInterval < due) due = last_said_s + cfg.summaryInterval;
  }
  __atomic_store_n(&tick_generation, gen, __ATOMIC_RELAXED);
  __atomic_store_n(&next_due_ms, due > 9e15 ? INT64_MAX : (int64_t)(due * 1e3), __ATOMIC_RELAXED);
  pthread_mutex_unlock(&tick_lock);
}

void squall__stats_set_rank(int rank, int size, int unique) {
  squallConfig_t cfg;
  squall__config_get(&cfg, NULL);
  pthread_mutex_lock(&lock);
  pid_t me = getpid();
  if (writer != 0 && writer != me) {
    /* a forked child that uses squall: its own counters and file from
     * here on (the at-exit writer came with the fork) */
    memset(&process, 0, sizeof process);
    stats_rank = -1;
    stats_size = 0;
    stats_rank_unique = 0;
    written = NOT_WRITTEN;
    own = 0;
    clock_gettime(CLOCK_REALTIME, &loaded);
    writer = me;
  }
  if (unique && !stats_rank_unique) {
    stats_rank = rank;
    stats_rank_unique = 1;
  } else if (stats_rank < 0) {
    stats_rank = rank;
    stats_size = size;
  }
  int arm = writer == 0;
  if (arm) writer = me;
  pthread_mutex_unlock(&lock);
  publish_signal_path(&cfg);
  if (arm) {
    atexit(at_exit);
    if (cfg.statsPath[0]) squall__stats_catch_signals();
  }
}

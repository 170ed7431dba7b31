/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * plan.h - the engine's insides, shared by its files: the engine itself,
 * the plan one call runs (decided once, from the call and one snapshot of
 * the configuration), and the table of routes.
 *
 *   engine.c        the driver: plan, prepare, agree, confirm, run, record
 *   plan.c          decide(): the route, variant and layout of a call
 *   prepare.c       scratch, residual and its guard, before anything collective
 *   header.c        the call header: what every rank must agree on
 *   costing.c       the cost model's part of a call: votes, variants, learning
 *   costing_device.c  the same where a header costs a synchronisation: the schedule
 *   fold.c          a pass-through that carries its tensor's residual
 *   record.c        statistics and SQUALL_DEBUG=INFO path lines
 *   route_half.c    16-bit all-reduce
 *   route_topk.c    top-k all-gather, and its dense fallback
 *   route_topk_scatter.c  top-k reduce-scatter: a slot per owner, all-to-all
 *   route_twophase.c  exchange, fp32 sum of the own shard, all-gather
 *   route_twolevel.c  dense inside the node, one of the above across nodes
 *
 * Adding a codec or a collective: one route file and one row in
 * squall__routes (plan.c).
 */
#ifndef SQUALL_ENGINE_PLAN_H
#define SQUALL_ENGINE_PLAN_H

#include "engine/costing_device.h"
#include "engine/costmodel.h"
#include "engine/engine.h"
#include "engine/graph_memory.h"
#include "engine/hierarchy.h"
#include "engine/residual.h"
#include "engine/twophase.h"

/* Larger counts cannot be laid out (count * sizeof(float) and the top-k
 * indices must not overflow): refused before anything collective. */
#define SQ_MAX_COUNT (SIZE_MAX / 16)

/* The residual kind's bit for a reduce-scatter's tensor (residual.h): a
 * buffer all-reduced and reduce-scattered with one count keeps a residual
 * for each, whose elements mean different things (squall__kind_of). */
#define SQ_KIND_SCATTER ((uint64_t)0x80)

struct squall_engine {
  squall_transport tr;
  squall_kernels k;
  squall_residuals *residuals;
  int header_every_call;     /* host memory: the header costs no synchronisation */
  int agreed_nonblocking;    /* the last header: some rank's communicator is non-blocking */
  uint64_t agreed_gen;       /* configuration generation of the last header */
  squallConfig_t agreed_cfg; /* the configuration it agreed on (agreed_ok) */
  /* squall__engine_set_config: the engine's own configuration, and how
   * many times it was set (its generation) */
  squallConfig_t own_cfg;
  uint64_t own_gen;
  int agreed_valid, agreed_ok;
  uint64_t warned_gen; /* disagreement logged for this generation */
  int warned_valid;
  void *scratch; /* kernel memory, grown on demand, kept for the next call */
  size_t scratch_bytes;
  squall_graph_memory graphs; /* scratch replaced after a capture: kept for the graphs */
  size_t scratch_planned;     /* the largest layout any header covered: the same
                             on every rank, unlike scratch_bytes after a
                             failed allocation */
  void *host;                 /* host memory for the lossless stage */
  size_t host_bytes;
  void *last_stream; /* for squallResetResiduals, which has no stream of its own */
  /* the end of the last compressed call's work (kernels.h, fence_record),
   * and its stream: a call on another stream waits for it */
  void *fence, *fence_stream;
  squallStats_t stats;
  squall_hier *hier; /* two-level all-reduce: nodes, node communicators, inner engine */
  /* a shard call's residual and its backup, kept until the next call so
   * that the outer two-level call can undo it when a later step fails */
  float *undo_res, *undo_backup;
  size_t undo_n;
  squall_cost cost;          /* SQUALL_COST_MODEL: this rank's link and codec figures */
  squall_cost cost_scatter;  /* the same of reduce-scatters, whose plain call and wire differ (costing.c) */
  squall_devcost dev;        /* its schedule on device memory (costing_device.h) */
  squall_tensor *shard_slot; /* the slot squall__engine_prepare_shard looked up for the next shard call */
  float *fold_buf;           /* g + residual for a plain call that is not in place (fold.c) */
  size_t fold_bytes;
  int said_one_node; /* say_one_node() ran */
  int said_changes;  /* ranks' squallSetConfig counts differed: said once */
  /* SQUALL_DEBUG=INFO: each size class's last path (record.c), 0: none yet */
  uint8_t last_path[64];
};

/* ------------------------------------------------------------- the plan */

/* Offsets of everything a call needs in the scratch, computed once per
 * call from the route; `total` bytes in all. */
typedef struct {
  size_t k, sb;   /* top-k: entries per rank, slot bytes */
  size_t scalars; /* [0] absmax, [1] scale, [2] decode error flag (int), [3] this rank's absmax */
  size_t work;    /* count floats: widened input / fp32 result */
  size_t absmax_ws;
  size_t backup;               /* count floats: the residual before the call */
  int has_backup;              /* room for a backup is reserved (residual_guard() decides its use) */
  size_t mine, slots, topk_ws; /* top-k */
  size_t rounds;               /* top-k's exchange in rounds (topk_rounds.h); 1: one exchange */
  size_t codes;                /* 16-bit */
  size_t twophase;             /* two-phase: its own scratch */
  squall_twophase_codec tp;
  size_t total;
} scratch_layout;

/* Where decide() stopped for a pass-through: confirm() applies the
 * header's facts in decide()'s order around it. */
typedef enum {
  SQ_STAGE_NONE = 0,  /* not a pass-through, or one for the call alone */
  SQ_STAGE_AGREEMENT, /* non-blocking, foreign memory, disagreeing ranks */
  SQ_STAGE_CONFIG,    /* fewer ranks than SQUALL_MIN_RANKS, compression off, below SQUALL_MIN_BYTES */
  SQ_STAGE_READY,     /* a rank could not prepare, or the warm-up */
  SQ_STAGE_PAYS,      /* the cost model, or one node on device memory */
  SQ_STAGE_ROUTE      /* the codec has no route here */
} squall_stage;

/* What the header tells every rank (before it: this rank's own view, as
 * if every rank agreed and prepared). */
typedef struct {
  int agreed;              /* every rank holds the same configuration */
  int all_ok;              /* every rank prepared what the call needs */
  int foreign;             /* some rank's buffers are not the kernels' memory */
  int nonblocking;         /* some rank's communicator is non-blocking */
  int pays;                /* the cost model's verdict (1 where it does not run) */
  squall_residuals *count; /* counts the call for warm-up; NULL: do not count */
} squall_agreement;

/* Who keeps the residual's way back, decided once per call (prepare.c,
 * residual_guard), read by the routes. */
typedef enum {
  SQ_GUARD_NONE = 0, /* no residual */
  SQ_GUARD_SPARE,    /* top-k writes the next residual beside the old one, swapped in on success */
  SQ_GUARD_COPY,     /* a pass of its own copies it before the route runs */
  SQ_GUARD_FUSED,    /* the route's encoder copies it as it reads it */
  SQ_GUARD_IN_PLACE, /* failures end the process: updated in place, nothing kept */
  SQ_GUARD_LATE      /* top-k: read only, written after the last step that can fail */
} squall_guard;

typedef struct squall_route_ops squall_route_ops;

/* The cost model's part of the call header. */
typedef struct {
  int forced;                /* compress whatever the times say: no figures yet, exploring,
                                or the model does not run */
  int explored;              /* forced by squall__cost_explore (the same on every rank) */
  int64_t comp_ns, plain_ns; /* predicted times (after the header: the largest over ranks) */
  /* variants of the call (SQ_VARIANT_*): whole-call times of each at this
   * size, SQ_NS_UNKNOWN where this rank has none or the variant does not
   * apply; after the header, the largest over the ranks */
  int64_t variant_ns[SQ_COST_VARIANTS];
  int model_pays; /* after the header: the model's own verdict, before a plain probe */
  int probing;    /* after the header: a plain probe (the same on every rank) */
} squall_cost_verdict;

#define SQ_NS_UNKNOWN (INT64_MAX / 2) /* above any squall__to_ns() */

/* One call's plan: made once by decide() from the call and one snapshot
 * of the configuration; the header confirms it or replaces it by a
 * pass-through, and the call runs it. */
typedef struct {
  squallConfig_t cfg; /* the snapshot, as the header agrees it */
  squallConfig_t rc;  /* what the call runs with: cfg, less the lossless stage in the raw variant */
  uint64_t gen;       /* its generation */
  squall_route route; /* before the header: this rank's own view */
  squallPassReason_t reason;
  squall_stage stage;
  const squall_route_ops *ops; /* NULL for a pass-through */
  int nranks;
  int two_level;     /* squall__hier_known(): -1 nodes not found yet, 0 flat, 1 two levels */
  int one_node;      /* device_on_one_node() */
  unsigned variants; /* the variants the cost model chooses between (SQ_VARIANT_*) */
  int variant;       /* the one this call runs */
  int headed;        /* the call exchanges a header */
  /* the device schedule (costing_device.c): it decides this call, passes
   * it through, wants its header; the compressed call's cost kind (-1:
   * none) */
  int dev, dev_plain, dev_header, dev_kind;
  int grow;          /* its memory grows beyond what every rank planned for */
  int grow_hier;     /* two levels: the hierarchy's memory grows (new memory: not timed) */
  scratch_layout L;
} squall_plan;

/* What one compressed call works with, all carved before the header. */
typedef struct {
  squall_tensor *slot;
  const float *g; /* the gradient in fp32 */
  float *work;    /* count floats */
  float *res;     /* residual or NULL */
  float *backup;  /* copy of res taken before it changes */
  float *spare;   /* top-k: where the encoder writes the next residual, swapped in on success */
  squall_guard guard;
  int backed_up; /* backup holds all of res as it was */
  float *scalars;
  void *absmax_ws, *mine, *slots, *topk_ws;
  uint16_t *codes;
  void *twophase;
  double codec_s;
  uint64_t wire;
  int flat_reason;          /* squallFlatReason_t of a flat compressed call */
  int fresh;                /* squall__prepare() allocated: this call's times are not typical */
  double t_start;           /* when the call entered the engine */
  squall_hier_figures hier; /* a two-level call's bytes and time */
  uint64_t chunks;          /* a shard call's chunks (call_chunks), for its outer call */
} run_state;

/* A route: what it needs and how it runs. */
struct squall_route_ops {
  const char *name; /* in SQUALL_DEBUG=INFO lines */
  /* its pieces of the scratch after the common ones, from *off on */
  void (*layout)(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, scratch_layout *L,
                 size_t *off);
  /* its memory beyond the scratch, before anything collective */
  squallResult_t (*prepare)(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st);
  /* its pieces carved out of the scratch: 0, or 1 where one overruns it */
  int (*carve)(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st);
  squallResult_t (*run)(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st);
  /* what the cost model weighs: 1 and *cc filled, or 0 where it weighs nothing */
  int (*cost)(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg, const scratch_layout *L,
              squall_cost_call *cc);
};

extern const squall_route_ops squall__route_half, squall__route_topk, squall__route_dense,
    squall__route_twophase, squall__route_twolevel, squall__route_topk_scatter;

/* plan.c */
int squall__call_pass_reason(const squall_call *c, squallPassReason_t *why);

/* 1 where an interposed call's collective is not in the configuration's
 * SQUALL_COLLECTIVES (reason collective_off): a configuration reason,
 * decided where the others are, on the configuration the ranks agreed. */
int squall__collective_off(const squall_call *c, const squallConfig_t *cfg);
void squall__plan_make(squall_engine *e, const squall_call *c, const squallConfig_t *cfg, uint64_t gen,
                       squall_plan *plan);
void squall__plan_confirm(squall_plan *plan, const squall_call *c, const squall_agreement *ag);
void squall__plan_layout(const squall_engine *e, const squall_call *c, squall_plan *plan);
squall_route squall__plan_flat_route(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg);
int squall__device_on_one_node(const squall_engine *e, const squallConfig_t *cfg, const squall_call *c);
uint64_t squall__residual_kind(int dtype, size_t whole);
uint64_t squall__kind_of(const squall_call *c);
squall_tensor_key squall__hint_of(const squall_call *c);
uint64_t squall__engine_generation(const squall_engine *e);
int squall__use_lossless(const squall_engine *e, const squallConfig_t *cfg);
const char *squall__route_name(squall_route r);
/* The table of routes: a route's row, or NULL for a pass-through. */
const squall_route_ops *squall__route_ops(squall_route r);

/* prepare.c */
squallResult_t squall__prepare(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st);
squallResult_t squall__host_reserve(squall_engine *e, size_t bytes);
void *squall__carve(const squall_engine *e, size_t off, size_t bytes);
int squall__capture_ready(squall_engine *e, const squall_call *c, const squall_plan *plan);

/* run: engine.c */
squallResult_t squall__run(squall_engine *e, const squall_call *c, const squall_plan *plan, run_state *st);
squallResult_t squall__finish(squall_engine *e, const squall_call *c, float *out);
float *squall__fp32_out(const squall_call *c, run_state *st);

/* header.c */
squallResult_t squall__header(squall_engine *e, const squall_call *c, const squall_plan *plan, int ok,
                              squall_agreement *ag, squall_cost_verdict *v);

/* costing.c */
squall_cost *squall__cost_of(squall_engine *e, const squall_call *c);
int squall__model_runs(const squall_engine *e, const squallConfig_t *cfg, const squall_call *c);
int squall__cost_kind(const squallConfig_t *cfg, squall_route route);
void squall__cost_vote(squall_engine *e, const squall_call *c, const squall_plan *plan, squall_cost_verdict *v);
unsigned squall__variants_allowed(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                                  int two_level);
int squall__settled_plain(const squall_engine *e, const squall_call *c, uint64_t bytes_in);
int squall__cost_agree(squall_engine *e, const squall_call *c, const squall_plan *plan, squall_cost_verdict *v);
/* agreed: every rank held the same configuration (the header's) */
void squall__cost_after(squall_engine *e, const squall_call *c, const squall_plan *plan,
                        const squall_cost_verdict *v, int agreed);
uint64_t squall__call_chunks(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                             squall_route route, const scratch_layout *L);
void squall__cost_learn(squall_engine *e, const squall_call *c, const squall_plan *plan, const run_state *st,
                        double seconds);

/* costing_device.c */
void squall__devcost_init(squall_devcost *d, const squall_kernels *k);
void squall__devcost_free(squall_devcost *d, const squall_kernels *k);
void squall__devcost_plan(const squall_engine *e, const squall_call *c, const squallConfig_t *cfg,
                          squall_plan *plan);
/* A scheduled call, counted (after the plan, on every rank alike), and
 * the readings that are ready taken. */
void squall__devcost_count(squall_engine *e, const squall_call *c, const squall_plan *plan);
void squall__devcost_vote(squall_engine *e, const squall_call *c, const squall_plan *plan, squall_cost_verdict *v);
int squall__devcost_agree(squall_engine *e, const squall_call *c, const squall_plan *plan, const squall_agreement *ag,
                          squall_cost_verdict *v);
/* A scheduled call's timing: started on its stream (plain: kind -1) where
 * a slot is free (0: untimed, else a handle), stopped after its work was
 * enqueued (ok 0: dropped; fresh: ran on new memory, not timed). */
int squall__devcost_start(squall_engine *e, const squall_call *c, const squall_plan *plan, int kind);
void squall__devcost_stop(squall_engine *e, int timing, void *stream, int ok, int fresh);

/* fold.c */
int squall__can_fold(const squall_engine *e, const squall_call *c);
int squall__folds_for(squallPassReason_t why);
void squall__fold_into_plain(squall_engine *e, const squall_call *c, float *work, squall_tensor *slot,
                             squall_decision *d);
void squall__fold_done(squall_engine *e, const squall_decision *d);

/* record.c */
void squall__record(squall_engine *e, const squall_call *c, const squall_decision *d, squallResult_t r,
                    const run_state *st);
void squall__say_one_node(squall_engine *e);

#endif

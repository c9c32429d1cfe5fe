// tune.h — the offline tuner: enumerate the strategy space of one (model, cluster, sequence length,
// pattern), prune the points that cannot fit in memory or cannot beat the best found so far, simulate
// the rest (split over cooperating processes, e.g. MPI ranks, with the same answer for any count),
// rank them, and re-check the leaders on patterns perturbed step to step before choosing.
//
// The search is generic over an evaluator (bounds + simulation of a point) so its pruning and
// ranking can be tested against exhaustive search with a cost function of the test's own;
// tune_sim.c provides the evaluator backed by the planner and the simulator (sim.h).
//
// Determinism for any process count: points are taken in order of their lower bound (ties by
// index) in batches of a fixed size; a batch's pruning uses only the best of earlier batches, and a
// batch's points are dealt round-robin to processes whose results are all-gathered. So which points
// are simulated, and every number of the result, depend only on the inputs, never on the count.
#ifndef SR_TUNE_H
#define SR_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "plan/cluster.h"
#include "plan/error.h"
#include "plan/layout.h"
#include "plan/model.h"
#include "plan/pattern.h"
#include "plan/plan.h"
#include "plan/schedule.h"

// ---------------------------------------------------------------------------------------------
// the search space

// One point of the space: the plan options the tuner varies.
typedef struct {
  layout_kind layout;
  int64_t granularity;     // striped G (1 for the other layouts)
  schedule_kind schedule;
  int inner;               // double-ring inner ring size (0 for the other schedules)
  int ulysses;             // USP Ulysses degree (0: the schedule's default, i.e. all GPUs for ulysses)
  int64_t fpdt_chunk;      // FPDT chunk in tokens (0: not FPDT)
  int fpdt_offload;        // FPDT host offload
  int recompute;           // per-layer activation recomputation
  int zero;                // ZeRO-1 optimizer sharding
  int kv_bytes;            // bytes per KV element on the wire (2 bf16, 1 fp8)
  int skip_empty_sends;    // skip KV sends no query of the receiver needs
} tune_point;

typedef struct {
  tune_point *pt;
  int n, cap;
} tune_space;

// Append a point; returns SR_OK or an internal error (out of memory).
int tune_space_add(tune_space *s, const tune_point *p, sr_error *e);
// Release a space.
void tune_space_free(tune_space *s);
// The full space for this model, cluster and sequence length (tune.md lists the values and why):
// layouts contiguous, zigzag, striped G = 64, 128, ... while each rank keeps >= 4 stripes; ring,
// double ring (inner = every divisor of GPUs per node below the world size), Ulysses (all GPUs),
// USP (every Ulysses degree 1 < U < W dividing W), FPDT (Ulysses over chunks, offload on/off);
// recomputation, ZeRO-1, KV precision (bf16, fp8), and skipped empty sends (ring kinds) on/off.
// Points the planner would reject are kept: the search reports them as invalid with the reason.
int tune_space_full(const model_config *m, const cluster_desc *c, int64_t seq, tune_space *out, sr_error *e);
// Fill a plan spec's strategy fields from a point (model, cluster, seq, pattern, seed are left alone).
void tune_point_apply(const tune_point *p, plan_spec *s);
// Short human label of a point ("striped:128 double-ring/4 rc zero bf16 skip").
void tune_point_label(const tune_point *p, char *buf, size_t size);
// What separates point b from point a, as "field=value" items of b ("G=256, inner=4"); "-" when equal.
void tune_point_diff(const tune_point *a, const tune_point *b, char *buf, size_t size);

// ---------------------------------------------------------------------------------------------
// evaluation

typedef enum {
  TUNE_UNSEEN = 0,      // not reached (only while searching)
  TUNE_INVALID,         // the planner rejects the point (reason in note)
  TUNE_PRUNED_MEMORY,   // its memory lower bound exceeds the GPU (or host) memory: cannot fit
  TUNE_PRUNED_BOUND,    // its step-time lower bound exceeds the best step found before it: cannot win
  TUNE_SIMULATED,       // simulated, fits in memory
  TUNE_OOM,             // simulated, does not fit in memory
} tune_status;

// Name of a status ("simulated", "pruned-memory", ...).
const char *tune_status_name(int status);

// What is known about one point. Plain data of fixed size, so processes can exchange it as bytes.
typedef struct {
  int32_t index;           // point index in the space (-1: padding in an exchange)
  int32_t status;          // tune_status
  int32_t err;             // SR_OK, or the error an evaluator returned (message in note): ends the search
  int32_t fits;            // bound: 0 when even the memory lower bound does not fit; simulate: the verdict
  double lb_step_s;        // lower bound of the step time (seconds)
  double lb_mem_bytes;     // lower bound of per-GPU memory (bytes)
  double step_s;           // simulated step time
  double mem_bytes;        // simulated peak memory per GPU
  double mem_capacity;     // GPU memory (bytes)
  double worker_imbalance, step_imbalance, exposed_comm_s, comm_bytes;
  char note[256];
} tune_eval;

typedef struct {
  void *ctx;
  // Cheap bounds of a point: set lb_step_s, lb_mem_bytes, mem_capacity and fits (0: the memory lower
  // bound already exceeds memory); a point the planner rejects gets status TUNE_INVALID and the reason
  // in note. An error return (not an invalid point) ends the search.
  int (*bound)(void *ctx, const tune_point *p, tune_eval *out, sr_error *e);
  // Simulate a point on the pattern of perturbation step `step` (0: the base pattern): set step_s,
  // mem_bytes, mem_capacity, fits and the imbalance and communication figures.
  int (*simulate)(void *ctx, const tune_point *p, int step, tune_eval *out, sr_error *e);
  int thread_safe;  // bound and simulate may run on several threads at once (then a process's share of a
                    // batch is split over tune_options.threads threads)
} tune_evaluator;

// Cooperating processes. allgather: every process passes `count` records of `bytes` each; afterwards
// all[] holds size * count records, process 0's first. A NULL allgather means one process (memcpy).
typedef struct {
  int rank, size;
  void *ctx;
  int (*allgather)(void *ctx, const void *mine, void *all, size_t bytes, int count, sr_error *e);
} tune_exchange;

// ---------------------------------------------------------------------------------------------
// the search

// Where the search stands, for a progress bar (tune_options.progress): counts so far and the best fitting
// step found. ETA assumes the points left are simulated at the pace so far (pruning only shortens it).
typedef struct {
  const char *phase;     // "bounds", "search", "robustness", "done"
  int n_points;
  int done;              // points decided (invalid, pruned, simulated)
  int simulated, pruned; // pruned: by memory or by the bound
  int32_t best;          // the fastest fitting point so far (-1: none)
  double best_s;
  double elapsed_s, eta_s;
} tune_progress;

typedef struct {
  int batch;             // points per batch (fixed, so the answer does not depend on the process count)
  int top;               // rows of the ranking kept (and shown)
  int robust_top;        // leaders re-evaluated on perturbed patterns (0: skip the robustness check)
  int robust_steps;      // perturbed steps 1..robust_steps (step 0, the base pattern, counts too)
  double robust_margin;  // means within this fraction of the best mean are "tied": the best worst case wins
  int no_prune;          // simulate every valid point that may fit (exhaustive; for tests and checks)
  int threads;           // threads a process evaluates its points on, when the evaluator is thread safe
                         // (0: sr_threads(); the answer is the same for any count)
  void (*progress)(void *ctx, const tune_progress *p);  // called after each phase and batch (NULL: none)
  void *progress_ctx;
} tune_options;

// Defaults: batch 16, top 10, robust_top 5, robust_steps 4, margin 0.02 (2 %), pruning on.
void tune_options_defaults(tune_options *o);

// Robustness of one leader over steps 0..robust_steps.
typedef struct {
  int32_t index;         // point index
  int32_t fits;          // fits in memory at every step
  double mean_s, worst_s, best_s;
  double spread;         // (worst - best) / mean
} tune_robust;

typedef struct {
  int n_points;
  int n_invalid, n_pruned_memory, n_pruned_bound, n_simulated, n_oom;
  tune_eval *ev;         // [n_points] what is known about each point, by index
  int n_ranked;
  int32_t *ranked;       // [n_ranked] fitting simulated points by step time (ties by index), at most `top`
  int32_t *rank_of;      // [n_points] 1-based position among all fitting simulated points (0: none)
  int n_robust;
  tune_robust *robust;   // [n_robust] the re-evaluated leaders, in ranking order
  int32_t best;          // the fastest fitting point (-1: none fits)
  int32_t chosen;        // the point chosen after the robustness check (-1: none fits)
  double search_wall_s;  // wall time of the search on this process (not part of the answer)
} tune_result;

// Run the search over space s. Every process calls it with the same arguments (but its own exchange
// rank) and gets the same result. An evaluator error on any process ends the search on every process.
int tune_search(const tune_space *s, const tune_evaluator *ev, const tune_exchange *x, const tune_options *o,
                tune_result *r, sr_error *e);
// Release a result.
void tune_result_free(tune_result *r);

// The full result as CSV (one row per point, in index order; header first). Deterministic.
int tune_csv(const tune_space *s, const tune_result *r, char **out, sr_error *e);
// The ranked table of the leaders (step time, memory, imbalance, what separates each from the first),
// the pruning counts and the robustness check, as text. Returns a malloc'd string.
int tune_report(const tune_space *s, const tune_result *r, const tune_options *o, char **out, sr_error *e);

// ---------------------------------------------------------------------------------------------
// the evaluator backed by the planner and the simulator (tune_sim.c)

typedef struct tune_sim tune_sim;

// Prepare an evaluator for base (model, cluster, seq, pattern, seed; its own layout and schedule must
// build, so input errors surface here) and build its base pattern (step 0). representative: simulate
// one layer per distinct work and repeat it (sim_options). Perturbed step k is the pattern source's
// step k: synthetic drift (pattern_spec.h) or, for "trace:PATH", the trace's recorded step k.
int tune_sim_open(const plan_spec *base, int representative, tune_sim **out, sr_error *e);
// Release an evaluator.
void tune_sim_close(tune_sim *t);
// The last perturbation step available: a trace's recorded steps - 1, else 64.
int tune_sim_max_step(const tune_sim *t);
// The model and cluster of the base spec.
const model_config *tune_sim_model(const tune_sim *t);
const cluster_desc *tune_sim_cluster(const tune_sim *t);
// The evaluator interface over t (bounds from the memory model and GEMM time; sim_run).
tune_evaluator tune_sim_evaluator(tune_sim *t);
// Heads held by the evaluator's accounting store (work.h) and the bytes they take (at most
// TUNE_STORE_MAX_BYTES per process).
void tune_sim_store_usage(const tune_sim *t, int64_t *entries, int64_t *bytes);
// Exact kept causal (q, k) pairs of a head over n tokens, in closed form (the attention part of the
// step-time lower bound).
double tune_head_pairs(const head_pattern *h, int64_t n);
// The plan of point p with spec.predicted_step_s set by a full simulation of the base pattern (what
// `sparsering sim --plan` computes for the written file). Free with plan_free.
int tune_sim_plan(tune_sim *t, const tune_point *p, plan *out, sr_error *e);

#endif

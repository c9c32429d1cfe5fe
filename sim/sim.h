// sim.h — the analytical cluster simulator's API: one training step of a plan on its cluster,
// per rank, per stream, per ring step, with its metrics, memory and timeline.
//
// sim_run takes a built plan (plan.h) and the pattern it runs (pattern.h), builds the task graph of
// one step layer by layer (forward, loss, recomputation + backward, gradient reduction, optimizer),
// schedules it on the event engine (engine.h) with the cost model (cost.h), and fills a sim_result.
// Cost grows linearly in layers and in ranks x ring steps (W^2 tasks a ring pass), so a step is
// O(L x W^2) tasks plus the planner's tile accounting (sim.md has the measured figures).
#ifndef SR_SIM_H
#define SR_SIM_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/plan.h"
#include "plan/ring_plan.h"
#include "plan/timeline.h"
#include "sim/engine.h"

// A ring transfer the simulator costed: the planner's route, in which layer and pass.
typedef struct {
  route r;
  int32_t layer;
  int32_t backward;     // 0: forward pass (recomputation included), 1: backward pass
} sim_transfer;

typedef struct {
  sim_transfer *t;
  int64_t n, cap;
} sim_transfers;

// Release a transfer list.
void sim_transfers_free(sim_transfers *t);

typedef struct {
  int representative;   // simulate one layer per distinct work pattern and repeat its time (sweeps)
  int record_timeline;  // keep every task as a timeline event
  int fixed_pattern;    // the pattern is given, not estimated in the step: no estimation or conversion
                        // cost even for the VS sources planned as MTraining's online estimate (the
                        // executor's vs-topp / vs-preset runs, whose pattern is built before the step)
  int keep_attn;        // selective recomputation (with plan.spec.recompute): each layer keeps attention's output
                        // and LSE, so the recomputed forward runs no attention (nor its transfers or index), and
                        // memory counts them (sparsering-exec train's default where memory allows; keep_layers)
  int index_ready;      // every layer's execution form exists before the step (the trainer's kept plans): a
                        // fixed pattern's forward builds no index in the step
  int plans_kept;       // the exec trainer's plans on the device when known (its cache's cap); 0: as many as the
                        // simulated memory leaves room for (plan_cache.h)
  int keep_layers;      // of keep_attn: only layers 0..keep_layers-1 keep (the rest rerun attention, as the trainer
                        // does where memory holds no more: train/train.h); 0 (or num_layers and more): every layer
  int keep_all;         // of keep_attn: layers 0..keep_all-1 (at most those that keep attention's output) keep every
                        // activation (train --keep-activations): their backward reruns nothing of their forward, and
                        // memory counts their whole sets; 0: none
} sim_options;

// The layers that keep attention's output and LSE under o (layers 0..K-1) of a model of `layers` layers: 0 without
// keep_attn, else keep_layers but `layers` where keep_layers is 0 or more than the model's.
int sim_keep_layers(const sim_options *o, int layers);
// The layers kept whole under o (layers 0..K_all-1): keep_all, at most sim_keep_layers (0 without keep_attn).
int sim_keep_all(const sim_options *o, int layers);

// The tasks a simulation recorded (sim_options.record_timeline), in the order they were scheduled.
typedef struct {
  timeline_event *ev;
  int64_t n, cap;
} sim_timeline;

// Memory per rank and per node, bytes (see memory.h for the model).
typedef struct {
  double weights, grads, optim, activations, kv_buffers, index_bytes, workspace;
  double builder;        // the exec trainer's GPU index builder's device state (plan_cache.h), where it builds
  double total;          // peak per GPU
  // host memory of a node (its ranks together): the optimizer state and fp32 gradients with optimizer offload,
  // the checkpoints with activation offload, FPDT's offloaded chunks
  double host_optim, host_activations, host_attn;
  double host_bytes;     // their sum, per node
  double capacity;       // GPU memory of the cluster's GPU
  double host_capacity;  // host memory of a node
  int fits;              // total <= capacity and host_bytes <= host memory
} sim_memory;

typedef struct {
  char strategy[64];
  int feasible;             // 0: the strategy cannot run this configuration (reason in `note`)
  char note[256];
  double step_s;            // one training step
  double tokens_per_s;
  double model_flops_dense; // dense-equivalent model FLOPs of the step (causal attention over all pairs)
  double model_flops_sparse;// the same with the pattern's kept pairs
  double mfu_dense, mfu_sparse;
  double worker_imbalance;  // max / mean over ranks of attention compute time
  double step_imbalance;    // max / mean over ring steps of the step's slowest rank (summed over layers)
  double exposed_comm_s;    // step time minus the busiest rank's compute time
  double attn_fwd_s, attn_bwd_s;   // busiest rank's attention compute time
  double comm_bytes;        // bytes sent by all ranks
  double density;           // kept pairs / causal pairs
  double exec_density;      // pairs the kernels compute (tiles whole, bars) / causal pairs (ring kinds)
  int64_t n_tasks;          // tasks scheduled
  double sim_wall_s;        // seconds the simulation took
  double account_wall_s;    // of which in the planner's tile accounting
  double pattern_wall_s;    // of which drawing the pattern (sim_run without one: the plan's, drawn inside; drawn a head at
                            // a time, its share of the wall time the heads' drawing and accounting took together)
  // The exec trainer's attention plans (plan_cache.h; plans 0: not modelled: not the exec trainer, or a pattern made
  // at run time, whose plans follow each estimate)
  int plans, plans_kept, plans_rebuilt;
  int plans_how;            // how a dropped plan comes back: 0 built on the host, 1 built on the GPU, 2 uploaded from
                            // the host cache
  double plan_bytes;        // one plan's device bytes (the largest rank's largest layer)
  double plan_obtain_s;     // seconds to build or restore one
  double plans_exposed_s;   // of the step's time, waiting for them (in step_s)
  // The GPU index builder where it builds (plan_cache.h plan_cache_builder_fate): 0 kept between builds, 1 given back
  // after each build and made again at the next, 2 never fits (each build falls back to the host; its bytes not in
  // mem.total)
  int builder_fate;
  double builder_bytes;     // its device state (plan_cache_gpu_builder_bytes; 0: no GPU build)
  double builder_remake_s;  // seconds to make it again, in each build's plan_obtain_s where it is given back or fails
  sim_memory mem;
} sim_result;

// Simulate one training step of plan p running pattern pat (layers x heads of the model). pat NULL: the plan's own
// pattern (sim_pattern_build's), drawn inside: a head at a time as it is accounted where the step reads each head only
// then (a ring step of a synthetic vertical-slash source, pattern_spec_by_heads), else whole.
int sim_run(const plan *p, const pattern *pat, const sim_options *o, sim_result *r, sim_timeline *tl, sr_error *e);
// sim_run with the tile accounting kept in `store` (work.h; NULL: a private cache per run, as sim_run) so
// that many simulations over the same layouts and pattern account each head once. Results are identical.
// (A function rather than a sim_options field: callers initialise sim_options positionally.)
struct work_store;
int sim_run_shared(const plan *p, const pattern *pat, const sim_options *o, struct work_store *store, sim_result *r,
                   sim_timeline *tl, sr_error *e);
// sim_run that also appends every ring transfer it costs to `transfers` (in the order costed), so a
// test can hold the simulator's transfers against the executor's. Results are identical to sim_run's.
int sim_run_transfers(const plan *p, const pattern *pat, const sim_options *o, sim_transfers *transfers, sim_result *r,
                      sim_timeline *tl, sr_error *e);
// Release a timeline's events.
void sim_timeline_free(sim_timeline *t);
// Seconds of the all-to-all that re-shards the sequence from layout `from` to `to` (a re-balanced layout,
// plan_rebalance): every token that changes rank carries its residual stream (hidden_size bf16 values), and
// the rank that sends most sets the time (cost_alltoall_cluster over the plan's cluster). The cost of
// switching layout inside a step; between steps a data loader that reads the new positions pays none of it.
int sim_reshard_s(const plan *p, const layout *from, const layout *to, double *seconds, sr_error *e);

#endif

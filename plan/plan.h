// plan.h — the plan: model + cluster + sequence length + layout + schedule + pattern source +
// strategy options. Both consumers (sim/ and exec/) start from a plan and call the planner's
// functions on it; neither re-derives layouts or tiles on its own.
//
// A plan is written as JSON (deterministic: the same inputs give byte-identical files) and read back
// by `sparsering show`, `sparsering sim --plan` and `sparsering-exec`.
#ifndef SR_PLAN_H
#define SR_PLAN_H

#include <stdint.h>

#include "plan/cluster.h"
#include "plan/error.h"
#include "plan/layout.h"
#include "plan/model.h"
#include "plan/pattern.h"
#include "plan/schedule.h"

// What the user asked for (the plan file's "spec"): strings as given, so the plan is reproducible.
typedef struct {
  char model[512];        // shipped name or path
  char cluster[512];      // shipped name or path
  int64_t seq;            // tokens in the sequence
  char layout[512];       // "contiguous", "zigzag", "striped", "permutation:PATH", "balanced" (see layout_parse_kind;
                          // balanced: dealt by the work of `pattern` at step 0, plan/balance.h)
  int64_t granularity;    // striped G (default 128)
  char schedule[32];      // "ring", "double-ring", "ulysses", "usp"
  int inner;              // double-ring inner size (0: GPUs per node)
  int ulysses;            // Ulysses degree for ulysses/usp (0: default)
  char pattern[512];      // pattern source: "dense", "window:128:4096", "vs-preset:qwen2.5-3b", "trace:PATH", ...
  char strategy[64];      // label ("mtraining", "dense-ring", ...; "custom" when built from flags)
  int recompute;          // per-layer activation recomputation (default 1)
  int zero;               // ZeRO stage 0..3 (default 1): 1 shards the optimizer state over the ranks, 2 also the
                          // gradients, 3 also the weights (gathered a layer at a time)
  int offload_activations;  // the per-layer checkpoints live in pinned host memory between forward and backward
  int offload_optimizer;  // the optimizer state and its update live in host memory (ZeRO-Offload)
  int64_t mlp_chunk;      // sparsering-exec train's MLP in chunks of this many local tokens (0: the whole local
                          // sequence; MODEL_EXEC_MLP_AUTO, the default: plan/model.h's rule)
  int kv_bytes;           // bytes per element of KV on the wire (2 = bf16)
  int skip_empty_sends;   // do not send KV shards no query of the receiver touches in that step
  int fwd_runs;           // the attention forward runs the forward form of tiles_runs_build (scattered slashes
                          // as 64-key runs; the same elements): the executor, and the simulator's ring steps
  int deterministic;      // the executor's GPU backward without float atomics (bit-reproducible, slower)
  int64_t fpdt_chunk;     // FPDT chunk size in tokens (0: not FPDT): the sequence is cut into ceil(seq / chunk)
                          // chunks of consecutive tokens, each spread over every rank (Ulysses inside a chunk)
  int fpdt_offload;       // FPDT: the gathered KV chunks wait in pinned host memory, fetched back ahead of use
  uint64_t seed;          // seed of synthetic patterns
  int64_t search_every;   // adaspa-online: a search every this many training steps, the mask reused in between (1)
  int attention_only;     // the simulated step holds only each layer's attention, forward and backward (no
                          // GEMMs, norms, loss, recomputation, gradient reduction or optimizer): kernel and
                          // ring studies, the step `sparsering-exec attn` times
  int first_step_plans;   // a first training step: the attention plans (host-built execution forms) of the
                          // last this-many layers are built inside the step, when their layer comes (the
                          // trainer builds the rest before it); 0: a later step, every plan built already
  int index_build;        // sparsering-exec train's --index-build: 0 auto (vertical-slash layers on ring layouts on the
                          // GPU), 1 cpu, 2 gpu; the simulator counts the GPU builder's device state where it applies
  int attn_cache;         // its --attn-cache: per-layer plans kept on the device; 0 (the default): as memory allows
  int attn_prefetch;      // its --attn-prefetch: plans built ahead of use; -1 (the default): its own, 2 on CUDA
  int attn_host_cache;    // its host cache of dropped plans: 1 on, 0 off, -1 (the default): on unless
                          // offload_activations (whose layer inputs take the pinned host memory)
  char trainer[16];       // whose memory the simulator counts: "mixed" (a bf16 mixed-precision trainer, default)
                          // or "exec" (sparsering-exec train: fp32 state and buffers, plan/model.h)
  double predicted_step_s;  // simulator's prediction recorded by `sim`/`tune` (0 when none)
} plan_spec;

typedef struct {
  plan_spec spec;
  model_config model;
  cluster_desc cluster;
  layout layout;
  schedule schedule;
} plan;

// Default spec values (layout striped G=128, ring, dense, recompute on, ZeRO-1 on, bf16 KV).
void plan_spec_defaults(plan_spec *s);
// Set layout, granularity, schedule, pattern (and FPDT options) of a named strategy ("mtraining",
// "dense-ring", ...; see plan.c for the table) and its label; unknown names are input errors.
int plan_spec_apply_strategy(plan_spec *s, const char *name, sr_error *e);
// Names of the known strategies, NULL-terminated.
extern const char *const plan_strategy_names[];
// Does `whatif` run this strategy when not given --strategies? Every one but adaspa, whose block masks take the
// generic tile accounting (about a minute more at the default study's 512K); it runs when named.
int plan_strategy_in_default_study(const char *name);
// Build a plan from a spec: loads model and cluster, builds layout and schedule.
int plan_build(const plan_spec *s, plan *p, sr_error *e);
// plan_build that also says, on failure, which spec field was at fault ("model", "layout", ...).
int plan_build_at(const plan_spec *s, plan *p, const char **field, sr_error *e);
// Release a plan's arrays.
void plan_free(plan *p);
// Deal the plan's layout anew as balanced by pattern pat's work (the pattern drifted, or a recorded step
// rather than the plan's own pattern decides) and rebuild the schedule on it; spec.layout becomes
// "balanced". The plan is unchanged on error.
int plan_rebalance(plan *p, const pattern *pat, sr_error *e);
// Serialise a plan as JSON text (deterministic). Returns a malloc'd string.
int plan_to_json(const plan *p, char **out, sr_error *e);
// Write a plan file atomically.
int plan_write(const plan *p, const char *path, sr_error *e);
// Read a plan file and rebuild it (the spec is authoritative; derived data are recomputed and checked).
int plan_read(const char *path, plan *p, sr_error *e);
// The same from the file's text (path names it in messages).
int plan_parse(const char *text, const char *path, plan *p, sr_error *e);

#endif

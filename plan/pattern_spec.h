// pattern_spec.h — from a pattern source string (plan_spec.pattern) to a pattern of a model's shape.
//
//   dense                      causal attention
//   window:SINKS:WINDOW        attention sinks + sliding window
//   vs-like:SINKS:WINDOW:NV    ANCHORS' VS-like mask (sinks + local window + NV verticals at N*u^3)
//   vs-preset:qwen2.5-3b       MTraining's published per-head (vertical, slash) budgets, indices synthesised
//   vs-topp:P                  synthetic top-p-like VS, per-layer sparsity 87%-99.6% (at P = 0.9)
//   vs-online:P                MTraining's online estimate, top-p P (cap 4096); planned and simulated as
//                              vs-topp:P (the simulator adds the estimation cost)
//   vs-online:topk:V:S         the online estimate with a fixed budget: the top V columns and S diagonals
//                              of every head; planned and simulated as V verticals and S slashes a head
//   vs-online:...:SINKS:WINDOW either of the two, always keeping columns [0, SINKS) and diagonals
//                              [0, WINDOW) besides what it selects (MInference keeps 30 and 100)
//   block:DENSITY[:B]          clustered block-sparse, B = 128 by default
//   adaspa:SPARSITY[:B]        AdaSpa-like head-adaptive block-sparse, B = 128 by default
//   adaspa-online:SPARSITY[:B] AdaSpa's block search from the data (executor and trainer): a dense pass for each
//                              row's LSE, the block masses, the head-adaptive top blocks, the mask reused
//                              between searches (plan.spec.search_every); planned and simulated as
//                              adaspa:SPARSITY[:B] (the simulator adds the search)
//   moba:B:K[:RHO]             MoBA block gating: blocks of B tokens (a multiple of 128), K blocks a query
//                              (its own included); selected from Q and K in every forward by the executor and
//                              the trainer, planned and simulated on the stand-in of plan/gating.h, whose
//                              128-row groups keep RHO (K - 1) blocks (default MOBA_DEFAULT_RHO)
//   token-topk:K[:IH:ID]       DeepSeek-style token top-k: K tokens a query from an indexer of IH heads of
//                              dimension ID (64 and 128 by default, DeepSeek-V3.2's); likewise
// "trace:PATH" (a recorded trace) and "vs-fit:PATH" (the generator fitted to one, synth_fitted) are read by
// traces/ and are input errors here.
#ifndef SR_PATTERN_SPEC_H
#define SR_PATTERN_SPEC_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/gating.h"
#include "plan/model.h"
#include "plan/pattern.h"
#include "plan/pattern_estimate.h"

// Build the pattern of `spec` for model m at n_tokens (layers x query heads); seed and step drive the
// synthetic generators (bit-reproducible; step makes it drift). Unknown or malformed specs are SR_EINPUT
// naming the field "pattern".
int pattern_from_spec(const char *spec, const model_config *m, int64_t n_tokens, uint64_t seed, int step, pattern *out,
                      sr_error *e);
// Layer `layer` of pattern_from_spec's pattern for model m, as a one-layer pattern (1 x m->num_heads) whose heads are
// those of the whole pattern's layer bit for bit: what the trainer's layer runs (its plan draws the whole pattern so).
// The heads of a pattern_spec_by_heads source are drawn alone; any other source is drawn whole and its layer kept.
// SR_EINPUT naming "layer" outside [0, m->num_layers), else as pattern_from_spec.
int pattern_from_spec_layer(const char *spec, const model_config *m, int64_t n_tokens, uint64_t seed, int step, int layer,
                            pattern *out, sr_error *e);
// Can a source's heads be drawn one at a time (pattern_drawer)? The synthetic vertical-slash ones, each head drawn
// from its own seeds: vs-topp, vs-preset, vs-online's stand-in.
int pattern_spec_by_heads(const char *spec);
// A source's heads drawn one at a time, each the head pattern_from_spec's pattern holds, bit for bit: for a caller
// that needs a head only while it uses it, where the whole pattern would hold gigabytes (Llama-3.1-70B at 4M tokens:
// 4.4 GB of indices). Room for `threads` threads drawing at once, a slot each (their scratch and one head's arrays).
typedef struct pattern_drawer pattern_drawer;
// Prepare drawing the heads of spec (pattern_spec_by_heads) for model m at n_tokens (seed, step as pattern_from_spec).
int pattern_drawer_open(const char *spec, const model_config *m, int64_t n_tokens, uint64_t seed, int step, int threads,
                        pattern_drawer **out, sr_error *e);
// Head (layer, head), drawn in slot `thread` (0 .. threads - 1): valid until the slot's next draw.
const head_pattern *pattern_drawer_head(pattern_drawer *d, int thread, int layer, int head);
// Release a drawer (NULL is fine).
void pattern_drawer_close(pattern_drawer *d);
// Input error unless spec is a pattern source the model can have at n_tokens ("trace:PATH", "vs-fit:PATH": a
// path is named; the file is read where the pattern is built). Cheap: builds the pattern of a short sequence.
int pattern_spec_check(const char *spec, const model_config *m, int64_t n_tokens, sr_error *e);
// Where a source's pattern comes from in a training step. MTraining selects its vertical-slash pattern
// from the data in every forward pass: vs-online is that selection (the executor and the trainer run it),
// vs-topp and vs-preset are the planner's synthetic stand-ins for it; every other source is fixed.
typedef enum {
  PATTERN_FIXED,     // dense, window, vs-like, block, adaspa, trace, vs-fit: given before the step
  PATTERN_STAND_IN,  // vs-topp, vs-preset: built before the step; the executor runs it as given, the
                     // simulator charges the estimation it stands for (unless told the pattern is given)
  PATTERN_ONLINE,    // vs-online: estimated from the data in every forward pass, and charged for
  PATTERN_SEARCHED,  // adaspa-online: searched from the data at chosen steps and reused in between (AdaSpa),
                     // and charged for
  PATTERN_GATED,     // moba, token-topk: selected from Q and K by the model's gate in every forward pass (the
                     // executor and the trainer run it), planned on the stand-in, the gate charged by the simulator
} pattern_estimation;
// How the spec's pattern is estimated (above); the one answer for the simulator and the executor.
pattern_estimation pattern_spec_estimation(const char *spec);
// The selection settings of an online spec, for every backend that estimates (CPU and CUDA executor, CPU
// trainer): the last queries' scores, top-p P with cap 4096 or the fixed (V, S) budget, no forced sinks
// or window. SR_EINPUT naming "pattern" for a spec that is not a well-formed vs-online one.
int pattern_spec_online_opts(const char *spec, vs_est_opts *o, sr_error *e);
// Is the pattern that runs chosen from the data at run time (vs-online, adaspa-online, moba, token-topk)? Then a
// run's pattern is what the executor reports (dist_attn_pattern_used), not the plan's stand-in.
int pattern_spec_at_run_time(const char *spec);
// Does the CUDA backend make each forward's execution form and masks on the device, in state of its own (vs-online,
// adaspa-online)? Then the plan's copies of the stand-in's index, forward form and masks would never be read, so
// the executor keeps none and the simulator counts none (docs/sim.md, "Memory"). Gated patterns are not: their
// selection goes up into the plan's copies every forward.
int pattern_spec_device_made(const char *spec);
// The search settings of an "adaspa-online:S[:B]" spec (threshold 0.8, AdaSpa's); SR_EINPUT naming "pattern"
// for any other spec.
int pattern_spec_adaspa_opts(const char *spec, adaspa_opts *o, sr_error *e);
// The settings of a gated spec (moba:B:K, token-topk:K[:IH:ID]); SR_EINPUT naming "pattern" otherwise.
int pattern_spec_gating_opts(const char *spec, gating_opts *o, sr_error *e);

#endif

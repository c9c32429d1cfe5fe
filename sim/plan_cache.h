// plan_cache.h — sparsering-exec train's attention plans in a step (train/train_attn.c), for the simulator's exec
// trainer: how many per-layer plans stay on the device, how many the step builds (or restores) again, the seconds
// the GPU waits for them; and the device state of the GPU index builder (exec/dist_gpu_build.c) kept beside them.
//
// The trainer keeps as many plans as fit in the device memory left after the model, its buffers and the first
// plan (each further plan counted at 1.25 x the first's bytes); a step uses the layers up (forward) and down
// (backward with its recomputed forward: one use), so with K of L per-layer plans kept, evicting the plan next used
// farthest away, the forward misses layers K..L-1 and the backward L-K-1..0: 2 (L - K) plans obtained a step. One
// plan serves every layer of a dense pattern: it never rebuilds. Building ahead (--attn-prefetch D) starts a
// layer's build when the layer D uses before it starts, in a slot not holding the plan in use, so at most
// min(D, K - 1) ahead: a build hides behind the GPU work of those layers and the rest of it is exposed (a
// conservative model: builds in flight together share the host's cores, counted as if one after another).
#ifndef SR_PLAN_CACHE_H
#define SR_PLAN_CACHE_H

#include <stdint.h>

// Each plan kept beyond the first counts at this many times the first's bytes (train/train_attn.c PLAN_GROWTH).
#define PLAN_CACHE_GROWTH 1.25

typedef struct {
  int layers;          // L
  int per_layer;       // each layer its own plan (0: one plan serves every layer: dense)
  int kept;            // plans the trainer keeps when known (its cap); 0: as many as `room` holds
  double room;         // device bytes free beside the step's other items, the first plan included among them
  double plan_bytes;   // one plan's device bytes
  double obtain_s;     // seconds to build (or restore from host memory) one plan
  int prefetch;        // plans built ahead of use (--attn-prefetch)
  double layer_fwd_s;  // GPU seconds of one layer's forward (what a forward rebuild can hide behind, a layer ahead)
  double layer_bwd_s;  // the same of its backward, recomputed forward included
} plan_cache_in;

typedef struct {
  int plans;           // distinct plans of the step: L per-layer, 1 shared
  int kept;            // of them on the device
  int rebuilt;         // plans built or restored in a step
  int ahead;           // layers built ahead in effect: min(prefetch, kept - 1)
  double exposed_s;    // seconds the step waits for them
} plan_cache_out;

// The step's plans under in (see above).
void plan_cache_step(const plan_cache_in *in, plan_cache_out *out);

// What the GPU index builder's conversion and transposition hold for one query rank (exec/dist_gpu_build.c): the
// layout's tables, the bit sets uploaded, the conversion's scratch and index (kernels/vs_convert.cu vs_gpu_conv_init,
// its tile_idx / bar_idx at a layer's need), the transposer's work buffers and its one result, each source's
// downloaded before the next (kernels/transpose_gpu.cu, sa_gpu_transposer_new_for_download: no bars' scratch), with
// plan.spec.fwd_runs the forward form's build (kernels/vs_runs.cu vs_gpu_runs_init, its arrays at a layer's need),
// kept between builds while the device has room (plan_cache_builder_fate).
typedef struct {
  int64_t n_tokens;    // N: the sequence
  int32_t world;       // ring ranks: the layout's sources
  int64_t n_runs;      // the layout's runs
  int64_t all_tiles;   // query tiles of every rank together
  int64_t n_qtiles;    // query tiles of the rank
  int32_t heads;       // heads of the index (the model's)
  int32_t kv_heads;
  int64_t tiles;       // the rank's tile entries over every source (the largest layer's)
  int64_t bars;        // its bar entries (the largest layer's)
  int64_t columns;     // the layer's columns (VS verticals, window sinks) over its heads, the distinct bar keys'
                       // bound (the largest layer's); -1: not known (every head's every key)
  int32_t fwd_runs;    // plan.spec.fwd_runs: the builder makes the forward form too (kernels/vs_runs.cu)
  int64_t fwd_tiles;   // the forward form's tile entries, runs and bars over every source (each the largest layer's)
  int64_t runs;
  int64_t fwd_bars;
} gpu_builder_counts;

// Device bytes of the builder (an upper estimate: a source's arrays sized by the rank's totals and its keys by the
// sequence's, the distinct bar keys at min(bars, columns), a compute chunk's query tiles at all of the rank's; exact
// in form on one rank): 8 bytes a bar entry (the index's bar_idx, the transpose's bar_q_idx), 34 a tile entry.
double plan_cache_gpu_builder_bytes(const gpu_builder_counts *c);

// Room the executor keeps beyond the builder and a plan's needs (exec/dist_gpu_build.c BUILDER_MARGIN_BYTES).
#define PLAN_CACHE_BUILDER_MARGIN (1024.0 * 1024.0 * 1024.0)

// What becomes of the builder's device state in a step (exec/dist_gpu_build.c, docs/exec.md "The GPU index builder").
typedef enum {
  PLAN_CACHE_BUILDER_KEPT,      // kept between builds
  PLAN_CACHE_BUILDER_RELEASED,  // given back after each build and made again at the next (its re-making charged)
  PLAN_CACHE_BUILDER_ON_HOST,   // never fits: each GPU build runs out of memory and the plan is built on the host
} plan_cache_builder;

// The builder's fate beside `others` device bytes (the step's other items at their peak, its own not among them) on a
// device of `capacity` bytes, a build needing `need` bytes more for its plan: kept where a build leaves free its own
// bytes again, the need and the margin (dist_gpu_builder_keep: room for a remake beside it); given back after each
// build where it fits but not that; on the host where it does not fit at all. No builder (0 bytes): kept.
plan_cache_builder plan_cache_builder_fate(double capacity, double others, double builder, double need);

#endif

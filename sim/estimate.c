// estimate.c — the cost of MTraining's online pattern estimation and of building the tile index.
//
// Per layer and forward pass (MTraining, sec. 3): the last 64 queries of the whole sequence are
// broadcast to every rank; each rank scores them against its keys (QK^T, then a distributed softmax
// whose row max and row sum are all-reduced); column sums give vertical scores and sums along
// diagonals give slash scores; the partial scores are gathered at a root (vertical: each rank owns its
// columns; slash: every rank contributes to every diagonal, a reduction), the root runs top-p, and the
// selected indices are broadcast. Each rank then builds its tile index from them.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "plan/pattern_spec.h"
#include "sim/cost.h"
#include "sim/step_ctx.h"

#define EST_QUERIES 64      // MTraining scores the last 64 queries
#define EST_MAX_INDICES 4096 // top-p is capped at 4096 verticals and 4096 slashes per head
// Our estimator (kernels/vs_estimate.cu) scores in float64 so that GPU and CPU select the same pattern bit for
// bit, on the FP64 vector units: its scoring pass ran at 15.0 TFLOP/s on the H200, 0.44 of the 34 TFLOP/s
// FP64 vector peak (results/JOURNAL.md, "VS estimation + conversion at 512K", pass 1, 512K whole;
// results/kernels/2026-11-22-h200-vs-estimation-512k).
#define EST_FP64_EFF 0.44
// The rest of our estimator against the byte counts below, from the same H200 measurement
// (results/JOURNAL.md, "VS estimation + conversion at 512K", 512K whole, planted inputs;
// results/kernels/2026-11-22-h200-vs-estimation-512k), where those bytes take 2.105 ms (passes 2-3) and
// 0.280 ms (selection) at 0.85 of 4800 GB/s: passes 2 and 3 took 2.22 + 3.55 ms, so they run at 0.365 of
// that rate (the shard, 256K keys: 2.92 ms measured, 2.88 predicted); the selection took 3.56 ms, 0.0786 of it (the same for the shard: every
// rank selects over all N columns and diagonals).
#define EST_PASS23_EFF 0.365
#define EST_SELECT_EFF 0.0786
// Conversion of the selected indices to a rank's execution form on the GPU (kernels/vs_convert.cu). Its time is
// vs_cells_kernel, run twice (count, then write): one block of 128 threads a (head, query tile) cell, which sweeps
// each source's key tiles up to the cell's last query 128 at a time (classify: a few bit-count look-ups a tile) and
// then the head's verticals held by each source, 128 at a time; the rest (bit counts, the verticals' split, scans, the
// cells' order by a radix sort of one key a cell) is a few microseconds a launch. Timed by Nsight Compute in the
// vs-online:0.95 layer at 256K on one H100 (results/exec/2026-11-28-h100-vs-online-1gpu-kernels, logs/ncu-vson.csv,
// the third repetition; durations at the profiler's base clock, scaled to the run's: its forward, 17.727 ms measured,
// less the K|V copy into the ring buffer that is no kernel, 0.19 ms at the model's memory rate, over 20.374 ms of the
// forward's launches under the profiler: 0.861; sim/cost.c, cost_cta_floor, says why): vs_cells 0.860 ms -> 0.740 ms
// over 32,768 cells of 9.28 sweeps each (estimate_convert), 2.43 ns a (cell, sweep); the rest 0.153 ms -> 0.132 ms.
// The same kernels on one H200 take 0.911 and 0.145 ms under the profiler
// (results/exec/2026-11-28-h200-vs-online-1gpu, scaled by its forward's 0.813: 0.741 and 0.118 ms; this model 0.872 ms
// against 0.859), so they do not follow the memory rate (3.35 against 4.8 TB/s): the blocks' sweeps are latency-bound
// on the SMs (132 on both, the same clock) and are taken as they are on every GPU. The conversion fitted before (0.58
// ms + 30.65 ns a cell + 8.47 ps a cell and index, on 2026-11-22's four measurements at 512K, which took the host
// calls around the kernels too) charged 1.62 ms at this shape on the H200 (2.08 on the H100, scaled by its memory
// rate). vs-online had on top of it 2.31 ms + 1.12 ms a source shard, the forward's gaps fitted through the two
// 2026-11-22 vs-online layers: what they stood for is the forward kernel's short CTAs (sim/cost.h, cost_cta_floor),
// which the step now charges, and the old conversion's host calls (results/sim/2026-11-28-cpu-vs-online-terms).
#define EST_CONV_FIXED_S 0.132e-3
#define EST_CONV_SWEEP_S 2.434e-9
#define EST_CONV_BLOCK 128.0  // vs_cells_kernel's threads: the key tiles and verticals a sweep covers
#define EST_H200_MEM_RATE (4800e9 * 0.85)
// The estimation's passes 2-3 and its selection run at the rates above on the H200 and in the same time on the H100
// (Nsight Compute, the two layers above: vs_rowsum + vs_probs 3.55 / 3.73 ms, vs_select 2.17 / 2.23 ms at the
// profiler's clock, H100 / H200), not at their memory rates' ratio (0.70): their fixed-point exponentials and 128-bit
// sums are bound by the SMs' issue, as pass 1's float64 products. They are taken at the H200's rate scaled by the
// cluster's FP64 rate against the H200's (EST_H200_FP64_TFLOPS), as pass 1 is.
#define EST_H200_FP64_TFLOPS 34.0
// The first training step's attention plans built on the host when their layer comes: 13.5 ns a tile or
// bar entry of the rank's plan (its index, transposes, bar chunks and upload), fitted to the one measured
// first step (results/exec/2026-11-22-h200x4-two-nodes, call3: MTraining vs-topp:0.95 at 512K on 4 ranks,
// 27 plans built in the step in 38.2 s, 104M entries a rank and layer). A property of the host CPU.
#define EST_PLAN_BUILD_ENTRY_S 13.5e-9
// A later step's plans built again on the host because they did not all fit on the device (plan_cache.h): 16.5 ns a
// tile or bar entry of one rank's plan with the host's cores to itself, fitted to the two one-rank builds measured
// on their own: MTraining vs-topp:0.95 at 512K on one H200, 4 ring plans in 56.36 s (14.1 s a plan; 856M entries a
// plan, simulated: 16.5 ns; results/train/2026-11-27-h200-mtraining-512k-offload-attempts, attempt3), and FPDT
// vs-topp:0.95 at 256K on one H100, 64K chunks, compact form: 1.662 + 1.155 + 0.716 = 3.533 s (212.6M entries: 16.6
// ns; results/exec/2026-11-27-h100-fpdt-compact-check/check.txt). The trainer gives each rank of a node its share of
// the cores (--build-threads: cores / ranks), so a node's R ranks build R times slower each: FPDT at 1M on two H200s
// of one host, 69.9 s a plan measured (stored form, 32 threads a rank; results/exec/2026-11-27-h200x2-fpdt-1m,
// third attempt), 64.5 s by this rate (1956M entries a rank). A guess beyond these three points.
#define EST_PLAN_REBUILD_ENTRY_S 16.5e-9
// A dropped plan uploaded again from the trainer's host cache (--attn-host-cache, dist_attn_device_restore): its
// arrays from pageable host memory, measured at 3.95 GB/s a rank: 140 restores in 22.19 s (0.158 s each) of plans of
// up to 596.4 MiB, MTraining vs-topp:0.95 at 256K on 4 H100s of one host restoring at once
// (results/exec/2026-11-27-h100x4-vs-context-parallel, train-256k/logs/t_mtraining_256K.log); the host link's rate
// where that is slower.
#define EST_PLAN_RESTORE_BPS 3.95e9
// The GPU index builder made again after it gave its state back (exec/dist_gpu_build.c builder_ready and the build's
// allocations): the layout's tables built on the host (vs_layout_tables_build, a pass over the tokens) and uploaded
// (8 bytes a token: every key's rank and local index), the state's device arrays allocated and, at the next giving
// back, freed. Not measured, guesses of the right order: 10 ns a token for the tables, 2 ms a GiB for cudaMalloc and
// cudaFree together and 2 ms for the forty-odd calls.
#define EST_BUILDER_TABLES_TOKEN_S 10e-9
#define EST_DEVICE_ALLOC_GIB_S 2e-3
#define EST_DEVICE_ALLOC_CALLS_S 2e-3

// Seconds of the estimation's passes 2-3 or its selection over `bytes` at their measured share `eff` of the H200's
// memory rate, scaled by the cluster's FP64 rate (EST_H200_FP64_TFLOPS says why); at `eff` of the cluster's memory
// rate where the file gives no FP64 rate.
static double est_issue_s(const gpu_desc *g, double bytes, double eff) {
  if (!(g->fp64_tflops > 0)) return cost_mem(g, bytes) / eff;
  return bytes / (EST_H200_MEM_RATE * eff) * (EST_H200_FP64_TFLOPS / g->fp64_tflops);
}

int estimate_layer(sim_ctx *x, int layer, const int32_t *qkv, int32_t *out, sr_error *e) {
  int W = x->W;
  const model_config *m = x->m;
  double H = (double)m->num_heads, d = (double)m->head_dim, N = (double)x->p->layout.n_tokens;
  double gbps, lat;
  ctx_coll_link(x, &gbps, &lat);
  double *dur = malloc((size_t)W * sizeof *dur);
  if (!dur) return sr_internal_error(e, 0, "sim: out of memory");
  int rc;
  // 1. Broadcast of the last 64 queries (bf16), all heads.
  double qbytes = EST_QUERIES * H * d * 2;
  if ((rc = ctx_collective(x, cost_broadcast(W, qbytes, gbps, lat), PHASE_COLLECTIVE, layer, qkv, x->c2, e))) goto out;
  // 2. Scores against local keys: 2 * 64 * n * d FLOPs per head in float64 (roofline compute bound, Williams
  // et al. 2009, at the FP64 rate above), float64 scores written once.
  const gpu_desc *g = &x->c->gpu;
  double fp64 = g->fp64_tflops * 1e12 * EST_FP64_EFF;
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    dur[r] = (fp64 > 0 ? 2.0 * EST_QUERIES * n * d * H / fp64 : 0) + cost_mem(g, EST_QUERIES * n * H * 8);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, x->c2, out, e))) goto out;
  // 3. Distributed softmax: all-reduce of the row max, then of the row sum (64 x H fp32 each).
  double stats = cost_allreduce(W, EST_QUERIES * H * 4, gbps, lat);
  if ((rc = ctx_collective(x, 2 * stats, PHASE_COLLECTIVE, layer, out, x->c2, e))) goto out;
  // 4. Normalise and sum scores by column and by diagonal: two more passes over the float64 scores, at
  // the rate measured for ours (EST_PASS23_EFF).
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    dur[r] = est_issue_s(g, 2.0 * EST_QUERIES * n * H * 8, EST_PASS23_EFF);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, x->c2, out, e))) goto out;
  // 5. To the root: slash sums reduced (Rabenseifner: reduce-scatter then gather, 2x the reduce-scatter
  // volume) and vertical sums gathered (all-gather volume); fp32, N x H each.
  double vec = N * H * 4;
  double t5 = 2 * cost_reduce_scatter(W, vec, gbps, lat) + cost_allgather(W, vec, gbps, lat);
  ctx_add_comm(x, 3 * vec * (W - 1) / W * W);
  if ((rc = ctx_collective(x, t5, PHASE_COLLECTIVE, layer, out, x->c2, e))) goto out;
  // 6. Top-p on the root: a radix sort of both score vectors (fp32 key + int32 index, 4 passes of 8-bit
  // digits, each reading and writing; Adinets & Merrill 2022, "Onesweep"), then a prefix sum; at the rate
  // measured for our selection (EST_SELECT_EFF).
  for (int r = 0; r < W; r++) dur[r] = r == 0 ? est_issue_s(g, 2 * N * H * 8 * 2 * 4 + 2 * vec, EST_SELECT_EFF) : 0;
  if ((rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, x->c2, out, e))) goto out;
  // 7. Broadcast of the selected indices (at most 4096 + 4096 int32 per head).
  double ibytes = H * 2 * EST_MAX_INDICES * 4;
  ctx_add_comm(x, (qbytes + ibytes) * (W - 1));
  rc = ctx_collective(x, cost_broadcast(W, ibytes, gbps, lat), PHASE_COLLECTIVE, layer, out, out, e);
out:
  free(dur);
  return rc;
}

// The index build writes every tile entry (4-byte tile index + 1-byte kind) and bar (4 bytes) after
// reading the kept verticals and slashes per query tile: a memory-bound pass of ~16 bytes an entry
// (writes, and the reads and count scans that produce them).
double estimate_index_build(const sim_ctx *x, double entries) { return cost_mem(&x->c->gpu, 16.0 * entries); }

double estimate_convert(const sim_ctx *x, int layer, int rank) {
  const pattern *pat = x->pat;
  const layout *l = &x->p->layout;
  double idx = 0, heads = (double)x->m->num_heads, W = (double)x->W;
  for (int h = 0; pat && h < pat->heads; h++) {
    const head_pattern *hp = pattern_head(pat, layer, h);
    idx += (double)hp->n_vertical + (double)hp->n_slash;
  }
  if (!pat) idx = x->layer_indices[layer];  // the same sum, taken when the layer was drawn
  double qt = ceil((double)l->rank_count[rank] / TILE), pos = 0;  // the rank's query tiles, its tokens' mean position
  for (int64_t i = l->rank_run_begin[rank]; i < l->rank_run_begin[rank + 1]; i++)
    pos += (double)l->runs[i].len * ((double)l->runs[i].global + ((double)l->runs[i].len - 1) / 2);
  if (l->rank_count[rank] > 0) pos /= (double)l->rank_count[rank];
  // A cell's sweeps: the key tiles before its queries (pos / TILE on average, over every source), a block's 128 a
  // sweep, with half a sweep more a source for its last partial one; then the verticals the same way (about half of
  // a VS head's indices, half of them before the cell on average).
  double sweeps = pos / TILE / EST_CONV_BLOCK + W / 2 + idx / heads / 4 / EST_CONV_BLOCK + W / 2;
  return EST_CONV_FIXED_S + EST_CONV_SWEEP_S * qt * heads * sweeps;
}

// The transposed index of the estimate, built on the GPU in every backward (kernels/transpose_gpu.cu): a
// memory-bound pass of 16 bytes an entry, as the index build, and its launches: about thirty kernels and scans
// (tt_cell_counts, tt_gather, the sorts of the transposed cells, tt_bar_pass three times, the chunks' tiles and keys,
// tt_slots) of a few microseconds each where the index is small. Timed by Nsight Compute in the vs-online layer at
// 256K on one H100 (results/exec/2026-11-28-h100-vs-online-1gpu-kernels, logs/ncu-vson.csv): 0.349 ms of launches at
// the profiler's clock, 0.299 ms at the run's (its backward's scale, 0.858: sim/cost.c, cost_cta_floor), where the
// entries' 16 bytes take 1.1 us at the memory rate: EST_TRANSPOSE_FIXED_S. On one H200 0.340 ms, 0.289 ms at its
// run's scale (0.851).
#define EST_TRANSPOSE_FIXED_S 0.299e-3
double estimate_transpose(const sim_ctx *x, double entries) {
  return EST_TRANSPOSE_FIXED_S + cost_mem(&x->c->gpu, 16.0 * entries);
}

double estimate_plan_build(const sim_ctx *x, double entries) { return EST_PLAN_BUILD_ENTRY_S * entries; }

double estimate_plan_restore(const sim_ctx *x, double bytes) {
  double link = x->c->host.gbps * 1e9, rate = link > 0 && link < EST_PLAN_RESTORE_BPS ? link : EST_PLAN_RESTORE_BPS;
  return bytes / rate;
}

double estimate_builder_remake(const sim_ctx *x, double bytes) {
  double N = (double)x->p->layout.n_tokens, link = x->c->host.gbps * 1e9;
  return EST_BUILDER_TABLES_TOKEN_S * N + (link > 0 ? 8 * N / link : 0) + EST_DEVICE_ALLOC_CALLS_S +
         EST_DEVICE_ALLOC_GIB_S * bytes / 1073741824.0;
}

double estimate_plan_rebuild(const sim_ctx *x, double entries) {
  int per_node = x->c->gpus_per_node > 0 && x->c->gpus_per_node < x->W ? x->c->gpus_per_node : x->W;
  return EST_PLAN_REBUILD_ENTRY_S * (per_node > 0 ? per_node : 1) * entries;
}

double estimate_fp64_rate(const sim_ctx *x) { return x->c->gpu.fp64_tflops * 1e12 * EST_FP64_EFF; }

// A radix sort of pairs: 4 passes of 8-bit digits over the 8-byte pairs, each reading and writing them (Adinets &
// Merrill 2022, "Onesweep"), 64 bytes a pair, at the rate measured for our selection's sort (EST_SELECT_EFF).
double estimate_sort_pairs(const sim_ctx *x, double n) { return cost_mem(&x->c->gpu, 64.0 * n) / EST_SELECT_EFF; }

// ---------------------------------------------------------------------------------------------
// AdaSpa's block search (adaspa-online)
//
// A search, per layer, in the forward of a search step: the dense pass, a dense attention forward of the rank's
// queries against every key that leaves each row's LSE (exec: online_adaspa_*.c), unless the LSE cached from an
// earlier dense pass is of the same inputs -- never in training, where every step brings a new sample; then the
// LSE-cached search, which AdaSpa reports at about half a full attention (its fused LSE-cached online search; the
// cluster file's gpu.adaspa_search_ratio, measured by scripts/gpu/adaspa_run.sh, replaces it); the all-reduce of
// every head's kept and total mass at the base sparsity (the budgets), and the new mask's tile index. The two
// passes ride the ring as the attention does (the CPU backend's K|V shards; K alone would do); at long lengths they are
// compute-bound, so their transfers are taken as hidden under their compute. A mask serves search_every steps,
// so one simulated step carries 1 / search_every of a search (the average step of the cycle).
#define ADASPA_SEARCH_RATIO 0.5
// On Hopper (a GPU whose warp-specialized kernels cost_ws_sms knows) with blocks of 64 or 128 the executor's search
// takes its masses from a dense pass without output that also leaves the LSE (exec/online_adaspa_cuda.c,
// kernels/sparse_attn.h's sa_fwd_block_lse): the whole search, the two selections included, measured on one H200 at
// 0.772 / 0.762 of a dense forward at 64K / 128K with B = 128 and 0.848 / 0.861 with B = 64
// (results/kernels/2026-11-28-h200-adaspa-masses-from-dense-pass, bin/sparsering-bench-adaspa); the means of the two
// lengths, in place of the dense pass and the LSE-cached search. Other blocks or GPUs: the dense pass + the ratio.
#define ADASPA_OWN_LSE_B128 0.767
#define ADASPA_OWN_LSE_B64 0.855

// A search's compute as a share of one dense forward of the rank's queries (see above).
static double search_share(const sim_ctx *x) {
  adaspa_opts o;
  sr_error e;
  int block = pattern_spec_adaspa_opts(x->p->spec.pattern, &o, &e) == SR_OK ? o.block : 0;
  if (cost_ws_sms(x->c->gpu.name) > 0 && (block == 64 || block == 128))
    return block == 128 ? ADASPA_OWN_LSE_B128 : ADASPA_OWN_LSE_B64;
  return 1.0 + (x->c->gpu.adaspa_search_ratio > 0 ? x->c->gpu.adaspa_search_ratio : ADASPA_SEARCH_RATIO);
}

// Forward seconds of dense causal attention of rank r's queries against every key: its causal pairs (the sum of
// position + 1 over its tokens) as full tiles, at the full-tile rate.
static double dense_fwd_s(const sim_ctx *x, int r) {
  const layout *l = &x->p->layout;
  double pairs = 0;
  for (int64_t i = l->rank_run_begin[r]; i < l->rank_run_begin[r + 1]; i++) {
    double g = (double)l->runs[i].global, n = (double)l->runs[i].len;
    pairs += n * g + n * (n + 1) / 2;
  }
  work_count w = {0};
  w.full = (int64_t)ceil(pairs * (double)x->m->num_heads / (double)(TILE * TILE));
  w.pairs = pairs * (double)x->m->num_heads;
  return cost_attn_fwd(&x->c->gpu, x->m, &w);
}

int search_layer(sim_ctx *x, int layer, const float *entries, const int32_t *qkv, int32_t *out, sr_error *e) {
  int W = x->W;
  double every = (double)(x->p->spec.search_every > 0 ? x->p->spec.search_every : 1);
  double share = search_share(x);
  double *dur = calloc((size_t)W, sizeof *dur);
  if (!dur) return sr_internal_error(e, 0, "sim: out of memory");
  for (int r = 0; r < W; r++) dur[r] = share * dense_fwd_s(x, r) / every;  // dense pass + search
  int rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, qkv, x->c2, e);
  double gbps, lat;
  ctx_coll_link(x, &gbps, &lat);
  double bytes = 2.0 * (double)x->m->num_heads * 16;  // kept and total, 128-bit fixed point a head
  if (!rc) rc = ctx_collective(x, cost_allreduce(W, bytes, gbps, lat) / every, PHASE_COLLECTIVE, layer, x->c2, out, e);
  for (int r = 0; r < W && !rc; r++) dur[r] = estimate_index_build(x, entries[r]) / every;
  if (!rc) rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_INDEX, layer, -1, out, x->c2, e);
  if (!rc) memcpy(out, x->c2, (size_t)W * sizeof *out);
  free(dur);
  return rc;
}

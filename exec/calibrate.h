// calibrate.h — measuring the rates the simulator's cost model uses, on the machine at hand, and
// fitting them: link latency and bandwidth (time = latency + bytes / bandwidth, GSL weighted least
// squares), GEMM efficiency (cuBLAS) and attention kernel efficiency per tile kind and phase.
// `sparsering-exec calibrate` writes the results as a cluster file (plan/cluster.h format).
#ifndef SR_CALIBRATE_H
#define SR_CALIBRATE_H

#include <stdint.h>

#include "exec/comm.h"
#include "plan/cluster.h"
#include "plan/error.h"

// Fit seconds = latency + bytes / bandwidth over n >= 2 points by least squares weighted by
// 1/seconds^2 (relative errors: small messages count as much as large ones). Outputs microseconds
// and GB/s (1e9 B/s). Input error when the points do not determine a positive bandwidth.
int calib_fit_link(const double *bytes, const double *seconds, int n, double *latency_us, double *gbps, sr_error *e);

// Fit seconds = overhead + flops / rate over n >= 2 kernel timings of growing work by least squares
// weighted by 1/seconds^2; outputs the rate in TFLOP/s (the slope's inverse: what the simulator's
// efficiency x peak stands for, sim/cost.c) and the fixed time per call in microseconds (launch,
// prologue; not in the simulator's model, so it is reported and left out of the efficiency).
int calib_fit_rate(const double *flops, const double *seconds, int n, double *tflops, double *overhead_us, sr_error *e);

// The rate a long attention call sustains (TFLOP/s): FLOPs over seconds of the largest of n timed calls,
// fixed cost included. The simulator takes it as the kernel's efficiency rather than the fit's slope
// (calib_fit_rate), whose fixed cost long calls were expected to amortize and do not (docs/sim.md,
// "Sustained rates"): on 4 H100 the 256K-512K forwards ran at 572-575 TFLOP/s a GPU against a slope of 712
// and a largest call of 601; on 4 H200 the 512K-1M forwards at 350-357 against 381 and 358
// (results/exec/2026-11-27-h100x4-vs-context-parallel, results/exec/2026-11-22-h200x4-two-nodes).
double calib_sustained_rate(const double *flops, const double *seconds, int n);

// One-way time of a message between ranks a and b for each size (half the ping-pong round trip,
// median of reps). Collective over c (other ranks wait at the final barrier). Buffers are host
// memory on COMM_CPU and device memory on COMM_NCCL. seconds[] is filled on every rank.
int calib_p2p(comm *c, int a, int b, const int64_t *sizes, int n, int reps, double *seconds, sr_error *e);
// Time of an all-to-all in which every rank sends `sizes[i]` bytes in total (split evenly over the
// other ranks), median of reps; seconds[] on every rank.
int calib_alltoall(comm *c, const int64_t *sizes, int n, int reps, double *seconds, sr_error *e);

// The GPU this rank runs on: its name, memory (GiB), HBM bandwidth (GB/s, from the memory clock and bus width: 2
// transfers a clock) and L2 cache (MiB) from the device, and its dense bf16 and FP64 vector peaks (TFLOP/s) from the
// datasheets of the GPUs known here (calib_gpu_peaks; 0 when the name is not known). CUDA only.
int calib_gpu_identity(char *name, size_t size, double *mem_gib, double *hbm_gbps, double *l2_mb, double *peak_tflops,
                       double *fp64_tflops, sr_error *e);
// Datasheet peaks of a GPU by its device name (dense bf16 tensor-core and FP64 vector TFLOP/s): H200, H100
// SXM and PCIe, H800, A100, A800; 0 and 0 when unknown.
void calib_gpu_peaks(const char *name, double *peak_tflops, double *fp64_tflops);

// The L2 cache in MiB of a GPU by its device name (the whitepapers' "MB": A100 40, H100 SXM and PCIe 50, H200 50 as
// the H100 SXM's die); 0 when unknown.
double calib_gpu_l2(const char *name);

// SM count and shared memory an SM (KiB) of a GPU by its device name (datasheets: H100 SXM and PCIe, H200, H800,
// A100, A800); 0 and 0 when unknown.
void calib_gpu_sms(const char *name, int *sms, int *smem_kib);
// CTAs of the backward's bar kernel resident at once on the GPU named: with ws (the warp-specialized bars kernel,
// gpu.bar_walk_ws) its SMs, else the mma.sync bar kernel's (kernels/sparse_attn_bwd.cu: SMs x how many fit an SM's
// shared memory at head_dim); 0 when the GPU is not known.
int calib_bar_walk_ctas(const char *gpu_name, int head_dim, int ws);
// gpu.bar_walk_parts of the binary that runs: COST_BAR_SPLIT_PARTS where its default backward splits the bars' walks
// (variant 3 or later), 1 where one CTA walks a chunk whole, 0 without the CUDA backend (not known).
int calib_bar_walk_parts(void);
// Where a calibrated cluster file describes another bars' backward than the binary runs (its gpu.bar_walk_parts,
// gpu.bar_walk_ws and gpu.bar_walk_pairs against parts, ws and pairs: calib_bar_walk_parts, calib_bar_walk_ws and
// calib_bar_walk_pairs of the binary), a note for --predict saying so and what to rerun, in buf; NULL where they agree
// or the file does not say (parts 0) or is not calibrated. (A prediction on a stale calibration is still printed: the
// note says why it may be off.)
const char *calib_bars_note(const cluster_desc *c, int parts, int ws, int pairs, char *buf, size_t size);
// gpu.bar_walk_ws of the binary that runs: 1 where its default backward runs the bars on the warp-specialized kernel
// (variant 4 or later, SR_BWD_VARIANT included), else 0 (also without the CUDA backend).
int calib_bar_walk_ws(void);
// gpu.bar_walk_pairs of the binary that runs: 1 where its default backward runs the bars in pairs of compute chunks
// (variant 5, SR_BWD_VARIANT included), else 0 (also without the CUDA backend).
int calib_bar_walk_pairs(void);
// The calibration's bar backward call at `size` (calib_attn_index, kind bar): its FLOPs as calib_attn_time counts
// them and the 64-row steps its bar kernel's CTAs walk in all (kernels/bar_chunks.c: 2 a query tile of each chunk's
// union; with pairs, backward variant 5's, 2 a query tile of the union of each pair of a head's chunks, and of a lone
// last chunk's own).
int calib_bar_walk_shape(int size, int heads, int kv_heads, int head_dim, int pairs, double *flops, double *steps,
                         sr_error *e);
// The bars' backward walk from n >= 2 timed bar backward calls (their logged FLOPs and seconds; file names them in
// messages, NULL when they were just timed): the slope of time
// over their walks' steps (calib_fit_rate) times the resident CTAs, in microseconds a CTA spends on one 64-row step
// (gpu.bar_walk_us; exec/calib_walk.c says why it is an upper bound). ws, pairs: the bar kernel that was timed
// (gpu.bar_walk_ws, gpu.bar_walk_pairs: its resident CTAs, and with both its pair CTAs' merged walks). 0 for a GPU
// not known here; input error when a point's FLOPs match no size of the calibration's index for this head shape.
int calib_bar_walk_fit(const char *file, const double *flops, const double *seconds, int n, int heads, int kv_heads,
                       int head_dim, const char *gpu_name, int ws, int pairs, double *walk_us, sr_error *e);

#define CALIB_SIZES 3  // work sizes per (phase, kind) that the rate fit takes
// Measured kernel efficiencies (fraction of peak_tflops), CUDA only.
typedef struct {
  double gemm;            // a 12 ms burst's rate / peak (the clock at boost)
  double gemm_sustained;  // the rate held over gemm_seconds of back-to-back GEMMs / peak (0: not measured)
  double attn[2][3];      // [fwd, bwd][full, partial, bar]: sustained rate (calib_sustained_rate) / peak
  double gemm_tflops, gemm_sustained_tflops, attn_tflops[2][3];  // the rates behind them
  double attn_slope_tflops[2][3];  // the fit's slope (calib_fit_rate), reported
  double attn_overhead_us[2][3];   // fitted fixed time per kernel call
  double flops[2][3][CALIB_SIZES], seconds[2][3][CALIB_SIZES];  // the timings the fits took
} calib_kernels;

// Run cuBLAS bf16 GEMMs (a short burst, then gemm_seconds back to back, half of it timed; 0: no sustained rate)
// and the sparse attention kernels on synthetic tile indices (one kind of tile each, CALIB_SIZES amounts of work)
// on this rank's GPU; fit each (phase, kind) with calib_fit_rate and take its sustained rate
// (calib_sustained_rate); efficiencies relative to peak_tflops.
int calib_kernels_measure(comm *c, double peak_tflops, int heads, int kv_heads, int head_dim, double gemm_seconds,
                          calib_kernels *k, sr_error *e);

// Fit the time a ring step costs beyond its kernel's work (sim/cost.c, cost_ring_step) over n >= 2
// measurements: extra_s[i] = steps[i] x fixed + cells[i] x per_cell, by least squares weighted by
// 1 / total_s[i]^2 (relative errors; total_s the measured times the extras are part of). Outputs
// microseconds; a negative coefficient (noise around zero) is reported as 0. Input error when the
// measurements do not determine both (steps and cells proportional, or fewer than 2 points).
int calib_fit_ring_step(const double *steps, const double *cells, const double *extra_s, const double *total_s, int n,
                        double *step_us, double *cell_us, sr_error *e);

// Fit seconds = fixed + cells x walk + flops / rate x (1 + l2_slow x beyond) over n >= 3 timed calls by least
// squares weighted by 1 / seconds^2 (relative errors): flops the FLOPs of a call's FULL tiles, cells its (query tile,
// head) walks, beyond[i] whether its keys' K and V outgrow the L2 cache (sim/cost.h, cost_attn_l2; NULL: none),
// seconds what remains of its time beyond its other tiles at their rates. Outputs TFLOP/s, microseconds (the walk's
// and the call's fixed time, the latter reported only: the ring-step fit measures a step's fixed time) and l2_slow, a
// fraction of a FULL tile's time. Where the walk comes out negative (longer walks no cheaper a tile: the data show no
// cost per walk), it is 0 and the rate is refitted with the fixed time over the calls marked layer[i] alone, the ones
// shaped like a layer's. l2_slow is fitted only where the layer calls hold some beyond the cache and some within, and
// is 0 otherwise or where it comes out no loss (the fit is then the one without it, bit for bit). Input error when the
// calls do not separate the terms or give no positive rate.
int calib_fit_walk(const double *flops, const double *cells, const double *seconds, const int *layer, const int *beyond,
                   int n, double *tflops, double *walk_us, double *fixed_us, double *l2_slow, sr_error *e);

#define CALIB_LAYER_LENGTHS 8                           // shard lengths the layer-shaped calls are timed at, at most
#define CALIB_LAYER_CALLS (2 + 2 * CALIB_LAYER_LENGTHS)  // with the two short walks
// Attention calls shaped like a layer's (exec/calib_layer.c): two short walks of FULL tiles on 32K tokens ("band8",
// "band32": 8 and 32 key tiles a query tile, the kernel benchmark's index, calib_attn_index sizes 1 and 4) and, at
// each shard length L, the two calls a ring step of a dense causal layer makes: its L queries against an earlier
// shard of L keys ("off": every tile FULL, L / 128 key tiles a query tile) and against its own keys ("diag": the
// causal diagonal block, FULL below the diagonal and PARTIAL on it). Work as the simulator counts it: tiles summed
// over heads, cells = cost_ring_cells.
typedef struct {
  int n;
  char shape[CALIB_LAYER_CALLS][8];
  int64_t tokens[CALIB_LAYER_CALLS];  // the call's queries (and keys)
  double full[CALIB_LAYER_CALLS], partial[CALIB_LAYER_CALLS], cells[CALIB_LAYER_CALLS];
  double seconds[2][CALIB_LAYER_CALLS];  // [fwd, bwd] measured, one call
  double model_s[2][CALIB_LAYER_CALLS];  // the fitted cost model's time of the call (calib_layer_fit)
  double old_s[2][CALIB_LAYER_CALLS];    // the time the efficiencies given to the fit (no walks) say: the rule before
  int beyond[CALIB_LAYER_CALLS];         // the call's keys' K and V outgrow the L2 cache (cost_attn_l2; set by the fit)
  double tflops[2], walk_us[2], fixed_us[2], l2_slow[2];  // the fit per phase (calib_fit_walk)
} calib_layer;

// Parse --layer-lengths: a comma-separated list of token counts ("16K,32K,64K,128K"), each a multiple of 128 in
// [1K, 256K], at most CALIB_LAYER_LENGTHS; "none": no layer-shaped calls (*n = 0).
int calib_layer_lengths_parse(const char *text, int64_t *lengths, int *n, sr_error *e);
// Append the call `shape` ("band8", "band32", "off", "diag") over `tokens` queries to out (index out->n, times 0)
// with its work for `heads` query heads. Input error for an unknown shape, a band not on 32K tokens, or a full list.
int calib_layer_add(calib_layer *out, const char *shape, int64_t tokens, int heads, sr_error *e);
// Time, on this rank's GPU, the two short walks and the off and diag calls at each length, forward and backward (mean
// of 5 after 2 warm-ups), on random inputs (uniform in [-1, 1), as attn's layers run: constant inputs draw less power
// and run faster). CUDA only.
int calib_layer_measure(const int64_t *lengths, int n_lengths, int heads, int kv_heads, int head_dim, calib_layer *out,
                        sr_error *e);
// Fit each phase's FULL-tile rate, walk and loss beyond the L2 cache over out's calls (calib_fit_walk; layer-shaped:
// off and diag; beyond the cache: the calls whose keys do, at gpu's l2_mb and head_dim, cost_attn_l2's test), their
// PARTIAL tiles charged at gpu's partial efficiencies as the simulator charges them; fills beyond, tflops, walk_us,
// fixed_us, l2_slow, model_s, and old_s (gpu's efficiencies as given, no walks).
int calib_layer_fit(calib_layer *out, const gpu_desc *gpu, int heads, int kv_heads, int head_dim, sr_error *e);

#define CALIB_RING_CONFIGS 10  // (layout, ring size) pairs the ring-step benchmark runs
// A layer of dense causal attention split into the steps one rank of a ring runs, on this GPU.
typedef struct {
  int n;
  char layout[CALIB_RING_CONFIGS][32];  // "contiguous", "zigzag", "striped:128"
  int world[CALIB_RING_CONFIGS];
  double steps[CALIB_RING_CONFIGS], cells[CALIB_RING_CONFIGS];
  double measured_s[2][CALIB_RING_CONFIGS];  // [fwd, bwd] all the rank's steps, one pass
  double kernel_s[2][CALIB_RING_CONFIGS];    // the cost model's kernel time of the same steps (sim/cost.c)
  double step_us[2], cell_us[2];             // the fit (calib_fit_ring_step)
} calib_ring;

// Time, on this rank's GPU, the ring steps of a dense causal layer (32K tokens, the given head shape) for
// the contiguous, zigzag and striped:128 layouts on rings of 1 to 8 ranks (the queries of the last rank
// against every source shard, one kernel call a step, as the executor runs them), forward and backward;
// subtract the kernel time the cost model gives on gpu's efficiencies and walks and fit the ring-step costs per
// phase. Inputs random (random_inputs, with the layer-shaped calls' efficiencies: the same inputs as the kernel time
// they are set against) or constant (before them: calibrate then passes the fits' slopes, calib_kernels.
// attn_slope_tflops, of calls on constant inputs). CUDA only.
int calib_ring_measure(const gpu_desc *gpu, int heads, int kv_heads, int head_dim, int random_inputs, calib_ring *out,
                       sr_error *e);
// The host half of calib_ring_measure for configuration i (0 .. CALIB_RING_CONFIGS-1): its layout name, ring
// size, steps, cells and the cost model's kernel time on gpu's efficiencies and walks (out->kernel_s[.][i]); no GPU.
int calib_ring_config_model(const gpu_desc *gpu, int i, int heads, int kv_heads, int head_dim, calib_ring *out,
                            sr_error *e);
// Fit the ring-step costs (out->step_us, cell_us) from out's measured and kernel times (configurations 0 .. n-1).
int calib_ring_fit(calib_ring *out, sr_error *e);

// Calibrate again from the points a calibration logged (`calibrate --log`, CSV measure,amount,us[,us]): the
// attention efficiencies by the current rule (calib_sustained_rate; GEMM, links, GPU identity kept from cl), the
// bars' backward walk (calib_bar_walk_fit, for the GPU cl names), where the log holds layer-shaped calls
// (layer_SHAPE,TOKENS,fwd_us,bwd_us) the FULL-tile rates and walks from them (calib_layer_fit) and, when the log holds
// ring rows, the ring-step costs as calibrate fits them (against the kernel time at the fits' slopes, or with
// layer-shaped calls at the efficiencies and walks written). Input error naming the file when a (phase, kind) has
// fewer than 2 points.
int calib_refit_from_log(const char *path, const char *csv, cluster_desc *cl, int heads, int kv_heads, int head_dim,
                         sr_error *e);

// The rate a training step's attention holds (gpu.efficiency.attn_sustained): a dense causal layer-shaped call, its
// diag call at one of the layer lengths, forward + backward back to back for seconds against the same call's short
// timing (calib_layer_measure), which runs at the clock's boost (sim/cost.c, cost_attn_held).
// The length held: the listed one nearest 32K tokens (a tie: the longer), the shape of the finding it models; 0
// when n is 0.
int64_t calib_attn_held_length(const int64_t *lengths, int n);
// The ratio of the held rate to the burst's: burst_s / held_s (the same call's seconds, forward + backward, in short
// calls and held), at most 1 (a held call no faster than its burst: above, timing noise); 0 when either is not
// positive (not measured).
double calib_attn_sustained(double burst_s, double held_s);
// Run the diag call at `tokens` (calib_layer_measure's, same inputs) forward then backward back to back for
// `seconds`: the first half untimed (the board reaches its power limit), the second timed; *pair_s the seconds of one
// forward + backward in the timed half. gemm_s > 0: after each pair, gemm_s seconds of the projections' GEMMs
// (calib_gemm_load), as a training step interleaves them, only the attention timed (so `seconds` of attention take
// about twice as long); those GEMMs are timed apart, their rate in the timed half into *gemm_tflops (0 without them).
// CUDA only.
int calib_attn_held_measure(int64_t tokens, int heads, int kv_heads, int head_dim, double seconds, double gemm_s,
                            double *pair_s, double *gemm_tflops, sr_error *e);
// cuBLAS bf16 GEMMs of a layer's projection shapes in turn, queued on stream 0 for about `seconds` (each GEMM timed
// once when the load is made). CUDA only.
typedef struct calib_gemm_load calib_gemm_load;
int calib_gemm_load_new(calib_gemm_load **out, sr_error *e);
int calib_gemm_load_queue(calib_gemm_load *g, double seconds, double *flops, sr_error *e);
void calib_gemm_load_free(calib_gemm_load *g);

#endif

// cost.h — the cost model: seconds for each kind of work on one GPU and for each kind of transfer.
//
// Compute: FLOPs / (peak x efficiency of that kind of work); memory-bound ops: bytes / (HBM x eff);
// point-to-point: latency + bytes / bandwidth (Hockney); collectives by the standard ring / tree
// algorithm costs (Thakur, Rabenseifner & Gropp 2005, with NCCL's bus-bandwidth factors). Every
// formula cites its source in cost.c. Units: seconds, bytes, FLOPs, GB/s = 1e9 B/s.
#ifndef SR_COST_H
#define SR_COST_H

#include <math.h>

#include "plan/cluster.h"
#include "plan/model.h"
#include "plan/tiles.h"

// FLOPs of one TILE x TILE attention tile (forward, one query head): 4 * TILE^2 * head_dim.
double cost_tile_flops(const model_config *m);
// FLOPs of one bar entry (TILE query rows x one gathered key, forward, one head): 4 * TILE * head_dim.
double cost_bar_flops(const model_config *m);
// FLOPs of one run of the forward form (64 keys against TILE rows).
double cost_run_flops(const model_config *m);
// Forward attention seconds of a work count (full and partial tiles, bars) on one GPU.
double cost_attn_fwd(const gpu_desc *g, const model_config *m, const work_count *w);
// Backward attention seconds of a work count (MODEL_ATTN_BWD_RATIO x the forward FLOPs at the backward efficiencies).
double cost_attn_bwd(const gpu_desc *g, const model_config *m, const work_count *w);
// The constants of cost_attn_fwd / cost_attn_bwd for one GPU and model, so that costing millions of work counts
// (a ring step per rank and source at a thousand ranks) does not recompute them: cost_attn_time(&a, w) is
// cost_attn_fwd(g, m, w) (or _bwd), the same operations in the same order, so the same bits.
typedef struct {
  double ratio;                  // FLOPs relative to the forward (1, or MODEL_ATTN_BWD_RATIO)
  double tile, run, bar;         // FLOPs of a tile, a run, a bar (cost_tile_flops, ...)
  double full, partial, bars;    // peak x efficiency of each kind (FLOP/s)
  int zero;                      // no peak: every count costs 0
  double l2_keys;                // keys whose K and V of one KV head fill the L2 cache (cost_attn_l2; 0: none given)
  double l2_slow;                // gpu.attn_l2 of the phase where the file gives the L2, else 0
} cost_attn_rates;
// The rates of the forward (bwd = 0) or the backward (bwd = 1).
void cost_attn_rates_init(const gpu_desc *g, const model_config *m, int bwd, cost_attn_rates *a);
// Seconds of a work count at rates a (cost_attn_fwd / cost_attn_bwd's formula).
static inline double cost_attn_time(const cost_attn_rates *a, const work_count *w) {
  if (a->zero) return 0;
  double t = 0;
  if (w->full) t += a->ratio * (double)w->full * a->tile / a->full;
  if (w->partial) t += a->ratio * (double)w->partial * a->tile / a->partial;
  if (w->runs) t += a->ratio * (double)w->runs * a->run / a->partial;
  if (w->bars) t += a->ratio * (double)w->bars * a->bar / a->bars;
  return t;
}
// Seconds a kernel call's FULL tiles take beyond cost_attn_time's when the K and V of its `keys` keys for one KV head
// (bf16) outgrow the GPU's L2 cache: gpu.attn_l2 of the phase times their time at the FULL rate; 0 when the call's
// keys fit (keys <= a->l2_keys) or the file gives no gpu.l2_mb or gpu.attn_l2, so that files without them cost the same
// bits as before (sim/cost.c says why a step at the cache's size). keys: the call's key count, the source shard's.
// (Inline: costed for every rank and step of a layer.)
static inline double cost_attn_l2(const cost_attn_rates *a, const work_count *w, double keys) {
  if (a->zero || !(a->l2_slow > 0) || !w->full || !(keys > a->l2_keys)) return 0;
  return a->l2_slow * (a->ratio * (double)w->full * a->tile / a->full);
}
// The bars' share of cost_attn_time(a, w): seconds of w's bar entries at a's bar rate.
static inline double cost_attn_bar_time(const cost_attn_rates *a, const work_count *w) {
  return a->zero || !w->bars ? 0 : a->ratio * (double)w->bars * a->bar / a->bars;
}
// Seconds a backward call with bars takes beyond the work model (cost_attn_time charges its bars bar_s seconds): the
// bar kernel (kernels/sparse_attn_bwd.cu, sa_bwd_dkdv_kernel with BAR) runs one CTA per chunk of up to 64 bar keys
// of one head (kernels/bar_chunks.c), which walks every query tile any of its keys is listed in, 64 rows at a time;
// the call lasts at least its longest walk. A vertical line is listed in every query tile after it, so the first
// chunk of a head's keys walks nearly all the rank's q_tiles (measured on our vs-topp, vs-preset, vs-online and
// window layers: 251-255 of 256 query tiles at 128K on 4 ranks, 1022 of 1024 and 479 of 512 at 256K and 128K on 2;
// results/sim/2026-11-27-multi-gpu-step-predict): 2 q_tiles chunks of gpu.bar_walk_us each. Where the call has
// enough chunks to fill the GPU the work model's time is the longer (a lower bound each: Graham 1969).
// Where the file says which walk its binary runs (gpu.bar_walk_parts), the chunks' walks come in waves instead
// (cost_bar_waves): `heads` the call's query heads, `slots` the bar kernel's resident CTAs (cost_bar_ctas).
// (Inline: costed for every rank and step of a layer.)
// Where that walk is split (gpu.bar_walk_parts > 1) the bars' dQ pass is charged too (cost_bar_dq_cells).
// Where the file names the bars in pairs of compute chunks (gpu.bar_walk_pairs, backward variant 5) the waves are of
// pair CTAs, each walking the union of two chunks' query tiles once, and a head's lone last chunk (sim/cost.c,
// cost_bar_grid_of); the floor without a named walk stays one walk of 2 q_tiles steps (a pair's union is the same
// tiles).
// The split walk's most parts a chunk (BB_MAX_PARTS of kernels/sparse_attn_bwd_bars.cu, the default backward since
// 34159d3; variant 4 takes the same rule): what `calibrate` writes for a binary that splits, `--bars-walk split` reads.
#define COST_BAR_SPLIT_PARTS 16
// The bar kernel's CTAs of a call as cost_bar_waves counts them (the same chunks and parts; with gpu.bar_walk_pairs
// the pair CTAs and lone last chunks, sim/cost.c): the CTAs that hold work, their 64-row steps in all, the longest
// CTA's steps, and the most parts a walk is cut into.
// chunks: the call's compute chunks, whose walks' parts are its launch (bars_ws_launch: chunks x
// COST_BAR_WS_SPLITS CTAs, those past a walk's parts, or at an odd place with pairs, returning at once).
typedef struct {
  double ctas, steps, longest, parts, chunks;
} cost_bar_grid;
void cost_bar_grid_of(const gpu_desc *g, double bars, double q_tiles, double heads, double slots, cost_bar_grid *r);
double cost_bar_waves(const gpu_desc *g, double bars, double q_tiles, double heads, double slots, double bar_s);
// The same with the call's compute chunks and their walks' 64-row steps in all as the executor forms them (chunks > 0:
// sim/bar_walks.h counts them from the pattern; 0: the work counts' chunks above), where the bars then last at least
// those steps at the rate's steps (sim/cost.c says how).
void cost_bar_grid_chunks(const gpu_desc *g, double bars, double q_tiles, double heads, double slots, double chunks,
                          double steps, cost_bar_grid *r);
double cost_bar_waves_chunks(const gpu_desc *g, double bars, double q_tiles, double heads, double slots, double bar_s,
                             double chunks, double steps);
// The warp-specialized bars' launch (kernels/sparse_attn_bwd_ws.cu, bars_ws_launch): COST_BAR_WS_SPLITS CTAs a compute
// chunk, whatever its walk's parts.
#define COST_BAR_WS_SPLITS 16
// The bars' backward rate of their walk (gpu.bar_walk_us, on a GPU whose SMs cost_ws_sms knows): on the
// warp-specialized kernel (gpu.bar_walk_ws) FLOP/s of bar entries (at cost_attn_rates's ratio and bar FLOPs a) when
// each of the GPU's SMs runs one CTA's 64-row steps of gpu.bar_walk_us, each step 64 x 64 keys (128 with
// gpu.bar_walk_pairs) of listed entries, as in calibrate's bar calls, from whose slope the step is fitted; on variant
// 3's split walk (gpu.bar_walk_parts > 1 without ws) the same on the kernel's resident CTAs at calibrate's head_dim
// (cost_bar_ctas); 0 where the file does not give it, or names no split walk (the bars then at
// gpu.efficiency.attn_bwd_bar). sim/cost.c says why not the sustained rate of the largest call.
double cost_bar_walk_rate(const gpu_desc *g, double ratio, double bar_flops);
// Seconds a CTA of that launch which returns at once holds its SM: the time of calibrate's largest bar call (its
// FLOPs at gpu.efficiency.attn_bwd_bar) less its walk at cost_bar_walk_rate (on variant 3 also less its dQ pass's
// waves), over its such CTAs in waves of the SMs (variant 3: of its resident CTAs) (exec/calib_attn.c's index:
// COST_CALIB_BAR_QTILES x TILE keys a head, COST_CALIB_BAR_KEYS listed a query tile, chunks of 64 keys listed in the
// same tiles; at COST_CALIB_HEAD_DIM); 0 where cost_bar_walk_rate is, or the call's time is all walk.
double cost_bar_empty_s(const gpu_desc *g);
// Seconds the bars' dQ pass of a backward call takes beyond what the bars' rate charges of it: the call's (head, query
// tile) cells with bars (at most min(bars, q_tiles x heads)), one CTA each and one an SM, in waves of the GPU's SMs of
// COST_BAR_DQ_WAVE_US each, less the calibration's largest bar call's waves in proportion to the call's bar entries
// (COST_CALIB_BAR_*: exec/calib_attn.c's index at its largest size), none of them at the walk's rate
// (cost_bar_walk_rate: the calibration's waves are in its fixed time); 0 on a GPU of unknown SM count (sim/cost.c says
// where the figures come from).
#define COST_BAR_DQ_WAVE_US 13.02
#define COST_CALIB_BAR_QTILES 256  // exec/calib_attn.c: N_TOKENS / TILE
#define COST_CALIB_BAR_KEYS 1024   // exec/calib_attn.c: BARS_PER_QTILE x 4 (calibrate's largest size, CALIB_SIZES 3)
#define COST_CALIB_HEAD_DIM 128    // exec/cmd_calibrate.c: --head-dim's default, the calls' head_dim
double cost_bar_dq_cells(const gpu_desc *g, double bars, double q_tiles, double heads);
static inline double cost_bar_walk_chunks(const gpu_desc *g, const work_count *w, double q_tiles, double heads,
                                          double slots, double bar_s, double chunks, double steps) {
  if (!w->bars || !(g->bar_walk_us > 0)) return 0;
  if (g->bar_walk_parts > 0 && slots > 0 && heads > 0 && q_tiles > 0)
    return cost_bar_waves_chunks(g, (double)w->bars, q_tiles, heads, slots, bar_s, chunks, steps);
  double walk = 2.0 * q_tiles * g->bar_walk_us * 1e-6;
  return walk > bar_s ? walk - bar_s : 0;
}
// cost_bar_walk_chunks with the work counts' chunks (a head's bars over q_tiles x 64, each walking 2 q_tiles steps).
static inline double cost_bar_walk(const gpu_desc *g, const work_count *w, double q_tiles, double heads, double slots,
                                   double bar_s) {
  return cost_bar_walk_chunks(g, w, q_tiles, heads, slots, bar_s, 0, 0);
}
// Seconds the warp-specialized bars kernel (gpu.bar_walk_ws) lasts at least by its HBM traffic: each step of a walk
// loads its 64 query rows of Q and dO (bf16) and adds its dQ rows into the fp32 output by the TMA's reduction (read and
// written), and a head whose bar keys are one chunk walks each of its query tiles once, so nothing is reused from the
// L2 between chunks: the call's (head, query tile) cells with bars (at most min(bars, q_tiles x heads)) x TILE rows x
// head_dim x 12 bytes at the memory rate (sim/cost.c says where it binds); 0 unless the file names that kernel. The
// same with its chunks in pairs (gpu.bar_walk_pairs): a pair's step loads its rows once for both chunks.
double cost_bar_ws_traffic(const gpu_desc *g, double bars, double q_tiles, double heads, double head_dim);
// SM count and shared memory an SM (KiB) of a GPU by its device name (NVIDIA's datasheets and tuning guides: H100
// SXM and PCIe, H200, H800, A100, A800); 0 and 0 when unknown.
void cost_gpu_sms(const char *name, int *sms, int *smem_kib);
// The SMs of the GPU named where the warp-specialized kernels run (Hopper, sm_90a: the GPUs of 228 KiB of shared memory
// an SM that cost_gpu_sms knows), else 0: cost_cta_floor's waves, measured on those kernels only.
int cost_ws_sms(const char *gpu_name);
// CTAs of the backward's bar kernel resident at once on the GPU named (SMs x how many fit an SM's shared memory at
// head_dim); 0 when the GPU is not known.
int cost_bar_ctas(const char *gpu_name, int head_dim);
// The bar kernel's resident CTAs that cost_bar_walk's waves take for the binary the file describes: 0 where the file
// does not say its walk (gpu.bar_walk_parts 0: the floor of one whole walk), the GPU's SMs where its bars run on the
// warp-specialized kernel (gpu.bar_walk_ws: ~200 KiB of shared memory and 384 threads a CTA, one an SM; its pair
// CTAs, gpu.bar_walk_pairs, the tile kernel's shared memory, one an SM as well), else cost_bar_ctas.
int cost_bar_slots(const gpu_desc *g, int head_dim);
// The shortest CTAs of the warp-specialized tile kernels (issue 24; sim/cost.c says where the figures come from). The
// forward (kernels/sparse_attn_fwd_ws.cu) runs one CTA a (head, query tile) cell, the backward's tiles
// (kernels/sparse_attn_bwd_ws.cu) one a (KV head, key tile) cell and part of its chunks (COST_BWD_WS_PARTS parts), each
// CTA alone on its SM (about 160-200 KiB of shared memory); a CTA holding almost nothing still takes a fixed time
// (its loads, its products' latency and its epilogue, nothing beside it to overlap them), so a call lasts at least
// ceil(CTAs / SMs) of those times. COST_FWD_CTA_US and COST_BWD_CTA_US are those times a CTA, measured where a layer
// keeps 0.011% of its pairs (two partial tiles and about four bar keys a (head, query tile) cell).
#define COST_FWD_CTA_US 20.71
#define COST_BWD_CTA_US 38.70
#define COST_BWD_WS_PARTS 4  // bs_launch's splits a (KV head, key tile) cell (kernels/sparse_attn_bwd_ws.cu)
// Seconds a kernel call of `ctas` such CTAs lasts at least: ceil(ctas / sms) x cta_us; 0 where sms is 0 (a GPU whose
// SM count cost_gpu_sms does not know) or the call has none. (Inline: costed for every rank and step of a layer.)
static inline double cost_cta_floor(double cta_us, double ctas, double sms) {
  return sms > 0 && ctas > 0 ? ceil(ctas / sms) * cta_us * 1e-6 : 0;
}
// The CTAs of the backward's tile kernel that hold work, for a work count: its tile entries, at most the call's
// k_tiles x kv_heads cells in COST_BWD_WS_PARTS parts each (an upper bound where a part holds several entries: the
// work counts do not say how the entries spread).
static inline double cost_bwd_ctas(const work_count *w, double k_tiles, double kv_heads) {
  double entries = (double)(w->full + w->partial), most = k_tiles * kv_heads * COST_BWD_WS_PARTS;
  return entries < most ? entries : most;
}
// Forward attention FLOPs the kernels execute for a work count (tiles computed whole, bars).
double cost_attn_exec_flops(const model_config *m, const work_count *w);
// Seconds the (query tile, head) walks of a kernel call cost beyond its tiles' work (phase 0 forward, 1 backward):
// cells x gpu.attn_walk_us; 0 unless the cluster file gives it (sim/cost.c says why a walk has a cost of its own).
static inline double cost_attn_walks(const gpu_desc *g, int phase, double cells) {
  double w = g->attn_walk_us[phase ? 1 : 0];
  return w > 0 && cells > 0 ? cells * w * 1e-6 : 0;
}
// Seconds a ring step adds beyond its kernel's tiles (phase 0 forward, 1 backward): the fixed cost of a step
// (launch, waiting on the received shard) and a cost per (query tile, head) cell the kernel runs (prologue,
// epilogue, the forward's LSE merge); 0 unless the cluster file gives them (gpu.ring_step); plus the kernel's own
// walks (cost_attn_walks, where the file gives gpu.attn_walk: added only then, so files without it cost the same
// bits as before it existed).
// (Inline, as cost_ring_cells: costed for every rank and step of a layer.)
static inline double cost_ring_step(const gpu_desc *g, int phase, double cells) {
  int p = phase ? 1 : 0;
  double t = (g->ring_step_us[p] + (cells > 0 ? cells : 0) * g->ring_cell_us[p]) * 1e-6;
  return g->attn_walk_us[p] > 0 ? t + cost_attn_walks(g, p, cells) : t;
}
// (query tile, head) cells a step's kernel runs for a work count: each cell with work holds an entry, and
// there are at most q_tiles x heads of them (an upper bound where cells hold several entries).
static inline double cost_ring_cells(const work_count *w, double q_tiles, double heads) {
  double entries = (double)(w->full + w->partial + w->bars + w->runs), most = q_tiles * heads;
  return entries < most ? entries : most;
}
// Seconds of a GEMM of `flops` FLOPs.
double cost_gemm(const gpu_desc *g, double flops);
// The share of the calibrated GEMM rate that a training step's GEMMs keep over seconds of back-to-back work, for a
// cluster file that does not give that rate (gpu.efficiency.gemm_sustained; sim/cost.c says where it comes from).
#define COST_GEMM_SUSTAINED 0.81
// Seconds of a training step's GEMMs of `flops` FLOPs: at the file's sustained GEMM rate when it gives one, else
// cost_gemm at COST_GEMM_SUSTAINED of the calibrated rate.
double cost_gemm_step(const gpu_desc *g, double flops);
// The share of the short calls' attention rate that a training step's attention keeps, held over seconds between the
// step's GEMMs, for a cluster file that does not give it (gpu.efficiency.attn_sustained): the mean of the three
// calibrations that timed it (sim/cost.c, cost_attn_held, says where they come from).
#define COST_ATTN_SUSTAINED 0.91
// The GEMMs' rate between held attention calls over their rate held back to back (gpu.efficiency.gemm_sustained as
// calibrate timed it before it timed attention held): a step alternates the two (sim/cost.c, cost_attn_held).
#define COST_GEMM_BETWEEN 1.044
// The GPU a training step's attention calls run on: g with its attention efficiencies (full, partial, bar, forward and
// backward; an absent one taken as 1, as cost_attn_rates_init does) times gpu.efficiency.attn_sustained, or
// COST_ATTN_SUSTAINED where a file that calibrate measured (`calibrated`: the cluster's calibration.measured) gives
// none, and then 1: applied (a file giving 1 costs the short calls' bits); where such a file gives no attn_sustained
// its gemm_sustained was timed back to back, so it is taken times COST_GEMM_BETWEEN. A file calibrate did not write
// (the shipped guesses, hand-made files) without the ratio is left as it is, the same bits as before the default.
// Single-layer runs (predict_attention) are short calls, as the calibration's, and set attn_sustained to 1.
void cost_attn_held(gpu_desc *g, int calibrated);
// Seconds of a memory-bound op that moves `bytes` bytes through HBM.
double cost_mem(const gpu_desc *g, double bytes);
// Seconds of a compute task of `compute` s that runs while a comm kernel of `comm` s shares the SMs.
// Communication kernels occupy SMs, so overlapped compute slows down (measured in "Optimizing
// communication-computation overlap", Rashidi et al. 2021; NCCL uses up to 32 SMs per channel set).
// Compute runs at 1/slowdown of its speed while the comm kernel of `comm` seconds runs beside it and at
// full speed after: if it ends inside the comm window it takes compute*slowdown, else comm + the rest.
// (Inline: a ring pass costs millions.)
static inline double cost_under_comm(double compute, double comm, double slowdown) {
  if (slowdown <= 1 || comm <= 0 || compute <= 0) return compute;
  if (compute * slowdown <= comm) return compute * slowdown;
  return comm + (compute - comm / slowdown);
}

// Point-to-point transfer of `bytes` over a link: latency + bytes / bandwidth.
double cost_p2p(const link_desc *l, double bytes);
// Ring all-reduce of `bytes` per rank over n ranks at bus bandwidth gbps and per-hop latency lat_us.
double cost_allreduce(int n, double bytes, double gbps, double lat_us);
// Ring reduce-scatter (`bytes` = the full buffer per rank before scattering).
double cost_reduce_scatter(int n, double bytes, double gbps, double lat_us);
// Ring all-gather (`bytes` = the full gathered buffer per rank).
double cost_allgather(int n, double bytes, double gbps, double lat_us);
// Broadcast of `bytes` from one root: pipelined (bandwidth term once) over a binomial tree's latency.
double cost_broadcast(int n, double bytes, double gbps, double lat_us);
// Pairwise-exchange all-to-all: each rank holds `bytes` and sends (n-1)/n of it away.
double cost_alltoall(int n, double bytes, double gbps, double lat_us);

// Bus bandwidth (GB/s) and latency (us) of a collective over `n` ranks spread over `nodes` nodes of
// cluster c: NVLink inside one node; across nodes the slower of NVLink and the node's NICs.
void cost_collective_link(const cluster_desc *c, int n, int nodes, double *gbps, double *lat_us);
// All-to-all over n ranks in groups of `per_node` per node: the inter-node share goes through each GPU's
// part of the NICs, the intra-node share over NVLink; the two proceed in parallel.
double cost_alltoall_cluster(const cluster_desc *c, int n, int per_node, double bytes);

#endif

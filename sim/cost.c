// cost.c — the cost formulas (see cost.h). Each formula names its source; the efficiencies and link
// figures come from the cluster description (measured by calibration where available).
#include "sim/cost.h"

#include <math.h>
#include <string.h>

// ---- compute -----------------------------------------------------------------------------------

// FlashAttention-2 (Dao 2023, sec. 4.1) counts 4 * rows * cols * head_dim FLOPs for a forward tile:
// QK^T and PV, one multiply-add (2 FLOPs) per element each.
double cost_tile_flops(const model_config *m) { return 4.0 * TILE * TILE * (double)m->head_dim; }

// A bar is one gathered key column against the TILE rows of a query tile: the same count with cols = 1.
double cost_bar_flops(const model_config *m) { return 4.0 * TILE * (double)m->head_dim; }

// A run (plan/tiles_runs.c) is up to 64 keys against the TILE rows: the same count with cols = 64.
double cost_run_flops(const model_config *m) { return 4.0 * TILE * 64 * (double)m->head_dim; }

double cost_attn_exec_flops(const model_config *m, const work_count *w) {
  return (double)(w->full + w->partial) * cost_tile_flops(m) + (double)w->runs * cost_run_flops(m) +
         (double)w->bars * cost_bar_flops(m);
}

// Roofline-style compute time (Williams, Waterman & Patterson 2009): FLOPs / (peak x achieved fraction),
// with one achieved fraction per kind of tile, since masked (PARTIAL) tiles and gathered bars run far
// below unmasked tiles (ANCHORS.md: FlexAttention evaluates touched blocks element by element). A
// calibrated fraction is the sustained rate of the calibration's largest call (exec/calibrate.h,
// calib_sustained_rate), not its fit's slope: long calls run at the former (4 x H100, 256K-512K forwards:
// 572-575 TFLOP/s a GPU against a slope of 712 and a largest call of 601,
// results/exec/2026-11-27-h100x4-vs-context-parallel; docs/sim.md, "Sustained rates").
// (cost_attn_rates_init and cost.h's cost_attn_time hold the formula; both entry points below use them.)
void cost_attn_rates_init(const gpu_desc *g, const model_config *m, int bwd, cost_attn_rates *a) {
  double peak = g->peak_tflops * 1e12;
  double ef = bwd ? g->eff_attn_bwd_full : g->eff_attn_fwd_full, ep = bwd ? g->eff_attn_bwd_partial : g->eff_attn_fwd_partial,
         eb = bwd ? g->eff_attn_bwd_bar : g->eff_attn_fwd_bar;
  a->zero = peak <= 0;
  a->ratio = bwd ? MODEL_ATTN_BWD_RATIO : 1.0;
  a->tile = cost_tile_flops(m);
  a->run = cost_run_flops(m);
  a->bar = cost_bar_flops(m);
  a->full = peak * (ef > 0 ? ef : 1);
  // Runs are masked chunks like a PARTIAL tile's halves: the PARTIAL efficiency (an assumption: the
  // calibration measures PARTIAL tiles; results/JOURNAL.md has a run at 17.1 ns against 35.1 ns a
  // PARTIAL tile on one H200, i.e. at the same rate per element within 3%).
  a->partial = peak * (ep > 0 ? ep : 1);
  a->bars = peak * (eb > 0 ? eb : 1);
  // The bars' backward at their walk's rate where the file gives it (the warp-specialized bars, variant 3's split walk;
  // cost_bar_walk_rate, below, says why).
  double ws = bwd ? cost_bar_walk_rate(g, a->ratio, a->bar) : 0;
  if (ws > 0) a->bars = ws;
  // A key's K and V rows of one KV head: 2 x head_dim bf16 values each (the kernels' operands, kernels/sparse_attn.h).
  a->l2_keys = g->l2_mb > 0 && m->head_dim > 0 ? g->l2_mb * 1048576.0 / (2.0 * 2.0 * m->head_dim) : 0;
  a->l2_slow = a->l2_keys > 0 ? g->attn_l2[bwd ? 1 : 0] : 0;
}

// A call's FULL tiles beyond the L2 cache (cost_attn_l2, inline in cost.h). The forward kernel runs one CTA per (query
// tile, head) cell (docs/design.md, "A kernel call's walks"), and every CTA of a KV head streams the same K and V
// tiles through L2 (the FlashAttention-2 tiling, Dao 2023 sec. 3.1): a tile read by one CTA is served from L2 to the
// next that reads it only if the K and V touched in between still fit. For a walk that streams more data than the
// cache holds, an LRU cache misses every such reuse and one that fits hits them all: an access hits if its stack
// distance (the distinct data touched since its last use) is below the capacity (Mattson, Gecsei, Slutz & Traiger
// 1970), which for a cyclic walk over keys x (2 x head_dim x 2 B) bytes is that footprint, whatever the position. So
// two rates, a step at the cache's size rather than a ramp: the FULL efficiency where the call's keys fit, and
// 1 + gpu.attn_l2 times the tile's time where they do not (how much of the extra traffic the kernel's pipelined loads
// hide is not derived: the factor is fitted). Measured on one H100 (50 MB L2; K and V of one KV head at d 128 are
// 512 B a key): the one-rate fit puts the 16K-64K off-diagonal calls (8-32 MiB) 8% to 1% above their times and the
// 128K one (64 MiB) 7.7% below, its backward 0.2% (results/sim/2026-11-27-h100-calib-layer-walks; docs/design.md, "A
// call's keys beyond the L2 cache", has the fit and the alternatives); the size it steps at is the cluster file's
// gpu.l2_mb (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020: 40 MB; NVIDIA H100 Tensor Core GPU
// Architecture whitepaper, 2022: 50 MB for the SXM5 and PCIe boards; the H200's, not in its datasheet, assumed the
// H100 SXM's, docs/design.md). The step is charged on the call's key count (the source shard a ring step's keys come from), which
// the simulator's per-call work counts give, rather than on each walk's length, which they do not (docs/design.md,
// "A call's keys beyond the L2 cache"); fitted by sparsering-exec calibrate (exec/calib_layer.c).

// NVIDIA's datasheets and tuning guides: H100 SXM, H200, H800 132 SMs, H100 PCIe 114, each with 228 KiB of
// shared memory an SM (Hopper Tuning Guide); A100 and A800 108 SMs with 164 KiB (Ampere Tuning Guide).
void cost_gpu_sms(const char *name, int *sms, int *smem_kib) {
  *sms = *smem_kib = 0;
  if (strstr(name, "H100") && strstr(name, "PCIe")) *sms = 114, *smem_kib = 228;
  else if (strstr(name, "H100") || strstr(name, "H200") || strstr(name, "H800")) *sms = 132, *smem_kib = 228;
  else if (strstr(name, "A100") || strstr(name, "A800")) *sms = 108, *smem_kib = 164;
}

// The bar kernel's shared memory a CTA (kernels/sparse_attn_bwd.cu, bwd_launch's bar_smem: K, V, two buffers of Q
// and dO of 64 rows at d + 8 bf16 columns, the rows' positions, LSE, D and listed flags; s_cum and s_beg static),
// plus the 1 KiB the runtime reserves a block since sm_80 (CUDA C++ Programming Guide, "Shared Memory"). The split
// walk's kernel (kernels/sparse_attn_bwd_bars.cu, bb_smem_bytes) holds as many CTAs an SM at d = 128 (two).
static double bar_cta_smem(int head_dim) {
  double S = head_dim + 8;
  return (2.0 * 64 + 4.0 * 64) * S * 2 + 2.0 * 64 * (8 + 4 + 4) + 2.0 * 64 * 4 + (33 + 32) * 8 + 1024;
}

int cost_ws_sms(const char *gpu_name) {
  int sms, smem_kib;
  cost_gpu_sms(gpu_name, &sms, &smem_kib);
  return smem_kib == 228 ? sms : 0;
}

int cost_bar_ctas(const char *gpu_name, int head_dim) {
  int sms, smem_kib;
  cost_gpu_sms(gpu_name, &sms, &smem_kib);
  return sms * (int)floor(smem_kib * 1024.0 / bar_cta_smem(head_dim));
}

int cost_bar_slots(const gpu_desc *g, int head_dim) {
  if (g->bar_walk_parts <= 0) return 0;
  if (!g->bar_walk_ws) return cost_bar_ctas(g->name, head_dim);
  int sms, smem_kib;
  cost_gpu_sms(g->name, &sms, &smem_kib);
  return sms;
}

// The bars in pairs of compute chunks (gpu.bar_walk_pairs, backward variant 5: kernels/sparse_attn_bwd_ws.cu,
// sa_bwd_ws_pair_kernel and bars_ws_launch<D, true>), with cost_bar_waves' chunks (k = ceil(bars a head / (q_tiles x
// 64)) a head, each listed in nearly every query tile, so each walking 2 q_tiles steps). Each formula from the kernel:
// - CTAs: a head's chunks pair up from its first (bp_place; a chunk at an odd place returns at once, its CTAs hold
//   nothing), so floor(k / 2) pair CTAs a head and, where k is odd, a lone last chunk's CTA (`pair` false: its second
//   warpgroup's keys absent and masked, the step's products still issued, so its step costs a pair's).
// - A pair's walk: the ascending union of both chunks' query tiles (bp_walk), two 64-row steps a tile, Q, dO, LSE and
//   D loaded once for both (bp_produce). Both lists hold nearly all q_tiles here, so the union is 2 q_tiles steps,
//   one chunk's walk; a lone chunk walks its own list, the same 2 q_tiles.
// - Parts: bw_bar_parts with variant 4's even share (fair = ceil(all chunks' own steps / slots): `all` counts every
//   chunk's list, paired or not), part_steps = max(64, floor(fair / 8)), at most gpu.bar_walk_parts; but a pair counts
//   both chunks' steps (`total` = 2 (na + nb) = 4 q_tiles), so min(parts, ceil(4 q_tiles / part_steps)) parts, cut at
//   places K p / parts of the two lists merged with their duplicates (bp_cut): where the lists are the same tiles each
//   part walks 2 q_tiles / parts steps, half of variant 4's part where the cap does not bind. A lone chunk counts its
//   own 2 q_tiles (variant 4's rule and parts).
// - Slots: the tile kernel's shared memory (bp_smem = bs_smem with the pair's stage record) and 384 threads, one CTA
//   an SM (cost_bar_slots as for variant 4); dQ formed in the kernel (bp_write_dq), no separate pass.
// Pair and lone CTAs differ in length (a lone chunk's parts up to twice a pair's), so the call's n CTAs are charged as
// cost_bar_waves charges equal ones with two changes: the last wave's idle share (ceil(n / slots) - n / slots) is of
// the longest CTA (each head's lone chunk is launched after its pairs, so long CTAs are among the last to start), and
// the floor is ceil(n / slots) CTAs of the mean length (their steps in all over n), at least the longest CTA. Where
// every CTA is alike (every head's chunks paired, or one chunk a head: then variant 5 runs variant 4's CTAs) this is
// cost_bar_waves' figure. Against a list schedule of the kernel's CTAs in launch order (greedy, `slots` at a time) it
// is 1.5% short on average, 42% short at worst (8 heads of 7 chunks on 114 slots: few CTAs a slot, some long ones
// starting late) and 10% long at worst (results/sim/2026-11-28-cpu-pair-waves). Not measured on a GPU yet: a
// calibration of variant 5 fits gpu.bar_walk_us on the pair CTAs' merged walks (exec/calib_walk.c).
// (The CTAs are counted by cost_bar_grid_of, charged by cost_bar_waves, both below.)

// The bar kernel's chunks in waves (cost_bar_walk where the file gives gpu.bar_walk_parts). A head's bar keys of the
// call, each listed in nearly every one of its q_tiles query tiles (cost.h), are ceil(bars a head / (q_tiles x 64))
// chunks of 64 keys, each walking 2 q_tiles steps of gpu.bar_walk_us: equal CTAs. The split walk (parts > 1,
// kernels/sparse_attn_bwd_bars.cu, sa_bwd_bars_kernel) cuts each walk into min(parts, ceil(steps / p)) parts of p =
// max(64, fair / 8) steps, fair the even share of all the walks' steps over the resident CTAs, one CTA a part. The
// GPU runs `slots` such CTAs at once and starts the next as one ends, so n equal CTAs take ceil(n / slots) of their
// times: the last wave leaves (ceil(n / slots) - n / slots) of the GPU idle for a CTA's time, which the work model
// (bar_s, the bar rate calibrate measures on calls of 8,160 chunks, 31 waves, where that remainder is 0.3% of the
// call) does not charge. This is the tail effect of wave quantization (NVIDIA Deep Learning Performance documentation,
// "Matrix Multiplication Background User's Guide", "Dimension Quantization Effects": a grid whose blocks are not a
// whole number of waves of the GPU's resident blocks leaves the last wave partly idle; list scheduling of equal
// jobs, Graham 1969). The call lasts
// max(one CTA's time, bar_s + that remainder): with one whole-walk CTA a chunk and fewer chunks than slots this is
// the floor before it where bar_s is the chunks' even share. What it explains and what not: docs/sim.md, "The bars'
// backward in waves" (results/sim/2026-11-28-cpu-simfid).
void cost_bar_grid_of(const gpu_desc *g, double bars, double q_tiles, double heads, double slots, cost_bar_grid *r) {
  cost_bar_grid_chunks(g, bars, q_tiles, heads, slots, 0, 0, r);
}

// With the call's chunks as the executor forms them (chunks > 0; sim/bar_walks.c counts them from the pattern's
// columns, kernels/bar_chunks.c lines 57-78 cut them): a head's keys in ascending order, 64 a chunk, each walking the
// query tiles from its first key's on, so the chunks of a head walk from nearly all q_tiles (its first) down to a few
// (its last): `steps` their 64-row steps in all, 2 x their tiles. The CTAs are charged at the mean chunk's walk
// (steps / chunks), the longest at a head's first chunk's, 2 q_tiles; the parts' even share is the chunks' own steps
// over the slots (bw_bar_parts' `all`), as above. With pairs (variant 5) a head's chunks = chunks / heads (its mean),
// the pair's walk the union of two neighbours' tiles, the first's: the mean chunk's.
void cost_bar_grid_chunks(const gpu_desc *g, double bars, double q_tiles, double heads, double slots, double chunks,
                          double steps_all, cost_bar_grid *r) {
  double longest = 2.0 * q_tiles, k, steps, parts = 1, parts_long = 1;
  if (chunks > 0 && steps_all > 0) k = chunks / heads, steps = steps_all / chunks;
  else k = ceil(bars / heads / (q_tiles * 64.0)), chunks = heads * k, steps = longest;
  if (!g->bar_walk_pairs) {
    if (g->bar_walk_parts > 1) {
      double fair = ceil(chunks * steps / slots), part_steps = fmax(64.0, floor(fair / 8));
      parts = fmin((double)g->bar_walk_parts, ceil(steps / part_steps));
      parts_long = fmin((double)g->bar_walk_parts, ceil(longest / part_steps));
    }
    r->ctas = chunks * parts, r->steps = chunks * steps, r->longest = longest / parts_long, r->parts = parts_long;
    r->chunks = chunks;
    return;
  }
  double pairs = floor(k / 2), lone = k - 2 * pairs, parts_l = 1, parts_ll = 1;  // a head's pair CTAs and lone chunk
  if (g->bar_walk_parts > 1) {
    double fair = ceil(chunks * steps / slots), part_steps = fmax(64.0, floor(fair / 8));
    parts = fmin((double)g->bar_walk_parts, ceil(2 * steps / part_steps));  // a pair counts both chunks' steps
    parts_l = fmin((double)g->bar_walk_parts, ceil(steps / part_steps));
    parts_long = fmin((double)g->bar_walk_parts, ceil(2 * longest / part_steps));
    parts_ll = fmin((double)g->bar_walk_parts, ceil(longest / part_steps));
  }
  r->ctas = heads * (pairs * parts + lone * parts_l);
  r->steps = heads * (pairs + lone) * steps;  // one walk a pair or lone chunk
  r->longest = lone > 0 ? longest / parts_ll : longest / parts_long;
  r->parts = lone > 0 ? fmax(parts_long, parts_ll) : parts_long;
  r->chunks = chunks;
}

double cost_bar_waves(const gpu_desc *g, double bars, double q_tiles, double heads, double slots, double bar_s) {
  return cost_bar_waves_chunks(g, bars, q_tiles, heads, slots, bar_s, 0, 0);
}

double cost_bar_waves_chunks(const gpu_desc *g, double bars, double q_tiles, double heads, double slots, double bar_s,
                             double chunks, double steps_all) {
  cost_bar_grid r;
  cost_bar_grid_chunks(g, bars, q_tiles, heads, slots, chunks, steps_all, &r);
  // The executor's chunks list their keys in different tiles (a chunk walks from its first key on, each key listed
  // from its own), so their steps hold fewer listed entries than the walk's rate counts (a step's 64 rows x 64 keys,
  // 128 with pairs, TILE rows an entry: cost_bar_walk_rate): where the bars are charged at that rate they last their
  // steps where those are more. Not at gpu.efficiency.attn_bwd_bar (the other kernels): that rate is a call's entries
  // over its time, walks and all, and charging the steps on top put the layers of those files 5-25% over
  // (results/sim/2026-11-28-cpu-bar-chunks).
  double bar0 = bar_s;
  if (chunks > 0 && bars > 0 && cost_bar_walk_rate(g, 1, 1) > 0) {
    double listed = bars / (g->bar_walk_pairs ? 64.0 : 32.0);
    if (r.steps > listed) bar_s *= r.steps / listed;
  }
  double ctas = r.ctas, cta_s = r.longest * g->bar_walk_us * 1e-6;
  // Variants 0-4: every CTA as long as the longest. Variant 5's pair and lone CTAs differ ("The bars in pairs of
  // compute chunks" above): the floor's waves are of the mean CTA.
  // With the executor's chunks (chunks > 0) the CTAs differ too: a head's chunks walk from nearly all its tiles down to
  // a few (cost_bar_grid_chunks).
  double mean_s = g->bar_walk_pairs || chunks > 0 ? r.steps / ctas * g->bar_walk_us * 1e-6 : cta_s;
  double t = bar_s + cta_s * (ceil(ctas / slots) - ctas / slots);
  // n equal CTAs on `slots` take ceil(n / slots) of their times (Graham 1969, as above) even where the bars' rate
  // charges less: a chunk of a few keys (vs-online's sink and verticals, about 4 a head) walks as many steps as a full
  // one. Before 2026-11-28 the floor was a single CTA's time, which on the warp-specialized bars kernel (one CTA an
  // SM) left a second wave out: vs-online at 256K on one H200 has 256 CTAs on 132 SMs
  // (results/sim/2026-11-28-cpu-vs-online-terms).
  if (t < ceil(ctas / slots) * mean_s) t = ceil(ctas / slots) * mean_s;
  if (t < cta_s) t = cta_s;  // (only variant 5's mean can leave it below its longest CTA)
  // The warp-specialized bars kernel forms each step's dQ itself (gpu.bar_walk_ws): no separate pass; its launch's CTAs
  // that return at once take their SMs' time (cost_bar_empty_s: 0 without the bars' walk rate).
  // Variant 3's split walk at its walk's rate (cost_bar_walk_rate) launches the same CTAs (bb_launch: BB_MAX_PARTS a
  // compute chunk) and keeps its dQ pass.
  double empty = r.chunks * COST_BAR_WS_SPLITS - ctas;
  double idle = empty > 0 && cost_bar_walk_rate(g, 1, 1) > 0 ? empty / slots * cost_bar_empty_s(g) : 0;
  if (g->bar_walk_ws) return t - bar0 + idle;
  return t - bar0 + (r.parts > 1 ? idle + cost_bar_dq_cells(g, bars, q_tiles, heads) : 0);
}

// The bars' backward on the warp-specialized kernel (gpu.bar_walk_ws: variant 4, sa_bwd_ws_bars_kernel, and with
// gpu.bar_walk_pairs variant 5, sa_bwd_ws_pair_kernel; kernels/sparse_attn_bwd_ws.cu) at the rate of its walk rather
// than at gpu.efficiency.attn_bwd_bar (issue 24, results/sim/2026-11-28-cpu-bars-ws-rate). calibrate takes each kind's
// efficiency as the rate of its largest call (exec/calibrate.c, calib_sustained_rate; "Sustained rates" in
// docs/sim.md), which for the tiles is its slope within 0-4% (no fixed time in the fit, or 0.1 ms). For these bars it
// is not: their three calls on one H200 took 2.003 / 2.322 / 2.968 ms (variant 5, calib-pair.csv of
// results/kernels/2026-11-28-h200-bwd-pair-default/callE) and 2.013 / 2.379 / 3.236 ms (variant 4, calib-ws.csv of
// results/kernels/2026-11-28-h200-bwd-bars-ws-default), a slope of 523 / 414 TFLOP/s and 1.674 / 1.586 ms of fixed
// time a call: 56% / 49% of the largest call. That fixed time is the launch (bars_ws_launch): COST_BAR_WS_SPLITS CTAs
// a compute chunk whatever its walk's parts, one CTA an SM, and a CTA past its walk's parts (or, with pairs, at an odd
// place) returns at once; the calibration's index has 8,160 chunks of 16 steps (one part each), so 130,560 CTAs of
// which 122,400 (variant 4) / 126,480 (variant 5) return at once: 927 / 958 waves of 132 SMs, 1.71 / 1.75 us a wave, the
// same for both kernels whose working CTAs differ twofold (a profile of a layer's variant-4 bars shows the grid:
// 11,184 CTAs = 699 chunks x 16, 84.7 waves; results/kernels/2026-11-28-h200-bwd-bars-ws-spills, call1). The largest
// call's rate charged a layer's bars that fixed time in proportion to their entries: a vs-topp:0.95 layer at 128K
// holds 12x the calibration's entries and about a tenth of its launched CTAs (784 chunks), so its bars were charged
// 2.3x their walk (36.8 ms against 16.5), the layers of one H200 +8% to +15% over (results/sim/2026-11-28-cpu-bars-ws-
// rate). The slope is the walk calibrate fits (exec/calib_walk.c: gpu.bar_walk_us, a CTA's 64-row step times the
// resident CTAs over the slope in steps), and in calibrate's index every key of a chunk is listed in the same query
// tiles, so a step holds 64 rows x 64 keys (x 128 with pairs) of listed entries: the bars' rate is those entries
// (64 x keys / TILE of TILE rows) a step on each SM. The launch's idle CTAs are charged apart (cost_bar_waves, with
// cost_bar_empty_s from the same calibration), on the call's own grid. What the rate leaves out: a layer's chunks
// list their keys in different tiles (0.88-0.90 of a walk's steps listed, with 1.8x the chunks the work counts give,
// at 64K and 128K on one rank: exact lists of the executor's chunks, results/sim/2026-11-28-cpu-bars-ws-rate/walks.c),
// and its steps miss the L2 more than calibrate's short walks (68% L2 hits in the profile above), neither in the
// work counts; so the layers of one H200 came out 2-9% short (docs/sim.md, "The warp-specialized bars' rate").
// The first is charged since, where the pattern gives the chunks (cost_bar_waves_chunks, sim/bar_walks.c): 0-5%.
//
// Backward variant 3's split walk (gpu.bar_walk_parts > 1 without gpu.bar_walk_ws: kernels/sparse_attn_bwd_bars.cu)
// the same since 2026-11-28 (results/sim/2026-11-28-cpu-bars-from): its launch is the same (BB_MAX_PARTS CTAs a
// compute chunk, those past their parts returning at once), and calibrate's three bar calls hold a fixed time of the
// same size (1.10 ms a call against a slope of 234 TFLOP/s on one H200, the 2026-11-27 18:28 log), which the largest
// call's rate had spread over a layer's 12x bar entries: the one-H200 vs-topp layers of variant 3 came out +10% to
// +12% in their backward. Its step is fitted on the kernel's resident CTAs at calibrate's head_dim (cost_bar_ctas,
// two an SM on Hopper: exec/calib_walk.c) rather than the SMs, and a step holds 64 x 64 listed entries (no pairs).
double cost_bar_walk_rate(const gpu_desc *g, double ratio, double bar_flops) {
  if (!(g->bar_walk_us > 0) || g->bar_walk_parts <= 0) return 0;
  int ctas = g->bar_walk_ws ? cost_ws_sms(g->name)
                            : g->bar_walk_parts > 1 ? cost_bar_ctas(g->name, COST_CALIB_HEAD_DIM) : 0;
  if (ctas <= 0) return 0;
  double per_step = 64.0 * (g->bar_walk_pairs ? 128.0 : 64.0) / TILE;  // a step's listed entries of TILE rows
  return ctas * per_step * ratio * bar_flops / (g->bar_walk_us * 1e-6);
}

// The calibration's largest bar call (exec/calib_attn.c, calib_attn_index kind 2 at size 4), a head of it: query tile
// i lists min(TILE i, COST_CALIB_BAR_KEYS) keys, the keys 0 .. (COST_CALIB_BAR_QTILES - 1) x TILE - 1 in chunks of 64
// (kernels/bar_chunks.c), each walking 16 steps in one part (bw_bar_parts: parts of at least 64 steps), one CTA a chunk
// (a pair with gpu.bar_walk_pairs), at calibrate's head_dim (COST_CALIB_HEAD_DIM); its time at the file's bar
// efficiency less its walk at cost_bar_walk_rate is the launch's CTAs that return at once (cost_bar_walk_rate says why),
// in waves of the SMs: 1.71 / 1.75 us a wave on the two H200 calibrations above.
// Variant 3 (cost_bar_walk_rate): its resident CTAs (cost_bar_ctas) instead of the SMs, and its bars' dQ pass, a
// separate kernel whose waves are the same at calibrate's three sizes (every cell of its index has bars), so in the
// fixed time: the calibration's 255 cells a head in waves of the SMs of COST_BAR_DQ_WAVE_US are taken off first
// (cost_bar_dq_cells then charges a call's own waves whole). On the 18:28 H200 log: 1.10 ms fixed, 0.40 ms of it the
// dQ waves, 1.5 us a wave of 264 returning CTAs.
double cost_bar_empty_s(const gpu_desc *g) {
  int sms = cost_ws_sms(g->name), slots = g->bar_walk_ws ? sms : cost_bar_ctas(g->name, COST_CALIB_HEAD_DIM);
  double eb = g->eff_attn_bwd_bar, peak = g->peak_tflops * 1e12, bar = 4.0 * TILE * COST_CALIB_HEAD_DIM;
  double rate = cost_bar_walk_rate(g, MODEL_ATTN_BWD_RATIO, bar);
  if (!(rate > 0) || !(eb > 0) || !(peak > 0) || slots <= 0) return 0;
  double entries = 0;
  for (int i = 0; i < COST_CALIB_BAR_QTILES; i++) entries += fmin((double)TILE * i, COST_CALIB_BAR_KEYS);
  double flops = MODEL_ATTN_BWD_RATIO * entries * bar;
  double fixed = flops / (peak * eb) - flops / rate;
  if (!g->bar_walk_ws) {
    int dq_sms, smem_kib;
    cost_gpu_sms(g->name, &dq_sms, &smem_kib);
    fixed -= dq_sms > 0 ? (COST_CALIB_BAR_QTILES - 1.0) / dq_sms * COST_BAR_DQ_WAVE_US * 1e-6 : 0;
  }
  double chunks = (COST_CALIB_BAR_QTILES - 1.0) * TILE / 64, working = g->bar_walk_pairs ? chunks / 2 : chunks;
  double empty = chunks * COST_BAR_WS_SPLITS - working;
  return fixed > 0 ? fixed / (empty / slots) : 0;
}

// The bars' dQ (kernels/sparse_attn_bwd_wg.cu, sa_bwd_dq_wg_kernel with BARS): a query-major launch of one CTA per
// (head, query tile) cell of the call, which loads the cell's 128 rows of Q and dO, walks the cell's bar chunks and
// adds its dQ rows into the fp32 output. Its 132 KiB of shared memory hold one CTA an SM, so the cells run in waves of
// the GPU's SMs, and a cell holding a single chunk (vs-online's sink and a few verticals: about 4 bar keys a cell) costs
// a CTA's fixed latency: Q and dO in, one chunk's products, the dQ rows read and written, nothing to overlap them
// with. Measured on one H100 (results/exec/2026-11-28-h100-vs-online-1gpu-kernels, logs/ncu-vson.csv: vs-online:0.95
// at 256K on one rank, 32,768 cells of 4 bar keys each, every launch timed by Nsight Compute): 3.781 ms a call under
// the profiler, 249 waves of 132 SMs: 15.18 us a wave at the profiler's base clock, 13.02 us at the run's (its
// backward's scale 0.858, cost_cta_floor below says how it is taken; before 2026-11-28 the profiler's figure was used),
// COST_BAR_DQ_WAVE_US a wave. A cell's latency comes before and after its chunks' products (Q and dO
// before the first, the dQ rows after the last), in a CTA alone on its SM: it adds to them, it does not overlap them.
// The products are in the bars' time bar_s, at the rate calibrate takes from its largest bar call (exec/calib_attn.c,
// size 4: 32,768 tokens, the 1,024 keys before each query tile), and that rate carries that call's own cells' waves:
// 255 cells with bars a head, 31 waves of 132 SMs for 16 heads, about 0.47 ms of its 3.94 ms on one H100 (the three
// sizes' fit has 1.09 ms of fixed time a call: results/sim/2026-11-28-h100-attn-held-gemm, calib-held-gemm.csv). So the
// pass charges the call's waves less the calibration's waves in proportion to the call's bar entries (its bar_s
// already holds that share), per head without the calibration's last wave's rounding (under 1%): a call with many
// bar keys a cell (the calibration's 1,024, or more) gets nearly nothing, one of a few keys a cell (vs-topp at 32K-64K
// a rank: 30-200, vs-online: 4) its waves. Charged where the file names the split walk (gpu.bar_walk_parts > 1): the
// whole walk's fitted step carries the dQ already (calib_bar_walk_fit times the two kernels together). docs/sim.md,
// "The bars' dQ in waves".
double cost_bar_dq_cells(const gpu_desc *g, double bars, double q_tiles, double heads) {
  int sms, smem_kib;
  cost_gpu_sms(g->name, &sms, &smem_kib);
  double cells = fmin(bars, q_tiles * heads);
  if (sms <= 0 || !(cells > 0) || !(heads > 0)) return 0;
  double keys_c = 0;  // the calibration's bar entries a head: min(128 i, 1,024) keys before query tile i
  for (int i = 0; i < COST_CALIB_BAR_QTILES; i++) keys_c += fmin((double)TILE * i, COST_CALIB_BAR_KEYS);
  // at the split walk's rate (cost_bar_walk_rate) the calibration's waves are in its fixed time, not in the rate
  double waves = ceil(cells / sms), carried = (COST_CALIB_BAR_QTILES - 1.0) / sms * bars / keys_c;
  if (cost_bar_walk_rate(g, 1, 1) > 0) carried = 0;
  return waves > carried ? (waves - carried) * COST_BAR_DQ_WAVE_US * 1e-6 : 0;
}

// The warp-specialized kernels' shortest CTAs (cost_cta_floor, cost.h). The work model charges a call its tiles at
// the calibrated rates, which calibrate takes as slopes over calls whose CTAs hold 8-32 tiles each (exec/calib_attn.c),
// and the forward's walks (gpu.attn_walk, a cell's fixed cost where its CTA is long: 0.03-0.06 us a cell, 4-8 us a
// wave of 132 SMs). A CTA holding almost nothing pays more: its Q load, each chunk's load, products and softmax one
// after another (nothing to pipeline them with) and its epilogue, with no other CTA on its SM. Measured by Nsight
// Compute in the vs-online:0.95 layer at 256K on one H100 (results/exec/2026-11-28-h100-vs-online-1gpu-kernels,
// logs/ncu-vson.csv, the third repetition: 0.011% of the causal pairs kept, 0.2% computed, two partial tiles and about
// four bar keys a (head, query tile) cell): sa_fwd_ws_kernel 5.988 ms for 32,768 CTAs, 249 waves of 132 SMs, where the
// work model and walks give 2.40 ms; sa_bwd_ws_kernel 5.638 ms for 16,384 CTAs (4,096 (KV head, key tile) cells in 4
// parts), 125 waves, where the work model gives 3.68 ms. The profiler holds the clock at its base, so its durations are
// longer than the run's; they are scaled by the run's own: each pass as measured (17.727 / 12.033 ms), less what is
// not a kernel launch there (the K|V copy into the ring buffer, and in the backward the clears of dQ, dK, dV and the
// dK|dV partial: 0.19 / 1.32 ms at the model's memory rate), over the pass's launches under the profiler (20.374 /
// 12.485 ms): 0.861 forward, 0.858 backward. So 5.156 ms / 249 = 20.71 us a forward CTA, 4.837 ms / 125 = 38.70 us a
// backward one. Fitted on that one H100 layer; the H200's (results/exec/2026-11-28-h200-vs-online-1gpu: the same
// layer, scales 0.813 and 0.851) checks them: its forward kernel 5.068 ms against 5.157 by the floor (+1.8%), its
// backward's tiles 4.986 ms against 4.837 (-3.0%). The floor binds only where a call's CTAs are this short: a vs-topp
// layer's at 64K hold hundreds of bar keys a cell (its forward 14.1 ms for 63 waves, results/kernels/2026-11-28-h100-
// vs-topp-64k-kernel-split). A CTA with less work than these (one entry) takes less; the work counts do not say how
// a call's entries spread over its CTAs, so the floor takes every CTA with work as one of these
// (results/sim/2026-11-28-cpu-vs-online-terms, docs/sim.md "vs-online's terms").

// The warp-specialized bars kernel (kernels/sparse_attn_bwd_ws.cu, sa_bwd_ws_bars_kernel) forms each step's dQ itself:
// the step's Q and dO rows come in by TMA and its dQ rows go out by sa_tma_reduce_add_2d into the fp32 dQ. Where a
// head's bar keys fill many chunks (calibrate's bar calls: 16 a query tile), the chunks walk the same query tiles
// about together and the L2 serves most of it; where they are one chunk a head (vs-online: the sink and a few
// verticals, about 4 keys) each (head, query tile) cell's rows cross HBM once a walk: 12 bytes a row and dimension
// (2 + 2 read, 4 + 4 the reduction). vs-online:0.95 at 256K on one H200 (results/exec/2026-11-28-h200-vs-online-1gpu,
// logs/ncu-vson.csv): 32,768 cells, 6.44 GB, 1.57 ms at 0.85 of 4.81 TB/s, where the kernel took 2.068 ms under the
// profiler (1.76 ms at its run's clock, the backward's 0.851: sim/cost.c, cost_cta_floor) and the walk's waves give
// 0.86 ms; not fitted (bytes from the kernel's code and the file's memory rate), so it explains 0.71 of the 0.90 ms.
// Variant 5 (gpu.bar_walk_pairs, sa_bwd_ws_pair_kernel) takes the same floor: a pair's step loads its Q and dO rows
// once for both chunks (bp_produce, bs_load_qdo) and the writer adds the step's dQ once (bp_write_dq, bs_reduce_dq:
// four 64 x 32 fp32 boxes; at d = 64 the two warpgroups' halves of the same rows, the second served by the L2), and a
// head of one chunk runs it alone over the same cells; with several chunks a head the pairs walk each cell fewer
// times than variant 4's chunks, which the floor (each cell once) did not count for either.
double cost_bar_ws_traffic(const gpu_desc *g, double bars, double q_tiles, double heads, double head_dim) {
  if (!g->bar_walk_ws || !(bars > 0)) return 0;
  return cost_mem(g, fmin(bars, q_tiles * heads) * TILE * head_dim * 12.0);
}

double cost_attn_fwd(const gpu_desc *g, const model_config *m, const work_count *w) {
  cost_attn_rates a;
  cost_attn_rates_init(g, m, 0, &a);
  return cost_attn_time(&a, w);
}

// Backward recomputes P and forms dQ, dK, dV: 2.5x the forward FLOPs (FlashAttention-2 paper, sec. 4.1;
// model.h's MODEL_ATTN_BWD_RATIO), at the backward kernels' efficiencies.
double cost_attn_bwd(const gpu_desc *g, const model_config *m, const work_count *w) {
  cost_attn_rates a;
  cost_attn_rates_init(g, m, 1, &a);
  return cost_attn_time(&a, w);
}

// A ring step is one kernel launch per rank (the executor launches it for every step with a source) that
// also waits for the shard's arrival event, so it costs a fixed time beyond its work; ring attention
// implementations lose 10-20% to such per-step costs at small steps (the launch and synchronisation
// overhead of a kernel: a few microseconds each, NVIDIA CUDA C++ Best Practices Guide, "Asynchronous and
// overlapping transfers with computation"; Liu et al. 2023, Ring Attention, sec. 3, on blockwise overheads).
// Each (query tile, head) cell of the step adds its fixed work: loading the Q tile, the epilogue, and in
// the forward the LSE merge of the step's partial into the running fp32 output (docs/design.md, "The LSE
// merge"; Milakov & Gimelshein 2018: 8d + 8 bytes read and written a row). Both are fitted per phase by
// sparsering-exec calibrate (exec/calib_ring.c) from a layer split into the steps of a ring on one GPU.
// cost_ring_step and cost_ring_cells: inline in cost.h.

// Roofline compute bound (Williams et al. 2009): FLOPs / (peak x GEMM efficiency).
double cost_gemm(const gpu_desc *g, double flops) {
  double r = g->peak_tflops * 1e12 * (g->eff_gemm > 0 ? g->eff_gemm : 1);
  return r > 0 ? flops / r : 0;
}

// sparsering-exec calibrate times its GEMMs for about 12 ms (exec/calib_kernels.c, gemm_tflops: 36 products of
// 0.08-0.5 ms), the clock still at its boost; a training step runs GEMMs back to back for seconds,
// under the board's power limit (700 W on both H100 SXM and H200 SXM, NVIDIA's datasheets), and they run slower.
// Measured on one H200 in one call (results/train/2026-11-27-h200-vs-peer-128k-new-kernels, calibration and steps
// of the same session): the trainer's 128K steps spent 4.554 s (dense) and 4.410 s (MTraining) on what the
// simulator charges 3.630 s of GEMMs at the calibrated 0.819 of peak once its other kernels (0.778 s) are taken
// out, i.e. 0.797 and 0.823 of the calibrated rate: 0.81. The other kept steps (H100 and H200, 1 and 4 GPUs, 32K
// to 512K a rank) validate it (results/sim/2026-11-27-cpu-trainer-rest-model).
// sparsering-exec calibrate now times that rate itself (gpu.efficiency.gemm_sustained: the same GEMMs back to back
// for seconds, exec/calib_kernels.c); the constant stands for files calibrated before it, or not at all.
double cost_gemm_step(const gpu_desc *g, double flops) {
  if (g->eff_gemm_sustained > 0) {
    double r = g->peak_tflops * 1e12 * g->eff_gemm_sustained;
    return r > 0 ? flops / r : 0;
  }
  return cost_gemm(g, flops) / COST_GEMM_SUSTAINED;
}

// The same power limit holds attention down: the calibration times its attention calls in a few short calls (a
// layer-shaped call 2 warm-ups and 5 timed, exec/calib_layer.c), at the clock's boost, and a training step runs them
// for seconds. Measured on one H100 at 32K (results/train/2026-11-28-h100-vs-peer-32k): the trainer's attention took
// 33.3 ms a layer where the calibration's same causal 32K call took 30.4 ms, 10.3% of the step's attention above the
// simulator; the dense 128K step on 4 x H100 12.8% (results/exec/2026-11-28-h100x4-vs-context-parallel-l2-runs).
// sparsering-exec calibrate times that ratio itself (gpu.efficiency.attn_sustained: a dense causal layer-shaped call,
// forward and backward, back to back for seconds against its short calls, exec/calib_layer.c) and the step's
// attention efficiencies take it; its walks and per-step costs (fitted in short calls too) are left as they are.
// A file calibrated before that (every calibration kept under results/ that `repredict` uses) has no ratio, and its
// steps' attention ran at the short calls' rates: 7.8% of the 12 H200 steps' attention short on average
// (results/sim/2026-11-28-h200-attn-held-gemm), 7.6% of the 4 H100 steps' (results/sim/2026-11-28-h100-attn-held-gemm).
// The ratio is a property of the board under its power limit, not of a call, so such files take COST_ATTN_SUSTAINED,
// the mean of the three calibrations that timed it with GEMMs between the calls as a step has them: one H100 30.222 /
// 33.242 ms = 0.909 (results/sim/2026-11-28-h100-attn-held-gemm), one H200 31.547 / 34.344 ms = 0.919 and, on another
// call, 30.660 / 33.921 ms = 0.904 (results/sim/2026-11-28-h200-attn-held-gemm, calibrate-held-gemm.log and
// mixed/calibrate-mixed.log): 0.910. The same interleaving speeds up the GEMMs beside the attention: on the last of
// those calls the GEMMs between the held calls ran at 687 TFLOP/s against 658 back to back (0.694 / 0.665 of peak,
// 1.044x), so a file whose gemm_sustained was timed back to back (any file without attn_sustained: calibrate times the
// two together since) has it taken times COST_GEMM_BETWEEN in a step; a file without gemm_sustained keeps
// COST_GEMM_SUSTAINED (cost_gemm_step), which was fitted on whole steps, where the GEMMs already alternate.
// Files that calibrate did not write keep their attention rates where they give no ratio: their efficiencies are
// guesses to compare strategies by (docs/models.md, "Uncalibrated clusters"), and the studies and pins made on them
// stay as they were.
void cost_attn_held(gpu_desc *g, int calibrated) {
  double f = g->eff_attn_sustained;
  if (f == 1 || (!(f > 0) && !calibrated)) return;  // the short calls' rates (a single layer), applied already, a guess
  if (!(f > 0)) {
    f = COST_ATTN_SUSTAINED;
    if (g->eff_gemm_sustained > 0) g->eff_gemm_sustained *= COST_GEMM_BETWEEN;
  }
  double *eff[] = {&g->eff_attn_fwd_full, &g->eff_attn_fwd_partial, &g->eff_attn_fwd_bar,
                   &g->eff_attn_bwd_full, &g->eff_attn_bwd_partial, &g->eff_attn_bwd_bar};
  // The bars' walk step, where it is their backward's rate (cost_bar_walk_rate): held as the efficiencies are.
  if (cost_bar_walk_rate(g, 1, 1) > 0) g->bar_walk_us /= f;
  for (int i = 0; i < 6; i++) *eff[i] = (*eff[i] > 0 ? *eff[i] : 1) * f;
  g->eff_attn_sustained = 1;  // applied: a second call changes nothing
}

// Roofline memory bound (Williams et al. 2009): bytes / (HBM bandwidth x achieved fraction).
double cost_mem(const gpu_desc *g, double bytes) {
  double r = g->hbm_gbps * 1e9 * (g->eff_mem > 0 ? g->eff_mem : 1);
  return r > 0 ? bytes / r : 0;
}

// cost_under_comm: inline in cost.h.

// ---- communication -------------------------------------------------------------------------------

// Hockney (1994) model of a point-to-point message: T = alpha + n / beta.
double cost_p2p(const link_desc *l, double bytes) {
  if (bytes <= 0) return 0;
  return l->latency_us * 1e-6 + (l->gbps > 0 ? bytes / (l->gbps * 1e9) : 0);
}

static double bw_term(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e9) : 0; }

// Ring all-reduce (Thakur, Rabenseifner & Gropp 2005, sec. 4): 2(p-1) alpha + 2 (p-1)/p n beta.
// NCCL's busBw for all-reduce uses the same factor 2(n-1)/n (nccl-tests doc/PERFORMANCE.md).
double cost_allreduce(int n, double bytes, double gbps, double lat_us) {
  if (n <= 1 || bytes <= 0) return 0;
  return 2.0 * (n - 1) * lat_us * 1e-6 + bw_term(2.0 * (n - 1) / n * bytes, gbps);
}

// Ring reduce-scatter (Thakur et al. 2005): (p-1) alpha + (p-1)/p n beta; NCCL busBw factor (n-1)/n.
double cost_reduce_scatter(int n, double bytes, double gbps, double lat_us) {
  if (n <= 1 || bytes <= 0) return 0;
  return (n - 1) * lat_us * 1e-6 + bw_term((double)(n - 1) / n * bytes, gbps);
}

// Ring all-gather (Thakur et al. 2005): (p-1) alpha + (p-1)/p n beta; NCCL busBw factor (n-1)/n.
double cost_allgather(int n, double bytes, double gbps, double lat_us) {
  return cost_reduce_scatter(n, bytes, gbps, lat_us);
}

// Broadcast: NCCL pipelines a ring so the bandwidth term is n beta (busBw factor 1, nccl-tests
// PERFORMANCE.md); the start-up latency of a binomial tree is ceil(log2 p) alpha (Thakur et al. 2005).
double cost_broadcast(int n, double bytes, double gbps, double lat_us) {
  if (n <= 1 || bytes <= 0) return 0;
  return ceil(log2((double)n)) * lat_us * 1e-6 + bw_term(bytes, gbps);
}

// Pairwise-exchange all-to-all (Thakur et al. 2005, sec. 6): (p-1) alpha + (p-1)/p n beta, n the bytes
// each rank holds; NCCL busBw factor (n-1)/n.
double cost_alltoall(int n, double bytes, double gbps, double lat_us) {
  return cost_reduce_scatter(n, bytes, gbps, lat_us);
}

// A ring that spans nodes crosses each node boundary on every channel; NCCL runs one channel per NIC,
// so a node moves nics x NIC bandwidth across its boundary while NVLink carries the rest (NCCL's ring
// bus bandwidth is bounded by the slowest link on the ring).
void cost_collective_link(const cluster_desc *c, int n, int nodes, double *gbps, double *lat_us) {
  // n does not change the bus bandwidth of a ring (it enters the algorithm's cost, not the link's).
  if (nodes <= 1 || c->nodes <= 1) {
    *gbps = c->intra.gbps;
    *lat_us = c->intra.latency_us;
    return;
  }
  double node_bw = c->nics_per_node * c->nic.gbps;
  *gbps = node_bw < c->intra.gbps ? node_bw : c->intra.gbps;
  *lat_us = c->nic.latency_us > c->intra.latency_us ? c->nic.latency_us : c->intra.latency_us;
}

// All-to-all on a two-level network: of the (n-1)/n of its data a rank sends away, (per_node-1)/n stays
// inside the node (NVLink) and (n-per_node)/n leaves through the GPU's share of the NICs
// (nics x NIC bandwidth / GPUs per node). Both parts run at once; latency is (p-1) alpha (Thakur et al.).
double cost_alltoall_cluster(const cluster_desc *c, int n, int per_node, double bytes) {
  if (n <= 1 || bytes <= 0) return 0;
  if (per_node > n) per_node = n;
  if (per_node < 1) per_node = 1;
  double intra = bw_term((double)(per_node - 1) / n * bytes, c->intra.gbps);
  double t_lat = (per_node - 1) * c->intra.latency_us * 1e-6;
  double inter = 0;
  if (n > per_node) {
    double g = c->gpus_per_node > 0 ? (double)c->nics_per_node * c->nic.gbps / c->gpus_per_node : c->nic.gbps;
    inter = bw_term((double)(n - per_node) / n * bytes, g);
    t_lat += (n - per_node) * c->nic.latency_us * 1e-6;
  }
  return (intra > inter ? intra : inter) + t_lat;
}

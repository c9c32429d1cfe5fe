// plan_cache.c — the exec trainer's plans in a step and the GPU index builder's device state (plan_cache.h).
#include "sim/plan_cache.h"

#include <math.h>
#include <string.h>

static double max2(double a, double b) { return a > b ? a : b; }
static double min2(double a, double b) { return a < b ? a : b; }

void plan_cache_step(const plan_cache_in *in, plan_cache_out *out) {
  memset(out, 0, sizeof *out);
  int L = in->layers > 0 ? in->layers : 1;
  out->plans = in->per_layer ? L : 1;
  if (!in->per_layer) {
    out->kept = 1;
    return;
  }
  int kept;
  if (in->kept > 0) kept = in->kept;
  else if (in->plan_bytes <= 0) kept = L;
  else kept = 1 + (int)floor(max2(0, in->room) / (PLAN_CACHE_GROWTH * in->plan_bytes));  // at least one, as the trainer
  out->kept = kept < L ? kept : L;
  out->rebuilt = 2 * (L - out->kept);
  out->ahead = in->prefetch < out->kept - 1 ? in->prefetch : out->kept - 1;
  if (out->ahead < 0) out->ahead = 0;
  // half the rebuilds come in the forward, half in the backward, each behind `ahead` layers of its pass
  double fwd = max2(0, in->obtain_s - out->ahead * in->layer_fwd_s), bwd = max2(0, in->obtain_s - out->ahead * in->layer_bwd_s);
  out->exposed_s = (L - out->kept) * (fwd + bwd);
}

// The builder's arrays are allocated at their need (vs_gpu_conv.exact, sa_gpu_transposer_new_for_download): no spare.
double plan_cache_gpu_builder_bytes(const gpu_builder_counts *c) {
  double N = (double)c->n_tokens, W = (double)c->world, H = (double)c->heads, Hkv = (double)c->kv_heads;
  double words = ceil(N / 32), nq = (double)c->n_qtiles, cells = H * nq, offs = cells * (W + 1), nk = W * cells;
  double T = (double)c->tiles, B = (double)c->bars, A = (double)c->all_tiles;
  // Distinct (head, key) bars of a source: at most every bar its own, at most the heads' columns.
  double keys = min2(B, c->columns >= 0 ? (double)c->columns : H * N), group = Hkv > 0 ? H / Hkv : 1;
  // Layout tables (vs_gpu_layout_init): tile bases, segments (at most runs + tiles), tiles' extent, every key's rank
  // and local index.
  double layout = 8 * (W + 1) + 4 * (A + 1) + 12 * ((double)c->n_runs + A + 1) + 16 * A + 8 * N;
  // The heads' bit sets uploaded (dist_gpu_build.c builder_ready: vbits, sbits).
  double bits = 2 * 4 * H * words;
  // The conversion (vs_gpu_conv_init): verticals by source (vlist, vseg), bit counts (scnt, vcnt), per-(cell, source)
  // counts and offsets (raw_t, raw_b, tile_cnt, bar_cnt), the cell order's keys (two) and cub's scratch (an alternate
  // key buffer), the order; then (vs_gpu_convert) the index's tile_idx + tile_kind and bar_idx at their need.
  double conv = 4 * H * N + 8 * H * (W + 1) + 2 * 4 * H * (words + 1) + 4 * 8 * (offs + 1) + 2 * 8 * (nk + 1) + 8 * nk +
                4 * (nk + 1) + 5 * T + 4 * B;
  // The transposer (sa_gpu_transpose, one source at a time, its result downloaded before the next; the source's
  // arrays bounded by the rank's totals): per-cell counts and offsets (cnt_t, off_t, cnt_b, off_b); the tile entries'
  // sort, keys and values two each and cub's scratch (an alternate key and value); the bars' key bit sets and their
  // ranks with the words' populations (kbits, kscan: H x N bits, two int64 a word), the lists' counts (kfill) and the
  // heads' ranges (hb); the bar chunks' work: the compute chunks' counts (hc_cnt), the KV heads' key bit sets and
  // scans (bits, wscan), their bases (kv_base, chunk_base).
  double hchunks = keys / 64 + H, chunks = keys / 64 + Hkv, hc_q = min2(B, hchunks * nq);
  double work = 4 * 8 * (cells + 1) + 16 * T + 8 * T + 4 * H * words + 16 * (H * words + 1) + 8 * (keys + 1) +
                8 * (H + 1) + 8 * (hchunks + 1) + 4 * Hkv * words + 16 * (Hkv * words + 1) + 16 * (Hkv + 1);
  // Its result (transpose_gpu.cu tt_result, no bars' scratch): the transposed index (kv_cnt over the source's KV
  // tiles, at most every tile's; q_idx, q_kind; bar_key_head, bar_key, bar_q_cnt; bar_q_idx), the compute chunks
  // (hc_head, hc_first, hc_n, hc_q_cnt, hc_q_idx: a chunk's query tiles at most all of the rank's, their sum at most
  // the bars) and the reduce chunks (chunk_kvh, chunk_n, chunk_key: 64 keys, slot_entry: 64 a head of the group).
  double result = 8 * (H * A + 1) + 5 * T + 8 * keys + 8 * (keys + 1) + 4 * B +
                  12 * hchunks + 8 * (hchunks + 1) + 4 * hc_q + 8 * chunks + 4 * 64 * chunks + 4 * 64 * group * chunks;
  // The forward form (plan.spec.fwd_runs: vs_gpu_runs_init, vs_gpu_runs_build): the slash counts (scnt) and dilated
  // sets (dil), per-(cell, source) counts (raw: tiles, runs, bars) and offsets (tile_cnt, run_cnt, bar_cnt), the cell
  // order's keys (two) and cub's scratch (an alternate key buffer), the order; its tile_idx + tile_kind, run_key +
  // run_len and bar_idx at their need.
  double runs = c->fwd_runs ? 4 * H * (words + 1) + 4 * (H * words + 1) + 6 * 8 * (offs + 1) + 2 * 8 * (nk + 1) +
                                  8 * nk + 4 * (nk + 1) + 5 * (double)c->fwd_tiles + 5 * (double)c->runs +
                                  4 * (double)c->fwd_bars
                            : 0;
  return layout + bits + conv + work + result + runs;
}

plan_cache_builder plan_cache_builder_fate(double capacity, double others, double builder, double need) {
  if (builder <= 0) return PLAN_CACHE_BUILDER_KEPT;
  double free_after = capacity - others - builder;
  if (free_after >= builder + max2(need, 0) + PLAN_CACHE_BUILDER_MARGIN) return PLAN_CACHE_BUILDER_KEPT;
  return free_after >= 0 ? PLAN_CACHE_BUILDER_RELEASED : PLAN_CACHE_BUILDER_ON_HOST;
}

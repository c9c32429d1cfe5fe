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

// A device array grown by kernels/transpose_gpu.cu's grow (and vs_convert.cu's index arrays): a quarter to spare.
static double grown(double bytes) { return bytes + bytes / 4 + 256; }

double plan_cache_gpu_builder_bytes(const gpu_builder_counts *c) {
  double N = (double)c->n_tokens, W = (double)c->world, H = (double)c->heads, Hkv = (double)c->kv_heads;
  double words = ceil(N / 32), nq = (double)c->n_qtiles, cells = H * nq, offs = cells * (W + 1), nk = W * cells;
  double T = (double)c->tiles, B = (double)c->bars, P = max2(T, B);
  // Distinct (head, key) bars of all sources together: at most every bar its own, at most the heads' columns.
  double keys = min2(B, c->columns >= 0 ? (double)c->columns : H * N), group = Hkv > 0 ? H / Hkv : 1;
  // Layout tables (vs_gpu_layout_init): tile bases, segments (at most runs + tiles), tiles' extent, every key's rank
  // and local index.
  double layout = 8 * (W + 1) + 4 * (c->all_tiles + 1) + 12 * ((double)c->n_runs + c->all_tiles + 1) +
                  16 * (c->all_tiles + 1) + 8 * N;
  // The conversion (vs_gpu_conv_init): the bit sets uploaded, verticals by source, bit counts, per-(cell, source)
  // counts and offsets, the cell order's keys and its sort's scratch (cub's radix sort: an alternate key buffer),
  // then the index's tile_idx + tile_kind and bar_idx grown to need.
  double conv = 8 * H * words + 4 * H * N + 8 * H * (W + 1) + 8 * H * (words + 1) + 4 * 8 * (offs + 1) + 2 * 8 * (nk + 1) +
                8 * nk + 4 * (nk + 1) + 5 * (1.25 * T + 1024) + 4 * (1.25 * B + 1024);
  // The transposer (sa_gpu_transpose): per-cell counts and offsets, the sort's keys and values (two each) and
  // scratch (cub: alternate keys and values), the bars' run lengths; every source's result kept: its transposed
  // index (kv_cnt, q_idx, q_kind, bar keys, bar_q_cnt, bar_q_idx), its bar chunks (compute chunks of 64 keys a head
  // with their query tiles, at most the bars; reduce chunks of 64 keys a KV head) and the bars' partial dK, dV
  // scratch (2 x 128 floats a key).
  double hchunks = keys / 64 + H * W, chunks = keys / 64 + Hkv * W, hc_q = min2(B, hchunks * nq);
  double result = 8 * (H * (double)c->all_tiles + W) + 5 * T + 16 * keys + 8 * W + 4 * B  // the transposed index
                  + 12 * hchunks + 8 * hchunks + 4 * hc_q                                 // compute chunks
                  + 8 * chunks + 4 * 64 * chunks + 4 * 64 * group * chunks                 // reduce chunks
                  + 4 * 2 * 128 * keys;                                                    // scratch
  double trans = 4 * grown(8 * (cells + 1)) + 4 * grown(4 * P) + grown(8 * P) + grown(4 * (B + 1)) + grown(result);
  return layout + conv + trans;
}

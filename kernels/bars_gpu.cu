// bars_gpu.cu — the bars' compact form expanded on the device (sparse_attn.h, sa_bars_expand / sa_bars_t_expand):
// the same walk as plan/tiles_bars.c, one warp a list, 32 candidates at a time, each lane testing one by binary
// search and the ballot's prefix placing the kept ones, so a list comes out in order without a scan pass.
#include <cuda_runtime.h>

#include "kernels/sa_gpu.h"
#include "kernels/sparse_attn.h"

#define WARPS 8  // a block's warps, one list each

// Whether the cell's tiles tile_idx[t0, t1) or runs run_key[r0, r1) compute key k (segments ascend).
__device__ static bool bars_covered(const tile_index &d, int64_t t0, int64_t t1, int64_t r0, int64_t r1, int32_t k) {
  int32_t j = k / TILE;
  int64_t lo = t0, hi = t1;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (d.tile_idx[mid] < j) lo = mid + 1;
    else hi = mid;
  }
  if (lo < t1 && d.tile_idx[lo] == j) return true;
  lo = r0, hi = r1;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (d.run_key[mid] <= k) lo = mid + 1;
    else hi = mid;
  }
  return lo > r0 && k < d.run_key[lo - 1] + d.run_len[lo - 1];
}

// One warp per (cell, source) list: the first bar_cnt-many columns of (head, source) that no entry covers.
__global__ void bars_expand_kernel(tile_index d, const int64_t *col_cnt, const int32_t *col_key, int32_t *bar_idx) {
  int64_t seg = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32, segs = (int64_t)d.heads * d.n_qtiles * d.world;
  int lane = threadIdx.x % 32;
  if (seg >= segs) return;
  int W = d.world, s = (int)(seg % W);
  int64_t cell = seg / W, o = cell * (W + 1) + s, h = cell / d.n_qtiles;
  int64_t b0 = d.bar_cnt[o], n = d.bar_cnt[o + 1] - b0;
  if (n == 0) return;
  int64_t t0 = d.tile_cnt[o], t1 = d.tile_cnt[o + 1];
  int64_t r0 = d.run_cnt ? d.run_cnt[o] : 0, r1 = d.run_cnt ? d.run_cnt[o + 1] : 0;
  int64_t c0 = col_cnt[h * W + s], c1 = col_cnt[h * W + s + 1], w = 0;
  for (int64_t x = c0; x < c1 && w < n; x += 32) {
    int32_t k = x + lane < c1 ? col_key[x + lane] : -1;
    bool keep = k >= 0 && !bars_covered(d, t0, t1, r0, r1, k);
    unsigned m = __ballot_sync(0xffffffffu, keep);
    int64_t at = w + __popc(m & ((1u << lane) - 1));
    if (keep && at < n) bar_idx[b0 + at] = k;
    w += __popc(m);
  }
}

// One warp per bar key: the last bar_q_cnt-many query tiles without an entry on the key's KV tile, ascending.
__global__ void bars_t_expand_kernel(tile_index_t d, int32_t *bar_q_idx) {
  int64_t x = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (x >= d.n_bar_keys) return;
  int64_t b0 = d.bar_q_cnt[x], n = d.bar_q_cnt[x + 1] - b0, w = 0;
  int64_t kv = (int64_t)d.bar_key_head[x] * d.n_kvtiles + d.bar_key[x] / TILE;
  int64_t q0 = d.kv_cnt[kv], q1 = d.kv_cnt[kv + 1];
  for (int32_t top = d.n_qtiles - 1; top >= 0 && w < n; top -= 32) {
    int32_t i = top - lane;  // lane 0 the highest: ranks from the top
    bool keep = i >= 0;
    if (keep) {
      int64_t lo = q0, hi = q1;
      while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (d.q_idx[mid] < i) lo = mid + 1;
        else hi = mid;
      }
      keep = !(lo < q1 && d.q_idx[lo] == i);
    }
    unsigned m = __ballot_sync(0xffffffffu, keep);
    int64_t r = w + __popc(m & ((1u << lane) - 1));
    if (keep && r < n) bar_q_idx[b0 + n - 1 - r] = i;
    w += __popc(m);
  }
}

int sa_bars_expand(const sa_gpu_index *ix, int32_t *bar_idx, void *stream, sr_error *e) {
  if (!ix->col_cnt) return sr_input_error(e, NULL, "index", "holds its bar lists (not the compact form)");
  int64_t segs = (int64_t)ix->d.heads * ix->d.n_qtiles * ix->d.world;
  if (segs == 0 || ix->d.n_bars == 0) return SR_OK;
  bars_expand_kernel<<<(unsigned)((segs + WARPS - 1) / WARPS), WARPS * 32, 0, (cudaStream_t)stream>>>(
      ix->d, ix->col_cnt, ix->col_key, bar_idx);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int sa_bars_t_expand(const sa_gpu_index_t *ixt, int32_t *bar_q_idx, void *stream, sr_error *e) {
  if (!ixt->compact_bars) return sr_input_error(e, NULL, "index", "holds its bar lists (not the compact form)");
  int64_t nk = ixt->d.n_bar_keys;
  if (nk == 0) return SR_OK;
  bars_t_expand_kernel<<<(unsigned)((nk + WARPS - 1) / WARPS), WARPS * 32, 0, (cudaStream_t)stream>>>(ixt->d, bar_q_idx);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

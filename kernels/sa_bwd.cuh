// sa_bwd.cuh — what the two files of the GPU backward share: the argument block of its kernels and the
// launch of the Hopper (wgmma) tile kernels in kernels/sparse_attn_bwd_wg.cu, which sa_bwd
// (kernels/sparse_attn_bwd.cu) calls in place of its mma.sync tile kernels on the sm_90a image.
#ifndef SR_SA_BWD_CUH
#define SR_SA_BWD_CUH

#include <cuda_runtime.h>

#include "kernels/sa_cuda.cuh"
#include "kernels/sparse_attn.h"

typedef struct {
  const __nv_bfloat16 *q, *k, *v, *dout;
  const float *lse, *d_row;
  const int64_t *qpos, *kpos;
  tile_index ti;
  const int32_t *order;  // the forward's heaviest-first cell order of this source (sa_gpu_index)
  tile_index_t tt;
  sa_bar_chunks bc;
  const head_mask *masks;
  float *dq, *dk, *dv;
  int64_t n_q, n_k;
  int heads, kv_heads, src;
  float scale, scale_log2;
} bwd_args;

// How many parts a bar walk of `total` 64-row steps is cut into, one CTA a part (the bars' kernels of variants 3, 4
// and 5): with cap > 0 parts of cap steps (tests); else, with splits > 1, parts of an eighth of the even share of all
// the call's chunk walks' steps over `slots` resident CTAs, at least 64 steps; never more than `splits`. The
// simulator's cost_bar_waves (sim/cost.c) takes the same rule.
__device__ __forceinline__ int64_t bw_bar_parts(const bwd_args &a, int64_t total, int splits, int slots, int cap) {
  if (cap > 0) return min((int64_t)splits, (total + cap - 1) / cap);
  if (splits <= 1) return 1;
  int64_t all = 2 * a.bc.hc_q_cnt[a.bc.n_hchunks], fair = (all + slots - 1) / slots;
  int64_t part_steps = max((int64_t)64, fair / 8);
  return min((int64_t)splits, (total + part_steps - 1) / part_steps);
}

// The mma.sync backward kernels' first two products for a warp's 16 rows (rows warp * 16 .. of sk and sv) against QB
// rows of qb and dob (every row stride S), both zeroed first: in the dK/dV kernels S^T = K Q^T into s and
// dP^T = V dO^T into dp; the dQ kernel passes Q and dO first and K and V second, for S = Q K^T and dP = dO V^T.
template <int QB, int D>
__device__ __forceinline__ void sa_bwd_st_dpt(float (*s)[4], float (*dp)[4], const __nv_bfloat16 *sk,
                                              const __nv_bfloat16 *sv, const __nv_bfloat16 *qb,
                                              const __nv_bfloat16 *dob, int S, int warp, int lane) {
#pragma unroll
  for (int n = 0; n < QB / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    uint32_t fa[1][4];
    sa_load_a<16>(fa, sk + warp * 16 * S + kk * 16, S, lane);
    sa_mma_abt<16, QB>(s, fa, qb + kk * 16, S, lane);
    sa_load_a<16>(fa, sv + warp * 16 * S + kk * 16, S, lane);
    sa_mma_abt<16, QB>(dp, fa, dob + kk * 16, S, lane);
  }
}

// The deterministic Hopper backward (sa_bwd_variant 1): dQ over the cells of ix (query-major) and dK, dV
// over the KV tiles of ixt (KV-major) with wgmma, no float atomics (sm_90a image only; keys in 32 bits);
// the products split into groups so that the exponentials and dS overlap the dP and dV products. The
// bar chunks stay with the mma.sync kernels.
int sa_bwd_wg_tiles(const bwd_args *a, int head_dim, int64_t q_cells, int64_t kv_cells, cudaStream_t st, sr_error *e);

// dQ of the bar chunks only, query-major with wgmma (after sa_bwd_ws_tiles' kernel on the same stream).
int sa_bwd_wg_dq_bars(const bwd_args *a, int head_dim, int64_t q_cells, cudaStream_t st, sr_error *e);

// The default backward on the sm_90a image (sa_bwd_variant 2): the warp-specialized KV-major kernel for
// the tiles (dK, dV in registers; dQ added by TMA reductions in any order, so not bit-reproducible), then the
// bars' dQ (sa_bwd_wg_dq_bars); kernels/sparse_attn_bwd_ws.cu.
int sa_bwd_ws_tiles(const bwd_args *a, int head_dim, int64_t q_cells, int64_t kv_cells, cudaStream_t st, sr_error *e);

// sa_bwd_variant 4 (pairs 0): the warp-specialized kernel for the tiles, then the bars on the same machinery (their dK,
// dV and dQ in one kernel, gathered keys; dK, dV by vector reductions, dQ by the TMA's); variant 5 (pairs 1): the bars
// in pairs of compute chunks of one head (128 gathered keys a CTA, the merged walk of both chunks' query steps);
// kernels/sparse_attn_bwd_ws.cu.
int sa_bwd_ws_all(const bwd_args *a, int head_dim, int64_t kv_cells, int pairs, cudaStream_t st, sr_error *e);

// The bars' dK/dV of sa_bwd_variant 3 (after sa_bwd_ws_tiles on the same stream): each compute chunk's walk cut
// into parts, dK and dV added into the outputs by vector reductions (no scratch, no reduce kernel);
// kernels/sparse_attn_bwd_bars.cu.
int sa_bwd_bars_split(const bwd_args *a, int head_dim, cudaStream_t st, sr_error *e);

#endif

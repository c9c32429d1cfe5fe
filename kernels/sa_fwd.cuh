// sa_fwd.cuh — what the forward kernels of one ring step share (kernels/sparse_attn_fwd.cu: the mma.sync
// kernel for sm_80 and the host dispatch; kernels/sparse_attn_fwd_ws.cu: the warp-specialized Hopper
// kernel): the launch arguments, the online softmax of a 16-row accumulator tile in base 2, and the
// epilogue that normalises, writes the step's (O_b, LSE_b) and merges into the running fp32 state by
// the stable LSE merge (docs/design.md, "Numerics").
#ifndef SR_SA_FWD_CUH
#define SR_SA_FWD_CUH

#include <cuda_runtime.h>
#include <math.h>

#include "kernels/sa_cuda.cuh"
#include "kernels/sparse_attn.h"

typedef struct {
  const __nv_bfloat16 *q, *k, *v;
  const int64_t *qpos, *kpos;
  tile_index ti;
  const int32_t *order;
  const head_mask *masks;
  __nv_bfloat16 *o_b;
  float *lse_b, *o_run, *lse_run;
  int64_t n_q, n_k;
  int heads, kv_heads, src;
  float scale_log2;
  // AdaSpa's masses out of a dense pass (sa_fwd_block_lse; NULL otherwise): per (head, query tile, key block of
  // blk_b keys, row of the tile) the base-2 log of the row's softmax sum over the block at the row's running max
  float *blk;
  int blk_b;
} fwd_args;

// ---- online softmax and epilogue (shared by the mma.sync and the wgmma kernels) ------------------

// One softmax step of a 16-row tile over KS keys, scores s (raw Q K^T) in accumulator layout (rows
// g, g + 8 of the tile in e / 2): mask by the keep bits (MASKED), update the row max m (base 2,
// scaled) and sum l, leave P = exp2(scale s - m) in s (one FFMA per element) and the factor alpha by
// which the output accumulators must be rescaled.
template <int KS, bool MASKED>
__device__ __forceinline__ void fwd_softmax_p(float (*s)[4], uint32_t keep, float scale_log2, float *m, float *l,
                                              float *alpha) {
  float cm[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < KS / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      if (MASKED && !((keep >> (n * 4 + e)) & 1u)) s[n][e] = -INFINITY;
      cm[e >> 1] = fmaxf(cm[e >> 1], s[n][e]);
    }
  float mu[2];
#pragma unroll
  for (int ri = 0; ri < 2; ri++) {
    cm[ri] = fmaxf(cm[ri], __shfl_xor_sync(0xffffffffu, cm[ri], 1));
    cm[ri] = fmaxf(cm[ri], __shfl_xor_sync(0xffffffffu, cm[ri], 2));
    float mn = fmaxf(m[ri], cm[ri] == -INFINITY ? -INFINITY : cm[ri] * scale_log2);
    mu[ri] = mn == -INFINITY ? 0.f : mn;  // an all-masked row so far: keep exp2 finite (it gives 0)
    alpha[ri] = sa_exp2(m[ri] - mu[ri]);
    m[ri] = mn;
    l[ri] *= alpha[ri];
  }
#pragma unroll
  for (int n = 0; n < KS / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float p = sa_exp2(fmaf(s[n][e], scale_log2, -mu[e >> 1]));
      s[n][e] = p;
      l[e >> 1] += p;
    }
}

// o *= alpha per row; skipped when no row of the warp changed its max (alpha = 1), the common case
// once a row has seen its largest scores.
template <int D>
__device__ __forceinline__ void fwd_rescale(float (*o)[4], const float *alpha) {
  if (__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) return;
#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    o[n][0] *= alpha[0], o[n][1] *= alpha[0];
    o[n][2] *= alpha[1], o[n][3] *= alpha[1];
  }
}

// Both, for one 16-row tile (one code path for masked and unmasked chunks: a second copy costs the
// register-capped kernels spills).
template <int KS, int D>
__device__ __forceinline__ void fwd_softmax(float (*s)[4], uint32_t keep, float scale_log2, float *m, float *l,
                                            float (*o)[4]) {
  float alpha[2];
  fwd_softmax_p<KS, true>(s, keep, scale_log2, m, l, alpha);
  fwd_rescale<D>(o, alpha);
}

// Normalise, write the step's (O_b, LSE_b), merge into the running state, for MT 16-row tiles of a
// warp (rows rl, outside the tile when >= n_rows).
template <int D, int MT>
__device__ __forceinline__ void fwd_epilogue(const fwd_args &a, float (*o)[D / 8][4], float (*m)[2], float (*l)[2],
                                             const int (*rl)[2], int64_t row0, int n_rows, int h, int t) {
  // Every lane reads the running LSE before any lane of its quad overwrites it.
  float Lrun[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int ri = 0; ri < 2; ri++) {
      l[mt][ri] += __shfl_xor_sync(0xffffffffu, l[mt][ri], 1);
      l[mt][ri] += __shfl_xor_sync(0xffffffffu, l[mt][ri], 2);
      Lrun[mt][ri] = a.o_run && rl[mt][ri] < n_rows ? a.lse_run[(int64_t)h * a.n_q + row0 + rl[mt][ri]] : -INFINITY;
    }
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int ri = 0; ri < 2; ri++) {
      if (rl[mt][ri] >= n_rows) continue;
      int64_t row = row0 + rl[mt][ri];
      float lr = l[mt][ri], inv = lr > 0.f ? 1.f / lr : 0.f;
      float lse = lr > 0.f ? (m[mt][ri] + log2f(lr)) * SA_LN2 : -INFINITY;
      int64_t base = (row * a.heads + h) * D;
      if (a.o_b)
#pragma unroll
        for (int n = 0; n < D / 8; n++)
          *(uint32_t *)(a.o_b + base + n * 8 + 2 * t) =
              sa_pack_bf16(o[mt][n][2 * ri] * inv, o[mt][n][2 * ri + 1] * inv);
      if (a.lse_b && t == 0) a.lse_b[(int64_t)h * a.n_q + row] = lse;
      if (a.o_run && lse != -INFINITY) {
        float L = Lrun[mt][ri], sig = 1.f, Lnew = lse;
        if (L != -INFINITY) {  // O <- O - sigma(Lb - L)(O - Ob), L <- L + softplus(Lb - L)
          float x = lse - L, ex = __expf(-fabsf(x));
          sig = x >= 0.f ? 1.f / (1.f + ex) : ex / (1.f + ex);
          Lnew = L + fmaxf(x, 0.f) + log1pf(ex);
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
          float2 *p = (float2 *)(a.o_run + base + n * 8 + 2 * t), r = *p;
          r.x -= sig * (r.x - o[mt][n][2 * ri] * inv);
          r.y -= sig * (r.y - o[mt][n][2 * ri + 1] * inv);
          *p = r;
        }
        if (t == 0) a.lse_run[(int64_t)h * a.n_q + row] = Lnew;
      }
    }
}
// The warp-specialized Hopper forward (kernels/sparse_attn_fwd_ws.cu) over `cells` (head, query tile)
// cells, with or without the consumers' turn taking, and (with turns) with or without the keep bits'
// windowed form; the caller checked the shape and that the device runs the sm_90a image.
int sa_fwd_ws_launch(const fwd_args &a, int64_t cells, int head_dim, int pingpong, int windowed, cudaStream_t st,
                     sr_error *e);
// The same kernel (turns, windowed keep bits) that also writes a.blk (a.blk_b 64 or 128).
int sa_fwd_ws_launch_blk(const fwd_args &a, int64_t cells, int head_dim, cudaStream_t st, sr_error *e);

#endif

// sparse_attn_fwd.cu — forward of one ring step of sparse flash attention on the GPU (FlashAttention-2
// structure, Dao 2023): one CTA per (head, 128-row query tile), 32 (or 16) rows a warp; the cell's
// KV tiles (as two 64-key halves) and its bar keys (gathered 64 at a time by index) stream through
// double-buffered shared memory with cp.async; S = Q K^T and O += P V on mma.sync m16n8k16 bf16;
// online softmax in registers in base 2 (scale pre-multiplied by log2 e). The epilogue writes the
// step's O_b / LSE_b and merges into the running fp32 (O, LSE) by the stable form of DESIGN.md.
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/sa_cuda.cuh"
#include "kernels/sa_gpu.h"
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
} fwd_args;

// ---- chunk copy ----------------------------------------------------------------------------------

template <int D, int THREADS>
__device__ __forceinline__ void fwd_load_chunk(const fwd_args &a, const sa_cell &c, int ci, int kvh,
                                               __nv_bfloat16 *sk, __nv_bfloat16 *sv, int64_t *skpos, int tid) {
  sa_chunk ch = sa_chunk_of(&a.ti, &c, ci, a.n_k);
  int64_t stride = (int64_t)a.kv_heads * D;
  sa_load_rows<D, SA_BN, THREADS>(sk, a.k + kvh * D, ch.base, ch.idx, ch.n_valid, stride, tid);
  sa_load_rows<D, SA_BN, THREADS>(sv, a.v + kvh * D, ch.base, ch.idx, ch.n_valid, stride, tid);
  if (tid < SA_BN) {
    int64_t key = sa_row_of(ch.base, ch.idx, ch.n_valid, tid);
    skpos[tid] = key < 0 ? -1 : a.kpos[key];  // -1 marks "no key": masked in every row
  }
}

// ---- the kernel ----------------------------------------------------------------------------------

// MT = 16-row tiles per warp: 8 / MT warps cover the 128 query rows. MT = 2 reuses every K and V
// fragment for two row tiles (half the shared-memory reads per flop) at twice the accumulators.
// Q is re-read from shared memory per chunk, which leaves registers for two CTAs per SM.
template <int D, int MT>
__global__ void __launch_bounds__(256 / MT, 2) sa_fwd_kernel(const fwd_args a) {
  const int THREADS = 256 / MT, S = D + 8, KS = MT == 1 ? SA_BN : 32;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16 *sq = (__nv_bfloat16 *)smem, *sk = sq + SA_BM * S, *sv = sk + 2 * SA_BN * S;
  int64_t *skpos = (int64_t *)(sv + 2 * SA_BN * S);
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

  // An index built for one head serves every head: blocks then run the order once per head.
  int n_qt = a.ti.n_qtiles, ix_cells = a.ti.heads * n_qt;
  int cell = a.order[blockIdx.x % ix_cells];
  int h = a.ti.heads == 1 ? (int)(blockIdx.x / ix_cells) : cell / n_qt, qt = cell % n_qt;
  int kvh = h / (a.heads / a.kv_heads);
  sa_cell c = sa_cell_of(&a.ti, h, qt, a.src);
  int64_t row0 = (int64_t)qt * SA_BM;
  int n_rows = (int)min((int64_t)SA_BM, a.n_q - row0);

  sa_load_rows<D, SA_BM, THREADS>(sq, a.q + (int64_t)h * D, row0, NULL, n_rows, (int64_t)a.heads * D, tid);
  sa_cp_async_commit();
  if (c.n_chunks > 0) fwd_load_chunk<D, THREADS>(a, c, 0, kvh, sk, sv, skpos, tid);
  sa_cp_async_commit();

  const __nv_bfloat16 *sqw = sq + warp * 16 * MT * S;
  int rl[MT][2];
  int64_t qp[MT][2];
  float o[MT][D / 8][4], m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int i = 0; i < 2; i++) {
      rl[mt][i] = warp * 16 * MT + mt * 16 + g + 8 * i;
      qp[mt][i] = rl[mt][i] < n_rows ? a.qpos[row0 + rl[mt][i]] : -2;
      m[mt][i] = -INFINITY, l[mt][i] = 0.f;
    }
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
  const head_mask *mask = a.masks ? &a.masks[h] : NULL;

  for (int ci = 0; ci < c.n_chunks; ci++) {
    int buf = ci & 1;
    if (ci + 1 < c.n_chunks) {
      fwd_load_chunk<D, THREADS>(a, c, ci + 1, kvh, sk + (buf ^ 1) * SA_BN * S, sv + (buf ^ 1) * SA_BN * S,
                                 skpos + (buf ^ 1) * SA_BN, tid);
      sa_cp_async_commit();
      sa_cp_async_wait<1>();
    } else {
      sa_cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16 *kb = sk + buf * SA_BN * S, *vb = sv + buf * SA_BN * S;
    const int64_t *kp = skpos + buf * SA_BN;

    sa_chunk ch = sa_chunk_of(&a.ti, &c, ci, a.n_k);
    int all_kept = ch.kind == SA_CHUNK_FULL && ch.n_valid == SA_BN;
    // Softmax steps of KS keys: all 64 at MT = 1; 32 at MT = 2, which keeps the scores of two row
    // tiles within the register budget (the chunk's copy is still 64 keys).
#pragma unroll 1
    for (int sub = 0; sub < SA_BN / KS; sub++) {
      float s[MT][KS / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < KS / 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        uint32_t qa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) sa_load_a<16>((uint32_t(*)[4])qa[mt], sqw + mt * 16 * S + kk * 16, S, lane);
        sa_mma_abt_k16<KS, MT>(s, qa, kb + sub * KS * S + kk * 16, S, lane);
      }
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        uint32_t keep = all_kept ? 0xffffffffu : sa_keep_bits<KS / 8>(ch.kind, mask, qp[mt], kp + sub * KS, t);
        float cm[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < KS / 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            float x = (keep >> (n * 4 + e)) & 1u ? s[mt][n][e] * a.scale_log2 : -INFINITY;
            s[mt][n][e] = x;
            cm[e >> 1] = fmaxf(cm[e >> 1], x);
          }
        float mu[2], alpha[2];
#pragma unroll
        for (int ri = 0; ri < 2; ri++) {
          cm[ri] = fmaxf(cm[ri], __shfl_xor_sync(0xffffffffu, cm[ri], 1));
          cm[ri] = fmaxf(cm[ri], __shfl_xor_sync(0xffffffffu, cm[ri], 2));
          float mn = fmaxf(m[mt][ri], cm[ri]);
          mu[ri] = mn == -INFINITY ? 0.f : mn;  // an all-masked row so far: keep exp2 finite (it gives 0)
          alpha[ri] = exp2f(m[mt][ri] - mu[ri]);
          m[mt][ri] = mn;
          l[mt][ri] *= alpha[ri];
        }
#pragma unroll
        for (int n = 0; n < KS / 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            float p = exp2f(s[mt][n][e] - mu[e >> 1]);
            s[mt][n][e] = p;
            l[mt][e >> 1] += p;
          }
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
          o[mt][n][0] *= alpha[0], o[mt][n][1] *= alpha[0];
          o[mt][n][2] *= alpha[1], o[mt][n][3] *= alpha[1];
        }
      }
      sa_mma_pb_mt<KS, D, MT>(o, s, vb + sub * KS * S, S, lane);
    }
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }

  // ---- epilogue: normalise, write the step's (O_b, LSE_b), merge into the running state ----
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

// ---- host ------------------------------------------------------------------------------------------

template <int D, int MT>
static int fwd_launch(const fwd_args &a, int64_t cells, cudaStream_t st, sr_error *e) {
  size_t smem = (size_t)(SA_BM + 4 * SA_BN) * (D + 8) * sizeof(__nv_bfloat16) + 2 * SA_BN * sizeof(int64_t);
  SA_CUDA(cudaFuncSetAttribute(sa_fwd_kernel<D, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  sa_fwd_kernel<D, MT><<<(unsigned)cells, 256 / MT, smem, st>>>(a);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int sa_fwd_variant = 0;  // 0: one 16-row tile per warp (default), 1: two (bench and test comparisons)

int sa_fwd(const sa_shape *s, const void *q, const void *k, const void *v, const int64_t *qpos, const int64_t *kpos,
           const sa_gpu_index *ix, int src, const head_mask *masks, void *o_b, float *lse_b, float *o_run,
           float *lse_run, void *stream, sr_error *e) {
  int rc = sa_check_shape(s, &ix->d, src, e);
  if (rc) return rc;
  if (o_run && !lse_run) return sr_input_error(e, NULL, "sa_fwd", "o_run given without lse_run");
  fwd_args a;
  a.q = (const __nv_bfloat16 *)q, a.k = (const __nv_bfloat16 *)k, a.v = (const __nv_bfloat16 *)v;
  a.qpos = qpos, a.kpos = kpos, a.ti = ix->d, a.order = ix->order + (int64_t)src * ix->cells, a.masks = masks;
  a.o_b = (__nv_bfloat16 *)o_b, a.lse_b = lse_b, a.o_run = o_run, a.lse_run = lse_run;
  a.n_q = s->n_q, a.n_k = s->n_k, a.heads = s->heads, a.kv_heads = s->kv_heads, a.src = src;
  a.scale_log2 = s->scale * SA_LOG2E;
  int64_t cells = (int64_t)s->heads * ix->d.n_qtiles;
  if (cells == 0) return SR_OK;
  cudaStream_t st = (cudaStream_t)stream;
  if (s->head_dim == 64) return sa_fwd_variant ? fwd_launch<64, 2>(a, cells, st, e) : fwd_launch<64, 1>(a, cells, st, e);
  return sa_fwd_variant ? fwd_launch<128, 2>(a, cells, st, e) : fwd_launch<128, 1>(a, cells, st, e);
}

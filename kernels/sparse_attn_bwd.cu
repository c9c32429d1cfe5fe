// sparse_attn_bwd.cu — backward of one ring step of sparse flash attention on the GPU, deterministic:
// no float atomics across blocks. With the final LSE and D = rowsum(dO * O) (FlashAttention-2's
// backward, Dao 2023, Algorithm 2): P = exp(s q.k - L), dP = dO V^T, dS = P (dP - D);
//   dQ += s dS K       query-major kernel over the tile index (each CTA owns 128 query rows),
//   dV += P^T dO, dK += s dS^T Q   KV-major kernels over the transposed index: one CTA owns a KV
//   tile of one KV head (all query heads of its GQA group), then one owns a chunk of 64 bar keys.
// Every owner adds its sum into the fp32 outputs once, so results repeat bit for bit. On the sm_90a
// image the two tile kernels give way to their wgmma versions (kernels/sparse_attn_bwd_wg.cu,
// sa_bwd_variant 1 and 2); the bar kernels below serve variants 0 to 2 (variant 3 walks the bars in
// kernels/sparse_attn_bwd_bars.cu).
#include <cuda_runtime.h>
#include <stdlib.h>
#include <math.h>

#include "kernels/sa_bwd.cuh"
#include "kernels/sa_cuda.cuh"
#include "kernels/sa_gpu.h"
#include "kernels/sparse_attn.h"

// The backward of the sm_90a image when the shape is not deterministic (sa_bwd_variant = -1): variant 5, the bars in
// pairs of compute chunks of one head on the warp-specialized kernel (kernels/sparse_attn_bwd_ws.cu,
// sa_bwd_ws_pair_kernel): against variant 4 in the same jobs on one H200, a vs-topp:0.95 layer's backward 5.4% shorter
// at 64K (results/kernels/2026-11-28-h200-bwd-pair-variant5) and 8.6% at 128K, the trainer's step at 128K 2.1%
// (results/train/2026-11-28-h200-vs-peer-bwd-pair); racecheck 0 hazards. 4 before (3 before that).
#define SA_BWD_DEFAULT 5

// ---- D = rowsum(dO * O) ------------------------------------------------------------------------------

__global__ void sa_bwd_prepare_kernel(int64_t n_q, int heads, int d, const __nv_bfloat16 *o,
                                      const __nv_bfloat16 *dout, float *d_row) {
  int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x & 31;
  if (w >= n_q * heads) return;
  float acc = 0.f;
  for (int c = lane; c < d; c += 32) acc += __bfloat162float(o[w * d + c]) * __bfloat162float(dout[w * d + c]);
  for (int x = 16; x > 0; x >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, x);
  if (lane == 0) d_row[(w % heads) * n_q + w / heads] = acc;
}

int sa_bwd_prepare(int64_t n_q, int32_t heads, int32_t head_dim, const void *o, const void *dout, float *d_row,
                   void *stream, sr_error *e) {
  int64_t warps = n_q * heads;
  if (warps == 0) return SR_OK;
  sa_bwd_prepare_kernel<<<(unsigned)((warps * 32 + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
      n_q, heads, head_dim, (const __nv_bfloat16 *)o, (const __nv_bfloat16 *)dout, d_row);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}


// ---- dQ: query-major ------------------------------------------------------------------------------

#define DQ_THREADS 256

template <int D>
__device__ __forceinline__ void dq_load_chunk(const bwd_args &a, const sa_cell &c, int ci, int kvh,
                                              __nv_bfloat16 *sk, __nv_bfloat16 *sv, int64_t *skpos, int tid) {
  sa_chunk ch = sa_chunk_of(&a.ti, &c, ci, a.n_k);
  int64_t stride = (int64_t)a.kv_heads * D;
  sa_load_rows<D, SA_BN, DQ_THREADS>(sk, a.k + kvh * D, ch.base, ch.idx, ch.n_valid, stride, tid);
  sa_load_rows<D, SA_BN, DQ_THREADS>(sv, a.v + kvh * D, ch.base, ch.idx, ch.n_valid, stride, tid);
  if (tid < SA_BN) {
    int64_t key = sa_row_of(ch.base, ch.idx, ch.n_valid, tid);
    skpos[tid] = key < 0 ? -1 : a.kpos[key];
  }
}

template <int D>
__global__ void __launch_bounds__(DQ_THREADS, 1) sa_bwd_dq_kernel(const bwd_args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int S = D + 8;
  __nv_bfloat16 *sq = (__nv_bfloat16 *)smem, *sdo = sq + SA_BM * S, *sk = sdo + SA_BM * S, *sv = sk + 2 * SA_BN * S;
  int64_t *skpos = (int64_t *)(sv + 2 * SA_BN * S);
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  int n_qt = a.ti.n_qtiles, ix_heads = a.ti.heads;
  int h = (int)(blockIdx.x / n_qt), qt = (int)(blockIdx.x % n_qt), kvh = h / (a.heads / a.kv_heads);
  sa_cell c = sa_cell_of(&a.ti, ix_heads == 1 ? 0 : h, qt, a.src);
  if (c.n_chunks == 0) return;
  int64_t row0 = (int64_t)qt * SA_BM;
  int n_rows = (int)min((int64_t)SA_BM, a.n_q - row0);
  sa_load_rows<D, SA_BM, DQ_THREADS>(sq, a.q + (int64_t)h * D, row0, NULL, n_rows, (int64_t)a.heads * D, tid);
  sa_load_rows<D, SA_BM, DQ_THREADS>(sdo, a.dout + (int64_t)h * D, row0, NULL, n_rows, (int64_t)a.heads * D, tid);
  sa_cp_async_commit();
  dq_load_chunk<D>(a, c, 0, kvh, sk, sv, skpos, tid);
  sa_cp_async_commit();

  int rl[2] = {warp * 16 + g, warp * 16 + g + 8};
  int64_t qp[2];
  float L2[2], Dr[2];
  for (int i = 0; i < 2; i++) {
    int64_t row = row0 + rl[i];
    float L = rl[i] < n_rows ? a.lse[(int64_t)h * a.n_q + row] : -INFINITY;
    qp[i] = rl[i] < n_rows ? a.qpos[row] : -2;
    L2[i] = L == -INFINITY ? INFINITY : L * SA_LOG2E;  // an empty row has P = 0 everywhere
    Dr[i] = rl[i] < n_rows ? a.d_row[(int64_t)h * a.n_q + row] : 0.f;
  }
  const head_mask *mask = a.masks ? &a.masks[h] : NULL;
  float dq[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;

  for (int ci = 0; ci < c.n_chunks; ci++) {
    int buf = ci & 1;
    if (ci + 1 < c.n_chunks) {
      dq_load_chunk<D>(a, c, ci + 1, kvh, sk + (buf ^ 1) * SA_BN * S, sv + (buf ^ 1) * SA_BN * S,
                       skpos + (buf ^ 1) * SA_BN, tid);
      sa_cp_async_commit();
      sa_cp_async_wait<1>();
    } else {
      sa_cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16 *kb = sk + buf * SA_BN * S, *vb = sv + buf * SA_BN * S;
    float s[SA_BN / 8][4], dp[SA_BN / 8][4];
    sa_bwd_st_dpt<SA_BN, D>(s, dp, sq, sdo, kb, vb, S, warp, lane);  // S = Q K^T, dP = dO V^T for the warp's 16 rows
    sa_chunk ch = sa_chunk_of(&a.ti, &c, ci, a.n_k);
    uint32_t keep = 0xffffffffu;
    if (ch.kind != SA_CHUNK_FULL || ch.n_valid < SA_BN) keep = sa_keep_bits(ch.kind, mask, qp, skpos + buf * SA_BN, t);
#pragma unroll
    for (int n = 0; n < SA_BN / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float p = (keep >> (n * 4 + e)) & 1u ? sa_exp2(s[n][e] * a.scale_log2 - L2[e >> 1]) : 0.f;
        s[n][e] = p * (dp[n][e] - Dr[e >> 1]);  // dS
      }
    sa_mma_pb<SA_BN, D>(dq, s, kb, S, lane);
    __syncthreads();
  }
  for (int ri = 0; ri < 2; ri++) {
    if (rl[ri] >= n_rows) continue;
    float *out = a.dq + ((row0 + rl[ri]) * a.heads + h) * D;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      float2 *p = (float2 *)(out + n * 8 + 2 * t), r = *p;
      r.x += a.scale * dq[n][2 * ri], r.y += a.scale * dq[n][2 * ri + 1];
      *p = r;
    }
  }
}

// ---- dK, dV: KV-major ---------------------------------------------------------------------------------

// One CTA owns WARPS*16 keys: a KV tile of one KV head (BAR = false, 128 keys; it walks the query
// chunks of 64 rows of every query head of the GQA group that use the tile, and adds into dK, dV), or
// a compute chunk of 64 bar entries of one query head (BAR = true; it writes the entries' partial
// dK, dV into their own scratch rows, which sa_bar_reduce_kernel then sums over the group).
template <int D, int WARPS, bool BAR>
__global__ void __launch_bounds__(WARPS * 32, 1) sa_bwd_dkdv_kernel(const bwd_args a) {
  const int THREADS = WARPS * 32, KEYS = WARPS * 16, S = D + 8, QB = 64;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16 *sk = (__nv_bfloat16 *)smem, *sv = sk + KEYS * S, *sq = sv + KEYS * S, *sdo = sq + 2 * QB * S;
  int64_t *sqpos = (int64_t *)(sdo + 2 * QB * S);  // [2][QB]
  float *sl2 = (float *)(sqpos + 2 * QB), *sd = sl2 + 2 * QB;  // [2][QB] each
  int *slisted = (int *)(sd + 2 * QB);                          // [2][KEYS] (bars only)
  __shared__ int64_t s_cum[33];
  __shared__ int64_t s_beg[32];
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  int group = a.heads / a.kv_heads;

  int kvh, n_valid, bar_head = 0, first = 0, ng = BAR ? 1 : group;
  int64_t base = 0;
  const int32_t *idx = NULL;
  int cidx = blockIdx.x;
  if (BAR) {
    bar_head = a.bc.hc_head[cidx], first = a.bc.hc_first[cidx], n_valid = a.bc.hc_n[cidx];
    kvh = bar_head / group, idx = a.tt.bar_key + first;
  } else {
    int j = (int)(blockIdx.x % a.tt.n_kvtiles);
    kvh = (int)(blockIdx.x / a.tt.n_kvtiles), base = (int64_t)j * TILE;
    n_valid = (int)min((int64_t)TILE, a.n_k - base);
  }
  // Query chunks: per head of the group, its query tiles (entries [beg, end)), two 64-row halves each.
  if (tid == 0) {
    s_cum[0] = 0;
    for (int gi = 0; gi < ng; gi++) {
      int64_t b, en;
      if (BAR) {
        b = a.bc.hc_q_cnt[cidx], en = a.bc.hc_q_cnt[cidx + 1];
      } else {
        int ih = a.tt.heads == 1 ? 0 : kvh * group + gi;
        int64_t x = (int64_t)ih * a.tt.n_kvtiles + blockIdx.x % a.tt.n_kvtiles;
        b = a.tt.kv_cnt[x], en = a.tt.kv_cnt[x + 1];
      }
      s_beg[gi] = b, s_cum[gi + 1] = s_cum[gi] + 2 * (en - b);
    }
  }
  int64_t kstride = (int64_t)a.kv_heads * D, qstride = (int64_t)a.heads * D;
  sa_load_rows<D, KEYS, THREADS>(sk, a.k + kvh * D, base, idx, n_valid, kstride, tid);
  sa_load_rows<D, KEYS, THREADS>(sv, a.v + kvh * D, base, idx, n_valid, kstride, tid);
  sa_cp_async_commit();
  __syncthreads();
  int64_t total = s_cum[ng];
  if (total == 0) {
    sa_cp_async_wait<0>();
    return;
  }

  // The two keys (rows g, g+8 of the warp) this thread's accumulators belong to.
  int kr[2] = {warp * 16 + g, warp * 16 + g + 8};
  int64_t kp[2];
  for (int i = 0; i < 2; i++) {
    int64_t key = sa_row_of(base, idx, n_valid, kr[i]);
    kp[i] = key < 0 ? -1 : a.kpos[key];
  }

  // Chunk f -> (head of group, query tile, half, kind, and for bars the key slots it lists).
  auto locate = [&](int64_t f, int *gi, int *qtile, int *half, int *kind, int64_t *ent) {
    int x = 0;
    while (s_cum[x + 1] <= f) x++;
    int64_t local = f - s_cum[x], pos = s_beg[x] + local / 2;
    *gi = x, *half = (int)(local & 1), *ent = pos;
    *qtile = BAR ? a.bc.hc_q_idx[pos] : a.tt.q_idx[pos];
    *kind = BAR ? SA_CHUNK_BAR : a.tt.q_kind[pos] == TILE_FULL ? SA_CHUNK_FULL : SA_CHUNK_PARTIAL;
  };
  auto load = [&](int64_t f, int buf) {
    int gi, qtile, half, kind;
    int64_t ent;
    locate(f, &gi, &qtile, &half, &kind, &ent);
    int h = BAR ? bar_head : kvh * group + gi;
    int64_t r0 = (int64_t)qtile * TILE + half * QB, left = a.n_q - r0;
    int nv = left < 0 ? 0 : left > QB ? QB : (int)left;
    sa_load_rows<D, QB, THREADS>(sq + buf * QB * S, a.q + (int64_t)h * D, r0, NULL, nv, qstride, tid);
    sa_load_rows<D, QB, THREADS>(sdo + buf * QB * S, a.dout + (int64_t)h * D, r0, NULL, nv, qstride, tid);
    if (tid < QB) {
      int r = tid;
      float L = r < nv ? a.lse[(int64_t)h * a.n_q + r0 + r] : -INFINITY;
      sqpos[buf * QB + r] = r < nv ? a.qpos[r0 + r] : -2;
      sl2[buf * QB + r] = L == -INFINITY ? INFINITY : L * SA_LOG2E;
      sd[buf * QB + r] = r < nv ? a.d_row[(int64_t)h * a.n_q + r0 + r] : 0.f;
    }
    if (BAR && tid < KEYS) {  // is query tile qtile in this entry's bar list?
      int e = tid < n_valid ? first + tid : -1, listed = 0;
      if (e >= 0) {
        int64_t lo = a.tt.bar_q_cnt[e], hi = a.tt.bar_q_cnt[e + 1];
        while (lo < hi) {
          int64_t mid = (lo + hi) / 2;
          if (a.tt.bar_q_idx[mid] < qtile) lo = mid + 1;
          else hi = mid;
        }
        listed = lo < a.tt.bar_q_cnt[e + 1] && a.tt.bar_q_idx[lo] == qtile;
      }
      slisted[buf * KEYS + tid] = listed;
    }
  };

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;

  load(0, 0);
  sa_cp_async_commit();
  for (int64_t f = 0; f < total; f++) {
    int buf = (int)(f & 1);
    if (f + 1 < total) {
      load(f + 1, buf ^ 1);
      sa_cp_async_commit();
      sa_cp_async_wait<1>();
    } else {
      sa_cp_async_wait<0>();
    }
    __syncthreads();
    int gi, qtile, half, kind;
    int64_t ent;
    locate(f, &gi, &qtile, &half, &kind, &ent);
    int h = BAR ? bar_head : kvh * group + gi;
    const __nv_bfloat16 *qb = sq + buf * QB * S, *dob = sdo + buf * QB * S;
    const int64_t *qp = sqpos + buf * QB;
    const float *l2 = sl2 + buf * QB, *dr = sd + buf * QB;

    // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys against 64 query rows.
    float s[QB / 8][4], dp[QB / 8][4];
    sa_bwd_st_dpt<QB, D>(s, dp, sk, sv, qb, dob, S, warp, lane);
    const head_mask *mask = a.masks ? &a.masks[h] : NULL;
    int lst[2] = {1, 1};
    if (BAR) lst[0] = slisted[buf * KEYS + kr[0]], lst[1] = slisted[buf * KEYS + kr[1]];
    uint32_t keep = 0;
    if (kind == SA_CHUNK_FULL && kp[0] >= 0 && kp[1] >= 0 && qp[QB - 1] >= 0) keep = 0xffffffffu;
    else if (!sa_keep_bits_t_vs(kind, mask, qp, kp, t, &keep))
#pragma unroll 1
    for (int i = 0; i < 32; i++) {  // keep bits in a rolled loop, as in the forward (sa_keep_bits)
      int col = (i >> 2) * 8 + 2 * t + (i & 1);
      int64_t q = qp[col], k = (i & 2) ? kp[1] : kp[0];
      int keep_i = q >= 0 && k >= 0 &&
                   (kind == SA_CHUNK_FULL  ? 1
                    : kind == SA_CHUNK_BAR ? ((i & 2) ? lst[1] : lst[0]) && k <= q
                    : mask                 ? sa_mask_keeps(mask, q, k)
                                           : k <= q);
      keep |= (uint32_t)keep_i << i;
    }
#pragma unroll
    for (int n = 0; n < QB / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int col = n * 8 + 2 * t + (e & 1);
        float p = (keep >> (n * 4 + e)) & 1u ? sa_exp2(s[n][e] * a.scale_log2 - l2[col]) : 0.f;
        s[n][e] = p;                        // P^T
        dp[n][e] = p * (dp[n][e] - dr[col]);  // dS^T
      }
    sa_mma_pb<QB, D>(dv, s, dob, S, lane);
    sa_mma_pb<QB, D>(dk, dp, qb, S, lane);
    __syncthreads();
  }
  for (int ri = 0; ri < 2; ri++) {
    int64_t key = sa_row_of(base, idx, n_valid, kr[ri]);
    if (key < 0) continue;
    if (BAR) {  // the entry's own scratch row: written, not added, so no order matters
      int64_t row = (a.bc.scratch_heads == 1 ? 0 : (int64_t)bar_head * a.tt.n_bar_keys) + first + kr[ri];
      float *sk_ = a.bc.scratch + row * 256, *sv_ = sk_ + 128;
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        *(float2 *)(sk_ + n * 8 + 2 * t) = make_float2(a.scale * dk[n][2 * ri], a.scale * dk[n][2 * ri + 1]);
        *(float2 *)(sv_ + n * 8 + 2 * t) = make_float2(dv[n][2 * ri], dv[n][2 * ri + 1]);
      }
      continue;
    }
    float *ok = a.dk + (key * a.kv_heads + kvh) * D, *ov = a.dv + (key * a.kv_heads + kvh) * D;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      float2 *p = (float2 *)(ok + n * 8 + 2 * t), r = *p;
      r.x += a.scale * dk[n][2 * ri], r.y += a.scale * dk[n][2 * ri + 1];
      *p = r;
      p = (float2 *)(ov + n * 8 + 2 * t), r = *p;
      r.x += dv[n][2 * ri], r.y += dv[n][2 * ri + 1];
      *p = r;
    }
  }
}

// ---- bars: sum the group's scratch rows of each key into dK, dV --------------------------------------

// One CTA per reduce chunk (64 distinct keys of one KV head); thread c owns column c of every key and
// adds the heads of the group in a fixed order, so the sum is the same on every run.
__global__ void sa_bar_reduce_kernel(const bwd_args a, int d) {
  int c = threadIdx.x, ch = blockIdx.x, group = a.bc.group, kvh = a.bc.chunk_kvh[ch];
  if (c >= d) return;
  for (int r = 0; r < a.bc.chunk_n[ch]; r++) {
    float sk = 0.f, sv = 0.f;
    for (int gi = 0; gi < group; gi++) {
      int e = a.bc.slot_entry[((int64_t)ch * group + gi) * 64 + r];
      if (e < 0) continue;
      int64_t row = (a.bc.scratch_heads == 1 ? 0 : (int64_t)(kvh * group + gi) * a.tt.n_bar_keys) + e;
      sk += a.bc.scratch[row * 256 + c], sv += a.bc.scratch[row * 256 + 128 + c];
    }
    int64_t key = a.bc.chunk_key[(int64_t)ch * 64 + r];
    a.dk[(key * a.kv_heads + kvh) * d + c] += sk;
    a.dv[(key * a.kv_heads + kvh) * d + c] += sv;
  }
}

// ---- host ----------------------------------------------------------------------------------------

template <int D>
static int bwd_launch(const bwd_args &a, int64_t q_cells, int64_t kv_cells, int var, cudaStream_t st, sr_error *e) {
  const int S = D + 8;
  size_t dq_smem = (size_t)(2 * SA_BM + 4 * SA_BN) * S * 2 + 2 * SA_BN * 8;
  size_t kv_smem = (size_t)(2 * 128 + 4 * 64) * S * 2 + 2 * 64 * (8 + 4 + 4) + 2 * 128 * 4;
  size_t bar_smem = (size_t)(2 * 64 + 4 * 64) * S * 2 + 2 * 64 * (8 + 4 + 4) + 2 * 64 * 4;
  SA_CUDA(cudaFuncSetAttribute(sa_bwd_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dq_smem));
  SA_CUDA(cudaFuncSetAttribute(sa_bwd_dkdv_kernel<D, 8, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)kv_smem));
  SA_CUDA(cudaFuncSetAttribute(sa_bwd_dkdv_kernel<D, 4, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)bar_smem));
  // tiles and bars, no bar scratch or reduce; 5: the bars in pairs of chunks
  if (var == 4 || var == 5) return sa_bwd_ws_all(&a, D, kv_cells, var == 5, st, e);
  if (var >= 2) {
    int rc = sa_bwd_ws_tiles(&a, D, q_cells, kv_cells, st, e);
    if (rc) return rc;
    if (var == 3) return sa_bwd_bars_split(&a, D, st, e);  // the bars' split walk, added into dK, dV directly
  } else if (var == 1) {
    int rc = sa_bwd_wg_tiles(&a, D, q_cells, kv_cells, st, e);
    if (rc) return rc;
  } else {
    if (q_cells) sa_bwd_dq_kernel<D><<<(unsigned)q_cells, DQ_THREADS, dq_smem, st>>>(a);
    SA_CUDA(cudaGetLastError());
    if (kv_cells) sa_bwd_dkdv_kernel<D, 8, false><<<(unsigned)kv_cells, 256, kv_smem, st>>>(a);
    SA_CUDA(cudaGetLastError());
  }
  // Bars: partial sums per entry, then the reduce adds them after the tiles (same stream: the two
  // kernels that add into dK/dV never run at once).
  if (a.bc.n_hchunks) sa_bwd_dkdv_kernel<D, 4, true><<<(unsigned)a.bc.n_hchunks, 128, bar_smem, st>>>(a);
  SA_CUDA(cudaGetLastError());
  if (a.bc.n_chunks) sa_bar_reduce_kernel<<<(unsigned)a.bc.n_chunks, 128, 0, st>>>(a, D);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int sa_bwd_variant = -1;

// SR_BWD_VARIANT as sa_bwd reads it: the variant 0 to 5 it names, -1 unset, -2 not a variant (sa_bwd's input error).
static int bwd_env_variant(void) {
  const char *v = getenv("SR_BWD_VARIANT");
  if (!v || !*v) return -1;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  return *end || x < 0 || x > 5 ? -2 : (int)x;
}

int sa_bwd_default_variant(void) {
  int env = bwd_env_variant();
  return !sa_wgmma_built() ? 0 : env >= 0 ? env : SA_BWD_DEFAULT;
}

int sa_bwd(const sa_shape *s, const void *q, const void *k, const void *v, const float *lse, const float *d_row,
           const void *dout, const int64_t *qpos, const int64_t *kpos, const sa_gpu_index *ix,
           const sa_gpu_index_t *ixt, int src, const head_mask *masks, float *dq, float *dk, float *dv, void *stream,
           sr_error *e) {
  int rc = sa_check_shape(s, &ix->d, src, e);
  if (rc) return rc;
  if (ixt->d.heads != ix->d.heads || ixt->d.n_kvtiles < (s->n_k + TILE - 1) / TILE)
    return sr_input_error(e, NULL, "sa_bwd", "transposed index does not match the index or the source shard");
  if (s->heads / s->kv_heads > 32) return sr_input_error(e, NULL, "kv_heads", "GQA groups above 32 heads");
  if (ix->d.n_runs)
    return sr_input_error(e, NULL, "sa_bwd", "the index has runs (the forward form of tiles_runs_build); the backward takes the tile form");
  if (ixt->d.n_bar_keys > 0 && !ixt->bc.scratch)
    return sr_input_error(e, NULL, "sa_bwd", "the transposed index has bars but no scratch (sa_gpu_index_t_upload_chunks: the caller's)");
  bwd_args a;
  a.q = (const __nv_bfloat16 *)q, a.k = (const __nv_bfloat16 *)k, a.v = (const __nv_bfloat16 *)v;
  a.dout = (const __nv_bfloat16 *)dout, a.lse = lse, a.d_row = d_row, a.qpos = qpos, a.kpos = kpos;
  a.ti = ix->d, a.order = ix->order + (int64_t)src * ix->cells, a.tt = ixt->d, a.bc = ixt->bc, a.masks = masks, a.dq = dq, a.dk = dk, a.dv = dv;
  a.n_q = s->n_q, a.n_k = s->n_k, a.heads = s->heads, a.kv_heads = s->kv_heads, a.src = src;
  a.scale = s->scale, a.scale_log2 = s->scale * SA_LOG2E;
  int64_t q_cells = (int64_t)s->heads * ix->d.n_qtiles, kv_cells = (int64_t)s->kv_heads * ixt->d.n_kvtiles;
  cudaStream_t st = (cudaStream_t)stream;
  // The wgmma kernels keep source-local keys in 32 bits.
  // The default: the warp-specialized kernel, or with s->deterministic the split kernels (bit-reproducible).
  // SR_BWD_VARIANT (A/B runs of the executor, the trainer and the benchmark): the variant of a call that is not
  // deterministic when sa_bwd_variant is unset.
  static int env_var = -3;
  if (env_var == -3) env_var = bwd_env_variant();
  if (env_var == -2)
    return sr_input_error(e, NULL, "SR_BWD_VARIANT", "expected a backward variant 0 to 5, got '%s'", getenv("SR_BWD_VARIANT"));
  int var = sa_bwd_variant >= 0 ? sa_bwd_variant : s->deterministic ? 1 : env_var >= 0 ? env_var : SA_BWD_DEFAULT;
  if (!sa_wgmma_built() || s->n_k >= INT32_MAX) var = 0;
  return s->head_dim == 64 ? bwd_launch<64>(a, q_cells, kv_cells, var, st, e)
                           : bwd_launch<128>(a, q_cells, kv_cells, var, st, e);
}

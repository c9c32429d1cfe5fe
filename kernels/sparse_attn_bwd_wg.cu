// sparse_attn_bwd_wg.cu — the backward's two tile kernels on Hopper tensor cores (wgmma, sm_90a; the
// products of kernels/sa_wgmma.cuh), same functions as the mma.sync kernels of
// kernels/sparse_attn_bwd.cu and the same deterministic split (FlashAttention-2's backward, Dao 2023,
// with dQ in a query-major pass instead of float atomics):
//   dQ kernel, one CTA of two warpgroups per (head, 128-row query tile), walking the cell's 64-key
//     chunks (KV tile halves, gathered bar keys) as the forward does: S = Q K^T and dP = dO V^T as
//     m64n64 products from shared memory, dS = P (dP - D) in registers, dQ += dS K with dS from
//     registers (FlashAttention-3 computes dQ the same way but adds it with atomics, Shah et al. 2024).
//   dK/dV kernel, one CTA of two warpgroups per (KV tile of 128 keys, KV head), walking the 64-row
//     query chunks of every query head of its GQA group through the transposed index: S^T = K Q^T and
//     dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q with P^T, dS^T from registers; dK, dV stay in
//     registers for the whole walk and are added into the fp32 outputs once.
// The next chunk is copied by cp.async (its global index reads issued one chunk further ahead) while
// the current one computes. Warp w of the CTA owns the same 16 rows (dQ) or keys (dK/dV) as warp w of
// the mma.sync kernels, because wgmma's accumulator layout per warp is mma.sync's m16n8 C fragment.
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/sa_bwd.cuh"
#include "kernels/sa_bwd_wg.cuh"
#include "kernels/sa_gpu.h"

// ---- dQ: query-major -------------------------------------------------------------------------------

// The rows of a chunk this thread copies: rows tid / (D/8) + j * (256 / (D/8)), segment tid % (D/8).
template <int D>
struct bw_rows {
  int32_t key[D / 32];  // source-local key of each row, -1 none (n_k < 2^31, checked on the host)
  int kind, n_valid;
};

template <int D>
__device__ __forceinline__ void bw_fetch(const bwd_args &a, const sa_cell &c, int ci, int tid, bw_rows<D> &w) {
  sa_chunk ch = sa_chunk_of(&a.ti, &c, ci, a.n_k);
  w.kind = ch.kind, w.n_valid = ch.n_valid;
#pragma unroll
  for (int j = 0; j < D / 32; j++)
    w.key[j] = (int32_t)sa_row_of(ch.base, ch.idx, ch.n_valid, tid / (D / 8) + j * (BW_THREADS / (D / 8)));
}

template <int D>
__device__ __forceinline__ void bw_issue(const bwd_args &a, const bw_rows<D> &w, int kvh, unsigned char *sk,
                                         unsigned char *sv, int64_t *skpos, int *sinfo, int tid) {
  const int segs = D / 8;
  int sg = tid % segs;
  int64_t stride = (int64_t)a.kv_heads * D;
#pragma unroll
  for (int j = 0; j < D / 32; j++) {
    int r = tid / segs + j * (BW_THREADS / segs);
    int64_t key = w.key[j];
    int64_t off = (key < 0 ? 0 : key * stride) + kvh * D + sg * 8;
    uint32_t so = sa_sw128_offset(r, sg * 8, SA_BN);
    sa_cp_async16(sk + so, a.k + off, key < 0 ? 0 : 16);
    sa_cp_async16(sv + so, a.v + off, key < 0 ? 0 : 16);
    if (sg == 0) {
      if (key < 0) skpos[r] = -1;  // "no key": masked in every row
      else sa_cp_async8(skpos + r, a.kpos + key);
    }
  }
  if (tid == 0) *sinfo = w.kind | w.n_valid << 4;
}

// BARS: only the cell's gathered bar chunks (the warp-specialized kernel of kernels/sparse_attn_bwd_ws.cu has
// added the tiles' dQ before this kernel runs on the same stream).
template <int D, bool OVL, bool BARS>
__global__ void __launch_bounds__(BW_THREADS, 1) sa_bwd_dq_wg_kernel(const bwd_args a) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char *sq = smem_raw + ((1024 - (sa_smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char *sdo = sq + SA_BM * D * 2, *sk = sdo + SA_BM * D * 2, *sv = sk + 2 * SA_BN * D * 2;
  int64_t *skpos = (int64_t *)(sv + 2 * SA_BN * D * 2);
  int *sinfo = (int *)(skpos + 2 * SA_BN);
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3, wg = warp >> 2;

  // The forward's heaviest-first order, so the longest cells start first here too.
  int n_qt = a.ti.n_qtiles, ix_cells = a.ti.heads * n_qt;
  int cell = a.order[blockIdx.x % ix_cells];
  int h = a.ti.heads == 1 ? (int)(blockIdx.x / ix_cells) : cell / n_qt, qt = cell % n_qt;
  int kvh = h / (a.heads / a.kv_heads);
  sa_cell c = sa_cell_of(&a.ti, h, qt, a.src);
  const int c0 = BARS ? c.bar_chunk0 : 0;  // first chunk of the walk
  if (c.n_chunks == c0) return;
  int64_t row0 = (int64_t)qt * SA_BM;
  int n_rows = (int)min((int64_t)SA_BM, a.n_q - row0);
  int64_t qstride = (int64_t)a.heads * D;

  sa_load_rows_sw128<D, SA_BM, BW_THREADS>(sq, a.q + (int64_t)h * D, row0, NULL, n_rows, qstride, tid);
  sa_load_rows_sw128<D, SA_BM, BW_THREADS>(sdo, a.dout + (int64_t)h * D, row0, NULL, n_rows, qstride, tid);
  bw_rows<D> w;
  bw_fetch<D>(a, c, c0, tid, w);
  bw_issue<D>(a, w, kvh, sk, sv, skpos, sinfo, tid);
  sa_cp_async_commit();
  if (c.n_chunks > c0 + 1) bw_fetch<D>(a, c, c0 + 1, tid, w);

  int rl[2] = {warp * 16 + g, warp * 16 + g + 8};
  int64_t qp[2];
  float L2[2], Dr[2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    int64_t row = row0 + rl[i];
    float L = rl[i] < n_rows ? a.lse[(int64_t)h * a.n_q + row] : -INFINITY;
    qp[i] = rl[i] < n_rows ? a.qpos[row] : -2;
    L2[i] = L == -INFINITY ? INFINITY : L * SA_LOG2E;  // an empty row has P = 0 everywhere
    Dr[i] = rl[i] < n_rows ? a.d_row[(int64_t)h * a.n_q + row] : 0.f;
  }
  // The warp's smallest query position: a causal chunk whose keys all lie at or before it keeps every
  // element for the warp (rows past the end carry -2 and so never take that shortcut).
  int64_t qmin = min(qp[0], qp[1]);
#pragma unroll
  for (int x = 1; x < 32; x <<= 1) qmin = min(qmin, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)qmin, x));
  const head_mask *mask = a.masks ? &a.masks[h] : NULL;
  int causal_partial = !mask || mask->kind == PATTERN_DENSE;
  float dq[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;
  uint64_t dqa = sa_desc_sw128(sq + wg * 64 * 128, 16, 1024), ddoa = sa_desc_sw128(sdo + wg * 64 * 128, 16, 1024);

  for (int ci = c0; ci < c.n_chunks; ci++) {
    int buf = (ci - c0) & 1;
    if (ci + 1 < c.n_chunks) {
      bw_issue<D>(a, w, kvh, sk + (buf ^ 1) * SA_BN * D * 2, sv + (buf ^ 1) * SA_BN * D * 2, skpos + (buf ^ 1) * SA_BN,
                  sinfo + (buf ^ 1), tid);
      sa_cp_async_commit();
      if (ci + 2 < c.n_chunks) bw_fetch<D>(a, c, ci + 2, tid, w);
      sa_cp_async_wait<1>();
    } else {
      sa_cp_async_wait<0>();
    }
    sa_fence_proxy_async();
    __syncthreads();
    const unsigned char *kb = sk + buf * SA_BN * D * 2, *vb = sv + buf * SA_BN * D * 2;
    const int64_t *kp = skpos + buf * SA_BN;
    int info = sinfo[buf], kind = info & 15, n_valid = info >> 4;

    float s[SA_BN / 8][4], dp[SA_BN / 8][4];
#pragma unroll
    for (int n = 0; n < SA_BN / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
    bw_fence_regs<SA_BN / 2>(&s[0][0]);
    bw_fence_regs<SA_BN / 2>(&dp[0][0]);
    sa_wgmma_fence();
    uint64_t dkb = sa_desc_sw128(kb, 16, 1024), dvb = sa_desc_sw128(vb, 16, 1024);
    if (OVL) {  // S and dP as two groups: P's exponentials overlap the dP product
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) sa_wgmma_m64n64_ss(&s[0][0], dqa + bw_kmajor(kk, SA_BM), dkb + bw_kmajor(kk, SA_BN));
      sa_wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++)
        sa_wgmma_m64n64_ss(&dp[0][0], ddoa + bw_kmajor(kk, SA_BM), dvb + bw_kmajor(kk, SA_BN));
      sa_wgmma_commit();
      sa_wgmma_wait<1>();
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        sa_wgmma_m64n64_ss(&s[0][0], dqa + bw_kmajor(kk, SA_BM), dkb + bw_kmajor(kk, SA_BN));
        sa_wgmma_m64n64_ss(&dp[0][0], ddoa + bw_kmajor(kk, SA_BM), dvb + bw_kmajor(kk, SA_BN));
      }
      sa_wgmma_commit();
      sa_wgmma_wait<0>();
      bw_fence_regs<SA_BN / 2>(&dp[0][0]);
    }
    bw_fence_regs<SA_BN / 2>(&s[0][0]);

    uint32_t keep = 0xffffffffu;
    if (kind != SA_CHUNK_FULL || n_valid != SA_BN) {
      int fast = 0;
      if (n_valid == SA_BN && (kind == SA_CHUNK_BAR || causal_partial)) {
        int64_t kmax = max(kp[lane], kp[lane + 32]);
#pragma unroll
        for (int x = 1; x < 32; x <<= 1) kmax = max(kmax, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)kmax, x));
        fast = kmax <= qmin;
      }
      if (!fast) keep = sa_keep_bits<SA_BN / 8>(kind, mask, qp, kp, t);
    }
#pragma unroll
    for (int n = 0; n < SA_BN / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        s[n][e] = (keep >> (n * 4 + e)) & 1u ? sa_exp2(fmaf(s[n][e], a.scale_log2, -L2[e >> 1])) : 0.f;  // P
    if (OVL) {
      sa_wgmma_wait<0>();
      bw_fence_regs<SA_BN / 2>(&dp[0][0]);
    }
#pragma unroll
    for (int n = 0; n < SA_BN / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] *= dp[n][e] - Dr[e >> 1];  // dS
    uint32_t pa[4][4];
    bw_pack(pa, s);
    bw_fence_regs<D / 2>(&dq[0][0]);
    sa_wgmma_fence();
    bw_mma_rs<D>(&dq[0][0], pa, sa_desc_sw128(kb, SA_BN * 128, 1024));
    sa_wgmma_commit();
    sa_wgmma_wait<0>();
    bw_fence_regs<D / 2>(&dq[0][0]);
    __syncthreads();  // the next iteration's copy overwrites this buffer
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

// ---- dK, dV: KV-major --------------------------------------------------------------------------------

template <int D, bool OVL>
__global__ void __launch_bounds__(BW_THREADS, 1) sa_bwd_dkdv_wg_kernel(const bwd_args a) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char *sk = smem_raw + ((1024 - (sa_smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char *sv = sk + BW_KEYS * D * 2, *sq = sv + BW_KEYS * D * 2, *sdo = sq + 2 * BW_QB * D * 2;
  int64_t *sqpos = (int64_t *)(sdo + 2 * BW_QB * D * 2);  // [2][QB]
  float *sl = (float *)(sqpos + 2 * BW_QB), *sd = sl + 2 * BW_QB;  // [2][QB] each: LSE (natural log), D
  __shared__ int64_t s_cum[33];
  __shared__ int64_t s_beg[32];
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3, wg = warp >> 2;
  int group = a.heads / a.kv_heads;
  // Tile-major over the KV heads: the heaviest tiles (the first, under a causal mask) start first.
  int j = (int)(blockIdx.x / a.kv_heads), kvh = (int)(blockIdx.x % a.kv_heads);
  int64_t base = (int64_t)j * TILE;
  int n_valid = (int)min((int64_t)TILE, a.n_k - base);
  // Query chunks: per head of the group, its query tiles (entries [beg, end)), two 64-row halves each.
  if (tid == 0) {
    s_cum[0] = 0;
    for (int gi = 0; gi < group; gi++) {
      int ih = a.tt.heads == 1 ? 0 : kvh * group + gi;
      int64_t x = (int64_t)ih * a.tt.n_kvtiles + j;
      int64_t b = a.tt.kv_cnt[x], en = a.tt.kv_cnt[x + 1];
      s_beg[gi] = b, s_cum[gi + 1] = s_cum[gi] + 2 * (en - b);
    }
  }
  int64_t kstride = (int64_t)a.kv_heads * D, qstride = (int64_t)a.heads * D;
  sa_load_rows_sw128<D, BW_KEYS, BW_THREADS>(sk, a.k + kvh * D, base, NULL, n_valid, kstride, tid);
  sa_load_rows_sw128<D, BW_KEYS, BW_THREADS>(sv, a.v + kvh * D, base, NULL, n_valid, kstride, tid);
  sa_cp_async_commit();
  __syncthreads();
  int64_t total = s_cum[group];
  if (total == 0) {
    sa_cp_async_wait<0>();
    return;
  }

  // The two keys (rows g, g+8 of the warp) this thread's accumulators belong to.
  int kr[2] = {warp * 16 + g, warp * 16 + g + 8};
  int64_t kp[2];
#pragma unroll
  for (int i = 0; i < 2; i++) kp[i] = kr[i] < n_valid ? a.kpos[base + kr[i]] : -1;

  auto locate = [&](int64_t f) {
    int x = 0;
    while (s_cum[x + 1] <= f) x++;
    int64_t local = f - s_cum[x], pos = s_beg[x] + local / 2;
    bw_qchunk q;
    q.h = kvh * group + x;
    q.r0 = (int64_t)a.tt.q_idx[pos] * TILE + (local & 1) * BW_QB;
    q.kind = a.tt.q_kind[pos] == TILE_FULL ? SA_CHUNK_FULL : SA_CHUNK_PARTIAL;
    return q;
  };
  auto issue = [&](const bw_qchunk &q, int buf) {
    int64_t left = a.n_q - q.r0;
    int nv = left < 0 ? 0 : left > BW_QB ? BW_QB : (int)left;
    sa_load_rows_sw128<D, BW_QB, BW_THREADS>(sq + buf * BW_QB * D * 2, a.q + (int64_t)q.h * D, q.r0, NULL, nv,
                                             qstride, tid);
    sa_load_rows_sw128<D, BW_QB, BW_THREADS>(sdo + buf * BW_QB * D * 2, a.dout + (int64_t)q.h * D, q.r0, NULL, nv,
                                             qstride, tid);
    if (tid < BW_QB) {
      int r = tid, x = buf * BW_QB + r;
      int64_t hr = (int64_t)q.h * a.n_q + q.r0 + r;
      if (r < nv) {
        sa_cp_async8(sqpos + x, a.qpos + q.r0 + r);
        bw_cp_async4(sl + x, a.lse + hr);
        bw_cp_async4(sd + x, a.d_row + hr);
      } else {
        sqpos[x] = -2, sl[x] = -INFINITY, sd[x] = 0.f;
      }
    }
  };

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;
  uint64_t dka = sa_desc_sw128(sk + wg * 64 * 128, 16, 1024), dva = sa_desc_sw128(sv + wg * 64 * 128, 16, 1024);

  bw_qchunk cur = locate(0), nxt = cur, nxt2 = cur;
  issue(cur, 0);
  sa_cp_async_commit();
  if (total > 1) nxt = locate(1);
  for (int64_t f = 0; f < total; f++) {
    int buf = (int)(f & 1);
    if (f + 1 < total) {
      issue(nxt, buf ^ 1);
      sa_cp_async_commit();
      if (f + 2 < total) nxt2 = locate(f + 2);
      sa_cp_async_wait<1>();
    } else {
      sa_cp_async_wait<0>();
    }
    sa_fence_proxy_async();
    __syncthreads();
    const unsigned char *qb = sq + buf * BW_QB * D * 2, *dob = sdo + buf * BW_QB * D * 2;
    const int64_t *qp = sqpos + buf * BW_QB;
    const float *lb = sl + buf * BW_QB, *db = sd + buf * BW_QB;

    // S^T = K Q^T and dP^T = V dO^T for the warpgroup's 64 keys against the chunk's 64 query rows.
    float s[BW_QB / 8][4], dp[BW_QB / 8][4];
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
    bw_fence_regs<BW_QB / 2>(&s[0][0]);
    bw_fence_regs<BW_QB / 2>(&dp[0][0]);
    sa_wgmma_fence();
    uint64_t dqb = sa_desc_sw128(qb, 16, 1024), ddob = sa_desc_sw128(dob, 16, 1024);
    if (OVL) {  // S^T and dP^T as two groups: P^T's exponentials overlap the dP^T product
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++)
        sa_wgmma_m64n64_ss(&s[0][0], dka + bw_kmajor(kk, BW_KEYS), dqb + bw_kmajor(kk, BW_QB));
      sa_wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++)
        sa_wgmma_m64n64_ss(&dp[0][0], dva + bw_kmajor(kk, BW_KEYS), ddob + bw_kmajor(kk, BW_QB));
      sa_wgmma_commit();
      sa_wgmma_wait<1>();
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        sa_wgmma_m64n64_ss(&s[0][0], dka + bw_kmajor(kk, BW_KEYS), dqb + bw_kmajor(kk, BW_QB));
        sa_wgmma_m64n64_ss(&dp[0][0], dva + bw_kmajor(kk, BW_KEYS), ddob + bw_kmajor(kk, BW_QB));
      }
      sa_wgmma_commit();
      sa_wgmma_wait<0>();
      bw_fence_regs<BW_QB / 2>(&dp[0][0]);
    }
    bw_fence_regs<BW_QB / 2>(&s[0][0]);

    const head_mask *mask = a.masks ? &a.masks[cur.h] : NULL;
    uint32_t keep = 0;
    if (cur.kind == SA_CHUNK_FULL && kp[0] >= 0 && kp[1] >= 0 && qp[BW_QB - 1] >= 0) keep = 0xffffffffu;
    else if (!sa_keep_bits_t_vs(cur.kind, mask, qp, kp, t, &keep))
#pragma unroll 1
      for (int i = 0; i < 32; i++) {  // keep bits in a rolled loop, as in the forward (sa_keep_bits)
        int col = (i >> 2) * 8 + 2 * t + (i & 1);
        int64_t q = qp[col], k = (i & 2) ? kp[1] : kp[0];
        int keep_i = q >= 0 && k >= 0 &&
                     (cur.kind == SA_CHUNK_FULL ? 1 : mask ? sa_mask_keeps(mask, q, k) : k <= q);
        keep |= (uint32_t)keep_i << i;
      }
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int col = n * 8 + 2 * t + (e & 1);
        float L = lb[col], l2 = L == -INFINITY ? INFINITY : L * SA_LOG2E;
        s[n][e] = (keep >> (n * 4 + e)) & 1u ? sa_exp2(fmaf(s[n][e], a.scale_log2, -l2)) : 0.f;  // P^T
      }
    uint32_t pa[4][4], da[4][4];
    bw_pack(pa, s);
    bw_fence_regs<D / 2>(&dv[0][0]);
    if (OVL) {  // dV += P^T dO runs while dS^T is formed
      sa_wgmma_fence();
      bw_mma_rs<D>(&dv[0][0], pa, sa_desc_sw128(dob, BW_QB * 128, 1024));
      sa_wgmma_commit();
      sa_wgmma_wait<1>();  // dP^T (the older group) done
      bw_fence_regs<BW_QB / 2>(&dp[0][0]);
    }
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) dp[n][e] = s[n][e] * (dp[n][e] - db[n * 8 + 2 * t + (e & 1)]);  // dS^T
    bw_pack(da, dp);
    bw_fence_regs<D / 2>(&dk[0][0]);
    sa_wgmma_fence();
    if (!OVL) bw_mma_rs<D>(&dv[0][0], pa, sa_desc_sw128(dob, BW_QB * 128, 1024));
    bw_mma_rs<D>(&dk[0][0], da, sa_desc_sw128(qb, BW_QB * 128, 1024));
    sa_wgmma_commit();
    sa_wgmma_wait<0>();
    bw_fence_regs<D / 2>(&dv[0][0]);
    bw_fence_regs<D / 2>(&dk[0][0]);
    __syncthreads();  // the next iteration's copy overwrites this buffer
    cur = nxt, nxt = nxt2;
  }
  for (int ri = 0; ri < 2; ri++) {
    if (kr[ri] >= n_valid) continue;
    int64_t key = base + kr[ri];
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

// ---- host ------------------------------------------------------------------------------------------

template <int D, bool OVL>
static int bw_launch(const bwd_args &a, int64_t q_cells, int64_t kv_cells, cudaStream_t st, sr_error *e) {
  size_t dq_smem = 1024 + (size_t)(2 * SA_BM + 4 * SA_BN) * D * 2 + 2 * SA_BN * sizeof(int64_t) + 2 * sizeof(int);
  size_t kv_smem = 1024 + (size_t)(2 * BW_KEYS + 4 * BW_QB) * D * 2 + 2 * BW_QB * (8 + 4 + 4);
  SA_CUDA(cudaFuncSetAttribute(sa_bwd_dq_wg_kernel<D, OVL, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dq_smem));
  SA_CUDA(cudaFuncSetAttribute(sa_bwd_dkdv_wg_kernel<D, OVL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kv_smem));
  if (q_cells) sa_bwd_dq_wg_kernel<D, OVL, false><<<(unsigned)q_cells, BW_THREADS, dq_smem, st>>>(a);
  SA_CUDA(cudaGetLastError());
  if (kv_cells) sa_bwd_dkdv_wg_kernel<D, OVL><<<(unsigned)kv_cells, BW_THREADS, kv_smem, st>>>(a);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

template <int D>
static int bw_launch_dq_bars(const bwd_args &a, int64_t q_cells, cudaStream_t st, sr_error *e) {
  size_t dq_smem = 1024 + (size_t)(2 * SA_BM + 4 * SA_BN) * D * 2 + 2 * SA_BN * sizeof(int64_t) + 2 * sizeof(int);
  SA_CUDA(cudaFuncSetAttribute(sa_bwd_dq_wg_kernel<D, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)dq_smem));
  if (q_cells) sa_bwd_dq_wg_kernel<D, true, true><<<(unsigned)q_cells, BW_THREADS, dq_smem, st>>>(a);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int sa_bwd_wg_dq_bars(const bwd_args *a, int head_dim, int64_t q_cells, cudaStream_t st, sr_error *e) {
  return head_dim == 64 ? bw_launch_dq_bars<64>(*a, q_cells, st, e) : bw_launch_dq_bars<128>(*a, q_cells, st, e);
}

int sa_bwd_wg_tiles(const bwd_args *a, int head_dim, int64_t q_cells, int64_t kv_cells, cudaStream_t st, sr_error *e) {
  return head_dim == 64 ? bw_launch<64, true>(*a, q_cells, kv_cells, st, e) : bw_launch<128, true>(*a, q_cells, kv_cells, st, e);
}

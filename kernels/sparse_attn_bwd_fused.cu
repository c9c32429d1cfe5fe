// sparse_attn_bwd_fused.cu — the backward's tiles in one KV-major kernel on Hopper tensor cores
// (wgmma, sm_90a; sa_bwd_variants 3 and 4). FlashAttention-3's backward structure (Shah et al. 2024): one CTA
// of two warpgroups owns a KV tile of 128 keys of one KV head and walks the 64-row query chunks of
// every query head of its GQA group that use the tile (the transposed index), computing per chunk
//   S^T = K Q^T, dP^T = V dO^T, P^T, dS^T = P^T (dP^T - D),  dV += P^T dO,  dK += dS^T Q,
//   dQ^T = K^T dS^T (dS^T through shared memory)
// so 5 products per (chunk, tile) instead of the 7 of the split kernels (kernels/sparse_attn_bwd_wg.cu,
// which compute S and dP again in a query-major dQ pass). FlashAttention-3 adds dQ with float atomics;
// here each query chunk's fp32 dQ in global memory is added to by its KV tiles one after the other in
// ascending tile order (the order of the cell's tile entries counted by tile index), under an integer
// semaphore per (head, query tile, half): tile j waits until the semaphore equals its rank (the number
// of the cell's tile entries below j), adds with plain loads and stores, and releases rank + 1. The
// fp32 additions therefore happen in one fixed order and the result repeats bit for bit, with no float
// atomics. Bar chunks' dQ follows in the query-major bars-only kernel on the same stream.
//
// Why it cannot deadlock: a CTA takes its work item from an integer ticket counter when it starts, and
// items are numbered tile-major (item = j * kv_heads + kvh), so every KV tile a CTA waits for (a tile
// j' < j of the same KV head) belongs to a smaller ticket, already taken by a CTA that is running or
// done. The CTA holding the smallest unfinished ticket waits only on finished CTAs, so it finishes; by
// induction every CTA does, whatever the hardware's block order or residency.
//
// Walk order: every CTA walks its chunks the same way, query tiles from the last down, heads of the
// group inside (a round over the r-th entry from the end of each head's list). Under a causal mask tile
// j's list is the query tiles j.., so all tiles reach a chunk at the same step; their additions stagger
// once by the hand-over time (a tile releases a chunk's semaphore while the next chunk's first products
// run) and then follow one another. Under sink + window masks the sink tile, first in every order,
// paces the window tiles. Measured: slower than the split kernels (results/JOURNAL.md, "The fused
// backward"), so it is not the default.
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/sa_bwd.cuh"
#include "kernels/sa_bwd_wg.cuh"
#include "kernels/sa_gpu.h"

#define BF_SDQ_STRIDE(D) ((D) + 4)  // fp32 row stride of the dQ staging tile (the pad spreads banks)

// ---- semaphore ---------------------------------------------------------------------------------------

__device__ __forceinline__ int bf_ld_acquire(const int *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void bf_st_release(int *p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// Spin until *p == want. A mismatched index (a rank no tile ever reaches) traps after a time instead of
// hanging the device (2^34 cycles, ~9 s at 2 GHz; the whole 64K backward takes 0.2 s).
__device__ __forceinline__ void bf_wait(const int *p, int want) {
  long long t0 = clock64();
  while (bf_ld_acquire(p) != want) {
    __nanosleep(64);
    if (clock64() - t0 > (1ll << 34)) __trap();
  }
}
// 16-byte global -> shared copy through L2 only (dQ written by other CTAs must not come from L1).
__device__ __forceinline__ void bf_cp_async16_cg(void *smem, const void *gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa_smem_addr(smem)), "l"(gmem));
}

// ---- the walk over a tile's query chunks -------------------------------------------------------------

// Round r over the heads of the group: each head's r-th query tile from the end of its list, two halves.
typedef struct {
  int r, gi, half;
} bf_walk;

// ---- ranks ---------------------------------------------------------------------------------------

// For every entry of the transposed index (KV tile j, query tile qt of head ih): the number of the
// forward cell (ih, qt, src)'s tile entries below j, i.e. j's place in the cell's dQ order. One CTA per
// (head, KV tile), one warp per entry. Computed once per call so the fused kernel reads it next to q_idx.
__global__ void sa_bwd_rank_kernel(const bwd_args a, int32_t *rank) {
  int64_t x = blockIdx.x;
  int j = (int)(x % a.tt.n_kvtiles), ih = (int)(x / a.tt.n_kvtiles), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t b = a.tt.kv_cnt[x], en = a.tt.kv_cnt[x + 1];
  for (int64_t pos = b + warp; pos < en; pos += blockDim.x >> 5) {
    int64_t off = ((int64_t)ih * a.ti.n_qtiles + a.tt.q_idx[pos]) * (a.ti.world + 1) + a.src;
    int64_t t0 = a.ti.tile_cnt[off], t1 = a.ti.tile_cnt[off + 1];
    unsigned cnt = 0;
    for (int64_t y = t0 + lane; y < t1; y += 32) cnt += a.ti.tile_idx[y] < j;
    cnt = __reduce_add_sync(0xffffffffu, cnt);
    if (lane == 0) rank[pos] = (int32_t)cnt;
  }
}

// ---- kernel ------------------------------------------------------------------------------------------

// EARLY: warp 0 acquires the chunk's semaphore and copies its dQ while the S and dP products run (the
// other warps go on); otherwise thread 0 acquires it before the chunk's first barrier and every thread
// copies a share.
template <int D, bool EARLY>
__global__ void __launch_bounds__(BW_THREADS, 1) sa_bwd_fused_kernel(const bwd_args a, int *sync, const int32_t *rank) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char *sk = smem_raw + ((1024 - (sa_smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char *sv = sk + BW_KEYS * D * 2, *sq = sv + BW_KEYS * D * 2, *sdo = sq + 2 * BW_QB * D * 2;
  unsigned char *sds = sdo + 2 * BW_QB * D * 2;      // dS^T, 128 keys x 64 rows bf16, swizzled
  float *sdq = (float *)(sds + BW_KEYS * BW_QB * 2);  // the chunk's dQ as read before the addition
  int64_t *sqpos = (int64_t *)(sdq + BW_QB * BF_SDQ_STRIDE(D));  // [2][QB]
  float *sl = (float *)(sqpos + 2 * BW_QB), *sd = sl + 2 * BW_QB;  // [2][QB] each: LSE (natural log), D
  __shared__ int64_t s_beg[32];
  __shared__ int s_len[32];
  __shared__ int s_item;
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3, wg = warp >> 2;
  int group = a.heads / a.kv_heads;
  if (tid == 0) s_item = atomicAdd(sync, 1);  // the ticket: see the deadlock note at the top
  __syncthreads();
  int item = s_item, j = item / a.kv_heads, kvh = item % a.kv_heads;
  int *sem = sync + 1;
  int64_t base = (int64_t)j * TILE;
  int n_valid = (int)min((int64_t)TILE, a.n_k - base);
  if (tid < group) {
    int ih = a.tt.heads == 1 ? 0 : kvh * group + tid;
    int64_t x = (int64_t)ih * a.tt.n_kvtiles + j;
    s_beg[tid] = a.tt.kv_cnt[x], s_len[tid] = (int)(a.tt.kv_cnt[x + 1] - a.tt.kv_cnt[x]);
  }
  int64_t kstride = (int64_t)a.kv_heads * D, qstride = (int64_t)a.heads * D;
  sa_load_rows_sw128<D, BW_KEYS, BW_THREADS>(sk, a.k + kvh * D, base, NULL, n_valid, kstride, tid);
  sa_load_rows_sw128<D, BW_KEYS, BW_THREADS>(sv, a.v + kvh * D, base, NULL, n_valid, kstride, tid);
  sa_cp_async_commit();
  __syncthreads();
  int64_t total = 0;
  int maxlen = 0;
  for (int gi = 0; gi < group; gi++) total += 2 * s_len[gi], maxlen = max(maxlen, s_len[gi]);
  if (total == 0) {
    sa_cp_async_wait<0>();
    return;
  }

  int kr[2] = {warp * 16 + g, warp * 16 + g + 8};
  int64_t kp[2];
#pragma unroll
  for (int i = 0; i < 2; i++) kp[i] = kr[i] < n_valid ? a.kpos[base + kr[i]] : -1;

  auto advance = [&](bf_walk &w) {
    if (w.half == 0) {
      w.half = 1;
      return;
    }
    w.half = 0;
    do {
      if (++w.gi == group) w.gi = 0, w.r++;
    } while (w.r < maxlen && s_len[w.gi] <= w.r);
  };
  auto chunk_of = [&](const bf_walk &w) {
    int64_t pos = s_beg[w.gi] + s_len[w.gi] - 1 - w.r;
    bw_qchunk q;
    q.h = kvh * group + w.gi, q.qt = a.tt.q_idx[pos], q.half = w.half;
    q.r0 = (int64_t)q.qt * TILE + w.half * BW_QB;
    q.kind = a.tt.q_kind[pos] == TILE_FULL ? SA_CHUNK_FULL : SA_CHUNK_PARTIAL;
    q.rank = rank[pos];
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
  // Warpgroup w computes dQ^T rows (head dims) 64w..64w+63; at D = 64 both compute rows 0..63 (a
  // product skipped by one warpgroup would be a divergent path, which serialises every wgmma of the
  // kernel) and warpgroup 0 adds them.
  const bool dq_wg = D == 128 || wg == 0;
  int *held = NULL, held_val = 0;  // thread 0: the semaphore added to, not yet released

  bf_walk w = {0, -1, 1};
  advance(w);
  bw_qchunk cur = chunk_of(w), nxt = cur, nxt2 = cur;
  issue(cur, 0);
  sa_cp_async_commit();
  if (total > 1) advance(w), nxt = chunk_of(w);
  for (int64_t f = 0; f < total; f++) {
    int buf = (int)(f & 1);
    if (f + 1 < total) {
      issue(nxt, buf ^ 1);
      sa_cp_async_commit();
      if (f + 2 < total) advance(w), nxt2 = chunk_of(w);
      sa_cp_async_wait<1>();
    } else {
      sa_cp_async_wait<0>();
    }
    int nv = (int)min((int64_t)BW_QB, a.n_q - cur.r0);
    int *csem = sem + ((int64_t)cur.h * a.ti.n_qtiles + cur.qt) * 2 + cur.half;
    float *gdq = a.dq + (cur.r0 * a.heads + cur.h) * D;
    if (!EARLY && tid == 0) bf_wait(csem, cur.rank);
    sa_fence_proxy_async();
    __syncthreads();
    // The chunk's dQ as the lower tiles left it (thread 0 acquired it before the barrier), copied while
    // the products run.
    if (!EARLY) {
      if (dq_wg)
        for (int i = tid & 127; i < nv * (64 / 4); i += 128) {
          int r = i / 16, sg = i % 16, col = wg * 64 + sg * 4;
          bf_cp_async16_cg(sdq + r * BF_SDQ_STRIDE(D) + col, gdq + (int64_t)r * a.heads * D + col);
        }
      sa_cp_async_commit();
    }
    const unsigned char *qb = sq + buf * BW_QB * D * 2, *dob = sdo + buf * BW_QB * D * 2;
    const int64_t *qp = sqpos + buf * BW_QB;
    const float *lb = sl + buf * BW_QB, *db = sd + buf * BW_QB;

    float s[BW_QB / 8][4], dp[BW_QB / 8][4];
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
    bw_fence_regs<BW_QB / 2>(&s[0][0]);
    bw_fence_regs<BW_QB / 2>(&dp[0][0]);
    sa_wgmma_fence();
    uint64_t dqb = sa_desc_sw128(qb, 16, 1024), ddob = sa_desc_sw128(dob, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
      sa_wgmma_m64n64_ss(&s[0][0], dka + bw_kmajor(kk, BW_KEYS), dqb + bw_kmajor(kk, BW_QB));
    sa_wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
      sa_wgmma_m64n64_ss(&dp[0][0], dva + bw_kmajor(kk, BW_KEYS), ddob + bw_kmajor(kk, BW_QB));
    sa_wgmma_commit();
    // The previous chunk's release, while the products run (its stores were issued before the barrier
    // at the end of the previous iteration; the fence makes them visible before the semaphore moves).
    if (tid == 0 && held) {
      __threadfence();
      bf_st_release(held, held_val);
      held = NULL;
    }
    if (EARLY && warp == 0) {
      if (lane == 0) bf_wait(csem, cur.rank);
      __syncwarp();
      for (int i = lane; i < nv * (D / 4); i += 32) {
        int r = i / (D / 4), col = (i % (D / 4)) * 4;
        bf_cp_async16_cg(sdq + r * BF_SDQ_STRIDE(D) + col, gdq + (int64_t)r * a.heads * D + col);
      }
      sa_cp_async_commit();
    }
    sa_wgmma_wait<1>();
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
    sa_wgmma_fence();
    bw_mma_rs<D>(&dv[0][0], pa, sa_desc_sw128(dob, BW_QB * 128, 1024));  // dV += P^T dO
    sa_wgmma_commit();
    sa_wgmma_wait<1>();  // dP^T (the older group) done
    bw_fence_regs<BW_QB / 2>(&dp[0][0]);
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) dp[n][e] = s[n][e] * (dp[n][e] - db[n * 8 + 2 * t + (e & 1)]);  // dS^T
    bw_pack(da, dp);
    // dS^T into shared memory as it sits in the accumulators (row = key, column = query row), where
    // both warpgroups read all 128 keys of it as the B operand of dQ^T.
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
      for (int x = 0; x < 4; x++) {
        int row = kr[x & 1], col = kk * 16 + (x >> 1) * 8 + 2 * t;
        *(uint32_t *)(sds + sa_sw128_offset(row, col, BW_KEYS)) = da[kk][x];
      }
    bw_fence_regs<D / 2>(&dk[0][0]);
    sa_wgmma_fence();
    bw_mma_rs<D>(&dk[0][0], da, sa_desc_sw128(qb, BW_QB * 128, 1024));  // dK += dS^T Q
    sa_wgmma_commit();
    sa_cp_async_wait<0>();  // the dQ tile (and the next chunk's rows)
    sa_fence_proxy_async();
    __syncthreads();

    // dQ^T (head dims x query rows) = K^T dS^T over the tile's 128 keys.
    float dqt[BW_QB / 8][4];
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) dqt[n][e] = 0.f;
    bw_fence_regs<BW_QB / 2>(&dqt[0][0]);
    sa_wgmma_fence();
    uint64_t dkt = sa_desc_sw128(sk + (D == 128 ? wg : 0) * BW_KEYS * 128, BW_KEYS * 128, 1024);
    uint64_t dds = sa_desc_sw128(sds, BW_KEYS * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < BW_KEYS / 16; kk++) sa_wgmma_m64n64_ss_tt(&dqt[0][0], dkt + bw_nmajor(kk), dds + bw_nmajor(kk));
    sa_wgmma_commit();
    sa_wgmma_wait<0>();
    bw_fence_regs<D / 2>(&dv[0][0]);
    bw_fence_regs<D / 2>(&dk[0][0]);
    bw_fence_regs<BW_QB / 2>(&dqt[0][0]);
    if (dq_wg) {
      int dim = wg * 64 + (warp & 3) * 16 + g;
      float *out = gdq + dim;
#pragma unroll
      for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int r = n * 8 + 2 * t + (e & 1), c = dim + (e >> 1) * 8;
          if (r < nv) __stcg(out + (int64_t)r * a.heads * D + (e >> 1) * 8,
                             sdq[r * BF_SDQ_STRIDE(D) + c] + a.scale * dqt[n][e]);
        }
    }
    __syncthreads();  // every thread's dQ stores issued; the next copies overwrite this chunk's buffers
    if (tid == 0) held = csem, held_val = cur.rank + 1;
    cur = nxt, nxt = nxt2;
  }
  if (tid == 0 && held) {
    __threadfence();
    bf_st_release(held, held_val);
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

// ---- host ----------------------------------------------------------------------------------------

template <int D, bool EARLY>
static int bf_launch(const bwd_args &a, int64_t q_cells, int64_t kv_cells, cudaStream_t st, sr_error *e) {
  size_t smem = 1024 + (size_t)(2 * BW_KEYS + 4 * BW_QB) * D * 2 + (size_t)BW_KEYS * BW_QB * 2 +
                (size_t)BW_QB * BF_SDQ_STRIDE(D) * 4 + 2 * BW_QB * (8 + 4 + 4);
  SA_CUDA(cudaFuncSetAttribute(sa_bwd_fused_kernel<D, EARLY>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  if (kv_cells) {
    // The ticket counter and one semaphore per (head, query tile, half), zero at the start of each call,
    // then the ranks: one per transposed entry, at most the index's tile entries. Stream-ordered, so
    // calls on different streams never share them.
    size_t n_sync = 1 + (size_t)a.heads * a.ti.n_qtiles * 2, n_rank = (size_t)a.ti.n_tiles + 1;
    int *sync = NULL;
    SA_CUDA(cudaMallocAsync((void **)&sync, (n_sync + n_rank) * sizeof(int), st));
    SA_CUDA(cudaMemsetAsync(sync, 0, n_sync * sizeof(int), st));
    int64_t groups = (int64_t)a.tt.heads * a.tt.n_kvtiles;
    if (groups) sa_bwd_rank_kernel<<<(unsigned)groups, 128, 0, st>>>(a, sync + n_sync);
    SA_CUDA(cudaGetLastError());
    sa_bwd_fused_kernel<D, EARLY><<<(unsigned)kv_cells, BW_THREADS, smem, st>>>(a, sync, sync + n_sync);
    SA_CUDA(cudaGetLastError());
    SA_CUDA(cudaFreeAsync(sync, st));
  }
  if (a.ti.n_bars) return sa_bwd_wg_dq_bars(&a, D, q_cells, st, e);
  return SR_OK;
}

int sa_bwd_fused_tiles(const bwd_args *a, int head_dim, int early, int64_t q_cells, int64_t kv_cells, cudaStream_t st,
                       sr_error *e) {
  if (early)
    return head_dim == 64 ? bf_launch<64, true>(*a, q_cells, kv_cells, st, e)
                          : bf_launch<128, true>(*a, q_cells, kv_cells, st, e);
  return head_dim == 64 ? bf_launch<64, false>(*a, q_cells, kv_cells, st, e)
                        : bf_launch<128, false>(*a, q_cells, kv_cells, st, e);
}

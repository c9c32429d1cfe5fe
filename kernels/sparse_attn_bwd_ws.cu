// sparse_attn_bwd_ws.cu — the Hopper backward of one ring step's tiles (sm_90a, sa_bwd_variant 2, the
// default there), warp-specialized in the manner of FlashAttention-3's backward (Shah et al. 2024): one
// CTA of three warpgroups owns a KV tile of 128 keys of one KV head. The producer warpgroup loads K and V
// once and then, through a two-stage mbarrier ring, every 64-row query chunk of every query head of the
// GQA group that uses the tile (the transposed index): Q and dO by the tensor-copy engine, the rows'
// LSE, D = rowsum(dO O) and positions by cp.async. Each consumer warpgroup owns 64 of the keys and
// computes per chunk
//   S^T = K Q^T, dP^T = V dO^T, P^T = exp(S^T - LSE), dS^T = P^T (dP^T - D),  dV += P^T dO,  dK += dS^T Q,
// with dK and dV in registers for the whole walk, and the chunk's dQ = dS K through shared memory
// (dS^T as it sits in the accumulators; at d = 128 warpgroup w takes head dims 64w.., at d = 64 its own
// 64 keys). The consumers leave the chunk's dQ in shared memory and a writer warp of the producer
// warpgroup adds it to the fp32 dQ in global memory with the tensor-copy engine's reduction (as
// FlashAttention-3 does), so the consumers issue no atomics and go on to the next chunk. Five
// products per (chunk, tile) instead of the seven of the split kernels; the order of the dQ additions
// varies from run to run, so dQ is not bit-reproducible: the deterministic backward (sa_shape.deterministic,
// sa_bwd_variant 1) stays for callers that need it. Bars run in the mma.sync bar kernels and the bars-only dQ kernel
// afterwards, as for every variant. A KV tile used by more query chunks than an SM's fair share of the call's
// (a vertical line's tile, used by every query tile) is walked by several CTAs, each a run of its chunks, which
// add their dK and dV by vector reductions (sa_bwd_ws_kernel, "split walks").
// The file also holds the bars' kernels of the opt-in variants 4 (sa_bwd_ws_bars_kernel: one compute chunk of 64
// gathered bar keys a CTA, its warpgroups taking alternate steps) and 5 (sa_bwd_ws_pair_kernel: two compute chunks of
// one head a CTA, 128 gathered keys walked like a tile over the merged list of both chunks' query steps), built from the
// tile kernel's pieces (the consumers' pieces below are shared by all three); their sections say how.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "kernels/sa_bwd.cuh"
#include "kernels/sa_bwd_wg.cuh"
#include "kernels/sa_gpu.h"
#include "kernels/sa_pipe.cuh"

#define BS_STAGES 2
#define BS_THREADS 384
// The registers a CTA holds are fixed at launch (168 a thread under the cap of 384 threads): what the
// producer gives back, 128 x (168 - 24), is exactly what the consumers take, 256 x (240 - 168). Asking
// for more would leave setmaxnreg.inc waiting for ever.
#define BS_PROD_REGS 24
#define BS_CONS_REGS 240
#define BS_DS_BAR 5       // named barrier: both consumer warpgroups' halves of dS^T are in shared memory
#define BS_LOADERS 64     // producer threads that copy (warps 0 and 1: one a query row); warp 2 writes dQ

// ---- shared memory ---------------------------------------------------------------------------------

// What a stage's query chunk is: the head, first row, rows present and tile kind (written by the
// producer's elected thread before its arrival).
typedef struct {
  int64_t r0;
  int h, nv, kind, pad;
} bs_info;

template <int D, typename INFO = bs_info>
struct bs_smem {
  unsigned char *k, *v, *q0, *do0, *ds0;  // stage i of Q at q0 + i * CHUNK_BYTES, dS^T buffer b at ds0 + b * DS_BYTES
  float *dq;                              // a chunk's dQ: per consumer warpgroup two boxes of 64 rows x 32 floats
  int64_t *qpos;                          // [BS_STAGES][64]
  float *lse, *drow;                      // [BS_STAGES][64] each
  INFO *info;                             // [BS_STAGES]
  uint64_t *kv_full, *full, *empty;       // full, empty [BS_STAGES]
  uint64_t *dq_full, *dq_empty;           // the consumers' dQ is in shared memory / the writer has read it
  static constexpr int TILE_BYTES = BW_KEYS * D * 2, CHUNK_BYTES = BW_QB * D * 2, DS_BYTES = BW_KEYS * BW_QB * 2;
  static constexpr int DQ_BOX_BYTES = BW_QB * 32 * 4, DQ_BYTES = 4 * DQ_BOX_BYTES;
  static constexpr size_t bytes() {
    return 1024 + 2 * (size_t)TILE_BYTES + 2 * BS_STAGES * (size_t)CHUNK_BYTES + 2 * (size_t)DS_BYTES + DQ_BYTES +
           BS_STAGES * BW_QB * (8 + 4 + 4) + BS_STAGES * sizeof(INFO) + (3 + 2 * BS_STAGES) * 8;
  }
};

template <int D, typename INFO = bs_info>
__device__ __forceinline__ bs_smem<D, INFO> bs_smem_of(unsigned char *raw) {
  typedef bs_smem<D, INFO> S;
  S s;
  unsigned char *p = raw + ((1024 - (sa_smem_addr(raw) & 1023)) & 1023);
  s.k = p, p += S::TILE_BYTES;
  s.v = p, p += S::TILE_BYTES;
  s.q0 = p, p += BS_STAGES * S::CHUNK_BYTES;
  s.do0 = p, p += BS_STAGES * S::CHUNK_BYTES;
  s.ds0 = p, p += 2 * S::DS_BYTES;
  s.dq = (float *)p, p += S::DQ_BYTES;  // 1024-aligned: the boxes are 128-byte swizzled
  s.qpos = (int64_t *)p, p += BS_STAGES * BW_QB * 8;
  s.lse = (float *)p, p += BS_STAGES * BW_QB * 4;
  s.drow = (float *)p, p += BS_STAGES * BW_QB * 4;
  s.info = (INFO *)p, p += BS_STAGES * sizeof(INFO);
  uint64_t *b = (uint64_t *)p;
  s.kv_full = b, s.full = b + 1, s.empty = b + 1 + BS_STAGES;
  s.dq_full = b + 1 + 2 * BS_STAGES, s.dq_empty = b + 2 + 2 * BS_STAGES;
  return s;
}

// The tensor maps of one call: K, V [n_k, kv_heads * d] in boxes of 128 keys x 64 dims, Q, dO
// [n_q, heads * d] in boxes of 64 rows x 64 dims, the fp32 dQ [n_q, heads * d] in boxes of 64 rows x
// 32 dims (all 128-byte swizzle).
typedef struct {
  CUtensorMap k, v, q, dout, dq;
} bs_maps;

// ---- the chunk walk -----------------------------------------------------------------------------------

// Query chunk f of the CTA's walk: per head of the group (s_cum: cumulative chunk counts, s_beg: its
// first transposed entry), its query tiles, two 64-row halves each.
__device__ __forceinline__ bs_info bs_locate(const bwd_args &a, const int64_t *s_cum, const int64_t *s_beg, int kvh,
                                             int group, int64_t f) {
  int x = 0;
  while (s_cum[x + 1] <= f) x++;
  int64_t local = f - s_cum[x], pos = s_beg[x] + local / 2;
  bs_info q;
  q.h = kvh * group + x;
  q.r0 = (int64_t)a.tt.q_idx[pos] * TILE + (local & 1) * BW_QB;
  q.kind = a.tt.q_kind[pos] == TILE_FULL ? SA_CHUNK_FULL : SA_CHUNK_PARTIAL;
  int64_t left = a.n_q - q.r0;
  q.nv = left < 0 ? 0 : left > BW_QB ? BW_QB : (int)left;
  q.pad = 0;
  return q;
}

// ---- producer ---------------------------------------------------------------------------------------

// The elected producer thread's share of filling stage st with the 64 rows from r0 of head h: its arrival with the
// stage's bytes, then Q and dO by the tensor-copy engine (rows past n_q are zero-filled by the tensor maps). Shared
// by the tile kernel and the bars' kernels (SM: their shared-memory layouts).
template <int D, typename SM>
__device__ __forceinline__ void bs_load_qdo(const bs_maps &mp, const SM &sm, int st, int h, int64_t r0) {
  sa_mbar_arrive_expect_tx(&sm.full[st], 2 * SM::CHUNK_BYTES);
#pragma unroll
  for (int cb = 0; cb < D / 64; cb++) {
    sa_tma_load_2d(sm.q0 + st * SM::CHUNK_BYTES + cb * BW_QB * 128, &mp.q, h * D + cb * 64, (int)r0, &sm.full[st]);
    sa_tma_load_2d(sm.do0 + st * SM::CHUNK_BYTES + cb * BW_QB * 128, &mp.dout, h * D + cb * 64, (int)r0, &sm.full[st]);
  }
}

// Loader pt's row r0 + pt of stage st (pt below the rows present): its position, LSE and D by cp.async. Rows past
// the present ones keep stale values, which the consumers never use.
template <typename SM>
__device__ __forceinline__ void bs_load_row(const bwd_args &a, const SM &sm, int st, int h, int64_t r0, int pt) {
  int x = st * BW_QB + pt;
  int64_t hr = (int64_t)h * a.n_q + r0 + pt;
  sa_cp_async8(sm.qpos + x, a.qpos + r0 + pt);
  bw_cp_async4(sm.lse + x, a.lse + hr);
  bw_cp_async4(sm.drow + x, a.d_row + hr);
}

template <int D>
__device__ __forceinline__ void bs_produce(const bwd_args &a, const bs_maps &mp, const bs_smem<D> &sm, const int64_t *s_cum,
                                           const int64_t *s_beg, int kvh, int group, int j, int64_t f0, int64_t f1, int pt) {
  if (pt == 0) {
    sa_mbar_arrive_expect_tx(sm.kv_full, 2 * bs_smem<D>::TILE_BYTES);
#pragma unroll
    for (int cb = 0; cb < D / 64; cb++) {
      sa_tma_load_2d(sm.k + cb * BW_KEYS * 128, &mp.k, kvh * D + cb * 64, j * TILE, sm.kv_full);
      sa_tma_load_2d(sm.v + cb * BW_KEYS * 128, &mp.v, kvh * D + cb * 64, j * TILE, sm.kv_full);
    }
  }
  for (int64_t f = f0; f < f1; f++) {
    int64_t i = f - f0;  // the stages' and barriers' phases count from the CTA's first chunk
    int st = (int)(i % BS_STAGES);
    sa_mbar_wait(&sm.empty[st], (uint32_t)(((i / BS_STAGES) & 1) ^ 1));
    bs_info q = bs_locate(a, s_cum, s_beg, kvh, group, f);
    if (pt == 0) {
      sm.info[st] = q;  // published by the release of the arrival below
      bs_load_qdo<D>(mp, sm, st, q.h, q.r0);
    }
    if (pt < q.nv) bs_load_row(a, sm, st, q.h, q.r0, pt);  // rows past nv: the consumers mask those columns
    sa_mbar_arrive_cp_async(&sm.full[st]);
  }
  sa_cp_async_wait<0>();
}

// ---- consumer ---------------------------------------------------------------------------------------

// ---- the dQ writer ------------------------------------------------------------------------------------

// The writer's share of one chunk: the four boxes of a 64-row dQ (rows r0.. of head h) added to dQ in global memory,
// and the wait until the engine has read them (the caller then frees the buffer). Shared with the pair kernel.
template <int D>
__device__ __forceinline__ void bs_reduce_dq(const bs_maps &mp, const float *dq, int h, int64_t r0) {
#pragma unroll
  for (int b = 0; b < 4; b++) {
    int w = b >> 1, c0 = h * D + (D == 128 ? 64 * w : 0) + 32 * (b & 1);
    sa_tma_reduce_add_2d(&mp.dq, c0, (int)r0, (const unsigned char *)dq + b * (BW_QB * 32 * 4));
  }
  sa_bulk_commit();
  sa_bulk_wait_read<0>();
}

// Producer warp 2: per chunk, once both consumer warpgroups have left their dQ in shared memory, add its
// four boxes to dQ in global memory (rows past n_q are clipped by the tensor map), and free the buffer
// when the engine has read it. At d = 128 warpgroup w holds head dims 64w.., at d = 64 both hold all 64
// dims (each its own keys' share), so both are added.
template <int D>
__device__ __forceinline__ void bs_write_dq(const bwd_args &a, const bs_maps &mp, const bs_smem<D> &sm, const int64_t *s_cum,
                                            const int64_t *s_beg, int kvh, int group, int64_t f0, int64_t f1, int lane) {
  for (int64_t f = f0; f < f1; f++) {
    sa_mbar_wait(sm.dq_full, (uint32_t)((f - f0) & 1));
    if (lane == 0) {
      bs_info q = bs_locate(a, s_cum, s_beg, kvh, group, f);
      bs_reduce_dq<D>(mp, sm.dq, q.h, q.r0);
      sa_mbar_arrive(sm.dq_empty);
    }
    __syncwarp();
  }
  if (lane == 0) sa_bulk_wait<0>();  // the additions are done before the CTA's shared memory goes
}

// Byte offset of dQ element (row, col) of one 64-row x 32-float box, 128-byte swizzled as the tensor
// map reads it: 16-byte unit u of a row sits at u ^ (row % 8).
__device__ __forceinline__ int bs_dq_offset(int row, int col) {
  return row * 128 + ((((col >> 2) ^ row) & 7) << 4) + ((col & 3) << 2);
}

// Keep bits of a thread's transposed 16 x 64 block (keys kp[0], kp[1]; query columns n * 8 + 2t + e % 2).
// Positions of columns past nv are stale (whatever an earlier chunk, or nothing, left in the stage), so
// they are never read: those columns keep nothing.
__device__ __forceinline__ uint32_t bs_keep(const bs_info &q, const head_mask *mask, const int64_t *qp, const int64_t *kp,
                                            int t) {
  uint32_t keep = 0;
  if (q.nv == BW_QB) {
    if (q.kind == SA_CHUNK_FULL && kp[0] >= 0 && kp[1] >= 0) return 0xffffffffu;
    if (sa_keep_bits_t_vs(q.kind, mask, qp, kp, t, &keep)) return keep;
  }
#pragma unroll 1
  for (int i = 0; i < 32; i++) {
    int col = (i >> 2) * 8 + 2 * t + (i & 1);
    if (col >= q.nv) continue;
    int64_t qq = qp[col], k = (i & 2) ? kp[1] : kp[0];
    int keep_i = k >= 0 && (q.kind == SA_CHUNK_FULL ? 1 : mask ? sa_mask_keeps(mask, qq, k) : k <= qq);
    keep |= (uint32_t)keep_i << i;
  }
  return keep;
}

// ---- the consumers' pieces, shared by the tile kernel and the bars' kernels -----------------------------

// S^T = K Q^T and dP^T = V dO^T of a warpgroup's 64 keys (dka, dva: their first row in K, V tiles of KROWS rows)
// against the stage's 64 query rows, zeroed first, as two groups: P^T's exponentials run under the dP^T product.
template <int D, int KROWS>
__device__ __forceinline__ void bw_st_dpt(float (*s)[4], float (*dp)[4], uint64_t dka, uint64_t dva, const unsigned char *qb,
                                          const unsigned char *dob) {
#pragma unroll
  for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
  bw_fence_regs<BW_QB / 2>(&s[0][0]);
  bw_fence_regs<BW_QB / 2>(&dp[0][0]);
  sa_wgmma_fence();
  uint64_t dqb = sa_desc_sw128(qb, 16, 1024), ddob = sa_desc_sw128(dob, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) sa_wgmma_m64n64_ss(&s[0][0], dka + bw_kmajor(kk, KROWS), dqb + bw_kmajor(kk, BW_QB));
  sa_wgmma_commit();
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) sa_wgmma_m64n64_ss(&dp[0][0], dva + bw_kmajor(kk, KROWS), ddob + bw_kmajor(kk, BW_QB));
  sa_wgmma_commit();
}

// dS^T into a shared buffer of 128 rows as it sits in the accumulators (row = key kr[0], kr[1]; column = query row).
__device__ __forceinline__ void bs_put_dst(unsigned char *ds, const uint32_t (*da)[4], const int *kr, int t) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
#pragma unroll
    for (int x = 0; x < 4; x++) {
      int row = kr[x & 1], col = kk * 16 + (x >> 1) * 8 + 2 * t;
      *(uint32_t *)(ds + sa_sw128_offset(row, col, BW_KEYS)) = da[kk][x];
    }
}

// A warpgroup's 64 x 64 dQ accumulator, times scale, into two boxes of 64 rows x 32 floats at dqs: query rows
// r + 8 ri (r = (warp % 4) * 16 + g), columns 8n + 2t (+1). Threads with t >= 2 store column block n ^ 2 when the
// others store n: a half-warp's 8-byte stores then fill 8 distinct 16-byte units of a swizzled row group, no bank
// conflict.
__device__ __forceinline__ void bs_put_dq(unsigned char *dqs, const float (*dq)[4], int r, int t, float scale) {
  const bool swap = t & 2;
#pragma unroll
  for (int ri = 0; ri < 2; ri++) {
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++) {
      int m = swap ? n ^ 2 : n;
      float x0 = swap ? dq[n ^ 2][2 * ri] : dq[n][2 * ri], x1 = swap ? dq[n ^ 2][2 * ri + 1] : dq[n][2 * ri + 1];
      *(float2 *)(dqs + (m >> 2) * (BW_QB * 32 * 4) + bs_dq_offset(r + 8 * ri, (m & 3) * 8 + 2 * t)) =
          make_float2(scale * x0, scale * x1);
    }
  }
}

// The end of a step: every product done (Q of the stage and the packed P^T and dS^T free), the accumulators and the
// packed operands fenced so that no use moves across the wait.
template <int D>
__device__ __forceinline__ void bw_step_end(float (*dv)[4], float (*dk)[4], uint32_t (*pa)[4], uint32_t (*da)[4]) {
  sa_wgmma_wait<0>();
  bw_fence_regs<D / 2>(&dv[0][0]);
  bw_fence_regs<D / 2>(&dk[0][0]);
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
#pragma unroll
    for (int r = 0; r < 4; r++) sa_reg_fence_u32(pa[kk][r]), sa_reg_fence_u32(da[kk][r]);
}

// Keep bits of a bar step for a thread's two key slots kr (bit kr & 31 of `listed`: the key is listed for the step's
// query tile; kp: the keys' positions, -1 absent): the key listed and at or before the row; columns past nv keep
// nothing. qmin: the least position of the step's rows.
__device__ __forceinline__ uint32_t bb_keep(uint32_t listed, const int *kr, const int64_t *kp, int nv, int64_t qmin,
                                            const int64_t *qp, int t) {
  int64_t kx[2];
#pragma unroll
  for (int ri = 0; ri < 2; ri++) kx[ri] = (listed >> (kr[ri] & 31)) & 1u ? kp[ri] : -1;
  if (nv == BW_QB && kx[0] >= 0 && kx[1] >= 0 && kx[0] <= qmin && kx[1] <= qmin)
    return 0xffffffffu;  // both keys listed and before every row (a vertical line's usual case)
  uint32_t keep = 0;
#pragma unroll 1
  for (int e = 0; e < 32; e++) {
    int col = (e >> 2) * 8 + 2 * t + (e & 1);
    int64_t k = (e & 2) ? kx[1] : kx[0];
    keep |= (uint32_t)(col < nv && k >= 0 && k <= qp[col < nv ? col : 0]) << e;
  }
  return keep;
}

// P^T = exp2(S^T scale_log2 - LSE log2 e) in place where kept, else 0. The rows' LSE are read from shared memory
// where they are used (held in registers across the wait they cost 16 of them, and the consumers spilled: ncu on
// backward variant 4, results/kernels/2026-11-28-h200-bwd-bars-ws-spills).
__device__ __forceinline__ void bb_pt(float (*s)[4], const float *lb, uint32_t keep, bool all, int t, float scale_log2) {
#pragma unroll
  for (int n = 0; n < BW_QB / 8; n++) {
    float2 L = *(const float2 *)(lb + n * 8 + 2 * t);
    L = make_float2(L.x == -INFINITY ? INFINITY : L.x * SA_LOG2E, L.y == -INFINITY ? INFINITY : L.y * SA_LOG2E);
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float p = sa_exp2(fmaf(s[n][e], scale_log2, -(e & 1 ? L.y : L.x)));
      s[n][e] = all || (keep >> (n * 4 + e)) & 1u ? p : 0.f;
    }
  }
}

// dS^T = P^T (dP^T - D) in place where kept, else 0: selected, not multiplied by P = 0, since D of rows past nv is
// stale (inf, NaN).
__device__ __forceinline__ void bb_dst(float (*dp)[4], const float (*s)[4], const float *db, uint32_t keep, bool all, int t) {
#pragma unroll
  for (int n = 0; n < BW_QB / 8; n++) {
    float2 dr = *(const float2 *)(db + n * 8 + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; e++)
      dp[n][e] = all || (keep >> (n * 4 + e)) & 1u ? s[n][e] * (dp[n][e] - (e & 1 ? dr.y : dr.x)) : 0.f;
  }
}

// A thread's dK, dV of its key slot ri (source-local key `key`), added into the outputs by 8-byte vector reductions.
template <int D>
__device__ __forceinline__ void bb_add_dkdv(const bwd_args &a, const float (*dk)[4], const float (*dv)[4], int ri, int64_t key,
                                            int kvh, int t) {
  float *ok = a.dk + (key * a.kv_heads + kvh) * D, *ov = a.dv + (key * a.kv_heads + kvh) * D;
#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    float2 *pk = (float2 *)(ok + n * 8 + 2 * t), *pv = (float2 *)(ov + n * 8 + 2 * t);
    float2 xk = make_float2(a.scale * dk[n][2 * ri], a.scale * dk[n][2 * ri + 1]);
    float2 xv = make_float2(dv[n][2 * ri], dv[n][2 * ri + 1]);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(pk, xk), atomicAdd(pv, xv);
#else  // the sm_80 image compiles this kernel but never runs it
    atomicAdd(&pk->x, xk.x), atomicAdd(&pk->y, xk.y), atomicAdd(&pv->x, xv.x), atomicAdd(&pv->y, xv.y);
#endif
  }
}

template <int D>
__device__ __forceinline__ void bs_consume(const bwd_args &a, const bs_smem<D> &sm, int kvh, int j, int n_valid,
                                           int64_t f0, int64_t f1, bool split, int wg, int lw, int lane) {
  int g = lane >> 2, t = lane & 3;
  int64_t base = (int64_t)j * TILE;
  int kr[2] = {lw * 16 + g, lw * 16 + g + 8};  // this thread's two keys (rows of the 128-key tile)
  int64_t kp[2];
#pragma unroll
  for (int i = 0; i < 2; i++) kp[i] = kr[i] < n_valid ? a.kpos[base + kr[i]] : -1;
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;
  uint64_t dka = sa_desc_sw128(sm.k + wg * 64 * 128, 16, 1024), dva = sa_desc_sw128(sm.v + wg * 64 * 128, 16, 1024);
  // dQ's operands: at d = 128, dS^T over all 128 keys and K's head-dim block wg; at d = 64, the warpgroup's
  // own 64 keys of dS^T and of K.
  const int DQ_KEYS = D == 128 ? BW_KEYS : 64;
  uint64_t dkq = D == 128 ? sa_desc_sw128(sm.k + wg * BW_KEYS * 128, BW_KEYS * 128, 1024)
                          : sa_desc_sw128(sm.k + wg * 64 * 128, BW_KEYS * 128, 1024);
  sa_mbar_wait(sm.kv_full, 0);

  for (int64_t f = f0; f < f1; f++) {
    int64_t i = f - f0;
    int st = (int)(i % BS_STAGES);
    sa_mbar_wait(&sm.full[st], (uint32_t)((i / BS_STAGES) & 1));
    const bs_info q = sm.info[st];
    const unsigned char *qb = sm.q0 + st * bs_smem<D>::CHUNK_BYTES, *dob = sm.do0 + st * bs_smem<D>::CHUNK_BYTES;
    const int64_t *qp = sm.qpos + st * BW_QB;
    const float *lb = sm.lse + st * BW_QB, *db = sm.drow + st * BW_QB;
    unsigned char *ds = sm.ds0 + (i & 1) * bs_smem<D>::DS_BYTES;

    // S^T and dP^T as two groups: P^T's exponentials run under the dP^T product.
    float s[BW_QB / 8][4], dp[BW_QB / 8][4];
    bw_st_dpt<D, BW_KEYS>(s, dp, dka, dva, qb, dob);

    const head_mask *mask = a.masks ? &a.masks[q.h] : NULL;
    uint32_t keep = bs_keep(q, mask, qp, kp, t);
    // A warp whose 16 x 64 block keeps every pair (FULL chunks, most of a causal chunk's warps) skips the
    // per-element selects: every column is then a present row, so its LSE and D are not stale.
    const bool all = __all_sync(0xffffffffu, keep == 0xffffffffu);
    // The rows' LSE in base 2 (-inf: +inf, so that exp2 gives 0), a pair of columns 8n + 2t (+1) a load.
    float2 l2[BW_QB / 8];
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++) {
      float2 L = *(const float2 *)(lb + n * 8 + 2 * t);
      l2[n] = make_float2(L.x == -INFINITY ? INFINITY : L.x * SA_LOG2E, L.y == -INFINITY ? INFINITY : L.y * SA_LOG2E);
    }
    sa_wgmma_wait<1>();
    bw_fence_regs<BW_QB / 2>(&s[0][0]);
    if (all) {
#pragma unroll
      for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[n][e] = sa_exp2(fmaf(s[n][e], a.scale_log2, -(e & 1 ? l2[n].y : l2[n].x)));  // P^T
    } else {
#pragma unroll
      for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          s[n][e] = (keep >> (n * 4 + e)) & 1u ? sa_exp2(fmaf(s[n][e], a.scale_log2, -(e & 1 ? l2[n].y : l2[n].x))) : 0.f;
    }
    uint32_t pa[4][4], da[4][4];
    bw_pack(pa, s);
    bw_fence_regs<D / 2>(&dv[0][0]);
    sa_wgmma_fence();
    bw_mma_rs<D>(&dv[0][0], pa, sa_desc_sw128(dob, BW_QB * 128, 1024));  // dV += P^T dO, under dS^T
    sa_wgmma_commit();
    float2 dr[BW_QB / 8];  // the rows' D, loaded while dP^T and dV run
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++) dr[n] = *(const float2 *)(db + n * 8 + 2 * t);
    sa_wgmma_wait<1>();  // dP^T (the older group) done
    bw_fence_regs<BW_QB / 2>(&dp[0][0]);
    if (all) {
#pragma unroll
      for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dp[n][e] = s[n][e] * (dp[n][e] - (e & 1 ? dr[n].y : dr[n].x));  // dS^T
    } else {
#pragma unroll
      for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)  // dS^T; exactly 0 where nothing is kept (D of a column past nv is stale)
          dp[n][e] = (keep >> (n * 4 + e)) & 1u ? s[n][e] * (dp[n][e] - (e & 1 ? dr[n].y : dr[n].x)) : 0.f;
    }
    bw_pack(da, dp);
    bs_put_dst(ds, da, kr, t);  // dS^T into shared memory as it sits in the accumulators
    sa_fence_proxy_async();     // dS^T, written by plain stores, is read next by the tensor cores
    if (D == 128) sa_named_sync<BS_DS_BAR>(256);
    else if (wg == 0) sa_named_sync<BS_DS_BAR + 1>(128);
    else sa_named_sync<BS_DS_BAR + 2>(128);

    // dQ (query rows x head dims) = dS K: A = dS^T (M-major), B = K (N-major); issued before dK += dS^T Q
    // so that dK runs while dQ goes to shared memory (the groups complete in order).
    float dq[BW_QB / 8][4];
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) dq[n][e] = 0.f;
    bw_fence_regs<BW_QB / 2>(&dq[0][0]);
    bw_fence_regs<D / 2>(&dk[0][0]);
    sa_wgmma_fence();
    uint64_t dds = sa_desc_sw128(ds + (D == 128 ? 0 : wg * 64 * 128), BW_KEYS * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < DQ_KEYS / 16; kk++) sa_wgmma_m64n64_ss_tt(&dq[0][0], dds + bw_nmajor(kk), dkq + bw_nmajor(kk));
    sa_wgmma_commit();
    bw_mma_rs<D>(&dk[0][0], da, sa_desc_sw128(qb, BW_QB * 128, 1024));  // dK += dS^T Q
    sa_wgmma_commit();
    sa_wgmma_wait<1>();  // dV and dQ done; dK may still run
    bw_fence_regs<BW_QB / 2>(&dq[0][0]);

    // The warpgroup's 64 columns into its two boxes once the writer has read the previous chunk's (rows past nv
    // hold zeros; the tensor map clips them).
    sa_mbar_wait(sm.dq_empty, (uint32_t)((i & 1) ^ 1));
    bs_put_dq((unsigned char *)sm.dq + wg * 2 * bs_smem<D>::DQ_BOX_BYTES, dq, (lw & 3) * 16 + g, t, a.scale);
    sa_fence_proxy_async();  // plain stores, read next by the tensor-copy engine
    sa_mbar_arrive(sm.dq_full);
    bw_step_end<D>(dv, dk, pa, da);  // dK done: Q of stage st and dS^T's registers are free
    sa_mbar_release_warp(&sm.empty[st], lane);  // Q, dO, LSE, D and the positions of stage st are free
  }
  // dK, dV of the CTA's keys: added in place when the CTA walks the tile's every chunk, by atomics when
  // the walk is split over several CTAs (any order: not bit-reproducible).
  for (int ri = 0; ri < 2; ri++) {
    if (kr[ri] >= n_valid) continue;
    int64_t key = base + kr[ri];
    float *ok = a.dk + (key * a.kv_heads + kvh) * D, *ov = a.dv + (key * a.kv_heads + kvh) * D;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      float2 *pk = (float2 *)(ok + n * 8 + 2 * t), *pv = (float2 *)(ov + n * 8 + 2 * t);
      float2 xk = make_float2(a.scale * dk[n][2 * ri], a.scale * dk[n][2 * ri + 1]);
      float2 xv = make_float2(dv[n][2 * ri], dv[n][2 * ri + 1]);
      if (split) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        atomicAdd(pk, xk), atomicAdd(pv, xv);  // 8-byte vector reductions
#else  // the sm_80 image compiles this kernel but never runs it
        atomicAdd(&pk->x, xk.x), atomicAdd(&pk->y, xk.y), atomicAdd(&pv->x, xv.x), atomicAdd(&pv->y, xv.y);
#endif
      } else {
        float2 r = *pk;
        *pk = make_float2(r.x + xk.x, r.y + xk.y);
        r = *pv;
        *pv = make_float2(r.x + xv.x, r.y + xv.y);
      }
    }
  }
}

// ---- the kernel -------------------------------------------------------------------------------------

// CTA x walks part `x % splits` of KV cell x / splits (tile-major over the KV heads: the heaviest tiles of a
// causal mask first). A cell whose query chunks alone exceed one SM's fair share of the call's chunks (all of
// them over n_sms) is split into parts of half that share (at most `splits`) of consecutive chunks, so that a
// tile used by every query (a vertical line's) does not leave the other SMs idle while its CTA walks; with
// cap > 0, every cell is split into parts of cap chunks (tests). The CTAs of parts a cell does not need return
// at once. Dense masks are never split: splitting their evenly loaded cells measured slower on one H100
// (bench-attn, dense causal 64K: parts of 1024 chunks 124 ms, unsplit 93 ms; 4 ranks at 512K: 2544 ms against
// 1736 ms), while the VS-like mask at 128K gains (46 ms against 62 ms unsplit).
template <int D>
__global__ void __launch_bounds__(BS_THREADS, 1) sa_bwd_ws_kernel(const __grid_constant__ bwd_args a,
                                                                  const __grid_constant__ bs_maps mp, int splits,
                                                                  int n_sms, int64_t cap) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bs_smem<D> sm = bs_smem_of<D>(smem_raw);
  __shared__ int64_t s_cum[33];
  __shared__ int64_t s_beg[32];
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  int group = a.heads / a.kv_heads;
  // Tile-major over the KV heads: the heaviest tiles (the first, under a causal mask) start first.
  int64_t cell = blockIdx.x / splits;
  int part = (int)(blockIdx.x % splits);
  int j = (int)(cell / a.kv_heads), kvh = (int)(cell % a.kv_heads);
  int n_valid = (int)min((int64_t)TILE, a.n_k - (int64_t)j * TILE);
  if (tid == 0) {
    s_cum[0] = 0;
    for (int gi = 0; gi < group; gi++) {
      int ih = a.tt.heads == 1 ? 0 : kvh * group + gi;
      int64_t x = (int64_t)ih * a.tt.n_kvtiles + j;
      int64_t b = a.tt.kv_cnt[x], en = a.tt.kv_cnt[x + 1];
      s_beg[gi] = b, s_cum[gi + 1] = s_cum[gi] + 2 * (en - b);
    }
    sa_mbar_init(sm.kv_full, 1);
    for (int i = 0; i < BS_STAGES; i++) {
      sa_mbar_init(&sm.full[i], 1 + BS_LOADERS);  // the elected thread's (with Q's and dO's bytes) + one a loader
      sa_mbar_init(&sm.empty[i], 8 * SA_RELEASE_LANES);  // each consumer warp's release
    }
    sa_mbar_init(sm.dq_full, 256);  // every consumer thread
    sa_mbar_init(sm.dq_empty, 1);   // the writer
  }
  __syncthreads();
  int64_t total = s_cum[group];
  int64_t parts = 1;
  if (cap > 0) {
    parts = min((int64_t)splits, (total + cap - 1) / cap);
  } else if (splits > 1) {  // every cell's chunks: 2 x (transposed entries), x heads when one index serves all
    int64_t all = 2 * a.tt.kv_cnt[(int64_t)a.tt.heads * a.tt.n_kvtiles] * (a.tt.heads == 1 ? a.heads : 1);
    int64_t fair = (all + n_sms - 1) / n_sms, part_chunks = max((int64_t)256, fair / 2);
    if (total > fair) parts = min((int64_t)splits, (total + part_chunks - 1) / part_chunks);
  }
  if (part >= parts) return;  // no query chunk uses this tile (dK, dV unchanged), or no part is left for this CTA
  int64_t f0 = total * part / parts, f1 = total * (part + 1) / parts;
  if (wg == 0) {
    sa_setmaxnreg_dec<BS_PROD_REGS>();
    if (tid < BS_LOADERS) bs_produce<D>(a, mp, sm, s_cum, s_beg, kvh, group, j, f0, f1, tid);
    else if (warp == 2) bs_write_dq<D>(a, mp, sm, s_cum, s_beg, kvh, group, f0, f1, lane);
  } else {
    sa_setmaxnreg_inc<BS_CONS_REGS>();
    bs_consume<D>(a, sm, kvh, j, n_valid, f0, f1, parts > 1, wg - 1, warp - 4, lane);
  }
}

// ---- the bars on the same machinery (sa_bwd_variant 4) ------------------------------------------------
//
// A bar compute chunk (kernels/bar_chunks.c: up to 64 bar keys of one query head and the sorted union of their
// query tiles) is a KV cell of 64 gathered keys: the producer copies their K and V rows by cp.async (the keys are
// not consecutive) and then every 64-row query chunk of the union through the same two-stage ring, with each
// key's "listed" bit for the chunk's query tile (a key's own list is ascending, so each loader keeps a cursor
// into its key's list). Both consumer warpgroups own the same 64 keys and take the walk's chunks in turn (even
// ones warpgroup 0, odd ones 1), each with its own stage, dS^T buffer and dQ boxes; dQ = dS K over the 64 keys in
// 64-dim halves, added by the tensor-copy engine's reduction like the tiles'; each warpgroup's dK and dV are added
// into the outputs by vector reductions at the end. Five products per (chunk, key block), where the mma.sync
// bar kernel and the bars' query-major dQ kernel of variant 3 take seven. An element is kept where its key is
// listed for the query tile and lies at or before the row (bars run under the causal mask only).

#define BB_WS_KEYS 64
// Registers: the producer's gathers and cursors need more than the tile kernel's 24 (with 24 / 240 both sides
// spilled: 27.6 M local-memory requests in one vs-topp:0.95 layer at 64K, ncu, results/kernels/
// 2026-11-28-h200-bwd-bars-ws-spills); 40 / 232 give back and take the same 128 x 128 = 256 x 64 and leave no spill
// in either image (ptxas -v), with the rows' LSE and D read from shared memory where they are used.
#define BB_PROD_REGS 40
#define BB_CONS_REGS 232

typedef struct {
  int64_t r0;
  int64_t qmin[2];     // the least position of rows 32w.. of the chunk: a key at or before both keeps every row
  int nv, pad;
  uint32_t listed[2];  // bit k: key slot k is listed for this chunk's query tile
} bb_ws_info;

template <int D>
struct bb_ws_smem {
  unsigned char *k, *v, *q0, *do0, *ds0;  // K, V: 64 rows a 64-dim block; dS^T buffer w for warpgroup w
  float *dq0;                             // warpgroup w's dQ boxes at dq0 + w * DQ_BYTES
  int64_t *qpos;
  float *lse, *drow;
  bb_ws_info *info;
  uint64_t *kv_full, *full, *empty, *dq_full, *dq_empty;  // full, empty [BS_STAGES]; dq_full, dq_empty [2]
  static constexpr int TILE_BYTES = BB_WS_KEYS * D * 2, CHUNK_BYTES = BW_QB * D * 2, DS_BYTES = BW_KEYS * BW_QB * 2;
  static constexpr int DQ_BOX_BYTES = BW_QB * 32 * 4, DQ_BYTES = (D / 32) * DQ_BOX_BYTES;
  static constexpr size_t bytes() {
    return 1024 + 2 * (size_t)TILE_BYTES + 2 * BS_STAGES * (size_t)CHUNK_BYTES + 2 * (size_t)DS_BYTES +
           2 * (size_t)DQ_BYTES + BS_STAGES * BW_QB * (8 + 4 + 4) + BS_STAGES * sizeof(bb_ws_info) + (1 + 2 * BS_STAGES + 4) * 8;
  }
};

template <int D>
__device__ __forceinline__ bb_ws_smem<D> bb_ws_smem_of(unsigned char *raw) {
  bb_ws_smem<D> s;
  unsigned char *p = raw + ((1024 - (sa_smem_addr(raw) & 1023)) & 1023);
  s.k = p, p += bb_ws_smem<D>::TILE_BYTES;
  s.v = p, p += bb_ws_smem<D>::TILE_BYTES;
  s.q0 = p, p += BS_STAGES * bb_ws_smem<D>::CHUNK_BYTES;
  s.do0 = p, p += BS_STAGES * bb_ws_smem<D>::CHUNK_BYTES;
  s.ds0 = p, p += 2 * bb_ws_smem<D>::DS_BYTES;
  s.dq0 = (float *)p, p += 2 * bb_ws_smem<D>::DQ_BYTES;  // 1024-aligned: the boxes are 128-byte swizzled
  s.qpos = (int64_t *)p, p += BS_STAGES * BW_QB * 8;
  s.lse = (float *)p, p += BS_STAGES * BW_QB * 4;
  s.drow = (float *)p, p += BS_STAGES * BW_QB * 4;
  s.info = (bb_ws_info *)p, p += BS_STAGES * sizeof(bb_ws_info);
  uint64_t *b = (uint64_t *)p;
  s.kv_full = b, s.full = b + 1, s.empty = b + 1 + BS_STAGES;
  s.dq_full = b + 1 + 2 * BS_STAGES, s.dq_empty = b + 3 + 2 * BS_STAGES;
  return s;
}

// The first row of step f of the walk of compute chunk c (two 64-row halves a query tile).
__device__ __forceinline__ int64_t bb_ws_row(const bwd_args &a, int64_t u0, int64_t f) {
  return (int64_t)a.bc.hc_q_idx[u0 + f / 2] * TILE + (f & 1) * BW_QB;
}

// K and V of a compute chunk's keys (bar entries first.., n_valid of them) into rows row0.. of swizzled tiles of ROWS
// rows: 64 rows x D / 8 segments each, 16-byte copies by the BS_LOADERS loaders, absent keys zero-filled; the keys
// are loaded before the copies (each cp.async's memory clobber would keep a load between two of them apart).
// UNROLL: batches unrolled (the pair kernel's two gathers, unrolled, spilled its producer's registers).
template <int D, int ROWS, int UNROLL = D / 8 * BB_WS_KEYS / BS_LOADERS / 4>
__device__ __forceinline__ void bb_gather_kv(const bwd_args &a, unsigned char *sk, unsigned char *sv, int first, int n_valid,
                                             int kvh, int row0, int pt) {
  const int32_t *idx = a.tt.bar_key + first;
  const int64_t kstride = (int64_t)a.kv_heads * D;
  constexpr int SEGS = D / 8, PER = BB_WS_KEYS * SEGS / BS_LOADERS, BATCH = 4;  // batches: the producer's few registers
#pragma unroll UNROLL
  for (int j0 = 0; j0 < PER; j0 += BATCH) {
    int32_t key[BATCH];
#pragma unroll
    for (int j = 0; j < BATCH; j++) {
      int r = (pt + (j0 + j) * BS_LOADERS) / SEGS;
      key[j] = r < n_valid ? idx[r] : -1;
    }
#pragma unroll
    for (int j = 0; j < BATCH; j++) {
      int u = pt + (j0 + j) * BS_LOADERS, r = u / SEGS, sg = u % SEGS;
      int64_t off = key[j] < 0 ? 0 : (int64_t)key[j] * kstride + kvh * D + sg * 8;
      sa_cp_async16(sk + sa_sw128_offset(row0 + r, sg * 8, ROWS), a.k + off, key[j] < 0 ? 0 : 16);
      sa_cp_async16(sv + sa_sw128_offset(row0 + r, sg * 8, ROWS), a.v + off, key[j] < 0 ? 0 : 16);
    }
  }
}

// A bar key's cursor into its ascending list of query tiles: at a.tt.bar_q_idx[pos], `left` tiles from there on; nxt
// is the first listed tile at or after the last one asked about (INT_MAX past the end). Four registers: the pair
// kernel's loaders keep two.
typedef struct {
  int64_t pos;
  int32_t left, nxt;
} bb_cursor;

// The cursor of bar entry `entry` (absent keys: an empty list) from its first tile at or after qt0 (binary search).
__device__ __forceinline__ bb_cursor bb_cursor_at(const bwd_args &a, int entry, bool present, int32_t qt0) {
  bb_cursor k;
  k.pos = 0, k.left = 0, k.nxt = INT_MAX;
  if (present) {
    int64_t b0 = a.tt.bar_q_cnt[entry];
    const int32_t *lq = a.tt.bar_q_idx + b0;
    int32_t len = (int32_t)(a.tt.bar_q_cnt[entry + 1] - b0), lo = 0, hi = len;
    while (lo < hi) {
      int32_t mid = (lo + hi) / 2;
      if (lq[mid] < qt0) lo = mid + 1;
      else hi = mid;
    }
    k.pos = b0 + lo, k.left = len - lo, k.nxt = k.left > 0 ? lq[lo] : INT_MAX;
  }
  return k;
}

// Whether the key is listed for query tile qt (tiles asked about ascend).
__device__ __forceinline__ bool bb_cursor_lists(const bwd_args &a, bb_cursor &k, int32_t qt) {
  while (k.nxt < qt) k.nxt = --k.left > 0 ? a.tt.bar_q_idx[++k.pos] : INT_MAX;
  return k.nxt == qt;
}

template <int D>
__device__ __forceinline__ void bb_ws_produce(const bwd_args &a, const bs_maps &mp, const bb_ws_smem<D> &sm, int c, int h,
                                              int kvh, int64_t u0, int64_t f0, int64_t f1, int pt) {
  const int first = a.bc.hc_first[c], n_valid = a.bc.hc_n[c];
  bb_gather_kv<D, BB_WS_KEYS>(a, sm.k, sm.v, first, n_valid, kvh, 0, pt);
  sa_mbar_arrive_cp_async(sm.kv_full);
  bb_cursor key = bb_cursor_at(a, first + pt, pt < n_valid, a.bc.hc_q_idx[u0 + f0 / 2]);  // key slot pt's cursor
  const int lane = pt & 31, warp = pt >> 5;
  // A step's query tile is loaded one step ahead, and its rows' positions before the wait for a free stage, so that
  // the chain of dependent loads a step needs (tile, positions, the keys' cursors) runs under the consumers' products
  // instead of after each release.
  int32_t qt_next = a.bc.hc_q_idx[u0 + f0 / 2];
  for (int64_t f = f0; f < f1; f++) {
    int64_t i = f - f0;
    int st = (int)(i % BS_STAGES);
    const int32_t qt = qt_next;
    int64_t r0 = (int64_t)qt * TILE + (f & 1) * BW_QB, left = a.n_q - r0;
    int nv = left < 0 ? 0 : left > BW_QB ? BW_QB : (int)left;
    int64_t qmin = pt < nv ? a.qpos[r0 + pt] : INT64_MAX;
    if (f + 1 < f1) qt_next = a.bc.hc_q_idx[u0 + (f + 1) / 2];
    uint32_t listed = __ballot_sync(0xffffffffu, bb_cursor_lists(a, key, qt));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) qmin = min(qmin, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)qmin, o));
    sa_mbar_wait(&sm.empty[st], (uint32_t)(((i / BS_STAGES) & 1) ^ 1));
    if (lane == 0) sm.info[st].listed[warp] = listed, sm.info[st].qmin[warp] = qmin;  // published by the releases below
    if (pt == 0) {
      sm.info[st].r0 = r0, sm.info[st].nv = nv;
      bs_load_qdo<D>(mp, sm, st, h, r0);
    } else if (pt == 32) {
      sa_mbar_arrive(&sm.full[st]);  // warp 1's listed word
    }
    if (pt < nv) bs_load_row(a, sm, st, h, r0, pt);
    sa_mbar_arrive_cp_async(&sm.full[st]);
  }
  sa_cp_async_wait<0>();
}

template <int D>
__device__ __forceinline__ void bb_ws_write_dq(const bwd_args &a, const bs_maps &mp, const bb_ws_smem<D> &sm, int h,
                                               int64_t u0, int64_t f0, int64_t f1, int lane) {
  for (int64_t f = f0; f < f1; f++) {
    int64_t i = f - f0;
    int w = (int)(i & 1);
    sa_mbar_wait(&sm.dq_full[w], (uint32_t)((i >> 1) & 1));
    if (lane == 0) {
      int64_t r0 = bb_ws_row(a, u0, f);
      const unsigned char *src = (const unsigned char *)sm.dq0 + w * bb_ws_smem<D>::DQ_BYTES;
#pragma unroll
      for (int b = 0; b < D / 32; b++)
        sa_tma_reduce_add_2d(&mp.dq, h * D + 32 * b, (int)r0, src + b * bb_ws_smem<D>::DQ_BOX_BYTES);
      sa_bulk_commit();
      sa_bulk_wait_read<0>();
      sa_mbar_arrive(&sm.dq_empty[w]);
    }
    __syncwarp();
  }
  if (lane == 0) sa_bulk_wait<0>();
}

// Consumer warpgroup w (0 or 1): chunks f0 + w, f0 + w + 2, ... of the walk over the chunk's 64 keys.
template <int D>
__device__ __forceinline__ void bb_ws_consume(const bwd_args &a, const bb_ws_smem<D> &sm, int c, int kvh, int64_t f0,
                                              int64_t f1, int w, int lw, int lane) {
  int g = lane >> 2, t = lane & 3;
  const int first = a.bc.hc_first[c], n_valid = a.bc.hc_n[c];
  const int32_t *idx = a.tt.bar_key + first;
  int kr[2] = {lw * 16 + g, lw * 16 + g + 8};  // this thread's two key slots
  int64_t kp[2];
#pragma unroll
  for (int i = 0; i < 2; i++) kp[i] = kr[i] < n_valid ? a.kpos[idx[kr[i]]] : -1;
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;
  const uint64_t dka = sa_desc_sw128(sm.k, 16, 1024), dva = sa_desc_sw128(sm.v, 16, 1024);
  unsigned char *ds = sm.ds0 + w * bb_ws_smem<D>::DS_BYTES;
  unsigned char *dqs = (unsigned char *)sm.dq0 + w * bb_ws_smem<D>::DQ_BYTES;
  sa_mbar_wait(sm.kv_full, 0);
  sa_fence_proxy_async();  // K and V came by cp.async (generic proxy); the products read them through the async one

  for (int64_t f = f0 + w; f < f1; f += 2) {
    int64_t i = f - f0;
    int st = (int)(i % BS_STAGES);  // = w
    sa_mbar_wait(&sm.full[st], (uint32_t)((i / BS_STAGES) & 1));
    const bb_ws_info q = sm.info[st];
    const uint32_t listed = sm.info[st].listed[lw >> 1];  // both key slots' word (slots lw * 16 .. lw * 16 + 15); read
                                                          // from shared memory, not indexed in the copy q (a stack frame)
    const unsigned char *qb = sm.q0 + st * bb_ws_smem<D>::CHUNK_BYTES, *dob = sm.do0 + st * bb_ws_smem<D>::CHUNK_BYTES;
    const int64_t *qp = sm.qpos + st * BW_QB;
    const float *lb = sm.lse + st * BW_QB, *db = sm.drow + st * BW_QB;

    float s[BW_QB / 8][4], dp[BW_QB / 8][4];
    bw_st_dpt<D, BB_WS_KEYS>(s, dp, dka, dva, qb, dob);
    const uint32_t keep = bb_keep(listed, kr, kp, q.nv, min(q.qmin[0], q.qmin[1]), qp, t);
    const bool all = __all_sync(0xffffffffu, keep == 0xffffffffu);
    sa_wgmma_wait<1>();
    bw_fence_regs<BW_QB / 2>(&s[0][0]);
    bb_pt(s, lb, keep, all, t, a.scale_log2);
    uint32_t pa[4][4], da[4][4];
    bw_pack(pa, s);
    bw_fence_regs<D / 2>(&dv[0][0]);
    sa_wgmma_fence();
    bw_mma_rs<D>(&dv[0][0], pa, sa_desc_sw128(dob, BW_QB * 128, 1024));  // dV += P^T dO
    sa_wgmma_commit();
    sa_wgmma_wait<1>();  // dP^T done
    bw_fence_regs<BW_QB / 2>(&dp[0][0]);
    bb_dst(dp, s, db, keep, all, t);
    bw_pack(da, dp);
    bs_put_dst(ds, da, kr, t);
    sa_fence_proxy_async();
    if (w == 0) sa_named_sync<BS_DS_BAR + 1>(128);
    else sa_named_sync<BS_DS_BAR + 2>(128);

    // dQ (64 rows x D) = dS K over the 64 keys, a 64-dim half at a time; dK += dS^T Q issued after the first half.
    sa_mbar_wait(&sm.dq_empty[w], (uint32_t)(((i >> 1) & 1) ^ 1));
    if (D == 128) {  // dV done before the first dQ half: its accumulators and P^T's registers free for the halves
      sa_wgmma_wait<0>();
      bw_fence_regs<D / 2>(&dv[0][0]);
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) sa_reg_fence_u32(pa[kk][r]);
    }
    const uint64_t dds = sa_desc_sw128(ds, BW_KEYS * 128, 1024);
#pragma unroll
    for (int hh = 0; hh < D / 64; hh++) {
      float dq[BW_QB / 8][4];
#pragma unroll
      for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dq[n][e] = 0.f;
      bw_fence_regs<BW_QB / 2>(&dq[0][0]);
      const bool last = hh == D / 64 - 1;
      if (last) bw_fence_regs<D / 2>(&dk[0][0]);
      sa_wgmma_fence();
      const uint64_t dkq = sa_desc_sw128(sm.k + hh * BB_WS_KEYS * 128, BB_WS_KEYS * 128, 1024);
#pragma unroll
      for (int kk = 0; kk < BB_WS_KEYS / 16; kk++) sa_wgmma_m64n64_ss_tt(&dq[0][0], dds + bw_nmajor(kk), dkq + bw_nmajor(kk));
      sa_wgmma_commit();
      if (last) {  // dK += dS^T Q after the last half, so that it runs while that half is stored
        bw_mma_rs<D>(&dk[0][0], da, sa_desc_sw128(qb, BW_QB * 128, 1024));
        sa_wgmma_commit();
        sa_wgmma_wait<1>();  // dV and this dQ half done; dK may still run
      } else {
        sa_wgmma_wait<0>();  // one dQ half's accumulators live at a time
      }
      bw_fence_regs<BW_QB / 2>(&dq[0][0]);
      bs_put_dq(dqs + hh * 2 * bb_ws_smem<D>::DQ_BOX_BYTES, dq, lw * 16 + g, t, a.scale);
    }
    sa_fence_proxy_async();
    sa_mbar_arrive(&sm.dq_full[w]);
    bw_step_end<D>(dv, dk, pa, da);
    sa_mbar_release_warp(&sm.empty[st], lane);
  }
  // Both warpgroups' dK, dV of the 64 keys, added into the outputs (any order).
  for (int ri = 0; ri < 2; ri++)
    if (kr[ri] < n_valid) bb_add_dkdv<D>(a, dk, dv, ri, idx[kr[ri]], kvh, t);
}

// CTA x walks part x % splits of compute chunk x / splits: with cap > 0 parts of cap steps (tests), else parts of an
// eighth of the even share of all chunks' steps over the SMs (at least 64 steps, at most `splits` parts), the rule of
// the mma.sync split walk (kernels/sparse_attn_bwd_bars.cu).
template <int D>
__global__ void __launch_bounds__(BS_THREADS, 1) sa_bwd_ws_bars_kernel(const __grid_constant__ bwd_args a,
                                                                       const __grid_constant__ bs_maps mp, int splits,
                                                                       int n_sms, int cap) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bb_ws_smem<D> sm = bb_ws_smem_of<D>(smem_raw);
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  int c = (int)(blockIdx.x / splits), part = (int)(blockIdx.x % splits);
  const int64_t u0 = a.bc.hc_q_cnt[c], total = 2 * (a.bc.hc_q_cnt[c + 1] - u0);
  const int64_t parts = bw_bar_parts(a, total, splits, n_sms, cap);
  if (total == 0 || part >= parts) return;
  const int64_t f0 = total * part / parts, f1 = total * (part + 1) / parts;
  const int h = a.bc.hc_head[c], kvh = h / (a.heads / a.kv_heads);
  if (tid == 0) {
    sa_mbar_init(sm.kv_full, BS_LOADERS);
    for (int i = 0; i < BS_STAGES; i++) {
      sa_mbar_init(&sm.full[i], 1 + 1 + BS_LOADERS);  // the elected thread's (Q's, dO's bytes), warp 1's word, each loader's
      sa_mbar_init(&sm.empty[i], 4 * SA_RELEASE_LANES);  // the consuming warpgroup's warps
    }
    for (int w = 0; w < 2; w++) sa_mbar_init(&sm.dq_full[w], 128), sa_mbar_init(&sm.dq_empty[w], 1);
  }
  __syncthreads();
  if (wg == 0) {
    sa_setmaxnreg_dec<BB_PROD_REGS>();
    if (tid < BS_LOADERS) bb_ws_produce<D>(a, mp, sm, c, h, kvh, u0, f0, f1, tid);
    else if (warp == 2) bb_ws_write_dq<D>(a, mp, sm, h, u0, f0, f1, lane);
  } else {
    sa_setmaxnreg_inc<BB_CONS_REGS>();
    bb_ws_consume<D>(a, sm, c, kvh, f0, f1, wg - 1, warp & 3, lane);
  }
}

// ---- the bars in pairs of compute chunks (sa_bwd_variant 5) ---------------------------------------------
//
// Variant 4 walks Q and dO once per 64 bar keys, and each of its warpgroups' products is 64 x 64 with a dQ over 64
// keys. Here one CTA takes two compute chunks of the same head (c and c + 1, both that head's; the chunks of a head
// pair up from its first, and a lone last one runs with an empty second half): 128 gathered keys, laid out as the
// tile kernel's KV tile, consumer warpgroup w owning chunk c + w's 64. The CTA walks the merged list of query steps
// of both chunks (the ascending union of their query tiles, two 64-row steps a tile) once, every step's Q, dO, LSE,
// D and positions loaded once for both warpgroups, exactly as the tile kernel walks a tile's chunks; its consumers
// are the tile kernel's (dQ = dS K over the 128 keys through the shared dS^T, at d = 128 warpgroup w taking head
// dims 64w.., added by the writer warp with the tensor-copy engine's reduction) with variant 4's element mask: a key
// listed for the step's query tile (its own cursor, in the producer) and at or before the row. A key of one chunk
// not listed for a tile of the other's list is masked there, so every element the reference keeps is computed once.
// Long walks are cut into parts as in variant 4, at query tiles (a tile in both lists on one side of every cut);
// dK, dV are added by vector reductions at the end.

// Registers: variant 4's 40 / 232, no spill at d = 64 or 128 (ptxas -v) with the two gathers' batches not unrolled
// (unrolled, the producer spilled 152 bytes at d = 128), four-register key cursors (the loaders keep two), the merged
// walk made after the gathers, and the consumers' key positions in shared memory (in registers: 32 bytes spilled).
// The parts count both chunks' steps, not the merged walk's: counting its tiles first (one more barrier) made ptxas
// spill 52 bytes at d = 128, and with lists that overlap the parts are shorter than variant 4's rule asks.
#define BP_PROD_REGS 40
#define BP_CONS_REGS 232

typedef struct {
  int64_t r0;
  int64_t qmin[2];     // the least position of rows 32w.. of the step
  int nv, pad;
  uint32_t listed[4];  // bit k of word x: key slot 32x + k is listed for the step's query tile (chunk c: slots 0..63)
} bp_info;

template <int D>
using bp_smem = bs_smem<D, bp_info>;

// The merged walk of a pair: the ascending union of chunk c's query tiles q[ia..ea) and chunk c + 1's q[ib..eb) (its
// list follows c's in hc_q_idx; each ascending, unique); va, vb: the lists' next tiles (INT_MAX past the end), the
// step's tile the least of them.
typedef struct {
  const int32_t *q;
  int32_t ia, ea, ib, eb, va, vb;
} bp_walk;

// The part's walk from its cuts (shared memory: start in chunk c's list, in c + 1's; end in c's, in c + 1's).
__device__ __forceinline__ bp_walk bp_walk_of(const int32_t *qa, int32_t na, const int32_t *cut) {
  bp_walk w;
  w.q = qa, w.ia = cut[0], w.ib = na + cut[1], w.ea = cut[2], w.eb = na + cut[3];
  w.va = w.ia < w.ea ? qa[w.ia] : INT_MAX, w.vb = w.ib < w.eb ? qa[w.ib] : INT_MAX;
  return w;
}

__device__ __forceinline__ int32_t bp_walk_tile(const bp_walk &w) { return min(w.va, w.vb); }

__device__ __forceinline__ void bp_walk_next(bp_walk &w) {
  int32_t q = min(w.va, w.vb);
  if (w.va == q) w.va = ++w.ia < w.ea ? w.q[w.ia] : INT_MAX;
  if (w.vb == q) w.vb = ++w.ib < w.eb ? w.q[w.ib] : INT_MAX;
}

// Cut p of `parts` of a pair's walk, as the places in a[0..na) and b[0..nb) (ascending, each unique) of the first
// tile at or after the value v at place K p / parts of the two lists merged with their duplicates (K = na + nb): the
// tiles below v in each list. A tile in both lists is on one side of every cut, so the parts' walks partition the
// union. One thread; a binary search for the count of a's tiles among the first k of the merge (a's first on ties).
__device__ __forceinline__ void bp_cut(const int32_t *a, int32_t na, const int32_t *b, int32_t nb, int64_t p, int64_t parts,
                                       int32_t *ca, int32_t *cb) {
  if (p <= 0 || p >= parts) {
    *ca = p <= 0 ? 0 : na, *cb = p <= 0 ? 0 : nb;
    return;
  }
  int32_t k = (int32_t)(((int64_t)na + nb) * p / parts), lo = max(0, k - nb), hi = min(k, na);
  while (lo < hi) {  // the first i with a[i] > b[k - i - 1]
    int32_t i = (lo + hi) / 2;
    if (b[k - i - 1] >= a[i]) lo = i + 1;
    else hi = i;
  }
  int32_t i = lo, j = k - lo;
  int32_t v = min(i < na ? a[i] : INT_MAX, j < nb ? b[j] : INT_MAX);
  *ca = i - (i > 0 && a[i - 1] == v), *cb = j - (j > 0 && b[j - 1] == v);
}

// The place of compute chunk c among its head's chunks (a head's chunks are consecutive): the chunks of head h just
// before it, counted 32 at a time by a warp's ballot.
__device__ __forceinline__ int bp_place(const bwd_args &a, int c, int h, int lane) {
  int run = 0;
  for (;;) {
    int x = c - 1 - run - lane;
    unsigned same = __ballot_sync(0xffffffffu, x >= 0 && a.bc.hc_head[x] == h);
    if (same != 0xffffffffu) return run + __ffs(~same) - 1;
    run += 32;
  }
}

template <int D>
__device__ __forceinline__ void bp_produce(const bwd_args &a, const bs_maps &mp, const bp_smem<D> &sm, int c, bool pair, int h,
                                           int kvh, const int32_t *qa, int32_t na_q, const int32_t *cut, int steps, int pt) {
  const int fa = a.bc.hc_first[c], na = a.bc.hc_n[c];
  const int fb = pair ? a.bc.hc_first[c + 1] : 0, nb = pair ? a.bc.hc_n[c + 1] : 0;
  bb_gather_kv<D, BW_KEYS, 1>(a, sm.k, sm.v, fa, na, kvh, 0, pt);           // rows 0..63: chunk c
  bb_gather_kv<D, BW_KEYS, 1>(a, sm.k, sm.v, fb, nb, kvh, BB_WS_KEYS, pt);  // rows 64..127: chunk c + 1 (zeros if lone)
  sa_mbar_arrive_cp_async(sm.kv_full);
  bp_walk w = bp_walk_of(qa, na_q, cut);  // after the gathers: the producer's few registers
  // Loader pt keeps the cursors of key slot pt of each chunk.
  const int32_t qt0 = bp_walk_tile(w);
  bb_cursor ka = bb_cursor_at(a, fa + pt, pt < na, qt0), kb = bb_cursor_at(a, fb + pt, pt < nb, qt0);
  const int lane = pt & 31, warp = pt >> 5;
  for (int i = 0; i < steps; i++) {
    int st = i % BS_STAGES;
    const int32_t qt = bp_walk_tile(w);
    int64_t r0 = (int64_t)qt * TILE + (i & 1) * BW_QB, left = a.n_q - r0;
    int nv = left < 0 ? 0 : left > BW_QB ? BW_QB : (int)left;
    int64_t qmin = pt < nv ? a.qpos[r0 + pt] : INT64_MAX;
    if (i & 1) bp_walk_next(w);  // the next tile's loads run under this step (the walks start at a tile's first half)
    uint32_t la = __ballot_sync(0xffffffffu, bb_cursor_lists(a, ka, qt));
    uint32_t lb = __ballot_sync(0xffffffffu, bb_cursor_lists(a, kb, qt));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) qmin = min(qmin, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)qmin, o));
    sa_mbar_wait(&sm.empty[st], (uint32_t)(((i / BS_STAGES) & 1) ^ 1));
    if (lane == 0)  // published by the arrivals below
      sm.info[st].listed[warp] = la, sm.info[st].listed[2 + warp] = lb, sm.info[st].qmin[warp] = qmin;
    if (pt == 0) {
      sm.info[st].r0 = r0, sm.info[st].nv = nv;
      bs_load_qdo<D>(mp, sm, st, h, r0);
    } else if (pt == 32) {
      sa_mbar_arrive(&sm.full[st]);  // warp 1's words
    }
    if (pt < nv) bs_load_row(a, sm, st, h, r0, pt);
    sa_mbar_arrive_cp_async(&sm.full[st]);
  }
  sa_cp_async_wait<0>();
}

// Producer warp 2: per step, the four boxes of the consumers' dQ added to rows r0.. of head h (bs_reduce_dq), the
// rows from the writer's own copy of the merged walk.
template <int D>
__device__ __forceinline__ void bp_write_dq(const bs_maps &mp, const bp_smem<D> &sm, int h, const int32_t *qa, int32_t na_q,
                                            const int32_t *cut, int steps, int lane) {
  bp_walk w = bp_walk_of(qa, na_q, cut);
  for (int i = 0; i < steps; i++) {
    const int64_t r0 = (int64_t)bp_walk_tile(w) * TILE + (i & 1) * BW_QB;
    if (i & 1) bp_walk_next(w);
    sa_mbar_wait(sm.dq_full, (uint32_t)(i & 1));
    if (lane == 0) {
      bs_reduce_dq<D>(mp, sm.dq, h, r0);
      sa_mbar_arrive(sm.dq_empty);
    }
    __syncwarp();
  }
  if (lane == 0) sa_bulk_wait<0>();  // the additions are done before the CTA's shared memory goes
}

// Consumer warpgroup wg (0 or 1): chunk c + wg's 64 keys (rows 64 wg.. of the 128-key tile) over every step of the walk.
template <int D>
__device__ __forceinline__ void bp_consume(const bwd_args &a, const bp_smem<D> &sm, int64_t *s_kpos, int c, bool pair, int kvh,
                                           int steps, int wg, int lw, int lane) {
  int g = lane >> 2, t = lane & 3;
  const bool mine = wg == 0 || pair;  // warpgroup 1 of a lone chunk has no keys (its products are all masked)
  int kr[2] = {wg * 64 + lw * 16 + g, wg * 64 + lw * 16 + g + 8};  // rows of the tile; the chunk's slots kr - 64 wg
  {
    const int n_valid = mine ? a.bc.hc_n[c + wg] : 0;
    const int32_t *idx = a.tt.bar_key + (mine ? a.bc.hc_first[c + wg] : 0);
#pragma unroll
    for (int i = 0; i < 2; i++)  // the keys' positions wait in shared memory, read where used (in registers: spills)
      if (t == 0) s_kpos[kr[i]] = kr[i] - wg * 64 < n_valid ? a.kpos[idx[kr[i] - wg * 64]] : -1;
    __syncwarp();
  }
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;
  const uint64_t dka = sa_desc_sw128(sm.k + wg * 64 * 128, 16, 1024), dva = sa_desc_sw128(sm.v + wg * 64 * 128, 16, 1024);
  // dQ's operands as in the tile kernel: at d = 128, dS^T over all 128 keys and K's head-dim block wg; at d = 64, the
  // warpgroup's own 64 keys of dS^T and of K.
  const int DQ_KEYS = D == 128 ? BW_KEYS : 64;
  const uint64_t dkq = D == 128 ? sa_desc_sw128(sm.k + wg * BW_KEYS * 128, BW_KEYS * 128, 1024)
                                : sa_desc_sw128(sm.k + wg * 64 * 128, BW_KEYS * 128, 1024);
  sa_mbar_wait(sm.kv_full, 0);
  sa_fence_proxy_async();  // K and V came by cp.async (generic proxy); the products read them through the async one

  for (int i = 0; i < steps; i++) {
    int st = i % BS_STAGES;
    sa_mbar_wait(&sm.full[st], (uint32_t)((i / BS_STAGES) & 1));
    const int nv = sm.info[st].nv;
    const uint32_t listed = sm.info[st].listed[kr[0] >> 5];  // both keys' word
    const unsigned char *qb = sm.q0 + st * bp_smem<D>::CHUNK_BYTES, *dob = sm.do0 + st * bp_smem<D>::CHUNK_BYTES;
    const int64_t *qp = sm.qpos + st * BW_QB;
    const float *lb = sm.lse + st * BW_QB, *db = sm.drow + st * BW_QB;
    unsigned char *ds = sm.ds0 + (i & 1) * bp_smem<D>::DS_BYTES;

    float s[BW_QB / 8][4], dp[BW_QB / 8][4];
    bw_st_dpt<D, BW_KEYS>(s, dp, dka, dva, qb, dob);
    const int64_t kp[2] = {s_kpos[kr[0]], s_kpos[kr[1]]};
    const uint32_t keep = bb_keep(listed, kr, kp, nv, min(sm.info[st].qmin[0], sm.info[st].qmin[1]), qp, t);
    const bool all = __all_sync(0xffffffffu, keep == 0xffffffffu);
    sa_wgmma_wait<1>();
    bw_fence_regs<BW_QB / 2>(&s[0][0]);
    bb_pt(s, lb, keep, all, t, a.scale_log2);
    uint32_t pa[4][4], da[4][4];
    bw_pack(pa, s);
    bw_fence_regs<D / 2>(&dv[0][0]);
    sa_wgmma_fence();
    bw_mma_rs<D>(&dv[0][0], pa, sa_desc_sw128(dob, BW_QB * 128, 1024));  // dV += P^T dO, under dS^T
    sa_wgmma_commit();
    sa_wgmma_wait<1>();  // dP^T done
    bw_fence_regs<BW_QB / 2>(&dp[0][0]);
    bb_dst(dp, s, db, keep, all, t);
    bw_pack(da, dp);
    bs_put_dst(ds, da, kr, t);
    sa_fence_proxy_async();  // dS^T, written by plain stores, is read next by the tensor cores
    if (D == 128) sa_named_sync<BS_DS_BAR>(256);
    else if (wg == 0) sa_named_sync<BS_DS_BAR + 1>(128);
    else sa_named_sync<BS_DS_BAR + 2>(128);
    if (D == 128) {  // dV done before dQ: P^T's registers free for dQ's accumulators (as in variant 4)
      sa_wgmma_wait<0>();
      bw_fence_regs<D / 2>(&dv[0][0]);
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) sa_reg_fence_u32(pa[kk][r]);
    }

    // dQ = dS K (A = dS^T, M-major; B = K, N-major), then dK += dS^T Q, which runs while dQ goes to shared memory.
    float dq[BW_QB / 8][4];
#pragma unroll
    for (int n = 0; n < BW_QB / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) dq[n][e] = 0.f;
    bw_fence_regs<BW_QB / 2>(&dq[0][0]);
    bw_fence_regs<D / 2>(&dk[0][0]);
    sa_wgmma_fence();
    const uint64_t dds = sa_desc_sw128(ds + (D == 128 ? 0 : wg * 64 * 128), BW_KEYS * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < DQ_KEYS / 16; kk++) sa_wgmma_m64n64_ss_tt(&dq[0][0], dds + bw_nmajor(kk), dkq + bw_nmajor(kk));
    sa_wgmma_commit();
    bw_mma_rs<D>(&dk[0][0], da, sa_desc_sw128(qb, BW_QB * 128, 1024));  // dK += dS^T Q
    sa_wgmma_commit();
    sa_wgmma_wait<1>();  // dQ done; dK may still run
    bw_fence_regs<BW_QB / 2>(&dq[0][0]);
    sa_mbar_wait(sm.dq_empty, (uint32_t)((i & 1) ^ 1));
    bs_put_dq((unsigned char *)sm.dq + wg * 2 * bp_smem<D>::DQ_BOX_BYTES, dq, lw * 16 + g, t, a.scale);
    sa_fence_proxy_async();  // plain stores, read next by the tensor-copy engine
    sa_mbar_arrive(sm.dq_full);
    bw_step_end<D>(dv, dk, pa, da);
    sa_mbar_release_warp(&sm.empty[st], lane);  // Q, dO, LSE, D and the positions of stage st are free
  }
  const int n_valid = mine ? a.bc.hc_n[c + wg] : 0;
  const int32_t *idx = a.tt.bar_key + (mine ? a.bc.hc_first[c + wg] : 0);
  for (int ri = 0; ri < 2; ri++)
    if (kr[ri] - wg * 64 < n_valid) bb_add_dkdv<D>(a, dk, dv, ri, idx[kr[ri] - wg * 64], kvh, t);
}

// CTA x walks part x % splits of the pair that compute chunk x / splits starts (a chunk at an odd place among its
// head's returns at once: its predecessor's CTA walks it), in parts as variant 4 cuts a walk, counting both chunks'
// steps (an upper bound of the merged walk's), cut at query tiles (bp_cut). Before the roles split, the CTA finds its
// place (warps 0 and 1), its part's cuts (lanes 0 of warps 0 and 1: the part's start and end), and the tiles both
// lists hold in the part (every thread, a binary search each), so that every role knows the part's step count.
template <int D>
__global__ void __launch_bounds__(BS_THREADS, 1) sa_bwd_ws_pair_kernel(const __grid_constant__ bwd_args a,
                                                                       const __grid_constant__ bs_maps mp, int splits,
                                                                       int n_sms, int cap) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bp_smem<D> sm = bs_smem_of<D, bp_info>(smem_raw);
  __shared__ int32_t s_cut[4];  // the part's start in a, in b; its end in a, in b
  __shared__ int s_place, s_dup;
  __shared__ int64_t s_kpos[BW_KEYS];  // the consumers' key positions
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  const int c = (int)(blockIdx.x / splits), part = (int)(blockIdx.x % splits);
  const int h = a.bc.hc_head[c], kvh = h / (a.heads / a.kv_heads);
  const bool pair = c + 1 < a.bc.n_hchunks && a.bc.hc_head[c + 1] == h;  // (when c is at an even place)
  const int64_t u0 = a.bc.hc_q_cnt[c], u1 = a.bc.hc_q_cnt[c + 1], u2 = pair ? a.bc.hc_q_cnt[c + 2] : u1;
  const int32_t na = (int32_t)(u1 - u0), nb = (int32_t)(u2 - u1);
  const int32_t *qa = a.bc.hc_q_idx + u0, *qb = a.bc.hc_q_idx + u1;
  const int64_t total = 2 * ((int64_t)na + nb);
  const int64_t parts = bw_bar_parts(a, total, splits, n_sms, cap);
  if (total == 0 || part >= parts) return;
  if (warp < 2) {
    int place = bp_place(a, c, h, lane);
    if (!(place & 1) && lane == 0) bp_cut(qa, na, qb, nb, part + warp, parts, &s_cut[2 * warp], &s_cut[2 * warp + 1]);
    if (tid == 0) s_place = place;
  }
  if (tid == 0) {
    s_dup = 0;
    sa_mbar_init(sm.kv_full, BS_LOADERS);
    for (int i = 0; i < BS_STAGES; i++) {
      sa_mbar_init(&sm.full[i], 1 + 1 + BS_LOADERS);  // the elected thread's (Q's, dO's bytes), warp 1's words, each loader's
      sa_mbar_init(&sm.empty[i], 8 * SA_RELEASE_LANES);  // each consumer warp's release
    }
    sa_mbar_init(sm.dq_full, 256);  // every consumer thread
    sa_mbar_init(sm.dq_empty, 1);   // the writer
  }
  __syncthreads();
  if (s_place & 1) return;
  const int32_t ia0 = s_cut[0], ib0 = s_cut[1], ia1 = s_cut[2], ib1 = s_cut[3];
  int dup = 0;
  for (int32_t x = ia0 + tid; x < ia1; x += BS_THREADS) {
    int32_t v = qa[x], lo = ib0, hi = ib1;
    while (lo < hi) {
      int32_t mid = (lo + hi) / 2;
      if (qb[mid] < v) lo = mid + 1;
      else hi = mid;
    }
    dup += lo < ib1 && qb[lo] == v;
  }
  if (dup) atomicAdd(&s_dup, dup);
  __syncthreads();
  const int steps = 2 * ((ia1 - ia0) + (ib1 - ib0) - s_dup);  // at most 2 n_qtiles
  if (steps == 0) return;  // a cut between the two copies of one place (parts of one tile each)
  if (wg == 0) {
    sa_setmaxnreg_dec<BP_PROD_REGS>();
    if (tid < BS_LOADERS) bp_produce<D>(a, mp, sm, c, pair, h, kvh, qa, na, s_cut, steps, tid);
    else if (warp == 2) bp_write_dq<D>(mp, sm, h, qa, na, s_cut, steps, lane);
  } else {
    sa_setmaxnreg_inc<BP_CONS_REGS>();
    bp_consume<D>(a, sm, s_kpos, c, pair, kvh, steps, wg - 1, warp & 3, lane);
  }
}

// ---- host ---------------------------------------------------------------------------------------------

static PFN_cuTensorMapEncodeTiled_v12000 bs_encode;
int sa_bwd_ws_cap = 0;

// A row-major [rows, cols] tensor of bf16 (elem 2: boxes of 64 columns) or fp32 (elem 4: 32 columns),
// each box 128 bytes wide.
static int bs_map(CUtensorMap *m, const void *base, int64_t rows, int64_t cols, int box_rows, int elem, sr_error *e) {
  cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)(rows > 0 ? rows : 1)}, stride[1] = {(cuuint64_t)cols * elem};
  cuuint32_t box[2] = {(cuuint32_t)(128 / elem), (cuuint32_t)box_rows}, estride[2] = {1, 1};
  CUresult r = bs_encode(m, elem == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base,
                         dim, stride, box, estride,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return sr_internal_error(e, 0, "cuTensorMapEncodeTiled (%lld x %lld): error %d", (long long)rows, (long long)cols, (int)r);
  return SR_OK;
}

template <int D>
static int bs_launch(const bwd_args &a, int64_t kv_cells, cudaStream_t st, sr_error *e) {
  if (!bs_encode) {
    cudaDriverEntryPointQueryResult q;
    void *fn = NULL;
    SA_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !fn) return sr_internal_error(e, 0, "cuTensorMapEncodeTiled: not in the driver");
    bs_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
  }
  bs_maps mp;
  memset(&mp, 0, sizeof mp);
  int rc;
  if ((rc = bs_map(&mp.k, a.k, a.n_k, (int64_t)a.kv_heads * D, BW_KEYS, 2, e)) ||
      (rc = bs_map(&mp.v, a.v, a.n_k, (int64_t)a.kv_heads * D, BW_KEYS, 2, e)) ||
      (rc = bs_map(&mp.q, a.q, a.n_q, (int64_t)a.heads * D, BW_QB, 2, e)) ||
      (rc = bs_map(&mp.dout, a.dout, a.n_q, (int64_t)a.heads * D, BW_QB, 2, e)) ||
      (rc = bs_map(&mp.dq, a.dq, a.n_q, (int64_t)a.heads * D, BW_QB, 4, e)))
    return rc;
  size_t smem = bs_smem<D>::bytes();
  SA_CUDA(cudaFuncSetAttribute(sa_bwd_ws_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  // At most 4 parts a cell (a vertical line's tile against the VS-like mask at 128K is 4x an SM's share at
  // most); sa_bwd_ws_cap > 0 sets the part size (tests: up to 64 parts).
  static int n_sms;
  if (!n_sms) SA_CUDA(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, 0));
  int group = a.heads / a.kv_heads;
  int64_t max_chunks = 2 * (int64_t)group * a.tt.n_qtiles, cap = sa_bwd_ws_cap;
  int splits = cap > 0 ? (int)min((int64_t)64, (max_chunks + cap - 1) / cap) : 4;
  if (splits < 1 || kv_cells * splits > INT32_MAX) splits = 1, cap = 0;
  sa_bwd_ws_kernel<D><<<(unsigned)(kv_cells * splits), BS_THREADS, smem, st>>>(a, mp, splits, n_sms, cap);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

// The bars' launch of variant 4 (PAIRS false: sa_bwd_ws_bars_kernel, a CTA a compute chunk and part of its walk) or 5
// (true: sa_bwd_ws_pair_kernel, a CTA a pair of chunks and part of their merged walk; a chunk at an odd place returns).
// At most 16 parts a walk (the mma.sync split walk's bound); sa_bwd_bar_cap > 0 sets the part size (tests; a chunk
// counts up to two steps a query tile, a pair up to four).
template <int D, bool PAIRS>
static int bars_ws_launch(const bwd_args &a, cudaStream_t st, sr_error *e) {
  bs_maps mp;
  memset(&mp, 0, sizeof mp);
  int rc;
  if ((rc = bs_map(&mp.q, a.q, a.n_q, (int64_t)a.heads * D, BW_QB, 2, e)) ||
      (rc = bs_map(&mp.dout, a.dout, a.n_q, (int64_t)a.heads * D, BW_QB, 2, e)) ||
      (rc = bs_map(&mp.dq, a.dq, a.n_q, (int64_t)a.heads * D, BW_QB, 4, e)))
    return rc;
  void (*kernel)(bwd_args, bs_maps, int, int, int) = PAIRS ? sa_bwd_ws_pair_kernel<D> : sa_bwd_ws_bars_kernel<D>;
  size_t smem = PAIRS ? bp_smem<D>::bytes() : bb_ws_smem<D>::bytes();
  SA_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  static int n_sms;
  if (!n_sms) SA_CUDA(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, 0));
  int cap = sa_bwd_bar_cap, splits = 16;
  if (cap > 0) splits = (int)min((int64_t)64, ((PAIRS ? 4 : 2) * (int64_t)a.tt.n_qtiles + cap - 1) / cap);
  if ((int64_t)a.bc.n_hchunks * splits > INT32_MAX) splits = 1, cap = 0;
  kernel<<<(unsigned)((int64_t)a.bc.n_hchunks * splits), BS_THREADS, smem, st>>>(a, mp, splits, n_sms, cap);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int sa_bwd_ws_all(const bwd_args *a, int head_dim, int64_t kv_cells, int pairs, cudaStream_t st, sr_error *e) {
  if (kv_cells && a->n_k > 0 && a->n_q > 0) {
    int rc = head_dim == 64 ? bs_launch<64>(*a, kv_cells, st, e) : bs_launch<128>(*a, kv_cells, st, e);
    if (rc) return rc;
  }
  if (!a->bc.n_hchunks || a->n_k <= 0 || a->n_q <= 0) return SR_OK;
  if (pairs) return head_dim == 64 ? bars_ws_launch<64, true>(*a, st, e) : bars_ws_launch<128, true>(*a, st, e);
  return head_dim == 64 ? bars_ws_launch<64, false>(*a, st, e) : bars_ws_launch<128, false>(*a, st, e);
}

int sa_bwd_ws_tiles(const bwd_args *a, int head_dim, int64_t q_cells, int64_t kv_cells, cudaStream_t st, sr_error *e) {
  if (kv_cells && a->n_k > 0 && a->n_q > 0) {
    int rc = head_dim == 64 ? bs_launch<64>(*a, kv_cells, st, e) : bs_launch<128>(*a, kv_cells, st, e);
    if (rc) return rc;
  }
  if (a->ti.n_bars) return sa_bwd_wg_dq_bars(a, head_dim, q_cells, st, e);
  return SR_OK;
}

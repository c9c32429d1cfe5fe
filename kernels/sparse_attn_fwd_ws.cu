// sparse_attn_fwd_ws.cu — the Hopper forward of one ring step (sm_90a), warp-specialized in the manner of
// FlashAttention-3 (Shah et al. 2024): one CTA of three warpgroups per (head, 128-row query tile). The
// producer warpgroup copies Q once and then the cell's keys, 128 a chunk, through a two-stage ring of
// shared-memory buffers, signalling each stage on an mbarrier; the two consumer warpgroups (64 query rows
// each) never wait on a CTA-wide barrier, so they drift apart and one's softmax runs under the other's
// products. Inside a consumer, chunk c's S = Q K^T is issued together with chunk c-1's O += P V, and the
// softmax of S_c runs while P V is still on the tensor cores (intra-warpgroup overlap). Registers move
// from the producer (56) to the consumers (224) with setmaxnreg.
//
// A chunk is two 64-key halves, each one of: half of a tile entry (FULL or PARTIAL), a run (the forward
// form; two runs a chunk), or 64 gathered bar keys (128 bars a chunk). The producer copies them all with
// 16-byte cp.async into the 128-byte swizzle of kernels/sa_wgmma.cuh (a gather needs no tensor map), and
// the keys' global positions with them; the consumers evaluate each half's keep bits as the other
// kernels do (kernels/sa_cuda.cuh: sa_keep_bits), so the same elements are computed as by sa_ref_fwd.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/sa_fwd.cuh"
#include "kernels/sa_gpu.h"
#include "kernels/sa_keep_words.h"
#include "kernels/sa_pipe.cuh"
#include <string.h>

#define WS_BN 128       // keys a chunk: two halves of SA_BN
#define WS_STAGES 2     // K/V buffers in flight (Q 32 KB + 2 x (K 32 KB + V 32 KB) at d = 128)
#define WS_THREADS 384  // producer warpgroup + two consumer warpgroups
// The registers a CTA holds are fixed at launch (168 a thread under the cap of 384 threads): the producer
// gives back 128 x (168 - 56), exactly what the consumers take, 256 x (224 - 168).
#define WS_PROD_REGS 56
#define WS_CONS_REGS 224

// ---- the chunk walk ---------------------------------------------------------------------------------

// One cell's chunks: its tile entries (one chunk each), then its runs (two a chunk), then its bars
// (128 a chunk).
typedef struct {
  int64_t t0, r0, b0, b1;
  int n_runs, run_chunk0, bar_chunk0, n_chunks;
} ws_walk;

__device__ __forceinline__ ws_walk ws_walk_of(const tile_index *ti, int h, int qt, int src) {
  int hi = ti->heads == 1 ? 0 : h;
  int64_t off = ((int64_t)hi * ti->n_qtiles + qt) * (ti->world + 1) + src;
  ws_walk w;
  w.t0 = ti->tile_cnt[off];
  w.run_chunk0 = (int)(ti->tile_cnt[off + 1] - w.t0);
  w.r0 = ti->run_cnt ? ti->run_cnt[off] : 0;
  w.n_runs = ti->run_cnt ? (int)(ti->run_cnt[off + 1] - w.r0) : 0;
  w.bar_chunk0 = w.run_chunk0 + (w.n_runs + 1) / 2;
  w.b0 = ti->bar_cnt[off];
  w.b1 = ti->bar_cnt[off + 1];
  w.n_chunks = w.bar_chunk0 + (int)((w.b1 - w.b0 + WS_BN - 1) / WS_BN);
  return w;
}

// A run's kind in the windowed form (FAST): a PARTIAL half whose keys sit at consecutive positions by construction
// (tiles_runs_build), so its keep words need no check of the positions. The info word's two bits hold it.
#define WS_HALF_RUN 3

// The keys of half hf of chunk c (sa_row_of gives key r); an absent half (the odd run out, the last
// bars) has n_valid = 0, so every one of its elements is masked. FAST: runs are of kind WS_HALF_RUN.
template <bool FAST>
__device__ __forceinline__ sa_chunk ws_half(const tile_index *ti, const ws_walk &w, int c, int hf, int64_t n_k) {
  sa_chunk k;
  k.idx = NULL;
  k.base = 0;
  int64_t len = 0;
  if (c < w.run_chunk0) {
    int64_t e = w.t0 + c;
    k.kind = ti->tile_kind[e] == TILE_FULL ? SA_CHUNK_FULL : SA_CHUNK_PARTIAL;
    k.base = (int64_t)ti->tile_idx[e] * TILE + hf * SA_BN;
    len = SA_BN;
  } else if (c < w.bar_chunk0) {
    int r = 2 * (c - w.run_chunk0) + hf;
    k.kind = FAST ? WS_HALF_RUN : SA_CHUNK_PARTIAL;
    if (r < w.n_runs) k.base = ti->run_key[w.r0 + r], len = ti->run_len[w.r0 + r];
  } else {
    int64_t b = w.b0 + (int64_t)(c - w.bar_chunk0) * WS_BN + hf * SA_BN, left = w.b1 - b;
    k.kind = SA_CHUNK_BAR;
    k.idx = ti->bar_idx + (left > 0 ? b : 0);
    k.n_valid = left <= 0 ? 0 : left > SA_BN ? SA_BN : (int)left;
    return k;
  }
  int64_t left = n_k - k.base;
  k.n_valid = left < 0 ? 0 : left > len ? (int)len : (int)left;
  return k;
}

// A half's kind and key count packed in 9 bits (kind 2, n_valid 7); the chunk's two halves in one int.
__device__ __forceinline__ int ws_info(const sa_chunk &h0, const sa_chunk &h1) {
  return (h0.kind | h0.n_valid << 2) | (h1.kind | h1.n_valid << 2) << 16;
}

// ---- shared memory --------------------------------------------------------------------------------

template <int D>
struct ws_smem {
  unsigned char *q, *k0, *v0;  // stage i at k0 + i * TILE_BYTES (arithmetic, not an array: no local memory)
  int64_t *kpos;  // [WS_STAGES][WS_BN]
  uint64_t *q_full, *k_full, *v_full, *k_empty, *v_empty;  // k_full etc. [WS_STAGES]
  int *info;      // [WS_STAGES]
  static constexpr int TILE_BYTES = WS_BN * D * 2;
  static constexpr size_t bytes() {
    return 1024 + (size_t)(1 + 2 * WS_STAGES) * TILE_BYTES + WS_STAGES * WS_BN * 8 + (1 + 4 * WS_STAGES) * 8 + WS_STAGES * 4;
  }
};

template <int D>
__device__ __forceinline__ ws_smem<D> ws_smem_of(unsigned char *raw) {
  ws_smem<D> s;
  // Swizzled tiles need 1024-byte alignment: the launch adds that much slack.
  unsigned char *p = raw + ((1024 - (sa_smem_addr(raw) & 1023)) & 1023);
  s.q = p, p += ws_smem<D>::TILE_BYTES;
  s.k0 = p, p += WS_STAGES * ws_smem<D>::TILE_BYTES;
  s.v0 = p, p += WS_STAGES * ws_smem<D>::TILE_BYTES;
  s.kpos = (int64_t *)p, p += WS_STAGES * WS_BN * 8;
  uint64_t *b = (uint64_t *)p;
  s.q_full = b, s.k_full = b + 1, s.v_full = b + 1 + WS_STAGES, s.k_empty = b + 1 + 2 * WS_STAGES,
  s.v_empty = b + 1 + 3 * WS_STAGES;
  s.info = (int *)(b + 1 + 4 * WS_STAGES);
  return s;
}

// ---- producer -------------------------------------------------------------------------------------
// Consecutive keys (tile halves, runs) come by the tensor-copy engine, one elected thread issuing a box
// of 64 keys x 64 dims per copy (the keys' positions by 8-byte cp.async); gathered bars and absent halves
// (zero-filled) come by 16-byte cp.async from all 128 producer threads. Both complete on the stage's
// mbarrier: the elected thread's arrival announces the boxes' bytes, and every thread arrives once its
// cp.async copies have landed. Keys past a half's n_valid hold whatever the copy brought (zeros past the
// shard's end, the keys after a short run): the consumers mask them by n_valid.

// The tensor maps of one call (kernels/sa_pipe.cuh, "bulk tensor copies"): Q [n_q, heads * d] in boxes of
// 128 rows x 64 dims, K and V [n_k, kv_heads * d] in boxes of 64 x 64 (128-byte swizzle, as the products
// read them).
typedef struct {
  CUtensorMap q, k, v;
} ws_maps;

__device__ __forceinline__ int ws_by_tma(const sa_chunk &h) { return h.idx == NULL && h.n_valid > 0; }

// Copy the rows of one half (64 keys) of a K or V chunk by cp.async: thread pt copies 16-byte segment
// pt % (D/8) of rows pt / (D/8) + j * (128 / (D/8)); absent keys are zero-filled. With kpos_s, the keys'
// positions go along (8-byte copies).
template <int D>
__device__ __forceinline__ void ws_copy_half(const __nv_bfloat16 *g, int64_t stride, const sa_chunk &ch, int hf,
                                             unsigned char *tile, const int64_t *kpos_g, int64_t *kpos_s, int pt) {
  const int segs = D / 8, rows_per = 128 / segs, J = SA_BN / rows_per;
  int sg = pt % segs;
  // The gathered keys first, then the copies: each cp.async is an asm statement with a memory clobber, so a
  // key loaded between two of them would wait for the global load alone, J loads in a row (Nsight Compute:
  // the producer's long-scoreboard stalls on the bars' key indices, VS-like 128K).
  int32_t key[J];  // source-local keys fit 32 bits on the wgmma paths (sa_fwd sends n_k >= 2^31 to variant 0)
#pragma unroll
  for (int j = 0; j < J; j++) key[j] = (int32_t)sa_row_of(ch.base, ch.idx, ch.n_valid, pt / segs + j * rows_per);
#pragma unroll
  for (int j = 0; j < J; j++) {
    int r = pt / segs + j * rows_per;
    sa_cp_async16(tile + sa_sw128_offset(hf * SA_BN + r, sg * 8, WS_BN), g + (key[j] < 0 ? 0 : (int64_t)key[j] * stride) + sg * 8,
                  key[j] < 0 ? 0 : 16);
    if (kpos_s && sg == 0 && key[j] >= 0) sa_cp_async8(kpos_s + hf * SA_BN + r, kpos_g + key[j]);
  }
}

// One chunk's K (with positions and the halves' kinds) or V into a stage, completing on `full`.
template <int D, bool IS_K>
__device__ __forceinline__ void ws_load(const fwd_args &a, const ws_maps &mp, const sa_chunk &h0, const sa_chunk &h1,
                                        unsigned char *tile, int64_t *kpos_s, int *info, uint64_t *full, int kvh, int pt) {
  int t0 = ws_by_tma(h0), t1 = ws_by_tma(h1);
  if (pt == 0) {
    if (IS_K) *info = ws_info(h0, h1);  // published by the release of the arrival below
    const uint32_t per = SA_BN * D * 2;
    sa_mbar_arrive_expect_tx(full, (t0 ? per : 0) + (t1 ? per : 0));
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      const sa_chunk &h = hf ? h1 : h0;
      if (!(hf ? t1 : t0)) continue;
#pragma unroll
      for (int cb = 0; cb < D / 64; cb++)
        sa_tma_load_2d(tile + cb * WS_BN * 128 + hf * SA_BN * 128, IS_K ? (const void *)&mp.k : (const void *)&mp.v,
                       kvh * D + cb * 64, (int)h.base, full);
    }
  }
  if (IS_K) {  // the positions of the boxes' keys: one 8-byte copy a key, by threads 0-63 (half 0), 64-127 (half 1)
    const sa_chunk &h = pt < SA_BN ? h0 : h1;
    int r = pt % SA_BN;
    if ((pt < SA_BN ? t0 : t1) && r < h.n_valid) sa_cp_async8(kpos_s + pt, a.kpos + h.base + r);
  }
  int64_t stride = (int64_t)a.kv_heads * D;
  const __nv_bfloat16 *g = (IS_K ? a.k : a.v) + kvh * D;
  if (!t0) ws_copy_half<D>(g, stride, h0, 0, tile, a.kpos, IS_K ? kpos_s : NULL, pt);
  if (!t1) ws_copy_half<D>(g, stride, h1, 1, tile, a.kpos, IS_K ? kpos_s : NULL, pt);
  sa_mbar_arrive_cp_async(full);
}

// The producer: Q, then K one chunk ahead of V (K_{c+1} needs only S_{c-1} done, V_c needs P_{c-2} V_{c-2}),
// so both stages of K are in flight while V waits for its product.
template <int D, bool FAST, bool NOPV>
__device__ __forceinline__ void ws_produce(const fwd_args &a, const ws_maps &mp, const ws_smem<D> &sm, const ws_walk &w,
                                           int h, int kvh, int64_t row0, int pt) {
  if (pt == 0) {
    sa_mbar_arrive_expect_tx(sm.q_full, SA_BM * D * 2);
#pragma unroll
    for (int cb = 0; cb < D / 64; cb++) sa_tma_load_2d(sm.q + cb * SA_BM * 128, &mp.q, h * D + cb * 64, (int)row0, sm.q_full);
  }
  const int TB = ws_smem<D>::TILE_BYTES;
  sa_chunk h0 = ws_half<FAST>(&a.ti, w, 0, 0, a.n_k), h1 = ws_half<FAST>(&a.ti, w, 0, 1, a.n_k);
  ws_load<D, true>(a, mp, h0, h1, sm.k0, sm.kpos, sm.info, sm.k_full, kvh, pt);
  for (int c = 0; c < w.n_chunks; c++) {
    sa_chunk n0 = h0, n1 = h1;
    if (c + 1 < w.n_chunks) {
      int st = (c + 1) % WS_STAGES;
      n0 = ws_half<FAST>(&a.ti, w, c + 1, 0, a.n_k), n1 = ws_half<FAST>(&a.ti, w, c + 1, 1, a.n_k);
      sa_mbar_wait(&sm.k_empty[st], (((c + 1) / WS_STAGES) & 1) ^ 1);
      ws_load<D, true>(a, mp, n0, n1, sm.k0 + st * TB, sm.kpos + st * WS_BN, sm.info + st, &sm.k_full[st], kvh, pt);
    }
    if (!NOPV) {  // NOPV: the pass for the row LSE and the block table only, no P V
      int st = c % WS_STAGES;
      sa_mbar_wait(&sm.v_empty[st], ((c / WS_STAGES) & 1) ^ 1);
      ws_load<D, false>(a, mp, h0, h1, sm.v0 + st * TB, NULL, NULL, &sm.v_full[st], kvh, pt);
    }
    h0 = n0, h1 = n1;
  }
  sa_cp_async_wait<0>();
}

// ---- consumer -------------------------------------------------------------------------------------

// Online softmax over a 128-key chunk of a 16-row tile (s[16][4] in accumulator layout; keep bits k0 for
// columns 0..63, k1 for 64..127 as sa_keep_bits gives them): as fwd_softmax_p in kernels/sa_fwd.cuh. BLK (64 or
// 128: the key block of AdaSpa's masses, sa_fwd_block_lse): the chunk's P summed per row and block into cs (this
// thread's terms in order; the row sums l take them as a whole), 0: l takes each P.
template <bool MASKED, int BLK>
__device__ __forceinline__ void ws_softmax(float (*s)[4], uint32_t k0, uint32_t k1, float scale_log2, float *m, float *l,
                                           float *alpha, float (*cs)[2]) {
  float cm[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < WS_BN / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      if (MASKED && !(((n < 8 ? k0 : k1) >> ((n & 7) * 4 + e)) & 1u)) s[n][e] = -INFINITY;
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
  if (BLK) cs[0][0] = cs[0][1] = cs[1][0] = cs[1][1] = 0.f;
#pragma unroll
  for (int n = 0; n < WS_BN / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float p = sa_exp2(fmaf(s[n][e], scale_log2, -mu[e >> 1]));
      s[n][e] = p;
      if (BLK == 128) cs[e >> 1][0] += p;
      else if (BLK == 64) cs[e >> 1][n >> 3] += p;
      else l[e >> 1] += p;
    }
  if (BLK) l[0] += cs[0][0] + cs[0][1], l[1] += cs[1][0] + cs[1][1];
}

// Keep bits of one half for this thread's rows (all ones when every element is kept). A causal half
// (bars; partial tiles of a causal-only head) whose last key lies at or before the warp's first query
// keeps everything present.
__device__ __forceinline__ uint32_t ws_half_keep(int info9, const head_mask *mask, int causal_partial, const int64_t *qp,
                                                 int64_t qmin, const int64_t *kp, int t, int lane) {
  int kind = info9 & 3, n_valid = info9 >> 2;
  if (kind == SA_CHUNK_FULL && n_valid == SA_BN) return 0xffffffffu;
  if (n_valid == SA_BN && (kind == SA_CHUNK_BAR || causal_partial)) {
    int64_t kmax = max(kp[lane], kp[lane + 32]);
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) kmax = max(kmax, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)kmax, x));
    if (kmax <= qmin) return 0xffffffffu;
  }
  uint32_t bits = sa_keep_bits<SA_BN / 8>(kind, mask, qp, kp, t, n_valid);
  if (n_valid < SA_BN) {  // columns past n_valid hold no key of this half (their positions are stale)
    uint32_t valid = 0;
#pragma unroll
    for (int n = 0; n < SA_BN / 8; n++) {
      int col = n * 8 + 2 * t;
      valid |= ((col < n_valid ? 0x5u : 0u) | (col + 1 < n_valid ? 0xau : 0u)) << (n * 4);
    }
    bits &= valid;
  }
  return bits;
}

// ---- keep bits in the windowed form (FAST) ------------------------------------------------------------
// A VS head's partial half of consecutive keys keeps, in row q, the 64-bit word sa_vs_row64 gives: the
// vertical word of the keys | the slash window ending at q - k0 reversed, causal, cut to the half's keys.
// The form above has every thread build both its rows' words for each half, so a quad builds each word four
// times, and first checks each of its 32 columns' positions (about 1,100 instructions a chunk a thread in the
// sm_90a image, more than the softmax). Here lane l builds one word, row l % 16 of the warp's 16 against half
// l / 16, and each thread takes its rows' words by four shuffles: about a fifth of that.

// The head's mask as the windowed form reads it, in registers (the mask lives in global memory, where every
// asm statement with a memory clobber would make the compiler load its fields again), and the position of
// the row this lane builds words for. Positions in 32 bits (kernels/sa_keep_words.h).
typedef struct {
  const uint32_t *vbits, *sbits;
  int32_t n_tokens, qrow;
  int on;  // a VS head of at most SA_KEEP_WORDS_MAX tokens
} ws_vs;

// Does half info9 take its words from the bit sets? FULL and absent halves trivially, runs always (their keys
// sit at consecutive positions), a PARTIAL tile half when its keys' positions run on from the first (each lane
// checks two); bars never. Warp-uniform: every lane takes the same path to the vote.
__device__ __forceinline__ int ws_half_windowed(int info9, const int64_t *kp, int lane) {
  int kind = info9 & 3, n_valid = info9 >> 2;
  if (kind == SA_CHUNK_FULL || kind == WS_HALF_RUN || n_valid == 0) return 1;
  if (kind != SA_CHUNK_PARTIAL) return 0;
  int64_t p0 = kp[0];
  int ok = p0 >= 0 && (lane >= n_valid || kp[lane] == p0 + lane) && (lane + 32 >= n_valid || kp[lane + 32] == p0 + lane + 32);
  return __all_sync(0xffffffffu, ok);
}

// Keep bits k0 (columns 0..63), k1 (64..127) of a chunk whose halves are windowed, for a VS head.
__device__ __forceinline__ void ws_vs_keep(int info, const ws_vs &vs, const int64_t *kp, int g, int t, int lane,
                                           uint32_t *k0, uint32_t *k1) {
  int hf = lane >> 4, ih = hf ? info >> 16 : info & 0x1ff, n_valid = ih >> 2;
  uint64_t w = n_valid >= SA_BN ? ~0ull : (1ull << n_valid) - 1;  // FULL: every present key
  if ((ih & 3) != SA_CHUNK_FULL && n_valid > 0) {
    int32_t p0 = (int32_t)kp[hf * SA_BN];  // rows past the tile's end sit at -2: nothing kept
    w &= sa_vs_row64_32(vs.sbits, vs.n_tokens, sa_bits64_32(vs.vbits, vs.n_tokens, p0), vs.qrow, p0);
  }
  uint64_t a0 = __shfl_sync(0xffffffffu, w, g), a1 = __shfl_sync(0xffffffffu, w, g + 8);
  uint64_t b0 = __shfl_sync(0xffffffffu, w, 16 + g), b1 = __shfl_sync(0xffffffffu, w, 24 + g);
  *k0 = sa_quad_cols_32(a0, t) | sa_quad_cols_32(a1, t) << 2;
  *k1 = sa_quad_cols_32(b0, t) | sa_quad_cols_32(b1, t) << 2;
}

// The other halves (bars, heads other than VS, keys not at consecutive positions) element by element, as
// ws_half_keep does them, without its VS word form (the windowed form has taken those halves).
__device__ __forceinline__ uint32_t ws_half_keep_elementwise(int info9, const head_mask *mask, int causal_partial,
                                                             const int64_t *qp, int64_t qmin, const int64_t *kp, int t,
                                                             int lane) {
  int kind = info9 & 3, n_valid = info9 >> 2;
  if (kind == WS_HALF_RUN) kind = SA_CHUNK_PARTIAL;
  if (kind == SA_CHUNK_FULL && n_valid == SA_BN) return 0xffffffffu;
  if (n_valid == SA_BN && (kind == SA_CHUNK_BAR || causal_partial)) {
    int64_t kmax = max(kp[lane], kp[lane + 32]);
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) kmax = max(kmax, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)kmax, x));
    if (kmax <= qmin) return 0xffffffffu;
  }
  uint32_t bits = 0;
#pragma unroll 1
  for (int i = 0; i < SA_BN / 2; i++) {
    int col = (i >> 2) * 8 + 2 * t + (i & 1);
    int64_t k = kp[col], q = (i & 2) ? qp[1] : qp[0];
    // Columns from n_valid on hold no key (their positions may be stale): never looked up.
    int keep = col < n_valid && k >= 0 &&
               (kind == SA_CHUNK_FULL ? 1 : kind == SA_CHUNK_BAR || !mask ? k <= q : sa_mask_keeps(mask, q, k));
    bits |= (uint32_t)keep << i;
  }
  return bits;
}

template <int D>
__device__ __forceinline__ void ws_pv(float *o, const uint32_t (*pa)[4], const unsigned char *vt) {
  // V as B, N-major: 64 columns of a key contiguous (swizzled), the next 64 columns LBO = 128 keys x 128
  // bytes on, the next 8 keys SBO = 1024 bytes on.
  uint64_t dv0 = sa_desc_sw128(vt, WS_BN * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < WS_BN / 16; kk++) {
    if (D == 128) sa_wgmma_m64n128_rs_tb(o, pa[kk], dv0 + ((kk * 16 * 128) >> 4));
    else sa_wgmma_m64n64_rs_tb(o, pa[kk], dv0 + ((kk * 16 * 128) >> 4));
  }
}

// Named barrier ids of the consumers' turns (3: warpgroup 0 may issue, 4: warpgroup 1).
#define WS_TURN0 3

// One consumer turn: (with PINGPONG) wait for this warpgroup's turn, issue S = Q K^T from K (HAS_S) and
// O += P V from V (HAS_PV) as two commit groups, and hand the turn over (`pass`: 0 on warpgroup 1's last
// turn, whose arrival nobody waits for). Which products run is a template argument: a run-time test
// around a product makes ptxas serialize every wgmma of the kernel (C7514).
template <int D, bool PINGPONG, bool HAS_S, bool HAS_PV>
__device__ __forceinline__ void ws_issue(float (*s)[4], float *o, const uint32_t (*pa)[4], uint64_t dq0,
                                         const unsigned char *k, const unsigned char *v, int cw, int pass) {
  if (PINGPONG) {
    if (cw == 0) sa_named_sync<WS_TURN0>(256);
    else sa_named_sync<WS_TURN0 + 1>(256);
  }
#pragma unroll
  for (int i = 0; i < WS_BN / 2; i++) sa_reg_fence((&s[0][0])[i]);
#pragma unroll
  for (int i = 0; i < D / 2; i++) sa_reg_fence(o[i]);
  sa_wgmma_fence();
  if (HAS_S) {
    uint64_t dk0 = sa_desc_sw128(k, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
      sa_wgmma_m64n128_ss(&s[0][0], dq0 + (((kk >> 2) * SA_BM * 128 + (kk & 3) * 32) >> 4),
                          dk0 + (((kk >> 2) * WS_BN * 128 + (kk & 3) * 32) >> 4), kk > 0);
    sa_wgmma_commit();
  }
  if (HAS_PV) {
    ws_pv<D>(o, pa, v);
    sa_wgmma_commit();
  }
  if (PINGPONG && pass) {
    if (cw == 0) sa_named_arrive<WS_TURN0 + 1>(256);
    else sa_named_arrive<WS_TURN0>(256);
  }
}

// AdaSpa's masses out of a dense pass (a.blk): after the softmax of a chunk, cs holds this thread's sums of its
// two rows' P = exp2(scale s - m) per key block of BLK keys (128: the chunk, cs[ri][0]; 64: each half), m the rows'
// running max; the quad's sums by two shuffles each, then lane t of the quad writes the base-2 log-sum-exp
// m + log2(sum P) (lg2.approx) of its (row, block): BLK 64, row t / 2 and half t % 2; BLK 128, row t (t < 2) into the
// (head, query tile) slab `blk` at block k0 / BLK (k0 the chunk's first key: a dense causal walk loads whole key
// tiles, keys in order). Rows past the tile's n_rows are not written.
template <int BLK>
__device__ __forceinline__ void ws_block_lse(float (*cs)[2], const float *m, int64_t k0, float *blk, int r0, int n_rows,
                                             int t) {
  constexpr int NH = BLK == 64 ? 2 : 1;
#pragma unroll
  for (int ri = 0; ri < 2; ri++)
#pragma unroll
    for (int hf = 0; hf < NH; hf++) {
      cs[ri][hf] += __shfl_xor_sync(0xffffffffu, cs[ri][hf], 1);
      cs[ri][hf] += __shfl_xor_sync(0xffffffffu, cs[ri][hf], 2);
    }
  int ri = BLK == 64 ? t >> 1 : t & 1, hf = BLK == 64 ? t & 1 : 0;
  float x = ri ? (hf ? cs[1][1] : cs[1][0]) : (hf ? cs[0][1] : cs[0][0]);
  float mu = ri ? m[1] : m[0];
  mu = mu == -INFINITY ? 0.f : mu;
  int r = r0 + 8 * ri;
  if ((BLK == 64 || t < 2) && r < n_rows)
    blk[(k0 / BLK + hf) * SA_BM + r] = x > 0.f ? mu + __log2f(x) : -INFINITY;
}

// After S_c has landed: its keep bits (then stage st's K and positions are released), the softmax, and
// (once the previous P V has landed, releasing its V stage) the rescale of O and P_c packed to bf16. FAST: the
// keep bits in the windowed form where the halves allow it.
template <int D, bool FAST, int BLK, bool NOPV = false>
__device__ __forceinline__ void ws_softmax_chunk(const fwd_args &a, const ws_smem<D> &sm, int st, int pst,
                                                 float (*s)[4], float *o, uint32_t (*pa)[4], float *m, float *l,
                                                 const head_mask *mask, int causal_partial, const int64_t *qp,
                                                 int64_t qmin, const ws_vs &vs, int t, int lane, float *blk, int r0,
                                                 int n_rows) {
  int info = sm.info[st];
  const int64_t *kp = sm.kpos + st * WS_BN;
  int64_t kfirst = BLK ? kp[0] : 0;  // read before the stage is released
  uint32_t k0 = 0xffffffffu, k1 = 0xffffffffu;
  const int full9 = SA_CHUNK_FULL | SA_BN << 2;
  if ((info & 0x1ff) != full9 || (info >> 16) != full9) {
    if (!FAST) {
      k0 = ws_half_keep(info & 0x1ff, mask, causal_partial, qp, qmin, kp, t, lane);
      k1 = ws_half_keep(info >> 16, mask, causal_partial, qp, qmin, kp + SA_BN, t, lane);
    } else if (vs.on && ws_half_windowed(info & 0x1ff, kp, lane) && ws_half_windowed(info >> 16, kp + SA_BN, lane)) {
      ws_vs_keep(info, vs, kp, lane >> 2, t, lane, &k0, &k1);
    } else {
      k0 = ws_half_keep_elementwise(info & 0x1ff, mask, causal_partial, qp, qmin, kp, t, lane);
      k1 = ws_half_keep_elementwise(info >> 16, mask, causal_partial, qp, qmin, kp + SA_BN, t, lane);
    }
  }
  sa_mbar_release_warp(&sm.k_empty[st], lane);  // K and the positions of stage st are free
  float alpha[2], cs[2][2];
  if (__all_sync(0xffffffffu, (k0 & k1) == 0xffffffffu)) ws_softmax<false, BLK>(s, k0, k1, a.scale_log2, m, l, alpha, cs);
  else ws_softmax<true, BLK>(s, k0, k1, a.scale_log2, m, l, alpha, cs);
  if constexpr (BLK > 0) ws_block_lse<BLK>(cs, m, kfirst, blk, r0, n_rows, t);
  if constexpr (NOPV) return;  // no output: the row sums and the table are all the pass leaves

  sa_wgmma_wait<0>();  // the previous P V done: O and the P registers are free
#pragma unroll
  for (int i = 0; i < D / 2; i++) sa_reg_fence(o[i]);
#pragma unroll
  for (int kk = 0; kk < WS_BN / 16; kk++)
#pragma unroll
    for (int r = 0; r < 4; r++) sa_reg_fence_u32(pa[kk][r]);
  if (pst >= 0) {
    sa_mbar_release_warp(&sm.v_empty[pst], lane);
  }
  fwd_rescale<D>((float(*)[4])o, alpha);
#pragma unroll
  for (int kk = 0; kk < WS_BN / 16; kk++) {
    pa[kk][0] = sa_pack_bf16(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = sa_pack_bf16(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = sa_pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = sa_pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

template <int D, bool PINGPONG, bool FAST, int BLK, bool NOPV>
__device__ __forceinline__ void ws_consume(const fwd_args &a, const ws_smem<D> &sm, const ws_walk &w, int h, int qt,
                                           int64_t row0, int n_rows, int cw, int lw, int lane) {
  int g = lane >> 2, t = lane & 3;
  float *blk = NULL;  // this (head, query tile)'s slab of the block table
  if constexpr (BLK > 0) {
    int64_t T = a.ti.n_qtiles, kb = WS_BN / BLK;
    blk = a.blk + ((int64_t)h * (T * (T + 1) / 2) + (int64_t)qt * (qt + 1) / 2) * kb * SA_BM;
  }
  int rl[1][2];
  int64_t qp[2];
  float o[1][D / 8][4], m[1][2], l[1][2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    rl[0][i] = lw * 16 + g + 8 * i;
    qp[i] = rl[0][i] < n_rows ? a.qpos[row0 + rl[0][i]] : -2;
    m[0][i] = -INFINITY, l[0][i] = 0.f;
  }
#pragma unroll
  for (int n = 0; n < D / 8; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.f;
  int nc = w.n_chunks;
  if (nc > 0) {
    // The warp's smallest query position (rows past the end carry -2 and never take the shortcut).
    int64_t qmin = min(qp[0], qp[1]);
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) qmin = min(qmin, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)qmin, x));
    const head_mask *mask = a.masks ? &a.masks[h] : NULL;
    int causal_partial = !mask || mask->kind == PATTERN_DENSE;
    ws_vs vs = {NULL, NULL, 0, -2, 0};
    if (FAST && mask && mask->kind == PATTERN_VS && mask->n_tokens <= SA_KEEP_WORDS_MAX) {
      vs.vbits = mask->vbits, vs.sbits = mask->sbits, vs.n_tokens = (int32_t)mask->n_tokens, vs.on = 1;
      int rr = lane & 15;  // this lane's row for the keep words: held as qp[rr / 8] by lane 4 (rr % 8)
      long long qa = __shfl_sync(0xffffffffu, (long long)qp[0], 4 * (rr & 7)),
                qb = __shfl_sync(0xffffffffu, (long long)qp[1], 4 * (rr & 7));
      vs.qrow = (int32_t)(rr < 8 ? qa : qb);  // a position below n_tokens, or -2
    }
    uint64_t dq0 = sa_desc_sw128(sm.q + cw * 64 * 128, 16, 1024);
    float s[WS_BN / 8][4];
    uint32_t pa[WS_BN / 16][4];
    float *of = &o[0][0][0];
    if (PINGPONG && cw == 1) sa_named_arrive<WS_TURN0>(256);  // warpgroup 0 takes the first turn
    sa_mbar_wait(sm.q_full, 0);

    // Chunk 0: S only.
    sa_mbar_wait(&sm.k_full[0], 0);
    sa_fence_proxy_async();
    // (NOPV: every turn is an S; warpgroup 1's last one is not handed over, nobody waits for it)
    ws_issue<D, PINGPONG, true, false>(s, of, pa, dq0, sm.k0, NULL, cw, !NOPV || nc > 1 || cw == 0);
    sa_wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < WS_BN / 2; i++) sa_reg_fence((&s[0][0])[i]);
    ws_softmax_chunk<D, FAST, BLK, NOPV>(a, sm, 0, -1, s, of, pa, m[0], l[0], mask, causal_partial, qp, qmin, vs, t, lane,
                                          blk, lw * 16 + g, n_rows);
    if constexpr (NOPV) {
      // Chunk c: S_c alone, then its softmax (no P V, so nothing runs under it).
      for (int c = 1; c < nc; c++) {
        int st = c % WS_STAGES;
        sa_mbar_wait(&sm.k_full[st], (c / WS_STAGES) & 1);
        sa_fence_proxy_async();
        ws_issue<D, PINGPONG, true, false>(s, of, pa, dq0, sm.k0 + st * ws_smem<D>::TILE_BYTES, NULL, cw,
                                           c + 1 < nc || cw == 0);
        sa_wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < WS_BN / 2; i++) sa_reg_fence((&s[0][0])[i]);
        ws_softmax_chunk<D, FAST, BLK, true>(a, sm, st, -1, s, of, pa, m[0], l[0], mask, causal_partial, qp, qmin, vs, t,
                                             lane, blk, lw * 16 + g, n_rows);
      }
    } else {
      // Chunk c: S_c with P_{c-1} V_{c-1}; the softmax of S_c under the second product.
      for (int c = 1; c < nc; c++) {
        int st = c % WS_STAGES, pst = (c - 1) % WS_STAGES;
        sa_mbar_wait(&sm.k_full[st], (c / WS_STAGES) & 1);
        sa_mbar_wait(&sm.v_full[pst], ((c - 1) / WS_STAGES) & 1);
        sa_fence_proxy_async();
        ws_issue<D, PINGPONG, true, true>(s, of, pa, dq0, sm.k0 + st * ws_smem<D>::TILE_BYTES,
                                          sm.v0 + pst * ws_smem<D>::TILE_BYTES, cw, 1);
        sa_wgmma_wait<1>();  // S_c done; P_{c-1} V_{c-1} may still run
#pragma unroll
        for (int i = 0; i < WS_BN / 2; i++) sa_reg_fence((&s[0][0])[i]);
        ws_softmax_chunk<D, FAST, BLK>(a, sm, st, pst, s, of, pa, m[0], l[0], mask, causal_partial, qp, qmin, vs, t, lane,
                                        blk, lw * 16 + g, n_rows);
      }

      // The last chunk's P V.
      int pst = (nc - 1) % WS_STAGES;
      sa_mbar_wait(&sm.v_full[pst], ((nc - 1) / WS_STAGES) & 1);
      sa_fence_proxy_async();
      ws_issue<D, PINGPONG, false, true>(s, of, pa, dq0, NULL, sm.v0 + pst * ws_smem<D>::TILE_BYTES, cw, cw == 0);
      sa_wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < D / 2; i++) sa_reg_fence(of[i]);
#pragma unroll
      for (int kk = 0; kk < WS_BN / 16; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) sa_reg_fence_u32(pa[kk][r]);
    }
  }
  fwd_epilogue<D, 1>(a, o, m, l, rl, row0, n_rows, h, t);
}

// ---- the kernel ---------------------------------------------------------------------------------------

template <int D, bool PINGPONG, bool FAST, int BLK, bool NOPV>
__global__ void __launch_bounds__(WS_THREADS, 1) sa_fwd_ws_kernel(const __grid_constant__ fwd_args a,
                                                                  const __grid_constant__ ws_maps mp) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  ws_smem<D> sm = ws_smem_of<D>(smem_raw);
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;

  int n_qt = a.ti.n_qtiles, ix_cells = a.ti.heads * n_qt;
  int cell = a.order[blockIdx.x % ix_cells];
  int h = a.ti.heads == 1 ? (int)(blockIdx.x / ix_cells) : cell / n_qt, qt = cell % n_qt;
  int kvh = h / (a.heads / a.kv_heads);
  ws_walk w = ws_walk_of(&a.ti, h, qt, a.src);
  int64_t row0 = (int64_t)qt * SA_BM;
  int n_rows = (int)min((int64_t)SA_BM, a.n_q - row0);

  if (tid == 0) {
    sa_mbar_init(sm.q_full, 1);
    for (int i = 0; i < WS_STAGES; i++) {
      sa_mbar_init(&sm.k_full[i], 129);  // the elected thread's (with the boxes' bytes) + 128 on landing
      sa_mbar_init(&sm.v_full[i], 129);
      sa_mbar_init(&sm.k_empty[i], 8 * SA_RELEASE_LANES);  // each consumer warp's release
      sa_mbar_init(&sm.v_empty[i], 8 * SA_RELEASE_LANES);
    }
  }
  __syncthreads();

  if (wg == 0) {
    sa_setmaxnreg_dec<WS_PROD_REGS>();
    if (w.n_chunks > 0) ws_produce<D, FAST, NOPV>(a, mp, sm, w, h, kvh, row0, tid);
  } else {
    sa_setmaxnreg_inc<WS_CONS_REGS>();
    ws_consume<D, PINGPONG, FAST, BLK, NOPV>(a, sm, w, h, qt, row0, n_rows, wg - 1, warp - 4, lane);
  }
}

// ---- host -------------------------------------------------------------------------------------------

static PFN_cuTensorMapEncodeTiled_v12000 ws_encode;

// A 2-d bf16 map of rows x cols (row stride cols) in boxes of box_rows x 64, swizzled as the products read.
static int ws_map_2d(CUtensorMap *m, const void *base, int64_t rows, int64_t cols, int box_rows, sr_error *e) {
  cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)(rows > 0 ? rows : 1)}, stride[1] = {(cuuint64_t)cols * 2};
  cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, estride[2] = {1, 1};
  CUresult r = ws_encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dim, stride, box, estride,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return sr_internal_error(e, 0, "cuTensorMapEncodeTiled (2-d, %lld x %lld): error %d", (long long)rows, (long long)cols, (int)r);
  return SR_OK;
}

static int ws_maps_build(const fwd_args &a, int head_dim, ws_maps *mp, sr_error *e) {
  if (!ws_encode) {
    cudaDriverEntryPointQueryResult q;
    void *fn = NULL;
    SA_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !fn) return sr_internal_error(e, 0, "cuTensorMapEncodeTiled: not in the driver");
    ws_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
  }
  memset(mp, 0, sizeof *mp);
  int rc = ws_map_2d(&mp->q, a.q, a.n_q, (int64_t)a.heads * head_dim, SA_BM, e);
  if (rc || a.n_k == 0) return rc;  // no keys: no chunk loads anything
  if ((rc = ws_map_2d(&mp->k, a.k, a.n_k, (int64_t)a.kv_heads * head_dim, SA_BN, e))) return rc;
  return ws_map_2d(&mp->v, a.v, a.n_k, (int64_t)a.kv_heads * head_dim, SA_BN, e);
}

template <int D, bool PINGPONG, bool FAST, int BLK = 0, bool NOPV = false>
static int ws_launch(const fwd_args &a, const ws_maps &mp, int64_t cells, cudaStream_t st, sr_error *e) {
  size_t smem = ws_smem<D>::bytes();
  SA_CUDA(cudaFuncSetAttribute(sa_fwd_ws_kernel<D, PINGPONG, FAST, BLK, NOPV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)smem));
  sa_fwd_ws_kernel<D, PINGPONG, FAST, BLK, NOPV><<<(unsigned)cells, WS_THREADS, smem, st>>>(a, mp);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int sa_fwd_ws_launch(const fwd_args &a, int64_t cells, int head_dim, int pingpong, int windowed, cudaStream_t st,
                     sr_error *e) {
  ws_maps mp;
  int rc = ws_maps_build(a, head_dim, &mp, e);
  if (rc) return rc;
  // Turns without the windowed keep bits (variant 3), with them (5); no turns (4) with the old keep bits.
  if (head_dim == 64)
    return !pingpong ? ws_launch<64, false, false>(a, mp, cells, st, e)
           : windowed ? ws_launch<64, true, true>(a, mp, cells, st, e) : ws_launch<64, true, false>(a, mp, cells, st, e);
  return !pingpong ? ws_launch<128, false, false>(a, mp, cells, st, e)
         : windowed ? ws_launch<128, true, true>(a, mp, cells, st, e) : ws_launch<128, true, false>(a, mp, cells, st, e);
}

int sa_fwd_ws_launch_blk(const fwd_args &a, int64_t cells, int head_dim, cudaStream_t st, sr_error *e) {
  ws_maps mp;
  int rc = ws_maps_build(a, head_dim, &mp, e);
  if (rc) return rc;
  // No running output: the pass for the rows' LSE (written, not merged) and the table alone, without P V.
  if (!a.o_run) {
    if (a.blk_b == 64)
      return head_dim == 64 ? ws_launch<64, true, true, 64, true>(a, mp, cells, st, e)
                            : ws_launch<128, true, true, 64, true>(a, mp, cells, st, e);
    return head_dim == 64 ? ws_launch<64, true, true, 128, true>(a, mp, cells, st, e)
                          : ws_launch<128, true, true, 128, true>(a, mp, cells, st, e);
  }
  if (a.blk_b == 64)
    return head_dim == 64 ? ws_launch<64, true, true, 64>(a, mp, cells, st, e) : ws_launch<128, true, true, 64>(a, mp, cells, st, e);
  return head_dim == 64 ? ws_launch<64, true, true, 128>(a, mp, cells, st, e) : ws_launch<128, true, true, 128>(a, mp, cells, st, e);
}

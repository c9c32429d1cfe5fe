// adaspa_wgmma.cu — AdaSpa's block masses on Hopper (sm_90a), on the machinery of the warp-specialized forward
// (kernels/sparse_attn_fwd_ws.cu, kernels/sa_pipe.cuh): the same masses as adaspa_gpu.cu's mma.sync kernel, for
// blocks of B = 64 or 128.
//
// One CTA of three warpgroups per (head, 128-row query tile). A producer thread copies Q once and then the causal
// keys, 128 a chunk, by the tensor-copy engine into a ring of AW_STAGES shared buffers (mbarriers: full on the
// copy's bytes, empty on the 8 consumer warps' release). Two consumer warpgroups of 64 query rows each compute a
// chunk's S = Q K^T by wgmma m64n128k16 (bf16 products, fp32 accumulators) and p = exp2(s * c - LSE * log2e) per
// element (c = scale * log2e), the causal mask only on the diagonal chunk. A consumer holds two sets of S
// registers: the second chunk's product of a pair runs on the tensor cores while the first chunk's exponentials
// run. There is no P V product, so the work is half a forward's products and all its exponentials: at d = 128 the
// special-function units (ex2.approx, 16 results a cycle an SM) need as long as the tensor cores, so a share of
// the unmasked elements computes 2^x on the FMA pipes instead (kernels/exp2_poly.h, as FlashAttention-4 does;
// aw_poly_of, SR_ADASPA_POLY); the diagonal chunk's masked elements all take ex2.approx (exact zeros).
//
// The geometry keeps every sum whole: B divides both the 128-row tile and the 128-key chunk, so a tile holds
// 128 / B query blocks and a chunk 128 / B key blocks. A thread sums its p of each 64-key half of the chunk by a
// tree (depth 5), the warp's shuffle tree gives the warp's two half sums (5 shuffles for both), and every
// AW_FLUSH chunks the consumers meet on a named barrier and one thread a (query block, key block) adds the warps'
// sums in a fixed order into one fp32 write. No atomics: the same bits run to run. Summation depth 12 (B = 64)
// or 14 (B = 128), within the bound's B / 8 + 8 (docs/design.md, "AdaSpa's block masses on the GPU").
//
// Chunks are issued in pairs (one per register set); a tile with an odd number of causal chunks issues one more,
// whose keys all lie after the tile's rows: its product runs on a stale buffer (nothing is copied) and its result
// is dropped, since a run-time test around a product would make ptxas serialize every wgmma of the kernel (C7514).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/adaspa_wgmma.h"
#include "kernels/exp2_poly.h"
#include "kernels/sa_gpu.h"
#include "kernels/sa_pipe.cuh"
#include "kernels/vs_gpu.h"

#define AW_ROWS 128    // query rows a CTA: two consumer warpgroups of 64
#define AW_KC 128      // keys a chunk
#define AW_STAGES 4    // K buffers in flight (Q 32 KB + 4 x 32 KB at d = 128)
#define AW_THREADS 384 // producer warpgroup + two consumer warpgroups
#define AW_FLUSH 8     // chunks between two meetings of the consumers; the warp sums' ring holds two windows
#define AW_SLOTS (2 * AW_FLUSH)
#define AW_BAR_FLUSH 1 // named barrier id of the meetings (0 is __syncthreads)
// 168 registers a thread under the cap of 384 threads: the producer gives back 128 x (168 - 24), the consumers
// take 256 x (240 - 168).
#define AW_PROD_REGS 24
#define AW_CONS_REGS 240

typedef struct {
  const float *lse;
  float *mass;
  int n, nb, heads, kv_heads, B, n_qt;
  float scale_log2;
} aw_args;

// Q [n, heads * d] and K [n, kv_heads * d] in boxes of 128 rows x 64 dims, 128-byte swizzle (as wgmma reads them).
typedef struct {
  CUtensorMap q, k;
} aw_maps;

template <int D>
struct aw_smem {
  unsigned char *q, *k0;  // stage i at k0 + i * BYTES
  float *ws;              // [AW_SLOTS][8 warps][2 halves]: a warp's sum of each 64-key half of a chunk
  uint64_t *q_full, *k_full, *k_empty;
  static constexpr int BYTES = AW_KC * D * 2;  // = the Q tile's bytes (AW_ROWS = AW_KC)
  static constexpr size_t bytes() { return 1024 + (size_t)(1 + AW_STAGES) * BYTES + AW_SLOTS * 16 * 4 + (1 + 2 * AW_STAGES) * 8; }
};

template <int D>
__device__ __forceinline__ aw_smem<D> aw_smem_of(unsigned char *raw) {
  aw_smem<D> s;
  unsigned char *p = raw + ((1024 - (sa_smem_addr(raw) & 1023)) & 1023);  // swizzled tiles: 1024-byte aligned
  s.q = p, p += aw_smem<D>::BYTES;
  s.k0 = p, p += AW_STAGES * aw_smem<D>::BYTES;
  s.ws = (float *)p, p += AW_SLOTS * 16 * 4;
  s.q_full = (uint64_t *)p, s.k_full = s.q_full + 1, s.k_empty = s.k_full + AW_STAGES;
  return s;
}

// ---- producer ---------------------------------------------------------------------------------------------------

// One thread: Q, then chunks 0..n_issue-1 of K into the ring; chunks at or past n_copy (the padding chunk) copy
// nothing and complete their stage at once.
template <int D>
__device__ __forceinline__ void aw_produce(const aw_maps &mp, const aw_smem<D> &sm, int h, int kvh, int row0,
                                           int n_copy, int n_issue) {
  const int TB = aw_smem<D>::BYTES;
  sa_mbar_arrive_expect_tx(sm.q_full, TB);
#pragma unroll
  for (int cb = 0; cb < D / 64; cb++) sa_tma_load_2d(sm.q + cb * AW_ROWS * 128, &mp.q, h * D + cb * 64, row0, sm.q_full);
  for (int c = 0; c < n_issue; c++) {
    int st = c % AW_STAGES;
    sa_mbar_wait(&sm.k_empty[st], ((c / AW_STAGES) & 1) ^ 1);
    if (c >= n_copy) {
      sa_mbar_arrive(&sm.k_full[st]);
      continue;
    }
    sa_mbar_arrive_expect_tx(&sm.k_full[st], TB);
#pragma unroll
    for (int cb = 0; cb < D / 64; cb++)
      sa_tma_load_2d(sm.k0 + st * TB + cb * AW_KC * 128, &mp.k, kvh * D + cb * 64, c * AW_KC, &sm.k_full[st]);
  }
}

// ---- consumers --------------------------------------------------------------------------------------------------

// A consumer thread's fixed state: its rows' -LSE * log2e (-inf: past n or no finite LSE, rows that add nothing),
// its warp's first row, and where it stands in the CTA.
typedef struct {
  float off[2];
  int wrow0, row_g, col_t;  // the warp's first row; this thread's first row (wrow0 + g); its first column (2 t)
  int warp8, lane, ct, qt, h, n_real, n_issue;  // consumer warp 0..7, lane, consumer thread 0..255
} aw_thread;

// S (64 x 128, accumulator layout: n8 tile j in s[4j..4j+3], rows g and g + 8, columns 8j + 2t (+1)) = Q K^T of
// the chunk in stage tile k, as one commit group.
template <int D>
__device__ __forceinline__ void aw_issue(float *s, uint64_t dq0, const unsigned char *k) {
#pragma unroll
  for (int i = 0; i < AW_KC / 2; i++) sa_reg_fence(s[i]);
  sa_wgmma_fence();
  uint64_t dk0 = sa_desc_sw128(k, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++)
    sa_wgmma_m64n128_ss(s, dq0 + (((kk >> 2) * AW_ROWS * 128 + (kk & 3) * 32) >> 4),
                        dk0 + (((kk >> 2) * AW_KC * 128 + (kk & 3) * 32) >> 4), kk > 0);
  sa_wgmma_commit();
}

// Does n8 tile n (of 16) take its exponentials from the FMA pipes (sr_exp2_poly)? POLY of the 16 do, spread evenly.
template <int POLY>
__device__ __forceinline__ constexpr bool aw_poly_tile(int n) { return (n * POLY) % 16 < POLY; }

// This thread's sums of p over each 64-key half of a chunk starting at key k0 (a tree: 4 elements of an n8 tile in
// pairs, then the 8 tiles of a half in pairs). MASK: keys after their row give 0 (all by ex2.approx, which gives
// exact zeros); else POLY tiles of 16 by sr_exp2_poly, the rest by ex2.approx.
template <bool MASK, int POLY>
__device__ __forceinline__ void aw_probs(const float *s, float c, const aw_thread &u, int k0, float *hs) {
#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    float t8[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
      int n = hf * 8 + j;
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float a = fmaf(s[4 * n + e], c, u.off[e >> 1]);
        if (MASK && k0 + 8 * n + u.col_t + (e & 1) > u.row_g + 8 * (e >> 1)) a = -INFINITY;
        p[e] = !MASK && aw_poly_tile<POLY>(n) ? sr_exp2_poly(a) : sa_exp2(a);
      }
      t8[j] = (p[0] + p[1]) + (p[2] + p[3]);
    }
    hs[hf] = ((t8[0] + t8[1]) + (t8[2] + t8[3])) + ((t8[4] + t8[5]) + (t8[6] + t8[7]));
  }
}

// The warps' sums of the chunks of the window ending at chunk c_last into the masses: one consumer thread a
// (query block, key block), the warps added in a fixed order.
__device__ __forceinline__ void aw_flush(const aw_args &a, const float *ws, const aw_thread &u, int c_last) {
  int c_first = c_last - c_last % AW_FLUSH, per = a.B == 64 ? 4 : 1;
  if (u.ct >= (c_last - c_first + 1) * per) return;
  int c = c_first + u.ct / per;
  if (c >= u.n_real) return;  // the padding chunk
  const float *w = ws + (c % AW_SLOTS) * 16;  // [warp8][half]
  float v;
  int64_t pb, cb;
  if (per == 4) {  // B = 64: query block qb = consumer warpgroup, key block kh = half
    int qb = (u.ct & 3) >> 1, kh = u.ct & 1;
    const float *x = w + qb * 8 + kh;
    v = (x[0] + x[2]) + (x[4] + x[6]);
    pb = 2 * (int64_t)u.qt + qb, cb = 2 * (int64_t)c + kh;
  } else {  // B = 128: the tile's one query block, the chunk's one key block
    float y[8];
#pragma unroll
    for (int i = 0; i < 8; i++) y[i] = w[2 * i] + w[2 * i + 1];
    v = ((y[0] + y[1]) + (y[2] + y[3])) + ((y[4] + y[5]) + (y[6] + y[7]));
    pb = u.qt, cb = c;
  }
  if (pb < a.nb && cb < a.nb) a.mass[((int64_t)u.h * a.nb + pb) * a.nb + cb] = v;
}

// Chunk c's S has landed in s: release its stage, sum its p, the warp's half sums into the ring, and at a
// window's end (or the last chunk) the meeting and the flush.
template <int D, int POLY>
__device__ __forceinline__ void aw_chunk(const aw_args &a, const aw_smem<D> &sm, const float *s, int c,
                                         const aw_thread &u) {
  __syncwarp();
  if (u.lane == 0) sa_mbar_arrive(&sm.k_empty[c % AW_STAGES]);
  float hs[2] = {0.f, 0.f};
  if (c < u.n_real) {
    int k0 = c * AW_KC;
    if (k0 + AW_KC - 1 > u.wrow0) aw_probs<true, 0>(s, a.scale_log2, u, k0, hs);  // some key after some row of the warp
    else aw_probs<false, POLY>(s, a.scale_log2, u, k0, hs);
  }
  // Lanes of even index carry half 0, odd ones half 1: one exchange, then a tree over the 16 lanes of each.
  int odd = u.lane & 1;
  float v = (odd ? hs[1] : hs[0]) + __shfl_xor_sync(0xffffffffu, odd ? hs[0] : hs[1], 1);
#pragma unroll
  for (int o = 2; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (u.lane < 2) sm.ws[((c % AW_SLOTS) * 8 + u.warp8) * 2 + u.lane] = v;
  if (c % AW_FLUSH == AW_FLUSH - 1 || c == u.n_issue - 1) {
    sa_named_sync<AW_BAR_FLUSH>(256);  // both warpgroups' sums of the window are in place
    aw_flush(a, sm.ws, u, c);
  }
}

template <int D, int POLY>
__device__ __forceinline__ void aw_consume(const aw_args &a, const aw_smem<D> &sm, int cw, int lw, int lane, int qt,
                                           int h, int n_real, int n_issue) {
  aw_thread u;
  int g = lane >> 2, t = lane & 3;
  u.wrow0 = qt * AW_ROWS + cw * 64 + lw * 16, u.row_g = u.wrow0 + g, u.col_t = 2 * t;
  u.warp8 = cw * 4 + lw, u.lane = lane, u.ct = cw * 128 + lw * 32 + lane, u.qt = qt, u.h = h;
  u.n_real = n_real, u.n_issue = n_issue;
#pragma unroll
  for (int i = 0; i < 2; i++) {
    int r = u.row_g + 8 * i;
    float l = r < a.n ? a.lse[(int64_t)h * a.n + r] : -INFINITY;
    u.off[i] = l > -INFINITY && l < INFINITY ? -l * SA_LOG2E : -INFINITY;
  }
  const int TB = aw_smem<D>::BYTES;
  uint64_t dq0 = sa_desc_sw128(sm.q + cw * 64 * 128, 16, 1024);
  float s0[AW_KC / 2], s1[AW_KC / 2];
  sa_mbar_wait(sm.q_full, 0);
  // Chunks in pairs, one register set each: the second product runs while the first chunk's exponentials do. No
  // product is in flight across the loop's back edge: ptxas tracks the commit groups only within the body, and
  // serializes every wgmma of the kernel otherwise (C7514). The other warpgroup's products fill the tensor
  // cores while this one sums the second chunk.
  for (int c = 0; c < n_issue; c += 2) {
    int st = c % AW_STAGES;
    sa_mbar_wait(&sm.k_full[st], (c / AW_STAGES) & 1);
    aw_issue<D>(s0, dq0, sm.k0 + st * TB);
    st = (c + 1) % AW_STAGES;
    sa_mbar_wait(&sm.k_full[st], ((c + 1) / AW_STAGES) & 1);
    aw_issue<D>(s1, dq0, sm.k0 + st * TB);
    sa_wgmma_wait<1>();
#pragma unroll
    for (int i = 0; i < AW_KC / 2; i++) sa_reg_fence(s0[i]);
    aw_chunk<D, POLY>(a, sm, s0, c, u);
    sa_wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < AW_KC / 2; i++) sa_reg_fence(s1[i]);
    aw_chunk<D, POLY>(a, sm, s1, c + 1, u);
  }
}

// ---- the kernel -------------------------------------------------------------------------------------------------

template <int D, int POLY>
__global__ void __launch_bounds__(AW_THREADS, 1) adaspa_wgmma_kernel(const __grid_constant__ aw_args a,
                                                                     const __grid_constant__ aw_maps mp) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  aw_smem<D> sm = aw_smem_of<D>(smem_raw);
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  // Heaviest tiles (longest causal rows) first; consecutive blocks take the heads of one KV head.
  int qt = a.n_qt - 1 - (int)(blockIdx.x / a.heads), h = (int)(blockIdx.x % a.heads);
  int kvh = h / (a.heads / a.kv_heads);
  int n_real = qt + 1, n_issue = (n_real + 1) & ~1;  // causal chunks: through the diagonal one; issued in pairs

  if (tid == 0) {
    sa_mbar_init(sm.q_full, 1);
    for (int i = 0; i < AW_STAGES; i++) {
      sa_mbar_init(&sm.k_full[i], 1);   // the producer's arrival (with the copy's bytes)
      sa_mbar_init(&sm.k_empty[i], 8);  // one per consumer warp
    }
  }
  __syncthreads();

  if (wg == 0) {
    sa_setmaxnreg_dec<AW_PROD_REGS>();
    if (tid == 0) aw_produce<D>(mp, sm, h, kvh, qt * AW_ROWS, n_real, n_issue);
  } else {
    sa_setmaxnreg_inc<AW_CONS_REGS>();
    aw_consume<D, POLY>(a, sm, wg - 1, warp & 3, lane, qt, h, n_real, n_issue);
  }
}

// ---- host -------------------------------------------------------------------------------------------------------

static PFN_cuTensorMapEncodeTiled_v12000 aw_encode;

// A 2-d bf16 map of rows x cols (row stride cols) in boxes of 128 rows x 64 columns, 128-byte swizzle.
static int aw_map(CUtensorMap *m, const void *base, int64_t rows, int64_t cols, sr_error *e) {
  cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, stride[1] = {(cuuint64_t)cols * 2};
  cuuint32_t box[2] = {64, AW_ROWS}, estride[2] = {1, 1};
  CUresult r = aw_encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dim, stride, box, estride,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return sr_internal_error(e, 0, "cuTensorMapEncodeTiled (%lld x %lld): error %d", (long long)rows, (long long)cols, (int)r);
  return SR_OK;
}

int adaspa_gpu_wgmma_applies(const void *q, const void *k, int64_t n, int32_t head_dim, int32_t block) {
  if ((block != 64 && block != 128) || (head_dim != 64 && head_dim != 128)) return 0;
  if (n < 1 || n > INT32_MAX - 2 * AW_ROWS || ((uintptr_t)q | (uintptr_t)k) % 16) return 0;
  return sa_wgmma_built();
}

template <int D, int POLY>
static int aw_launch(const aw_args &a, const aw_maps &mp, cudaStream_t st, sr_error *e) {
  size_t smem = aw_smem<D>::bytes();
  SA_CUDA(cudaFuncSetAttribute(adaspa_wgmma_kernel<D, POLY>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  adaspa_wgmma_kernel<D, POLY><<<(unsigned)((int64_t)a.n_qt * a.heads), AW_THREADS, smem, st>>>(a, mp);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

// The share of exponentials on the FMA pipes, in n8 tiles of 16: SR_ADASPA_POLY=0|4|6, by default 0 (every one by
// ex2.approx). The cycle estimate favoured a share (per chunk and SM sub-partition the tensor cores take 1024 cycles
// at d = 128, ex2.approx 8 cycles a warp instruction, the FMA pipes about 128 a thread plus 8 per polynomial
// element), but measured side by side (bin/sparsering-bench-adaspa, one H100, d = 128, B = 128) the share of 4 was
// slower: 18.41 against 17.70 ms at 64K, 75.43 against 70.94 ms at 128K
// (results/exec/2026-11-27-h100-adaspa-wgmma). d = 64 was not measured.
static int aw_poly_of(int head_dim, int *poly, sr_error *e) {
  const char *v = getenv("SR_ADASPA_POLY");
  if (!v || !*v) return *poly = 0, SR_OK;
  if (strcmp(v, "0") && strcmp(v, "4") && strcmp(v, "6"))
    return sr_input_error(e, NULL, "SR_ADASPA_POLY", "expected 0, 4 or 6 (n8 tiles of 16 by the FMA pipes), got '%s'", v);
  *poly = atoi(v);
  return SR_OK;
}

int adaspa_wgmma_block_mass(const void *q, const void *k, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim,
                            float scale, int32_t block, const float *lse, float *mass, void *stream, sr_error *e) {
  if (!adaspa_gpu_wgmma_applies(q, k, n, head_dim, block))
    return sr_input_error(e, NULL, "estimate", "the wgmma AdaSpa kernel needs an sm_90a device, block 64 or 128 (got %d), "
                          "head_dim 64 or 128 (got %d) and 16-byte aligned Q and K", block, head_dim);
  int64_t n_qt = (n + AW_ROWS - 1) / AW_ROWS;
  if (n_qt * heads > INT32_MAX)
    return sr_input_error(e, NULL, "estimate", "%lld tokens of %d heads: too many for the GPU search", (long long)n, heads);
  if (!aw_encode) {
    cudaDriverEntryPointQueryResult qr;
    void *fn = NULL;
    SA_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr));
    if (qr != cudaDriverEntryPointSuccess || !fn) return sr_internal_error(e, 0, "cuTensorMapEncodeTiled: not in the driver");
    aw_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
  }
  aw_maps mp;
  memset(&mp, 0, sizeof mp);
  int rc = aw_map(&mp.q, q, n, (int64_t)heads * head_dim, e);
  if (rc || (rc = aw_map(&mp.k, k, n, (int64_t)kv_heads * head_dim, e))) return rc;
  aw_args a;
  a.lse = lse, a.mass = mass, a.n = (int)n, a.nb = (int)((n + block - 1) / block), a.heads = heads;
  a.kv_heads = kv_heads, a.B = block, a.n_qt = (int)n_qt, a.scale_log2 = scale * SA_LOG2E;
  cudaStream_t st = (cudaStream_t)stream;
  int poly;
  if ((rc = aw_poly_of(head_dim, &poly, e))) return rc;
  if (head_dim == 64)
    return poly == 0 ? aw_launch<64, 0>(a, mp, st, e) : poly == 4 ? aw_launch<64, 4>(a, mp, st, e) : aw_launch<64, 6>(a, mp, st, e);
  return poly == 0 ? aw_launch<128, 0>(a, mp, st, e) : poly == 4 ? aw_launch<128, 4>(a, mp, st, e) : aw_launch<128, 6>(a, mp, st, e);
}

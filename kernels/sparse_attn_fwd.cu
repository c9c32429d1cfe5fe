// sparse_attn_fwd.cu — forward of one ring step of sparse flash attention on the GPU (FlashAttention-2
// structure, Dao 2023): one CTA per (head, 128-row query tile); the cell's KV tiles (as two 64-key
// halves) and its bar keys (gathered 64 at a time by index) stream through shared memory with
// cp.async; online softmax in registers in base 2. Two product engines: mma.sync m16n8k16 (sm_80 and
// up; 16 or 32 rows a warp) and, on Hopper's sm_90a image, wgmma with a 64-row warpgroup tile (the
// default there; kernels/sa_wgmma.cuh). The epilogue writes the step's O_b / LSE_b and merges into
// the running fp32 (O, LSE) by the stable form of docs/design.md, "The LSE merge".
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/sa_cuda.cuh"
#include "kernels/sa_gpu.h"
#include "kernels/sa_wgmma.cuh"
#include "kernels/sparse_attn.h"

#include "kernels/sa_fwd.cuh"

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
        uint32_t keep = all_kept ? 0xffffffffu : sa_keep_bits<KS / 8>(ch.kind, mask, qp[mt], kp + sub * KS, t, max(0, ch.n_valid - sub * KS));
        fwd_softmax<KS, D>(s[mt], keep, a.scale_log2, m[mt], l[mt], o[mt]);
      }
      sa_mma_pb_mt<KS, D, MT>(o, s, vb + sub * KS * S, S, lane);
    }
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }

  fwd_epilogue<D, MT>(a, o, m, l, rl, row0, n_rows, h, t);
}

// ---- the Hopper kernel (wgmma, sm_90a) ---------------------------------------------------------------
// Two warpgroups of 4 warps; warpgroup w owns query rows 64w..64w+63 of the CTA's 128-row tile, so a
// warp owns the same 16 rows as in sa_fwd_kernel<D, 1> and shares its softmax and epilogue. Per 64-key
// chunk: S = Q K^T as D/16 wgmma m64n64k16 with Q and K from swizzled shared memory, the softmax in
// registers, then O += P V as 4 wgmma m64nDk16 with P from registers and V from shared memory
// (N-major). The chunk walk's global reads (tile kind and index, bar indices) are issued two chunks
// ahead into registers, and key positions are copied by cp.async, so no thread waits on a
// dependent global load inside the loop.

#define WG_THREADS 256

// The rows of a chunk this thread copies: rows tid / (D/8) + j * (256 / (D/8)), segment tid % (D/8).
template <int D>
struct wg_rows {
  int32_t key[D / 32];  // source-local key of each row, -1 none (n_k < 2^31, checked on the host)
  int kind, n_valid;
};

template <int D>
__device__ __forceinline__ void wg_fetch(const fwd_args &a, const sa_cell &c, int ci, int tid, wg_rows<D> &w) {
  sa_chunk ch = sa_chunk_of(&a.ti, &c, ci, a.n_k);
  w.kind = ch.kind, w.n_valid = ch.n_valid;
#pragma unroll
  for (int j = 0; j < D / 32; j++)
    w.key[j] = (int32_t)sa_row_of(ch.base, ch.idx, ch.n_valid, tid / (D / 8) + j * (256 / (D / 8)));
}

template <int D>
__device__ __forceinline__ void wg_issue(const fwd_args &a, const wg_rows<D> &w, int kvh, unsigned char *sk,
                                         unsigned char *sv, int64_t *skpos, int *sinfo, int tid) {
  const int segs = D / 8;
  int sg = tid % segs;
  int64_t stride = (int64_t)a.kv_heads * D;
#pragma unroll
  for (int j = 0; j < D / 32; j++) {
    int r = tid / segs + j * (256 / segs);
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

template <int D>
__global__ void __launch_bounds__(WG_THREADS, 2) sa_fwd_wg_kernel(const fwd_args a) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // Swizzled tiles need 1024-byte alignment: the launch adds that much slack.
  unsigned char *sq = smem_raw + ((1024 - (sa_smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char *sk = sq + SA_BM * D * 2, *sv = sk + 2 * SA_BN * D * 2;
  int64_t *skpos = (int64_t *)(sv + 2 * SA_BN * D * 2);
  int *sinfo = (int *)(skpos + 2 * SA_BN);
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3, wg = warp >> 2;

  int n_qt = a.ti.n_qtiles, ix_cells = a.ti.heads * n_qt;
  int cell = a.order[blockIdx.x % ix_cells];
  int h = a.ti.heads == 1 ? (int)(blockIdx.x / ix_cells) : cell / n_qt, qt = cell % n_qt;
  int kvh = h / (a.heads / a.kv_heads);
  sa_cell c = sa_cell_of(&a.ti, h, qt, a.src);
  int64_t row0 = (int64_t)qt * SA_BM;
  int n_rows = (int)min((int64_t)SA_BM, a.n_q - row0);

  sa_load_rows_sw128<D, SA_BM, WG_THREADS>(sq, a.q + (int64_t)h * D, row0, NULL, n_rows, (int64_t)a.heads * D, tid);
  wg_rows<D> w;
  if (c.n_chunks > 0) {
    wg_fetch<D>(a, c, 0, tid, w);
    wg_issue<D>(a, w, kvh, sk, sv, skpos, sinfo, tid);
  }
  sa_cp_async_commit();
  if (c.n_chunks > 1) wg_fetch<D>(a, c, 1, tid, w);

  int rl[1][2];
  int64_t qp[2];
  float o[1][D / 8][4], m[1][2], l[1][2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    rl[0][i] = warp * 16 + g + 8 * i;
    qp[i] = rl[0][i] < n_rows ? a.qpos[row0 + rl[0][i]] : -2;
    m[0][i] = -INFINITY, l[0][i] = 0.f;
  }
#pragma unroll
  for (int n = 0; n < D / 8; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.f;
  // The warp's smallest query position: a causal chunk whose keys all lie at or before it keeps every
  // element for the warp (rows past the end carry -2 and so never take that shortcut).
  int64_t qmin = min(qp[0], qp[1]);
#pragma unroll
  for (int x = 1; x < 32; x <<= 1) qmin = min(qmin, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)qmin, x));
  const head_mask *mask = a.masks ? &a.masks[h] : NULL;
  int causal_partial = !mask || mask->kind == PATTERN_DENSE;
  uint64_t dq0 = sa_desc_sw128(sq + wg * 64 * 128, 16, 1024);

  for (int ci = 0; ci < c.n_chunks; ci++) {
    int buf = ci & 1;
    if (ci + 1 < c.n_chunks) {
      wg_issue<D>(a, w, kvh, sk + (buf ^ 1) * SA_BN * D * 2, sv + (buf ^ 1) * SA_BN * D * 2, skpos + (buf ^ 1) * SA_BN,
                  sinfo + (buf ^ 1), tid);
      sa_cp_async_commit();
      if (ci + 2 < c.n_chunks) wg_fetch<D>(a, c, ci + 2, tid, w);
      sa_cp_async_wait<1>();
    } else {
      sa_cp_async_wait<0>();
    }
    sa_fence_proxy_async();
    __syncthreads();
    const unsigned char *kb = sk + buf * SA_BN * D * 2, *vb = sv + buf * SA_BN * D * 2;
    const int64_t *kp = skpos + buf * SA_BN;
    int info = sinfo[buf], kind = info & 15, n_valid = info >> 4;

    float s[1][SA_BN / 8][4];
#pragma unroll
    for (int n = 0; n < SA_BN / 8; n++) s[0][n][0] = s[0][n][1] = s[0][n][2] = s[0][n][3] = 0.f;
#pragma unroll
    for (int i = 0; i < SA_BN / 2; i++) sa_reg_fence((&s[0][0][0])[i]);
    sa_wgmma_fence();
    uint64_t dk0 = sa_desc_sw128(kb, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
      sa_wgmma_m64n64_ss(&s[0][0][0], dq0 + (((kk >> 2) * SA_BM * 128 + (kk & 3) * 32) >> 4),
                         dk0 + (((kk >> 2) * SA_BN * 128 + (kk & 3) * 32) >> 4));
    sa_wgmma_commit();

    // The keep bits while S = Q K^T runs.
    uint32_t keep = 0xffffffffu;
    if (kind != SA_CHUNK_FULL || n_valid != SA_BN) {
      int fast = 0;
      if (n_valid == SA_BN && (kind == SA_CHUNK_BAR || causal_partial)) {
        int64_t kmax = max(kp[lane], kp[lane + 32]);
#pragma unroll
        for (int x = 1; x < 32; x <<= 1) kmax = max(kmax, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)kmax, x));
        fast = kmax <= qmin;
      }
      if (!fast) keep = sa_keep_bits<SA_BN / 8>(kind, mask, qp, kp, t, n_valid);
    }
    sa_wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < SA_BN / 2; i++) sa_reg_fence((&s[0][0][0])[i]);
    fwd_softmax<SA_BN, D>(s[0], keep, a.scale_log2, m[0], l[0], o[0]);

    uint32_t pa[SA_BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < SA_BN / 16; kk++) {
      pa[kk][0] = sa_pack_bf16(s[0][2 * kk][0], s[0][2 * kk][1]);
      pa[kk][1] = sa_pack_bf16(s[0][2 * kk][2], s[0][2 * kk][3]);
      pa[kk][2] = sa_pack_bf16(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
      pa[kk][3] = sa_pack_bf16(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
    }
#pragma unroll
    for (int i = 0; i < D / 2; i++) sa_reg_fence((&o[0][0][0])[i]);
    sa_wgmma_fence();
    // V as B, N-major: 64 columns of a row contiguous (swizzled), the next 64 columns LBO = 64 rows x
    // 128 bytes on, the next 8 keys SBO = 1024 bytes on.
    uint64_t dv0 = sa_desc_sw128(vb, SA_BN * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < SA_BN / 16; kk++) {
      if (D == 128) sa_wgmma_m64n128_rs_tb(&o[0][0][0], pa[kk], dv0 + ((kk * 16 * 128) >> 4));
      else sa_wgmma_m64n64_rs_tb(&o[0][0][0], pa[kk], dv0 + ((kk * 16 * 128) >> 4));
    }
    sa_wgmma_commit();
    sa_wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < D / 2; i++) sa_reg_fence((&o[0][0][0])[i]);
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }

  sa_cp_async_wait<0>();  // a cell without chunks still has its Q copy in flight
  fwd_epilogue<D, 1>(a, o, m, l, rl, row0, n_rows, h, t);
}

// Writes 1 when this device runs the sm_90a image (the one with wgmma), 0 otherwise.
__device__ int sa_wgmma_flag;
__global__ void sa_wgmma_probe_kernel(void) { sa_wgmma_flag = SA_WGMMA_ARCH; }

// ---- host ------------------------------------------------------------------------------------------

template <int D, int MT>
static int fwd_launch(const fwd_args &a, int64_t cells, cudaStream_t st, sr_error *e) {
  size_t smem = (size_t)(SA_BM + 4 * SA_BN) * (D + 8) * sizeof(__nv_bfloat16) + 2 * SA_BN * sizeof(int64_t);
  SA_CUDA(cudaFuncSetAttribute(sa_fwd_kernel<D, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  sa_fwd_kernel<D, MT><<<(unsigned)cells, 256 / MT, smem, st>>>(a);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

template <int D>
static int fwd_launch_wg(const fwd_args &a, int64_t cells, cudaStream_t st, sr_error *e) {
  size_t smem = 1024 + (size_t)(SA_BM + 4 * SA_BN) * D * 2 + 2 * SA_BN * sizeof(int64_t) + 2 * sizeof(int);
  SA_CUDA(cudaFuncSetAttribute(sa_fwd_wg_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  sa_fwd_wg_kernel<D><<<(unsigned)cells, WG_THREADS, smem, st>>>(a);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

// Does the current device run the library's sm_90a image? Asked once per process (device 0 of the
// first call; the executor keeps one device per process).
static int wgmma_built = -1;
int sa_wgmma_built(void) {
  if (wgmma_built < 0) {
    int flag = 0;
    sa_wgmma_probe_kernel<<<1, 1>>>();
    cudaError_t err = cudaPeekAtLastError();
    if (err == cudaSuccess) err = cudaMemcpyFromSymbol(&flag, sa_wgmma_flag, sizeof flag);
    if (err != cudaSuccess) cudaGetLastError();  // no usable image: fall back, and leave no error behind
    wgmma_built = err == cudaSuccess && flag == 1;
  }
  return wgmma_built;
}

int sa_fwd_variant = -1;
#define SA_FWD_DEFAULT 5

// The launch arguments of one ring step (no block table).
static fwd_args fwd_args_of(const sa_shape *s, const void *q, const void *k, const void *v, const int64_t *qpos,
                            const int64_t *kpos, const sa_gpu_index *ix, int src, const head_mask *masks, void *o_b,
                            float *lse_b, float *o_run, float *lse_run) {
  fwd_args a;
  a.q = (const __nv_bfloat16 *)q, a.k = (const __nv_bfloat16 *)k, a.v = (const __nv_bfloat16 *)v;
  a.qpos = qpos, a.kpos = kpos, a.ti = ix->d, a.order = ix->order + (int64_t)src * ix->cells, a.masks = masks;
  a.o_b = (__nv_bfloat16 *)o_b, a.lse_b = lse_b, a.o_run = o_run, a.lse_run = lse_run;
  a.n_q = s->n_q, a.n_k = s->n_k, a.heads = s->heads, a.kv_heads = s->kv_heads, a.src = src;
  a.scale_log2 = s->scale * SA_LOG2E;
  a.blk = NULL, a.blk_b = 0;
  return a;
}

int sa_fwd(const sa_shape *s, const void *q, const void *k, const void *v, const int64_t *qpos, const int64_t *kpos,
           const sa_gpu_index *ix, int src, const head_mask *masks, void *o_b, float *lse_b, float *o_run,
           float *lse_run, void *stream, sr_error *e) {
  int rc = sa_check_shape(s, &ix->d, src, e);
  if (rc) return rc;
  if (o_run && !lse_run) return sr_input_error(e, NULL, "sa_fwd", "o_run given without lse_run");
  fwd_args a = fwd_args_of(s, q, k, v, qpos, kpos, ix, src, masks, o_b, lse_b, o_run, lse_run);
  int64_t cells = (int64_t)s->heads * ix->d.n_qtiles;
  if (cells == 0) return SR_OK;
  cudaStream_t st = (cudaStream_t)stream;
  int var = sa_fwd_variant;
  // The wgmma kernel keeps source-local keys in 32 bits.
  if (var != 0) var = sa_wgmma_built() && s->n_k < INT32_MAX ? (var < 0 ? SA_FWD_DEFAULT : var) : 0;
  int d64 = s->head_dim == 64;
  if (var >= 3 && var <= 5) return sa_fwd_ws_launch(a, cells, s->head_dim, var != 4, var == 5, st, e);
  if (var == 2) return d64 ? fwd_launch_wg<64>(a, cells, st, e) : fwd_launch_wg<128>(a, cells, st, e);
  return d64 ? fwd_launch<64, 1>(a, cells, st, e) : fwd_launch<128, 1>(a, cells, st, e);
}

int64_t sa_block_lse_floats(int64_t n, int32_t heads, int32_t block) {
  int64_t T = (n + SA_BM - 1) / SA_BM, kb = block > 0 ? SA_BM / block : 0;
  return (int64_t)heads * (T * (T + 1) / 2) * kb * SA_BM;
}

int sa_block_lse_applies(const sa_shape *s, int32_t block) {
  return (block == 64 || block == 128) && (s->head_dim == 64 || s->head_dim == 128) && s->n_q == s->n_k &&
         s->n_k < INT32_MAX && sa_wgmma_built();
}

int sa_fwd_block_lse(const sa_shape *s, const void *q, const void *k, const void *v, const int64_t *pos,
                     const sa_gpu_index *ix, float *o_run, float *lse_run, int32_t block, float *blk, void *stream,
                     sr_error *e) {
  int rc = sa_check_shape(s, &ix->d, 0, e);
  if (rc) return rc;
  if (!sa_block_lse_applies(s, block))
    return sr_input_error(e, NULL, "sa_fwd_block_lse", "needs the sm_90a image on this device, blocks of 64 or 128, "
                          "head_dim 64 or 128 and as many keys as queries (block %d, head_dim %d)", block, s->head_dim);
  if (!lse_run || !blk) return sr_input_error(e, NULL, "sa_fwd_block_lse", "lse_run and blk are required");
  // without o_run: no output and no P V, the rows' LSE written (not merged)
  fwd_args a = o_run ? fwd_args_of(s, q, k, v, pos, pos, ix, 0, NULL, NULL, NULL, o_run, lse_run)
                     : fwd_args_of(s, q, k, v, pos, pos, ix, 0, NULL, NULL, lse_run, NULL, NULL);
  a.blk = blk, a.blk_b = block;
  int64_t cells = (int64_t)s->heads * ix->d.n_qtiles;
  if (cells == 0) return SR_OK;
  return sa_fwd_ws_launch_blk(a, cells, s->head_dim, (cudaStream_t)stream, e);
}

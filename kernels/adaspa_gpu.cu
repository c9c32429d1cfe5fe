// adaspa_gpu.cu — AdaSpa's block search on the GPU (vs_gpu.h): block masses with a cached LSE on the tensor
// cores, and the per-row top-k block selection of plan/pattern_estimate.c's adaspa_select.
//
// Masses, two kernels (the choice: adaspa_gpu_block_mass_by): on Hopper for B = 64 or 128, kernels/adaspa_wgmma.cu
// (wgmma, warp-specialized); here the mma.sync one, for every B and any device of the build. One CTA of 8 warps
// per (head, tile of R = floor(256 / B) * B query rows, whole query blocks); each warp keeps the bf16 A fragments
// of its 32 rows in registers and walks the causal keys in 64-key chunks staged in shared memory (cp.async, two
// buffers), S = Q K^T by mma.sync m16n8k16 with fp32 accumulators, 16 keys at a
// time; p = exp2(s * scale * log2e - LSE * log2e) (ex2.approx), masked only in 16-key groups that reach the
// diagonal; each thread sums its p of the current key block in registers, and at a key block's end the warp
// reduces its sums by shuffles into shared memory, where the CTA adds its row tiles' sums (fixed order) into one
// fp32 write per (query block, key block). No atomics, so the masses are the same bits run to run.
// Accuracy against the float64 reference: docs/design.md, "AdaSpa's block masses on the GPU".
// The selection sorts each row by (mass desc, column asc) and keeps ceil((1 - sparsity) * (row + 1)) blocks,
// computed with the same rounded operations as the reference: O(P log^2 P) compare-exchanges a row (bitonic,
// P = the row's length rounded up to a power of two), so O(nb^2 log^2 nb) a head, a few hundred microseconds at
// nb = 1024 beside the masses' O(n^2 d).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/adaspa_wgmma.h"
#include "kernels/sa_cuda.cuh"
#include "kernels/sa_gpu.h"
#include "kernels/vs_gpu.h"

enum {
  AM_THREADS = 256,  // 8 warps of 32 query rows (two 16-row tiles each)
  AM_ROWS = 256,     // query rows staged per CTA; R = floor(AM_ROWS / B) * B of them are the CTA's
  AM_TILES = AM_ROWS / 16,
  AM_KC = 64,        // keys per chunk
  AS_THREADS = 1024,
  AS_MAX_NB = 8192
};

typedef struct {
  const __nv_bfloat16 *q, *k;
  const float *lse;
  float *mass;
  int64_t n, nb;
  int heads, kv_heads, B, R, n_ct;
  float scale_log2;
} mass_args;

// Add p = exp2(s * c + off) of a thread's elements of one 16-row x 16-key tile into *run, masking keys after their
// row when `diag` (j > i: the causal mask inside a diagonal group). Rows outside the sequence carry off = -inf.
__device__ __forceinline__ void add_probs(const float (*s)[4], float c, const float *off, int diag, int i0, int j0,
                                          float *run) {
  float p[8];
#pragma unroll
  for (int n = 0; n < 2; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float a = fmaf(s[n][e], c, off[e >> 1]);
      if (diag && j0 + 8 * n + (e & 1) > i0 + 8 * (e >> 1)) a = -INFINITY;
      p[n * 4 + e] = sa_exp2(a);
    }
  *run += ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

template <int D>
__global__ void __launch_bounds__(AM_THREADS, 2) adaspa_mass_kernel(const mass_args a) {
  const int S = D + 8;  // shared row stride in bf16 elements (the pad keeps ldmatrix free of bank conflicts)
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16 *sq = (__nv_bfloat16 *)smem, *sk = sq;  // Q is staged once, then the K buffers take its place
  __shared__ float ws[AM_TILES][4];                      // a row tile's sum of one key block (slot: key block % 4)
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

  // Heaviest tiles (longest causal rows) first; consecutive blocks take the heads of one KV head.
  int ct = a.n_ct - 1 - (int)(blockIdx.x / a.heads), h = (int)(blockIdx.x % a.heads);
  int kvh = h / (a.heads / a.kv_heads);
  int row0 = ct * a.R, pb0 = row0 / a.B;   // positions fit in 32 bits (checked on the host)
  int n_rows = min(a.R, (int)a.n - row0);  // the CTA's rows in the sequence
  int kend = row0 + n_rows;                // causal: keys before the CTA's last row + 1

  sa_load_rows<D, AM_ROWS, AM_THREADS>(sq, a.q + (int64_t)h * D, row0, NULL, n_rows, (int64_t)a.heads * D, tid);
  sa_cp_async_commit();
  sa_cp_async_wait<0>();
  __syncthreads();
  uint32_t qa[2][D / 16][4];
  sa_load_a<D>(qa[0], sq + (warp * 32) * S, S, lane);
  sa_load_a<D>(qa[1], sq + (warp * 32 + 16) * S, S, lane);
  __syncthreads();  // every warp holds its Q: the staging area becomes the K buffers

  // Per row tile mt: the first row, and each of this thread's two rows' -LSE * log2e (-inf: not a row of the
  // CTA, or no finite LSE, as adaspa_mass_add skips such rows).
  int rbase[2];
  float off[2][2], run[2] = {0.f, 0.f};
  int last_local = n_rows - 1;
#pragma unroll
  for (int mt = 0; mt < 2; mt++) {
    rbase[mt] = row0 + warp * 32 + mt * 16;
#pragma unroll
    for (int r = 0; r < 2; r++) {
      int local = warp * 32 + mt * 16 + g + 8 * r;
      float l = local <= last_local ? a.lse[(int64_t)h * a.n + (row0 + local)] : -INFINITY;
      off[mt][r] = l > -INFINITY && l < INFINITY ? -l * SA_LOG2E : -INFINITY;
    }
  }
  // The warp's first and last row of the CTA (last -1 when it has none): groups after its last are all masked.
  int wrows = min(32, n_rows - warp * 32);
  int wfirst = row0 + warp * 32, wlast = wrows > 0 ? wfirst + wrows - 1 : -1;

  int n_chunks = (kend + AM_KC - 1) / AM_KC;
  int64_t kstride = (int64_t)a.kv_heads * D;
  sa_load_rows<D, AM_KC, AM_THREADS>(sk, a.k + (int64_t)kvh * D, 0, NULL, min(AM_KC, kend), kstride, tid);
  sa_cp_async_commit();
  int mat = lane >> 3, krow = (lane & 7) + (mat >> 1) * 8, kcol = (mat & 1) * 8;
  int cur_cb = 0, next_end = a.B;  // the key block being summed, and the key after it

  for (int c = 0; c < n_chunks; c++) {
    int buf = c & 1;
    int k0 = c * AM_KC;
    if (c + 1 < n_chunks) {
      int k1 = k0 + AM_KC;
      sa_load_rows<D, AM_KC, AM_THREADS>(sk + (buf ^ 1) * AM_KC * S, a.k + (int64_t)kvh * D, k1, NULL,
                                         min(AM_KC, kend - k1), kstride, tid);
      sa_cp_async_commit();
      sa_cp_async_wait<1>();
    } else {
      sa_cp_async_wait<0>();
    }
    __syncthreads();  // chunk c is in place; the last chunk's combine has read ws
    const __nv_bfloat16 *kb = sk + buf * AM_KC * S;
    int cb_first = cur_cb, ended = 0;  // the key blocks that end in this chunk (at most 4, consecutive)

#pragma unroll
    for (int gi = 0; gi < AM_KC / 16; gi++) {
      int kg = k0 + 16 * gi;
      if (kg >= kend) break;  // the same for the whole CTA
      if (kg <= wlast) {
        float s[2][2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
          for (int n = 0; n < 2; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
          uint32_t r[4];
          sa_ldmatrix_x4(r, kb + (gi * 16 + krow) * S + kk * 16 + kcol);
#pragma unroll
          for (int mt = 0; mt < 2; mt++) {
            sa_mma(s[mt][0], qa[mt][kk], r[0], r[1]);
            sa_mma(s[mt][1], qa[mt][kk], r[2], r[3]);
          }
        }
        int diag = kg + 15 > wfirst;  // some key of the group lies after some row of the warp
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
          add_probs(s[mt], a.scale_log2, off[mt], diag, rbase[mt] + g, kg + 2 * t, &run[mt]);
      }
      if (kg + 16 == next_end || kg + 16 >= kend) {  // key block cur_cb ends here: the warp's sums out
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
          float v = run[mt];
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
          if (lane == 0) ws[warp * 2 + mt][cur_cb & 3] = v;
          run[mt] = 0.f;
        }
        cur_cb++, next_end += a.B, ended++;
      }
    }
    __syncthreads();  // ws holds the blocks that ended in this chunk; buffer buf is free for chunk c + 2
    int QB = a.R / a.B, tpb = a.B / 16;
    if (tid < ended * QB) {  // one thread a (query block, ended key block): its row tiles' sums in order
      int cb = cb_first + tid / QB, pb = pb0 + tid % QB;
      int rt0 = (tid % QB) * tpb;
      float v = 0.f;
      for (int x = 0; x < tpb; x++) v += ws[rt0 + x][cb & 3];
      if (pb < a.nb) a.mass[((int64_t)h * a.nb + pb) * a.nb + cb] = v;
    }
  }
}

static __device__ double block_sum_double(double v, double *s) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  double t = 0;
  for (int i = 0; i < (int)blockDim.x / 32; i++) t += s[i];
  __syncthreads();
  return t;
}

// Block (row pb, head h): sort the row's pb + 1 masses, keep the quota, set the mask bits, add kept / total.
__global__ void adaspa_select_kernel(const float *mass, int64_t nb, const double *sparsity, int64_t row_words,
                                     uint64_t *mask, double *kept, double *total) {
  extern __shared__ __align__(16) unsigned char smraw[];
  __shared__ double red[32];
  float *val = (float *)smraw;
  int32_t *col = (int32_t *)(val + AS_MAX_NB);
  int64_t pb = blockIdx.x;
  int h = blockIdx.y, t = threadIdx.x, n = (int)pb + 1;
  const float *row = mass + ((int64_t)h * nb + pb) * nb;
  uint64_t *mrow = mask + ((int64_t)h * nb + pb) * row_words;
  int P2 = 1;
  while (P2 < n) P2 <<= 1;
  double tot = 0;
  for (int x = t; x < P2; x += blockDim.x) {
    if (x < n) tot += row[x];
    val[x] = x < n ? row[x] : -INFINITY;
    col[x] = x < n ? x : 0x7fffffff;
  }
  for (int64_t w = t; w < row_words; w += blockDim.x) mrow[w] = 0;
  __syncthreads();
  for (int size = 2; size <= P2; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int x = t; x < P2; x += blockDim.x) {
        int y = x ^ stride;
        if (y <= x) continue;
        bool y_first = val[y] != val[x] ? val[y] > val[x] : col[y] < col[x];
        if ((x & size) == 0 ? y_first : !y_first) {
          float tv = val[x];
          val[x] = val[y], val[y] = tv;
          int32_t tc = col[x];
          col[x] = col[y], col[y] = tc;
        }
      }
      __syncthreads();
    }
  double s = sparsity[h];
  int64_t quota = (int64_t)ceil(__dadd_rn(__dmul_rn(1 - s, (double)n), -1e-9));  // the reference's rounding
  quota = max((int64_t)1, min((int64_t)n, quota));
  double kp = 0;
  for (int x = t; x < quota; x += blockDim.x) {
    atomicOr((unsigned long long *)&mrow[col[x] / 64], 1ull << (col[x] % 64));
    kp += val[x];
  }
  tot = block_sum_double(tot, red);
  kp = block_sum_double(kp, red);
  if (t == 0) atomicAdd(&kept[h], kp), atomicAdd(&total[h], tot);
}

#define ST(s) ((cudaStream_t)(s))

template <int D>
static int mass_launch(const mass_args &a, cudaStream_t st, sr_error *e) {
  size_t sm = sizeof(__nv_bfloat16) * (size_t)AM_ROWS * (D + 8);  // >= the two K buffers (2 x 64 rows)
  SA_CUDA(cudaFuncSetAttribute(adaspa_mass_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
  adaspa_mass_kernel<D><<<(unsigned)(a.n_ct * a.heads), AM_THREADS, sm, st>>>(a);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

// The kernel a call asked for or the environment forces (SR_ADASPA_KERNEL=mma|wgmma); AUTO: wgmma where it applies.
static int mass_kernel_of(adaspa_kernel asked, const void *q, const void *k, int64_t n, int32_t head_dim, int32_t block,
                          adaspa_kernel *k_out, sr_error *e) {
  if (asked == ADASPA_KERNEL_AUTO) {
    const char *v = getenv("SR_ADASPA_KERNEL");
    if (v && *v && strcmp(v, "mma") && strcmp(v, "wgmma"))
      return sr_input_error(e, NULL, "SR_ADASPA_KERNEL", "expected mma or wgmma, got '%s'", v);
    asked = !v || !*v ? ADASPA_KERNEL_AUTO : strcmp(v, "mma") == 0 ? ADASPA_KERNEL_MMA : ADASPA_KERNEL_WGMMA;
  }
  int wg = adaspa_gpu_wgmma_applies(q, k, n, head_dim, block);
  if (asked == ADASPA_KERNEL_WGMMA && !wg)
    return sr_input_error(e, NULL, "SR_ADASPA_KERNEL", "the wgmma AdaSpa kernel needs an sm_90a device, block 64 or 128 "
                          "(got %d), head_dim 64 or 128 (got %d) and 16-byte aligned Q and K", block, head_dim);
  *k_out = asked == ADASPA_KERNEL_AUTO ? (wg ? ADASPA_KERNEL_WGMMA : ADASPA_KERNEL_MMA) : asked;
  return SR_OK;
}

int adaspa_gpu_block_mass_by(adaspa_kernel kernel, const void *q, const void *k, int64_t n, int32_t heads,
                             int32_t kv_heads, int32_t head_dim, float scale, int32_t block, const float *lse,
                             float *mass, void *stream, sr_error *e) {
  if (block < 16 || block > 128 || block % 16 || heads < 1 || kv_heads < 1 || heads % kv_heads ||
      (head_dim != 64 && head_dim != 128))
    return sr_input_error(e, NULL, "estimate",
                          "bad AdaSpa shape for the GPU (block %d: a multiple of 16 up to 128; heads %d/%d; head_dim "
                          "%d: 64 or 128)", block, heads, kv_heads, head_dim);
  int64_t nb = (n + block - 1) / block;
  if (nb < 1) return SR_OK;
  adaspa_kernel kind = ADASPA_KERNEL_MMA;
  int rc = mass_kernel_of(kernel, q, k, n, head_dim, block, &kind, e);
  if (rc) return rc;
  mass_args a;
  a.q = (const __nv_bfloat16 *)q, a.k = (const __nv_bfloat16 *)k, a.lse = lse, a.mass = mass;
  a.n = n, a.nb = nb, a.heads = heads, a.kv_heads = kv_heads, a.B = block, a.R = AM_ROWS / block * block;
  int64_t n_ct = (n + a.R - 1) / a.R;
  if (n > INT32_MAX - AM_ROWS || n_ct * heads > INT32_MAX)
    return sr_input_error(e, NULL, "estimate", "%lld tokens of %d heads: too many for the GPU search", (long long)n, heads);
  a.n_ct = (int)n_ct;
  a.scale_log2 = scale * SA_LOG2E;
  // blocks above the diagonal stay 0 (the kernels write the causal ones and those their tiles reach)
  SA_CUDA(cudaMemsetAsync(mass, 0, sizeof(float) * (size_t)(heads * nb * nb), ST(stream)));
  if (kind == ADASPA_KERNEL_WGMMA)
    return adaspa_wgmma_block_mass(q, k, n, heads, kv_heads, head_dim, scale, block, lse, mass, stream, e);
  return head_dim == 64 ? mass_launch<64>(a, ST(stream), e) : mass_launch<128>(a, ST(stream), e);
}

int adaspa_gpu_block_mass(const void *q, const void *k, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim,
                          float scale, int32_t block, const float *lse, float *mass, void *stream, sr_error *e) {
  return adaspa_gpu_block_mass_by(ADASPA_KERNEL_AUTO, q, k, n, heads, kv_heads, head_dim, scale, block, lse, mass,
                                  stream, e);
}

// ---- masses from a dense pass's block table (sa_fwd_block_lse) -------------------------------------------

// One CTA of 8 warps a (query block pb, head); warp w takes key blocks w, w + 8, ... of the row, lane l the rows
// pb B + l + 32 j (j < B / 32) in order, then the warp's shuffle tree.
template <int B>
__global__ void adaspa_table_mass_kernel(const float *blk, const float *lse, int64_t n, int64_t nb, float *mass) {
  int64_t pb = blockIdx.x;
  int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t T = (n + SA_BM - 1) / SA_BM, row0 = pb * B, qt = row0 / SA_BM, kb = SA_BM / B;
  int ro = (int)(row0 % SA_BM);
  const float *slab = blk + ((int64_t)h * (T * (T + 1) / 2) + qt * (qt + 1) / 2) * kb * SA_BM;
  float l2[B / 32];
#pragma unroll
  for (int j = 0; j < B / 32; j++) {
    int64_t i = row0 + lane + 32 * j;
    l2[j] = i < n ? lse[(int64_t)h * n + i] * (float)SA_LOG2E : NAN;  // NAN: a row past n, skipped
  }
  float *out = mass + ((int64_t)h * nb + pb) * nb;
  for (int64_t cb = warp; cb < nb; cb += AM_THREADS / 32) {
    if (cb > pb) {
      if (lane == 0) out[cb] = 0.f;
      continue;
    }
    const float *col = slab + cb * SA_BM + ro + lane;
    float x = 0.f;
#pragma unroll
    for (int j = 0; j < B / 32; j++)
      if (isfinite(l2[j])) x += exp2f(col[32 * j] - l2[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    if (lane == 0) out[cb] = x;
  }
}

int adaspa_gpu_mass_from_table(const float *blk, const float *lse, int64_t n, int32_t heads, int32_t block,
                               float *mass, void *stream, sr_error *e) {
  if (block != 64 && block != 128)
    return sr_input_error(e, NULL, "block", "masses from a dense pass's table take blocks of 64 or 128, got %d", block);
  int64_t nb = (n + block - 1) / block;
  if (n < 1 || heads < 1) return SR_OK;
  dim3 grid((unsigned)nb, (unsigned)heads);
  if (block == 64) adaspa_table_mass_kernel<64><<<grid, AM_THREADS, 0, ST(stream)>>>(blk, lse, n, nb, mass);
  else adaspa_table_mass_kernel<128><<<grid, AM_THREADS, 0, ST(stream)>>>(blk, lse, n, nb, mass);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int adaspa_gpu_select(const float *mass, int32_t heads, int64_t nb, const double *sparsity, int64_t row_words,
                      uint64_t *mask, double *kept, double *total, void *stream, sr_error *e) {
  if (nb < 1 || nb > AS_MAX_NB)
    return sr_input_error(e, NULL, "blocks", "the GPU AdaSpa selection takes 1..%d block rows, got %lld", AS_MAX_NB,
                          (long long)nb);
  for (int h = 0; h < heads; h++)
    if (!(sparsity[h] >= 0 && sparsity[h] < 1))
      return sr_input_error(e, NULL, "sparsity", "head %d: %g outside [0, 1)", h, sparsity[h]);
  double *sp;
  SA_CUDA(cudaMalloc((void **)&sp, sizeof(double) * (size_t)heads));
  SA_CUDA(cudaMemcpy(sp, sparsity, sizeof(double) * (size_t)heads, cudaMemcpyHostToDevice));
  SA_CUDA(cudaMemsetAsync(kept, 0, sizeof(double) * (size_t)heads, ST(stream)));
  SA_CUDA(cudaMemsetAsync(total, 0, sizeof(double) * (size_t)heads, ST(stream)));
  size_t sm = (size_t)AS_MAX_NB * (4 + 4);
  SA_CUDA(cudaFuncSetAttribute(adaspa_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
  adaspa_select_kernel<<<dim3((unsigned)nb, (unsigned)heads), AS_THREADS, sm, ST(stream)>>>(mass, nb, sp, row_words,
                                                                                             mask, kept, total);
  cudaError_t r = cudaGetLastError();
  cudaStreamSynchronize(ST(stream));
  cudaFree(sp);
  if (r != cudaSuccess) return sr_internal_error(e, 0, "adaspa select: %s", cudaGetErrorString(r));
  return SR_OK;
}

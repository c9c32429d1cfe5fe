// adaspa_gpu.cu — AdaSpa's block search on the GPU (vs_gpu.h): block masses with a cached LSE and the
// per-row top-k block selection, as plan/pattern_estimate.c's adaspa_block_mass / adaspa_select.
//
// Scores are float64 sums of exact float products in dimension order (the reference's own order), so they
// equal the reference's; only exp (CUDA's, within 1 ulp) and the order of the mass sums differ, which
// moves masses by about 1e-15 relative. The selection sorts each row by (mass desc, column asc) and keeps
// ceil((1 - sparsity) * (row + 1)) blocks, computed with the same rounded operations as the reference.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "kernels/sa_gpu.h"
#include "kernels/vs_gpu.h"

enum { AM_THREADS = 256, AS_THREADS = 1024, AS_MAX_NB = 8192 };

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

// Block (query block pb, head h): mass[h][pb][cb] for every cb <= pb.
__global__ void adaspa_mass_kernel(const __nv_bfloat16 *q, const __nv_bfloat16 *k, int64_t n, int32_t heads,
                                   int32_t kv_heads, int32_t d, double scale, int32_t B, const float *lse,
                                   double *mass) {
  extern __shared__ float sm[];
  __shared__ double red[32];
  float *qs = sm, *ks = sm + B * d;
  int64_t pb = blockIdx.x, nb = gridDim.x;
  int h = blockIdx.y, kvh = h / (heads / kv_heads);
  int64_t q0 = pb * B;
  int rows = (int)min((int64_t)B, n - q0);
  for (int x = threadIdx.x; x < B * d; x += blockDim.x) {
    int i = x / d, c = x % d;
    qs[x] = i < rows ? __bfloat162float(q[((q0 + i) * heads + h) * d + c]) : 0.f;
  }
  for (int64_t cb = 0; cb <= pb; cb++) {
    int64_t k0 = cb * B;
    int cols = (int)min((int64_t)B, n - k0);
    __syncthreads();
    for (int x = threadIdx.x; x < B * d; x += blockDim.x) {
      int j = x / d, c = x % d;
      ks[x] = j < cols ? __bfloat162float(k[((k0 + j) * kv_heads + kvh) * d + c]) : 0.f;
    }
    __syncthreads();
    double acc = 0;
    for (int x = threadIdx.x; x < rows * cols; x += blockDim.x) {
      int i = x / cols, j = x % cols;
      if (k0 + j > q0 + i) continue;
      double s = 0;
      for (int c = 0; c < d; c++) s = fma((double)qs[i * d + c], (double)ks[j * d + c], s);
      acc += exp(__dmul_rn(s, scale) - (double)lse[(int64_t)h * n + q0 + i]);
    }
    acc = block_sum_double(acc, red);
    if (threadIdx.x == 0) mass[((int64_t)h * nb + pb) * nb + cb] = acc;
  }
}

// Block (row pb, head h): sort the row's pb + 1 masses, keep the quota, set the mask bits, add kept / total.
__global__ void adaspa_select_kernel(const double *mass, int64_t nb, const double *sparsity, int64_t row_words,
                                     uint64_t *mask, double *kept, double *total) {
  extern __shared__ __align__(16) unsigned char smraw[];
  __shared__ double red[32];
  double *val = (double *)smraw;
  int32_t *col = (int32_t *)(val + AS_MAX_NB);
  int64_t pb = blockIdx.x;
  int h = blockIdx.y, t = threadIdx.x, n = (int)pb + 1;
  const double *row = mass + ((int64_t)h * nb + pb) * nb;
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
          double tv = val[x];
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

int adaspa_gpu_block_mass(const void *q, const void *k, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim,
                          float scale, int32_t block, const float *lse, double *mass, void *stream, sr_error *e) {
  if (block < 1 || block > 128 || heads < 1 || kv_heads < 1 || heads % kv_heads || head_dim < 1 || head_dim > 128)
    return sr_input_error(e, NULL, "estimate", "bad AdaSpa shape (block %d <= 128, heads %d/%d, head_dim %d <= 128)",
                          block, heads, kv_heads, head_dim);
  int64_t nb = (n + block - 1) / block;
  if (nb < 1) return SR_OK;
  size_t sm = sizeof(float) * 2 * (size_t)block * (size_t)head_dim;
  SA_CUDA(cudaFuncSetAttribute(adaspa_mass_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
  SA_CUDA(cudaMemsetAsync(mass, 0, sizeof(double) * (size_t)(heads * nb * nb), ST(stream)));
  adaspa_mass_kernel<<<dim3((unsigned)nb, (unsigned)heads), AM_THREADS, sm, ST(stream)>>>(
      (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, n, heads, kv_heads, head_dim, (double)scale, block, lse, mass);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int adaspa_gpu_select(const double *mass, int32_t heads, int64_t nb, const double *sparsity, int64_t row_words,
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
  size_t sm = (size_t)AS_MAX_NB * (8 + 4);
  SA_CUDA(cudaFuncSetAttribute(adaspa_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
  adaspa_select_kernel<<<dim3((unsigned)nb, (unsigned)heads), AS_THREADS, sm, ST(stream)>>>(mass, nb, sp, row_words,
                                                                                             mask, kept, total);
  cudaError_t r = cudaGetLastError();
  cudaStreamSynchronize(ST(stream));
  cudaFree(sp);
  if (r != cudaSuccess) return sr_internal_error(e, 0, "adaspa select: %s", cudaGetErrorString(r));
  return SR_OK;
}

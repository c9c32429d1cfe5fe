// dist_cuda.cu — element-wise kernels of the CUDA backend of distributed attention (dist_cuda.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "exec/dist_cuda.h"

// Grid-stride loops: one launch covers any n with a bounded grid.
__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void add_kernel(float *dst, const float *src, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] += src[i];
}

__global__ void add2d_kernel(float *dst, int64_t dp, const float *src, int64_t sp, int64_t rows, int64_t width) {
  int64_t n = rows * width;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / width, x = i - r * width;
    dst[r * dp + x] += src[r * sp + x];
  }
}

__global__ void fill_kernel(float *x, float v, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) x[i] = v;
}

static int grid_for(int64_t n) {
  int64_t g = (n + 255) / 256;
  return (int)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

extern "C" int dist_cuda_to_bf16(void *dst, const float *src, int64_t n, void *stream) {
  if (n <= 0) return 0;
  to_bf16_kernel<<<grid_for(n), 256, 0, (cudaStream_t)stream>>>((__nv_bfloat16 *)dst, src, n);
  return (int)cudaGetLastError();
}

extern "C" int dist_cuda_add(float *dst, const float *src, int64_t n, void *stream) {
  if (n <= 0) return 0;
  add_kernel<<<grid_for(n), 256, 0, (cudaStream_t)stream>>>(dst, src, n);
  return (int)cudaGetLastError();
}

extern "C" int dist_cuda_add2d(float *dst, int64_t dst_pitch, const float *src, int64_t src_pitch, int64_t rows,
                               int64_t width, void *stream) {
  if (rows <= 0 || width <= 0) return 0;
  add2d_kernel<<<grid_for(rows * width), 256, 0, (cudaStream_t)stream>>>(dst, dst_pitch, src, src_pitch, rows, width);
  return (int)cudaGetLastError();
}

extern "C" int dist_cuda_fill(float *x, float value, int64_t n, void *stream) {
  if (n <= 0) return 0;
  fill_kernel<<<grid_for(n), 256, 0, (cudaStream_t)stream>>>(x, value, n);
  return (int)cudaGetLastError();
}

// merge.cu — standalone merge of a partial attention result (O_b bf16, LSE_b) into the running fp32
// (O, LSE), for steps whose forward did not merge in its epilogue. One warp per (row, head).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/sa_gpu.h"
#include "kernels/sparse_attn.h"

// O <- O - sigma(Lb - L)(O - Ob), L <- L + softplus(Lb - L) (docs/design.md, "The LSE merge");
// an empty partial (Lb = -inf) changes nothing; an empty running state takes the partial.
__global__ void sa_merge_kernel(int64_t n_q, int heads, int d, float *o, float *lse, const __nv_bfloat16 *o_b,
                                const float *lse_b) {
  int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x & 31;
  if (w >= n_q * heads) return;
  int64_t row = w / heads;
  int h = (int)(w % heads);
  float Lb = lse_b[(int64_t)h * n_q + row], L = lse[(int64_t)h * n_q + row];
  if (Lb == -INFINITY) return;
  float sig = 1.f, Lnew = Lb;
  if (L != -INFINITY) {
    float x = Lb - L, ex = expf(-fabsf(x));
    sig = x >= 0.f ? 1.f / (1.f + ex) : ex / (1.f + ex);
    Lnew = L + fmaxf(x, 0.f) + log1pf(ex);
  }
  float *orow = o + w * d;
  const __nv_bfloat16 *brow = o_b + w * d;
  for (int c = lane; c < d; c += 32) orow[c] -= sig * (orow[c] - __bfloat162float(brow[c]));
  if (lane == 0) lse[(int64_t)h * n_q + row] = Lnew;
}

int sa_merge(int64_t n_q, int32_t heads, int32_t head_dim, float *o, float *lse, const void *o_b, const float *lse_b,
             void *stream, sr_error *e) {
  int64_t warps = n_q * heads;
  if (warps == 0) return SR_OK;
  unsigned blocks = (unsigned)((warps * 32 + 255) / 256);
  sa_merge_kernel<<<blocks, 256, 0, (cudaStream_t)stream>>>(n_q, heads, head_dim, o, lse, (const __nv_bfloat16 *)o_b,
                                                            lse_b);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

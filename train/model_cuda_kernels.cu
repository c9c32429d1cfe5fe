// model_cuda_kernels.cu — the GPU transformer's kernels (declared in model_cuda_kernels.cuh): embedding,
// RMSNorm (fused with the residual copy, and in the backward with the next GEMM's operand), the q|k|v epilogue
// (biases, rotary, logn, bf16) and its backward, SwiGLU over the fused gate|up GEMM output, column sums,
// conversions, the naive reference attention, chunked cross-entropy, AdamW, gradient norm and the random init.
// Plain CUDA C: RMSNorm one warp a row (the backward summing the weight gradient in place of a column-sum pass),
// SwiGLU on 16-byte vectors, each with the element-wise or block-a-row form where a shape or alignment rules the
// fast one out; the rest one thread per element or one block per row. train/model_cuda.cu launches them, and
// train/model_ref.c is the CPU reference of each fused one (train-gpu-check runs both forms against it).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "train/model_cuda_kernels.cuh"

// ---- reductions ------------------------------------------------------------------------------

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

// Sum over a block of blockDim.x (a multiple of 32, at most 1024) threads; every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float sh[32];
  __syncthreads();  // sh may still be read by a previous call
  v = warp_sum(v);
  int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  return warp_sum(v);
}

// ---- kernels ---------------------------------------------------------------------------------

__global__ void embed_fwd_k(float *x, const float *wte, const int *tok, int64_t T, int C) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * C) return;
  int64_t t = i / C, c = i % C;
  x[i] = wte[(int64_t)tok[t] * C + c];
}

__global__ void embed_bwd_k(float *dwte, const float *dx, const int *tok, int64_t T, int C) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * C) return;
  int64_t t = i / C, c = i % C;
  atomicAdd(&dwte[(int64_t)tok[t] * C + c], dx[i]);
}

// ---- element access in the GEMM operands' dtype (fp32 arithmetic) ----------------------------------------

__device__ __forceinline__ float ld_f(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld_f(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st_f(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st_f(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16(v); }

template <typename Tt>
__global__ void rmsnorm_fwd_k(Tt *out, float *rstd, float *xcopy, const float *x, const float *w, int64_t T, int C,
                              float eps) {
  int64_t t = blockIdx.x;
  if (t >= T) return;
  const float *xt = x + t * C;
  float ss = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) ss += xt[i] * xt[i];
  ss = block_sum(ss);
  float r = rsqrtf(ss / (float)C + eps);
  if (threadIdx.x == 0) rstd[t] = r;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    st_f(out, t * C + i, xt[i] * r * w[i]);
    if (xcopy) xcopy[t * C + i] = xt[i];
  }
}

template <typename Tt>
__global__ void rmsnorm_bwd_k(float *dx, Tt *dx_act, float *tmp, const float *dout, const float *x, const float *w,
                              const float *rstd, int64_t T, int C) {
  int64_t t = blockIdx.x;
  if (t >= T) return;
  const float *xt = x + t * C, *dy = dout + t * C;
  float r = rstd[t], dot = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) dot += dy[i] * w[i] * xt[i];
  dot = block_sum(dot);
  float c = dot * r * r * r / (float)C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    float g = dx[t * C + i] + dy[i] * w[i] * r - c * xt[i];
    dx[t * C + i] = g;
    if (dx_act) st_f(dx_act, t * C + i, g);
    tmp[t * C + i] = dy[i] * xt[i] * r;
  }
}

// Four consecutive elements in the operands' dtype: a 16-byte store of fp32, an 8-byte store of bf16.
__device__ __forceinline__ void st4_f(float *p, int64_t i, float4 v) { *(float4 *)(p + i) = v; }
__device__ __forceinline__ void st4_f(__nv_bfloat16 *p, int64_t i, float4 v) {
  __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
  uint2 u;
  u.x = *(unsigned *)&a, u.y = *(unsigned *)&b;
  *(uint2 *)(p + i) = u;
}

// RMSNorm, one warp a row (C % 4 == 0, C <= 128 NV, 16-byte aligned rows): the row's float4s stay in registers
// between the sum of squares and the scaling, so x is read once; every load of a lane is issued before the first
// is used. One block a row (rmsnorm_fwd_k) kept 8 KB a block in flight and ran at about a third of the bandwidth.
template <typename Tt, int NV>
__global__ void rmsnorm_fwd_rows_k(Tt *out, float *rstd, float *xcopy, const float *x, const float *w, int64_t T,
                                   int C, float eps) {
  int64_t t = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32, n4 = C / 4;
  if (t >= T) return;
  const float4 *xt = (const float4 *)(x + t * C), *w4 = (const float4 *)w;
  float4 v[NV];
  float ss = 0;
#pragma unroll
  for (int k = 0; k < NV; k++) {
    int i = lane + 32 * k;
    v[k] = i < n4 ? xt[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
  }
  ss = warp_sum(ss);
  float r = rsqrtf(ss / (float)C + eps);
  if (lane == 0) rstd[t] = r;
#pragma unroll
  for (int k = 0; k < NV; k++) {
    int i = lane + 32 * k;
    if (i >= n4) break;
    float4 g = w4[i];
    st4_f(out, t * C + 4 * i, make_float4(v[k].x * r * g.x, v[k].y * r * g.y, v[k].z * r * g.z, v[k].w * r * g.w));
    if (xcopy) ((float4 *)(xcopy + t * C))[i] = v[k];
  }
}

// Its backward, one warp a row over a grid of resident blocks (rows strided by the grid): dx and dx_act as
// rmsnorm_bwd_k writes them, and the weight gradient dy x r summed over the block's rows in registers (lane l holds
// columns 4 (l + 32 k) .. + 3), then over the block's warps in shared memory, and added to dw (C floats of dynamic
// shared memory; any order: dw is not bit-reproducible, as with the column sums it replaces). No [T, C] scratch and
// no second kernel: the column-sum pass read 4 T C bytes again.
template <typename Tt, int NV>
__global__ void rmsnorm_bwd_rows_k(float *dx, Tt *dx_act, float *dw, const float *dout, const float *x, const float *w,
                                   const float *rstd, int64_t T, int C) {
  extern __shared__ float dw_sh[];
  int lane = threadIdx.x % 32, nw = blockDim.x / 32, n4 = C / 4;
  for (int i = threadIdx.x; i < C; i += blockDim.x) dw_sh[i] = 0;
  float4 acc[NV];
#pragma unroll
  for (int k = 0; k < NV; k++) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  const float4 *w4 = (const float4 *)w;
  for (int64_t t = (int64_t)blockIdx.x * nw + threadIdx.x / 32; t < T; t += (int64_t)gridDim.x * nw) {
    const float4 *dy = (const float4 *)(dout + t * C), *xt = (const float4 *)(x + t * C);
    float4 *dxt = (float4 *)(dx + t * C);
    float r = rstd[t], dot = 0;
#pragma unroll
    for (int k = 0; k < NV; k++) {
      int i = lane + 32 * k;
      if (i < n4) {
        float4 a = dy[i], b = xt[i], g = w4[i];
        dot += a.x * g.x * b.x + a.y * g.y * b.y + a.z * g.z * b.z + a.w * g.w * b.w;
      }
    }
    dot = warp_sum(dot);
    float c = dot * r * r * r / (float)C;
#pragma unroll
    for (int k = 0; k < NV; k++) {
      int i = lane + 32 * k;
      if (i >= n4) break;
      float4 a = dy[i], b = xt[i], g = w4[i], o = dxt[i];
      o.x += a.x * g.x * r - c * b.x, o.y += a.y * g.y * r - c * b.y;
      o.z += a.z * g.z * r - c * b.z, o.w += a.w * g.w * r - c * b.w;
      dxt[i] = o;
      if (dx_act) st4_f(dx_act, t * C + 4 * i, o);
      acc[k].x += a.x * b.x * r, acc[k].y += a.y * b.y * r, acc[k].z += a.z * b.z * r, acc[k].w += a.w * b.w * r;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < NV; k++) {
    int i = lane + 32 * k;
    if (i < n4) {
      atomicAdd(&dw_sh[4 * i], acc[k].x), atomicAdd(&dw_sh[4 * i + 1], acc[k].y);
      atomicAdd(&dw_sh[4 * i + 2], acc[k].z), atomicAdd(&dw_sh[4 * i + 3], acc[k].w);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < C; i += blockDim.x) atomicAdd(&dw[i], dw_sh[i]);
}

// out[c] += sum over rows of in[rows, C] (row stride ld); grid (ceil(C/32), splits), block (32, 8).
__global__ void colsum_k(float *out, const float *in, int64_t rows, int C, int64_t rows_per_split, int ld) {
  __shared__ float sh[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  int64_t r0 = blockIdx.y * rows_per_split, r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;
  float s = 0;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) s += in[r * ld + c];
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; k++) s += sh[k][threadIdx.x];
    atomicAdd(&out[c], s);
  }
}

__global__ void rope_table_k(float *cosv, float *sinv, const long long *pos, const double *inv_freq, double mscale,
                             int64_t T, int half) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * half) return;
  double ang = (double)pos[i / half] * inv_freq[i % half];
  cosv[i] = (float)(cos(ang) * mscale);
  sinv[i] = (float)(sin(ang) * mscale);
}

// model_logn_factor (plan/model.c), in double as on the CPU: 1 at positions within logn_len.
__device__ __forceinline__ float logn_factor(long long pos, long long logn_len) {
  return logn_len > 1 && pos + 1 > logn_len ? (float)(log((double)(pos + 1)) / log((double)logn_len)) : 1.0f;
}

__global__ void qkv_post_k(__nv_bfloat16 *q, __nv_bfloat16 *k, __nv_bfloat16 *v, const float *qkv, const float *bq,
                           const float *bk, const float *bv, const float *cosv, const float *sinv, const long long *pos,
                           long long logn_len, int64_t T, int Hq, int Hkv, int D) {
  int64_t t = blockIdx.x;
  if (t >= T) return;
  int half = D / 2, QD = Hq * D, KD = Hkv * D, W = QD + 2 * KD;
  const float *row = qkv + t * W;
  const float *cs = cosv + t * half, *sn = sinv + t * half;
  float fq = logn_factor(pos[t], logn_len);
  int nq = Hq * half, nk = Hkv * half;
  for (int j = threadIdx.x; j < nq + nk + KD; j += blockDim.x) {
    if (j < nq + nk) {  // a rotated pair (i, i + half) of a q or k head
      int kv = j >= nq, jj = kv ? j - nq : j, h = jj / half, i = jj % half, col = h * D + i;
      const float *src = row + (kv ? QD : 0), *b = kv ? bk : bq;
      float a = src[col] + (b ? b[col] : 0.0f), c = src[col + half] + (b ? b[col + half] : 0.0f);
      float f = kv ? 1.0f : fq, cc = cs[i] * f, ss = sn[i] * f;
      __nv_bfloat16 *dst = kv ? k + t * KD : q + t * QD;
      dst[col] = __float2bfloat16(a * cc - c * ss);
      dst[col + half] = __float2bfloat16(c * cc + a * ss);
    } else {
      int col = j - nq - nk;
      v[t * KD + col] = __float2bfloat16(row[QD + KD + col] + (bv ? bv[col] : 0.0f));
    }
  }
}

template <typename Tt>
__global__ void qkv_bwd_post_k(Tt *dqkv, float *dq, float *dk, const float *dv, const float *cosv, const float *sinv,
                               const long long *pos, long long logn_len, int64_t T, int Hq, int Hkv, int D) {
  int64_t t = blockIdx.x;
  if (t >= T) return;
  int half = D / 2, QD = Hq * D, KD = Hkv * D, W = QD + 2 * KD;
  const float *cs = cosv + t * half, *sn = sinv + t * half;
  float fq = logn_factor(pos[t], logn_len);
  int nq = Hq * half, nk = Hkv * half;
  for (int j = threadIdx.x; j < nq + nk + KD; j += blockDim.x) {
    if (j < nq + nk) {  // the transpose of the rotation: by the negative angle, with the same scale
      int kv = j >= nq, jj = kv ? j - nq : j, h = jj / half, i = jj % half, col = h * D + i;
      float *g = kv ? dk + t * KD : dq + t * QD;
      float f = kv ? 1.0f : fq, cc = cs[i] * f, ss = -sn[i] * f;
      float a = g[col], c = g[col + half], ra = a * cc - c * ss, rc = c * cc + a * ss;
      g[col] = ra, g[col + half] = rc;
      st_f(dqkv, t * W + (kv ? QD : 0) + col, ra);
      st_f(dqkv, t * W + (kv ? QD : 0) + col + half, rc);
    } else {
      int col = j - nq - nk;
      st_f(dqkv, t * W + QD + KD + col, dv[t * KD + col]);
    }
  }
}

template <typename Tt>
__global__ void swiglu_fwd_k(Tt *h, const Tt *gu, int64_t T, int I) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * I) return;
  int64_t t = i / I, j = i % I;
  float g = ld_f(gu, t * 2 * I + j), u = ld_f(gu, t * 2 * I + I + j);
  st_f(h, i, g / (1.0f + expf(-g)) * u);
}

template <typename Tt>
__global__ void swiglu_bwd_k(Tt *dgu, const Tt *dh, const Tt *gu, int64_t T, int I) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * I) return;
  int64_t t = i / I, j = i % I, a = t * 2 * I + j, b = a + I;
  float g = ld_f(gu, a), u = ld_f(gu, b), d = ld_f(dh, i), s = 1.0f / (1.0f + expf(-g));
  st_f(dgu, b, d * g * s);
  st_f(dgu, a, d * u * s * (1.0f + g * (1.0f - s)));
}

// SwiGLU on 16-byte vectors (8 bf16 or 4 fp32 of a row; I a multiple of the vector, 16-byte aligned rows): one
// division a vector instead of a 64-bit division and two 2-byte loads an element.
template <typename Tt>
__global__ void swiglu_fwd_vec_k(Tt *h, const Tt *gu, int64_t T, int I) {
  constexpr int V = 16 / sizeof(Tt);
  int iv = I / V;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * iv) return;
  int64_t t = i / iv, j = (i - t * iv) * V;
  uint4 gv = *(const uint4 *)(gu + t * 2 * I + j), uv = *(const uint4 *)(gu + t * 2 * I + I + j), hv;
  const Tt *g = (const Tt *)&gv, *u = (const Tt *)&uv;
  Tt *o = (Tt *)&hv;
#pragma unroll
  for (int k = 0; k < V; k++) {
    float a = ld_f(g, k);
    st_f(o, k, a / (1.0f + expf(-a)) * ld_f(u, k));
  }
  *(uint4 *)(h + t * I + j) = hv;
}

template <typename Tt>
__global__ void swiglu_bwd_vec_k(Tt *dgu, const Tt *dh, const Tt *gu, int64_t T, int I) {
  constexpr int V = 16 / sizeof(Tt);
  int iv = I / V;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * iv) return;
  int64_t t = i / iv, j = (i - t * iv) * V, a0 = t * 2 * I + j;
  uint4 gv = *(const uint4 *)(gu + a0), uv = *(const uint4 *)(gu + a0 + I), dv = *(const uint4 *)(dh + t * I + j);
  uint4 ga, ua;
  const Tt *g = (const Tt *)&gv, *u = (const Tt *)&uv, *d = (const Tt *)&dv;
  Tt *og = (Tt *)&ga, *ou = (Tt *)&ua;
#pragma unroll
  for (int k = 0; k < V; k++) {
    float x = ld_f(g, k), y = ld_f(u, k), z = ld_f(d, k), s = 1.0f / (1.0f + expf(-x));
    st_f(ou, k, z * x * s);
    st_f(og, k, z * y * s * (1.0f + x * (1.0f - s)));
  }
  *(uint4 *)(dgu + a0) = ga;
  *(uint4 *)(dgu + a0 + I) = ua;
}

template <typename To, typename Ti>
__global__ void convert_k(To *out, const Ti *in, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) st_f(out, i, ld_f(in, i));
}

#define NAIVE_MAX_D 256

__global__ void attn_naive_fwd_k(__nv_bfloat16 *o, float *lse, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                 const __nv_bfloat16 *v, const long long *pos, int64_t T, int H, int Hkv, int D) {
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= T * H || D > NAIVE_MAX_D) return;
  int64_t i = idx / H;
  int h = (int)(idx % H), kh = h / (H / Hkv);
  float scale = rsqrtf((float)D), mx = -INFINITY, sum = 0, acc[NAIVE_MAX_D];
  const __nv_bfloat16 *qi = q + idx * D;
  for (int d = 0; d < D; d++) acc[d] = 0;
  for (int64_t j = 0; j < T; j++) {
    if (pos[j] > pos[i]) continue;
    const __nv_bfloat16 *kj = k + (j * Hkv + kh) * D, *vj = v + (j * Hkv + kh) * D;
    float s = 0;
    for (int d = 0; d < D; d++) s += __bfloat162float(qi[d]) * __bfloat162float(kj[d]);
    s *= scale;
    float nm = fmaxf(mx, s), corr = expf(mx - nm), p = expf(s - nm);
    sum = sum * corr + p;
    for (int d = 0; d < D; d++) acc[d] = acc[d] * corr + p * __bfloat162float(vj[d]);
    mx = nm;
  }
  for (int d = 0; d < D; d++) o[idx * D + d] = __float2bfloat16(acc[d] / sum);
  lse[(int64_t)h * T + i] = mx + logf(sum);
}

__global__ void attn_naive_bwd_k(float *dq, float *dk, float *dv, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                 const __nv_bfloat16 *v, const __nv_bfloat16 *o, const float *lse,
                                 const __nv_bfloat16 *dout, const long long *pos, int64_t T, int H, int Hkv, int D) {
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= T * H) return;
  int64_t i = idx / H;
  int h = (int)(idx % H), kh = h / (H / Hkv);
  float scale = rsqrtf((float)D), L = lse[(int64_t)h * T + i], Di = 0;
  const __nv_bfloat16 *qi = q + idx * D, *oi = o + idx * D, *doi = dout + idx * D;
  float *dqi = dq + idx * D;
  for (int d = 0; d < D; d++) Di += __bfloat162float(doi[d]) * __bfloat162float(oi[d]);
  for (int64_t j = 0; j < T; j++) {
    if (pos[j] > pos[i]) continue;
    const __nv_bfloat16 *kj = k + (j * Hkv + kh) * D, *vj = v + (j * Hkv + kh) * D;
    float s = 0, dp = 0;
    for (int d = 0; d < D; d++)
      s += __bfloat162float(qi[d]) * __bfloat162float(kj[d]), dp += __bfloat162float(doi[d]) * __bfloat162float(vj[d]);
    float p = expf(s * scale - L), ds = p * (dp - Di) * scale;
    for (int d = 0; d < D; d++) {
      dqi[d] += ds * __bfloat162float(kj[d]);
      atomicAdd(&dk[(j * Hkv + kh) * D + d], ds * __bfloat162float(qi[d]));
      atomicAdd(&dv[(j * Hkv + kh) * D + d], p * __bfloat162float(doi[d]));
    }
  }
}

template <typename Tt>
__global__ void cross_entropy_k(Tt *logits, int V, const int *targets, float scale, int grads, float *losses,
                                int *argmax) {
  int64_t r = blockIdx.x;
  Tt *lg = logits + r * V;
  __shared__ float smax[32];
  __shared__ int sidx[32];
  float mx = -INFINITY;
  int mi = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float x = ld_f(lg, j);
    if (x > mx) mx = x, mi = j;
  }
  for (int o = 16; o > 0; o >>= 1) {
    float om = __shfl_xor_sync(0xffffffff, mx, o);
    int oi = __shfl_xor_sync(0xffffffff, mi, o);
    if (om > mx || (om == mx && oi < mi)) mx = om, mi = oi;
  }
  int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  if (lane == 0) smax[w] = mx, sidx[w] = mi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < nw; k++)
      if (smax[k] > smax[0] || (smax[k] == smax[0] && sidx[k] < sidx[0])) smax[0] = smax[k], sidx[0] = sidx[k];
  }
  __syncthreads();
  mx = smax[0];
  mi = sidx[0];
  float s = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(ld_f(lg, j) - mx);
  s = block_sum(s);
  int tgt = targets[r];
  if (threadIdx.x == 0) {
    argmax[r] = mi;
    losses[r] = tgt >= 0 ? mx + logf(s) - ld_f(lg, tgt) : 0.0f;
  }
  __syncthreads();  // lg[tgt] is read above before being overwritten below
  if (grads)
    for (int j = threadIdx.x; j < V; j += blockDim.x)
      st_f(lg, j, tgt < 0 ? 0.0f : (expf(ld_f(lg, j) - mx) / s - (j == tgt ? 1.0f : 0.0f)) * scale);
}

// ---- launchers of the templated kernels --------------------------------------------------------------------

#define BY_DTYPE(bf16, call_bf16, call_f32) \
  do {                                       \
    if (bf16) call_bf16;                     \
    else call_f32;                           \
  } while (0)
typedef __nv_bfloat16 bf16_t;

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Float4s a lane of rmsnorm_*_rows_k holds (C = 128 NV at most); 0 where the row kernels do not apply.
static int rows_nv(int C, const void *a, const void *b, const void *c, const void *d) {
  if (C <= 0 || C % 4 || C > 4096 || !aligned16(a) || !aligned16(b) || !aligned16(c) || !aligned16(d)) return 0;
  int n4 = C / 4, nv = 4;
  while (32 * nv < n4) nv *= 2;
  return nv;
}

#define ROWS_NV_SWITCH(nv, launch) \
  switch (nv) {                    \
    case 4: launch(4); break;      \
    case 8: launch(8); break;      \
    case 16: launch(16); break;    \
    default: launch(32); break;    \
  }

void rmsnorm_fwd_run(int bf16, void *out, float *rstd, float *xcopy, const float *x, const float *w, int64_t T, int C,
                     float eps, cudaStream_t st) {
  int nv = rows_nv(C, out, xcopy, x, w);
  if (nv && T > 0) {
    unsigned g = (unsigned)((T + 7) / 8);  // 8 rows (warps) a block
#define L(NV)                                                                                                  \
  BY_DTYPE(bf16, (rmsnorm_fwd_rows_k<bf16_t, NV><<<g, 256, 0, st>>>((bf16_t *)out, rstd, xcopy, x, w, T, C, eps)), \
           (rmsnorm_fwd_rows_k<float, NV><<<g, 256, 0, st>>>((float *)out, rstd, xcopy, x, w, T, C, eps)))
    ROWS_NV_SWITCH(nv, L)
#undef L
    return;
  }
  unsigned g = T > 0 ? (unsigned)T : 1u;
  BY_DTYPE(bf16, (rmsnorm_fwd_k<bf16_t><<<g, 256, 0, st>>>((bf16_t *)out, rstd, xcopy, x, w, T, C, eps)),
           (rmsnorm_fwd_k<float><<<g, 256, 0, st>>>((float *)out, rstd, xcopy, x, w, T, C, eps)));
}

// The backward's row kernel on a grid of the blocks the device holds at once (rows are strided over the grid, so a
// second wave would start its rows late), fewer for short calls.
template <typename Tt, int NV>
static void rmsnorm_bwd_rows_launch(float *dx, Tt *dx_act, float *dw, const float *dout, const float *x, const float *w,
                                    const float *rstd, int64_t T, int C, cudaStream_t st) {
  size_t sh = sizeof(float) * (size_t)C;
  int sms = 0, per = 0, dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, rmsnorm_bwd_rows_k<Tt, NV>, 256, sh) != cudaSuccess)
    sms = 1, per = 1;
  int64_t want = (T + 7) / 8, cap = (int64_t)(sms > 0 ? sms : 1) * (per > 0 ? per : 1);
  unsigned g = (unsigned)(want < cap ? want : cap);
  rmsnorm_bwd_rows_k<Tt, NV><<<g, 256, sh, st>>>(dx, dx_act, dw, dout, x, w, rstd, T, C);
}

void rmsnorm_bwd_run(int bf16, float *dx, void *dx_act, float *dw, float *tmp, const float *dout, const float *x,
                     const float *w, const float *rstd, int64_t T, int C, cudaStream_t st, int *need_colsum) {
  int nv = rows_nv(C, dx, dout, x, w);
  if (nv && T > 0 && (dx_act == NULL || ((uintptr_t)dx_act & (bf16 ? 7 : 15)) == 0)) {  // 4 elements a store
#define L(NV)                                                                                                \
  BY_DTYPE(bf16, (rmsnorm_bwd_rows_launch<bf16_t, NV>(dx, (bf16_t *)dx_act, dw, dout, x, w, rstd, T, C, st)), \
           (rmsnorm_bwd_rows_launch<float, NV>(dx, (float *)dx_act, dw, dout, x, w, rstd, T, C, st)))
    ROWS_NV_SWITCH(nv, L)
#undef L
    *need_colsum = 0;
    return;
  }
  unsigned g = T > 0 ? (unsigned)T : 1u;
  BY_DTYPE(bf16, (rmsnorm_bwd_k<bf16_t><<<g, 256, 0, st>>>(dx, (bf16_t *)dx_act, tmp, dout, x, w, rstd, T, C)),
           (rmsnorm_bwd_k<float><<<g, 256, 0, st>>>(dx, (float *)dx_act, tmp, dout, x, w, rstd, T, C)));
  *need_colsum = 1;
}

void qkv_bwd_post_run(int bf16, void *dqkv, float *dq, float *dk, const float *dv, const float *cosv, const float *sinv,
                      const long long *pos, long long logn_len, int64_t T, int Hq, int Hkv, int D, cudaStream_t st) {
  unsigned g = T > 0 ? (unsigned)T : 1u;
  BY_DTYPE(bf16,
           (qkv_bwd_post_k<bf16_t><<<g, 256, 0, st>>>((bf16_t *)dqkv, dq, dk, dv, cosv, sinv, pos, logn_len, T, Hq, Hkv, D)),
           (qkv_bwd_post_k<float><<<g, 256, 0, st>>>((float *)dqkv, dq, dk, dv, cosv, sinv, pos, logn_len, T, Hq, Hkv, D)));
}

static unsigned elem_grid(int64_t n) { return n > 0 ? (unsigned)((n + 255) / 256) : 1u; }

// The vector kernels where I is a multiple of 8 (bf16) or 4 (fp32) and the buffers are 16-byte aligned.
static int swiglu_vec(int bf16, int I, const void *a, const void *b, const void *c) {
  return I > 0 && I % (bf16 ? 8 : 4) == 0 && aligned16(a) && aligned16(b) && aligned16(c);
}

void swiglu_fwd_run(int bf16, void *h, const void *gu, int64_t T, int I, cudaStream_t st) {
  if (swiglu_vec(bf16, I, h, gu, gu)) {
    unsigned g = elem_grid(T * (I / (bf16 ? 8 : 4)));
    BY_DTYPE(bf16, (swiglu_fwd_vec_k<bf16_t><<<g, 256, 0, st>>>((bf16_t *)h, (const bf16_t *)gu, T, I)),
             (swiglu_fwd_vec_k<float><<<g, 256, 0, st>>>((float *)h, (const float *)gu, T, I)));
    return;
  }
  BY_DTYPE(bf16, (swiglu_fwd_k<bf16_t><<<elem_grid(T * I), 256, 0, st>>>((bf16_t *)h, (const bf16_t *)gu, T, I)),
           (swiglu_fwd_k<float><<<elem_grid(T * I), 256, 0, st>>>((float *)h, (const float *)gu, T, I)));
}

void swiglu_bwd_run(int bf16, void *dgu, const void *dh, const void *gu, int64_t T, int I, cudaStream_t st) {
  if (swiglu_vec(bf16, I, dgu, dh, gu)) {
    unsigned g = elem_grid(T * (I / (bf16 ? 8 : 4)));
    BY_DTYPE(bf16,
             (swiglu_bwd_vec_k<bf16_t><<<g, 256, 0, st>>>((bf16_t *)dgu, (const bf16_t *)dh, (const bf16_t *)gu, T, I)),
             (swiglu_bwd_vec_k<float><<<g, 256, 0, st>>>((float *)dgu, (const float *)dh, (const float *)gu, T, I)));
    return;
  }
  BY_DTYPE(bf16,
           (swiglu_bwd_k<bf16_t><<<elem_grid(T * I), 256, 0, st>>>((bf16_t *)dgu, (const bf16_t *)dh, (const bf16_t *)gu, T, I)),
           (swiglu_bwd_k<float><<<elem_grid(T * I), 256, 0, st>>>((float *)dgu, (const float *)dh, (const float *)gu, T, I)));
}

void to_bf16_run(__nv_bfloat16 *out, const float *in, int64_t n, cudaStream_t st) {
  convert_k<bf16_t, float><<<elem_grid(n), 256, 0, st>>>(out, in, n);
}

void from_bf16_run(float *out, const __nv_bfloat16 *in, int64_t n, cudaStream_t st) {
  convert_k<float, bf16_t><<<elem_grid(n), 256, 0, st>>>(out, in, n);
}

void cross_entropy_run(int bf16, void *logits, int64_t rows, int V, const int *targets, float scale, int grads,
                       float *losses, int *argmax, cudaStream_t st) {
  if (rows <= 0) return;
  BY_DTYPE(bf16,
           (cross_entropy_k<bf16_t><<<(unsigned)rows, 256, 0, st>>>((bf16_t *)logits, V, targets, scale, grads, losses, argmax)),
           (cross_entropy_k<float><<<(unsigned)rows, 256, 0, st>>>((float *)logits, V, targets, scale, grads, losses, argmax)));
}
#undef BY_DTYPE

__global__ void sumsq_k(double *out, const float *g, int64_t n) {
  float s = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    s += g[i] * g[i];
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(out, (double)s);
}

// AdamW on params[a, b) with moments indexed from lo (Loshchilov & Hutter 2019; Kingma & Ba 2015).
__global__ void adamw_k(float *w, const float *g, float *m, float *v, int64_t a, int64_t b, int64_t lo, float lr,
                        float b1, float b2, float bc1, float bc2, float eps, float wd, float gscale) {
  int64_t i = a + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= b) return;
  float gi = g[i] * gscale;
  float mi = b1 * m[i - lo] + (1.0f - b1) * gi, vi = b2 * v[i - lo] + (1.0f - b2) * gi * gi;
  m[i - lo] = mi;
  v[i - lo] = vi;
  w[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w[i]);
}

// Random init, draw for draw the host's model_init_random: splitmix64 is a counter generator (call k from
// seed s0 mixes s0 + k * golden), so element j of the drawing elements uses calls 2j + 1 and 2j + 2 of
// Box-Muller (model_cpu.c) without a sequential pass.
__device__ unsigned long long splitmix_at(unsigned long long s0, unsigned long long k) {
  unsigned long long z = s0 + k * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void init_normal_k(float *w, int64_t n, unsigned long long seed, unsigned long long first_draw, double std) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long j = first_draw + (unsigned long long)i;
  double u1 = ((double)(splitmix_at(seed, 2 * j + 1) >> 11) + 0.5) / 9007199254740992.0;
  double u2 = (double)(splitmix_at(seed, 2 * j + 2) >> 11) / 9007199254740992.0;
  w[i] = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2) * std);
}

__global__ void fill_k(float *w, int64_t n, float v) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] = v;
}


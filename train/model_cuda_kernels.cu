// model_cuda_kernels.cu — the GPU transformer's kernels (declared in model_cuda_kernels.cuh): embedding,
// RMSNorm, RoPE, SwiGLU, bias and column sums, bf16 conversion, the naive reference attention, chunked
// cross-entropy, AdamW, gradient norm and the random init. Plain CUDA C, one
// thread per element or one block per row; train/model_cuda.cu launches them.
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

__global__ void rmsnorm_fwd_k(float *out, float *rstd, const float *x, const float *w, int64_t T, int C, float eps) {
  int64_t t = blockIdx.x;
  if (t >= T) return;
  const float *xt = x + t * C;
  float ss = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) ss += xt[i] * xt[i];
  ss = block_sum(ss);
  float r = rsqrtf(ss / (float)C + eps);
  if (threadIdx.x == 0) rstd[t] = r;
  for (int i = threadIdx.x; i < C; i += blockDim.x) out[t * C + i] = xt[i] * r * w[i];
}

// dx += the RMSNorm input gradient; tmp = dy * x * r (column-summed into dw afterwards).
__global__ void rmsnorm_bwd_k(float *dx, float *tmp, const float *dout, const float *x, const float *w,
                              const float *rstd, int64_t T, int C) {
  int64_t t = blockIdx.x;
  if (t >= T) return;
  const float *xt = x + t * C, *dy = dout + t * C;
  float r = rstd[t], dot = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) dot += dy[i] * w[i] * xt[i];
  dot = block_sum(dot);
  float c = dot * r * r * r / (float)C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    dx[t * C + i] += dy[i] * w[i] * r - c * xt[i];
    tmp[t * C + i] = dy[i] * xt[i] * r;
  }
}

// out[c] += sum over rows of in[rows, C]; grid (ceil(C/32), splits), block (32, 8).
__global__ void colsum_k(float *out, const float *in, int64_t rows, int C, int64_t rows_per_split) {
  __shared__ float sh[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  int64_t r0 = blockIdx.y * rows_per_split, r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;
  float s = 0;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) s += in[r * C + c];
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; k++) s += sh[k][threadIdx.x];
    atomicAdd(&out[c], s);
  }
}

__global__ void add_bias_k(float *out, const float *b, int64_t T, int OC) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < T * OC) out[i] += b[i % OC];
}

__global__ void rope_table_k(float *cosv, float *sinv, const long long *pos, const double *inv_freq, double mscale,
                             int64_t T, int half) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * half) return;
  double ang = (double)pos[i / half] * inv_freq[i % half];
  cosv[i] = (float)(cos(ang) * mscale);
  sinv[i] = (float)(sin(ang) * mscale);
}

__global__ void rope_k(float *x, const float *cosv, const float *sinv, const long long *pos, long long logn_len,
                       int64_t T, int H, int D, int inverse) {
  int half = D / 2;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * H * half) return;
  int j = (int)(i % half);
  int64_t th = i / half, t = th / H;
  float c = cosv[t * half + j], s = sinv[t * half + j];
  if (logn_len > 1 && pos[t] + 1 > logn_len) {  // model_logn_factor, in double as on the CPU
    float f = (float)(log((double)(pos[t] + 1)) / log((double)logn_len));
    c *= f, s *= f;
  }
  if (inverse) s = -s;
  float *v = x + th * D;
  float a = v[j], b = v[j + half];
  v[j] = a * c - b * s;
  v[j + half] = b * c + a * s;
}

__global__ void swiglu_fwd_k(float *h, const float *gate, const float *up, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float g = gate[i];
  h[i] = g / (1.0f + expf(-g)) * up[i];
}

// In place: dgate may be gate and dup may be up (every input is read before either output is written).
__global__ void swiglu_bwd_k(float *dgate, float *dup, const float *dh, const float *gate, const float *up, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float g = gate[i], u = up[i], d = dh[i], s = 1.0f / (1.0f + expf(-g));
  dup[i] = d * g * s;
  dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
}

__global__ void add_k(float *out, const float *a, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += a[i];
}

__global__ void to_bf16_k(__nv_bfloat16 *out, const float *in, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(in[i]);
}

__global__ void from_bf16_k(float *out, const __nv_bfloat16 *in, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(in[i]);
}

// Naive dense causal attention by global position (one thread per query row and head), for single-GPU
// checks only: O(T^2) per head, no tiling.
__global__ void attn_naive_fwd_k(float *o, float *lse, const float *q, const float *k, const float *v,
                                 const long long *pos, int64_t T, int H, int Hkv, int D) {
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= T * H) return;
  int64_t i = idx / H;
  int h = (int)(idx % H), kh = h / (H / Hkv);
  float scale = rsqrtf((float)D), mx = -INFINITY, sum = 0;
  const float *qi = q + idx * D;
  float *oi = o + idx * D;
  for (int d = 0; d < D; d++) oi[d] = 0;
  for (int64_t j = 0; j < T; j++) {
    if (pos[j] > pos[i]) continue;
    const float *kj = k + (j * Hkv + kh) * D, *vj = v + (j * Hkv + kh) * D;
    float s = 0;
    for (int d = 0; d < D; d++) s += qi[d] * kj[d];
    s *= scale;
    float nm = fmaxf(mx, s), corr = expf(mx - nm), p = expf(s - nm);
    sum = sum * corr + p;
    for (int d = 0; d < D; d++) oi[d] = oi[d] * corr + p * vj[d];
    mx = nm;
  }
  for (int d = 0; d < D; d++) oi[d] /= sum;
  lse[(int64_t)h * T + i] = mx + logf(sum);
}

__global__ void attn_naive_bwd_k(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                                 const float *o, const float *lse, const float *dout, const long long *pos, int64_t T,
                                 int H, int Hkv, int D) {
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= T * H) return;
  int64_t i = idx / H;
  int h = (int)(idx % H), kh = h / (H / Hkv);
  float scale = rsqrtf((float)D), L = lse[(int64_t)h * T + i], Di = 0;
  const float *qi = q + idx * D, *oi = o + idx * D, *doi = dout + idx * D;
  float *dqi = dq + idx * D;
  for (int d = 0; d < D; d++) Di += doi[d] * oi[d];
  for (int64_t j = 0; j < T; j++) {
    if (pos[j] > pos[i]) continue;
    const float *kj = k + (j * Hkv + kh) * D, *vj = v + (j * Hkv + kh) * D;
    float s = 0, dp = 0;
    for (int d = 0; d < D; d++) s += qi[d] * kj[d], dp += doi[d] * vj[d];
    float p = expf(s * scale - L), ds = p * (dp - Di) * scale;
    for (int d = 0; d < D; d++) {
      dqi[d] += ds * kj[d];
      atomicAdd(&dk[(j * Hkv + kh) * D + d], ds * qi[d]);
      atomicAdd(&dv[(j * Hkv + kh) * D + d], p * doi[d]);
    }
  }
}

// One block per row of logits: loss, argmax, and (grads) dlogits = (softmax - onehot) * scale in place.
__global__ void cross_entropy_k(float *logits, int V, const int *targets, float scale, int grads, float *losses,
                                int *argmax) {
  int64_t r = blockIdx.x;
  float *lg = logits + r * V;
  __shared__ float smax[32];
  __shared__ int sidx[32];
  float mx = -INFINITY;
  int mi = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x)
    if (lg[j] > mx) mx = lg[j], mi = j;
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
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(lg[j] - mx);
  s = block_sum(s);
  int tgt = targets[r];
  if (threadIdx.x == 0) {
    argmax[r] = mi;
    losses[r] = tgt >= 0 ? mx + logf(s) - lg[tgt] : 0.0f;
  }
  __syncthreads();  // lg[tgt] is read above before being overwritten below
  if (grads)
    for (int j = threadIdx.x; j < V; j += blockDim.x)
      lg[j] = tgt < 0 ? 0.0f : (expf(lg[j] - mx) / s - (j == tgt ? 1.0f : 0.0f)) * scale;
}

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


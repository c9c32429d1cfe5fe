// model_cuda_kernels.cuh — the kernels of the GPU transformer (train/model_cuda_kernels.cu), one per op in
// llm.c's style, declared for train/model_cuda.cu and model_cuda_step.cu, which launch them. Kernels that read or
// write the GEMMs' operands do so in their dtype (bf16 with bf16 GEMMs, fp32 with TF32 GEMMs) and compute in
// fp32; train/model_ref.h holds the CPU reference of each fused kernel (train-gpu-check holds them to it).
#ifndef SR_MODEL_CUDA_KERNELS_CUH
#define SR_MODEL_CUDA_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void embed_fwd_k(float *x, const float *wte, const int *tok, int64_t T, int C);
__global__ void embed_bwd_k(float *dwte, const float *dx, const int *tok, int64_t T, int C);
// Kernels templated on the GEMM operands' dtype are launched through these (templates of kernels cannot be
// instantiated across translation units): bf16 selects __nv_bfloat16 operands, else fp32; `void *` arguments are
// in that dtype. Each queues its kernel on st; the caller checks cudaGetLastError.
// RMSNorm of rows of x into out; with xcopy != NULL also x copied there (the residual the next GEMM adds onto).
void rmsnorm_fwd_run(int bf16, void *out, float *rstd, float *xcopy, const float *x, const float *w, int64_t T, int C,
                     float eps, cudaStream_t st);
// dx += the RMSNorm input gradient, and with dx_act != NULL dx's new value as the next GEMMs' operand; the weight
// gradient dy * x * r summed over the rows: added into dw by the row kernel where it applies (*need_colsum = 0), else
// written row by row to tmp [T, C] for the caller's column sums (*need_colsum = 1).
void rmsnorm_bwd_run(int bf16, float *dx, void *dx_act, float *dw, float *tmp, const float *dout, const float *x,
                     const float *w, const float *rstd, int64_t T, int C, cudaStream_t st, int *need_colsum);
__global__ void colsum_k(float *out, const float *in, int64_t rows, int C, int64_t rows_per_split, int ld);
__global__ void rope_table_k(float *cosv, float *sinv, const long long *pos, const double *inv_freq, double mscale,
                             int64_t T, int half);
// The q|k|v GEMM outputs qkv [T, Hq*D + 2*Hkv*D] (fp32) into attention's bf16 q [T, Hq, D], k, v [T, Hkv, D]: biases
// added (NULL: none), q and k rotated (Hugging Face's rotate_half pairs), q scaled by logn attention's factor
// (logn_len > 1), rounded once. One block per token.
__global__ void qkv_post_k(__nv_bfloat16 *q, __nv_bfloat16 *k, __nv_bfloat16 *v, const float *qkv, const float *bq,
                           const float *bk, const float *bv, const float *cosv, const float *sinv, const long long *pos,
                           long long logn_len, int64_t T, int Hq, int Hkv, int D);
// Its backward: dq [T, Hq, D] and dk [T, Hkv, D] (fp32) rotated back in place (the forward's transpose, q's logn
// scale included) and dq|dk|dv written as the GEMM operand dqkv [T, Hq*D + 2*Hkv*D].
void qkv_bwd_post_run(int bf16, void *dqkv, float *dq, float *dk, const float *dv, const float *cosv, const float *sinv,
                      const long long *pos, long long logn_len, int64_t T, int Hq, int Hkv, int D, cudaStream_t st);
// SwiGLU over gu [T, 2I] (row t: gate then up): h [T, I] = silu(gate) * up.
void swiglu_fwd_run(int bf16, void *h, const void *gu, int64_t T, int I, cudaStream_t st);
// Its backward into dgu [T, 2I] (may be gu: each thread reads its gate and up before writing their gradients).
void swiglu_bwd_run(int bf16, void *dgu, const void *dh, const void *gu, int64_t T, int I, cudaStream_t st);
void to_bf16_run(__nv_bfloat16 *out, const float *in, int64_t n, cudaStream_t st);
void from_bf16_run(float *out, const __nv_bfloat16 *in, int64_t n, cudaStream_t st);
// Naive dense causal attention by global position (one thread per query row and head), for single-GPU checks:
// the distributed attention's interface (bf16 q, k, v, o, dout; fp32 lse, dq, dk, dv; dq, dk, dv zeroed first).
__global__ void attn_naive_fwd_k(__nv_bfloat16 *o, float *lse, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                 const __nv_bfloat16 *v, const long long *pos, int64_t T, int H, int Hkv, int D);
__global__ void attn_naive_bwd_k(float *dq, float *dk, float *dv, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                 const __nv_bfloat16 *v, const __nv_bfloat16 *o, const float *lse,
                                 const __nv_bfloat16 *dout, const long long *pos, int64_t T, int H, int Hkv, int D);
// One block a row of logits [rows, V]: loss, argmax, and (grads) dlogits = (softmax - onehot) * scale in place.
void cross_entropy_run(int bf16, void *logits, int64_t rows, int V, const int *targets, float scale, int grads,
                       float *losses, int *argmax, cudaStream_t st);
__global__ void sumsq_k(double *out, const float *g, int64_t n);
__global__ void adamw_k(float *w, const float *g, float *m, float *v, int64_t a, int64_t b, int64_t lo, float lr,
                        float b1, float b2, float bc1, float bc2, float eps, float wd, float gscale);
__global__ void init_normal_k(float *w, int64_t n, unsigned long long seed, unsigned long long first_draw, double std);
__global__ void fill_k(float *w, int64_t n, float v);

#endif

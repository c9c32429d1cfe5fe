// model_cuda_kernels.cuh — the kernels of the GPU transformer (train/model_cuda_kernels.cu), one per op in
// llm.c's style, declared for train/model_cuda.cu, which launches them.
#ifndef SR_MODEL_CUDA_KERNELS_CUH
#define SR_MODEL_CUDA_KERNELS_CUH

#include <cuda_bf16.h>
#include <stdint.h>

__global__ void embed_fwd_k(float *x, const float *wte, const int *tok, int64_t T, int C);
__global__ void embed_bwd_k(float *dwte, const float *dx, const int *tok, int64_t T, int C);
__global__ void rmsnorm_fwd_k(float *out, float *rstd, const float *x, const float *w, int64_t T, int C, float eps);
__global__ void rmsnorm_bwd_k(float *dx, float *tmp, const float *dout, const float *x, const float *w,
                              const float *rstd, int64_t T, int C);
__global__ void colsum_k(float *out, const float *in, int64_t rows, int C, int64_t rows_per_split);
__global__ void add_bias_k(float *out, const float *b, int64_t T, int OC);
__global__ void rope_table_k(float *cosv, float *sinv, const long long *pos, const double *inv_freq, double mscale,
                             int64_t T, int half);
// logn_len > 0 (queries under logn attention) also scales row t by model_logn_factor(pos[t], logn_len).
__global__ void rope_k(float *x, const float *cosv, const float *sinv, const long long *pos, long long logn_len,
                       int64_t T, int H, int D, int inverse);
__global__ void swiglu_fwd_k(float *h, const float *gate, const float *up, int64_t n);
__global__ void swiglu_bwd_k(float *dgate, float *dup, const float *dh, const float *gate, const float *up, int64_t n);
__global__ void add_k(float *out, const float *a, int64_t n);
__global__ void to_bf16_k(__nv_bfloat16 *out, const float *in, int64_t n);
__global__ void from_bf16_k(float *out, const __nv_bfloat16 *in, int64_t n);
__global__ void attn_naive_fwd_k(float *o, float *lse, const float *q, const float *k, const float *v,
                                 const long long *pos, int64_t T, int H, int Hkv, int D);
__global__ void attn_naive_bwd_k(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                                 const float *o, const float *lse, const float *dout, const long long *pos, int64_t T,
                                 int H, int Hkv, int D);
__global__ void cross_entropy_k(float *logits, int V, const int *targets, float scale, int grads, float *losses,
                                int *argmax);
__global__ void sumsq_k(double *out, const float *g, int64_t n);
__global__ void adamw_k(float *w, const float *g, float *m, float *v, int64_t a, int64_t b, int64_t lo, float lr,
                        float b1, float b2, float bc1, float bc2, float eps, float wd, float gscale);
__global__ void init_normal_k(float *w, int64_t n, unsigned long long seed, unsigned long long first_draw, double std);
__global__ void fill_k(float *w, int64_t n, float v);

#endif

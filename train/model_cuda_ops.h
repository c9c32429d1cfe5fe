// model_cuda_ops.h — the GPU model's fused kernels (train/model_cuda_kernels.cu) one at a time on host arrays,
// copied to the device and back, so `train-gpu-check` can hold each to its CPU reference (train/model_ref.h):
// the same arguments as the reference's, act_bf16 the GEMM operands' dtype. Arrays the kernel reads or writes in
// that dtype are passed as floats (rounded to bf16 on their way in when act_bf16; bf16 results come back exact).
// CUDA builds only; every call returns an sr_error naming the CUDA failure.
#ifndef SR_MODEL_CUDA_OPS_H
#define SR_MODEL_CUDA_OPS_H

#include <stdint.h>

#include "plan/error.h"

int model_cuda_op_rmsnorm_fwd(int act_bf16, const float *x, const float *w, int64_t T, int C, float eps, float *out,
                              float *rstd, sr_error *e);
// dx is read and written (the kernel adds onto it); dx_act receives the new dx as the GEMMs read it; dw [C] is read
// and written too (the weight gradient summed over the rows is added onto it).
int model_cuda_op_rmsnorm_bwd(int act_bf16, float *dx, float *dx_act, float *dw, const float *dout, const float *x,
                              const float *w, const float *rstd, int64_t T, int C, sr_error *e);
int model_cuda_op_qkv_post(const float *qkv, const float *bq, const float *bk, const float *bv, const float *cosv,
                           const float *sinv, const int64_t *pos, int64_t logn_len, int64_t T, int Hq, int Hkv, int D,
                           float *q, float *k, float *v, sr_error *e);
// dq and dk are read and written (rotated back in place).
int model_cuda_op_qkv_bwd_post(int act_bf16, float *dq, float *dk, const float *dv, const float *cosv, const float *sinv,
                               const int64_t *pos, int64_t logn_len, int64_t T, int Hq, int Hkv, int D, float *dqkv,
                               sr_error *e);
int model_cuda_op_swiglu_fwd(int act_bf16, const float *gu, int64_t T, int I, float *h, sr_error *e);
int model_cuda_op_swiglu_bwd(int act_bf16, const float *dh, const float *gu, int64_t T, int I, float *dgu, sr_error *e);
// logits are read and, with grads, overwritten by their gradient.
int model_cuda_op_cross_entropy(int act_bf16, float *logits, int64_t rows, int V, const int32_t *targets, float scale,
                                int grads, float *losses, int32_t *argmax, sr_error *e);

#endif

// model_ref.h — CPU references of the GPU model's fused kernels (train/model_cuda_kernels.cu): the same
// formulas as the CPU model's ops (train/model_ops.inc), with the kernels' roundings: where a kernel stores a
// value in bf16 (its GEMM operands with bf16 GEMMs, attention's q, k, v) the reference rounds it to bf16 the same
// way (round to nearest, ties to even). `train-gpu-check --kernels` holds each kernel to its reference: fp32
// outputs within a relative 1e-4 (sums in another order), bf16 outputs within one unit in the last place (a
// value on a rounding boundary may round either way after such a difference).
//
// act_bf16: the GEMM operands' dtype, 1 bf16 (values rounded), 0 fp32. Layouts as the kernels'.
#ifndef SR_MODEL_REF_H
#define SR_MODEL_REF_H

#include <stdint.h>

// x rounded to the nearest bfloat16 (ties to even; NaN and infinities kept), as a float.
float model_bf16_round(float x);
// RMSNorm rows: out [T, C] = x * r * w with r = 1 / sqrt(mean(x^2) + eps) (rstd [T] = r).
void model_ref_rmsnorm_fwd(int act_bf16, const float *x, const float *w, int64_t T, int C, float eps, float *out,
                           float *rstd);
// Its backward: dx += dy w r - x r^3 (dy . (w x)) / C; dx_act (may be NULL) = the new dx as the GEMMs read it;
// tmp = dy x r (the rows summed into the weight gradient).
void model_ref_rmsnorm_bwd(int act_bf16, float *dx, float *dx_act, float *tmp, const float *dout, const float *x,
                           const float *w, const float *rstd, int64_t T, int C);
// RoPE tables: cosv, sinv [T, half] = cos, sin (pos[t] inv_freq[i]) x mscale.
void model_ref_rope_table(const int64_t *pos, const double *inv_freq, double mscale, int64_t T, int half, float *cosv,
                          float *sinv);
// The q|k|v epilogue: qkv [T, Hq*D + 2*Hkv*D] plus biases (NULL: none), q and k rotated by (cosv, sinv) pairs
// (i, i + D/2), q scaled by model_logn_factor(pos, logn_len), all rounded to bf16: q [T, Hq*D], k, v [T, Hkv*D].
void model_ref_qkv_post(const float *qkv, const float *bq, const float *bk, const float *bv, const float *cosv,
                        const float *sinv, const int64_t *pos, int64_t logn_len, int64_t T, int Hq, int Hkv, int D,
                        float *q, float *k, float *v);
// Its backward: dq, dk rotated back in place (by the negative angle, q's logn scale too); dqkv [T, Hq*D + 2*Hkv*D]
// = dq | dk | dv as the GEMMs read them.
void model_ref_qkv_bwd_post(int act_bf16, float *dq, float *dk, const float *dv, const float *cosv, const float *sinv,
                            const int64_t *pos, int64_t logn_len, int64_t T, int Hq, int Hkv, int D, float *dqkv);
// SwiGLU over gu [T, 2I] (row: gate then up, as the GEMMs wrote them): h [T, I] = silu(gate) up.
void model_ref_swiglu_fwd(int act_bf16, const float *gu, int64_t T, int I, float *h);
// Its backward: dgu [T, 2I] = d(gate) | d(up) of dh.
void model_ref_swiglu_bwd(int act_bf16, const float *dh, const float *gu, int64_t T, int I, float *dgu);
// Cross-entropy rows of logits [rows, V] (as the GEMM wrote them): losses (0 where targets < 0), argmax (first of
// the largest), and with grads the logits overwritten by (softmax - onehot) x scale (0 rows where targets < 0).
void model_ref_cross_entropy(int act_bf16, float *logits, int64_t rows, int V, const int32_t *targets, float scale,
                             int grads, float *losses, int32_t *argmax);

#endif

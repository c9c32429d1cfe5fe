// model_cuda_step.cu — the GPU model's forward and backward (model_cuda_forward_backward): cuBLAS GEMMs for every
// linear layer and the LM head, the fused kernels of model_cuda_kernels.cu around them, attention through the
// callback (the distributed executor) on the same stream. The same sequence of operations as
// train/model_ops.inc, so the CPU model is its reference.
//
// Where the bytes go (bf16 GEMMs): every GEMM operand is produced in bf16 by the kernel before it (the RMSNorms
// write their output in bf16 and copy the residual the next GEMM accumulates onto; the q|k|v epilogue adds the
// biases, rotates, scales and rounds in one pass; the gate|up GEMM writes bf16 for SwiGLU, which writes the down
// GEMM's bf16 input; attention's bf16 output is the O GEMM's input as it is), the residual stream and every
// weight gradient stay fp32, and no activation is converted on its own pass.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/model_cuda_internal.cuh"
#include "train/model_cuda_kernels.cuh"

// ---- GEMMs (row-major [rows, features] seen by cuBLAS as column-major transposes) --------------------------

// C = op(A) op(B) + beta C, A and B in the operands' dtype (bf16 with fp32 accumulation, or fp32 on TF32 tensor
// cores), C of type ct (fp32, or the operands' dtype).
static int gemm(model_cuda *d, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                const void *B, int ldb, float beta, void *C, cudaDataType ct, int ldc, sr_error *e) {
  if (m <= 0 || n <= 0) return SR_OK;
  const float one = 1.0f;
  cudaDataType at = d->bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasComputeType_t comp = d->bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  CB(cublasGemmEx(d->blas, ta, tb, m, n, k, &one, A, at, lda, B, at, ldb, &beta, C, ct, ldc, comp, CUBLAS_GEMM_DEFAULT));
  return SR_OK;
}

static cudaDataType act_type(const model_cuda *d) { return d->bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// A weight as the GEMMs read it: its bf16 mirror (bf16) or the fp32 master (TF32).
static const void *weight(const model_cuda *d, const float *w) {
  return d->bf16 ? (const void *)(d->wb + (w - d->params)) : (const void *)w;
}

// Element offset of an operand pointer (act buffers are bf16 or fp32).
static void *act_at(const model_cuda *d, const void *p, int64_t elems) {
  return (char *)p + (size_t)elems * act_size(d);
}

// out [T, O] (row stride ldo, type ct) = inp [T, K] (row stride ldi) Wᵀ + beta out; W [O, K].
static int linear(model_cuda *d, void *out, cudaDataType ct, int ldo, const void *inp, int ldi, const float *w, int64_t T,
                  int K, int O, float beta, sr_error *e) {
  return gemm(d, CUBLAS_OP_T, CUBLAS_OP_N, O, (int)T, K, weight(d, w), K, inp, ldi, beta, out, ct, ldo, e);
}

// dinp [T, K] (row stride ldi, type ct) = dout [T, O] (row stride ldd) W + beta dinp.
static int linear_dinp(model_cuda *d, void *dinp, cudaDataType ct, int ldi, const void *dout, int ldd, const float *w,
                       int64_t T, int K, int O, float beta, sr_error *e) {
  return gemm(d, CUBLAS_OP_N, CUBLAS_OP_N, K, (int)T, O, weight(d, w), K, dout, ldd, beta, dinp, ct, ldi, e);
}

// dw [O, K] += doutᵀ inp (fp32, accumulated over the batch's samples).
static int linear_dw(model_cuda *d, float *dw, const void *dout, int ldd, const void *inp, int ldi, int64_t T, int K, int O,
                     sr_error *e) {
  return gemm(d, CUBLAS_OP_N, CUBLAS_OP_T, K, O, (int)T, inp, ldi, dout, ldd, 1.0f, dw, CUDA_R_32F, K, e);
}

// out[c] += column sums of in [rows, C] (row stride ld).
static int colsum(model_cuda *d, float *out, const float *in, int64_t rows, int C, int ld, sr_error *e) {
  int64_t splits = rows / 256 + 1;
  if (splits > 1024) splits = 1024;
  int64_t per = (rows + splits - 1) / splits;
  colsum_k<<<dim3((unsigned)((C + 31) / 32), (unsigned)splits), dim3(32, 8), 0, d->stream>>>(out, in, rows, C, per, ld);
  KCHECK();
  return SR_OK;
}

// dx += the RMSNorm input gradient of dout (and dx_act, when not NULL, = the new dx as the next GEMMs read it);
// dw += its weight gradient.
static int rmsnorm_bwd(model_cuda *d, float *dx, void *dx_act, float *dw, const float *dout, const float *x,
                       const float *w, const float *rstd, int64_t T, int C, sr_error *e) {
  float *tmp = d->qkv;  // free in the backward once the layer's q|k|v are rotated
  int rc = phase_to(d, TRAIN_PHASE_RMSNORM_BWD, e);
  if (rc) return rc;
  int sums;
  rmsnorm_bwd_run(d->bf16, dx, dx_act, dw, tmp, dout, x, w, rstd, T, C, d->stream, &sums);
  KCHECK();
  return sums ? colsum(d, dw, tmp, T, C, C, e) : SR_OK;
}

static int rmsnorm_fwd(model_cuda *d, void *out, float *rstd, float *xcopy, const float *x, const float *w, int64_t T,
                       int C, sr_error *e) {
  int rc = phase_to(d, TRAIN_PHASE_RMSNORM_FWD, e);
  if (rc) return rc;
  rmsnorm_fwd_run(d->bf16, out, rstd, xcopy, x, w, T, C, (float)d->cfg.rms_norm_eps, d->stream);
  KCHECK();
  return SR_OK;
}

// ---- attention ------------------------------------------------------------------------------

// Attention time without host syncs: an event before and after every attention call on the stream, read
// by model_cuda_attn_time once the work is done (a sync per attention call would serialise host and GPU).
static int timer_mark(model_cuda *d, sr_error *e) {
  if (d->n_ev == d->cap_ev) {
    int cap = d->cap_ev ? 2 * d->cap_ev : 64;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(d->ev, (size_t)cap * sizeof *ev);
    if (!ev) return sr_internal_error(e, 0, "model_cuda: out of memory for timing events");
    d->ev = ev;
    for (int i = d->cap_ev; i < cap; i++) CU(cudaEventCreate(&d->ev[i]));
    d->cap_ev = cap;
  }
  CU(cudaEventRecord(d->ev[d->n_ev++], d->stream));
  return SR_OK;
}

extern "C" int model_cuda_attn_time(model_cuda *d, double *seconds, sr_error *e) {
  *seconds = 0;
  if (d->n_ev == 0) return SR_OK;
  CU(cudaEventSynchronize(d->ev[d->n_ev - 1]));
  for (int i = 0; i + 1 < d->n_ev; i += 2) {
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, d->ev[i], d->ev[i + 1]));
    *seconds += 1e-3 * ms;
  }
  d->n_ev = 0;
  return SR_OK;
}

static int attention_fwd(model_cuda *d, int l, int64_t T, layer_buf *a, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int rc = phase_to(d, TRAIN_PHASE_ATTN_FWD, e);
  if (!rc && attn_s) rc = timer_mark(d, e);
  if (rc) return rc;
  if (d->attn.forward) {
    if ((rc = d->attn.forward(d->attn.ctx, l, T, a->qb, a->kb, a->vb, a->ob, a->lse, e))) return rc;
  } else {
    attn_naive_fwd_k<<<grid_for(T * c->num_heads, 128), 128, 0, d->stream>>>(
        a->ob, a->lse, a->qb, a->kb, a->vb, d->pos, T, (int)c->num_heads, (int)c->num_kv_heads, (int)c->head_dim);
    KCHECK();
  }
  return attn_s ? timer_mark(d, e) : SR_OK;
}

// dq, dk, dv (fp32, written) from the layer's q, k, v, o, lse and d->dob.
static int attention_bwd(model_cuda *d, int l, int64_t T, layer_buf *a, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int64_t QD = c->num_heads * c->head_dim, KD = c->num_kv_heads * c->head_dim;
  int rc = phase_to(d, TRAIN_PHASE_ATTN_BWD, e);
  if (!rc && attn_s) rc = timer_mark(d, e);
  if (rc) return rc;
  if (d->attn.backward) {
    if ((rc = d->attn.backward(d->attn.ctx, l, T, a->qb, a->kb, a->vb, a->ob, a->lse, d->dob, d->dq, d->dk, d->dv, e)))
      return rc;
  } else {
    CU(cudaMemsetAsync(d->dq, 0, (size_t)(T * QD) * sizeof(float), d->stream));
    CU(cudaMemsetAsync(d->dk, 0, (size_t)(T * KD) * sizeof(float), d->stream));
    CU(cudaMemsetAsync(d->dv, 0, (size_t)(T * KD) * sizeof(float), d->stream));
    attn_naive_bwd_k<<<grid_for(T * c->num_heads, 128), 128, 0, d->stream>>>(
        d->dq, d->dk, d->dv, a->qb, a->kb, a->vb, a->ob, a->lse, d->dob, d->pos, T, (int)c->num_heads,
        (int)c->num_kv_heads, (int)c->head_dim);
    KCHECK();
  }
  return attn_s ? timer_mark(d, e) : SR_OK;
}

// ---- the MLP, a chunk of rows at a time -------------------------------------------------------

// Chunk rows [t0, ...)'s gate|up and h: the layer's own rows where it keeps them all (no recomputation, or a layer
// kept whole), else the shared set's chunk buffers.
static void mlp_rows(const model_cuda *d, int l, int64_t t0, void **gu, void **h) {
  int64_t I = d->cfg.intermediate_size, row0 = keeps_all(d, l) ? t0 : 0;
  *gu = act_at(d, d->acts[l].gu, row0 * 2 * I);
  *h = act_at(d, d->acts[l].h, row0 * I);
}

// gate|up (one GEMM each into the halves of a row) and h = silu(gate) * up of the chunk's n rows from t0.
static int mlp_up(model_cuda *d, int l, int64_t t0, int64_t n, void *gu, void *h, sr_error *e) {
  int C = (int)d->cfg.hidden_size, I = (int)d->cfg.intermediate_size;
  cudaDataType at = act_type(d);
  const void *ln2 = act_at(d, d->acts[l].ln2, t0 * C);
  int rc;
  if ((rc = phase_to(d, TRAIN_PHASE_GATE_UP_FWD, e)) ||
      (rc = linear(d, gu, at, 2 * I, ln2, C, LPD(d, l, MODEL_T_GATE), n, C, I, 0.0f, e)) ||
      (rc = linear(d, act_at(d, gu, I), at, 2 * I, ln2, C, LPD(d, l, MODEL_T_UP), n, C, I, 0.0f, e)) ||
      (rc = phase_to(d, TRAIN_PHASE_SWIGLU_FWD, e)))
    return rc;
  swiglu_fwd_run(d->bf16, h, gu, n, I, d->stream);
  KCHECK();
  return SR_OK;
}

// xo += the MLP of the layer's ln2 (xo holds the residual x2 on entry), chunk by chunk.
static int mlp_fwd(model_cuda *d, int l, int64_t T, float *xo, sr_error *e) {
  int C = (int)d->cfg.hidden_size, I = (int)d->cfg.intermediate_size;
  int rc;
  for (int64_t t0 = 0; t0 < T; t0 += d->mlp_rows) {
    int64_t n = sr_min64(d->mlp_rows, T - t0);
    void *gu, *h;
    mlp_rows(d, l, t0, &gu, &h);
    if ((rc = mlp_up(d, l, t0, n, gu, h, e)) || (rc = phase_to(d, TRAIN_PHASE_DOWN_FWD, e)) ||
        (rc = linear(d, xo + t0 * C, CUDA_R_32F, C, h, I, LPD(d, l, MODEL_T_DOWN), n, I, C, 1.0f, e)))
      return rc;
  }
  return SR_OK;
}

// d->dln = the post-attention norm output's gradient from d->dxb, chunk by chunk: under recomputation the chunk's
// gate|up and h remade first (not in a layer kept whole, which has them all); then dh, SwiGLU's backward (dgate|dup
// over gate|up, which nothing reads after) and the chunk's rows of dln. The weight gradients add up over the chunks (linear_dw accumulates: beta 1), each row once.
static int mlp_bwd(model_cuda *d, int l, int64_t T, sr_error *e) {
  int C = (int)d->cfg.hidden_size, I = (int)d->cfg.intermediate_size;
  cudaDataType at = act_type(d);
  int rc;
  for (int64_t t0 = 0; t0 < T; t0 += d->mlp_rows) {
    int64_t n = sr_min64(d->mlp_rows, T - t0);
    void *gu, *h;
    mlp_rows(d, l, t0, &gu, &h);
    const void *dxb = act_at(d, d->dxb, t0 * C), *ln2 = act_at(d, d->acts[l].ln2, t0 * C);
    float *dln = d->dln + t0 * C;
    if (!keeps_all(d, l)) {  // the chunk's gate|up and h again, timed as recomputation
      d->ph_rerun = 1;
      rc = mlp_up(d, l, t0, n, gu, h, e);
      d->ph_rerun = 0;
      if (rc) return rc;
    }
    if ((rc = phase_to(d, TRAIN_PHASE_DOWN_DGRAD, e)) ||
        (rc = linear_dinp(d, d->dh, at, I, dxb, C, LPD(d, l, MODEL_T_DOWN), n, I, C, 0.0f, e)) ||
        (rc = phase_to(d, TRAIN_PHASE_DOWN_WGRAD, e)) ||
        (rc = linear_dw(d, LGD(d, l, MODEL_T_DOWN), dxb, C, h, I, n, I, C, e)) ||
        (rc = phase_to(d, TRAIN_PHASE_SWIGLU_BWD, e)))
      return rc;
    swiglu_bwd_run(d->bf16, gu, d->dh, gu, n, I, d->stream);
    KCHECK();
    const void *dgate = gu, *dup = act_at(d, gu, I);
    if ((rc = phase_to(d, TRAIN_PHASE_GATE_UP_DGRAD, e)) ||
        (rc = linear_dinp(d, dln, CUDA_R_32F, C, dgate, 2 * I, LPD(d, l, MODEL_T_GATE), n, C, I, 0.0f, e)) ||
        (rc = linear_dinp(d, dln, CUDA_R_32F, C, dup, 2 * I, LPD(d, l, MODEL_T_UP), n, C, I, 1.0f, e)) ||
        (rc = phase_to(d, TRAIN_PHASE_GATE_UP_WGRAD, e)) ||
        (rc = linear_dw(d, LGD(d, l, MODEL_T_GATE), dgate, 2 * I, ln2, C, n, C, I, e)) ||
        (rc = linear_dw(d, LGD(d, l, MODEL_T_UP), dup, 2 * I, ln2, C, n, C, I, e)))
      return rc;
  }
  return SR_OK;
}

// ---- layers ---------------------------------------------------------------------------------

// recomputing: the forward rerun inside the backward, up to the post-attention norm (mlp_bwd remakes the MLP's
// activations a chunk at a time, and nothing reads the layer's output x[l + 1] again: it is not written, which
// also leaves an offloaded input's slot alone); under selective recomputation a layer that keeps takes attention's
// output and LSE of the first forward, bit for bit those a rerun would give.
static int layer_fwd(model_cuda *d, int l, int64_t T, int recomputing, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int C = (int)c->hidden_size, Hq = (int)c->num_heads, Hkv = (int)c->num_kv_heads, D = (int)c->head_dim,
      QD = Hq * D, KD = Hkv * D, W = QD + 2 * KD;
  layer_buf *a = &d->acts[l];
  float *x = d->x[l], *xo = d->x[l + 1];
  int rc;
  d->ph_rerun = recomputing;  // the rerun's pieces are timed as recomputation
  // x2 = x: the residual the O GEMM adds onto, copied by the norm that reads x anyway
  if ((rc = rmsnorm_fwd(d, a->ln1, a->rstd1, a->x2, x, LPD(d, l, MODEL_T_LN1), T, C, e))) return rc;
  if ((rc = phase_to(d, TRAIN_PHASE_QKV_FWD, e)) ||
      (rc = linear(d, d->qkv, CUDA_R_32F, W, a->ln1, C, LPD(d, l, MODEL_T_Q), T, C, QD, 0.0f, e)) ||
      (rc = linear(d, d->qkv + QD, CUDA_R_32F, W, a->ln1, C, LPD(d, l, MODEL_T_K), T, C, KD, 0.0f, e)) ||
      (rc = linear(d, d->qkv + QD + KD, CUDA_R_32F, W, a->ln1, C, LPD(d, l, MODEL_T_V), T, C, KD, 0.0f, e)) ||
      (rc = phase_to(d, TRAIN_PHASE_ROPE_FWD, e)))
    return rc;
  qkv_post_k<<<rows_grid(T), 256, 0, d->stream>>>(a->qb, a->kb, a->vb, d->qkv, LPD(d, l, MODEL_T_QB), LPD(d, l, MODEL_T_KB),
                                                  LPD(d, l, MODEL_T_VB), d->cosv, d->sinv, d->pos, c->logn_seq_length, T,
                                                  Hq, Hkv, D);
  KCHECK();
  int kept = d->recompute == MODEL_RECOMPUTE_KEEP_ATTN && l < d->keep_layers;  // model_cpu_keeps_attn's rule
  if (!(recomputing && kept) && (rc = attention_fwd(d, l, T, a, attn_s, e)))
    return rc;
  const void *o = a->ob;
  if (!d->bf16) {  // TF32 GEMMs read fp32
    if ((rc = phase_to(d, TRAIN_PHASE_CASTS, e))) return rc;
    from_bf16_run(d->ob_act, a->ob, T * QD, d->stream);
    KCHECK();
    o = d->ob_act;
  }
  if ((rc = phase_to(d, TRAIN_PHASE_O_FWD, e)) ||
      (rc = linear(d, a->x2, CUDA_R_32F, C, o, QD, LPD(d, l, MODEL_T_O), T, QD, C, 1.0f, e)))
    return rc;
  // xo = x2: the residual the down GEMM adds onto (not when recomputing: the MLP waits for the backward)
  if ((rc = rmsnorm_fwd(d, a->ln2, a->rstd2, recomputing ? NULL : xo, a->x2, LPD(d, l, MODEL_T_LN2), T, C, e)))
    return rc;
  d->ph_rerun = 0;
  return recomputing ? SR_OK : mlp_fwd(d, l, T, xo, e);
}

// The attention block's gradients from d->dxb (the layer output's gradient as the GEMMs read it): O's weight, dob,
// attention, the rotations back, q|k|v's weights and biases, and dln = the first norm's output gradient.
static int attn_block_bwd(model_cuda *d, int l, int64_t T, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int C = (int)c->hidden_size, Hq = (int)c->num_heads, Hkv = (int)c->num_kv_heads, D = (int)c->head_dim, QD = Hq * D,
      KD = Hkv * D, W = QD + 2 * KD;
  layer_buf *a = &d->acts[l];
  int rc;
  // attention's dout straight in bf16 (TF32: in fp32, then converted)
  if ((rc = phase_to(d, TRAIN_PHASE_O_DGRAD, e))) return rc;
  if (d->bf16) {
    if ((rc = linear_dinp(d, d->dob, CUDA_R_16BF, QD, d->dxb, C, LPD(d, l, MODEL_T_O), T, QD, C, 0.0f, e))) return rc;
  } else {
    if ((rc = linear_dinp(d, d->dob_act, CUDA_R_32F, QD, d->dxb, C, LPD(d, l, MODEL_T_O), T, QD, C, 0.0f, e)) ||
        (rc = phase_to(d, TRAIN_PHASE_CASTS, e)))
      return rc;
    to_bf16_run(d->dob, d->dob_act, T * QD, d->stream);
    KCHECK();
    // TF32: the O GEMM's fp32 input again (one scratch serves every layer)
    from_bf16_run(d->ob_act, a->ob, T * QD, d->stream);
    KCHECK();
  }
  if ((rc = phase_to(d, TRAIN_PHASE_O_WGRAD, e)) ||
      (rc = linear_dw(d, LGD(d, l, MODEL_T_O), d->dxb, C, d->bf16 ? (const void *)a->ob : d->ob_act, QD, T, QD, C, e)) ||
      (rc = attention_bwd(d, l, T, a, attn_s, e)) || (rc = phase_to(d, TRAIN_PHASE_ROPE_BWD, e)))
    return rc;
  qkv_bwd_post_run(d->bf16, d->dqkv, d->dq, d->dk, d->dv, d->cosv, d->sinv, d->pos, c->logn_seq_length, T, Hq, Hkv, D,
                   d->stream);
  KCHECK();
  const void *dq = d->dqkv, *dk = act_at(d, d->dqkv, QD), *dv = act_at(d, d->dqkv, QD + KD);
  if ((rc = phase_to(d, TRAIN_PHASE_QKV_DGRAD, e)) ||
      (rc = linear_dinp(d, d->dln, CUDA_R_32F, C, dq, W, LPD(d, l, MODEL_T_Q), T, C, QD, 0.0f, e)) ||
      (rc = linear_dinp(d, d->dln, CUDA_R_32F, C, dk, W, LPD(d, l, MODEL_T_K), T, C, KD, 1.0f, e)) ||
      (rc = linear_dinp(d, d->dln, CUDA_R_32F, C, dv, W, LPD(d, l, MODEL_T_V), T, C, KD, 1.0f, e)) ||
      (rc = phase_to(d, TRAIN_PHASE_QKV_WGRAD, e)))
    return rc;
  // the biases' gradients from the fp32 dq, dk, dv (which the input gradients above do not touch)
  if (LGD(d, l, MODEL_T_QB) &&
      ((rc = colsum(d, LGD(d, l, MODEL_T_QB), d->dq, T, QD, QD, e)) || (rc = colsum(d, LGD(d, l, MODEL_T_KB), d->dk, T, KD, KD, e)) ||
       (rc = colsum(d, LGD(d, l, MODEL_T_VB), d->dv, T, KD, KD, e))))
    return rc;
  if ((rc = linear_dw(d, LGD(d, l, MODEL_T_Q), dq, W, a->ln1, C, T, C, QD, e)) ||
      (rc = linear_dw(d, LGD(d, l, MODEL_T_K), dk, W, a->ln1, C, T, C, KD, e)))
    return rc;
  return linear_dw(d, LGD(d, l, MODEL_T_V), dv, W, a->ln1, C, T, C, KD, e);
}

// d->dx holds dL/d(layer output) and d->dxb the same as the GEMMs read it on entry; both hold dL/d(layer input)
// on return. A layer kept whole reruns nothing: its forward's activations are all there.
static int layer_bwd(model_cuda *d, int l, int64_t T, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int C = (int)c->hidden_size;
  int rc;
  if ((!keeps_all(d, l) && (rc = layer_fwd(d, l, T, 1, attn_s, e))) || (rc = mlp_bwd(d, l, T, e))) return rc;
  layer_buf *a = &d->acts[l];
  void *dx_act = d->bf16 ? d->dxb : NULL;  // TF32: dxb is dx
  if ((rc = rmsnorm_bwd(d, d->dx, dx_act, LGD(d, l, MODEL_T_LN2), d->dln, a->x2, LPD(d, l, MODEL_T_LN2), a->rstd2, T, C,
                        e)) ||
      (rc = attn_block_bwd(d, l, T, attn_s, e)))
    return rc;
  return rmsnorm_bwd(d, d->dx, dx_act, LGD(d, l, MODEL_T_LN1), d->dln, d->x[l], LPD(d, l, MODEL_T_LN1), a->rstd1, T, C, e);
}

// ---- the model ------------------------------------------------------------------------------

// The final norm, the LM head and the chunked cross-entropy: losses and argmax per token, and with grads d->dln =
// the final norm output's gradient and the LM head's weight gradient.
static int head_loss(model_cuda *d, int64_t T, int grads, double loss_scale, sr_error *e) {
  const model_config *c = &d->cfg;
  int C = (int)c->hidden_size, L = (int)c->num_layers, V = (int)c->vocab_size;
  int rc;
  if (T > 0 && (rc = rmsnorm_fwd(d, d->lnf, d->rstdf, NULL, d->x[L], DP(d, d->t_norm), T, C, e))) return rc;
  float *W = DP(d, d->t_lm_head);
  cudaDataType at = act_type(d);
  for (int64_t t0 = 0; t0 < T; t0 += d->ce_chunk) {
    int64_t n = sr_min64(d->ce_chunk, T - t0);
    const void *in = act_at(d, d->lnf, t0 * C);
    if ((rc = phase_to(d, TRAIN_PHASE_LM_HEAD, e)) || (rc = linear(d, d->logits, at, V, in, C, W, n, C, V, 0.0f, e)) ||
        (rc = phase_to(d, TRAIN_PHASE_CROSS_ENTROPY, e)))
      return rc;
    cross_entropy_run(d->bf16, d->logits, n, V, d->tgt + t0, (float)loss_scale, grads, d->losses + t0, d->argmax + t0,
                      d->stream);
    KCHECK();
    // softmax − onehot, in place, into the final norm's output gradient and the LM head's weight gradient
    if (grads && ((rc = phase_to(d, TRAIN_PHASE_LM_HEAD, e)) ||
                  (rc = linear_dinp(d, d->dln + t0 * C, CUDA_R_32F, C, d->logits, V, W, n, C, V, 0.0f, e)) ||
                  (rc = linear_dw(d, DG(d, d->t_lm_head), d->logits, V, in, C, n, C, V, e))))
      return rc;
  }
  return SR_OK;
}

extern "C" int model_cuda_forward_backward(model_cuda *d, int64_t T, const int32_t *tokens, const int64_t *pos,
                                           const int32_t *targets, int grads, double loss_scale, double *loss_sum,
                                           int32_t *argmax, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int C = (int)c->hidden_size, L = (int)c->num_layers, half = (int)(c->head_dim / 2);
  int rc;
  if (T < 0 || T > d->max_tokens)
    return sr_input_error(e, NULL, "tokens", "%lld local tokens, the model holds room for 0..%lld", (long long)T,
                          (long long)d->max_tokens);
  if (attn_s) *attn_s = 0;
  d->ph_rerun = 0;
  if ((rc = model_cuda_alloc_inputs(d, e)) || (!d->acts_ready && (rc = model_cuda_alloc_acts(d, e))) ||
      (rc = phase_to(d, TRAIN_PHASE_CASTS, e)) || (rc = model_cuda_refresh_weights(d, e)) ||
      (rc = phase_to(d, TRAIN_PHASE_COPIES, e)))
    return rc;
  CU(cudaMemcpyAsync(d->tok, tokens, (size_t)T * sizeof(int), cudaMemcpyHostToDevice, d->stream));
  CU(cudaMemcpyAsync(d->tgt, targets, (size_t)T * sizeof(int), cudaMemcpyHostToDevice, d->stream));
  CU(cudaMemcpyAsync(d->pos, pos, (size_t)T * sizeof(long long), cudaMemcpyHostToDevice, d->stream));
  if (T > 0) {
    if ((rc = phase_to(d, TRAIN_PHASE_ROPE_FWD, e))) return rc;
    rope_table_k<<<grid_for(T * half, 256), 256, 0, d->stream>>>(d->cosv, d->sinv, d->pos, d->inv_freq, d->rope_mscale,
                                                               T, half);
    KCHECK();
    if ((rc = phase_to(d, TRAIN_PHASE_EMBED, e))) return rc;
    embed_fwd_k<<<grid_for(T * C, 256), 256, 0, d->stream>>>(d->x[0], DP(d, d->t_embed), d->tok, T, C);
    KCHECK();
  }
  if ((rc = model_cuda_offload_out(d, 0, T, e))) return rc;  // activation offload: each layer input to the host once written
  for (int l = 0; l < L; l++)
    if ((rc = model_cuda_slot_free(d, l, e)) || (rc = layer_fwd(d, l, T, 0, attn_s, e)) ||
        (l + 1 < L && (rc = model_cuda_offload_out(d, l + 1, T, e))))
      return rc;
  if ((rc = head_loss(d, T, grads, loss_scale, e)) || (rc = phase_to(d, TRAIN_PHASE_COPIES, e))) return rc;
  float *losses = (float *)malloc((size_t)sr_max64(T, 1) * sizeof(float));
  if (!losses) return sr_internal_error(e, 0, "model_cuda: out of memory");
  cudaError_t ce = cudaMemcpyAsync(losses, d->losses, (size_t)T * sizeof(float), cudaMemcpyDeviceToHost, d->stream);
  if (ce == cudaSuccess && argmax)
    ce = cudaMemcpyAsync(argmax, d->argmax, (size_t)T * sizeof(int), cudaMemcpyDeviceToHost, d->stream);
  if (ce == cudaSuccess && (rc = phase_to(d, PHASE_NONE, e))) {  // the host waits for the losses: not timed
    free(losses);
    return rc;
  }
  if (ce == cudaSuccess) ce = cudaStreamSynchronize(d->stream);
  double total = 0;
  for (int64_t t = 0; t < T; t++) total += losses[t];
  free(losses);
  if (ce != cudaSuccess) return sr_internal_error(e, 0, "%s:%d: CUDA: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
  *loss_sum = total;
  if (!grads) return SR_OK;
  if ((rc = phase_to(d, TRAIN_PHASE_COPIES, e))) return rc;
  CU(cudaMemsetAsync(d->dx, 0, (size_t)(T * C) * sizeof(float), d->stream));
  if (T > 0 && (rc = rmsnorm_bwd(d, d->dx, d->bf16 ? d->dxb : NULL, DG(d, d->t_norm), d->dln, d->x[L], DP(d, d->t_norm),
                                 d->rstdf, T, C, e)))
    return rc;
  for (int l = L - 1; l >= 0; l--)
    if ((rc = model_cuda_offload_in(d, l, T, e)) || (rc = layer_bwd(d, l, T, attn_s, e))) return rc;
  if (T > 0) {
    if ((rc = phase_to(d, TRAIN_PHASE_EMBED, e))) return rc;
    embed_bwd_k<<<grid_for(T * C, 256), 256, 0, d->stream>>>(DG(d, d->t_embed), d->dx, d->tok, T, C);
    KCHECK();
  }
  return phase_to(d, PHASE_NONE, e);
}

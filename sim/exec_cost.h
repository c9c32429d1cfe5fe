// exec_cost.h — HBM traffic of the non-attention work of sparsering-exec train's CUDA step (plan spec trainer
// "exec"; train/model_cuda_step.cu and train/model_cuda.cu with bf16 GEMMs): every memory-bound kernel it runs
// around the GEMMs, the GEMM epilogues' traffic beyond what the calibration's GEMMs moved, and the optimizer's
// passes over the parameters; and the distributed attention call's own passes around its ring kernels
// (exec/dist_attn_cuda.c), which the kernel calibration does not time. Bytes only; step.c and step_ring.c turn them
// into seconds at the cluster's memory rate.
#ifndef SR_EXEC_COST_H
#define SR_EXEC_COST_H

#include "plan/model.h"

// Bytes a token of one layer moves through HBM outside its GEMMs' calibrated work and outside attention.
typedef struct {
  double fwd_pre;   // forward (and the recomputed forward) up to attention: first RMSNorm, q|k|v epilogue
  double fwd_post;  // forward after attention: O and down epilogues, second RMSNorm, SwiGLU
  double rec_post;  // the recomputed forward after attention: no down epilogue, no residual copy by the norm
  double bwd_post;  // backward of the MLP half: SwiGLU's backward, gate|up input gradients, second RMSNorm's
  double bwd_pre;   // backward of the attention half: rotations back, bias sums, q|k|v input gradients, first RMSNorm's
} exec_layer_bytes;

// The per-token byte counts of one layer of model m.
void exec_cost_layer(const model_config *m, exec_layer_bytes *b);
// Bytes a layer's weight-gradient GEMMs move beyond the calibrated GEMMs, once a sample: fp32 gradients read and
// written where the calibration wrote bf16.
double exec_cost_weight_grads(const model_config *m);
// Bytes a token of the step moves outside the layers: embedding, rotary table, final RMSNorm forward and backward,
// the cross-entropy's passes over the bf16 logits, the residual gradient's clearing.
double exec_cost_loss_token(const model_config *m);
// Bytes the LM head's weight-gradient GEMM moves beyond the calibrated GEMM for n tokens (once a logits chunk).
double exec_cost_lm_head_grads(const model_config *m, double n);
// Bytes of the gradient norm and AdamW over this rank's `share` of the parameters.
double exec_cost_optimizer(double share);
// Bytes of the step's passes over all `params` parameters: the bf16 weight mirror remade, the gradients cleared.
double exec_cost_weights(double params);

// Bytes of a ring attention call's passes around its kernels (exec/dist_attn_cuda.c, one group: U == 1): per query
// token of the rank before and after the forward's ring and before the backward's, and per key token of each
// source a backward step computes on.
typedef struct {
  double fwd_pre;   // K|V packed into the ring buffer, the fp32 running output and LSE cleared
  double fwd_post;  // the fp32 output converted to bf16
  double bwd_pre;   // K|V packed, the rows' dout . o, dQ, dK, dV cleared
  double bwd_step;  // the step's dK|dV partial cleared, then added once into the accumulator or the owner's dK|dV
} exec_attn_call_bytes;

// The four byte counts of a ring attention call of model m.
void exec_cost_attn_call(const model_config *m, exec_attn_call_bytes *b);

#endif

// exec_cost.c — the exec trainer's HBM traffic outside its GEMMs and attention (exec_cost.h), kernel by kernel as
// train/model_cuda_step.cu launches them with bf16 GEMMs (train/model_cuda_kernels.cu holds the kernels). Each
// kernel reads and writes its tensors once (a row's second pass, in RMSNorm's backward, hits L1/L2: a warp a row
// of a few KiB); small per-row scalars count, the per-layer vectors (norm weights, biases) the kernels reread from cache do
// not. Names: C hidden, I intermediate, QD = heads x head_dim, KD = kv_heads x head_dim, QKV = QD + 2 KD, d
// head_dim, V vocabulary; fp32 is 4 bytes, bf16 2.
//
// GEMM epilogues: the calibration times cuBLAS GEMMs that write a bf16 C with beta 0 (exec/calib_kernels.c), so
// its efficiency covers that store; the trainer's GEMMs that write fp32 (2 bytes more an element) or accumulate
// onto an fp32 C (beta 1: read 4 and write 4, 6 bytes more) move the difference too. It is charged in full:
// Hopper's cooperative GEMM kernels run a tile's epilogue after its main loop on the same warpgroups (CUTLASS 3
// sm90 "KernelTmaWarpSpecializedCooperative"), so the store does not hide under that tile's products.
#include "sim/exec_cost.h"

#include <math.h>

#include "sim/memory.h"

// The RMSNorm backward a row: dx, dout, x read and rstd; dx and its bf16 copy written. Where the row kernel runs
// (rmsnorm_bwd_rows_k: C a multiple of 4, at most 4096) it sums the weight gradient in registers and shared memory;
// elsewhere rmsnorm_bwd_k writes the weight-gradient rows (4 C) and colsum_k reads them back (4 C).
static double norm_bwd_bytes(double C) {
  double rows = fmod(C, 4.0) == 0 && C <= 4096 ? 0 : 4 * C + 4 * C;
  return (4 + 4 + 4) * C + 4 + (4 + 2) * C + rows;
}

void exec_cost_layer(const model_config *m, exec_layer_bytes *b) {
  double C = (double)m->hidden_size, I = (double)m->intermediate_size, d = (double)m->head_dim;
  double QD = (double)m->num_heads * d, KD = (double)m->num_kv_heads * d, QKV = QD + 2 * KD;
  // rmsnorm_fwd_k: x read (fp32), the bf16 output written, the fp32 residual copy written, rstd.
  double norm_fwd = 4 * C + 2 * C + 4 * C + 4;
  double norm_bwd = norm_bwd_bytes(C);
  // layer_fwd: the q, k, v GEMMs write fp32 (+2 a column), then qkv_post_k reads them (fp32), writes bf16 q, k, v
  // and reads the token's cos and sin (d/2 fp32 each) and position.
  b->fwd_pre = norm_fwd + 2 * QKV + (4 + 2) * QKV + 4 * d + 8;
  // the O and down GEMMs accumulate onto fp32 residuals (beta 1: +6 a column each); swiglu_fwd_k reads gate|up
  // and writes h, bf16.
  b->fwd_post = 6 * C + norm_fwd + 6 * C + (2 * 2 + 2) * I;
  // layer_fwd recomputing stops at the second RMSNorm, which writes no residual copy (4 C less), and the down GEMM
  // does not run again (its epilogue, 6 C, neither); mlp_bwd remakes gate|up and h (SwiGLU's bytes stay).
  b->rec_post = b->fwd_post - 6 * C - 4 * C;
  // layer_bwd: the down input gradient is bf16 (the calibrated form); swiglu_bwd_k reads gate|up and dh and
  // writes dgate|dup, bf16; the gate and up input gradients go to fp32 dln (beta 0, then beta 1).
  b->bwd_post = (2 * 2 + 2 + 2 * 2) * I + 2 * C + 6 * C + norm_bwd;
  // attn_block_bwd: the O input gradient is bf16 (attention's dout); qkv_bwd_post_k reads dq, dk, dv (fp32), the
  // cos/sin and position, writes dq and dk rotated back (fp32) and dq|dk|dv in bf16; with q/k/v biases colsum_k
  // reads dq, dk, dv again; the q, k, v input gradients go to fp32 dln (beta 0, 1, 1); then the first norm's.
  b->bwd_pre = 4 * QKV + 4 * d + 8 + 4 * (QD + KD) + 2 * QKV + (m->attention_bias ? 4 * QKV : 0) + 2 * C + 6 * C +
               6 * C + norm_bwd;
}

// linear_dw: every weight's gradient [out, in] is accumulated in fp32 (beta 1) by its GEMM, 6 bytes more a weight
// than the calibration's bf16 store; one weight per multiply-add of the layer's per-token GEMMs.
double exec_cost_weight_grads(const model_config *m) { return 6.0 * model_layer_gemm_flops_per_token(m) / 2.0; }

// model_cuda_forward_backward outside the layers, a token: embed_fwd_k (the row read, x[0] written, fp32; the
// token id), rope_table_k (the position read, cos and sin written), head_loss's final rmsnorm_fwd_k (no residual
// copy), cross_entropy_run over the bf16 logits (read for the max, read for the sum, read and written as the
// gradient; target, loss and argmax), the LM head's input gradient into fp32 dln (+2 a column), dx cleared (fp32),
// the final norm's backward (above), embed_bwd_k (dx read, the id, the embedding gradient's row read and written
// by atomics).
double exec_cost_loss_token(const model_config *m) {
  double C = (double)m->hidden_size, V = (double)m->vocab_size, d = (double)m->head_dim;
  double norm_bwd = norm_bwd_bytes(C);
  return (4 + 4) * C + 4 + 8 + 4 * d + (4 + 2) * C + 4 + (2 + 2 + 2 + 2) * V + 12 + 2 * C + 4 * C + norm_bwd +
         4 * C + 4 + 8 * C;
}

// head_loss: the LM head's weight gradient [V, C] is accumulated in fp32 (beta 1) once per logits chunk of
// SIM_CE_CHUNK tokens (the trainer's ce_chunk, 2048): 6 bytes more a weight than the calibrated store, each chunk.
double exec_cost_lm_head_grads(const model_config *m, double n) {
  double chunks = n > 0 ? ceil(n / SIM_CE_CHUNK) : 0;
  return chunks * 6.0 * (double)m->vocab_size * (double)m->hidden_size;
}

// trainer_step_cuda: model_cuda_grad_sumsq reads this rank's slice of the fp32 gradients (4 bytes a parameter);
// adamw_k reads its fp32 weight, gradient and two moments and writes the weight and the moments (16 + 12).
double exec_cost_optimizer(double share) { return 4 * share + 28 * share; }

// The next forward's model_cuda_refresh_weights remakes the bf16 mirror of every weight (4 read + 2 written) and
// the next step's model_cuda_zero_grad clears every fp32 gradient (4 written).
double exec_cost_weights(double params) { return (4 + 2) * params + 4 * params; }

// The ring attention call beyond its kernels (exec/dist_attn_cuda.c with U == 1; the kernel calibration,
// exec/calib_kernels.c and exec/calib_ring.c, times sa_fwd / sa_bwd alone on buffers set up once).
//   fwd_call / ring_fwd_cuda: load_kv copies this rank's K and V into the packed ring buffer (two bf16 planes, each
//   read and written: 2 x 2 x 2 KD), dist_cuda_fill clears the fp32 running output (4 QD) and sets the LSE (4 a
//   head); after the last step dist_cuda_to_bf16 reads the fp32 output and writes it bf16 (4 QD + 2 QD).
//   bwd_call / ring_bwd_cuda: load_kv again (8 KD); sa_bwd_prepare reads o and dout (bf16: 2 QD + 2 QD) and writes
//   a float a row and head (4 H); cudaMemsetAsync clears dQ (4 QD), dK and dV (4 KD each).
//   Each step with a source of m keys clears the fp32 dK|dV partial P of 2 m KD elements (8 KD a key) and adds one
//   such partial to another (dist_cuda_add: two read, one written, 24 KD a key): a source's accumulator passes
//   through the k ranks computing on it, k - 1 of which add the one received, and the last one's sum is added
//   into the owner's dK and dV (the flush): k adds for k computing steps, charged one a step.
void exec_cost_attn_call(const model_config *m, exec_attn_call_bytes *b) {
  double d = (double)m->head_dim, H = (double)m->num_heads, QD = H * d, KD = (double)m->num_kv_heads * d;
  b->fwd_pre = 8 * KD + 4 * QD + 4 * H;
  b->fwd_post = 6 * QD;
  b->bwd_pre = 8 * KD + 4 * QD + 4 * H + 4 * QD + 8 * KD;
  b->bwd_step = 8 * KD + 24 * KD;
}

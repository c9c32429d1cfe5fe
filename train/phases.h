// phases.h — the classes of work a training step is timed by (`sparsering-exec train --phase-times`): each class
// summed over layers and samples, in the code's own words (train/model_ops.inc on the CPU, train/model_cuda_step.cu
// on the GPU; train/train.c for the optimizer and the collectives). Whatever a step's wall time holds outside them
// (host work and host waits between the timed pieces, launch gaps between them) is its unaccounted time.
#ifndef SR_TRAIN_PHASES_H
#define SR_TRAIN_PHASES_H

#include <stdint.h>

#include "plan/util.h"

// In the order the step line prints them. dgrad: a GEMM's input gradient; wgrad: its weight gradient (and bias).
enum {
  TRAIN_PHASE_EMBED,           // the embedding's gather and its gradient's scatter
  TRAIN_PHASE_RMSNORM_FWD,     // every RMSNorm (input, post-attention, final) forward, and its residual copy (GPU)
  TRAIN_PHASE_RMSNORM_BWD,     // their backward, weight gradients included
  TRAIN_PHASE_QKV_FWD,         // the q, k, v GEMMs (CPU: with their biases)
  TRAIN_PHASE_QKV_DGRAD,
  TRAIN_PHASE_QKV_WGRAD,       // with the biases' gradients
  TRAIN_PHASE_ROPE_FWD,        // rotary (GPU: qkv_post: biases, rotation, logn scale, bf16 rounding; cos/sin table)
  TRAIN_PHASE_ROPE_BWD,        // rotated back (GPU: qkv_bwd_post, into the GEMMs' dq|dk|dv)
  TRAIN_PHASE_ATTN_FWD,        // attention (the distributed attention's callback, plan fetch and ring included)
  TRAIN_PHASE_ATTN_RECOMPUTE,  // attention rerun in the backward (recomputation of a layer that keeps no output)
  TRAIN_PHASE_ATTN_BWD,
  TRAIN_PHASE_O_FWD,           // the output projection (and the residual it adds onto)
  TRAIN_PHASE_O_DGRAD,
  TRAIN_PHASE_O_WGRAD,
  TRAIN_PHASE_GATE_UP_FWD,     // the MLP's gate and up GEMMs, chunk by chunk
  TRAIN_PHASE_GATE_UP_DGRAD,
  TRAIN_PHASE_GATE_UP_WGRAD,
  TRAIN_PHASE_SWIGLU_FWD,
  TRAIN_PHASE_SWIGLU_BWD,
  TRAIN_PHASE_DOWN_FWD,        // the down GEMM (and the residual it adds onto)
  TRAIN_PHASE_DOWN_DGRAD,
  TRAIN_PHASE_DOWN_WGRAD,
  TRAIN_PHASE_RECOMPUTE,       // the rest of the forward the backward reruns (the MLP's remade chunks too)
  TRAIN_PHASE_LM_HEAD,         // the LM head's GEMMs: logits, dgrad and wgrad, chunk by chunk
  TRAIN_PHASE_CROSS_ENTROPY,   // softmax, loss, argmax and the logits' gradient
  TRAIN_PHASE_GRAD_NORM,       // the gradients' sum of squares (clipping's norm)
  TRAIN_PHASE_ADAMW,           // the optimizer's update
  TRAIN_PHASE_CASTS,           // conversions on a pass of their own (GPU: bf16 weight mirror; TF32's bf16 <-> fp32)
  TRAIN_PHASE_COPIES,          // uploads, read-backs and zeroing (gradients, the backward's scratch)
  TRAIN_PHASE_OFFLOAD_WAIT,    // activation offload: the GPU's compute stream waiting for its copies (CPU: the copies)
  TRAIN_PHASE_COMM,            // the gradient and parameter collectives, and the step's loss sums (host wall time)
  TRAIN_PHASES
};

// The class a piece of work belongs to when the backward reruns it (recomputation): attention's forward is
// TRAIN_PHASE_ATTN_RECOMPUTE, everything else TRAIN_PHASE_RECOMPUTE.
static inline int train_phase_rerun(int phase) {
  return phase == TRAIN_PHASE_ATTN_FWD ? TRAIN_PHASE_ATTN_RECOMPUTE : TRAIN_PHASE_RECOMPUTE;
}

// The class's name as printed ("rmsnorm-fwd"; the CSV column is phase_rmsnorm_fwd_s).
const char *train_phase_name(int phase);
// The step's time outside the classes: step_s minus the sum of phase_s[TRAIN_PHASES].
double train_phases_unaccounted(const double *phase_s, double step_s);
// Append the step's phase line: "phases N | embed S | rmsnorm-fwd S rmsnorm-bwd S | ... | unaccounted S | step S"
// (seconds, groups of related classes between bars).
int train_phases_line(int64_t step, const double *phase_s, double step_s, sr_buf *out);
// Append the CSV columns: ",phase_embed_s,...,phase_comm_s,unaccounted_s" (header) or their values (row).
int train_phases_csv_header(sr_buf *out);
int train_phases_csv_row(const double *phase_s, double step_s, sr_buf *out);

#endif

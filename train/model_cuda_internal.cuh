// model_cuda_internal.cuh — the GPU model's state, shared by train/model_cuda.cu (create, buffers, copies, the
// optimizer) and train/model_cuda_step.cu (the forward and backward). Not a public API.
#ifndef SR_MODEL_CUDA_INTERNAL_CUH
#define SR_MODEL_CUDA_INTERNAL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" {
#include "train/model_cuda.h"
#include "plan/util.h"
}

#define CU(call)                                                                                          \
  do {                                                                                                    \
    cudaError_t err_ = (call);                                                                            \
    if (err_ != cudaSuccess)                                                                              \
      return sr_internal_error(e, 0, "%s:%d: CUDA: %s", __FILE__, __LINE__, cudaGetErrorString(err_));    \
  } while (0)
#define CB(call)                                                                                          \
  do {                                                                                                    \
    cublasStatus_t st_ = (call);                                                                          \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                     \
      return sr_internal_error(e, 0, "%s:%d: cuBLAS status %d", __FILE__, __LINE__, (int)st_);            \
  } while (0)
#define KCHECK() CU(cudaGetLastError())

// At least one block: a rank holding no token still runs every layer (its attention takes part in the
// ring), and every kernel checks its bounds.
static inline unsigned grid_for(int64_t n, int block) { return n > 0 ? (unsigned)((n + block - 1) / block) : 1u; }
static inline unsigned rows_grid(int64_t T) { return T > 0 ? (unsigned)T : 1u; }

typedef __nv_bfloat16 bf16_t;

// One layer's activations. "act" buffers hold GEMM operands in the GEMMs' dtype (bf16 with bf16 GEMMs, fp32 with
// TF32); attention's inputs and output are bf16 whatever the GEMMs (the distributed attention's interface).
struct layer_buf {
  void *ln1, *ln2;          // act [N, C]: the RMSNorm outputs (the q|k|v and gate|up GEMMs' input)
  float *rstd1, *rstd2;     // [N]
  bf16_t *qb, *kb, *vb;       // [N, Hq*D], [N, Hkv*D] x 2: biased and rotated, attention's input
  bf16_t *ob;                 // [N, Hq*D]: attention's output (a keeping layer's own under selective recomputation)
  float *lse;               // [Hq, N] (likewise)
  float *x2;                // [N, C]: the residual after attention
  void *gu, *h;             // act [N, 2I] (row: gate then up), act [N, I]: silu(gate) * up; under recomputation
                            // one MLP chunk's, [mlp_rows, 2I] and [mlp_rows, I]
};

struct model_cuda {
  model_config cfg;
  int recompute, num_tensors;  // MODEL_RECOMPUTE_*
  int keep_layers;          // selective recomputation: layers 0..keep_layers-1 keep ob and lse (model_cpu.h)
  int keep_all;             // selective recomputation: layers 0..keep_all-1 keep every activation (model_cpu.h)
  int64_t num_params, max_tokens, ce_chunk, lo, hi;
  int64_t mlp_rows;         // the MLP's chunk (model_cuda_set_mlp_chunk; max_tokens: the whole sequence)
  model_tensor *tensors;
  int t_embed, t_norm, t_lm_head;
  int (*t_layer)[MODEL_LAYER_TENSORS];
  cudaStream_t stream;
  cublasHandle_t blas;
  float *params, *grads, *m, *v;
  double *inv_freq, *sumsq;
  float *cosv, *sinv;
  long long *pos;
  int *tok, *tgt, *argmax;
  float *losses;
  float **x;                // [L + 1] fp32 [N, C]: each layer's input (and the last one's output)
  // GEMM precision (model_cuda_set_precision): bf16 operands from a bf16 mirror of the weights (remade at the
  // first forward after they change) and activations kept in bf16, or fp32 operands on TF32 tensor cores
  int bf16, wb_stale;
  bf16_t *wb;
  // activations and scratch (alloc_acts: sized by the precision and the recomputation; NULL until then)
  int acts_ready;
  layer_buf *acts;          // [L]; under recomputation the layers share acts[keep_all]'s buffers (the first layer that
                            // reruns), but for ob and lse of the layers that keep their own under selective
                            // recomputation (model_attn_own_buffers), and for the layers kept whole (0..keep_all-1),
                            // which have a whole set each, as without recomputation
  bf16_t *rec_ob;           // under recomputation: the shared set's ob and lse (acts[keep_all]'s unless it keeps its
                            // own)
  float *rec_lse;
  float *qkv;               // [N, Hq*D + 2*Hkv*D]: the q|k|v GEMM outputs; in the backward the RMSNorms' weight rows
  float *ob_act;            // TF32: attention's output in fp32 for the O GEMM (NULL with bf16: it reads ob)
  void *lnf;                // act [N, C]
  float *rstdf;
  void *logits;             // act [ce_chunk, V]
  float *dx, *dln;          // [N, C]: the residual's gradient; an RMSNorm output's (also the final norm's)
  void *dxb;                // act [N, C]: dx as the GEMMs read it (bf16; TF32: dx itself)
  void *dh;                 // act [mlp_rows, I]: one MLP chunk's
  float *dq, *dk, *dv;      // attention's gradients, rotated back in place
  void *dqkv;               // act [N, Hq*D + 2*Hkv*D]: dq|dk|dv as the GEMMs read them
  bf16_t *dob;                // [N, Hq*D]: the O GEMM's input gradient, attention's dout
  float *dob_act;           // TF32: the same in fp32 before its conversion (NULL with bf16)
  int64_t act_bytes;        // device bytes of the above
  model_cuda_attention attn;
  double rope_mscale;
  cudaEvent_t *ev;  // attention timing: pairs of events (timer_mark)
  int n_ev, cap_ev;
  // activation offload (model_cuda_set_offload): x[l] lives in slot l % slots (x[L] in its own buffer); x[0..L-slots-1]
  // go to pinned host memory on the copy-out stream once written and come back on the copy-in stream one layer ahead
  // of their backward. Events order the streams; the host never waits.
  int offload, slots;
  float *ckpt_host;           // pinned [(L - slots) * max_tokens * hidden]
  cudaStream_t d2h, h2d;
  cudaEvent_t *out_done;      // [L] x[i]'s copy to the host done
  cudaEvent_t written, in_done;  // x[i] written (the copy out may start); the prefetched input arrived
  // phase timing (model_cuda_set_phase_times): a mark (an event and the class it opens, PHASE_NONE: timed work
  // pauses) where the class changes; mark i's class runs until mark i + 1 (model_cuda_phase_times)
  int phases_on, ph_rerun, ph_open;  // ph_rerun: the backward reruns a forward; ph_open: the class now open
  cudaEvent_t *ph_ev;
  int *ph_id, ph_n, ph_cap;
};

#define PHASE_NONE (-1)

#define DP(d, idx) ((d)->params + (d)->tensors[idx].offset)
#define DG(d, idx) ((d)->grads + (d)->tensors[idx].offset)
#define LPD(d, l, w) ((d)->t_layer[l][w] >= 0 ? DP(d, (d)->t_layer[l][w]) : (float *)NULL)
#define LGD(d, l, w) ((d)->t_layer[l][w] >= 0 ? DG(d, (d)->t_layer[l][w]) : (float *)NULL)

// Bytes of one GEMM operand element.
static inline size_t act_size(const model_cuda *d) { return d->bf16 ? 2 : 4; }

// Does layer l keep every activation its backward reads (no recomputation, or a layer kept whole)? model_cpu_keeps_all.
static inline int keeps_all(const model_cuda *d, int l) { return !d->recompute || l < d->keep_all; }

// (Re)allocate the activations and scratch for the precision and recomputation now set (model_cuda.cu).
int model_cuda_alloc_acts(model_cuda *d, sr_error *e);
// The layer inputs x[0..L] (fp32), once: every layer's, or with activation offload only the slots and x[L].
int model_cuda_alloc_inputs(model_cuda *d, sr_error *e);
// The bf16 mirror of the weights, remade when stale (model_cuda.cu).
int model_cuda_refresh_weights(model_cuda *d, sr_error *e);
// The activation offload's stream orderings around the step (model_cuda.cu; no-ops without offload): x[i] was just
// written (its copy to the host starts once the stream reaches this point); layer l is about to write x[l + 1] into a
// slot (waits until the input that held it is on the host); layer l's backward begins (waits for its own input, and
// fetches x[l - 1] meanwhile).
int model_cuda_offload_out(model_cuda *d, int i, int64_t T, sr_error *e);
int model_cuda_slot_free(model_cuda *d, int l, sr_error *e);
int model_cuda_offload_in(model_cuda *d, int l, int64_t T, sr_error *e);
// A phase mark on the stream: class `phase` (TRAIN_PHASE_*, the rerun's class while d->ph_rerun) from here, or
// PHASE_NONE; nothing when the class is already open (model_cuda.cu).
int model_cuda_phase_mark(model_cuda *d, int phase, sr_error *e);
// The same, and nothing at all unless phase timing is on (one branch: the step's code calls it at every change).
static inline int phase_to(model_cuda *d, int phase, sr_error *e) {
  return d->phases_on ? model_cuda_phase_mark(d, phase, e) : SR_OK;
}

#endif

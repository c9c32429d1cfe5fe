// model_cuda.h — the CPU transformer's twin on one GPU: the same parameter table (model_cpu.h),
// the same forward, analytic backward, chunked cross-entropy and AdamW, with cuBLAS GEMMs and
// llm.c-style fused kernels for the rest: fp32 master weights, gradients and residual stream; the GEMMs run on
// bf16 operands with fp32 accumulation (model_cuda_set_precision), the activations that only feed GEMMs kept in
// bf16, or on fp32 operands through TF32 tensor cores (the default of model_cuda_create); attention's inputs and
// output are bf16 either way (the executor's distributed attention, which runs on the same stream).
//
// Built only where nvcc is (SR_HAVE_CUDA); every call returns an sr_error naming the CUDA / cuBLAS
// failure and its file:line.
#ifndef SR_MODEL_CUDA_H
#define SR_MODEL_CUDA_H

#include <stdint.h>

#include "train/model_cpu.h"
#include "plan/error.h"

typedef struct model_cuda model_cuda;

// Attention on the device: q, k, v, o, dout bf16 [T, heads|kv_heads, d]; lse, dq, dk, dv fp32.
// forward == NULL: a naive dense causal kernel (by global position, fp32) runs instead.
typedef struct {
  void *ctx;
  int (*forward)(void *ctx, int layer, int64_t T, const void *q, const void *k, const void *v, void *o, float *lse,
                 sr_error *e);
  int (*backward)(void *ctx, int layer, int64_t T, const void *q, const void *k, const void *v, const void *o,
                  const float *lse, const void *dout, float *dq, float *dk, float *dv, sr_error *e);
} model_cuda_attention;

// Mirror host model h on the current device (its config, tensor table, recompute) with activations for
// max_tokens local tokens (the host model may hold room for fewer); parameters are copied from h->params
// unless init_seed != NULL, which draws them on the device exactly as model_init_random(h, *init_seed) does on
// the host (so a large model never fills host memory). The parameter and gradient buffers hold
// param_capacity >= num_params floats (zero padding past num_params, so ZeRO-1 slices can be all-gathered
// in place); the AdamW moments cover [lo, hi). stream: cudaStream_t to run on (NULL: default).
int model_cuda_create(model_cuda **out, const model_cpu *h, int64_t max_tokens, int64_t param_capacity,
                      const uint64_t *init_seed, int64_t lo, int64_t hi, void *stream, sr_error *e);
// GEMM precision. BF16: the weights' bf16 mirror (remade at the first forward after model_cuda_adamw or an
// upload; writers through model_cuda_params write between an update and the next forward), and every GEMM
// operand (norm outputs, gate|up, SwiGLU's output, attention's output, the activation gradients the GEMMs read)
// written in bf16 by the kernel that makes it; products accumulate in fp32 into the fp32 residual stream and
// weight gradients (q|k|v's outputs stay fp32 until their biases, rotation and logn scale are applied, then
// round once). TF32: fp32 operands and activations.
typedef enum { MODEL_CUDA_TF32 = 0, MODEL_CUDA_BF16 = 1 } model_cuda_precision;
// Select the GEMM precision (BF16 allocates the mirror, 2 bytes a parameter; the activations are reallocated in
// the GEMMs' dtype).
int model_cuda_set_precision(model_cuda *d, model_cuda_precision p, sr_error *e);
// Select the recomputation (MODEL_RECOMPUTE_*, model_cpu.h; model_cuda_create takes the host model's, and its
// keep_layers and keep_all); the activations are reallocated: selective recomputation keeps the bf16 attention output
// and fp32 LSE of layers 0..keep_layers-1 (0 .. num_layers; the others rerun attention; ignored by the other modes),
// and every activation of layers 0..keep_all-1 (0 .. keep_layers; a whole set each, as without recomputation: their
// backward reruns nothing; ignored by the other modes).
int model_cuda_set_recompute(model_cuda *d, int recompute, int keep_layers, int keep_all, sr_error *e);
// Run the MLP over the tokens in chunks of `rows` (plan/model.h's --mlp-chunk; rows <= 0 or >= max_tokens: the
// whole sequence, model_cuda_create's default): gate|up, h and dh are reallocated for one chunk (gate|up and h stay
// every layer's own, whole, without recomputation), and under recomputation the backward remakes the chunk's gate|up
// and h. The same values as the whole sequence's but for the order of the weight gradients' sums over chunks (and
// whatever the GEMMs' kernels do differently on fewer rows).
int model_cuda_set_mlp_chunk(model_cuda *d, int64_t rows, sr_error *e);
// Device bytes of the activations and scratch as now allocated (for the run's report).
int64_t model_cuda_act_bytes(const model_cuda *d);
// Free the device model.
void model_cuda_free(model_cuda *d);
// Activation offload (before the first forward): the layer inputs x[0..L-1] share MODEL_EXEC_OFFLOAD_SLOTS device
// buffers; those that leave their slot go to pinned host memory on a copy-out stream once written and come back on a
// copy-in stream one layer ahead of their backward (events order the streams, the host does not wait). Results are
// bit-identical to the resident model's.
int model_cuda_set_offload(model_cuda *d, sr_error *e);
// Pinned host bytes the activation offload holds (0 without it).
int64_t model_cuda_pinned_bytes(const model_cuda *d);
// Device bytes the layer inputs x[0..L] take (only the offload's slots and x[L] when it is on), allocated or not.
int64_t model_cuda_input_bytes(const model_cuda *d);
// Allocate the layer inputs now rather than at the first forward, so that a memory decision counts them.
int model_cuda_place_inputs(model_cuda *d, sr_error *e);
// Route attention through a distributed implementation (NULL fields: the naive kernel).
void model_cuda_set_attention(model_cuda *d, const model_cuda_attention *a);
// Device pointers of the flat parameters and gradients (num_params floats each).
float *model_cuda_params(model_cuda *d);
float *model_cuda_grads(model_cuda *d);
// Copy parameters host -> device or device -> host (h->params, float32).
int model_cuda_upload(model_cuda *d, const model_cpu *h, sr_error *e);
int model_cuda_download(model_cuda *d, model_cpu *h, sr_error *e);
// Copy the gradients device -> host (num_params floats).
int model_cuda_download_grads(model_cuda *d, float *host, sr_error *e);
// Copy the AdamW moments of the owned slice to / from host arrays of hi - lo floats.
int model_cuda_moments(model_cuda *d, float *m, float *v, int to_host, sr_error *e);
// Zero the gradients.
int model_cuda_zero_grad(model_cuda *d, sr_error *e);
// model_forward_backward on the device (host arrays in and out). With attn_s != NULL the attention calls are
// timed with events (*attn_s is set to 0; model_cuda_attn_time reads the time once the work is done).
int model_cuda_forward_backward(model_cuda *d, int64_t T, const int32_t *tokens, const int64_t *pos,
                                const int32_t *targets, int grads, double loss_scale, double *loss_sum,
                                int32_t *argmax, double *attn_s, sr_error *e);
// Seconds spent in attention (its ring communication included) since the last call, waiting for the work.
int model_cuda_attn_time(model_cuda *d, double *seconds, sr_error *e);
// Sum of squared gradients over [lo, hi) (double).
int model_cuda_grad_sumsq(model_cuda *d, int64_t lo, int64_t hi, double *out, sr_error *e);
// One AdamW update of the slice (hyper-parameters and step from s; s->step is advanced here).
int model_cuda_adamw(model_cuda *d, adamw_state *s, double grad_scale, sr_error *e);
// Copy n floats device -> device (for the ZeRO-1 all-gather staging).
int model_cuda_copy(float *dst, const float *src, int64_t n, void *stream, sr_error *e);
// Copy n floats host -> device (to_device) or device -> host, synchronously.
int model_cuda_transfer(float *dev, float *host, int64_t n, int to_device, sr_error *e);
// Allocate / free device scratch of n floats.
int model_cuda_alloc(float **p, int64_t n, sr_error *e);
void model_cuda_release(float *p);
// Device memory in use (every allocation on this GPU, not only the model's) and the total, GiB.
int model_cuda_memory(double *used_gib, double *total_gib, sr_error *e);
// The calling thread's current device, and setting it (a thread that allocates for this rank's GPU).
int model_cuda_get_device(int *device, sr_error *e);
int model_cuda_set_device(int device, sr_error *e);
// Wait for the stream.
int model_cuda_sync(model_cuda *d, sr_error *e);
// Time the step's classes of work (train/phases.h: the forward and backward, zeroing, gradient norm, AdamW) with
// CUDA events on the stream, one where the class changes and one where the timed work pauses; the host never waits
// for them until model_cuda_phase_times.
int model_cuda_set_phase_times(model_cuda *d, sr_error *e);
// Add each class's seconds since the last call into seconds[TRAIN_PHASES] (waits for the last event: call it once
// the step is done).
int model_cuda_phase_times(model_cuda *d, double *seconds, sr_error *e);

#endif

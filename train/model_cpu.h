// model_cpu.h — a Qwen2/Llama-style decoder-only transformer on the CPU, llm.c-style: one flat
// parameter buffer named tensor by tensor with Hugging Face names, plain loops, analytic backward.
//
// The model runs on the tokens this rank holds (context parallelism): every per-token op is local,
// and only attention sees other ranks' tokens, through a model_attention callback (the executor's
// distributed attention); without one, a local dense causal reference over the given positions runs.
// Float32 is the training precision; float64 exists so finite-difference gradient checks are exact
// enough to mean something.
#ifndef SR_MODEL_CPU_H
#define SR_MODEL_CPU_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/model.h"
#include "train/phases.h"

enum { MODEL_F32 = 4, MODEL_F64 = 8 };  // element size in bytes doubles as the dtype tag

// Activation recomputation (model_cpu.recompute): none (every layer's activations kept), full (only each
// layer's input kept; the backward reruns the layer's forward, attention included), or selective (full, but
// each layer's attention output O and LSE are kept too, O(tokens) a layer, so the rerun skips attention: the
// backward takes the kept O and LSE, bit for bit the ones the forward computed). Selective recomputation may keep
// them for the first K layers only (model_cpu.keep_layers, model_cpu_set_keep_layers: where memory holds no more),
// the layers K..L-1 rerunning attention as under full recomputation; every K gives the same numbers.
// Whole-layer keeping (model_cpu.keep_all, model_cpu_set_keep_all; selective recomputation, K_all <= K): the first
// K_all layers keep every activation their backward reads (the norms' outputs and rstd, q, k, v after RoPE, o, lse,
// the residual x2, gate, up and h), as without recomputation, so their backward reruns nothing; the others share
// the recomputation's set. The kept values are the ones a rerun would compute again, so every K_all gives the same
// numbers too.
enum { MODEL_RECOMPUTE_OFF = 0, MODEL_RECOMPUTE_FULL = 1, MODEL_RECOMPUTE_KEEP_ATTN = 2 };

// O and LSE buffers of their own that selective recomputation needs when layers 0..keep_layers-1 of `layers` keep
// them, beside the set the recomputation shares: keep_layers, but layers - 1 when every layer keeps (layer 0 then
// keeps its O in the shared set, which no rerun overwrites), so keeping layers - 1 costs what keeping all does.
int model_attn_own_buffers(int layers, int keep_layers);

// Tensors of one layer, in Hugging Face order; biases exist only with attention_bias.
enum {
  MODEL_T_LN1, MODEL_T_Q, MODEL_T_QB, MODEL_T_K, MODEL_T_KB, MODEL_T_V, MODEL_T_VB, MODEL_T_O,
  MODEL_T_LN2, MODEL_T_GATE, MODEL_T_UP, MODEL_T_DOWN, MODEL_LAYER_TENSORS
};

// One named tensor inside the flat parameter buffer (offsets and sizes in elements).
typedef struct {
  char name[96];   // Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
  int64_t offset;  // first element in the flat buffer
  int64_t numel;
  int ndim;        // 1 (norms, biases) or 2 (matrices)
  int64_t shape[2];
  int layer;       // transformer layer, -1 for embeddings / final norm / LM head
} model_tensor;

// Attention over this rank's tokens, float32, supplied by the distributed executor.
// q, o [T, heads, head_dim]; k, v [T, kv_heads, head_dim]; lse [heads, T] (natural log).
typedef struct {
  void *ctx;
  // Forward of layer `layer`: writes o and lse for the T local query rows.
  int (*forward)(void *ctx, int layer, int64_t T, const float *q, const float *k, const float *v, float *o,
                 float *lse, sr_error *e);
  // Backward with the forward's final o and lse: overwrites dq, dk, dv (dk, dv summed over every rank's queries).
  int (*backward)(void *ctx, int layer, int64_t T, const float *q, const float *k, const float *v, const float *o,
                  const float *lse, const float *dout, float *dq, float *dk, float *dv, sr_error *e);
  // Optional (NULL: none): called with the layer's q and k (after RoPE) before its attention in every forward
  // that is not a recomputation, so an online sparse pattern (MTraining's vertical-slash estimation) is
  // estimated once per sample and reused by the backward.
  int (*estimate)(void *ctx, int layer, int64_t T, const float *q, const float *k, sr_error *e);
} model_attention;

// Per-layer activation pointers (into one allocation); under recomputation all layers share one set (but for o
// and lse, each keeping layer's own under MODEL_RECOMPUTE_KEEP_ATTN: model_attn_own_buffers), but for the layers
// kept whole (model_cpu.keep_all), which have a whole set each.
typedef struct {
  void *ln1, *rstd1, *q, *k, *v, *o, *lse, *x2, *ln2, *rstd2, *gate, *up, *h;
} model_layer_acts;

// The model: configuration, parameters, gradients, activations for up to max_tokens local tokens.
typedef struct {
  model_config cfg;
  int dtype;                  // MODEL_F32 or MODEL_F64
  int recompute;              // MODEL_RECOMPUTE_*: what the backward reruns of each layer's forward
  int keep_layers;            // MODEL_RECOMPUTE_KEEP_ATTN: layers 0..keep_layers-1 keep attention's O and LSE
  int keep_all;               // MODEL_RECOMPUTE_KEEP_ATTN: layers 0..keep_all-1 keep every activation (none rerun)
  int64_t max_tokens;         // local tokens the activations are sized for
  int64_t ce_chunk;           // tokens per cross-entropy chunk (logits exist only for one chunk)
  int64_t num_params;
  int num_tensors;
  model_tensor *tensors;
  int t_embed, t_norm, t_lm_head;  // tensor indices (t_lm_head == t_embed when tied)
  int (*t_layer)[MODEL_LAYER_TENSORS];  // per layer, indexed by MODEL_T_*; -1 where absent (biases)
  void *params, *grads;       // flat, num_params elements of dtype
  // rotary tables: inv_freq[head_dim/2] and the attention scaling (YaRN's mscale, else 1)
  double *inv_freq;
  double rope_mscale;
  // activations: x[l] is layer l's input for l in 0..L (x[L] the final residual)
  void *act_mem;
  void **x;
  model_layer_acts *acts;
  void *lnf, *rstdf, *logits, *scratch;  // scratch: backward buffers
  model_layer_acts rec;       // under recomputation: the set the rerunning layers share (gate, up, h: one MLP chunk's)
  void *kept_mem;             // the o and lse of the layers that keep their own (model_cpu_set_keep_layers)
  void *whole_mem;            // the whole sets of layers 0..keep_all-1 (model_cpu_set_keep_all)
  // the MLP runs over the tokens in chunks of mlp_rows (model_cpu_set_mlp_chunk; max_tokens: one chunk): its
  // backward's dh, dgate, dup and, under recomputation, gate, up and h (acts[*] point there) exist for one chunk
  int64_t mlp_rows;
  void *mlp_mem;
  void *dh, *dgate, *dup;
  model_attention attn;       // attn.forward == NULL: local dense causal reference
  // activation offload (model_cpu_set_offload): the layer inputs x[0..L-1] share `slots` buffers (x[l] in slot
  // l % slots, x[L] its own), and each of x[0..L-slots-1] waits in host memory between forward and backward (the
  // GPU model's scheme, train/model_cuda.cu; on the CPU "host" is a second buffer and the copies memcpy)
  int offload, slots;
  void *ckpt_host;            // [(L - slots) * max_tokens * hidden]: x[l] at l * max_tokens * hidden
  // timings of the last forward_backward, seconds (attention callback vs the rest)
  double time_attn, time_other;
  // wall seconds of each class of work (train/phases.h), added up by every forward_backward until the caller zeroes
  // them (a clock read costs nothing beside these loops); phase_rerun: the backward is rerunning a forward
  double phase_s[TRAIN_PHASES];
  int phase_rerun;
} model_cpu;

// Create a model for up to max_tokens local tokens (seq_len: the global sequence length, used by dynamic
// RoPE scaling; recompute: MODEL_RECOMPUTE_*). Parameters are zero; call model_init_random or
// model_load_safetensors next.
int model_cpu_create(model_cpu *m, const model_config *cfg, int dtype, int64_t max_tokens, int64_t seq_len,
                     int recompute, sr_error *e);
// Free everything model_cpu_create allocated.
void model_cpu_free(model_cpu *m);
// Run the MLP in chunks of `rows` tokens (plan/model.h's --mlp-chunk; rows <= 0 or >= max_tokens: the whole
// sequence, the default): its chunk buffers are made again for that many rows. The results are bit-identical to
// the whole sequence's (every sum runs in the same order).
int model_cpu_set_mlp_chunk(model_cpu *m, int64_t rows, sr_error *e);
// Selective recomputation (model made with MODEL_RECOMPUTE_KEEP_ATTN, which keeps every layer's) for the first
// `layers` layers only (0 .. num_layers): their kept O and LSE are made again; the others rerun attention.
int model_cpu_set_keep_layers(model_cpu *m, int layers, sr_error *e);
// Does layer `layer`'s recomputed forward take its kept O and LSE rather than rerun attention?
int model_cpu_keeps_attn(const model_cpu *m, int layer);
// Whole-layer keeping (selective recomputation) for the first `layers` layers (0 .. keep_layers): each gets a whole
// set of its own (its MLP's gate, up and h for every token) and its backward reruns nothing.
int model_cpu_set_keep_all(model_cpu *m, int layers, sr_error *e);
// Does layer `layer` keep every activation its backward reads (no recomputation, or one of the first keep_all)?
int model_cpu_keeps_all(const model_cpu *m, int layer);
// Turn activation offload on (before the first forward): the layer inputs share MODEL_EXEC_OFFLOAD_SLOTS buffers
// and the rest wait in host memory. The results are bit-identical to the resident model's.
int model_cpu_set_offload(model_cpu *m, sr_error *e);
// The offload's copies around a step (called by the forward and backward): x[i] was just written (out), layer l's
// backward is next (in). No-ops without offload and for the inputs that stay in their slot.
void model_offload_out(model_cpu *m, int i, int64_t T);
void model_offload_in(model_cpu *m, int l, int64_t T);
// Initialise weights: normal(0, 0.02) for matrices (GPT-2/llm.c recipe), ones for norms, zeros for biases;
// reproducible for a seed whatever the dtype (the same float64 draws, rounded).
void model_init_random(model_cpu *m, uint64_t seed);
// Find a tensor by Hugging Face name; NULL when absent.
const model_tensor *model_find_tensor(const model_cpu *m, const char *name);

// Forward over T local tokens (global positions pos[]), cross-entropy against targets[] (-1: ignored).
// Returns the summed loss in *loss_sum (float64) and, when argmax != NULL, each token's most likely next
// token. With grads: also the backward, accumulating (+=) d(loss_sum * loss_scale)/dθ into m->grads.
int model_forward_backward(model_cpu *m, int64_t T, const int32_t *tokens, const int64_t *pos,
                           const int32_t *targets, int grads, double loss_scale, double *loss_sum,
                           int32_t *argmax, sr_error *e);
// Zero the gradient buffer.
void model_zero_grad(model_cpu *m);

// Rotary inverse frequencies for a config (rope_scaling applied) into inv_freq[head_dim/2]; the
// attention scaling (YaRN mscale, else 1) into *mscale. seq_len matters only for "dynamic".
void model_rope_inv_freq(const model_config *cfg, int64_t seq_len, double *inv_freq, double *mscale);

// ---- AdamW (fp32 master weights; ZeRO-1: this rank owns parameters [lo, hi)) ------------------

typedef struct {
  double lr, beta1, beta2, eps, weight_decay, grad_clip;
  int64_t lo, hi;  // owned slice of the flat parameter vector
  int64_t step;    // updates taken
  float *m, *v;    // moments of the owned slice (hi - lo elements)
} adamw_state;

// Allocate moments for the slice [lo, hi) with the usual defaults (β 0.9/0.95, eps 1e-8, clip 1.0).
int adamw_create(adamw_state *s, int64_t lo, int64_t hi, double lr, double weight_decay, sr_error *e);
// Free the moments.
void adamw_free(adamw_state *s);
// Sum of squared gradients over [lo, hi) (float64), the rank's share of the global gradient norm.
double model_grad_sumsq(const model_cpu *m, int64_t lo, int64_t hi);
// One AdamW update of the owned slice, gradients multiplied by grad_scale first (clipping); weight decay
// applies to matrices only (norm gains and biases are not decayed, as in llm.c / nanoGPT).
void adamw_update(adamw_state *s, model_cpu *m, double grad_scale);
// Clip factor for a global gradient norm: min(1, clip / norm) (1 when grad_clip <= 0: no clipping).
double adamw_clip_scale(const adamw_state *s, double grad_norm);

#endif

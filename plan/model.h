// model.h — what is being trained: a Hugging Face config.json, and what the rest derives from it
// (parameter counts, FLOPs of every GEMM and of attention, bytes per token of each kind of state).
#ifndef SR_MODEL_H
#define SR_MODEL_H

#include <stdint.h>

#include "plan/error.h"

// The most layers a model may have (num_hidden_layers in a config).
#define MODEL_MAX_LAYERS (1 << 16)

typedef struct {
  char name[128];             // shipped name ("qwen2.5-3b") or the file's base name
  char path[512];             // the config.json it came from
  char architecture[64];      // "Qwen2ForCausalLM", "LlamaForCausalLM", ...
  char model_type[32];        // "qwen2", "llama", ... ("" when the file has none)
  int64_t hidden_size;        // d_model
  int64_t num_heads;          // query heads (num_attention_heads)
  int64_t num_kv_heads;       // num_key_value_heads (== num_heads without GQA)
  int64_t head_dim;           // head_dim when present, else hidden_size / num_heads
  int64_t num_layers;         // num_hidden_layers
  int64_t intermediate_size;  // SwiGLU inner width
  int64_t vocab_size;
  int64_t max_position_embeddings;
  int tie_word_embeddings;    // LM head shares the embedding matrix
  int attention_bias;         // q/k/v projections carry a bias (Qwen2: true; Llama: false)
  int o_proj_bias;            // the output projection carries a bias (Llama with attention_bias; never Qwen2)
  int mlp_bias;               // gate/up/down projections carry biases (Llama's mlp_bias)
  double rope_theta;
  char rope_scaling_type[32]; // "" (none), "linear", "dynamic", "yarn", "llama3"
  double rope_scaling_factor; // 1 when none
  int64_t rope_original_max_position;  // original_max_position_embeddings of the scaling, 0 when none
  double rms_norm_eps;
  // Qwen (v1) "logn attention" (use_logn_attn, seq_length): a query at position p >= seq_length is scaled
  // by log(p + 1) / log(seq_length), so attention entropy stays level past the training length.
  int use_logn_attn;
  int64_t logn_seq_length;    // the config's seq_length when use_logn_attn, else 0
} model_config;

// The logn-attention factor of a query at position pos: log(pos + 1) / log(seq_length) once pos + 1 >
// seq_length, else 1 (Qwen's modeling_qwen.py: logn_list[i] = log_{seq_length}(i) for i > seq_length);
// 1 when seq_length is 0 (off).
double model_logn_factor(int64_t pos, int64_t seq_length);

// Load a shipped model by name (models/<name>.json) or a config.json path; validates every field.
int model_load(const char *name_or_path, model_config *m, sr_error *e);
// Fill a model from already-parsed JSON text (file names the source in messages).
int model_from_json_text(const char *text, const char *file, model_config *m, sr_error *e);

// Total parameters (embeddings, per-layer weights and biases, norms, untied LM head).
int64_t model_param_count(const model_config *m);
// Parameters of one transformer layer.
int64_t model_layer_param_count(const model_config *m);

// Forward FLOPs per token of one layer's GEMMs (q, k, v, o projections and the three MLP GEMMs), 2 per MAC.
double model_layer_gemm_flops_per_token(const model_config *m);
// Forward FLOPs per token of the LM head GEMM (2 * hidden * vocab).
double model_lm_head_flops_per_token(const model_config *m);
// Forward attention FLOPs of one layer for `pairs` (query, key) pairs over all query heads:
// 4 * pairs * head_dim * num_heads (QK^T and PV, 2 FLOPs per MAC) — FlashAttention-2 paper's count.
double model_attn_flops(const model_config *m, double pairs);
// Query-key pairs of dense causal attention over n tokens: n(n+1)/2.
double model_causal_pairs(int64_t n);
// Backward-to-forward FLOP ratio used for attention (2.5: dQ, dK, dV, and the recomputed P; FA2 paper).
#define MODEL_ATTN_BWD_RATIO 2.5
// Backward-to-forward FLOP ratio of GEMMs (2: grad of input and grad of weight).
#define MODEL_GEMM_BWD_RATIO 2.0

// Bytes of K and V of one layer for n tokens at `bytes_per_elem` (2 for bf16): 2 * n * kv_heads * head_dim * b.
double model_kv_bytes(const model_config *m, int64_t n, int bytes_per_elem);
// Bytes per parameter of weights, gradients and optimizer state under mixed-precision AdamW
// (bf16 weights 2, bf16 grads 2, fp32 master + m + v 12), the ZeRO paper's accounting.
#define MODEL_BYTES_WEIGHT 2.0
#define MODEL_BYTES_GRAD 2.0
#define MODEL_BYTES_OPTIM 12.0
// Activation bytes saved per token per layer for backward without recomputation (recompute 0; bf16), with
// per-layer recomputation (1: only the layer input is kept) and with selective recomputation (2: the layer input,
// attention's output and its LSE).
double model_act_bytes_per_token_layer(const model_config *m, int recompute);

// What `sparsering-exec train --backend cuda` itself holds per GPU with its default bf16 GEMMs
// (train/model_cuda.cu's buffers, so the simulator's mixed-precision figures above can be set beside this
// trainer's): model state = fp32 weights and gradients, the ZeRO-1 slice (1/world) of the fp32 AdamW moments,
// the bf16 weight copy; per local token = the fp32 input of every layer and of the final norm, one layer's
// activations (all layers' without recomputation, recompute 0; every layer's attention output and LSE besides
// under selective recomputation, 2), the backward's gradient buffers, RoPE tables and token bookkeeping.
// Attention plans, the attention workspace and the chunked cross-entropy's logits are not in these.
double model_exec_state_bytes(const model_config *m, int world);
// Bytes a local token, averaged over the n_local tokens of the rank: the MLP's own buffers (gate|up, h and the
// backward's dh; dh alone without recomputation, whose gate|up and h are every layer's kept activations) exist for
// one chunk of model_exec_mlp_rows(n_local, mlp_chunk) rows, so they count rows / n_local of their per-token bytes.
double model_exec_bytes_per_token(const model_config *m, int recompute, int64_t n_local, int64_t mlp_chunk);
// Those MLP buffers' bytes per row of a chunk (recompute 1 or 2: gate|up, h, dh in bf16, 8 I; recompute 0: dh, 2 I).
double model_exec_mlp_bytes_per_row(const model_config *m, int recompute);
// Of model_exec_bytes_per_token's bytes a local token, selective recomputation's kept attention outputs (bf16) and
// LSEs (fp32) when layers 0..keep_layers-1 keep them: one buffer a keeping layer, but L - 1 when all L keep (layer
// 0's O is then the one the recomputation's layer set holds anyway).
double model_exec_kept_attn_bytes_per_token(const model_config *m, int keep_layers);
// Whole-layer keeping beside selective recomputation (train --keep-activations): the device bytes a local token
// (averaged over n_local, as model_exec_bytes_per_token) that layers 0..keep_all-1 keeping every activation their
// backward reads take beyond selective recomputation with those layers keeping attention's output: a whole set a
// layer (ln1, ln2, gate|up, h in the GEMMs' dtype of act_bytes bytes, 2 for bf16; rstd1, rstd2, x2 fp32; q, k, v
// bf16; its o and lse are counted already), but with all L kept the recomputation's shared set (its MLP buffers one
// chunk's) is not made, so L cost L sets less that one (train/model_cuda.cu).
double model_exec_kept_whole_bytes_per_token(const model_config *m, int keep_all, int64_t n_local, int64_t mlp_chunk,
                                             int act_bytes);
// `train --mlp-chunk`: the MLP (post-attention norm output -> gate|up -> SwiGLU -> down, and its backward) runs over
// the rank's tokens in chunks of rows (FPDT's chunked FFN, Yao et al. 2024), so its buffers hold one chunk. The
// flag's values: N > 0 tokens a chunk, 0 the whole local sequence, MODEL_EXEC_MLP_AUTO (the default) the whole
// local sequence up to MODEL_EXEC_MLP_WHOLE_MAX tokens (results as before chunking existed) and chunks of
// MODEL_EXEC_MLP_AUTO_CHUNK tokens past it. The trainer and the simulator both take their rows from
// model_exec_mlp_rows.
#define MODEL_EXEC_MLP_AUTO (-1)
#define MODEL_EXEC_MLP_WHOLE_MAX 65536
#define MODEL_EXEC_MLP_AUTO_CHUNK 32768
// Rows of one MLP chunk for n_local tokens under an --mlp-chunk value (at least 1, at most max(n_local, 1)).
int64_t model_exec_mlp_rows(int64_t n_local, int64_t mlp_chunk);
// `train --offload-activations`: the layer inputs x[0..L-1] (fp32, the per-layer checkpoints) share
// MODEL_EXEC_OFFLOAD_SLOTS device buffers (in the backward: the layer's input, the next input coming back, and the
// recomputed output when the recomputation still wrote it; train/model_cuda.cu), and the inputs that leave their slot (all but the last `slots`) wait in
// pinned host memory between forward and backward; x[L] keeps its own buffer. Per local token: the device bytes this
// saves from model_exec_bytes_per_token, and the pinned host bytes it takes.
#define MODEL_EXEC_OFFLOAD_SLOTS 3
double model_exec_offload_saved_per_token(const model_config *m);
double model_exec_offload_host_per_token(const model_config *m);

#endif

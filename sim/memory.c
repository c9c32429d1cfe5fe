// memory.c — the per-GPU memory model (see memory.h).
#include "sim/memory.h"

#define GIB 1073741824.0

void sim_memory_estimate(const model_config *m, const cluster_desc *c, const mem_inputs *in, sim_memory *out) {
  double P = (double)model_param_count(m);
  int W = in->world > 0 ? in->world : 1;
  double n = (double)in->tokens_per_rank;
  double L = (double)m->num_layers;
  double H = (double)m->num_heads, KV = (double)m->num_kv_heads, d = (double)m->head_dim;
  // Mixed-precision AdamW (ZeRO paper, Rajbhandari et al. 2020, sec. 3.1): 2 bytes of bf16 weights,
  // 2 of gradients, 12 of fp32 master weights + momentum + variance; ZeRO-1 shards the 12 over ranks.
  out->weights = P * MODEL_BYTES_WEIGHT;
  out->grads = P * MODEL_BYTES_GRAD;
  out->optim = P * MODEL_BYTES_OPTIM / (in->zero ? W : 1);
  double per_layer_saved = model_act_bytes_per_token_layer(m, in->recompute);
  double per_layer_full = model_act_bytes_per_token_layer(m, 0);
  out->host_bytes = 0;
  if (in->fpdt_chunk > 0) {
    // FPDT: a chunk holds C / W tokens of this rank; two chunks live on the GPU (double buffering).
    double chunk = (double)in->fpdt_chunk / W;
    if (chunk > n) chunk = n;
    double qkvo = ((H + 2 * KV) * d * 2 + H * d * 2 + H * 4);  // q, k, v, o bf16 and fp32 LSE per token
    if (in->fpdt_offload) {
      out->activations = L * n * (double)m->hidden_size * 2 + 2 * chunk * per_layer_full;
      out->host_bytes = c->gpus_per_node * L * n * qkvo;
    } else {
      out->activations = L * n * per_layer_saved + n * per_layer_full;
    }
  } else {
    // Per-layer recomputation keeps each layer's input; the layer in backward is rebuilt in full.
    out->activations = L * n * per_layer_saved + (in->recompute ? n * per_layer_full : 0);
  }
  if (in->exec_trainer) {
    // sparsering-exec train's own allocations (train/model_cuda.cu, counted by plan/model.h): fp32 weights
    // and a bf16 copy, fp32 gradients, this rank's ZeRO-1 slice of the fp32 AdamW moments; fp32 buffers a token
    out->weights = P * (4 + 2);
    out->grads = P * 4;
    out->optim = P * 8 / W;
    out->activations = n * model_exec_bytes_per_token(m, in->recompute);
  }
  // Ring double buffers: forward holds the shard being used and the one arriving (K and V); backward
  // also carries the travelling dK/dV at grad precision.
  double kv_tok = 2 * KV * d;
  double shard = (double)in->kv_shard_tokens;
  double fwd = 2 * shard * kv_tok * in->kv_bytes_per_elem;
  double bwd = 2 * shard * kv_tok * (in->kv_bytes_per_elem + in->grad_bytes_per_elem);
  out->kv_buffers = fwd > bwd ? fwd : bwd;
  out->index_bytes = in->recompute ? in->index_bytes : in->index_bytes * L;
  // fp32 running output and LSE of the rank's queries (docs/design.md, "The LSE merge": running outputs stay fp32),
  // and one chunk (2K tokens) of fp32 logits plus their gradient for the chunked cross-entropy.
  double ce = (n < SIM_CE_CHUNK ? n : SIM_CE_CHUNK) * (double)m->vocab_size * 8;
  out->workspace = n * H * (d + 1) * 4 + ce + SIM_MEM_RESERVE;
  if (in->attention_only) {
    // Attention alone: no weights, gradients or optimizer state; each layer's q, k, v, o and dO in bf16,
    // its LSE and the fp32 dQ accumulator (the executor's attn workspace), no cross-entropy logits.
    out->weights = out->grads = out->optim = 0;
    out->activations = L * n * ((H + 2 * KV) * d * 2 + 2 * H * d * 2 + H * 4 + H * d * 4);
    out->host_bytes = 0;
    out->workspace = n * H * (d + 1) * 4 + SIM_MEM_RESERVE;
  }
  out->total = out->weights + out->grads + out->optim + out->activations + out->kv_buffers + out->index_bytes +
               out->workspace;
  out->capacity = c->gpu.mem_gib * GIB;
  out->fits = out->total <= out->capacity && out->host_bytes <= c->host_mem_gib * GIB;
}

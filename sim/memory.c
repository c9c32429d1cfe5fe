// memory.c — the per-GPU and per-node memory model (see memory.h).
#include "sim/memory.h"

#include <string.h>

#define GIB 1073741824.0

static double max2(double a, double b) { return a > b ? a : b; }
static double min2(double a, double b) { return a < b ? a : b; }

// ---- FPDT's attention buffers --------------------------------------------------------------------

// A chunk's running output, LSE and D (fp32) of one rank of FPDT (Ulysses over all W ranks inside a chunk: H / W
// query heads over a chunk's C tokens), and (W > 1) its gathered q, o, dO (bf16) and dQ (fp32).
static double fpdt_chunk_state(const model_config *m, const mem_inputs *in) {
  int W = in->world > 0 ? in->world : 1;
  double d = (double)m->head_dim, C = min2((double)in->fpdt_chunk, (double)in->seq), hr = (double)m->num_heads / W;
  return C * hr * (d + 2) * 4 + (W > 1 ? C * hr * d * (2 + 2 + 2 + 4) : 0);
}

// ---- the step ------------------------------------------------------------------------------------

int sim_mem_inputs(const plan *p, mem_inputs *mi, sr_error *e) {
  memset(mi, 0, sizeof *mi);
  mi->world = p->layout.world;
  mi->seq = p->layout.n_tokens;
  for (int r = 0; r < p->layout.world; r++)
    if (p->layout.rank_count[r] > mi->tokens_per_rank) mi->tokens_per_rank = p->layout.rank_count[r];
  mi->recompute = p->spec.recompute;
  mi->zero = p->spec.zero;
  mi->offload_activations = p->spec.offload_activations;
  mi->offload_optimizer = p->spec.offload_optimizer;
  mi->fpdt_chunk = p->spec.fpdt_chunk;
  mi->fpdt_offload = p->spec.fpdt_offload;
  mi->kv_bytes_per_elem = p->spec.kv_bytes > 0 ? p->spec.kv_bytes : 2;
  mi->grad_bytes_per_elem = p->schedule.grad_bytes_per_elem > 0 ? p->schedule.grad_bytes_per_elem : 4;
  mi->exec_trainer = strcmp(p->spec.trainer, "exec") == 0;
  mi->mlp_chunk = p->spec.mlp_chunk;
  mi->attention_only = p->spec.attention_only;
  return mi->exec_trainer ? sim_exec_workspace(p, &mi->exec_workspace, &mi->exec_workspace_host, e) : SR_OK;
}

// Model state: mixed-precision AdamW (ZeRO paper, Rajbhandari et al. 2020, sec. 3.1): 2 bytes of bf16 weights,
// 2 of gradients, 12 of fp32 master weights + momentum + variance. ZeRO-1 shards the 12 over the ranks, ZeRO-2
// also the gradients (a layer's are whole until its reduce-scatter), ZeRO-3 also the weights (two modules
// gathered: the one in use and the one prefetched; the embedding is the largest). Optimizer offload
// (ZeRO-Offload, Ren et al. 2021) moves the 12 bytes and an fp32 copy of the gradients (4) to the host.
static void model_state(const model_config *m, const mem_inputs *in, int ranks_per_node, sim_memory *out) {
  double P = (double)model_param_count(m), Pl = (double)model_layer_param_count(m);
  double Pe = (double)(m->vocab_size * m->hidden_size);
  int W = in->world > 0 ? in->world : 1, z = in->zero;
  out->weights = z >= 3 ? MODEL_BYTES_WEIGHT * (P / W + 2 * max2(Pl, Pe)) : MODEL_BYTES_WEIGHT * P;
  out->grads = z >= 2 ? MODEL_BYTES_GRAD * (P / W + Pl) : MODEL_BYTES_GRAD * P;
  double shard = z >= 1 ? P / W : P;
  out->optim = MODEL_BYTES_OPTIM * shard;
  if (in->offload_optimizer) {
    out->host_optim = ranks_per_node * (MODEL_BYTES_OPTIM + 4) * shard;
    out->optim = 0;
  }
}

// Activations of a mixed-precision trainer: checkpoints (every layer's saved activations: its input alone with
// recomputation) and the working set of the layer in flight. FPDT works a chunk at a time (Yao et al. 2024:
// the FFN and the loss are chunked too): two chunks of the layer in flight, and the attention's q/k/v/o/lse of
// every chunk of the layers held (one with recomputation), offloaded to the host but for two chunks.
static void activations(const model_config *m, const mem_inputs *in, int ranks_per_node, sim_memory *out) {
  int W = in->world > 0 ? in->world : 1;
  double n = (double)in->tokens_per_rank, L = (double)m->num_layers;
  double H = (double)m->num_heads, KV = (double)m->num_kv_heads, d = (double)m->head_dim;
  double saved = model_act_bytes_per_token_layer(m, in->recompute), full = model_act_bytes_per_token_layer(m, 0);
  double ckpt_layer = n * saved, work;  // a layer's checkpoint; the working set of the layer in flight
  if (in->fpdt_chunk > 0) {
    double chunk = min2((double)in->fpdt_chunk / W, n);
    double qkvo = (H + 2 * KV) * d * 2 + H * d * 2 + H * 4;  // q, k, v, o bf16 and fp32 LSE a token
    double attn_set = (in->recompute ? 1 : L) * n * qkvo;
    if (!in->recompute) ckpt_layer = n * (full - qkvo);  // the rest of each layer's activations stays
    work = 2 * chunk * full;
    if (in->fpdt_offload) {
      work += 2 * chunk * qkvo;
      out->host_attn = ranks_per_node * attn_set;
    } else {
      work += attn_set;
    }
  } else {
    work = in->recompute ? n * full : 0;
  }
  double ckpt = L * ckpt_layer;
  if (in->recompute == 2 && in->keep_layers > 0 && in->keep_layers < L)  // the rest keep their input alone
    ckpt = in->keep_layers * ckpt_layer + (L - in->keep_layers) * n * model_act_bytes_per_token_layer(m, 1);
  if (in->recompute == 2 && in->keep_all > 0 && in->fpdt_chunk <= 0)  // the layers kept whole: all of theirs
    ckpt += in->keep_all * (n * full - ckpt_layer);
  if (in->offload_activations) {  // the layer in use and the one coming back stay on the GPU
    out->host_activations = ranks_per_node * ckpt;
    ckpt = min2(L, 2) * ckpt_layer;
  }
  out->activations = ckpt + work;
}

// sparsering-exec train's own allocations (train/model_cuda.cu, counted by plan/model.h): fp32 weights and a
// bf16 copy, fp32 gradients, this rank's ZeRO-1 slice of the fp32 AdamW moments; its buffers a token (recompute 2:
// selective recomputation, the keeping layers' attention output and LSE kept; the MLP's buffers for one
// --mlp-chunk), the layer inputs on the host with --offload-activations; FPDT's executor offloads its gathered KV
// chunks only.
static void exec_trainer(const model_config *m, const mem_inputs *in, int ranks_per_node, sim_memory *out) {
  double P = (double)model_param_count(m), n = (double)in->tokens_per_rank;
  int W = in->world > 0 ? in->world : 1;
  out->weights = P * (4 + 2);
  out->grads = P * 4;
  out->optim = P * 8 / W;
  out->host_optim = 0;
  out->activations = n * model_exec_bytes_per_token(m, in->recompute, in->tokens_per_rank, in->mlp_chunk);
  if (in->recompute == 2 && in->keep_layers > 0 && in->keep_layers < m->num_layers)  // some layers keep: theirs
    out->activations = n * (model_exec_bytes_per_token(m, 1, in->tokens_per_rank, in->mlp_chunk) +
                            model_exec_kept_attn_bytes_per_token(m, in->keep_layers));
  if (in->recompute == 2 && in->keep_all > 0)  // the layers kept whole: their sets (bf16 GEMM operands)
    out->activations +=
        n * model_exec_kept_whole_bytes_per_token(m, in->keep_all, in->tokens_per_rank, in->mlp_chunk, 2);
  out->host_activations = 0;
  if (in->offload_activations) {
    out->activations -= n * model_exec_offload_saved_per_token(m);
    out->host_activations = ranks_per_node * n * model_exec_offload_host_per_token(m);
  }
  out->host_attn = ranks_per_node * in->exec_workspace_host;
}

void sim_memory_estimate(const model_config *m, const cluster_desc *c, const mem_inputs *in, sim_memory *out) {
  int W = in->world > 0 ? in->world : 1;
  int per_node = c->gpus_per_node > 0 && c->gpus_per_node < W ? c->gpus_per_node : W;
  double n = (double)in->tokens_per_rank, L = (double)m->num_layers;
  double H = (double)m->num_heads, KV = (double)m->num_kv_heads, d = (double)m->head_dim;
  out->host_optim = out->host_activations = out->host_attn = 0;
  model_state(m, in, per_node, out);
  activations(m, in, per_node, out);
  if (in->exec_trainer) exec_trainer(m, in, per_node, out);
  // Ring double buffers: forward holds the shard being used and the one arriving (K and V); backward
  // also carries the travelling dK/dV at grad precision.
  double kv_tok = 2 * KV * d;
  double shard = (double)in->kv_shard_tokens;
  double fwd = 2 * shard * kv_tok * in->kv_bytes_per_elem;
  double bwd = 2 * shard * kv_tok * (in->kv_bytes_per_elem + in->grad_bytes_per_elem);
  out->kv_buffers = fwd > bwd ? fwd : bwd;
  out->index_bytes = in->recompute ? in->index_bytes : in->index_bytes * L;
  // fp32 running output and LSE of the rank's queries (docs/design.md, "The LSE merge": running outputs stay fp32),
  // and one chunk (2K tokens) of fp32 logits plus their gradient for the chunked cross-entropy (sparsering-exec
  // train: bf16 logits, their gradient written in place).
  double ce = (n < SIM_CE_CHUNK ? n : SIM_CE_CHUNK) * (double)m->vocab_size * (in->exec_trainer ? 2 : 8);
  double running = in->fpdt_chunk > 0 ? fpdt_chunk_state(m, in) : n * H * (d + 1) * 4;
  if (in->exec_trainer) {  // the executor's shared workspace holds the KV buffers and the running state
    out->kv_buffers = 0;
    running = in->exec_workspace;
  }
  out->workspace = running + ce + SIM_MEM_RESERVE + in->bars_bytes;
  if (in->attention_only) {
    // Attention alone: no weights, gradients or optimizer state; each layer's q, k, v, o and dO in bf16,
    // its LSE and the fp32 dQ accumulator (the executor's attn workspace) on the GPU, nothing on the host,
    // no cross-entropy logits.
    out->weights = out->grads = out->optim = 0;
    out->activations = L * n * ((H + 2 * KV) * d * 2 + 2 * H * d * 2 + H * 4 + H * d * 4);
    out->host_optim = out->host_activations = out->host_attn = 0;
    out->workspace = running + SIM_MEM_RESERVE + in->bars_bytes;
  }
  out->builder = in->exec_trainer && !in->attention_only ? in->builder_bytes : 0;
  out->total = out->weights + out->grads + out->optim + out->activations + out->kv_buffers + out->index_bytes +
               out->workspace + out->builder;
  out->host_bytes = out->host_optim + out->host_activations + out->host_attn;
  out->capacity = c->gpu.mem_gib * GIB;
  out->host_capacity = c->host_mem_gib * GIB;
  out->fits = out->total <= out->capacity && out->host_bytes <= out->host_capacity;
}

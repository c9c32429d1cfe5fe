// memory.h — memory per GPU and per host (node) of one training step, and the out-of-memory verdict.
//
// Counted per rank: weights, gradients, optimizer state (ZeRO stages: 1 shards the optimizer state over the
// ranks, 2 also the gradients, 3 also the weights, gathered a layer at a time), saved activations (only layer
// inputs with per-layer recomputation, plus the one layer being recomputed), the attention's buffers (the
// ring's KV double buffers, or FPDT's chunk buffers), one layer's tile index, the fp32 running attention
// output and the chunked cross-entropy's logits, and a fixed reserve for the CUDA context, NCCL buffers and
// allocator fragmentation. What lives in pinned host memory is counted per node (every rank of the node
// together): the optimizer state with optimizer offload (ZeRO-Offload), the checkpoints with activation
// offload, FPDT's offloaded chunks. With exec_trainer the model state and the activations are those
// sparsering-exec train allocates (plan/model.h), and FPDT's buffers those of its executor
// (exec/fpdt.c: the gathered KV chunks offloaded, dK/dV accumulated on the GPU).
#ifndef SR_MEMORY_H
#define SR_MEMORY_H

#include <stdint.h>

#include "plan/cluster.h"
#include "plan/model.h"
#include "plan/plan.h"
#include "sim/sim.h"

// Bytes held back for the CUDA context, NCCL's buffers and allocator fragmentation.
#define SIM_MEM_RESERVE (2.0 * 1073741824.0)
// Tokens per chunk of the chunked cross-entropy (logits of one chunk exist at a time).
#define SIM_CE_CHUNK 2048

typedef struct {
  int world;
  int64_t seq;               // tokens of the sequence (FPDT's gathered chunks cover all of them)
  int64_t tokens_per_rank;   // the largest rank's tokens
  int64_t kv_shard_tokens;   // the largest KV shard a rank receives (ring kinds; 0 otherwise)
  double index_bytes;        // one layer's tile index on the largest rank
  double bars_bytes;         // its compact bars' lists expanded for a call (the executor's workspace: once, not a layer)
  int recompute;             // 0 none, 1 per layer, 2 per layer but attention's output and LSE kept
  int zero;                  // ZeRO stage 0..3
  int offload_activations;   // the per-layer checkpoints in pinned host memory (two layers' on the GPU)
  int offload_optimizer;     // the optimizer state and its fp32 gradients in host memory
  int64_t fpdt_chunk;        // FPDT chunk (tokens over all ranks); 0 when not FPDT
  int fpdt_offload;
  int grad_bytes_per_elem;   // dK/dV on the wire (4: fp32)
  int kv_bytes_per_elem;     // K/V on the wire (2: bf16)
  int exec_trainer;          // count sparsering-exec train's state and buffers (plan_spec.trainer "exec")
  int64_t mlp_chunk;         // exec_trainer: its --mlp-chunk (0: the whole local sequence; MODEL_EXEC_MLP_AUTO)
  int attention_only;        // only the attention of a layer at a time (plan_spec.attention_only): no model
                             // state; q, k, v, o, dO, dQ of every layer's input; no logits
} mem_inputs;

// The inputs a plan decides (every field but kv_shard_tokens and index_bytes, which the step's simulation finds).
void sim_mem_inputs(const plan *p, mem_inputs *mi);
// Fill out with the per-GPU and per-node host memory of one step and whether it fits.
void sim_memory_estimate(const model_config *m, const cluster_desc *c, const mem_inputs *in, sim_memory *out);

// The device and pinned host memory of one layer's distributed attention as `sparsering-exec attn` runs it
// (what `attn --predict` prints beside the measured memory): the rank's Q, K, V, O, dO (bf16) and LSE, dQ,
// dK, dV (fp32), the ring's or FPDT's buffers and the tile index; host: FPDT's offloaded KV chunks of the rank.
typedef struct {
  double tensors, buffers, index_bytes;  // device bytes
  double total;                          // their sum
  double host_bytes;                     // pinned host bytes of the rank
} sim_attn_memory;
void sim_attn_memory_estimate(const model_config *m, const mem_inputs *in, sim_attn_memory *out);

#endif

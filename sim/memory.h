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
// sparsering-exec train allocates (plan/model.h), and the attention's buffers its executor's shared workspace
// (kernels/workspace.h: the ring's or FPDT's buffers, the running output, the Ulysses side, the expanded bars).
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
  int keep_layers;           // recompute 2: only layers 0..keep_layers-1 keep them (0: every layer)
  int keep_all;              // recompute 2: layers 0..keep_all-1 keep every activation (no rerun; 0: none)
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
  double exec_workspace;     // exec_trainer: the executor's shared attention workspace on its fullest rank but for
                             // the index's terms (sim_exec_workspace), which bars_bytes adds
  double exec_workspace_host;  // exec_trainer: its pinned host part a rank (FPDT's offloaded chunks)
  double builder_bytes;      // exec_trainer: the GPU index builder's device state (plan_cache.h; 0 where the host builds)
} mem_inputs;

// The inputs a plan decides (every field but kv_shard_tokens, index_bytes and bars_bytes, which the step's
// simulation finds); fails only where the exec trainer's routes cannot be built.
int sim_mem_inputs(const plan *p, mem_inputs *mi, sr_error *e);
// sparsering-exec train's shared attention workspace (kernels/workspace.h, the arithmetic the executor allocates
// by): the largest over the ranks of their shapes under p (ws_shape_of; the layer's routes as without skipping),
// without the index's terms (expanded bars, the bars' scratch); device and pinned host bytes.
int sim_exec_workspace(const plan *p, double *device, double *host, sr_error *e);
// Fill out with the per-GPU and per-node host memory of one step and whether it fits.
void sim_memory_estimate(const model_config *m, const cluster_desc *c, const mem_inputs *in, sim_memory *out);

#endif

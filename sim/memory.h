// memory.h — memory per GPU of one training step and the out-of-memory verdict.
//
// Counted per rank: weights, gradients, optimizer state (sharded over ranks with ZeRO-1), saved
// activations (only layer inputs with per-layer recomputation, plus the one layer being
// recomputed), KV double buffers of the ring (KV, and KV + dK/dV in backward), one layer's tile index,
// the fp32 running attention output and the chunked cross-entropy's logits, and a fixed reserve for
// the CUDA context, NCCL buffers and allocator fragmentation. FPDT with offload keeps two chunks on
// the GPU and every layer's q/k/v/o/lse chunks in pinned host memory. With exec_trainer the model state
// and the activations are those sparsering-exec train allocates (plan/model.h: fp32), the rest as above.
#ifndef SR_MEMORY_H
#define SR_MEMORY_H

#include <stdint.h>

#include "plan/cluster.h"
#include "plan/model.h"
#include "sim/sim.h"

// Bytes held back for the CUDA context, NCCL's buffers and allocator fragmentation.
#define SIM_MEM_RESERVE (2.0 * 1073741824.0)
// Tokens per chunk of the chunked cross-entropy (logits of one chunk exist at a time).
#define SIM_CE_CHUNK 2048

typedef struct {
  int world;
  int64_t tokens_per_rank;   // the largest rank's tokens
  int64_t kv_shard_tokens;   // the largest KV shard a rank receives (ring kinds; 0 otherwise)
  double index_bytes;        // one layer's tile index on the largest rank
  int recompute, zero;
  int64_t fpdt_chunk;        // FPDT chunk (tokens over all ranks); 0 when not FPDT
  int fpdt_offload;
  int grad_bytes_per_elem;   // dK/dV on the wire (4: fp32)
  int kv_bytes_per_elem;     // K/V on the wire (2: bf16)
  int exec_trainer;          // count sparsering-exec train's state and buffers (plan_spec.trainer "exec")
  int attention_only;        // only the attention of a layer at a time (plan_spec.attention_only): no model
                             // state; q, k, v, o, dO, dQ of every layer's input; no logits
} mem_inputs;

// Fill out with the per-GPU memory of one step and whether it fits.
void sim_memory_estimate(const model_config *m, const cluster_desc *c, const mem_inputs *in, sim_memory *out);

#endif

// predict.h — the simulator's prediction of one layer's distributed attention, for comparison with
// what the executor measures (`sparsering-exec attn --predict`): the same plan and pattern go to
// sim_run (sim/sim.h) with the plan's cluster, typically a calibrated one. For vs-online the caller
// passes the pattern the run estimated (dist_attn_pattern_used) and the plan's "vs-online:P" makes the
// simulator charge the estimation on top of it.
#ifndef SR_PREDICT_H
#define SR_PREDICT_H

#include <stddef.h>

#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/plan.h"
#include "sim/memory.h"

// Simulate `layer` alone (a one-layer model with that layer's pattern, no recomputation) and return
// the spans of its attention forward (attn, kv_send, a2a; for vs-online also the estimation, its
// collectives and the index build, which the executor runs inside every forward) and backward (attn_bwd, kv_send, dkv_send,
// a2a) in seconds. When csv_path != NULL, write those events as a timeline CSV (run "sim", layer
// `layer`), backward placed right after forward as the executor runs them.
int predict_attention(const plan *p, const pattern *pat, int layer, const char *csv_path, double *fwd_s, double *bwd_s,
                      sr_error *e);
// The device and pinned host memory one layer's attention takes on the CUDA backend as `sparsering-exec attn` holds
// it (sim/attn_memory.c), each item the largest over the ranks as the executor reports them: the rank's tensors
// (ws_layer_tensor_bytes), the attention plan's own copies (tile indices, their transposes and bar chunks, masks,
// positions: kernels/index_bytes.c on the pattern's counts) and the shared workspace (kernels/workspace.h, the
// arithmetic the executor allocates by); pinned host memory: FPDT's offloaded chunks.
typedef struct {
  double tensors, plan, workspace;  // device bytes
  double total;                     // their sum
  double host_bytes;                // pinned host bytes of the rank
} sim_attn_memory;
int predict_attention_memory(const plan *p, const pattern *pat, int layer, sim_attn_memory *out, sr_error *e);
// The prediction as `attn` prints it: "X GiB (the rank's tensors A, the attention plan B, the shared workspace C);
// pinned host memory D" (sizes in GiB, MiB or KiB as the measured line has them).
void predict_memory_text(const sim_attn_memory *m, char *out, size_t size);

#endif

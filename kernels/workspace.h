// workspace.h — the sizes of distributed attention's shared scratch workspace on the GPU (the CUDA backend's KV
// double buffers, fp32 dK/dV accumulators, flush receptions, the running O, the Ulysses side's gathered tensors and
// staging; FPDT's chunk buffers and its pinned host memory; the kernels' bars' scratch and expanded bar lists), and
// what a plan keeps besides its tile indices: plain C, the one arithmetic that the executor allocates by
// (exec/dist_workspace.h holds the buffers) and that the simulator predicts with (sim/predict.h), as
// kernels/index_bytes.c is for the tile indices.
//
// A process holds one workspace that every layer's plan shares (exec/dist_workspace_cuda.c grows each buffer to
// the largest any plan needs); a plan's share of it is its shape's bytes (ws_buffer_bytes).
#ifndef SR_WORKSPACE_H
#define SR_WORKSPACE_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/plan.h"
#include "plan/ring_plan.h"
#include "plan/tile_index.h"

// The buffers, one slot each (the pairs are double buffers indexed by step parity).
typedef enum {
  WS_KV_OWN,                  // bf16 [2, n_q, nkv, d]: this rank's K|V packed as the ring sends it
  WS_KV_BUF0, WS_KV_BUF1,     // bf16 [2, n_kmax, nkv, d]: received shards
  WS_KV_OUTER0, WS_KV_OUTER1, // bf16, likewise: early (inter-node) receptions, when the ring plan has any
  WS_ACC0, WS_ACC1,           // fp32 [2, n_kmax, nkv, d]: dK|dV partial sums travelling with their shard
  WS_ACC_IN0, WS_ACC_IN1,     // fp32, likewise: arriving partial sums
  WS_FLUSH0, WS_FLUSH1,       // fp32 [max_flush][2, n_q, nkv, d]: partial sums coming home, per step parity
  WS_O_RUN,                   // fp32 [n_q, nh, d]: the running output of the forward
  WS_D_ROW,                   // fp32 [nh, n_q]: rowsum(dO * O) of the backward
  WS_QG, WS_OG, WS_DOG,       // bf16 [n_q, nh, d]: Ulysses (U > 1) q, o, dO over the group's tokens
  WS_LSEG,                    // fp32 [nh, n_q]
  WS_DQG,                     // fp32 [n_q, nh, d]
  WS_DKVG,                    // fp32 [2, n_q, nkv, d]
  WS_STAGE,                   // fp32-sized all-to-all staging
  WS_BAR_SCRATCH,             // fp32 [bar keys][2][128]: the backward's bars' partial dK|dV (sa_bar_scratch_bytes)
  WS_BARS,                    // int32 [bar entries]: a compact index's bar lists, expanded for the call (sa_bars_expand)
  WS_BARS_T,                  // int32 [bar uses]: a compact transpose's query tiles of its bar keys, for one step
  // FPDT (exec/fpdt.h); n_q is then the largest chunk's tokens, n_local this rank's largest part of one
  WS_FPDT_KV0, WS_FPDT_KV1,   // bf16 [2, n_q, nkv, d]: offload's fetch buffers
  WS_FPDT_STAGE0, WS_FPDT_STAGE1,  // bf16, likewise: chunks gathered on their way to the host (offload, U > 1)
  WS_FPDT_KV_ALL,             // bf16 [2, fpdt_tokens, nkv, d]: every gathered chunk (no offload, U > 1)
  WS_FPDT_DKV,                // fp32, likewise: every chunk's dK/dV accumulators (U > 1)
  WS_FPDT_HOST,               // PINNED HOST memory, bf16 [2, fpdt_tokens, nkv, d]: the offloaded chunks
  WS_COUNT
} ws_buffer;

// What sizes one plan's scratch buffers on one rank (exec/dist_internal.h names the same quantities).
typedef struct {
  int64_t n_q;       // this group's tokens
  int64_t n_kmax;    // the largest group's tokens
  int64_t n_local;   // this rank's tokens
  int nh, nkv;       // query and KV heads this rank computes
  int H;             // the model's query heads
  int d;             // head_dim
  int U;             // Ulysses degree (1: ring only)
  int64_t ktot;      // KV heads over the group's members, replicated heads once per member (U > 1)
  int max_flush;     // most dK|dV flushes one step brings to this rank
  int early;         // the ring plan has early (inter-node) transfers
  int64_t bar_scratch;  // bytes of the bars' scratch of the plan's largest source (FPDT: chunk pair; 0: no bars)
  int64_t bars;         // bytes of the expanded bar lists of the plan's largest compact index (FPDT: query chunk's)
  int64_t bars_t;       // bytes of the expanded bar_q_idx of its largest compact transpose (0: none compact)
  int64_t fpdt_tokens;  // FPDT: the tokens of every chunk together (0: not FPDT: the ring's buffers)
  int fpdt_offload;     // FPDT: the chunks wait in pinned host memory
} ws_shape;

// The shape of rank `rank`'s share under plan p but for its tile index's terms (bar_scratch, bars, bars_t are 0:
// the caller adds what its index holds): the Ulysses groups and head split of the executor (schedule_exec_ulysses,
// schedule_head_split, layout_group_ranks), and the flushes and early transfers of `ring`, the rank's ring of the
// layer's routes (ring_routes.rings[rank % U]; NULL: none). FPDT plans (spec.fpdt_chunk > 0) take no ring.
int ws_shape_of(const plan *p, int rank, const ring_plan *ring, ws_shape *out, sr_error *e);
// Bytes of every buffer a plan of shape s needs (0: not needed), into bytes[WS_COUNT].
void ws_buffer_bytes(const ws_shape *s, int64_t bytes[WS_COUNT]);
// Whether buffer b is pinned host memory (the others are device memory).
int ws_is_host(ws_buffer b);
// The device buffers' sum: the scratch one plan of shape s needs (what every plan held for itself before sharing).
int64_t ws_total_bytes(const ws_shape *s);
// The pinned host buffers' sum for a plan of shape s.
int64_t ws_host_total_bytes(const ws_shape *s);
// Device bytes of one rank's tensors of a layer's attention, n tokens (at least one): Q, K, V, O, dO in bf16 and
// LSE, dQ, dK, dV in fp32 (the executor's exec_dev buffers; H query heads, Hkv KV heads, head_dim d).
int64_t ws_layer_tensor_bytes(int64_t n, int H, int Hkv, int d);
// Device bytes a plan keeps for itself besides its tile indices: the key positions of every group
// (rows[g] tokens each, at least one slot) and the element masks of the model's `heads` heads
// (sa_masks_dev_bytes).
int64_t ws_plan_fixed_bytes(const int64_t *rows, int groups, const head_mask *masks, int heads);
// The key positions alone: all a plan keeps when the pattern is made on the device every forward (vs-online,
// adaspa-online: pattern_spec_device_made), whose masks live with its estimate.
int64_t ws_plan_positions_bytes(const int64_t *rows, int groups);

#endif

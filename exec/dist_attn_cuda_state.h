// dist_attn_cuda_state.h — the CUDA backend's per-plan state of distributed attention, shared by
// dist_attn_cuda.c (set-up, ring walks) and dist_attn_cuda_copies.c (the plan's own device copies: uploaded,
// freed, released and restored). CUDA builds only; not a public API.
#ifndef SR_DIST_ATTN_CUDA_STATE_H
#define SR_DIST_ATTN_CUDA_STATE_H

#include <cuda_runtime.h>

#include "exec/dist_internal.h"
#include "exec/dist_workspace.h"

// Early (outer) transfers of the current call: one NCCL group per post step on the second channel.
typedef struct {
  comm_pending *pend;  // [n_steps] the group posted at each step
  int *target;         // [n_steps] the step that computes on its reception (-1: sends only, or none)
} outer_state;

typedef struct {
  sa_gpu_index ix;
  sa_gpu_index ix_fwd;        // the forward form (a->ti_fwd_view) when plan.spec.fwd_runs built one (cells > 0)
  sa_gpu_index_t *ixt;        // [R] transposed index per source (backward)
  head_mask *masks;           // device masks [H]
  int64_t *qpos, **kpos;      // device positions
  int64_t plan_bytes;         // device bytes of the above (indices, masks, positions)
  // dist_attn_device_release: the device copies above freed, the host-built data kept (the tile index, masks
  // and positions live in struct dist_attn; the transposes and their bar chunks, which set-up uploads and
  // frees, are brought back from the device by the first release and kept from then on)
  int released;
  tile_index_t *tt_host;      // [R] host transposes (NULL until the first release; none when nh == 0)
  sa_bar_chunks *bc_host;     // [R] their bar chunks
  ws_shape shape;             // what sizes this plan's share of the workspace
  int ws_joined;              // attached to the process's workspace (dist_workspace.h)
  // The shared scratch (dist_workspace.h), addressed only between ws_acquire and ws_release of a call.
  void *kv_own, *kv_buf[2];   // bf16 [2, rows, Hkv, d]
  void *kv_outer[2];          // bf16, likewise: early (inter-node) receptions (ring plans with any)
  float *acc[2], *acc_in[2];  // fp32 [2, rows, Hkv, d]
  float *flush[2];            // fp32 flush receive buffers, per step parity: [max_flush][2, n_q, Hkv, d]
  float *o_run, *d_row;       // fp32 [n_q, nh, d], [nh, n_q]
  // Ulysses side (U > 1): this rank's heads over the group's tokens, and the all-to-all staging buffer.
  void *qg, *og, *dog;        // bf16 [n_q, nh, d]
  float *lseg, *dqg, *dkvg;   // fp32 [nh, n_q], [n_q, nh, d], [2, n_q, nkv, d]
  void *stage;
  outer_state os;             // allocated with the state when the ring plan has early transfers
} cuda_state;

#define CS(a) ((cudaStream_t)(a)->c->compute_stream)
#define CUDA_TRY(call)                                                                                   \
  do {                                                                                                   \
    cudaError_t r_ = (call);                                                                             \
    if (r_ != cudaSuccess)                                                                               \
      return sr_internal_error(e, 0, "rank %d: CUDA error %s at %s:%d", a->c->rank, cudaGetErrorString(r_), \
                               __FILE__, __LINE__);                                                      \
  } while (0)

static inline int64_t rows_of(const struct dist_attn *a, int g) { return a->glay->rank_count[g]; }

// The transposed index of every source (a->ti_view) to the device (s->ixt), transposed in threads.
int dist_cuda_transposes_upload(struct dist_attn *a, sr_error *e);
// Every group's global positions to the device (s->kpos; s->qpos: this rank's group).
int dist_cuda_positions_upload(struct dist_attn *a, sr_error *e);
// Device bytes the plan's own copies hold (indices, transposes, masks, positions).
int64_t dist_cuda_copies_bytes(const struct dist_attn *a);
// Free the plan's own device copies (the shared workspace is not the plan's: it stays joined).
void dist_cuda_copies_free(struct dist_attn *a);
// Free the host transposes and bar chunks a release kept.
void dist_cuda_host_transposes_free(struct dist_attn *a);

#endif

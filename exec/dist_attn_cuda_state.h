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
  tile_bar_cols cols, cols_fwd;  // host: the compact bars' columns of ix and ix_fwd (col_cnt NULL: lists uploaded)
  head_mask *masks;           // device masks [H]
  int64_t *qpos, **kpos;      // device positions
  dist_plan_bytes bytes;      // the above item by item, as uploaded (kept while released)
  int64_t plan_bytes;         // device bytes of the above now (dist_plan_bytes_total; 0 while released)
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
  float *bar_scratch;         // the bars' partial dK|dV of the backward (WS_BAR_SCRATCH)
  int32_t *bars, *bars_t;     // a compact index's lists and a compact transpose's bar_q_idx, expanded (WS_BARS, _T)
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

// The transposed index of every source (a->ti_view) to the device (s->ixt), transposed in threads; the bars'
// scratch is the workspace's (own_scratch 0: the plan's set-up, whose shape sizes it) or each copy's own (1).
int dist_cuda_transposes_upload(struct dist_attn *a, int own_scratch, sr_error *e);

// ---- timing (cuda_timer.c): an event pair per interval, host times on the call's timeline at its end ----------

typedef struct {
  int n, cap;
  cudaEvent_t origin;
  double origin_s;
  struct {
    cudaEvent_t a, b;
    int step;
    timeline_stream stream;
    timeline_phase phase;
    cudaStream_t st;
  } *ev;
} cuda_timer;

// Start timing a call (a no-op without a timeline): waits for the streams, records the origin.
int cuda_timer_start(struct dist_attn *a, cuda_timer *t, sr_error *e);
// Open an interval on CUDA stream st (timeline stream stream_id); returns its slot (-1 when not timing).
int cuda_timer_open_on(struct dist_attn *a, cuda_timer *t, int step, timeline_phase phase, timeline_stream stream_id,
                       cudaStream_t st);
// The same on the compute stream (STREAM_COMPUTE) or the comm stream (other timeline streams).
int cuda_timer_open(struct dist_attn *a, cuda_timer *t, int step, timeline_phase phase, timeline_stream stream_id);
// Close interval i (from an open; -1: nothing).
void cuda_timer_close(struct dist_attn *a, cuda_timer *t, int i);
// End of the call: wait for the work, add every interval to the timeline, free the events.
int cuda_timer_finish(struct dist_attn *a, cuda_timer *t, sr_error *e);

// ---- Ulysses all-to-alls on device buffers (ulysses_cuda.c), the CUDA twins of ulysses.c's ----------------------
// rows[j]: the tokens member j of this rank's group holds in this exchange (the plan's shards, or one FPDT chunk's
// parts); stage: the workspace's staging buffer (WS_STAGE). Elements are bf16 (COMM_BF16) or fp32 (COMM_F32).

// x [rows[gidx], Htot, d] (Htot = H, or Hkv with kv) -> out [sum rows, this rank's heads, d].
int ulysses_cuda_scatter(struct dist_attn *a, const int64_t *rows, void *stage, const void *x, int kv, comm_dtype dt,
                         void *out, sr_error *e);
// in [sum rows, this rank's heads, d] -> x [rows[gidx], Htot, d]: written (add = 0) or added (fp32; replicated KV heads).
int ulysses_cuda_gather(struct dist_attn *a, const int64_t *rows, void *stage, const void *in, int kv, comm_dtype dt,
                        int add, void *x, sr_error *e);
// LSE of this rank's rows [H, rows[gidx]] (row h at h * ld floats) -> [nh, sum rows] (to_group), or back.
int ulysses_cuda_lse(struct dist_attn *a, const int64_t *rows, int64_t ld, void *stage, const float *from, float *to,
                     int to_group, sr_error *e);
// Open an "a2a" interval on the comm stream once the compute queued so far is done (the all-to-all's start).
int ulysses_cuda_open(struct dist_attn *a, cuda_timer *t, int step, sr_error *e);
// Strided device copy of rows x width bytes on the compute stream (no-op when empty).
int dist_cuda_copy2d(struct dist_attn *a, void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t width,
                     int64_t rows, sr_error *e);

// An index to the device: compact (cols not empty: sa_gpu_index_upload_compact) or with its lists.
int dist_cuda_index_put(const tile_index *t, const tile_bar_cols *cols, sa_gpu_index *out, sr_error *e);
// A transpose with its host bar chunks to the device (the bars' scratch the workspace's): compact where
// dist_transpose_compact says so, else with its lists.
int dist_cuda_transpose_put(const tile_index_t *tt, const sa_bar_chunks *bc, sa_gpu_index_t *out, sr_error *e);
// The same with the choice made (compact: dist_transpose_compact(tt), as dist_transposes_each gives it).
int dist_cuda_transpose_put_as(const tile_index_t *tt, const sa_bar_chunks *bc, int compact, sa_gpu_index_t *out,
                               sr_error *e);
// Before a call's kernels read a compact index ix: its lists expanded into bars (the workspace's WS_BARS, room
// bytes) on the compute stream, *use the copy the kernels take (*out, pointing there); ix itself where it holds them.
int dist_cuda_bars_ready(struct dist_attn *a, const sa_gpu_index *ix, int32_t *bars, int64_t room, sa_gpu_index *out,
                         const sa_gpu_index **use, sr_error *e);
// Before a backward on t (a copy of a plan's transpose): the workspace's bars' scratch (scratch_room bytes) where t
// has none of its own, and a compact t's bar_q_idx expanded into bars_t (WS_BARS_T, room bytes).
int dist_cuda_bars_t_ready(struct dist_attn *a, sa_gpu_index_t *t, float *scratch, int64_t scratch_room,
                           int32_t *bars_t, int64_t room, sr_error *e);
// Every group's global positions to the device (s->kpos; s->qpos: this rank's group).
int dist_cuda_positions_upload(struct dist_attn *a, sr_error *e);
// Record what the plan's own copies hold (s->bytes from the uploads' footprints) and return their sum.
int64_t dist_cuda_copies_bytes(struct dist_attn *a);
// Free the plan's own device copies (the shared workspace is not the plan's: it stays joined).
void dist_cuda_copies_free(struct dist_attn *a);
// Free the host transposes and bar chunks a release kept.
void dist_cuda_host_transposes_free(struct dist_attn *a);

#endif

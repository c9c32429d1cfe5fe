// workspace.c — the sizes of the shared workspace's buffers and the shape of a rank's share under a plan
// (workspace.h): the executor allocates by them (exec/dist_workspace_cuda.c) and the simulator predicts with them.
#include "kernels/workspace.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "plan/util.h"

// ---- a rank's shape under a plan -------------------------------------------------------------------

int ws_shape_of(const plan *p, int rank, const ring_plan *ring, ws_shape *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  const layout *l = &p->layout;
  int fpdt = p->spec.fpdt_chunk > 0, W = l->world;
  int U = schedule_exec_ulysses(&p->schedule, fpdt), H = (int)p->model.num_heads, Hkv = (int)p->model.num_kv_heads;
  if (U < 1 || W % U || rank < 0 || rank >= W)
    return sr_input_error(e, NULL, "schedule.ulysses", "degree %d does not split %d ranks into groups", U, W);
  int *h_lo = malloc(sizeof(int) * (size_t)(3 * U + 1));
  if (!h_lo) return sr_internal_error(e, 0, "out of memory");
  int *kv_lo = h_lo + U + 1, *kv_hi = kv_lo + U, g = rank / U, j = rank % U;
  schedule_head_split(H, Hkv, U, h_lo, kv_lo, kv_hi);
  out->nh = h_lo[j + 1] - h_lo[j];
  out->nkv = out->nh > 0 ? kv_hi[j] - kv_lo[j] : 0;
  for (int m = 0; U > 1 && m < U; m++)  // KV heads over the members (replicated heads once per member)
    out->ktot += h_lo[m + 1] > h_lo[m] ? kv_hi[m] - kv_lo[m] : 0;
  free(h_lo);
  out->H = H, out->d = (int)p->model.head_dim, out->U = U;
  if (fpdt) {  // Ulysses over every rank inside each chunk: a chunk's tokens gathered, this rank's part of one
    out->n_q = sr_min64(p->spec.fpdt_chunk, l->n_tokens);
    out->n_local = layout_chunk_part_max(l, rank, p->spec.fpdt_chunk);
    out->fpdt_tokens = l->n_tokens, out->fpdt_offload = p->spec.fpdt_offload;
    return SR_OK;
  }
  out->n_local = l->rank_count[rank];
  for (int r = 0; r < W; r++) {  // group r / U holds the tokens of its U consecutive ranks
    int64_t n = 0;
    for (int m = r; r % U == 0 && m < r + U; m++) n += l->rank_count[m];
    if (r / U == g && r % U == 0) out->n_q = n;
    out->n_kmax = sr_max64(out->n_kmax, n);
  }
  int R = W / U;
  for (int st = 0; ring && st < ring->n_steps; st++) {  // other members flushing this group's shard at one step
    int n = 0;
    for (int m = 0; m < R; m++)
      n += m != g && ring->flush[(int64_t)st * R + m] && ring->src[(int64_t)st * R + m] == g;
    out->max_flush = n > out->max_flush ? n : out->max_flush;
  }
  out->early = ring && ring->n_early > 0;
  return SR_OK;
}

// ---- one plan's scratch --------------------------------------------------------------------------

// FPDT's buffers: a chunk's running output, LSE and D; under Ulysses (U > 1) its gathered q, o, dO and dQ, the
// all-to-all staging and every chunk's fp32 dK/dV; the chunks' KV resident (U > 1; one rank reads its own K and V)
// or in pinned host memory with two fetch buffers (and, U > 1, two buffers a chunk is gathered into); the bars'
// scratch and expanded lists of the largest query chunk's index and chunk pair's transpose (exec/fpdt_plan.c).
static void fpdt_bytes(const ws_shape *s, int64_t bytes[WS_COUNT]) {
  int64_t row = sr_max64(1, s->nkv) * s->d;
  int64_t chunk = 2 * sr_max64(1, s->n_q) * row, all = 2 * sr_max64(1, s->fpdt_tokens) * row;
  int64_t qn = sr_max64(1, s->n_q * s->nh * s->d), rows_h = sr_max64(1, s->n_q * s->nh);
  bytes[WS_O_RUN] = 4 * qn;
  bytes[WS_D_ROW] = bytes[WS_LSEG] = 4 * rows_h;
  bytes[WS_BAR_SCRATCH] = s->bar_scratch;
  bytes[WS_BARS] = s->bars;
  bytes[WS_BARS_T] = s->bars_t;
  if (s->U > 1) {
    // a chunk's LSE exchange packs the rank's column block and receives beside it (ulysses_cuda_lse)
    int64_t stage = s->n_local * sr_max64(s->H, s->ktot) * s->d + s->n_q * s->nh + s->n_local * s->H;
    bytes[WS_QG] = bytes[WS_OG] = bytes[WS_DOG] = 2 * qn;
    bytes[WS_DQG] = 4 * qn;
    bytes[WS_STAGE] = 4 * sr_max64(1, stage);
    bytes[WS_FPDT_DKV] = 4 * all;
  }
  if (s->fpdt_offload) {
    bytes[WS_FPDT_KV0] = bytes[WS_FPDT_KV1] = 2 * chunk;
    if (s->U > 1) bytes[WS_FPDT_STAGE0] = bytes[WS_FPDT_STAGE1] = 2 * chunk;
    bytes[WS_FPDT_HOST] = 2 * all;
  } else if (s->U > 1) {
    bytes[WS_FPDT_KV_ALL] = 2 * all;
  }
}

int ws_is_host(ws_buffer b) { return b == WS_FPDT_HOST; }

void ws_buffer_bytes(const ws_shape *s, int64_t bytes[WS_COUNT]) {
  for (int i = 0; i < WS_COUNT; i++) bytes[i] = 0;
  if (s->fpdt_tokens > 0) {
    fpdt_bytes(s, bytes);
    return;
  }
  // Empty shapes still get one element, so every buffer a call names is a valid address.
  int64_t row = sr_max64(1, s->nkv) * s->d;
  int64_t slot = 2 * sr_max64(1, s->n_kmax) * row;  // a KV shard of the largest group, K and V
  int64_t own = 2 * sr_max64(1, s->n_q) * row;      // this group's K and V
  int64_t qn = sr_max64(1, s->n_q * s->nh * s->d), rows_h = sr_max64(1, s->n_q * s->nh);
  bytes[WS_KV_OWN] = 2 * own;
  bytes[WS_KV_BUF0] = bytes[WS_KV_BUF1] = 2 * slot;
  bytes[WS_ACC0] = bytes[WS_ACC1] = 4 * slot;
  bytes[WS_ACC_IN0] = bytes[WS_ACC_IN1] = 4 * slot;
  if (s->max_flush > 0) bytes[WS_FLUSH0] = bytes[WS_FLUSH1] = 4 * own * s->max_flush;
  if (s->early) bytes[WS_KV_OUTER0] = bytes[WS_KV_OUTER1] = 2 * slot;
  bytes[WS_O_RUN] = 4 * qn;
  bytes[WS_D_ROW] = 4 * rows_h;
  bytes[WS_BAR_SCRATCH] = s->bar_scratch;
  bytes[WS_BARS] = s->bars;
  bytes[WS_BARS_T] = s->bars_t;
  if (s->U > 1) {
    // The staging buffer carries one all-to-all at a time: q/o/dO or dQ of the rank's tokens over all heads,
    // K/V or dK/dV over the group's KV heads, an LSE either way.
    int64_t stage = sr_max64(s->n_local * sr_max64(s->H, s->ktot) * s->d, s->n_q * s->nh);
    stage = sr_max64(stage, s->n_local * s->H);
    bytes[WS_QG] = bytes[WS_OG] = bytes[WS_DOG] = 2 * qn;
    bytes[WS_LSEG] = 4 * rows_h;
    bytes[WS_DQG] = 4 * qn;
    bytes[WS_DKVG] = 4 * own;
    bytes[WS_STAGE] = 4 * sr_max64(1, stage);
  }
}

int64_t ws_total_bytes(const ws_shape *s) {
  int64_t b[WS_COUNT], t = 0;
  ws_buffer_bytes(s, b);
  for (int i = 0; i < WS_COUNT; i++) t += ws_is_host((ws_buffer)i) ? 0 : b[i];
  return t;
}

int64_t ws_host_total_bytes(const ws_shape *s) {
  int64_t b[WS_COUNT], t = 0;
  ws_buffer_bytes(s, b);
  for (int i = 0; i < WS_COUNT; i++) t += ws_is_host((ws_buffer)i) ? b[i] : 0;
  return t;
}

int64_t ws_layer_tensor_bytes(int64_t n, int H, int Hkv, int d) {
  int64_t m = n > 0 ? n : 1, qn = m * H * d, kn = m * Hkv * d;
  return (3 * qn + 2 * kn) * 2 + (m * H + qn + 2 * kn) * 4;
}

// ---- what a plan keeps -----------------------------------------------------------------------------

int64_t ws_plan_positions_bytes(const int64_t *rows, int groups) {
  int64_t t = 0;
  for (int g = 0; g < groups; g++) t += 8 * sr_max64(1, rows[g]);
  return t;
}

int64_t ws_plan_fixed_bytes(const int64_t *rows, int groups, const head_mask *masks, int heads) {
  return sa_masks_dev_bytes(masks, heads) + ws_plan_positions_bytes(rows, groups);
}

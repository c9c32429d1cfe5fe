// estimate.c — the cost of MTraining's online pattern estimation and of building the tile index.
//
// Per layer and forward pass (MTraining, sec. 3): the last 64 queries of the whole sequence are
// broadcast to every rank; each rank scores them against its keys (QK^T, then a distributed softmax
// whose row max and row sum are all-reduced); column sums give vertical scores and sums along
// diagonals give slash scores; the partial scores are gathered at a root (vertical: each rank owns its
// columns; slash: every rank contributes to every diagonal, a reduction), the root runs top-p, and the
// selected indices are broadcast. Each rank then builds its tile index from them.
#include <stdlib.h>

#include "plan/layout.h"
#include "sim/cost.h"
#include "sim/step_ctx.h"

#define EST_QUERIES 64      // MTraining scores the last 64 queries
#define EST_MAX_INDICES 4096 // top-p is capped at 4096 verticals and 4096 slashes per head
// Our estimator (kernels/vs_estimate.cu) scores in float64 so that GPU and CPU select the same pattern bit for
// bit, on the FP64 vector units: its scoring pass ran at 15.0 TFLOP/s on the H200, 0.44 of the 34 TFLOP/s
// FP64 vector peak (docs/kernels.md, "Pass 1", 512K whole, kernels/bench/results/vsest-h200-2026-11-22).
#define EST_FP64_EFF 0.44

int estimate_layer(sim_ctx *x, int layer, const int32_t *qkv, int32_t *out, sr_error *e) {
  int W = x->W;
  const model_config *m = x->m;
  double H = (double)m->num_heads, d = (double)m->head_dim, N = (double)x->p->layout.n_tokens;
  double gbps, lat;
  ctx_coll_link(x, &gbps, &lat);
  double *dur = malloc((size_t)W * sizeof *dur);
  if (!dur) return sr_internal_error(e, 0, "sim: out of memory");
  int rc;
  // 1. Broadcast of the last 64 queries (bf16), all heads.
  double qbytes = EST_QUERIES * H * d * 2;
  if ((rc = ctx_collective(x, cost_broadcast(W, qbytes, gbps, lat), PHASE_COLLECTIVE, layer, qkv, x->c2, e))) goto out;
  // 2. Scores against local keys: 2 * 64 * n * d FLOPs per head in float64 (roofline compute bound, Williams
  // et al. 2009, at the FP64 rate above), float64 scores written once.
  const gpu_desc *g = &x->c->gpu;
  double fp64 = g->fp64_tflops * 1e12 * EST_FP64_EFF;
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    dur[r] = (fp64 > 0 ? 2.0 * EST_QUERIES * n * d * H / fp64 : 0) + cost_mem(g, EST_QUERIES * n * H * 8);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, x->c2, out, e))) goto out;
  // 3. Distributed softmax: all-reduce of the row max, then of the row sum (64 x H fp32 each).
  double stats = cost_allreduce(W, EST_QUERIES * H * 4, gbps, lat);
  if ((rc = ctx_collective(x, 2 * stats, PHASE_COLLECTIVE, layer, out, x->c2, e))) goto out;
  // 4. Normalise and sum scores by column and by diagonal: two more passes over the float64 scores.
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    dur[r] = cost_mem(g, 2.0 * EST_QUERIES * n * H * 8);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, x->c2, out, e))) goto out;
  // 5. To the root: slash sums reduced (Rabenseifner: reduce-scatter then gather, 2x the reduce-scatter
  // volume) and vertical sums gathered (all-gather volume); fp32, N x H each.
  double vec = N * H * 4;
  double t5 = 2 * cost_reduce_scatter(W, vec, gbps, lat) + cost_allgather(W, vec, gbps, lat);
  x->comm_bytes += 3 * vec * (W - 1) / W * W;
  if ((rc = ctx_collective(x, t5, PHASE_COLLECTIVE, layer, out, x->c2, e))) goto out;
  // 6. Top-p on the root: a radix sort of both score vectors (fp32 key + int32 index, 4 passes of 8-bit
  // digits, each reading and writing; Adinets & Merrill 2022, "Onesweep"), then a prefix sum.
  for (int r = 0; r < W; r++) dur[r] = r == 0 ? cost_mem(&x->c->gpu, 2 * N * H * 8 * 2 * 4 + 2 * vec) : 0;
  if ((rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, x->c2, out, e))) goto out;
  // 7. Broadcast of the selected indices (at most 4096 + 4096 int32 per head).
  double ibytes = H * 2 * EST_MAX_INDICES * 4;
  x->comm_bytes += (qbytes + ibytes) * (W - 1);
  rc = ctx_collective(x, cost_broadcast(W, ibytes, gbps, lat), PHASE_COLLECTIVE, layer, out, out, e);
out:
  free(dur);
  return rc;
}

// The index build writes every tile entry (4-byte tile index + 1-byte kind) and bar (4 bytes) after
// reading the kept verticals and slashes per query tile: a memory-bound pass of ~16 bytes an entry
// (writes, and the reads and count scans that produce them).
double estimate_index_build(const sim_ctx *x, double entries) { return cost_mem(&x->c->gpu, 16.0 * entries); }

// calib_ring.c — the costs of a ring step beyond its kernel's work (sim/cost.c, cost_ring_step), measured
// on one GPU (calibrate.h, calib_ring_measure): one layer of dense causal attention split into the steps
// one rank of a ring runs (its queries against each source shard: contiguous blocks, zigzag's pairs of
// halves, 128-token stripes), one kernel call a step as the executor makes them (exec/dist_attn_cuda.c),
// the forward merging each step into the running fp32 output. The time beyond the cost model's kernel time
// on the efficiencies calibrated just before (and their walks, gpu.attn_walk) is fitted as steps x fixed + cells x
// per-cell.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/calib_attn.h"
#include "exec/calibrate.h"
#include "plan/layout.h"
#include "plan/model.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "sim/cost.h"

#define RING_TOKENS 32768

// The configurations: one step (the whole layer), then rings of 2, 4 and 8 ranks per layout.
static const struct {
  layout_kind kind;
  int64_t g;
  int world;
} configs[CALIB_RING_CONFIGS] = {
    {LAYOUT_CONTIGUOUS, 1, 1}, {LAYOUT_CONTIGUOUS, 1, 2},  {LAYOUT_CONTIGUOUS, 1, 4}, {LAYOUT_CONTIGUOUS, 1, 8},
    {LAYOUT_ZIGZAG, 1, 2},     {LAYOUT_ZIGZAG, 1, 4},      {LAYOUT_ZIGZAG, 1, 8},     {LAYOUT_STRIPED, 128, 2},
    {LAYOUT_STRIPED, 128, 4},  {LAYOUT_STRIPED, 128, 8},
};

// The cost model's side of configuration i: the last rank's steps against every source shard (their work counted
// by the planner's accounting, as the simulator counts it), their kernel time and their cells.
int calib_ring_config_model(const gpu_desc *gpu, int i, int heads, int kv_heads, int head_dim, calib_ring *out,
                            sr_error *e) {
  int W = configs[i].world, q_rank = W - 1, rc;
  layout l;
  memset(&l, 0, sizeof l);
  pattern pat;
  memset(&pat, 0, sizeof pat);
  work_count *counts = calloc((size_t)heads * W * W, sizeof *counts);
  if (!counts) return sr_internal_error(e, 0, "out of memory");
  if ((rc = layout_build(configs[i].kind, RING_TOKENS, W, configs[i].g, NULL, &l, e)) ||
      (rc = pattern_alloc(&pat, RING_TOKENS, 1, heads, e)) || (rc = tiles_account_layer(&pat, 0, &l, counts, e))) {
    pattern_free(&pat), layout_free(&l), free(counts);
    return rc;
  }
  model_config m;
  memset(&m, 0, sizeof m);
  m.num_heads = heads, m.num_kv_heads = kv_heads, m.head_dim = head_dim;
  double qt = (double)((l.rank_count[q_rank] + TILE - 1) / TILE);
  if (configs[i].kind == LAYOUT_STRIPED) snprintf(out->layout[i], sizeof out->layout[i], "striped:%lld", (long long)configs[i].g);
  else snprintf(out->layout[i], sizeof out->layout[i], "%s", layout_kind_name(configs[i].kind));
  out->world[i] = W, out->steps[i] = W, out->cells[i] = 0, out->kernel_s[0][i] = out->kernel_s[1][i] = 0;
  for (int src = 0; src < W; src++) {
    work_count wc;
    memset(&wc, 0, sizeof wc);
    for (int h = 0; h < heads; h++) {
      const work_count *c = &counts[((int64_t)h * W + q_rank) * W + src];
      wc.full += c->full, wc.partial += c->partial, wc.bars += c->bars, wc.runs += c->runs, wc.pairs += c->pairs;
    }
    // the kernels' walks and the FULL tiles' loss beyond the L2 where gpu gives them (calib_layer_fit's; adding 0
    // leaves the sums as before them)
    double cells = cost_ring_cells(&wc, qt, heads), keys = (double)l.rank_count[src];
    cost_attn_rates rf, rb;
    cost_attn_rates_init(gpu, &m, 0, &rf), cost_attn_rates_init(gpu, &m, 1, &rb);
    out->kernel_s[0][i] += cost_attn_fwd(gpu, &m, &wc) + cost_attn_l2(&rf, &wc, keys) + cost_attn_walks(gpu, 0, cells);
    out->kernel_s[1][i] += cost_attn_bwd(gpu, &m, &wc) + cost_attn_l2(&rb, &wc, keys) + cost_attn_walks(gpu, 1, cells);
    out->cells[i] += cells;
  }
  pattern_free(&pat), layout_free(&l), free(counts);
  return SR_OK;
}

int calib_ring_fit(calib_ring *out, sr_error *e) {
  for (int phase = 0; phase < 2; phase++) {
    double extra[CALIB_RING_CONFIGS];
    for (int i = 0; i < out->n; i++) extra[i] = out->measured_s[phase][i] - out->kernel_s[phase][i];
    int rc = calib_fit_ring_step(out->steps, out->cells, extra, out->measured_s[phase], out->n, &out->step_us[phase],
                                 &out->cell_us[phase], e);
    if (rc) return rc;
  }
  return SR_OK;
}

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/sparse_attn.h"


#define CK(call)                                                                                     \
  do {                                                                                               \
    cudaError_t r_ = (call);                                                                         \
    if (r_ != cudaSuccess) {                                                                         \
      rc = sr_internal_error(e, 0, "ring-step calibration: CUDA error %s at line %d", cudaGetErrorString(r_), __LINE__); \
      goto done;                                                                                     \
    }                                                                                                \
  } while (0)

// Time one configuration: the last rank's steps against every source, forward then backward (mean of 5
// passes after 2 warm-ups); and what the cost model says those kernels take.
static int ring_config(const gpu_desc *gpu, int i, int heads, int kv_heads, int head_dim, int random_inputs,
                       calib_ring *out, sr_error *e) {
  int W = configs[i].world, q_rank = W - 1, rc = SR_OK;
  layout l;
  memset(&l, 0, sizeof l);
  pattern pat;
  memset(&pat, 0, sizeof pat);
  tile_index t;
  memset(&t, 0, sizeof t);
  head_mask *masks = NULL, *masks_d = NULL;
  sa_gpu_index ix = {0};
  sa_gpu_index_t *ixt = calloc((size_t)W, sizeof *ixt);
  tile_index_t *tt = calloc((size_t)W, sizeof *tt);
  int64_t **pos_d = calloc((size_t)W, sizeof *pos_d), *pos_h = malloc(sizeof(int64_t) * RING_TOKENS);
  calib_operands x = {0};
  cudaEvent_t e0 = NULL, e1 = NULL;
  if (!ixt || !tt || !pos_d || !pos_h) {
    rc = sr_internal_error(e, 0, "out of memory");
    goto done;
  }
  if ((rc = layout_build(configs[i].kind, RING_TOKENS, W, configs[i].g, NULL, &l, e)) ||
      (rc = pattern_alloc(&pat, RING_TOKENS, 1, heads, e)) || (rc = tiles_build(&pat, 0, &l, q_rank, &t, e)) ||
      (rc = tiles_masks_build(&pat, 0, &masks, e)) ||
      (rc = sa_gpu_index_upload(&t, &ix, e)) || (rc = sa_gpu_masks_upload(masks, heads, &masks_d, e)))
    goto done;
  // The cost model's kernel time of these steps, and the steps and cells the fit needs.
  if ((rc = calib_ring_config_model(gpu, i, heads, kv_heads, head_dim, out, e))) goto done;
  int64_t n_q = l.rank_count[q_rank], max_k = 0;
  for (int src = 0; src < W; src++) {
    max_k = sr_max64(max_k, l.rank_count[src]);
    layout_positions(&l, src, pos_h);
    CK(cudaMalloc((void **)&pos_d[src], sizeof(int64_t) * (size_t)(l.rank_count[src] + 1)));
    CK(cudaMemcpy(pos_d[src], pos_h, sizeof(int64_t) * (size_t)l.rank_count[src], cudaMemcpyHostToDevice));
    if ((rc = tiles_transpose(&t, src, l.rank_count[src], &tt[src], e)) ||
        (rc = sa_gpu_index_t_upload(&tt[src], heads, kv_heads, &ixt[src], e)))
      goto done;
  }
  // Random operands as the layer-shaped calls' whose rates the kernel time takes (exec/calib_layer.c); else small
  // equal ones, as the kernel benchmark's whose slopes it then takes.
  if ((rc = calib_operands_make(n_q, max_k, heads, kv_heads, head_dim, random_inputs ? 21 : 0, &x, e))) goto done;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int warm = 2, reps = 5;
  for (int phase = 0; phase < 2; phase++) {
    for (int r = 0; r < warm + reps; r++) {
      if (r == warm) CK(cudaEventRecord(e0, NULL));
      for (int src = 0; src < W; src++) {
        // deterministic 0: the fastest backward, the one attn and train run by default
        sa_shape sh = {n_q, l.rank_count[src], heads, kv_heads, head_dim, 1.0f / sqrtf((float)head_dim), 0};
        int bad = phase == 0 ? sa_fwd(&sh, x.q, x.k, x.v, pos_d[q_rank], pos_d[src], &ix, src, masks_d, NULL, NULL,
                                      x.o, x.lse, NULL, e)
                             : sa_bwd(&sh, x.q, x.k, x.v, x.lse, x.drow, x.dout, pos_d[q_rank], pos_d[src], &ix,
                                      &ixt[src], src, masks_d, x.dq, x.dk, x.dv, NULL, e);
        if (bad) {
          rc = e->code;
          goto done;
        }
      }
    }
    CK(cudaEventRecord(e1, NULL));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    out->measured_s[phase][i] = ms * 1e-3 / reps;
  }
done:
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  calib_operands_free(&x);
  for (int src = 0; pos_d && src < W; src++) cudaFree(pos_d[src]);
  for (int src = 0; ixt && tt && src < W; src++) sa_gpu_index_t_free(&ixt[src]), tiles_transpose_free(&tt[src]);
  if (masks_d) sa_gpu_masks_free(masks_d, heads);
  if (masks) tiles_masks_free(masks, heads);
  sa_gpu_index_free(&ix);
  tiles_free(&t);
  pattern_free(&pat);
  layout_free(&l);
  free(ixt), free(tt), free(pos_d), free(pos_h);
  return rc;
}

int calib_ring_measure(const gpu_desc *gpu, int heads, int kv_heads, int head_dim, int random_inputs, calib_ring *out,
                       sr_error *e) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < CALIB_RING_CONFIGS; i++) {
    int rc = ring_config(gpu, i, heads, kv_heads, head_dim, random_inputs, out, e);
    if (rc) return rc;
    out->n++;
  }
  return calib_ring_fit(out, e);
}

#else

int calib_ring_measure(const gpu_desc *gpu, int heads, int kv_heads, int head_dim, int random_inputs, calib_ring *out,
                       sr_error *e) {
  memset(out, 0, sizeof *out);
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (ring-step calibration needs a GPU build)");
}

#endif

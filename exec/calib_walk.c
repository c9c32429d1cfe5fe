// calib_walk.c — the bars' backward walk (calibrate.h, calib_bar_walk_fit; sim/cost.h, cost_bar_walk) from the
// bar backward points a calibration times. The backward's bar kernel (kernels/sparse_attn_bwd.cu,
// sa_bwd_dkdv_kernel<D, 4, true>) runs one CTA per compute chunk of up to 64 bar keys of one query head
// (kernels/bar_chunks.c), and each CTA walks the union of its keys' query tiles, 64 rows a step (backward variant 5:
// one CTA a pair of a head's chunks, walking the union of both chunks' tiles; a lone last chunk its own). The
// calibration's bar calls (exec/calib_attn.c) have 8,160 such chunks, far more than a GPU holds at once, so their time
// grows with the walks' total steps at the rate of every resident CTA together: the slope of time over those steps,
// times the CTAs resident at once, is what one CTA spends on a step. That slope also carries the growth of the call's
// other bar kernels (the bars' dQ, the reduce), whose work grows with the same sizes, so the figure is an upper bound.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/calib_attn.h"
#include "exec/calibrate.h"
#include "kernels/sparse_attn.h"
#include "plan/model.h"
#include "plan/tiles.h"
#include "sim/cost.h"

#define WALK_TOKENS 32768  // calib_attn_index's length
#define WALK_MAX_SIZE 64   // sizes tried when matching a logged point (the calibration times 1, 2 and 4)

// The GPU's SMs and the bar kernel's resident CTAs: sim/cost.c (cost_gpu_sms, cost_bar_ctas), which the simulator's
// bars' walk counts its waves with.
void calib_gpu_sms(const char *name, int *sms, int *smem_kib) { cost_gpu_sms(name, sms, smem_kib); }

int calib_bar_walk_ctas(const char *gpu_name, int head_dim, int ws) {
  gpu_desc g;
  memset(&g, 0, sizeof g);
  snprintf(g.name, sizeof g.name, "%s", gpu_name);
  g.bar_walk_parts = 1, g.bar_walk_ws = ws;
  return cost_bar_slots(&g, head_dim);
}

// The steps of one CTA's walk: compute chunk c's own (variant 4, or a lone chunk of variant 5), or with pairs the
// ascending union of chunk c's and c + 1's query tiles (kernels/sparse_attn_bwd_ws.cu, sa_bwd_ws_pair_kernel: a head's
// chunks pair up from its first; bp_walk), two 64-row steps a tile.
static double cta_steps(const sa_bar_chunks *bc, int c, int pair) {
  const int32_t *a = bc->hc_q_idx + bc->hc_q_cnt[c];
  int64_t na = bc->hc_q_cnt[c + 1] - bc->hc_q_cnt[c], n = na;
  if (pair) {
    const int32_t *b = bc->hc_q_idx + bc->hc_q_cnt[c + 1];
    int64_t nb = bc->hc_q_cnt[c + 2] - bc->hc_q_cnt[c + 1], i = 0, j = 0;
    for (n = 0; i < na || j < nb; n++) {  // each list ascending and unique
      if (j >= nb || (i < na && a[i] < b[j])) i++;
      else if (i >= na || b[j] < a[i]) j++;
      else i++, j++;
    }
  }
  return 2.0 * (double)n;
}

int calib_bar_walk_shape(int size, int heads, int kv_heads, int head_dim, int pairs, double *flops, double *steps,
                         sr_error *e) {
  tile_index t;
  tile_index_t tt;
  sa_bar_chunks bc;
  double elems = 0;
  memset(&tt, 0, sizeof tt), memset(&bc, 0, sizeof bc);
  int rc = calib_attn_index(2, size, &t, &elems) ? sr_internal_error(e, 0, "out of memory") : SR_OK;
  if (!rc) rc = tiles_transpose(&t, 0, WALK_TOKENS, &tt, e);
  if (!rc) rc = sa_bar_chunks_build(&tt, heads, kv_heads, &bc, e);
  if (!rc) {
    // as calib_attn_time counts the call's FLOPs
    *flops = elems * 4.0 * head_dim * heads * MODEL_ATTN_BWD_RATIO;
    *steps = 0;
    for (int c = 0, place = 0; c < bc.n_hchunks; c++) {
      place = c > 0 && bc.hc_head[c - 1] == bc.hc_head[c] ? place + 1 : 0;  // among its head's chunks
      if (!pairs) *steps += cta_steps(&bc, c, 0);
      else if (!(place & 1)) *steps += cta_steps(&bc, c, c + 1 < bc.n_hchunks && bc.hc_head[c + 1] == bc.hc_head[c]);
    }
  }
  sa_bar_chunks_free(&bc);
  if (tt.kv_cnt || tt.bar_q_cnt) tiles_transpose_free(&tt);
  free(t.tile_cnt), free(t.bar_cnt), free(t.tile_idx), free(t.tile_kind), free(t.bar_idx);
  return rc;
}

int calib_bar_walk_fit(const char *file, const double *flops, const double *seconds, int n, int heads, int kv_heads,
                       int head_dim, const char *gpu_name, int ws, int pairs, double *walk_us, sr_error *e) {
  *walk_us = 0;
  int ctas = calib_bar_walk_ctas(gpu_name, head_dim, ws);
  if (ctas <= 0) return SR_OK;  // a GPU not known here: the walk stays unmodelled
  double steps[16], secs[16];
  if (n < 2 || n > 16) return sr_input_error(e, file, "attn_bwd_bar", "%d timed sizes: the walk's fit takes 2 to 16", n);
  for (int i = 0; i < n; i++) {
    int found = 0;
    for (int size = 1; size <= WALK_MAX_SIZE && !found; size *= 2) {
      double f, s;
      int rc = calib_bar_walk_shape(size, heads, kv_heads, head_dim, ws && pairs, &f, &s, e);
      if (rc) return rc;
      if (fabs(f - flops[i]) <= 1e-9 * f + 0.5) steps[i] = s, secs[i] = seconds[i], found = 1;
    }
    if (!found)
      return sr_input_error(e, file, "attn_bwd_bar", "%.0f FLOPs: no size of the calibration's bar index for %d/%d heads, "
                            "head_dim %d", flops[i], heads, kv_heads, head_dim);
  }
  double rate, fixed_us;  // steps a second of every resident CTA together, and the fixed time a call
  if (calib_fit_rate(steps, secs, n, &rate, &fixed_us, e)) return e->code;
  *walk_us = ctas / (rate * 1e12) * 1e6;
  return SR_OK;
}

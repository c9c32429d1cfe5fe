// predict.c — the simulator's prediction of one layer's distributed attention (predict.h).
#include "sim/predict.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pattern_spec.h"
#include "plan/timeline.h"
#include "sim/sim.h"

// online: the executor estimates the pattern (or a gated pattern's gate selects it, or adaspa-online searches it)
// and builds its execution form inside every forward (online_vs_cuda.c, online_vs_cpu.c, online_gate_cpu.c;
// adaspa-online in the forwards that search, online_adaspa_*.c), so the simulator's estimation, its collectives
// and the index build (sim/estimate.c, sim/gating_cost.c) belong to the measured forward, and vs-online's
// transposed index to the backward; for every other pattern the indices are built at set-up, outside the timed
// calls.
// FPDT's copies to and from the host run inside the attention calls (a call ends after its last copy out).
static int is_fwd_phase(int ph, int online) {
  if (online && (ph == PHASE_ESTIMATE || ph == PHASE_COLLECTIVE || ph == PHASE_INDEX)) return 1;
  return ph == PHASE_ATTN || ph == PHASE_KV_SEND || ph == PHASE_A2A || ph == PHASE_H2D || ph == PHASE_D2H;
}
// online: the backward makes the transposed index of the forward's estimate first (sim/estimate.c).
static int is_bwd_phase(int ph, int online) {
  if (online && ph == PHASE_INDEX) return 1;
  return ph == PHASE_ATTN_BWD || ph == PHASE_KV_SEND || ph == PHASE_DKV_SEND || ph == PHASE_A2A || ph == PHASE_H2D ||
         ph == PHASE_D2H;
}

int predict_attention(const plan *p, const pattern *pat, int layer, const char *csv_path, double *fwd_s, double *bwd_s,
                      sr_error *e) {
  // One layer: the other layers, the loss and the optimizer would only add tasks to filter out.
  plan q = *p;
  q.spec.recompute = 0;
  q.model.num_layers = 1;
  // a layer's calls are short, as the calibration's: at the burst's rates, not a training step's (sim/cost.c,
  // cost_attn_held: a ratio of 1 leaves them as they are, where 0 would take COST_ATTN_SUSTAINED)
  q.cluster.gpu.eff_attn_sustained = 1;
  pattern one = *pat;
  one.layers = 1;
  one.h = pattern_head(pat, layer, 0);
  sim_options o = {0, 1, !pattern_spec_at_run_time(p->spec.pattern), 0, 0, 0, 0, 0};  // a given pattern: no estimation
  sim_result r;
  sim_timeline tl = {0};
  if (sim_run(&q, &one, &o, &r, &tl, e)) return e->code;
  // Forward and backward of the layer, rank by rank (an imbalanced layout's first ranks start their
  // backward while the last ones still run their forward): a rank's events before its last forward kernel
  // ends are forward, events from its first backward kernel on are backward. Between the two lie the
  // forward's closing all-to-all (Ulysses' gather, right after its last kernel) and the backward's opening
  // one (its scatter, right before its first kernel), with the rest of the step (MLP, loss) between them
  // when it takes time: such an event belongs to the side it is nearer to.
  int W = q.schedule.world;
  double *bwd0 = malloc(sizeof(double) * (size_t)W), *fwd_end = malloc(sizeof(double) * (size_t)W);
  if (!bwd0 || !fwd_end) {
    free(bwd0), free(fwd_end);
    sim_timeline_free(&tl);
    return sr_internal_error(e, 0, "out of memory");
  }
  for (int k = 0; k < W; k++) bwd0[k] = INFINITY, fwd_end[k] = -INFINITY;
  for (int64_t i = 0; i < tl.n; i++) {
    const timeline_event *v = &tl.ev[i];
    if (v->layer != 0 || v->rank < 0 || v->rank >= W) continue;
    if (v->phase == PHASE_ATTN_BWD && v->start < bwd0[v->rank]) bwd0[v->rank] = v->start;
    if (v->phase == PHASE_ATTN && v->start + v->dur > fwd_end[v->rank]) fwd_end[v->rank] = v->start + v->dur;
  }
  double f0 = INFINITY, f1 = -INFINITY, b0 = INFINITY, b1 = -INFINITY;
  int online = pattern_spec_at_run_time(p->spec.pattern);
  sim_timeline keep = {0};
  keep.ev = malloc(sizeof(timeline_event) * (size_t)(tl.n > 0 ? tl.n : 1));
  uint8_t *side = malloc((size_t)(tl.n > 0 ? tl.n : 1));  // of each kept event: 1 backward
  if (!keep.ev || !side) {
    free(keep.ev), free(side), free(bwd0), free(fwd_end);
    sim_timeline_free(&tl);
    return sr_internal_error(e, 0, "out of memory");
  }
  for (int64_t i = 0; i < tl.n; i++) {
    const timeline_event *v = &tl.ev[i];
    if (v->layer != 0 || v->rank < 0 || v->rank >= W) continue;
    double b = bwd0[v->rank], f = fwd_end[v->rank];
    int bwd = v->start >= b ? 1 : v->start < f ? 0 : v->start - f > b - (v->start + v->dur);
    if (bwd ? !is_bwd_phase(v->phase, online) : !is_fwd_phase(v->phase, online)) continue;
    side[keep.n] = (uint8_t)bwd;
    if (bwd) b0 = fmin(b0, v->start), b1 = fmax(b1, v->start + v->dur);
    else f0 = fmin(f0, v->start), f1 = fmax(f1, v->start + v->dur);
    keep.ev[keep.n++] = *v;
  }
  free(bwd0), free(fwd_end);
  *fwd_s = f1 > f0 ? f1 - f0 : 0;
  *bwd_s = b1 > b0 ? b1 - b0 : 0;
  int rc = SR_OK;
  if (keep.n == 0) rc = sr_internal_error(e, 0, "the simulator produced no attention tasks for layer %d", layer);
  if (rc == SR_OK && csv_path) {
    for (int64_t i = 0; i < keep.n; i++) {  // forward from 0, backward right after it; the layer as run
      timeline_event *v = &keep.ev[i];
      v->start = side[i] ? v->start - b0 + *fwd_s : v->start - f0;
      v->layer = layer;
    }
    rc = timeline_write_csv(keep.ev, keep.n, "sim", csv_path, e);
  }
  free(keep.ev), free(side);
  sim_timeline_free(&tl);
  return rc;
}

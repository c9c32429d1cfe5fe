// predict.c — the simulator's prediction of one layer's distributed attention (predict.h).
#include "exec/predict.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "sim/timeline.h"

static int is_fwd_phase(int ph) { return ph == PHASE_ATTN || ph == PHASE_KV_SEND || ph == PHASE_A2A; }
static int is_bwd_phase(int ph) {
  return ph == PHASE_ATTN_BWD || ph == PHASE_KV_SEND || ph == PHASE_DKV_SEND || ph == PHASE_A2A;
}

int predict_attention(const plan *p, const pattern *pat, int layer, const char *csv_path, double *fwd_s, double *bwd_s,
                      sr_error *e) {
  // One layer: the other layers, the loss and the optimizer would only add tasks to filter out.
  plan q = *p;
  q.spec.recompute = 0;
  q.model.num_layers = 1;
  pattern one = *pat;
  one.layers = 1;
  one.h = pattern_head(pat, layer, 0);
  sim_options o = {0, 1};
  sim_result r;
  sim_timeline tl = {0};
  if (sim_run(&q, &one, &o, &r, &tl, e)) return e->code;
  // Forward and backward of the layer are apart in the simulated step (the MLP, the loss and the MLP's
  // backward lie between them): an event belongs to the backward when it starts past the middle of that
  // gap. Not at the first backward kernel: Ulysses' all-to-all of the backward comes before it.
  double bwd0 = INFINITY, fwd_end = -INFINITY;
  for (int64_t i = 0; i < tl.n; i++) {
    const sim_event *v = &tl.ev[i];
    if (v->layer != 0) continue;
    if (v->phase == PHASE_ATTN_BWD && v->start < bwd0) bwd0 = v->start;
    if (v->phase == PHASE_ATTN && v->start + v->dur > fwd_end) fwd_end = v->start + v->dur;
  }
  if (isfinite(bwd0) && isfinite(fwd_end) && fwd_end < bwd0) bwd0 = 0.5 * (fwd_end + bwd0);
  double f0 = INFINITY, f1 = -INFINITY, b0 = INFINITY, b1 = -INFINITY;
  sim_timeline keep = {0};
  keep.ev = malloc(sizeof(sim_event) * (size_t)(tl.n > 0 ? tl.n : 1));
  if (!keep.ev) {
    sim_timeline_free(&tl);
    return sr_internal_error(e, 0, "out of memory");
  }
  for (int64_t i = 0; i < tl.n; i++) {
    const sim_event *v = &tl.ev[i];
    if (v->layer != 0) continue;
    int bwd = v->start >= bwd0;
    if (bwd ? !is_bwd_phase(v->phase) : !is_fwd_phase(v->phase)) continue;
    if (bwd) b0 = fmin(b0, v->start), b1 = fmax(b1, v->start + v->dur);
    else f0 = fmin(f0, v->start), f1 = fmax(f1, v->start + v->dur);
    keep.ev[keep.n++] = *v;
  }
  *fwd_s = f1 > f0 ? f1 - f0 : 0;
  *bwd_s = b1 > b0 ? b1 - b0 : 0;
  int rc = SR_OK;
  if (keep.n == 0) rc = sr_internal_error(e, 0, "the simulator produced no attention tasks for layer %d", layer);
  if (rc == SR_OK && csv_path) {
    for (int64_t i = 0; i < keep.n; i++) {  // forward from 0, backward right after it; the layer as run
      sim_event *v = &keep.ev[i];
      v->start = v->start >= bwd0 ? v->start - b0 + *fwd_s : v->start - f0;
      v->layer = layer;
    }
    rc = timeline_write_csv(&keep, "sim", csv_path, e);
  }
  free(keep.ev);
  sim_timeline_free(&tl);
  return rc;
}

// A training step's attention at the rate it holds over seconds (gpu.efficiency.attn_sustained; sim/cost.c,
// cost_attn_held): the step's attention calls take it, a single layer's do not, a ratio of 1 costs the same bits as
// the short calls, and a file without it takes COST_ATTN_SUSTAINED (and its back-to-back GEMM rate COST_GEMM_BETWEEN).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pattern_spec.h"
#include "plan/plan.h"
#include "sim/cost.h"
#include "sim/predict.h"
#include "sim/sim.h"
#include "tests/test.h"

TEST(attn_held_scales_every_attention_efficiency_by_the_ratio_and_clears_it) {
  gpu_desc g;
  memset(&g, 0, sizeof g);
  g.eff_gemm = 0.7, g.eff_attn_fwd_full = 0.6, g.eff_attn_fwd_partial = 0.4, g.eff_attn_fwd_bar = 0;  // bar: absent
  g.eff_attn_bwd_full = 0.5, g.eff_attn_bwd_partial = 0.3, g.eff_attn_bwd_bar = 0.2;
  g.eff_attn_sustained = 0.9;
  cost_attn_held(&g, 1);
  CHECK_REL(g.eff_attn_fwd_full, 0.54, 1e-15);
  CHECK_REL(g.eff_attn_fwd_partial, 0.36, 1e-15);
  CHECK_REL(g.eff_attn_fwd_bar, 0.9, 1e-15);  // an absent efficiency is 1 (cost_attn_rates_init): 1 x 0.9
  CHECK_REL(g.eff_attn_bwd_full, 0.45, 1e-15);
  CHECK_REL(g.eff_attn_bwd_partial, 0.27, 1e-15);
  CHECK_REL(g.eff_attn_bwd_bar, 0.18, 1e-15);
  CHECK_NEAR(g.eff_gemm, 0.7, 0);            // GEMMs have their own sustained rate
  CHECK_NEAR(g.eff_attn_sustained, 1, 0);    // applied once: a second call changes nothing
  gpu_desc again = g;
  cost_attn_held(&g, 1);
  CHECK(memcmp(&g, &again, sizeof g) == 0);
}

// Where the bars' backward runs at its walk's rate (the warp-specialized bars and variant 3's split walk:
// cost_bar_walk_rate), the walk's step is held as the efficiencies are (a step of 1.672 us at 0.9: 1.858 us, and the
// bars' rate with it); elsewhere (the whole walk) the walk is a launch's floor and stays as it is.
TEST(attn_held_slows_the_ws_bars_walk_as_the_efficiencies) {
  gpu_desc g;
  memset(&g, 0, sizeof g);
  snprintf(g.name, sizeof g.name, "NVIDIA H200");
  g.peak_tflops = 989, g.eff_attn_bwd_bar = 0.21, g.bar_walk_us = 1.672, g.bar_walk_parts = 16, g.bar_walk_ws = 1;
  g.eff_attn_sustained = 0.9;
  double rate = cost_bar_walk_rate(&g, 2.5, 65536);
  cost_attn_held(&g, 1);
  CHECK_REL(g.bar_walk_us, 1.672 / 0.9, 1e-15);
  CHECK_REL(cost_bar_walk_rate(&g, 2.5, 65536), rate * 0.9, 1e-12);
  CHECK_REL(g.eff_attn_bwd_bar, 0.21 * 0.9, 1e-15);
  gpu_desc h;
  memset(&h, 0, sizeof h);
  snprintf(h.name, sizeof h.name, "NVIDIA H200");
  h.bar_walk_us = 5.826, h.bar_walk_parts = 16, h.eff_attn_sustained = 0.9;  // variant 3's split walk: a rate too
  gpu_desc w = h;
  cost_attn_held(&h, 1);
  CHECK_REL(h.bar_walk_us, 5.826 / 0.9, 1e-15);
  w.bar_walk_parts = 1;  // the whole walk of the mma.sync bars: a floor, not a rate
  cost_attn_held(&w, 1);
  CHECK_NEAR(w.bar_walk_us, 5.826, 0);
}

TEST(attn_held_leaves_a_gpu_with_a_ratio_of_one_unchanged_bit_for_bit) {
  gpu_desc g, before;
  memset(&g, 0, sizeof g);
  g.eff_attn_fwd_full = 0.6123456789, g.eff_attn_bwd_bar = 0.2, g.eff_gemm_sustained = 0.66;
  g.eff_attn_sustained = 1;
  before = g;
  cost_attn_held(&g, 1);
  CHECK(memcmp(&g, &before, sizeof g) == 0);
}

// A file calibrated before calibrate timed the held rate: its attention at COST_ATTN_SUSTAINED, and its GEMM rate held
// back to back (where it gives one) at COST_GEMM_BETWEEN of it, as the GEMMs between a step's attention calls run.
TEST(attn_held_a_gpu_without_the_ratio_takes_the_default_and_its_gemms_between_attention) {
  gpu_desc g;
  memset(&g, 0, sizeof g);
  g.eff_gemm = 0.8, g.eff_gemm_sustained = 0.665, g.eff_attn_fwd_full = 0.6, g.eff_attn_bwd_bar = 0.2;
  cost_attn_held(&g, 1);
  CHECK_REL(g.eff_attn_fwd_full, 0.6 * COST_ATTN_SUSTAINED, 1e-15);
  CHECK_REL(g.eff_attn_fwd_partial, COST_ATTN_SUSTAINED, 1e-15);  // absent: 1 x the ratio
  CHECK_REL(g.eff_attn_bwd_bar, 0.2 * COST_ATTN_SUSTAINED, 1e-15);
  CHECK_REL(g.eff_gemm_sustained, 0.665 * COST_GEMM_BETWEEN, 1e-15);
  CHECK_NEAR(g.eff_gemm, 0.8, 0);
  CHECK_NEAR(g.eff_attn_sustained, 1, 0);
  memset(&g, 0, sizeof g);
  g.eff_gemm = 0.8, g.eff_attn_fwd_full = 0.6;  // no GEMM rate held: cost_gemm_step's COST_GEMM_SUSTAINED, unchanged
  cost_attn_held(&g, 1);
  CHECK_NEAR(g.eff_gemm_sustained, 0, 0);
  CHECK_REL(g.eff_attn_fwd_full, 0.6 * COST_ATTN_SUSTAINED, 1e-15);
  memset(&g, 0, sizeof g);
  g.eff_gemm_sustained = 0.694, g.eff_attn_sustained = 0.9;  // measured together: both as given
  cost_attn_held(&g, 1);
  CHECK_NEAR(g.eff_gemm_sustained, 0.694, 0);
}

// A dense 16K qwen2.5-3b plan on 2 x H200 (ring, contiguous), without the kernels' walks and ring-step costs (fitted
// in short calls, not scaled): its attention tasks are then its tiles' time alone.
static void dense_plan(plan *p, pattern *pat, double held, int calibrated) {
  plan_spec sp;
  plan_spec_defaults(&sp);
  snprintf(sp.model, sizeof sp.model, "qwen2.5-3b");
  snprintf(sp.cluster, sizeof sp.cluster, "h200-1x2");
  snprintf(sp.layout, sizeof sp.layout, "zigzag");
  snprintf(sp.schedule, sizeof sp.schedule, "ring");
  sp.seq = 16384;
  sr_error e = {0};
  CHECK_EQ_INT(plan_build(&sp, p, &e), SR_OK);
  gpu_desc *g = &p->cluster.gpu;
  g->ring_step_us[0] = g->ring_step_us[1] = g->ring_cell_us[0] = g->ring_cell_us[1] = 0;
  g->attn_walk_us[0] = g->attn_walk_us[1] = g->attn_l2[0] = g->attn_l2[1] = 0;
  g->eff_attn_sustained = held;
  p->cluster.calibrated = calibrated;  // the shipped file's is not (its efficiencies derived, not measured)
  CHECK_EQ_INT(pattern_from_spec("dense", &p->model, sp.seq, 1, 0, pat, &e), SR_OK);
}

// Seconds rank 0 computes attention (forward and backward calls) in one simulated step, and the step.
static void step_attention_on(double held, int calibrated, double *attn, double *step) {
  plan p;
  pattern pat;
  dense_plan(&p, &pat, held, calibrated);
  sim_options o = {0, 1, 1, 0, 0, 0, 0, 0};
  sim_result r;
  sim_timeline tl = {0};
  sr_error e = {0};
  CHECK_EQ_INT(sim_run(&p, &pat, &o, &r, &tl, &e), SR_OK);
  *attn = 0, *step = r.step_s;
  for (int64_t i = 0; i < tl.n; i++)
    if (tl.ev[i].rank == 0 && tl.ev[i].stream == STREAM_COMPUTE &&
        (tl.ev[i].phase == PHASE_ATTN || tl.ev[i].phase == PHASE_ATTN_BWD))
      *attn += tl.ev[i].dur;
  sim_timeline_free(&tl);
  pattern_free(&pat);
  plan_free(&p);
}

static void step_attention(double held, double *attn, double *step) { step_attention_on(held, 1, attn, step); }

// The attention tasks hold their tiles' time T, which the ratio f stretches to T / f, and the calls' memory-bound
// copies R (the exec trainer's, sim/exec_cost.c), which it leaves: a0 = T + R, a(f) = T / f + R, so with f = 0.5
// T = a(0.5) - a0 and a(0.8) - a0 = T (1 / 0.8 - 1).
TEST(attn_held_a_training_steps_attention_tiles_take_the_inverse_of_the_ratio_longer) {
  double a0, s0, a8, s8, a5, s5;
  step_attention(1, &a0, &s0);  // the short calls' rates
  step_attention(0.8, &a8, &s8);
  step_attention(0.5, &a5, &s5);
  CHECK(a0 > 0);
  CHECK(a5 - a0 > 0.9 * a0);  // the tiles are most of the calls' time
  CHECK_REL(a8 - a0, 0.25 * (a5 - a0), 1e-5);  // not exact: a call beside a transfer is slowed by comm_slowdown piecewise
  CHECK(s8 > s0 && s5 > s8);
}

TEST(attn_held_a_calibrated_file_without_the_ratio_gives_the_step_of_the_default_ratio) {
  double a0, s0, ad, sd, a1, s1;
  step_attention(0, &a0, &s0);
  step_attention(COST_ATTN_SUSTAINED, &ad, &sd);  // h200-1x2 gives no held GEMM rate: only the attention differs
  step_attention(1, &a1, &s1);
  CHECK(a0 == ad);
  CHECK(s0 == sd);
  CHECK(a0 > a1 && s0 > s1);
}

TEST(attn_held_an_uncalibrated_file_without_the_ratio_keeps_its_bits) {
  double a0, s0, a1, s1;
  step_attention_on(0, 0, &a0, &s0);
  step_attention_on(1, 0, &a1, &s1);
  CHECK(a0 == a1);
  CHECK(s0 == s1);
}

TEST(attn_held_a_single_layer_prediction_keeps_the_burst_rates) {
  double f[2], b[2];
  for (int i = 0; i < 2; i++) {
    plan p;
    pattern pat;
    dense_plan(&p, &pat, i ? 0.8 : 0, 1);
    sr_error e = {0};
    CHECK_EQ_INT(predict_attention(&p, &pat, 0, NULL, &f[i], &b[i], &e), SR_OK);
    pattern_free(&pat);
    plan_free(&p);
  }
  CHECK(f[0] > 0 && b[0] > 0);
  CHECK(f[1] == f[0]);  // a layer's calls are short, as the calibration's
  CHECK(b[1] == b[0]);
}

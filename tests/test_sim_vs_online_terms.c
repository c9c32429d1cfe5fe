// The simulator's terms of a vs-online layer's kernels (issue 24; results/sim/2026-11-28-cpu-vs-online-terms): the
// kernels' shortest CTAs in waves of the SMs, the warp-specialized bars' traffic and every wave of equal bar walks
// (sim/cost.h); the estimation's and conversion's terms are held in tests/test_sim_estimate.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pattern_spec.h"
#include "plan/plan.h"
#include "sim/cost.h"
#include "sim/sim.h"
#include "tests/test.h"

// A kernel call of n CTAs lasts at least ceil(n / SMs) of its shortest CTA's time: the vs-online layer at 256K on one
// H100 runs 32,768 forward CTAs (249 waves of 132 SMs) and 16,384 backward ones (4,096 cells in 4 parts: 125 waves).
TEST(sim_cost_a_call_lasts_at_least_its_shortest_ctas_in_waves_of_the_sms) {
  CHECK_REL(cost_cta_floor(COST_FWD_CTA_US, 32768, 132), 249 * COST_FWD_CTA_US * 1e-6, 1e-12);
  CHECK_REL(cost_cta_floor(COST_BWD_CTA_US, 16384, 132), 125 * COST_BWD_CTA_US * 1e-6, 1e-12);
  CHECK_REL(cost_cta_floor(COST_FWD_CTA_US, 1, 132), COST_FWD_CTA_US * 1e-6, 1e-12);
  CHECK(cost_cta_floor(COST_FWD_CTA_US, 32768, 0) == 0);  // a GPU whose SM count is not known
  CHECK(cost_cta_floor(COST_FWD_CTA_US, 0, 132) == 0);
  // the backward's CTAs: 2,048 key tiles x 2 KV heads x 4 parts hold 65,536 tile entries; 100 entries are 100 CTAs
  work_count w = {0, 65536, 131072, 0, 0};
  CHECK_NEAR(cost_bwd_ctas(&w, 2048, 2), 16384, 0);
  work_count few = {60, 40, 5000, 0, 0};
  CHECK_NEAR(cost_bwd_ctas(&few, 2048, 2), 100, 0);
}

// The warp-specialized bars kernel reads Q and dO and reduces dQ once a (head, query tile) cell with bars where a
// head's keys are one chunk: 12 bytes a row and dimension at the memory rate; nothing where the file does not name it.
TEST(sim_cost_ws_bars_last_at_least_their_q_do_and_dq_traffic) {
  gpu_desc g;
  memset(&g, 0, sizeof g);
  g.hbm_gbps = 1000, g.eff_mem = 0.8, g.bar_walk_ws = 1;
  CHECK_REL(cost_bar_ws_traffic(&g, 4.0 * 2048 * 16, 2048, 16, 128), 32768.0 * 128 * 128 * 12 / 0.8e12, 1e-12);
  CHECK_REL(cost_bar_ws_traffic(&g, 100, 2048, 16, 128), 100.0 * 128 * 128 * 12 / 0.8e12, 1e-12);
  g.bar_walk_ws = 0;
  CHECK(cost_bar_ws_traffic(&g, 4.0 * 2048 * 16, 2048, 16, 128) == 0);
}

// Equal CTAs on `slots` take ceil(n / slots) of their times even where the bars' rate charges less: the vs-online
// layer at 256K on one rank has one chunk a head (4 keys) walking 4,096 steps, split in 16 parts of 256 steps: 256
// CTAs on an H100's 132 SMs are two waves of 2.56 ms at 10 us a step, not one.
TEST(sim_cost_ws_bars_of_few_keys_take_every_wave_of_their_walks) {
  gpu_desc g;
  memset(&g, 0, sizeof g);
  snprintf(g.name, sizeof g.name, "NVIDIA H100 80GB HBM3");
  g.bar_walk_us = 10, g.bar_walk_parts = 16, g.bar_walk_ws = 1;
  work_count w = {0, 0, 4 * 2048 * 16, 0, 0};
  CHECK_REL(cost_bar_walk(&g, &w, 2048, 16, 132, 0.1e-3), 2 * 2.56e-3 - 0.1e-3, 1e-12);
}

// The vs-online layer's forward on one H100's calibration: the floor binds (two partial tiles a cell), and a layer of
// 100 times the tiles a cell does not see it.
TEST(sim_vs_online_forward_kernel_of_short_ctas_takes_the_floor) {
  gpu_desc g;
  memset(&g, 0, sizeof g);
  g.peak_tflops = 989, g.eff_attn_fwd_partial = 0.39, g.eff_attn_fwd_bar = 0.21;
  model_config m;
  memset(&m, 0, sizeof m);
  m.head_dim = 128;
  cost_attn_rates a;
  cost_attn_rates_init(&g, &m, 0, &a);
  work_count w = {0, 65536, 131072, 0, 0};  // 32,768 cells: two partial tiles and four bar keys each
  double cells = cost_ring_cells(&w, 2048, 16), work = cost_attn_time(&a, &w);
  CHECK_NEAR(cells, 32768, 0);
  CHECK(cost_cta_floor(COST_FWD_CTA_US, cells, 132) > 3 * work);
  work_count heavy = {0, 6553600, 131072, 0, 0};
  CHECK(cost_cta_floor(COST_FWD_CTA_US, cost_ring_cells(&heavy, 2048, 16), 132) < 0.05 * cost_attn_time(&a, &heavy));
}

// test_sim_cost.c — the cost formulas against hand-derived values.
#include <stdio.h>
#include <string.h>

#include "sim/cost.h"
#include "tests/test.h"

static gpu_desc test_gpu(void) {
  gpu_desc g;
  memset(&g, 0, sizeof g);
  g.peak_tflops = 100;  // 1e14 FLOP/s
  g.hbm_gbps = 1000;
  g.eff_gemm = 0.5;
  g.eff_attn_fwd_full = 0.5;
  g.eff_attn_fwd_partial = 0.25;
  g.eff_attn_fwd_bar = 0.1;
  g.eff_attn_bwd_full = 0.4;
  g.eff_attn_bwd_partial = 0.2;
  g.eff_attn_bwd_bar = 0.1;
  g.eff_mem = 0.8;
  g.comm_slowdown = 1.25;
  return g;
}

TEST(sim_cost_attention_charges_each_tile_kind_at_its_efficiency) {
  gpu_desc g = test_gpu();
  model_config m;
  memset(&m, 0, sizeof m);
  m.head_dim = 128;
  // One full tile: 4 * 128 * 128 * 128 FLOPs = 8388608 at 0.5e14 FLOP/s.
  work_count w = {1, 0, 0, 0, 0};
  CHECK_REL(cost_attn_fwd(&g, &m, &w), 8388608.0 / 0.5e14, 1e-12);
  // One partial tile at a quarter of peak, plus ten bars of 4 * 128 * 128 FLOPs at a tenth.
  work_count w2 = {0, 1, 10, 0, 0};
  CHECK_REL(cost_attn_fwd(&g, &m, &w2), 8388608.0 / 0.25e14 + 10 * 65536.0 / 0.1e14, 1e-12);
  // Backward: 2.5x the FLOPs at the backward efficiency.
  CHECK_REL(cost_attn_bwd(&g, &m, &w), 2.5 * 8388608.0 / 0.4e14, 1e-12);
  // Two runs of the forward form (64 keys x 128 rows each, 4 * 128 * 64 * 128 FLOPs) at the PARTIAL rate.
  work_count w3 = {0, 0, 0, 0, 2};
  CHECK_REL(cost_attn_fwd(&g, &m, &w3), 2 * 4194304.0 / 0.25e14, 1e-12);
  CHECK_REL(cost_attn_exec_flops(&m, &w3), 2 * 4194304.0, 1e-12);
}

// The backward's bar kernel walks each chunk's query tiles 64 rows at a time, two steps a tile: a call with bars lasts
// at least 2 x q_tiles steps of gpu.bar_walk_us. With 256 query tiles and 10 us a step that is 5.12 ms; the work
// model's bar time given is taken off, the rest is what the call adds.
TEST(sim_cost_a_backward_call_with_bars_lasts_at_least_its_longest_walk) {
  gpu_desc g = test_gpu();
  g.bar_walk_us = 10;
  work_count w = {0, 0, 100, 0, 0};
  CHECK_REL(cost_bar_walk(&g, &w, 256, 16, 264, 0.12e-3), 5.12e-3 - 0.12e-3, 1e-12);
}

TEST(sim_cost_a_call_whose_bars_outlast_the_walk_keeps_the_work_models_time) {
  gpu_desc g = test_gpu();
  g.bar_walk_us = 10;
  work_count w = {0, 0, 1000000, 0, 0};
  CHECK(cost_bar_walk(&g, &w, 256, 16, 264, 6e-3) == 0);  // 6 ms of bars against a 5.12 ms walk
}

TEST(sim_cost_no_bars_or_no_calibrated_walk_add_nothing) {
  gpu_desc g = test_gpu();
  work_count tiles = {10, 10, 0, 0, 0}, bars = {0, 0, 100, 0, 0};
  g.bar_walk_us = 10;
  CHECK(cost_bar_walk(&g, &tiles, 256, 16, 264, 0) == 0);  // the bar kernel does not run
  g.bar_walk_us = 0;
  CHECK(cost_bar_walk(&g, &bars, 256, 16, 264, 0) == 0);  // not modelled
  g.bar_walk_parts = 1;
  CHECK(cost_bar_walk(&g, &bars, 256, 16, 264, 0) == 0);  // nor with the walk named
}

// Where the file names the whole walk (gpu.bar_walk_parts 1), the chunks come in waves of `slots` CTAs: 16 heads of
// 20 x 256 x 64 bar entries over 256 query tiles are 16 x 20 = 320 chunks of 5.12 ms each, two waves on 264 slots, the
// second 56 / 264 full: the call takes its bars' 8 ms plus 5.12 x (2 - 320 / 264) ms that the last wave leaves idle.
TEST(sim_cost_whole_walks_come_in_waves_and_the_last_ones_idle_slots_are_charged) {
  gpu_desc g = test_gpu();
  g.bar_walk_us = 10, g.bar_walk_parts = 1;
  work_count w = {0, 0, 16 * 20 * 256 * 64, 0, 0};
  CHECK_REL(cost_bar_walk(&g, &w, 256, 16, 264, 8e-3), 5.12e-3 * (2 - 320.0 / 264), 1e-12);
  // a head's keys not a whole number of chunks: its last chunk walks as long (16 x 21 = 336 chunks)
  work_count w1 = {0, 0, 16 * 20 * 256 * 64 + 16, 0, 0};
  CHECK_REL(cost_bar_walk(&g, &w1, 256, 16, 264, 8e-3), 5.12e-3 * (2 - 336.0 / 264), 1e-12);
  // 200 chunks, one wave: the longest walk or the bars and the idle rest, whichever is longer (here the walk,
  // the floor as it was: 5.12 - 3 ms)
  work_count w2 = {0, 0, 16 * 12 * 256 * 64 + 8 * 256 * 64, 0, 0};  // 12.5 chunks a head: 13 x 16 = 208
  CHECK_REL(cost_bar_walk(&g, &w2, 256, 16, 264, 3e-3), 5.12e-3 - 3e-3, 1e-12);
  CHECK_REL(cost_bar_walk(&g, &w2, 256, 16, 264, 5e-3), 5.12e-3 * (1 - 208.0 / 264), 1e-12);
  // no slots known (a GPU cost_bar_ctas does not know): the floor as before
  CHECK_REL(cost_bar_walk(&g, &w2, 256, 16, 0, 3e-3), 5.12e-3 - 3e-3, 1e-12);
}

// The split walk (gpu.bar_walk_parts > 1, kernels/sparse_attn_bwd_bars.cu): 16 chunks of 512 steps are 8,192 steps,
// an even share of 32 over 264 CTAs, parts of max(64, 32 / 8) = 64 steps, so 8 parts a chunk (at most 16): 128 CTAs of
// 0.64 ms in one wave.
TEST(sim_cost_split_walks_cut_each_chunk_into_parts_of_an_eighth_of_the_even_share_at_least_64_steps) {
  gpu_desc g = test_gpu();
  g.bar_walk_us = 10, g.bar_walk_parts = 16;
  work_count w = {0, 0, 16 * 256 * 64, 0, 0};
  CHECK_REL(cost_bar_walk(&g, &w, 256, 16, 264, 0.05e-3), 0.64e-3 - 0.05e-3, 1e-12);
  g.bar_walk_parts = 4;  // at most 4 parts: 64 CTAs of 1.28 ms
  CHECK_REL(cost_bar_walk(&g, &w, 256, 16, 264, 0.05e-3), 1.28e-3 - 0.05e-3, 1e-12);
}

// The bars' dQ pass where the walk is split: one CTA a (head, query tile) cell with bars and one an SM, in waves of
// the SMs of COST_BAR_DQ_WAVE_US, less the calibration's largest bar call's waves (255 cells a head over 132 SMs) in
// proportion to the call's bar entries (257,536 a head there: min(128 i, 1,024) over 256 query tiles). 16 heads x
// 2048 query tiles with 4 bar keys each are 32,768 cells, 249 waves of 132 SMs on an H100; 100 bar keys are at most
// 100 cells, one wave; the calibration's own call is charged nothing beyond its rate; an unknown GPU (no SM count)
// and the whole walk charge none. Where the split walk's bars run at their walk's rate (a file with gpu.bar_walk_us:
// cost_bar_walk_rate) the calibration's waves are in its fixed time, so a call's own are charged whole, and its launch's
// CTAs that return at once (16 a chunk) at cost_bar_empty_s in waves of the resident CTAs.
TEST(sim_cost_split_walks_bars_dq_runs_a_cta_a_cell_in_waves_of_the_sms) {
  gpu_desc g = test_gpu();
  snprintf(g.name, sizeof g.name, "NVIDIA H100 80GB HBM3");
  double wave = COST_BAR_DQ_WAVE_US * 1e-6, per_key = 255.0 / 132 / 257536;  // carried waves a bar entry
  CHECK_REL(cost_bar_dq_cells(&g, 4.0 * 32768, 2048, 16), (249 - per_key * 4.0 * 32768) * wave, 1e-12);
  CHECK_REL(cost_bar_dq_cells(&g, 100, 2048, 16), (1 - per_key * 100) * wave, 1e-12);
  CHECK(cost_bar_dq_cells(&g, 257536.0 * 16, 255, 16) < 0.1 * wave);  // the calibration's call: its 31 waves carried
  CHECK(cost_bar_dq_cells(&g, 4096.0 * 2048 * 16, 2048, 16) == 0);         // 4,096 keys a cell: the rate holds more
  g.bar_walk_us = 10, g.bar_walk_parts = 16;                                 // in cost_bar_walk: parts as above, plus the pass
  CHECK_REL(cost_bar_dq_cells(&g, 100, 2048, 16), wave, 1e-12);              // at the walk's rate: none carried
  work_count w = {0, 0, 16 * 256 * 64, 0, 0};
  // 16 chunks of 8 parts: 128 CTAs of 256 launched return at once
  CHECK(cost_bar_empty_s(&g) > 0);
  CHECK_REL(cost_bar_walk(&g, &w, 256, 16, 264, 0.05e-3), 0.64e-3 - 0.05e-3 + 32 * wave + 128 / 264.0 * cost_bar_empty_s(&g),
            1e-12);
  g.bar_walk_parts = 1;  // the whole walk's fitted step carries the dQ: 16 chunks of 5.12 ms, one wave
  CHECK_REL(cost_bar_walk(&g, &w, 256, 16, 264, 0.05e-3), 5.12e-3 - 0.05e-3, 1e-12);
  snprintf(g.name, sizeof g.name, "Some Future GPU");
  CHECK(cost_bar_dq_cells(&g, 100, 2048, 16) == 0);
}

// The bars on the warp-specialized kernel (gpu.bar_walk_ws, backward variant 4): one CTA an SM, and no separate dQ
// pass: the same split walk as above on an H100's 132 slots costs its waves and its launch's CTAs that return at once
// (16 a chunk, cost_bar_empty_s each in waves of the SMs) only; a file that does not say its walk (parts 0) keeps
// the floor whatever ws says.
TEST(sim_cost_ws_bars_take_one_cta_an_sm_and_no_dq_pass) {
  gpu_desc g = test_gpu();
  snprintf(g.name, sizeof g.name, "NVIDIA H100 80GB HBM3");
  g.bar_walk_us = 10, g.bar_walk_parts = 16, g.bar_walk_ws = 1;
  CHECK_EQ_INT(cost_bar_slots(&g, 128), 132);
  CHECK_EQ_INT(cost_bar_slots(&g, 64), 132);
  work_count w = {0, 0, 16 * 256 * 64, 0, 0};
  // 16 chunks x 512 steps over 132 slots: fair 63 steps, parts of 64 steps, 8 a chunk: 128 CTAs of 0.64 ms, one wave;
  // 16 x 16 CTAs launched, 128 of them returning at once
  double empty = cost_bar_empty_s(&g);
  CHECK(empty > 0);
  CHECK_REL(cost_bar_walk(&g, &w, 256, 16, cost_bar_slots(&g, 128), 0.05e-3), 0.64e-3 - 0.05e-3 + 128.0 / 132 * empty,
            1e-12);
  g.bar_walk_ws = 0;  // the mma.sync kernels: two CTAs an SM and the dQ pass on top
  CHECK_EQ_INT(cost_bar_slots(&g, 128), 264);
  CHECK(cost_bar_walk(&g, &w, 256, 16, cost_bar_slots(&g, 128), 0.05e-3) > 0.64e-3 - 0.05e-3);
  g.bar_walk_parts = 0, g.bar_walk_ws = 1;
  CHECK_EQ_INT(cost_bar_slots(&g, 128), 0);
  snprintf(g.name, sizeof g.name, "Some Future GPU");
  g.bar_walk_parts = 16;
  CHECK_EQ_INT(cost_bar_slots(&g, 128), 0);
}

// Backward variant 5 (gpu.bar_walk_pairs, kernels/sparse_attn_bwd_ws.cu sa_bwd_ws_pair_kernel): a head's compute
// chunks pair up from its first, one CTA a pair walking their union (the model's lists: every query tile, so 2 q_tiles
// steps, one chunk's walk), a lone last chunk a CTA of its own; a pair's parts count both chunks' steps. On an H100's
// 132 slots, 16 heads over 256 query tiles (512 steps a walk, parts of at least 64 steps):
// - 2 chunks a head: variant 4 runs 32 chunks x 8 parts of 64 steps (256 CTAs, 2 waves: 1.28 ms); variant 5 16 pairs x
//   16 parts of 32 steps (256 CTAs of half the length: 2 waves of 0.32 ms);
// - 3 chunks a head: 16 pairs x 16 parts of 32 steps and 16 lone chunks x 8 parts of 64 (384 CTAs, 16,384 steps: a
//   mean of 42.67), 3 waves of the mean CTA, 1.28 ms, where variant 4 takes 3 waves of 0.64 ms; with 1.5 ms of bars
//   the last wave's idle share is charged at the longest CTA: 0.64 ms x (3 - 384 / 132);
// - 4 chunks a head over 2048 query tiles: parts of 248 steps, both variants' at the cap of 16 (256 steps each):
//   variant 4 1,024 CTAs, 8 waves; variant 5 512 CTAs, 4 waves;
// - one chunk a head (vs-online's few keys): variant 5 runs variant 4's CTAs, the same time.
// Each launch is 16 CTAs a chunk (bars_ws_launch): those not holding a part return at once, cost_bar_empty_s each in
// waves of the slots (its figure for each kernel, from the file's bar efficiency and walk).
TEST(sim_cost_pair_bars_walk_a_pair_of_chunks_a_cta_and_a_lone_last_chunk_alone) {
  gpu_desc g = test_gpu();
  snprintf(g.name, sizeof g.name, "NVIDIA H100 80GB HBM3");
  g.bar_walk_us = 10, g.bar_walk_parts = 16, g.bar_walk_ws = 1, g.bar_walk_pairs = 1;
  CHECK_EQ_INT(cost_bar_slots(&g, 128), 132);  // the tile kernel's shared memory: one CTA an SM
  cost_bar_grid r4, r5;
  gpu_desc g4 = g;
  g4.bar_walk_pairs = 0;
  work_count w2 = {0, 0, 16 * 2 * 256 * 64, 0, 0};
  cost_bar_grid_of(&g, (double)w2.bars, 256, 16, 132, &r5);
  cost_bar_grid_of(&g4, (double)w2.bars, 256, 16, 132, &r4);
  CHECK_NEAR(r4.ctas, 256, 0);
  CHECK_NEAR(r4.longest, 64, 0);
  CHECK_NEAR(r4.steps, 32 * 512, 0);
  CHECK_NEAR(r5.ctas, 256, 0);
  CHECK_NEAR(r5.longest, 32, 0);
  CHECK_NEAR(r5.steps, 16 * 512, 0);
  double e4 = cost_bar_empty_s(&g4), e5 = cost_bar_empty_s(&g);
  CHECK(e4 > 0 && e5 > 0);
  CHECK_REL(cost_bar_walk(&g4, &w2, 256, 16, 132, 0.05e-3), 1.28e-3 - 0.05e-3 + (512 - 256) / 132.0 * e4, 1e-12);
  CHECK_REL(cost_bar_walk(&g, &w2, 256, 16, 132, 0.05e-3), 0.64e-3 - 0.05e-3 + (512 - 256) / 132.0 * e5, 1e-12);
  work_count w3 = {0, 0, 16 * 3 * 256 * 64, 0, 0};
  cost_bar_grid_of(&g, (double)w3.bars, 256, 16, 132, &r5);
  CHECK_NEAR(r5.ctas, 16 * 16 + 16 * 8, 0);
  CHECK_NEAR(r5.longest, 64, 0);
  CHECK_NEAR(r5.steps, 32 * 512, 0);
  CHECK_REL(cost_bar_walk(&g, &w3, 256, 16, 132, 0.05e-3), 1.28e-3 - 0.05e-3 + (768 - 384) / 132.0 * e5, 1e-12);
  CHECK_REL(cost_bar_walk(&g4, &w3, 256, 16, 132, 0.05e-3), 1.92e-3 - 0.05e-3 + (768 - 384) / 132.0 * e4, 1e-12);
  CHECK_REL(cost_bar_walk(&g, &w3, 256, 16, 132, 1.5e-3), 0.64e-3 * (3 - 384.0 / 132) + (768 - 384) / 132.0 * e5,
            1e-12);
  work_count w4 = {0, 0, 16 * 4 * 2048 * 64, 0, 0};
  cost_bar_grid_of(&g, (double)w4.bars, 2048, 16, 132, &r5);
  cost_bar_grid_of(&g4, (double)w4.bars, 2048, 16, 132, &r4);
  CHECK_NEAR(r4.ctas, 1024, 0);
  CHECK_NEAR(r5.ctas, 512, 0);
  CHECK_NEAR(r5.longest, 256, 0);
  CHECK_REL(cost_bar_walk(&g, &w4, 2048, 16, 132, 0.05e-3), 4 * 2.56e-3 - 0.05e-3 + (1024 - 512) / 132.0 * e5, 1e-12);
  CHECK_REL(cost_bar_walk(&g4, &w4, 2048, 16, 132, 0.05e-3), 8 * 2.56e-3 - 0.05e-3, 1e-12);  // every CTA holds a part
  work_count w1 = {0, 0, 16 * 4 * 2048, 0, 0};  // 4 keys a (head, query tile) cell
  cost_bar_grid_of(&g, (double)w1.bars, 2048, 16, 132, &r5);
  cost_bar_grid_of(&g4, (double)w1.bars, 2048, 16, 132, &r4);
  CHECK_NEAR(r5.ctas, r4.ctas, 0);
  CHECK_NEAR(r5.longest, r4.longest, 0);
  CHECK_REL(cost_bar_walk(&g, &w1, 2048, 16, 132, 0.05e-3), cost_bar_walk(&g4, &w1, 2048, 16, 132, 0.05e-3), 1e-12);
  // the same traffic floor (a pair's step loads its rows once), and without a named walk the same floor of one walk
  double traffic = cost_bar_ws_traffic(&g, (double)w3.bars, 256, 16, 128);
  CHECK(traffic > 0 && traffic == cost_bar_ws_traffic(&g4, (double)w3.bars, 256, 16, 128));
  g.bar_walk_parts = g4.bar_walk_parts = 0;
  CHECK(cost_bar_walk(&g, &w3, 256, 16, 0, 1e-3) == cost_bar_walk(&g4, &w3, 256, 16, 0, 1e-3));
}

// Pairs never take more CTAs nor more steps than variant 4's chunks, nor a longer CTA, and the call never less than
// its longest CTA or its even share: over heads, chunks a head, query tiles, both GPUs' slots and the parts' cap.
TEST(sim_cost_pair_bars_take_no_more_ctas_or_steps_than_one_chunk_a_cta) {
  gpu_desc g = test_gpu();
  g.bar_walk_us = 10, g.bar_walk_ws = 1;
  for (int cap = 1; cap <= 16; cap *= 4)
    for (int heads = 1; heads <= 64; heads *= 4)
      for (int k = 1; k <= 9; k++)
        for (int qt = 16; qt <= 4096; qt *= 4)
          for (int slots = 114; slots <= 132; slots += 18) {
            gpu_desc g4 = g, g5 = g;
            g4.bar_walk_parts = g5.bar_walk_parts = cap, g5.bar_walk_pairs = 1;
            double bars = (double)heads * k * qt * 64 - 3;  // the last chunk of a head not full
            cost_bar_grid r4, r5;
            cost_bar_grid_of(&g4, bars, qt, heads, slots, &r4);
            cost_bar_grid_of(&g5, bars, qt, heads, slots, &r5);
            CHECK(r5.ctas <= r4.ctas && r5.steps <= r4.steps && r5.longest <= r4.longest);
            CHECK_NEAR(r5.steps, heads * ceil(k / 2.0) * 2.0 * qt, 0);
            work_count w = {0, 0, (int64_t)bars, 0, 0};
            double t = cost_bar_walk(&g5, &w, qt, heads, slots, 0) * 1e6 / g.bar_walk_us;  // in steps
            CHECK(t >= r5.longest * (1 - 1e-12) && t >= r5.steps / slots * (1 - 1e-12));
          }
}

// The warp-specialized bars' backward at their walk's rate (cost_bar_walk_rate, sim/cost.c): each of the GPU's SMs runs
// a 64-row step of gpu.bar_walk_us holding 64 x 64 listed entries (variant 4), 64 x 128 with pairs (variant 5), i.e.
// 32 / 64 bar entries of 128 rows. On an H100's 132 SMs at 10 us a step, 132 x 32 bars take one step's 10 us where the
// file's bar efficiency (0.1 of 100 TFLOP/s) would charge 2.5 x 4224 x 65536 FLOPs / 1e13 = 69.2 us; pairs 132 x 64.
// A file without the walk, the kernel or its parts, or a GPU of unknown SMs, keeps the efficiency.
TEST(sim_cost_ws_bars_run_at_their_walks_rate) {
  gpu_desc g = test_gpu();
  snprintf(g.name, sizeof g.name, "NVIDIA H100 80GB HBM3");
  g.bar_walk_us = 10, g.bar_walk_parts = 16, g.bar_walk_ws = 1;
  model_config m;
  memset(&m, 0, sizeof m);
  m.head_dim = 128;
  work_count w = {0, 0, 132 * 32, 0, 0};
  CHECK_REL(cost_attn_bwd(&g, &m, &w), 10e-6, 1e-12);
  CHECK_REL(cost_bar_walk_rate(&g, 2.5, 65536), 132 * 32 * 2.5 * 65536 / 10e-6, 1e-12);
  g.bar_walk_pairs = 1;
  work_count w2 = {0, 0, 132 * 64, 0, 0};
  CHECK_REL(cost_attn_bwd(&g, &m, &w2), 10e-6, 1e-12);
  CHECK_REL(cost_attn_fwd(&g, &m, &w), 4224 * 65536.0 / 0.1e14, 1e-12);  // the forward's bars keep their efficiency
  double fallback = 2.5 * 4224 * 65536.0 / 0.1e14;
  gpu_desc h = g;
  h.bar_walk_ws = 0, h.bar_walk_pairs = 0;  // variant 3: the same on its 264 resident CTAs (two an SM at d 128)
  CHECK_REL(cost_attn_bwd(&h, &m, &w), 5e-6, 1e-12);
  CHECK_REL(cost_bar_walk_rate(&h, 2.5, 65536), 264 * 32 * 2.5 * 65536 / 10e-6, 1e-12);
  h.bar_walk_parts = 1;  // the whole walk (variants 0-2): its step is a floor, not the rate
  CHECK_REL(cost_attn_bwd(&h, &m, &w), fallback, 1e-12);
  h = g, h.bar_walk_parts = 0;
  CHECK_REL(cost_attn_bwd(&h, &m, &w), fallback, 1e-12);
  h = g, h.bar_walk_us = 0;
  CHECK_REL(cost_attn_bwd(&h, &m, &w), fallback, 1e-12);
  h = g, snprintf(h.name, sizeof h.name, "Some Future GPU");
  CHECK_REL(cost_attn_bwd(&h, &m, &w), fallback, 1e-12);
  CHECK(cost_bar_empty_s(&h) == 0);
}

// The launch's CTAs that return at once (cost_bar_empty_s): calibrate's largest bar call, a head of it (query tile i
// lists min(128 i, 1024) keys: 28 x 128 + 248 x 1024 = 257,536 entries; 255 x 128 keys in 510 chunks of 16 steps),
// took 2.5 x 257,536 x 65,536 FLOPs at 0.1 of 100 TFLOP/s = 4.219 ms, of which its walk at the bars' rate is 257,536 /
// 32 steps x 10 us / 132 (variant 4) or 257,536 / 64 (pairs); the rest is the 510 x 16 CTAs launched less the 510
// (255 pairs) that walk, in waves of 132. On the two H200 calibrations of 2026-11-28: 1.73 us (variant 4: 0.2109 of
// 989 TFLOP/s, 1.672 us a step) and 1.75 us (variant 5: 0.2300, 2.648 us).
TEST(sim_cost_ws_bars_idle_ctas_take_the_calibrations_time_beyond_its_walk) {
  gpu_desc g = test_gpu();
  snprintf(g.name, sizeof g.name, "NVIDIA H100 80GB HBM3");
  g.bar_walk_us = 10, g.bar_walk_parts = 16, g.bar_walk_ws = 1;
  double call = 2.5 * 257536 * 65536 / 1e13;
  CHECK_REL(cost_bar_empty_s(&g), (call - 257536 / 32.0 * 10e-6 / 132) / (7650 / 132.0), 1e-12);
  g.bar_walk_pairs = 1;
  CHECK_REL(cost_bar_empty_s(&g), (call - 257536 / 64.0 * 10e-6 / 132) / (7905 / 132.0), 1e-12);
  g.peak_tflops = 1000, g.eff_attn_bwd_bar = 1;  // a call faster than its walk: nothing left for the idle CTAs
  CHECK(cost_bar_empty_s(&g) == 0);
  gpu_desc h = test_gpu();
  snprintf(h.name, sizeof h.name, "NVIDIA H200");
  h.peak_tflops = 989, h.bar_walk_parts = 16, h.bar_walk_ws = 1;
  h.eff_attn_bwd_bar = 0.21093852504090452, h.bar_walk_us = 1.6720180478453237;
  CHECK_NEAR(cost_bar_empty_s(&h) * 1e6, 1.73, 0.005);
  h.eff_attn_bwd_bar = 0.23001445591046676, h.bar_walk_us = 2.648328213485378, h.bar_walk_pairs = 1;
  CHECK_NEAR(cost_bar_empty_s(&h) * 1e6, 1.75, 0.005);
}

// Variant 3's split walk (gpu.bar_walk_parts > 1 without ws): its launch is the same 16 CTAs a chunk, in waves of its
// resident CTAs (264 on an H100 or H200 at head_dim 128), and the calibration's time beyond its walk holds its bars' dQ
// pass too: 255 cells a head in waves of 132 SMs of COST_BAR_DQ_WAVE_US, taken off before the rest is spread over the
// 7,650 returning CTAs a head. The 2026-11-27 18:28 H200 log (0.1711 of peak, 5.924 us a step): 1.10 ms beyond the
// walk, 0.40 ms of it the dQ waves, about 1.5 us a wave of 264.
TEST(sim_cost_split_bars_idle_ctas_take_the_calibrations_time_beyond_its_walk_and_dq) {
  gpu_desc g = test_gpu();
  snprintf(g.name, sizeof g.name, "NVIDIA H100 80GB HBM3");
  g.bar_walk_us = 10, g.bar_walk_parts = 16;
  double call = 2.5 * 257536 * 65536 / 1e13, dq = 255.0 / 132 * COST_BAR_DQ_WAVE_US * 1e-6;
  CHECK_REL(cost_bar_empty_s(&g), (call - 257536 / 32.0 * 10e-6 / 264 - dq) / (7650 / 264.0), 1e-12);
  g.bar_walk_parts = 1;  // the whole walk: no rate, nothing apart
  CHECK(cost_bar_empty_s(&g) == 0);
  gpu_desc h = test_gpu();
  snprintf(h.name, sizeof h.name, "NVIDIA H200");
  h.peak_tflops = 989, h.bar_walk_parts = 16;
  h.eff_attn_bwd_bar = 0.171111849973157, h.bar_walk_us = 5.9239475589306441;
  CHECK_NEAR(cost_bar_walk_rate(&h, 2.5, 65536) / 1e12, 233.6, 0.1);  // the log's slope: 234 TFLOP/s
  CHECK_NEAR(cost_bar_empty_s(&h) * 1e6, 1.50, 0.01);
}

TEST(sim_cost_bar_kernel_ctas_are_the_sms_times_what_fits_an_sms_shared_memory) {
  CHECK_EQ_INT(cost_bar_ctas("NVIDIA H200", 128), 264);
  CHECK_EQ_INT(cost_bar_ctas("NVIDIA H100 80GB HBM3", 128), 264);
  CHECK_EQ_INT(cost_bar_ctas("H100-PCIe", 128), 228);
  CHECK_EQ_INT(cost_bar_ctas("A100-SXM4-40GB", 128), 108);
  CHECK_EQ_INT(cost_bar_ctas("Some Future GPU", 128), 0);
}

// A ring step's kernel pays each (query tile, head) walk gpu.attn_walk_us beyond its tiles, per phase: 4096 cells at
// 0.05 us forward and 0.2 us backward are 204.8 us and 819.2 us on top of 10 us a step and 0.01 us a cell.
TEST(sim_cost_a_steps_walks_cost_the_files_time_a_walk_on_top_of_the_step_costs) {
  gpu_desc g = test_gpu();
  g.ring_step_us[0] = g.ring_step_us[1] = 10, g.ring_cell_us[0] = g.ring_cell_us[1] = 0.01;
  g.attn_walk_us[0] = 0.05, g.attn_walk_us[1] = 0.2;
  CHECK_REL(cost_attn_walks(&g, 0, 4096), 204.8e-6, 1e-12);
  CHECK_REL(cost_attn_walks(&g, 1, 4096), 819.2e-6, 1e-12);
  CHECK_REL(cost_ring_step(&g, 0, 4096), 10e-6 + 40.96e-6 + 204.8e-6, 1e-12);
  CHECK_REL(cost_ring_step(&g, 1, 4096), 10e-6 + 40.96e-6 + 819.2e-6, 1e-12);
  CHECK(cost_attn_walks(&g, 0, 0) == 0);  // a step without work walks nothing
}

// A file without gpu.attn_walk costs a step exactly as before the field existed: (fixed + cells x per-cell) x 1e-6.
TEST(sim_cost_a_file_without_walks_costs_a_step_the_same_bits_as_before) {
  gpu_desc g = test_gpu();
  g.ring_step_us[0] = 8.804068656772534, g.ring_cell_us[0] = 0.0605117853069394;
  g.ring_step_us[1] = 238.91067247646762;
  double cells[3] = {0, 2048, 123457};
  for (int i = 0; i < 3; i++)
    for (int p = 0; p < 2; p++) {
      double before = (g.ring_step_us[p] + cells[i] * g.ring_cell_us[p]) * 1e-6;
      CHECK(cost_ring_step(&g, p, cells[i]) == before);
      CHECK(cost_attn_walks(&g, p, cells[i]) == 0);
    }
}

// An L2 cache of 50 MiB holds the K and V of one KV head at head_dim 128 (2 x 128 bf16 values each, 512 B a key) for
// 50 x 2^20 / 512 = 102,400 keys. A call over that many keys costs its tiles as before; over one key more its FULL
// tiles (and not its PARTIAL ones) take gpu.attn_l2 longer: 10 FULL tiles of 4 x 128^3 = 8,388,608 FLOPs at 0.5e14 FLOP/s
// forward, a tenth more; backward 2.5 x those FLOPs at 0.4e14, a twentieth more.
TEST(sim_cost_a_calls_full_tiles_take_the_files_l2_loss_once_its_keys_outgrow_the_cache) {
  gpu_desc g = test_gpu();
  g.l2_mb = 50, g.attn_l2[0] = 0.1, g.attn_l2[1] = 0.05;
  model_config m;
  memset(&m, 0, sizeof m);
  m.head_dim = 128;
  cost_attn_rates rf, rb;
  cost_attn_rates_init(&g, &m, 0, &rf), cost_attn_rates_init(&g, &m, 1, &rb);
  work_count w = {10, 3, 0, 0, 0};
  CHECK(cost_attn_l2(&rf, &w, 102400) == 0 && cost_attn_l2(&rb, &w, 102400) == 0);
  CHECK_REL(cost_attn_l2(&rf, &w, 102401), 0.1 * 10 * 8388608.0 / 0.5e14, 1e-12);
  CHECK_REL(cost_attn_l2(&rb, &w, 102401), 0.05 * 2.5 * 10 * 8388608.0 / 0.4e14, 1e-12);
  CHECK_REL(cost_attn_l2(&rf, &w, 1e9), 0.1 * 10 * 8388608.0 / 0.5e14, 1e-12);  // one step, not a ramp
  work_count partial = {0, 10, 5, 0, 3};
  CHECK(cost_attn_l2(&rf, &partial, 1e9) == 0);
  // at head_dim 64 a key is half the bytes: twice the keys fit
  m.head_dim = 64;
  cost_attn_rates_init(&g, &m, 0, &rf);
  CHECK(cost_attn_l2(&rf, &w, 204800) == 0 && cost_attn_l2(&rf, &w, 204801) > 0);
}

// Without both figures (the cache and the fitted loss) nothing is added, whatever the keys: a file from before them
// costs every call as before.
TEST(sim_cost_no_l2_or_no_fitted_loss_add_nothing) {
  model_config m;
  memset(&m, 0, sizeof m);
  m.head_dim = 128;
  work_count w = {1000, 10, 10, 0, 0};
  gpu_desc only_l2 = test_gpu(), only_loss = test_gpu();
  only_l2.l2_mb = 50;
  only_loss.attn_l2[0] = only_loss.attn_l2[1] = 0.5;
  for (int p = 0; p < 2; p++) {
    cost_attn_rates a, b;
    cost_attn_rates_init(&only_l2, &m, p, &a), cost_attn_rates_init(&only_loss, &m, p, &b);
    CHECK(cost_attn_l2(&a, &w, 1e9) == 0 && cost_attn_l2(&b, &w, 1e9) == 0);
  }
}

// A FULL tile's time (its rate's inverse) never falls as the call's keys grow: flat below the cache, one step up past
// it, flat again.
TEST(sim_cost_a_full_tiles_time_does_not_fall_as_the_calls_keys_grow) {
  gpu_desc g = test_gpu();
  g.l2_mb = 40, g.attn_l2[0] = 0.08, g.attn_l2[1] = 0.02;
  model_config m;
  memset(&m, 0, sizeof m);
  m.head_dim = 128;
  work_count w = {1, 0, 0, 0, 0};
  for (int p = 0; p < 2; p++) {
    cost_attn_rates a;
    cost_attn_rates_init(&g, &m, p, &a);
    double before = 0, lo = 1e9, hi = 0;
    for (double keys = 1024; keys <= 4194304; keys *= 1.25) {
      double t = cost_attn_time(&a, &w) + cost_attn_l2(&a, &w, keys);
      CHECK(t >= before);
      before = t, lo = t < lo ? t : lo, hi = t > hi ? t : hi;
    }
    CHECK_REL(hi / lo, 1 + g.attn_l2[p], 1e-12);
  }
}

TEST(sim_cost_the_bars_share_of_a_call_is_their_entries_at_the_bar_rate) {
  gpu_desc g = test_gpu();
  model_config m;
  memset(&m, 0, sizeof m);
  m.head_dim = 128;
  cost_attn_rates rb;
  cost_attn_rates_init(&g, &m, 1, &rb);
  // ten bars backward: 2.5 x 10 x 4 x 128 x 128 FLOPs at a tenth of 1e14 FLOP/s; the full tile beside them is not theirs
  work_count w = {1, 0, 10, 0, 0};
  CHECK_REL(cost_attn_bar_time(&rb, &w), 2.5 * 10 * 65536.0 / 0.1e14, 1e-12);
}

TEST(sim_cost_gemm_and_memory_bound_ops_follow_the_roofline) {
  gpu_desc g = test_gpu();
  CHECK_REL(cost_gemm(&g, 1e12), 1e12 / 0.5e14, 1e-12);
  CHECK_REL(cost_mem(&g, 8e9), 8e9 / 0.8e12, 1e-12);
}

TEST(sim_cost_a_training_steps_gemms_run_at_the_sustained_share_of_the_calibrated_rate) {
  gpu_desc g = test_gpu();  // 100 TFLOP/s at 0.5: 50 calibrated, 40.5 sustained (0.81)
  CHECK_REL(cost_gemm_step(&g, 1e12), 1e12 / 0.405e14, 1e-12);
}

TEST(sim_cost_a_training_steps_gemms_run_at_the_files_sustained_rate_when_it_gives_one) {
  gpu_desc g = test_gpu();
  g.eff_gemm_sustained = 0.3;  // 100 TFLOP/s at 0.3: 30 held over seconds, whatever the burst's 0.5
  CHECK_REL(cost_gemm_step(&g, 1e12), 1e12 / 0.3e14, 1e-12);
  CHECK_REL(cost_gemm(&g, 1e12), 1e12 / 0.5e14, 1e-12);  // a lone GEMM keeps the burst's rate
}

TEST(sim_cost_p2p_is_latency_plus_bytes_over_bandwidth) {
  link_desc l = {.gbps = 25, .latency_us = 5};
  CHECK_REL(cost_p2p(&l, 1e9), 5e-6 + 1e9 / 25e9, 1e-12);
  CHECK_NEAR(cost_p2p(&l, 0), 0, 0);
}

TEST(sim_cost_ring_collectives_move_the_textbook_volumes) {
  // 8 ranks, 1 GB, 100 GB/s, 10 us. All-reduce: 14 latencies + 2*7/8 GB; reduce-scatter/all-gather:
  // 7 latencies + 7/8 GB; broadcast: 3 latencies + 1 GB.
  CHECK_REL(cost_allreduce(8, 1e9, 100, 10), 14 * 10e-6 + 1.75e9 / 100e9, 1e-12);
  CHECK_REL(cost_reduce_scatter(8, 1e9, 100, 10), 7 * 10e-6 + 0.875e9 / 100e9, 1e-12);
  CHECK_REL(cost_allgather(8, 1e9, 100, 10), 7 * 10e-6 + 0.875e9 / 100e9, 1e-12);
  CHECK_REL(cost_broadcast(8, 1e9, 100, 10), 3 * 10e-6 + 1e9 / 100e9, 1e-12);
  CHECK_NEAR(cost_allreduce(1, 1e9, 100, 10), 0, 0);
}

TEST(sim_cost_alltoall_across_nodes_is_bound_by_the_gpus_share_of_the_nics) {
  cluster_desc c;
  memset(&c, 0, sizeof c);
  c.nodes = 2;
  c.gpus_per_node = 8;
  c.nics_per_node = 8;
  c.nic.gbps = 25;
  c.intra.gbps = 300;
  // 16 ranks, 8 per node, 1.6 GB each: 0.8 GB leaves the node at 25 GB/s (32 ms); 0.7 GB stays on
  // NVLink at 300 GB/s (2.3 ms); the slower part bounds the time.
  CHECK_REL(cost_alltoall_cluster(&c, 16, 8, 1.6e9), 0.8e9 / 25e9, 1e-12);
}

TEST(sim_cost_compute_under_comm_slows_only_the_overlapped_part) {
  // 1 s of compute beside 0.5 s of comm at slowdown 1.25: 0.4 s of work done in the 0.5 s window,
  // 0.6 s after it: 1.1 s. Compute fully inside a long comm: 1.25x.
  CHECK_NEAR(cost_under_comm(1.0, 0.5, 1.25), 1.1, 1e-12);
  CHECK_NEAR(cost_under_comm(1.0, 10.0, 1.25), 1.25, 1e-12);
  CHECK_NEAR(cost_under_comm(1.0, 10.0, 1.0), 1.0, 1e-12);
}

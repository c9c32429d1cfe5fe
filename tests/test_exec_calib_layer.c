// test_exec_calib_layer.c — the layer-shaped attention calls of calibration without a GPU: their work as the
// simulator counts it, the fit that separates a walk's cost from a tile's (and drops the walk where the data show
// none) and the FULL tiles' loss in calls whose keys outgrow the L2 cache, the refit of a log that holds them (and of
// one from before them), and the --layer-lengths flag.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/calibrate.h"
#include "plan/cluster.h"
#include "plan/util.h"
#include "tests/test.h"

// At L tokens a ring step's calls have n = L / 128 query tiles of each of the 16 heads, one walk each: against an
// earlier shard n x n FULL tiles, against its own keys the n (n - 1) / 2 below the diagonal FULL and the n on it
// PARTIAL. The short walks: query tile i of the 256 holds min(i, 8) or min(i, 32) tiles, 28 + 8 x 248 = 2012 and
// 496 + 32 x 224 = 7664 a head, and every one of the 256 x 16 cells counts (entries outnumber them).
TEST(calib_layer_add_counts_a_ring_steps_calls_as_the_simulator_does) {
  calib_layer ly;
  memset(&ly, 0, sizeof ly);
  sr_error e = {0};
  CHECK_EQ_INT(calib_layer_add(&ly, "off", 16384, 16, &e), SR_OK);
  CHECK_EQ_INT(calib_layer_add(&ly, "diag", 16384, 16, &e), SR_OK);
  CHECK_EQ_INT(calib_layer_add(&ly, "band8", 32768, 16, &e), SR_OK);
  CHECK_EQ_INT(calib_layer_add(&ly, "band32", 32768, 16, &e), SR_OK);
  CHECK_EQ_INT(calib_layer_add(&ly, "off", 65536, 16, &e), SR_OK);
  CHECK_EQ_INT(ly.n, 5);
  CHECK_NEAR(ly.full[0], 128.0 * 128 * 16, 0);
  CHECK_NEAR(ly.partial[0], 0, 0);
  CHECK_NEAR(ly.cells[0], 128.0 * 16, 0);
  CHECK_NEAR(ly.full[1], 128.0 * 127 / 2 * 16, 0);
  CHECK_NEAR(ly.partial[1], 128.0 * 16, 0);
  CHECK_NEAR(ly.cells[1], 128.0 * 16, 0);
  CHECK_NEAR(ly.full[2], 2012.0 * 16, 0);
  CHECK_NEAR(ly.cells[2], 256.0 * 16, 0);
  CHECK_NEAR(ly.full[3], 7664.0 * 16, 0);
  CHECK_NEAR(ly.full[4], 512.0 * 512 * 16, 0);
  CHECK_NEAR(ly.cells[4], 512.0 * 16, 0);
  CHECK(!strcmp(ly.shape[1], "diag") && ly.tokens[4] == 65536);
}

TEST(calib_layer_add_refuses_an_unknown_shape_and_a_short_walk_off_its_index) {
  calib_layer ly;
  memset(&ly, 0, sizeof ly);
  sr_error e = {0};
  CHECK_EQ_INT(calib_layer_add(&ly, "offdiag", 16384, 16, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "'offdiag': expected band8, band32, off or diag");
  CHECK_EQ_INT(calib_layer_add(&ly, "band8", 16384, 16, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "the short walks are on 32768");
  CHECK_EQ_INT(ly.n, 0);
}

// Calls timed as 20 us + 0.08 us a walk + their FULL FLOPs at 600 TFLOP/s: the fit gives the three back.
TEST(calib_fit_walk_recovers_a_calls_fixed_time_its_walks_cost_and_its_tiles_rate) {
  double cells[6] = {4096, 4096, 2048, 2048, 8192, 8192}, tiles[6] = {32192, 122624, 262144, 130048, 4194304, 2095104};
  double flops[6], secs[6];
  int layer[6] = {0, 0, 1, 1, 1, 1};
  for (int i = 0; i < 6; i++) flops[i] = tiles[i] * 8388608.0, secs[i] = 20e-6 + cells[i] * 0.08e-6 + flops[i] / 600e12;
  double tf, walk, fixed, l2;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_walk(flops, cells, secs, layer, NULL, 6, &tf, &walk, &fixed, &l2, &e), SR_OK);
  CHECK_REL(tf, 600, 1e-6);
  CHECK_REL(walk, 0.08, 1e-6);
  CHECK_REL(fixed, 20, 1e-5);
}

// Short walks faster a FLOP than long ones (no cost a walk shows; the backward's case on one H100: 533 TFLOP/s on
// the benchmark's walks, 470-483 in causal layers): the walk is 0 and the rate is the layer-shaped calls' own,
// 480 TFLOP/s with their 30 us a call, not one pulled towards the short calls'.
TEST(calib_fit_walk_takes_the_layer_calls_rate_where_the_data_show_no_cost_a_walk) {
  double cells[6] = {4096, 4096, 2048, 2048, 8192, 8192}, tiles[6] = {32192, 122624, 262144, 130048, 4194304, 2095104};
  double flops[6], secs[6];
  int layer[6] = {0, 0, 1, 1, 1, 1};
  for (int i = 0; i < 6; i++) {
    flops[i] = tiles[i] * 8388608.0 * 2.5;
    secs[i] = layer[i] ? 30e-6 + flops[i] / 480e12 : 10e-6 + flops[i] / 533e12;
  }
  double tf, walk, fixed, l2;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_walk(flops, cells, secs, layer, NULL, 6, &tf, &walk, &fixed, &l2, &e), SR_OK);
  CHECK(walk == 0);
  CHECK_REL(tf, 480, 1e-6);
  CHECK_REL(fixed, 30, 1e-5);
}

// The calls above and the two a ring step makes at 128K, whose keys' K and V (one KV head at d 128: 64 MiB) outgrow an
// L2 of 50 MiB; beyond it a FULL tile takes 9% longer. The fit gives the four back.
static const double l2_cells[8] = {4096, 4096, 2048, 2048, 8192, 8192, 16384, 16384},
                    l2_tiles[8] = {32192, 122624, 262144, 130048, 4194304, 2095104, 16777216, 8380416};
static const int l2_layer[8] = {0, 0, 1, 1, 1, 1, 1, 1}, l2_beyond[8] = {0, 0, 0, 0, 0, 0, 1, 1};

TEST(calib_fit_walk_recovers_the_full_tiles_loss_in_calls_whose_keys_outgrow_the_l2) {
  double flops[8], secs[8], tf, walk, fixed, l2;
  for (int i = 0; i < 8; i++) {
    flops[i] = l2_tiles[i] * 8388608.0;
    secs[i] = 20e-6 + l2_cells[i] * 0.08e-6 + flops[i] / 600e12 * (l2_beyond[i] ? 1.09 : 1);
  }
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_walk(flops, l2_cells, secs, l2_layer, l2_beyond, 8, &tf, &walk, &fixed, &l2, &e), SR_OK);
  CHECK_REL(tf, 600, 1e-6);
  CHECK_REL(walk, 0.08, 1e-5);
  CHECK_REL(fixed, 20, 1e-4);
  CHECK_REL(l2, 0.09, 1e-6);
}

// As the backward's case above (no cost a walk shows): the layer calls' rate, fixed time and loss beyond the L2.
TEST(calib_fit_walk_recovers_the_loss_beyond_the_l2_where_the_data_show_no_cost_a_walk) {
  double flops[8], secs[8], tf, walk, fixed, l2;
  for (int i = 0; i < 8; i++) {
    flops[i] = l2_tiles[i] * 8388608.0 * 2.5;
    secs[i] = l2_layer[i] ? 30e-6 + flops[i] / 480e12 * (l2_beyond[i] ? 1.03 : 1) : 10e-6 + flops[i] / 533e12;
  }
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_walk(flops, l2_cells, secs, l2_layer, l2_beyond, 8, &tf, &walk, &fixed, &l2, &e), SR_OK);
  CHECK(walk == 0);
  CHECK_REL(tf, 480, 1e-6);
  CHECK_REL(fixed, 30, 1e-4);
  CHECK_REL(l2, 0.03, 1e-6);
}

// No call beyond the cache, or the calls beyond it no slower a tile (here faster): no loss, and the rest of the fit the
// same bits as without the term.
TEST(calib_fit_walk_fits_no_l2_loss_where_no_call_shows_one) {
  double flops[8], secs[8], tf[3], walk[3], fixed[3], l2[3];
  int none[8] = {0};
  for (int i = 0; i < 8; i++) {
    flops[i] = l2_tiles[i] * 8388608.0;
    secs[i] = 20e-6 + l2_cells[i] * 0.08e-6 + flops[i] / 600e12 * (l2_beyond[i] ? 0.97 : 1);
  }
  sr_error e = {0};
  const int *beyond[3] = {NULL, none, l2_beyond};
  for (int k = 0; k < 3; k++)
    CHECK_EQ_INT(calib_fit_walk(flops, l2_cells, secs, l2_layer, beyond[k], 8, &tf[k], &walk[k], &fixed[k], &l2[k], &e),
                 SR_OK);
  for (int k = 0; k < 3; k++) CHECK(l2[k] == 0 && tf[k] == tf[0] && walk[k] == walk[0] && fixed[k] == fixed[0]);
}

TEST(calib_fit_walk_refuses_calls_that_cannot_separate_the_terms) {
  // every call with the same walks: the fixed time and the walks' are one term
  double cells[3] = {2048, 2048, 2048}, flops[3] = {1e12, 2e12, 4e12}, secs[3] = {2e-3, 4e-3, 8e-3}, tf, w, f, l2;
  int layer[3] = {1, 1, 1};
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_walk(flops, cells, secs, layer, NULL, 3, &tf, &w, &f, &l2, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "do not separate");
  CHECK_EQ_INT(calib_fit_walk(flops, cells, secs, layer, NULL, 2, &tf, &w, &f, &l2, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "at least 3");
}

TEST(calib_layer_lengths_are_token_counts_a_multiple_of_a_tile_or_none) {
  int64_t l[CALIB_LAYER_LENGTHS];
  int n;
  sr_error e = {0};
  CHECK_EQ_INT(calib_layer_lengths_parse("16K,32K,64K", l, &n, &e), SR_OK);
  CHECK(n == 3 && l[0] == 16384 && l[1] == 32768 && l[2] == 65536);
  CHECK_EQ_INT(calib_layer_lengths_parse("none", l, &n, &e), SR_OK);
  CHECK_EQ_INT(n, 0);
  CHECK_EQ_INT(calib_layer_lengths_parse("16K,1000", l, &n, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "--layer-lengths");
  CHECK_STR_CONTAINS(e.msg, "1000: a shard length is a multiple of 128 tokens in [1K, 256K]");
  CHECK_EQ_INT(calib_layer_lengths_parse("512K", l, &n, &e), SR_EINPUT);
  CHECK_EQ_INT(calib_layer_lengths_parse("1K,2K,3K,4K,5K,6K,7K,8K,9K", l, &n, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "more than 8 lengths");
  CHECK_EQ_INT(calib_layer_lengths_parse("16K,abc", l, &n, &e), SR_EINPUT);
}

TEST(calib_attn_held_length_is_the_listed_length_nearest_32k_the_longer_on_a_tie) {
  int64_t a[] = {16384, 32768, 65536, 131072}, b[] = {65536, 131072}, c[] = {16384, 49152}, d[] = {131072, 8192};
  CHECK(calib_attn_held_length(a, 4) == 32768);
  CHECK(calib_attn_held_length(b, 2) == 65536);
  CHECK(calib_attn_held_length(c, 2) == 49152);  // both 16K from 32K
  CHECK(calib_attn_held_length(d, 2) == 8192);   // 24K from 32K against 96K
  CHECK(calib_attn_held_length(a, 0) == 0);      // --layer-lengths none: nothing to hold
}

TEST(calib_attn_sustained_is_the_short_calls_time_over_the_held_time_at_most_one) {
  // the finding it models: 30.4 ms a causal 32K layer in short calls, 33.3 ms in a training step
  CHECK_REL(calib_attn_sustained(30.4e-3, 33.3e-3), 304.0 / 333.0, 1e-12);
  CHECK_NEAR(calib_attn_sustained(30.4e-3, 30.0e-3), 1, 0);  // held faster than the burst: noise, no speed-up
  CHECK_NEAR(calib_attn_sustained(0, 33.3e-3), 0, 0);        // not measured
  CHECK_NEAR(calib_attn_sustained(30.4e-3, 0), 0, 0);
}

// A log of 3 sizes a (phase, kind) at 100 us + FLOPs at 500 TFLOP/s forward, 250 backward (as test_exec_calibrate.c's):
// the sustained PARTIAL rates are 4e12 FLOPs over 8.1 ms and 16.1 ms.
static void log_kernels(sr_buf *b) {
  const char *ph[2] = {"fwd", "bwd"}, *kind[3] = {"full", "partial", "bar"};
  sr_buf_printf(b, "measure,amount,us\n");
  for (int p = 0; p < 2; p++)
    for (int k = 0; k < 3; k++)
      for (int i = 1; i <= 4; i *= 2) {
        double flops = i * 1e12, steps;
        sr_error e = {0};
        if (p == 1 && k == 2) calib_bar_walk_shape(i, 16, 2, 128, 0, &flops, &steps, &e);
        sr_buf_printf(b, "attn_%s_%s,%.0f,%.3f\n", ph[p], kind[k], flops, 100 + flops / (p ? 250e12 : 500e12) * 1e6);
      }
}

// The layer-shaped calls of lengths 16K and 64K (counts as in the first test) and the two short walks, timed as 15 us
// + 0.06 us a walk + FULL FLOPs at 605 TFLOP/s forward, 25 us + 0.2 us + 470 backward, plus their PARTIAL tiles at the
// log's sustained PARTIAL rates (what the simulator charges them); with_128k: and the two at 128K, whose keys outgrow
// an L2 of 50 MiB (64 MiB of K and V a KV head at d 128), their FULL tiles 9% longer forward and 2% backward.
static void log_layer_calls_of(sr_buf *b, int with_128k) {
  struct {
    const char *shape;
    int tokens;
    double full, partial, cells;
  } c[8] = {{"band8", 32768, 2012.0 * 16, 0, 4096},          {"band32", 32768, 7664.0 * 16, 0, 4096},
            {"off", 16384, 128.0 * 128 * 16, 0, 2048},       {"diag", 16384, 128.0 * 127 / 2 * 16, 2048, 2048},
            {"off", 65536, 512.0 * 512 * 16, 0, 8192},       {"diag", 65536, 512.0 * 511 / 2 * 16, 8192, 8192},
            {"off", 131072, 1024.0 * 1024 * 16, 0, 16384},   {"diag", 131072, 1024.0 * 1023 / 2 * 16, 16384, 16384}};
  double tile = 4.0 * 128 * 128 * 128, partial_rate[2] = {4e12 / 8.1e-3, 4e12 / 16.1e-3};
  for (int i = 0; i < (with_128k ? 8 : 6); i++) {
    double us[2];
    for (int p = 0; p < 2; p++) {
      double ratio = p ? 2.5 : 1.0, beyond = c[i].tokens > 102400 ? (p ? 1.02 : 1.09) : 1;
      double full_us = c[i].full * tile * ratio / (p ? 470e12 : 605e12) * beyond * 1e6,
             partial_us = c[i].partial * tile * ratio / partial_rate[p] * 1e6;
      us[p] = (p ? 25 : 15) + c[i].cells * (p ? 0.2 : 0.06) + full_us + partial_us;
    }
    sr_buf_printf(b, "layer_%s,%d,%.6f,%.6f\n", c[i].shape, c[i].tokens, us[0], us[1]);
  }
}

static void log_layer_calls(sr_buf *b) { log_layer_calls_of(b, 0); }

TEST(calib_refit_from_log_takes_the_full_tiles_rate_and_the_walks_from_the_layer_shaped_calls) {
  sr_buf b = {0};
  log_kernels(&b);
  log_layer_calls(&b);
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x2", &c, &e), SR_OK);
  CHECK_EQ_INT(calib_refit_from_log("cal.csv", b.data, &c, 16, 2, 128, &e), SR_OK);
  CHECK_REL(c.gpu.eff_attn_fwd_full, 605.0 / 989, 1e-6);
  CHECK_REL(c.gpu.eff_attn_bwd_full, 470.0 / 989, 1e-6);
  CHECK_REL(c.gpu.attn_walk_us[0], 0.06, 1e-5);
  CHECK_REL(c.gpu.attn_walk_us[1], 0.2, 1e-5);
  // the other kinds keep the short calls' sustained rates
  CHECK_REL(c.gpu.eff_attn_fwd_partial, 4e12 / 8.1e-3 / 989e12, 1e-9);
  // no call's keys outgrow the L2 (the datasheet's 50 MiB of the H200 the file names): no loss beyond it
  CHECK(c.gpu.l2_mb == 50 && c.gpu.attn_l2[0] == 0 && c.gpu.attn_l2[1] == 0);
  sr_buf_free(&b);
}

// With calls at 128K in the log the refit also gives the FULL tiles' loss beyond the L2, against the L2 of the GPU the
// file names (an H200's 50 MiB from the datasheets where the file gives none), the rates and walks as before.
TEST(calib_refit_from_log_fits_the_loss_beyond_the_l2_from_calls_whose_keys_outgrow_it) {
  sr_buf b = {0};
  log_kernels(&b);
  log_layer_calls_of(&b, 1);
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x2", &c, &e), SR_OK);
  c.gpu.l2_mb = 0;
  CHECK_EQ_INT(calib_refit_from_log("cal.csv", b.data, &c, 16, 2, 128, &e), SR_OK);
  CHECK(c.gpu.l2_mb == 50);
  CHECK_REL(c.gpu.attn_l2[0], 0.09, 1e-5);
  CHECK_REL(c.gpu.attn_l2[1], 0.02, 1e-5);
  CHECK_REL(c.gpu.eff_attn_fwd_full, 605.0 / 989, 1e-6);
  CHECK_REL(c.gpu.eff_attn_bwd_full, 470.0 / 989, 1e-6);
  CHECK_REL(c.gpu.attn_walk_us[0], 0.06, 1e-4);
  sr_buf_free(&b);
}

// The whitepapers' L2 by device name; a GPU not known here has none.
TEST(calib_gpu_l2_is_the_whitepapers_cache_of_the_gpu_named) {
  CHECK(calib_gpu_l2("NVIDIA A100-SXM4-40GB") == 40);
  CHECK(calib_gpu_l2("NVIDIA H100 80GB HBM3") == 50);
  CHECK(calib_gpu_l2("NVIDIA H100 PCIe") == 50);
  CHECK(calib_gpu_l2("NVIDIA H200") == 50);
  CHECK(calib_gpu_l2("Some GPU") == 0);
}

// With layer-shaped calls the ring steps are set against the model fitted to them (their rates and walks), not the
// slopes: ring rows of that kernel time plus 30 us a step and 0.1 us a cell give those back.
TEST(calib_refit_from_log_fits_the_ring_steps_against_the_layer_calls_model) {
  sr_buf b = {0};
  log_kernels(&b);
  log_layer_calls(&b);
  cluster_desc c, model;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x2", &c, &e), SR_OK);
  model = c;
  model.gpu.eff_attn_fwd_full = 605.0 / 989, model.gpu.eff_attn_bwd_full = 470.0 / 989;
  model.gpu.eff_attn_fwd_partial = model.gpu.eff_attn_fwd_bar = 4e12 / 8.1e-3 / 989e12;
  model.gpu.eff_attn_bwd_partial = 4e12 / 16.1e-3 / 989e12;
  model.gpu.attn_walk_us[0] = 0.06, model.gpu.attn_walk_us[1] = 0.2;
  calib_ring r;
  memset(&r, 0, sizeof r);
  for (int i = 0; i < CALIB_RING_CONFIGS; i++) {
    CHECK_EQ_INT(calib_ring_config_model(&model.gpu, i, 16, 2, 128, &r, &e), SR_OK);
    double extra = r.steps[i] * 30e-6 + r.cells[i] * 0.1e-6;
    sr_buf_printf(&b, "ring_%s_w%d,%.0f,%.6f,%.6f\n", r.layout[i], r.world[i], r.cells[i], (r.kernel_s[0][i] + extra) * 1e6,
                  (r.kernel_s[1][i] + extra) * 1e6);
  }
  CHECK_EQ_INT(calib_refit_from_log("cal.csv", b.data, &c, 16, 2, 128, &e), SR_OK);
  for (int p = 0; p < 2; p++) {
    CHECK_REL(c.gpu.ring_step_us[p], 30, 1e-2);
    CHECK_REL(c.gpu.ring_cell_us[p], 0.1, 1e-2);
  }
  sr_buf_free(&b);
}

// A log from before the layer-shaped calls refits as before them: the largest call's rate, and no walks (even where the
// cluster file given had some).
TEST(calib_refit_from_log_without_layer_calls_keeps_the_rule_before_them) {
  sr_buf b = {0};
  log_kernels(&b);
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x2", &c, &e), SR_OK);
  c.gpu.attn_walk_us[0] = c.gpu.attn_walk_us[1] = 0.5;
  CHECK_EQ_INT(calib_refit_from_log("cal.csv", b.data, &c, 16, 2, 128, &e), SR_OK);
  CHECK_REL(c.gpu.eff_attn_fwd_full, 4e12 / 8.1e-3 / 989e12, 1e-9);
  CHECK(c.gpu.attn_walk_us[0] == 0 && c.gpu.attn_walk_us[1] == 0);
  sr_buf_free(&b);
}

TEST(calib_refit_from_log_names_the_line_of_a_bad_layer_call) {
  sr_buf b = {0};
  log_kernels(&b);
  sr_buf_printf(&b, "layer_band8,16384,100.0,200.0\n");
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x2", &c, &e), SR_OK);
  CHECK_EQ_INT(calib_refit_from_log("cal.csv", b.data, &c, 16, 2, 128, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "cal.csv");
  CHECK_STR_CONTAINS(e.msg, "line: 20:");
  CHECK_STR_CONTAINS(e.msg, "band8 over 16384 tokens: the short walks are on 32768");
  sr_buf_free(&b);
}

// A shard length off a tile is refused before anything is measured (exit 2, naming the flag), on any backend.
TEST(calibrate_refuses_a_layer_length_off_a_tile_before_measuring) {
  char cmd[1200], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec calibrate --backend cpu --layer-lengths 16K,1000 --out %s/cal.json",
           test_bin_dir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK(out && strstr(out, "--layer-lengths") && strstr(out, "1000: a shard length is a multiple of 128 tokens"));
  free(out);
}

// What runs between the held attention calls is one of two; anything else is refused before measuring (exit 2,
// naming the flag and the value), on any backend.
TEST(calibrate_refuses_an_unknown_attn_held_mode_before_measuring) {
  char cmd[1200], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec calibrate --backend cpu --attn-held gemms --out %s/cal-held.json",
           test_bin_dir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK(out && strstr(out, "--attn-held") && strstr(out, "'gemms': expected gemm or alone"));
  free(out);
  char path[800];
  snprintf(path, sizeof path, "%s/cal-held.json", test_tmpdir());
  CHECK(access(path, F_OK) != 0);  // nothing written
}

// scripts/gpu/calib_walk_run.sh without a GPU (CAL_LOG: a log refitted instead of a calibration run): the new
// calibration carries the layer-shaped calls' rates and walks, and the table re-predicts the folder's runs on its
// kept calibration, on the rule before (the log less its layer rows) and on the new one.
TEST(calib_walk_run_dry_run_tables_the_kept_old_and_new_calibrations_of_each_folder) {
  sr_buf b = {0};
  log_kernels(&b);
  log_layer_calls(&b);
  char log[700], cmd[3000], cal[800], *out = NULL;
  snprintf(log, sizeof log, "%s/cal.csv", test_tmpdir());
  sr_error e = {0};
  CHECK_EQ_INT(sr_write_atomic(log, b.data, b.len, &e), SR_OK);
  sr_buf_free(&b);
  snprintf(cmd, sizeof cmd,
           "CAL_LOG=%s SR_BIN=%s OUT=%s/out FOLDERS=results/train/2026-11-27-h100-vs-peer-64k-sustained-gemm "
           "CURRENT=results/train/2026-11-27-h100-vs-peer-64k-sustained-gemm bash scripts/gpu/calib_walk_run.sh",
           log, test_bin_dir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  snprintf(cal, sizeof cal, "%s/out/h100-1x1-walk.json", test_tmpdir());
  cluster_desc c;
  CHECK_EQ_INT(cluster_load(cal, &c, &e), SR_OK);
  CHECK_REL(c.gpu.eff_attn_fwd_full, 605.0 / 989, 1e-6);
  CHECK_REL(c.gpu.attn_walk_us[1], 0.2, 1e-5);
  CHECK(strstr(c.gpu.name, "H100") != NULL);  // the GPU of the file refitted onto
  const char *t = out ? strstr(out, "training steps (train --predict)") : NULL;
  CHECK(t && strstr(t, "2026-11-27-h100-vs-peer-64k-sustained-gemm") && strstr(t, "| kept") && strstr(t, "| old") &&
        strstr(t, "| new"));
  CHECK(out && !strstr(out, "failed"));
  free(out);
}

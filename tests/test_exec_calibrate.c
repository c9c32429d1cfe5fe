// test_exec_calibrate.c — the calibration's fits and tables that need no GPU: the ring-step fit separates
// a step's fixed cost from its per-cell cost, the sustained rate is the largest call's, a logged calibration
// refits to the same ring steps and to sustained efficiencies, the GPU's datasheet peaks come from its device
// name, and a links-only calibration (CPU backend) leaves the file uncalibrated and says so.
#include <stdlib.h>
#include <string.h>

#include "exec/calibrate.h"
#include "plan/cluster.h"
#include "plan/util.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"

TEST(calib_fit_ring_step_recovers_the_fixed_and_the_per_cell_cost_of_exact_points) {
  // extra = 12 us a step + 0.05 us a cell over the steps and cells of rings of 1 to 8 ranks; the totals
  // (the weights' scale) are the extras plus kernel time.
  double steps[6] = {1, 2, 4, 8, 4, 8}, cells[6] = {4096, 4096, 4096, 4096, 2048, 2560}, extra[6], total[6];
  for (int i = 0; i < 6; i++) extra[i] = steps[i] * 12e-6 + cells[i] * 0.05e-6, total[i] = extra[i] + 0.01;
  double a, b;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_ring_step(steps, cells, extra, total, 6, &a, &b, &e), SR_OK);
  CHECK_REL(a, 12.0, 1e-6);
  CHECK_REL(b, 0.05, 1e-6);
}

TEST(calib_fit_ring_step_refuses_measurements_that_cannot_separate_the_costs) {
  // cells proportional to steps: any split of the time between them fits.
  double steps[3] = {1, 2, 4}, cells[3] = {100, 200, 400}, extra[3] = {1e-5, 2e-5, 4e-5}, total[3] = {1, 1, 1}, a, b;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_ring_step(steps, cells, extra, total, 3, &a, &b, &e), SR_EINPUT);
  CHECK_EQ_INT(calib_fit_ring_step(steps, cells, extra, total, 1, &a, &b, &e), SR_EINPUT);
}

TEST(calib_sustained_rate_is_the_largest_calls_work_over_its_time_fixed_cost_included) {
  // 250 us fixed + 1 TFLOP per ms (1000 TFLOP/s slope): the largest call, 4e12 FLOPs, takes 4.25 ms, so
  // 4e12 / 4.25e-3 s = 941.2 TFLOP/s, not the slope's 1000. Order does not matter.
  double f[3] = {4e12, 1e12, 2e12}, t[3] = {4.25e-3, 1.25e-3, 2.25e-3};
  CHECK_REL(calib_sustained_rate(f, t, 3), 4e12 / 4.25e-3 / 1e12, 1e-12);
  double tf, us;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_rate(f, t, 3, &tf, &us, &e), SR_OK);
  CHECK_REL(tf, 1000, 1e-9);
  CHECK_REL(us, 250, 1e-6);
  CHECK(calib_sustained_rate(f, t, 0) == 0);
}

// A calibration log of 3 sizes a (phase, kind): slope 500 TFLOP/s (fwd) and 250 (bwd), 100 us fixed a call; the bar
// backward at the FLOPs its calls have (calib_bar_walk_shape: the refit fits the bars' walk over their chunks).
static void log_attention(sr_buf *b) {
  const char *ph[2] = {"fwd", "bwd"}, *kind[3] = {"full", "partial", "bar"};
  sr_buf_printf(b, "measure,amount,us\np2p_intra,1024,95.0\n");
  for (int p = 0; p < 2; p++)
    for (int k = 0; k < 3; k++)
      for (int i = 1; i <= 4; i *= 2) {
        double flops = i * 1e12, steps;
        sr_error e = {0};
        if (p == 1 && k == 2) calib_bar_walk_shape(i, 16, 2, 128, 0, &flops, &steps, &e);
        double us = 100 + flops / (p ? 250e12 : 500e12) * 1e6;
        sr_buf_printf(b, "attn_%s_%s,%.0f,%.3f\n", ph[p], kind[k], flops, us);
      }
}

TEST(calib_refit_from_log_takes_the_largest_calls_rate_as_every_attention_efficiency) {
  sr_buf b = {0};
  log_attention(&b);
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x2", &c, &e), SR_OK);
  double gemm = c.gpu.eff_gemm;
  CHECK_EQ_INT(calib_refit_from_log("cal.csv", b.data, &c, 16, 2, 128, &e), SR_OK);
  // fwd: 4e12 FLOPs in 100 us + 8 ms; bwd: in 100 us + 16 ms; relative to the H200's 989 TFLOP/s
  CHECK_REL(c.gpu.eff_attn_fwd_full, 4e12 / 8.1e-3 / 989e12, 1e-6);
  CHECK_REL(c.gpu.eff_attn_fwd_bar, 4e12 / 8.1e-3 / 989e12, 1e-6);
  CHECK_REL(c.gpu.eff_attn_bwd_partial, 4e12 / 16.1e-3 / 989e12, 1e-6);
  CHECK(c.gpu.eff_gemm == gemm);  // what the log does not refit stays
  sr_buf_free(&b);
}

TEST(calib_refit_from_log_fits_the_ring_steps_against_the_kernel_time_at_the_slopes) {
  // ring rows whose time is the cost model's kernel time at the slopes plus 30 us a step and 0.1 us a cell
  sr_buf b = {0};
  log_attention(&b);
  cluster_desc c, slopes;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x2", &c, &e), SR_OK);
  slopes = c;
  slopes.gpu.eff_attn_fwd_full = slopes.gpu.eff_attn_fwd_partial = slopes.gpu.eff_attn_fwd_bar = 500.0 / 989;
  slopes.gpu.eff_attn_bwd_full = slopes.gpu.eff_attn_bwd_partial = slopes.gpu.eff_attn_bwd_bar = 250.0 / 989;
  calib_ring r;
  memset(&r, 0, sizeof r);
  for (int i = 0; i < CALIB_RING_CONFIGS; i++) {
    CHECK_EQ_INT(calib_ring_config_model(&slopes.gpu, i, 16, 2, 128, &r, &e), SR_OK);
    double extra = r.steps[i] * 30e-6 + r.cells[i] * 0.1e-6;
    sr_buf_printf(&b, "ring_%s_w%d,%.0f,%.6f,%.6f\n", r.layout[i], r.world[i], r.cells[i], (r.kernel_s[0][i] + extra) * 1e6,
                  (r.kernel_s[1][i] + extra) * 1e6);
  }
  CHECK_EQ_INT(calib_refit_from_log("cal.csv", b.data, &c, 16, 2, 128, &e), SR_OK);
  for (int p = 0; p < 2; p++) {
    CHECK_REL(c.gpu.ring_step_us[p], 30, 1e-3);
    CHECK_REL(c.gpu.ring_cell_us[p], 0.1, 1e-3);
  }
  sr_buf_free(&b);
}

TEST(calib_refit_from_log_refuses_a_log_with_a_kind_timed_at_one_size) {
  const char *log = "measure,amount,us\nattn_fwd_full,1000000000000,2100.0\n";
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x2", &c, &e), SR_OK);
  CHECK_EQ_INT(calib_refit_from_log("old.csv", log, &c, 16, 2, 128, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "old.csv");
  CHECK_STR_CONTAINS(e.msg, "fwd full: 1 timed size");
}

// The calibration's bar index (calib_attn_index): query tile i holds the 256 s keys just before it. A chunk of 64
// keys lies in one key tile t (510 chunks, keys 0 .. 32639) and its keys are listed in query tiles t + 1 .. t + 2 s
// (up to the last, 255): min(2 s, 255 - t) tiles, two 64-row steps each. Per head 2 x 2 x sum over u = 1..255 of
// min(2 s, u): 4 x 509, 4 x 1014, 4 x 2012 for s = 1, 2, 4; 16 heads.
TEST(calib_bar_walk_shape_counts_the_steps_of_the_calibration_index_chunk_walks) {
  double want[3] = {16 * 4 * 509.0, 16 * 4 * 1014.0, 16 * 4 * 2012.0};
  for (int i = 0; i < 3; i++) {
    double flops, steps;
    sr_error e = {0};
    CHECK_EQ_INT(calib_bar_walk_shape(1 << i, 16, 2, 128, 0, &flops, &steps, &e), SR_OK);
    CHECK_NEAR(steps, want[i], 0);
  }
}

// Backward variant 5's CTAs (pairs): a head's 510 chunks pair up from its first, chunks 2t and 2t + 1 being key tile
// t's two halves, so each pair's lists are the same tiles t + 1 .. and its merged walk is one chunk's: min(2 s,
// 255 - t) tiles, two steps each, 255 pairs a head and no lone chunk: half of variant 4's steps, 16 x 2 x 509, 1014,
// 2012.
// Fitted on them, times of 300 us + those steps x 8.5 us / 132 (one CTA an SM) give back 8.5 us a step.
TEST(calib_bar_walk_shape_with_pairs_counts_the_merged_walks_of_a_heads_chunk_pairs) {
  double want[3] = {16 * 2 * 509.0, 16 * 2 * 1014.0, 16 * 2 * 2012.0}, flops[3], secs[3], walk;
  sr_error e = {0};
  for (int i = 0; i < 3; i++) {
    double f4, s4, steps;
    CHECK_EQ_INT(calib_bar_walk_shape(1 << i, 16, 2, 128, 1, &flops[i], &steps, &e), SR_OK);
    CHECK_NEAR(steps, want[i], 0);
    CHECK_EQ_INT(calib_bar_walk_shape(1 << i, 16, 2, 128, 0, &f4, &s4, &e), SR_OK);
    CHECK(f4 == flops[i]);  // the same call, the same FLOPs
    secs[i] = 300e-6 + steps * 8.5e-6 / 132;
  }
  CHECK_EQ_INT(calib_bar_walk_fit("cal.csv", flops, secs, 3, 16, 2, 128, "NVIDIA H200", 1, 1, &walk, &e), SR_OK);
  CHECK_REL(walk, 8.5, 1e-9);
  // the same times read as variant 4's (one CTA a chunk: twice the steps) give half the step
  CHECK_EQ_INT(calib_bar_walk_fit("cal.csv", flops, secs, 3, 16, 2, 128, "NVIDIA H200", 1, 0, &walk, &e), SR_OK);
  CHECK_REL(walk, 4.25, 1e-9);
  // pairs only on the warp-specialized kernel: with ws 0 the flag is not taken (264 resident CTAs, chunk walks)
  CHECK_EQ_INT(calib_bar_walk_fit("cal.csv", flops, secs, 3, 16, 2, 128, "NVIDIA H200", 0, 1, &walk, &e), SR_OK);
  CHECK_REL(walk, 8.5, 1e-9);
}

// 2 of the bar kernel's CTAs fit an H100's or H200's 228 KiB of shared memory (107,008 bytes of dynamic memory at
// head_dim 128, 520 static, 1 KiB reserved), one an A100's 164 KiB: 264 and 108 resident; a GPU not known, none.
TEST(calib_bar_walk_ctas_are_the_sms_times_what_fits_an_sms_shared_memory) {
  CHECK_EQ_INT(calib_bar_walk_ctas("NVIDIA H200", 128, 0), 264);
  CHECK_EQ_INT(calib_bar_walk_ctas("NVIDIA H100 80GB HBM3", 128, 0), 264);
  CHECK_EQ_INT(calib_bar_walk_ctas("NVIDIA A100-SXM4-80GB", 128, 0), 108);
  CHECK_EQ_INT(calib_bar_walk_ctas("Some Future GPU", 128, 0), 0);
  // the warp-specialized bars kernel (gpu.bar_walk_ws): one CTA an SM
  CHECK_EQ_INT(calib_bar_walk_ctas("NVIDIA H200", 128, 1), 132);
  CHECK_EQ_INT(calib_bar_walk_ctas("NVIDIA H100 80GB HBM3", 64, 1), 132);
  CHECK_EQ_INT(calib_bar_walk_ctas("Some Future GPU", 128, 1), 0);
}

// Bar backward calls timed as 300 us + their walks' steps x 8.5 us / 264 CTAs: the fit gives back 8.5 us a step.
// --predict's note where a calibrated file describes other bars' kernels than the binary runs: none where they agree
// (whole or split walk, warp-specialized or not), where the file does not say its walk or is not calibrated, or where
// the binary's walk is not known (0); else a note naming the file, both kernels and the command to rerun.
TEST(calib_bars_note_names_a_calibration_of_other_bars_kernels) {
  cluster_desc c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "h100-1x1-calibrated");
  c.calibrated = 1, c.gpu.bar_walk_parts = 16, c.gpu.bar_walk_ws = 0;
  char buf[600];
  CHECK(calib_bars_note(&c, 16, 0, 0, buf, sizeof buf) == NULL);  // variant 3 on a variant-3 calibration
  const char *n = calib_bars_note(&c, 16, 1, 0, buf, sizeof buf);  // variant 4 on it
  CHECK(n != NULL);
  if (n) {
    CHECK_STR_CONTAINS(n, "h100-1x1-calibrated");
    CHECK_STR_CONTAINS(n, "warp-specialized");
    CHECK_STR_CONTAINS(n, "split walk");
    CHECK_STR_CONTAINS(n, "calibrate");
  }
  CHECK(calib_bars_note(&c, 1, 0, 0, buf, sizeof buf) != NULL);  // the whole walk on a split-walk file
  CHECK(calib_bars_note(&c, 0, 0, 0, buf, sizeof buf) == NULL);  // the binary's walk not known
  c.gpu.bar_walk_ws = 1;
  CHECK(calib_bars_note(&c, 16, 1, 0, buf, sizeof buf) == NULL);
  CHECK(calib_bars_note(&c, 16, 0, 0, buf, sizeof buf) != NULL);
  c.gpu.bar_walk_parts = 0;  // the file does not say
  CHECK(calib_bars_note(&c, 16, 0, 0, buf, sizeof buf) == NULL);
  c.gpu.bar_walk_parts = 16, c.calibrated = 0;  // not a calibration
  CHECK(calib_bars_note(&c, 16, 0, 0, buf, sizeof buf) == NULL);
}

// Backward variant 5 (pairs of compute chunks, gpu.bar_walk_pairs) against variant 4 (ws, a chunk a CTA) either way
// round: a note naming both; none where both are variant 5, nor for a binary's pairs flag without ws.
TEST(calib_bars_note_tells_variant_5s_pairs_from_variant_4) {
  cluster_desc c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "h200-1x1-calibrated");
  c.calibrated = 1, c.gpu.bar_walk_parts = 16, c.gpu.bar_walk_ws = 1;
  char buf[600];
  CHECK(calib_bars_note(&c, 16, 1, 0, buf, sizeof buf) == NULL);  // variant 4 on a variant-4 calibration
  const char *n = calib_bars_note(&c, 16, 1, 1, buf, sizeof buf);  // SR_BWD_VARIANT=5 on it
  CHECK(n != NULL);
  if (n) {
    CHECK_STR_CONTAINS(n, "h200-1x1-calibrated");
    CHECK_STR_CONTAINS(n, "variant 4)");
    CHECK_STR_CONTAINS(n, "pairs of compute chunks (backward variant 5)");
    CHECK_STR_CONTAINS(n, "calibrate");
  }
  c.gpu.bar_walk_pairs = 1;
  CHECK(calib_bars_note(&c, 16, 1, 1, buf, sizeof buf) == NULL);  // variant 5 on a variant-5 calibration
  n = calib_bars_note(&c, 16, 1, 0, buf, sizeof buf);              // variant 4 on it
  CHECK(n != NULL);
  if (n) CHECK_STR_CONTAINS(n, "describes the bars' backward on the warp-specialized kernel in pairs");
  CHECK(calib_bars_note(&c, 16, 0, 1, buf, sizeof buf) != NULL);  // variant 3 on it
  c.gpu.bar_walk_pairs = 0, c.gpu.bar_walk_ws = 0;
  CHECK(calib_bars_note(&c, 16, 0, 1, buf, sizeof buf) == NULL);  // pairs without ws: variant 3 either way
}

TEST(calib_bar_walk_fit_recovers_a_ctas_time_a_step_from_the_calls_times) {
  double flops[3], secs[3], walk;
  sr_error e = {0};
  for (int i = 0; i < 3; i++) {
    double steps;
    CHECK_EQ_INT(calib_bar_walk_shape(1 << i, 16, 2, 128, 0, &flops[i], &steps, &e), SR_OK);
    secs[i] = 300e-6 + steps * 8.5e-6 / 264;
  }
  CHECK_EQ_INT(calib_bar_walk_fit("cal.csv", flops, secs, 3, 16, 2, 128, "NVIDIA H200", 0, 0, &walk, &e), SR_OK);
  CHECK_REL(walk, 8.5, 1e-9);
  CHECK_EQ_INT(calib_bar_walk_fit("cal.csv", flops, secs, 3, 16, 2, 128, "Some Future GPU", 0, 0, &walk, &e), SR_OK);
  CHECK(walk == 0);  // not modelled
  flops[1] = 1e12;  // no size of the calibration's index
  CHECK_EQ_INT(calib_bar_walk_fit("cal.csv", flops, secs, 3, 16, 2, 128, "NVIDIA H200", 0, 0, &walk, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "cal.csv");
}

TEST(calib_refit_from_log_writes_the_bars_walk_of_the_logged_bar_backward) {
  // the log's bar backward: 100 us + its FLOPs at 250 TFLOP/s (log_attention); the walk is that slope over the steps
  sr_buf b = {0};
  log_attention(&b);
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x2", &c, &e), SR_OK);
  CHECK_EQ_INT(calib_refit_from_log("cal.csv", b.data, &c, 16, 2, 128, &e), SR_OK);
  double f1, s1, f4, s4;
  CHECK_EQ_INT(calib_bar_walk_shape(1, 16, 2, 128, 0, &f1, &s1, &e), SR_OK);
  CHECK_EQ_INT(calib_bar_walk_shape(4, 16, 2, 128, 0, &f4, &s4, &e), SR_OK);
  // the sizes' FLOPs and steps are nearly, not exactly, proportional (the first query tiles hold fewer keys): the
  // least-squares slope over three points is within a percent of the first and last points' one
  CHECK_REL(c.gpu.bar_walk_us, (f4 - f1) / 250e12 / (s4 - s1) * 264 * 1e6, 1e-2);
  sr_buf_free(&b);
}

TEST(calib_gpu_peaks_come_from_the_datasheets_by_device_name) {
  double p, f;
  calib_gpu_peaks("NVIDIA H100 80GB HBM3", &p, &f);
  CHECK(p == 989 && f == 34);
  calib_gpu_peaks("NVIDIA H100 PCIe", &p, &f);
  CHECK(p == 756 && f == 26);
  calib_gpu_peaks("NVIDIA H200", &p, &f);
  CHECK(p == 989 && f == 34);
  calib_gpu_peaks("NVIDIA H800", &p, &f);
  CHECK(p == 989 && f == 1);
  calib_gpu_peaks("NVIDIA A100-SXM4-80GB", &p, &f);
  CHECK(p == 312 && f == 9.7);
  calib_gpu_peaks("Some Future GPU", &p, &f);
  CHECK(p == 0 && f == 0);
}

TEST(calibrate_on_the_cpu_backend_writes_links_and_leaves_the_efficiencies_uncalibrated) {
  char out[700], cmd[2000], *text = NULL;
  snprintf(out, sizeof out, "%s/cal.json", test_tmpdir());
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun -np 2 %s/sparsering-exec calibrate --backend cpu --cluster %s --reps 2 --out %s",
           test_bin_dir(), mpi_cpu_cluster(1, 2), out);
  CHECK_EQ_INT(test_run(cmd, &text), 0);
  free(text);
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load(out, &c, &e), SR_OK);
  CHECK_EQ_INT(c.calibrated, 0);
  CHECK(strstr(c.calibration, "links measured by sparsering-exec calibrate") != NULL);
}

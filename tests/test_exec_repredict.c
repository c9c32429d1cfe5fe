// test_exec_repredict.c — `sparsering-exec repredict`: the runs a results folder's manifest lists are
// predicted again from their logs' summary lines on their calibrated clusters, exactly as `predict` does
// for the same plan; errors are (predicted - measured) / measured; runs it cannot predict are named.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/repredict.h"
#include "plan/util.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"

static void write_file(const char *path, const char *text) {
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
}

// A run folder DIR/NAME with its logs/ and cal.json: a one-host calibration of 2 H200s.
static void run_folder(const char *name, char *path, size_t n) {
  char cmd[1024];
  snprintf(path, n, "%s/%s", test_tmpdir(), name);
  snprintf(cmd, sizeof cmd, "mkdir -p %s/logs", path);
  CHECK_EQ_INT(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s/cal.json", path);
  write_file(cmd, "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"H200\", \"peak_tflops\": 989, \"hbm_gbps\": 4800,"
             " \"mem_gib\": 140, \"efficiency\": {\"attn_fwd_full\": 0.4, \"attn_fwd_partial\": 0.2, \"attn_bwd_full\": 0.2,"
             " \"attn_bwd_partial\": 0.1}}, \"intra_node\": {\"gbps\": 350, \"latency_us\": 80},"
             " \"host\": {\"pcie_gbps\": 50, \"mem_gib\": 256}, \"calibration\": {\"measured\": true, \"source\": \"test\"}}");
}

// The predicted forward and backward ms of `predict`'s output: 1 when found.
static int predicted_ms(const char *out, double *fwd, double *bwd) {
  const char *at = out ? strstr(out, ") fwd ") : NULL;
  return at && sscanf(at, ") fwd %lf ms bwd %lf ms", fwd, bwd) == 2;
}

TEST(repredict_predicts_each_listed_run_as_predict_does_and_names_what_it_cannot) {
  const char *dir = test_tmpdir();
  char path[800], cmd[2400], *out = NULL, *pred = NULL;
  // A one-host calibration of 2 GPUs; the logs: a dense zigzag ring on 2 ranks measured at 2 + 5 ms, and a
  // vs-online run whose estimated pattern was not kept.
  run_folder("run", path, sizeof path);
  snprintf(cmd, sizeof cmd, "%s/logs/a_zigzag.log", path);
  write_file(cmd, "  layer 0: fwd 2.000 ms, bwd 5.000 ms\n"
                  "attn zigzag | ring | dense: 2 ranks, qwen2.5-0.5b, seq 16384, 1 layer(s): fwd 2.000 ms bwd 5.000 ms per layer; sent 0 B\n");
  snprintf(cmd, sizeof cmd, "%s/logs/b_online.log", path);
  write_file(cmd, "attn striped | double-ring | vs-online:0.95: 2 ranks, qwen2.5-0.5b, seq 16384, 1 layer(s): fwd 1.000 ms bwd "
                  "2.000 ms per layer; sent 0 B\n");
  snprintf(cmd, sizeof cmd, "%s/repredict.tsv", path);
  write_file(cmd, "# test\nlogs/*.log\tcal.json\t--skip-empty-sends\n");
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec repredict --root %s --csv %s/t.csv", test_bin_dir(), dir, dir);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "run/logs/a_zigzag.log");
  CHECK_STR_CONTAINS(out, "error over 1 runs");
  CHECK_STR_CONTAINS(out, "run/logs/b_online.log: trace: vs-online: no trace of the estimated pattern kept");
  // The same plan through `predict` on the same cluster gives the row's predicted times.
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict --model qwen2.5-0.5b --cluster %s/cal.json --seq 16384 --layout zigzag "
           "--schedule ring --pattern dense --skip-empty-sends", test_bin_dir(), path);
  CHECK_EQ_INT(test_run(cmd, &pred), 0);
  double pf = 0, pb = 0;
  CHECK(predicted_ms(pred, &pf, &pb));
  char *csv = NULL;
  sr_error e;
  snprintf(cmd, sizeof cmd, "%s/t.csv", dir);
  CHECK_EQ_INT(sr_read_file(cmd, &csv, NULL, &e), SR_OK);
  const char *row = csv ? strstr(csv, "run/logs/a_zigzag.log,") : NULL;
  double mf = 0, mb = 0, cf = 0, cb = 0, ef = 0;
  CHECK(row && sscanf(strchr(row, ',') + 1, "%*d,%*d,%*[^,],%*[^,],%*[^,],%lf,%lf,%lf,%lf,%lf", &mf, &mb, &cf, &cb, &ef) == 5);
  CHECK_NEAR(mf, 2.0, 1e-9);
  CHECK_NEAR(mb, 5.0, 1e-9);
  CHECK_NEAR(cf, pf, 1e-3);
  CHECK_NEAR(cb, pb, 1e-3);
  CHECK_NEAR(ef, (cf - 2.0) / 2.0, 3e-4);  // the CSV rounds times to 3 decimals (2.5e-4 here) and errors to 4
  free(csv);
  free(out);
  free(pred);
}

// A run of several layers (attn --layers L) measured the mean layer; a synthetic pattern draws each layer afresh, so
// repredict predicts each of the L layers as `predict --layer l` does and takes their mean; --layers FILE lists each
// layer's prediction beside the log's line for that layer.
TEST(repredict_predicts_a_run_of_several_layers_as_the_mean_of_its_layers) {
  const char *dir = test_tmpdir();
  char path[800], cmd[2400], *out = NULL, *pred[2] = {NULL, NULL};
  run_folder("run3", path, sizeof path);
  snprintf(cmd, sizeof cmd, "%s/logs/c_topp.log", path);
  write_file(cmd, "  layer 0: fwd 0.800 ms, bwd 1.500 ms; attention kernels (busiest rank) 2.000 ms\n"
                  "  layer 1: fwd 1.200 ms, bwd 2.500 ms; attention kernels (busiest rank) 3.000 ms\n"
                  "attn striped:128 | double-ring | vs-topp:0.95: 2 ranks, qwen2.5-0.5b, seq 16384, 2 layer(s): fwd 1.000 ms "
                  "bwd 2.000 ms per layer; sent 0 B\n");
  snprintf(cmd, sizeof cmd, "%s/repredict.tsv", path);
  write_file(cmd, "logs/*.log\tcal.json\t\n");
  char root[900];
  snprintf(root, sizeof root, "%s/r3", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p %s && mv %s %s/", root, path, root);
  CHECK_EQ_INT(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec repredict --root %s --csv %s/t3.csv --layers %s/l3.csv", test_bin_dir(), root,
           dir, dir);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  double pf[2] = {0, 0}, pb[2] = {0, 0};
  for (int l = 0; l < 2; l++) {
    snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict --model qwen2.5-0.5b --cluster %s/run3/cal.json --seq 16384 "
             "--layout striped:128 --schedule double-ring --pattern vs-topp:0.95 --layer %d", test_bin_dir(), root, l);
    CHECK_EQ_INT(test_run(cmd, &pred[l]), 0);
    CHECK(predicted_ms(pred[l], &pf[l], &pb[l]));
  }
  CHECK(fabs(pf[0] - pf[1]) > 1e-3 || fabs(pb[0] - pb[1]) > 1e-3);  // the two layers' patterns differ
  char *csv = NULL;
  sr_error e;
  snprintf(cmd, sizeof cmd, "%s/t3.csv", dir);
  CHECK_EQ_INT(sr_read_file(cmd, &csv, NULL, &e), SR_OK);
  const char *row = csv ? strstr(csv, "run3/logs/c_topp.log,") : NULL;
  double mf = 0, mb = 0, cf = 0, cb = 0;
  CHECK(row && sscanf(strchr(row, ',') + 1, "%*d,%*d,%*[^,],%*[^,],%*[^,],%lf,%lf,%lf,%lf", &mf, &mb, &cf, &cb) == 4);
  CHECK_NEAR(cf, (pf[0] + pf[1]) / 2, 2e-3);
  CHECK_NEAR(cb, (pb[0] + pb[1]) / 2, 2e-3);
  free(csv);
  // --layers: each layer's prediction (predict --layer l's) beside the log's own line for that layer.
  const double mfl[2] = {0.8, 1.2}, mbl[2] = {1.5, 2.5};
  snprintf(cmd, sizeof cmd, "%s/l3.csv", dir);
  CHECK_EQ_INT(sr_read_file(cmd, &csv, NULL, &e), SR_OK);
  CHECK_STR_CONTAINS(csv, "run,layer,fwd_ms,bwd_ms,pred_fwd_ms,pred_bwd_ms,err_fwd,err_bwd\n");
  for (int l = 0; l < 2; l++) {
    char key[64];
    snprintf(key, sizeof key, "run3/logs/c_topp.log,%d,", l);
    const char *lr = csv ? strstr(csv, key) : NULL;
    double a = 0, b = 0, c = 0, d = 0, x = 0;
    CHECK(lr && sscanf(lr + strlen(key), "%lf,%lf,%lf,%lf,%lf", &a, &b, &c, &d, &x) == 5);
    CHECK_NEAR(a, mfl[l], 1e-9);
    CHECK_NEAR(b, mbl[l], 1e-9);
    CHECK_NEAR(c, pf[l], 1e-3);
    CHECK_NEAR(d, pb[l], 1e-3);
    CHECK_NEAR(x, (c - mfl[l]) / mfl[l], 1e-3);  // c is rounded to 3 decimals
  }
  CHECK(!strstr(csv, "run3/logs/c_topp.log,2,"));
  free(csv);
  free(out);
  free(pred[0]);
  free(pred[1]);
}

// A `train --predict` log listed in a manifest is a training step: repredict simulates it as the trainer's
// --predict did, so the simulated step of its row is the one the trainer printed. Slow GPU figures (0.01
// TFLOP/s, 0.5 GB/s) make tiny-test's step seconds long, so the 3 printed decimals compare closely.
// A "slow" one-host calibration of 2 GPUs at PATH/cal.json: simulated training steps of a tiny model take long enough
// to compare to the millisecond.
static void slow_cluster(const char *path) {
  char cmd[900];
  snprintf(cmd, sizeof cmd, "%s/cal.json", path);
  write_file(cmd, "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"slow\", \"peak_tflops\": 0.01,"
                  " \"fp64_tflops\": 34, \"hbm_gbps\": 0.5, \"mem_gib\": 140, \"efficiency\": {\"gemm\": 0.8,"
                  " \"attn_fwd_full\": 0.4, \"attn_fwd_partial\": 0.2, \"attn_fwd_bar\": 0.1, \"attn_bwd_full\": 0.2, \"attn_bwd_partial\": 0.1, \"attn_bwd_bar\": 0.05}},"
                  " \"intra_node\": {\"gbps\": 350, \"latency_us\": 80}, \"host\": {\"pcie_gbps\": 50, \"mem_gib\": 256},"
                  " \"calibration\": {\"measured\": true, \"source\": \"test\"}}");
}

// `repredict` over PATH with one manifest line for PATH/logs/*.log on PATH/cal.json and FLAGS; its output (free it).
// want_rc >= 0: the exit status it must have.
static char *repredict_with(const char *path, const char *flags, int want_rc) {
  char cmd[1200], *out = NULL, line[400];
  snprintf(cmd, sizeof cmd, "%s/repredict.tsv", path);
  snprintf(line, sizeof line, "logs/*.log\tcal.json\t%s\n", flags);
  write_file(cmd, line);
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec repredict --root %s", test_bin_dir(), path);
  int rc = test_run(cmd, &out);
  if (want_rc >= 0) CHECK_EQ_INT(rc, want_rc);
  return out;
}

// repredict's output simulates logs/t.log's training step as the trainer's own --predict did (`trainer` seconds).
static void check_step_as_trainer(const char *out, double trainer) {
  CHECK_STR_CONTAINS(out, "error over 1 training steps");
  const char *row = out ? strstr(out, "logs/t.log ") : NULL, *bar = row ? strchr(row, '|') : NULL;
  double sim = 0;
  CHECK(bar && sscanf(bar, "| %lf", &sim) == 1);
  CHECK_NEAR(sim, trainer, 1.5e-3);
}

TEST(repredict_simulates_a_logged_training_step_as_train_predict_did) {
  const char *dir = test_tmpdir();
  char path[800], cmd[2400], *log = NULL, *out = NULL;
  snprintf(path, sizeof path, "%s/trun", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p %s/logs", path);
  CHECK_EQ_INT(system(cmd), 0);
  slow_cluster(path);
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun -np 2 %s/sparsering-exec train --model tiny-test --cluster %s/cal.json --strategy "
           "mtraining --pattern vs-topp:0.95 --seq 2048 --steps 2 --predict > %s/logs/t.log 2>&1", test_bin_dir(), path, path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(cmd, sizeof cmd, "%s/logs/t.log", path);
  sr_error e;
  CHECK_EQ_INT(sr_read_file(cmd, &log, NULL, &e), SR_OK);
  const char *at = log ? strstr(log, "simulated step ") : NULL;
  double trainer = 0;
  CHECK(at && sscanf(at, "simulated step %lfs", &trainer) == 1 && trainer > 1);
  out = repredict_with(path, "", 0);
  check_step_as_trainer(out, trainer);
  free(log);
  free(out);
}

// A run of one step (train --steps 1, as the 512K runs are) has no step after the first: its measured step is the
// first, so its split is the first step's too rather than none.
TEST(repredict_splits_a_one_step_training_log_by_its_only_step) {
  const char *log =
      "train: qwen2.5-3b, 3085938688 params, seq 524288 on 1 rank(s) (striped layout, double-ring schedule, pattern "
      "vs-topp:0.95, density 0.0763)\n"
      "step     1 | loss 12.1998 |      6235 tok/s | MFU 24.68% | density 0.0763 | attn 62.104s gemm 21.986s comm "
      "0.003s | plan-wait 0.000s (0) | lr 3.00e-05 | gnorm 468.082\n"
      "predict: qwen2.5-3b mtraining seq 524288 W 1 | simulated step 99.931s 5246 tok/s MFU 20.77% | measured step "
      "84.093s (best after the first; first 84.093s) 6235 tok/s MFU 24.68% | measured/simulated 0.84\n";
  train_rerun r;
  memset(&r, 0, sizeof r);
  CHECK_EQ_INT(repredict_parse_train_log(log, &r), 0);
  CHECK_NEAR(r.step_s, 84.093, 1e-9);
  CHECK_NEAR(r.attn_s, 62.104, 1e-9);
  CHECK_NEAR(r.rest_s, 21.986, 1e-9);
  CHECK_NEAR(r.comm_s, 0.003, 1e-9);
}

// A longer run's split is the mean of the steps after the first (the first's plan uploads and warm-up left out).
TEST(repredict_splits_a_training_log_by_the_mean_of_the_steps_after_the_first) {
  const char *log =
      "train: tiny-test, 1 params, seq 2048 on 1 rank(s) (contiguous layout, ring schedule, pattern dense, density 1)\n"
      "step     1 | loss 1 | attn 9.000s gemm 9.000s comm 9.000s | lr 0\n"
      "step     2 | loss 1 | attn 1.000s gemm 2.000s comm 0.500s | lr 0\n"
      "step     3 | loss 1 | attn 3.000s gemm 4.000s comm 0.100s | lr 0\n"
      "predict: tiny-test dense-ring seq 2048 W 1 | simulated step 5.000s | measured step 5.100s (best after the first; "
      "first 27.000s)\n";
  train_rerun r;
  memset(&r, 0, sizeof r);
  CHECK_EQ_INT(repredict_parse_train_log(log, &r), 0);
  CHECK_NEAR(r.attn_s, 2.0, 1e-12);
  CHECK_NEAR(r.rest_s, 3.0, 1e-12);
  CHECK_NEAR(r.comm_s, 0.3, 1e-12);
}

// A training step repredicted on a cluster that measured the rate its attention holds (gpu.efficiency.attn_sustained)
// spends 1 / ratio as long on its attention calls' tiles as on the same file without it; a ratio of 1, the same bits.
static void repredict_dense_step(const char *efficiency, double *attn, double *step) {
  char path[800];
  snprintf(path, sizeof path, "%s/held.json", test_tmpdir());
  char text[1024];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"H100\", \"peak_tflops\": 989, \"hbm_gbps\": 3350,"
           " \"mem_gib\": 80, \"efficiency\": {\"gemm\": 0.8, \"attn_fwd_full\": 0.6, \"attn_fwd_partial\": 0.3,"
           " \"attn_bwd_full\": 0.5, \"attn_bwd_partial\": 0.25%s}}, \"intra_node\": {\"gbps\": 350, \"latency_us\": 80},"
           " \"host\": {\"pcie_gbps\": 50, \"mem_gib\": 256}, \"calibration\": {\"measured\": true, \"source\": \"test\"}}",
           efficiency);
  write_file(path, text);
  const char *log =
      "train: qwen2.5-0.5b, 1 params, seq 32768 on 1 rank(s) (contiguous layout, ring schedule, pattern dense, density 1)\n"
      "step     2 | loss 1 | attn 1.000s gemm 1.000s comm 0.000s | lr 0\n"
      "predict: qwen2.5-0.5b dense-ring seq 32768 W 1 | simulated step 2.000s | measured step 2.000s (best after the "
      "first; first 3.000s)\n";
  train_rerun r;
  memset(&r, 0, sizeof r);
  CHECK_EQ_INT(repredict_parse_train_log(log, &r), 0);
  sr_error e = {0};
  CHECK_EQ_INT(repredict_train_run(path, "", &r, &e), SR_OK);
  *attn = r.pattn_s, *step = r.pstep_s;
}

TEST(repredict_a_training_steps_attention_takes_the_clusters_held_attention_rate) {
  double a0, s0, a8, s8, a5, s5, an, sn, ad, sd;
  repredict_dense_step(", \"attn_sustained\": 1", &a0, &s0);  // the short calls' rates
  repredict_dense_step(", \"attn_sustained\": 0.8", &a8, &s8);
  repredict_dense_step(", \"attn_sustained\": 0.5", &a5, &s5);
  repredict_dense_step("", &an, &sn);
  repredict_dense_step(", \"attn_sustained\": 0.91", &ad, &sd);
  CHECK(a0 > 0);
  // the calls' tiles T stretch to T / f, their memory-bound copies do not (test_sim_attn_held.c): T = a(0.5) - a0
  CHECK(a5 - a0 > 0.9 * a0);
  CHECK_REL(a8 - a0, 0.25 * (a5 - a0), 1e-9);
  CHECK(s8 > s0);
  // a file without the ratio (and without a held GEMM rate) takes COST_ATTN_SUSTAINED, 0.91 (sim/cost.h)
  CHECK(an == ad && sn == sd);
}

// A manifest's --bars-walk names the bar kernel of the run's binary: the plan's cluster takes 1 (whole) or 16 (split,
// ws) parts, ws the warp-specialized kernel; without it the file's own stays; another value is an input error naming the flag.
TEST(repredict_bars_walk_sets_the_clusters_bar_walk_parts_from_the_manifests_flag) {
  cluster_desc c;
  memset(&c, 0, sizeof c);
  sr_error e = {0};
  CHECK_EQ_INT(repredict_bars_walk("--skip-empty-sends --bars-walk whole", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_parts, 1);
  CHECK_EQ_INT(repredict_bars_walk("--bars-walk ws --fwd-runs", &c, &e), SR_OK);  // the warp-specialized bars kernel
  CHECK_EQ_INT(c.gpu.bar_walk_parts, 16);
  CHECK_EQ_INT(c.gpu.bar_walk_ws, 1);
  CHECK_EQ_INT(repredict_bars_walk("--bars-walk split --fwd-runs", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_parts, 16);
  CHECK_EQ_INT(c.gpu.bar_walk_ws, 0);
  c.gpu.bar_walk_parts = 7;
  CHECK_EQ_INT(repredict_bars_walk("--skip-empty-sends", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_parts, 7);
  CHECK_EQ_INT(repredict_bars_walk("--bars-walk wholly", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "--bars-walk");
  CHECK_STR_CONTAINS(e.msg, "wholly");
}

// --bars-walk pair: backward variant 5's pairs of compute chunks on the warp-specialized kernel (16 parts, ws, pairs);
// every other value clears pairs, so a manifest line of variant 4 after one of variant 5 is variant 4's again; a value
// that merely starts like it is an input error naming the flag and the value.
TEST(repredict_bars_walk_pair_names_backward_variant_5s_pairs_of_chunks) {
  cluster_desc c;
  memset(&c, 0, sizeof c);
  sr_error e = {0};
  CHECK_EQ_INT(repredict_bars_walk("--skip-empty-sends --bars-walk pair --fwd-runs", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_parts, 16);
  CHECK_EQ_INT(c.gpu.bar_walk_ws, 1);
  CHECK_EQ_INT(c.gpu.bar_walk_pairs, 1);
  CHECK_EQ_INT(repredict_bars_walk("--bars-walk=pair", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_pairs, 1);
  CHECK_EQ_INT(repredict_bars_walk("--bars-walk ws", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_ws, 1);
  CHECK_EQ_INT(c.gpu.bar_walk_pairs, 0);
  c.gpu.bar_walk_pairs = 1;
  CHECK_EQ_INT(repredict_bars_walk("--bars-walk split", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_pairs, 0);
  c.gpu.bar_walk_pairs = 1;
  CHECK_EQ_INT(repredict_bars_walk("--fwd-runs", &c, &e), SR_OK);  // no flag: the file's own stays
  CHECK_EQ_INT(c.gpu.bar_walk_pairs, 1);
  const char *bad[] = {"--bars-walk pairs", "--bars-walk pai", "--bars-walk PAIR", "--bars-walk"};
  for (int i = 0; i < 4; i++) {
    CHECK_EQ_INT(repredict_bars_walk(bad[i], &c, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "--bars-walk");
    CHECK_STR_CONTAINS(e.msg, "pair");
  }
}

// The run folder's cal.json (run_folder) as a short-call calibration, and a layer-shaped one of the same GPU beside it
// (lay.json: its FULL rates, walks, L2 step and ring step differ from cal.json's; its partial rates too, which stay
// cal.json's), a layer-shaped file of another GPU (other.json) and a short-call one (short.json).
static void full_from_files(const char *path) {
  char f[900];
  snprintf(f, sizeof f, "%s/lay.json", path);
  write_file(f, "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"H200\", \"peak_tflops\": 989, \"hbm_gbps\": 4800,"
             " \"mem_gib\": 140, \"efficiency\": {\"attn_fwd_full\": 0.6, \"attn_fwd_partial\": 0.3, \"attn_bwd_full\": 0.5,"
             " \"attn_bwd_partial\": 0.25}, \"ring_step\": {\"fwd_us\": 30, \"bwd_us\": 190, \"fwd_cell_us\": 0.01,"
             " \"bwd_cell_us\": 0.02}, \"attn_walk\": {\"fwd_us\": 0.05, \"bwd_us\": 0.01}, \"l2_mb\": 60,"
             " \"attn_l2\": {\"fwd\": 0.08, \"bwd\": 0.03}}, \"intra_node\": {\"gbps\": 400, \"latency_us\": 20},"
             " \"host\": {\"pcie_gbps\": 50, \"mem_gib\": 256}, \"calibration\": {\"measured\": true, \"source\": \"layer\"}}");
  snprintf(f, sizeof f, "%s/other.json", path);
  write_file(f, "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"H100\", \"peak_tflops\": 989, \"hbm_gbps\": 3350,"
             " \"mem_gib\": 80, \"efficiency\": {\"attn_fwd_full\": 0.6, \"attn_bwd_full\": 0.5},"
             " \"attn_walk\": {\"fwd_us\": 0.05, \"bwd_us\": 0}}, \"intra_node\": {\"gbps\": 400, \"latency_us\": 20},"
             " \"host\": {\"pcie_gbps\": 50, \"mem_gib\": 256}, \"calibration\": {\"measured\": true, \"source\": \"h100\"}}");
  snprintf(f, sizeof f, "%s/short.json", path);
  write_file(f, "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"H200\", \"peak_tflops\": 989, \"hbm_gbps\": 4800,"
             " \"mem_gib\": 140, \"efficiency\": {\"attn_fwd_full\": 0.6, \"attn_bwd_full\": 0.5}},"
             " \"intra_node\": {\"gbps\": 400, \"latency_us\": 20}, \"host\": {\"pcie_gbps\": 50, \"mem_gib\": 256},"
             " \"calibration\": {\"measured\": true, \"source\": \"short\"}}");
}

// --full-from FILE: a calibration made before calibrate timed layer-shaped calls takes the FULL tiles' figures (both
// phases' FULL efficiencies, walks, L2 step, ring step) of a layer-shaped calibration of the same GPU; everything else
// stays its own; without the flag nothing changes; FILE not layer-shaped, of another GPU or unreadable, or the run's
// own calibration layer-shaped already, is an input error naming the file and field.
TEST(repredict_full_from_takes_the_full_tiles_figures_of_a_layer_shaped_calibration) {
  char path[800], cal[900];
  run_folder("fullfrom", path, sizeof path);
  full_from_files(path);
  snprintf(cal, sizeof cal, "%s/cal.json", path);
  cluster_desc c, c0;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load(cal, &c0, &e), SR_OK);
  c = c0;
  CHECK_EQ_INT(repredict_full_from(path, "--skip-empty-sends --bars-walk split", &c, &e), SR_OK);
  CHECK(!memcmp(&c, &c0, sizeof c));  // no flag: the same bits
  CHECK_EQ_INT(repredict_full_from(path, "--skip-empty-sends --full-from lay.json --bars-walk split", &c, &e), SR_OK);
  CHECK_NEAR(c.gpu.eff_attn_fwd_full, 0.6, 1e-12);
  CHECK_NEAR(c.gpu.eff_attn_bwd_full, 0.5, 1e-12);
  CHECK_NEAR(c.gpu.attn_walk_us[0], 0.05, 1e-12);
  CHECK_NEAR(c.gpu.attn_walk_us[1], 0.01, 1e-12);
  CHECK_NEAR(c.gpu.l2_mb, 60, 1e-12);
  CHECK_NEAR(c.gpu.attn_l2[0], 0.08, 1e-12);
  CHECK_NEAR(c.gpu.attn_l2[1], 0.03, 1e-12);
  CHECK_NEAR(c.gpu.ring_step_us[0], 30, 1e-12);
  CHECK_NEAR(c.gpu.ring_step_us[1], 190, 1e-12);
  CHECK_NEAR(c.gpu.ring_cell_us[0], 0.01, 1e-12);
  CHECK_NEAR(c.gpu.ring_cell_us[1], 0.02, 1e-12);
  CHECK_NEAR(c.gpu.eff_attn_fwd_partial, c0.gpu.eff_attn_fwd_partial, 1e-12);  // the partial tiles stay the call's
  CHECK_NEAR(c.gpu.eff_attn_bwd_partial, c0.gpu.eff_attn_bwd_partial, 1e-12);
  CHECK_NEAR(c.intra.gbps, c0.intra.gbps, 1e-12);  // and its links
  CHECK_STR_CONTAINS(c.calibration, "FULL tiles from layer");
  // the same file again: the run's calibration is layer-shaped now
  CHECK_EQ_INT(repredict_full_from(path, "--full-from lay.json", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gpu.attn_walk");
  const char *bad[][2] = {{"--full-from short.json", "gpu.attn_walk"},
                          {"--full-from other.json", "gpu.name"},
                          {"--full-from none.json", "none.json"},
                          {"--full-from", "--full-from"}};
  for (int i = 0; i < 4; i++) {
    c = c0;
    CHECK_EQ_INT(repredict_full_from(path, bad[i][0], &c, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, bad[i][1]);
  }
}

// A manifest line with --full-from predicts its runs as `predict` does on the calibration with those figures: here a
// dense zigzag ring on the run folder's cal.json with lay.json's FULL figures (written out by hand as merged.json).
// The folder at path (a run folder with cal.json, merged.json and a manifest) moved under test_tmpdir()/ROOT and
// re-predicted: its one run's prediction (repredict's --csv) must be what `predict PREDICT_ARGS` gives on merged.json
// (the manifest's flags applied to cal.json by hand), and differ from predict's on cal.json alone (the backward at
// least; the forward too with fwd_changes).
static void repredict_as_merged(const char *path, const char *folder, const char *root_name, const char *log_rel,
                                const char *predict_args, int fwd_changes) {
  const char *dir = test_tmpdir();
  char cmd[2400], root[900], *out = NULL, *pred = NULL, *base = NULL, *csv = NULL;
  snprintf(root, sizeof root, "%s/%s", dir, root_name);
  snprintf(cmd, sizeof cmd, "mkdir -p %s && mv %s %s/", root, path, root);
  CHECK_EQ_INT(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec repredict --root %s --csv %s/%s.csv", test_bin_dir(), root, dir, root_name);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "error over 1 runs");
  double pf = 0, pb = 0, bf = 0, bb = 0;
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict --model qwen2.5-0.5b --cluster %s/%s/merged.json --seq 65536 %s",
           test_bin_dir(), root, folder, predict_args);
  CHECK_EQ_INT(test_run(cmd, &pred), 0);
  CHECK(predicted_ms(pred, &pf, &pb));
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict --model qwen2.5-0.5b --cluster %s/%s/cal.json --seq 65536 %s",
           test_bin_dir(), root, folder, predict_args);
  CHECK_EQ_INT(test_run(cmd, &base), 0);
  CHECK(predicted_ms(base, &bf, &bb));
  CHECK(fabs(pb - bb) > 1e-2);  // the figures taken change the prediction
  if (fwd_changes) CHECK(fabs(pf - bf) > 1e-2);
  sr_error e;
  snprintf(cmd, sizeof cmd, "%s/%s.csv", dir, root_name);
  CHECK_EQ_INT(sr_read_file(cmd, &csv, NULL, &e), SR_OK);
  char key[300];
  snprintf(key, sizeof key, "%s/%s,", folder, log_rel);
  const char *row = csv ? strstr(csv, key) : NULL;
  double mf = 0, mb = 0, cf = 0, cb = 0;
  CHECK(row && sscanf(strchr(row, ',') + 1, "%*d,%*d,%*[^,],%*[^,],%*[^,],%lf,%lf,%lf,%lf", &mf, &mb, &cf, &cb) == 4);
  CHECK_NEAR(cf, pf, 1e-3);
  CHECK_NEAR(cb, pb, 1e-3);
  free(csv);
  free(out);
  free(pred);
  free(base);
}

TEST(repredict_full_from_predicts_as_predict_on_the_merged_calibration) {
  char path[800], cmd[2400];
  run_folder("fullrun", path, sizeof path);
  full_from_files(path);
  snprintf(cmd, sizeof cmd, "%s/merged.json", path);
  write_file(cmd, "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"H200\", \"peak_tflops\": 989, \"hbm_gbps\": 4800,"
             " \"mem_gib\": 140, \"efficiency\": {\"attn_fwd_full\": 0.6, \"attn_fwd_partial\": 0.2, \"attn_bwd_full\": 0.5,"
             " \"attn_bwd_partial\": 0.1}, \"ring_step\": {\"fwd_us\": 30, \"bwd_us\": 190, \"fwd_cell_us\": 0.01,"
             " \"bwd_cell_us\": 0.02}, \"attn_walk\": {\"fwd_us\": 0.05, \"bwd_us\": 0.01}, \"l2_mb\": 60,"
             " \"attn_l2\": {\"fwd\": 0.08, \"bwd\": 0.03}}, \"intra_node\": {\"gbps\": 350, \"latency_us\": 80},"
             " \"host\": {\"pcie_gbps\": 50, \"mem_gib\": 256}, \"calibration\": {\"measured\": true, \"source\": \"test\"}}");
  snprintf(cmd, sizeof cmd, "%s/logs/z.log", path);
  write_file(cmd, "attn zigzag | ring | dense: 2 ranks, qwen2.5-0.5b, seq 65536, 1 layer(s): fwd 2.000 ms bwd 5.000 ms per "
                  "layer; sent 0 B\n");
  snprintf(cmd, sizeof cmd, "%s/repredict.tsv", path);
  write_file(cmd, "logs/*.log\tcal.json\t--skip-empty-sends --full-from lay.json\n");
  repredict_as_merged(path, "fullrun", "rf", "logs/z.log", "--layout zigzag --schedule ring --pattern dense --skip-empty-sends",
                      1);
}

// The run folder's cal.json (run_folder: its bars' backward at 0.05 of peak, no walk) beside calibrations that timed
// the warp-specialized bars of the same GPU in pairs (pair.json, variant 5) and one a chunk (ws.json, variant 4), one
// of the mma.sync bars (mma.json: a walk but no gpu.bar_walk_ws), one without the bars' walk (nowalk.json) and one of
// another GPU (other.json).
static void bars_from_files(const char *path) {
  const char *fmt = "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"%s\", \"peak_tflops\": 989, \"hbm_gbps\": 4800,"
                    " \"mem_gib\": 140, \"efficiency\": {\"attn_fwd_full\": 0.6, \"attn_fwd_partial\": 0.3, \"attn_fwd_bar\": 0.15,"
                    " \"attn_bwd_full\": 0.5, \"attn_bwd_partial\": 0.25, \"attn_bwd_bar\": %s}%s},"
                    " \"intra_node\": {\"gbps\": 400, \"latency_us\": 20}, \"host\": {\"pcie_gbps\": 50, \"mem_gib\": 256},"
                    " \"calibration\": {\"measured\": true, \"source\": \"%s\"}}";
  const char *files[][4] = {
      {"pair.json", "H200", "0.23", ", \"bar_walk_us\": 2.65, \"bar_walk_ws\": 1, \"bar_walk_pairs\": 1"},
      {"ws.json", "H200", "0.21", ", \"bar_walk_us\": 1.67, \"bar_walk_ws\": 1"},
      {"mma.json", "H200", "0.17", ", \"bar_walk_us\": 5.92"},
      {"nowalk.json", "H200", "0.17", ""},
      {"other.json", "H100", "0.23", ", \"bar_walk_us\": 2.65, \"bar_walk_ws\": 1, \"bar_walk_pairs\": 1"}};
  for (int i = 0; i < 5; i++) {
    char f[900], text[2048];
    snprintf(f, sizeof f, "%s/%s", path, files[i][0]);
    snprintf(text, sizeof text, fmt, files[i][1], files[i][2], files[i][3], files[i][0]);
    write_file(f, text);
  }
}

// --bars-from FILE: a calibration that timed another bar kernel than the run's binary ran takes the bars' backward
// figures (gpu.efficiency.attn_bwd_bar, gpu.bar_walk_us, gpu.bar_walk_ws, gpu.bar_walk_pairs) of a calibration of the
// same GPU that timed the kernel --bars-walk names; its tiles, the forward's bars and the rest stay its own; without
// the flag nothing changes. Input errors name the file and field: no --bars-walk ws or pair beside it, FILE of
// another bar kernel (pairs against ws, the mma.sync bars), without the bars' walk, of another GPU or unreadable, and
// the run's own calibration of that kernel already.
TEST(repredict_bars_from_takes_the_bars_backward_figures_of_a_calibration_of_the_runs_bar_kernel) {
  char path[800], cal[900];
  run_folder("barsfrom", path, sizeof path);
  bars_from_files(path);
  snprintf(cal, sizeof cal, "%s/cal.json", path);
  cluster_desc c, c0;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load(cal, &c0, &e), SR_OK);
  c = c0;
  CHECK_EQ_INT(repredict_bars_from(path, "--skip-empty-sends --bars-walk pair", &c, &e), SR_OK);
  CHECK(!memcmp(&c, &c0, sizeof c));  // no flag: the same bits
  CHECK_EQ_INT(repredict_bars_from(path, "--skip-empty-sends --bars-walk pair --bars-from pair.json", &c, &e), SR_OK);
  CHECK_NEAR(c.gpu.eff_attn_bwd_bar, 0.23, 1e-12);
  CHECK_NEAR(c.gpu.bar_walk_us, 2.65, 1e-12);
  CHECK_EQ_INT(c.gpu.bar_walk_ws, 1);
  CHECK_EQ_INT(c.gpu.bar_walk_pairs, 1);
  CHECK_NEAR(c.gpu.eff_attn_fwd_bar, c0.gpu.eff_attn_fwd_bar, 1e-12);  // the forward's bars stay the call's
  CHECK_NEAR(c.gpu.eff_attn_bwd_full, c0.gpu.eff_attn_bwd_full, 1e-12);  // and its tiles
  CHECK_NEAR(c.gpu.eff_attn_bwd_partial, c0.gpu.eff_attn_bwd_partial, 1e-12);
  CHECK_NEAR(c.intra.gbps, c0.intra.gbps, 1e-12);  // and its links
  CHECK_STR_CONTAINS(c.calibration, "bars' backward from pair.json");
  // the same file again: the run's calibration has variant 5's bars now
  CHECK_EQ_INT(repredict_bars_from(path, "--bars-walk pair --bars-from pair.json", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gpu.bar_walk_pairs");
  CHECK_STR_CONTAINS(e.msg, "cal.json");
  c = c0;
  CHECK_EQ_INT(repredict_bars_from(path, "--bars-from=ws.json --bars-walk ws", &c, &e), SR_OK);  // variant 4
  CHECK_NEAR(c.gpu.bar_walk_us, 1.67, 1e-12);
  CHECK_EQ_INT(c.gpu.bar_walk_ws, 1);
  CHECK_EQ_INT(c.gpu.bar_walk_pairs, 0);
  const char *bad[][2] = {{"--bars-from pair.json", "--bars-walk ws or pair"},
                          {"--bars-walk split --bars-from pair.json", "--bars-walk ws or pair"},
                          {"--bars-walk ws --bars-from pair.json", "gpu.bar_walk_pairs"},
                          {"--bars-walk pair --bars-from ws.json", "gpu.bar_walk_pairs"},
                          {"--bars-walk pair --bars-from mma.json", "gpu.bar_walk_ws"},
                          {"--bars-walk pair --bars-from nowalk.json", "gpu.bar_walk_us"},
                          {"--bars-walk pair --bars-from other.json", "gpu.name"},
                          {"--bars-walk pair --bars-from none.json", "none.json"},
                          {"--bars-walk pair --bars-from", "--bars-from"}};
  for (int i = 0; i < 9; i++) {
    c = c0;
    CHECK_EQ_INT(repredict_bars_from(path, bad[i][0], &c, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, bad[i][1]);
  }
}

// A manifest line with --bars-from predicts its runs as `predict` does on the calibration with those figures: here
// MTraining's vs-topp on 2 ranks with variant 5's bars (--bars-walk pair) on the run folder's cal.json with pair.json's
// bars' backward figures (written out by hand as merged.json, the split walk's parts as --bars-walk sets them).
TEST(repredict_bars_from_predicts_as_predict_on_the_merged_calibration) {
  char path[800], cmd[2400];
  run_folder("barsrun", path, sizeof path);
  bars_from_files(path);
  snprintf(cmd, sizeof cmd, "%s/merged.json", path);
  write_file(cmd, "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"H200\", \"peak_tflops\": 989, \"hbm_gbps\": 4800,"
             " \"mem_gib\": 140, \"efficiency\": {\"attn_fwd_full\": 0.4, \"attn_fwd_partial\": 0.2, \"attn_bwd_full\": 0.2,"
             " \"attn_bwd_partial\": 0.1, \"attn_bwd_bar\": 0.23}, \"bar_walk_us\": 2.65, \"bar_walk_parts\": 16,"
             " \"bar_walk_ws\": 1, \"bar_walk_pairs\": 1}, \"intra_node\": {\"gbps\": 350, \"latency_us\": 80},"
             " \"host\": {\"pcie_gbps\": 50, \"mem_gib\": 256}, \"calibration\": {\"measured\": true, \"source\": \"test\"}}");
  snprintf(cmd, sizeof cmd, "%s/logs/m.log", path);
  write_file(cmd, "attn contiguous | double-ring | vs-topp:0.95: 2 ranks, qwen2.5-0.5b, seq 65536, 1 layer(s): fwd 2.000 ms "
                  "bwd 5.000 ms per layer; sent 0 B\n");
  snprintf(cmd, sizeof cmd, "%s/repredict.tsv", path);
  write_file(cmd, "logs/*.log\tcal.json\t--bars-walk pair --bars-from pair.json\n");
  repredict_as_merged(path, "barsrun", "rb", "logs/m.log", "--layout contiguous --schedule double-ring --pattern vs-topp:0.95",
                      0);
}

// attn prints FPDT's schedule as "fpdt:CHUNK[+offload]" (Ulysses inside each chunk): repredict reads the chunk and
// the offload back and predicts what `predict --strategy fpdt` predicts for the same run.
TEST(repredict_reads_an_fpdt_run_back_as_fpdt_with_its_chunk_and_offload) {
  char path[800], cmd[2400], *out = NULL, *pred = NULL;
  run_folder("frun", path, sizeof path);
  snprintf(cmd, sizeof cmd, "%s/logs/f.log", path);
  write_file(cmd, "attn contiguous | fpdt:4K+offload | dense: 2 ranks, qwen2.5-0.5b, seq 16384, 1 layer(s): fwd 2.000 ms bwd "
                  "5.000 ms per layer; sent 0 B\n");
  snprintf(cmd, sizeof cmd, "%s/repredict.tsv", path);
  write_file(cmd, "logs/*.log\tcal.json\t\n");
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec repredict --root %s --csv %s/f.csv", test_bin_dir(), path, path);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "error over 1 runs");
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict --model qwen2.5-0.5b --cluster %s/cal.json --seq 16384 --strategy fpdt "
           "--fpdt-chunk 4K --fpdt-offload 1", test_bin_dir(), path);
  CHECK_EQ_INT(test_run(cmd, &pred), 0);
  double pf = 0, pb = 0, rf = 0, rb = 0;
  char *csv = NULL;
  sr_error e;
  snprintf(cmd, sizeof cmd, "%s/f.csv", path);
  CHECK_EQ_INT(sr_read_file(cmd, &csv, NULL, &e), SR_OK);
  const char *row = csv ? strstr(csv, "logs/f.log,") : NULL;
  CHECK(predicted_ms(pred, &pf, &pb));
  CHECK(row && sscanf(row, "logs/f.log,%*d,%*d,%*[^,],%*[^,],%*[^,],%*f,%*f,%lf,%lf", &rf, &rb) == 2);
  free(csv);
  CHECK_NEAR(rf, pf, 1e-3);
  CHECK_NEAR(rb, pb, 1e-3);
  // Not the plain Ulysses layer: its 4K chunks make more, smaller steps.
  free(pred);
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict --model qwen2.5-0.5b --cluster %s/cal.json --seq 16384 --strategy ulysses",
           test_bin_dir(), path);
  CHECK_EQ_INT(test_run(cmd, &pred), 0);
  double uf = 0, ub = 0;
  CHECK(predicted_ms(pred, &uf, &ub));
  CHECK(uf + ub != rf + rb);
  free(out);
  free(pred);
}

// `repredict --memory`: every run of a log holding both memory lines (a log no manifest lists too), its measured
// items and the logged prediction read back, predicted again by this build as `predict` prints it; errors against
// what was in use and against the items.
TEST(repredict_memory_predicts_every_run_of_a_log_with_both_memory_lines_again) {
  const char *dir = test_tmpdir();
  char path[800], cmd[2400], *out = NULL, *csv = NULL;
  snprintf(path, sizeof path, "%s/mem", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p %s/logs", path);
  CHECK_EQ_INT(system(cmd), 0);
  // two runs in one log (each block ends with its summary line); a third line pair without a prediction is no run
  snprintf(cmd, sizeof cmd, "%s/logs/two.log", path);
  write_file(cmd,
             "  memory per GPU (largest rank): 40.0 MiB in use after a layer (the rank's tensors 2.0 MiB, the attention "
             "plan 1.0 MiB, the shared workspace 5.0 MiB); pinned host memory 0.0 KiB\n"
             "  memory predicted (sim, a GPU's bf16 tensors): 4.0 MiB (the rank's tensors 2.0 MiB, attention buffers 2.0 "
             "MiB; the tile index not counted); pinned host memory 0.0 KiB\n"
             "attn contiguous | ring | dense: 2 ranks, tiny-test, seq 4096, 1 layer(s): fwd 1.000 ms bwd 2.000 ms per layer\n"
             "  memory per GPU (largest rank): 50.0 MiB in use after a layer (the rank's tensors 2.0 MiB, the attention "
             "plan 1.0 MiB, the shared workspace 5.0 MiB); pinned host memory 0.0 KiB\n"
             "  memory predicted (sim, a GPU's bf16 tensors): 8.0 MiB (the rank's tensors 2.0 MiB, attention buffers 6.0 "
             "MiB; the tile index not counted); pinned host memory 0.0 KiB\n"
             "attn zigzag | ulysses | dense: 2 ranks, tiny-test, seq 4096, 1 layer(s): fwd 1.000 ms bwd 2.000 ms per layer\n"
             "  memory per GPU (largest rank): 50.0 MiB in use after a layer (the rank's tensors 2.0 MiB, the attention "
             "plan 1.0 MiB, the shared workspace 5.0 MiB); pinned host memory 0.0 KiB\n"
             "attn zigzag | ring | dense: 2 ranks, tiny-test, seq 4096, 1 layer(s): fwd 1.000 ms bwd 2.000 ms per layer\n");
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec repredict --memory --root %s --csv %s/m.csv", test_bin_dir(), path, path);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "logs/two.log#1");
  CHECK_STR_CONTAINS(out, "logs/two.log#2");
  CHECK(strstr(out, "logs/two.log#3") == NULL);
  CHECK_STR_CONTAINS(out, "error over every run (2)");
  // the first run as `predict` sees the same plan (a log no manifest lists: one host of its 2 GPUs)
  char *pred = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict --model tiny-test --cluster h200-1x2 --seq 4096 --layout "
           "contiguous --schedule ring --pattern dense", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &pred), 0);
  sr_error e;
  snprintf(cmd, sizeof cmd, "%s/m.csv", path);
  CHECK_EQ_INT(sr_read_file(cmd, &csv, NULL, &e), SR_OK);
  const char *row = csv ? strstr(csv, "logs/two.log#1,") : NULL;
  double used = 0, tensors = 0, plan = 0, shared = 0, before = 0, after = 0, at = 0, ap = 0, aw = 0, eb = 0, ea = 0;
  CHECK(row && sscanf(strchr(row, ',') + 1, "%*d,%*d,%*[^,],%*[^,],%*[^,],%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf",
                      &used, &tensors, &plan, &shared, &before, &after, &at, &ap, &aw, &eb, &ea) == 11);
  CHECK_NEAR(used, 40.0 * 1048576, 1);
  CHECK_NEAR(tensors + plan + shared, 8.0 * 1048576, 1);
  CHECK_NEAR(before, 4.0 * 1048576, 1);
  CHECK_NEAR(after, at + ap + aw, 1);
  CHECK_NEAR(eb, (4.0 - 40.0) / 40.0, 1e-4);
  CHECK_NEAR(ea, (after - used) / used, 1e-4);
  // `predict` prints the same items (rounded as the measured line is)
  char items[200];
  snprintf(items, sizeof items, "the shared workspace %.1f MiB", aw / 1048576);
  CHECK_STR_CONTAINS(pred, items);
  free(pred);
  free(csv);
  free(out);
}

// A vs-online run whose executor uploaded the stand-in's index and masks (never read; the current executor keeps no
// copies of a pattern made on the device): marked "+", left out of the current executor's errors, and its items
// without those copies set against this build's prediction.
TEST(repredict_memory_marks_a_device_made_pattern_whose_executor_kept_the_stand_ins_copies) {
  char path[800], cmd[2400], *out = NULL;
  run_folder("mem-standin", path, sizeof path);
  // the pattern the run used, as the executor keeps it (CPU backend, the same estimation)
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 2 %s/sparsering-exec attn --model tiny-test --cluster %s --seq 4096 "
                   "--layout striped --schedule ring --pattern vs-online:0.95 --inputs vs --trace-out %s/logs/vson.trace",
           test_bin_dir(), mpi_cpu_cluster(1, 2), path);
  char *run = NULL;
  CHECK_EQ_INT(test_run(cmd, &run), 0);
  free(run);
  snprintf(cmd, sizeof cmd, "%s/logs/vson.log", path);
  write_file(cmd,
             "  layer 0: plan device bytes (largest rank): index 3145728, forward form 0, transposed 0, bar chunks 0, "
             "masks 1048576, positions 32768; total 4227072 (4.0 MiB); bars' scratch 0, expanded bars 0 + 0 in the "
             "shared workspace of 5242880 (5.0 MiB)\n"
             "  memory per GPU (largest rank): 50.0 MiB in use after a layer (the rank's tensors 2.0 MiB, the attention "
             "plan 4.0 MiB, the shared workspace 5.0 MiB); pinned host memory 0.0 KiB\n"
             "  memory predicted (sim, the CUDA backend): 7.0 MiB (the rank's tensors 2.0 MiB, the attention plan 32.0 "
             "KiB, the shared workspace 5.0 MiB); pinned host memory 0.0 KiB\n"
             "attn striped | ring | vs-online:0.95: 2 ranks, tiny-test, seq 4096, 1 layer(s): fwd 1.000 ms bwd 2.000 ms "
             "per layer\n");
  snprintf(cmd, sizeof cmd, "%s/repredict.tsv", path);
  write_file(cmd, "# test\nlogs/vson.log\tcal.json\t--trace logs/vson.trace\n");
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec repredict --memory --root %s", test_bin_dir(), path);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "logs/vson.log                                                +");
  CHECK(strstr(out, "the runs of the current executor") == NULL);  // its only run is not one
  // 3 MiB + 1 MiB of copies: in use 46 MiB, the plan its positions alone
  CHECK_STR_CONTAINS(out, "+ logs/vson.log: its executor uploaded the stand-in's index and masks of a pattern made "
                          "on the device (4.0 MiB, never read)");
  CHECK_STR_CONTAINS(out, "without them: in use 0.04 GiB");
  CHECK_STR_CONTAINS(out, "plan 0.0 MiB;");
  free(out);
}

// The opening line's recomputation in its three wordings: every layer keeping attention's output ("selective ("),
// the first K ("selective in K of L layers"), none ("full (...)"), for the simulation of the step; and the layers
// kept whole ("kept whole in K of L layers") after the first two.
TEST(repredict_reads_which_layers_kept_attention_from_the_recompute_wording) {
  const char *head = "train: tiny-test, 1 params, seq 2048 on 1 rank(s) (contiguous layout, ring schedule, pattern dense, "
                     "density 1)\n";
  const char *tail = "predict: tiny-test dense-ring seq 2048 W 1 | simulated step 5.000s | measured step 5.100s (best "
                     "after the first; first 27.000s)\n";
  const char *data[5] = {
      "train: data passkey (loss answer), batch 1, lr 0.0003, wd 0, warmup 10, clip 1, recompute selective (each "
      "layer's attention output and LSE kept: 8.89 GiB), activation offload off",
      "train: data passkey (loss answer), batch 1, lr 0.0003, wd 0, warmup 10, clip 1, recompute selective in 33 of 36 "
      "layers (their attention output and LSE kept: 8.38 GiB; all 36 would take 8.89 GiB, 8.56 GiB free beside the "
      "plans), activation offload off",
      "train: data passkey (loss answer), batch 1, lr 0.0003, wd 0, warmup 10, clip 1, recompute full (keeping "
      "attention's output and LSE would take 8.89 GiB, 0.56 GiB free beside the plans), activation offload off",
      "train: data passkey (loss answer), batch 1, lr 0.0003, wd 0, warmup 10, clip 1, recompute selective (each "
      "layer's attention output and LSE kept: 8.89 GiB); kept whole in 8 of 36 layers (every activation kept, no "
      "rerun: 42.75 GiB, 47.10 GiB free beside the plans and the kept attention outputs; --keep-activations), "
      "activation offload off",
      "train: data passkey (loss answer), batch 1, lr 0.0003, wd 0, warmup 10, clip 1, recompute selective (each "
      "layer's attention output and LSE kept: 8.89 GiB); no layer kept whole (one would take 5.34 GiB, 2.10 GiB free "
      "beside the plans and the kept attention outputs), activation offload off"};
  const int keep_attn[5] = {1, 1, 0, 1, 1}, keep_layers[5] = {0, 33, 0, 0, 0}, keep_all[5] = {0, 0, 0, 8, 0};
  for (int i = 0; i < 5; i++) {
    char log[1500];
    snprintf(log, sizeof log, "%s%s\n%s", head, data[i], tail);
    train_rerun r;
    memset(&r, 0, sizeof r);
    CHECK_EQ_INT(repredict_parse_train_log(log, &r), 0);
    CHECK_EQ_INT(r.keep_attn, keep_attn[i]);
    CHECK_EQ_INT(r.keep_layers, keep_layers[i]);
    CHECK_EQ_INT(r.keep_all, keep_all[i]);
  }
}

// An FPDT training step (the trainer's header says "FPDT in CHUNK-token chunks offloaded" where the ring strategies say
// their schedule) of a model that is no shipped name (a shipped shape cut to one layer, as scripts/gpu/fpdt_multi_run.sh's
// TRAIN_LAYERS writes it): simulated again with the manifest's --model FILE exactly as train --predict simulated it;
// without the flag the run is named as not predicted.
TEST(repredict_simulates_an_fpdt_training_step_of_a_model_file_as_train_predict_did) {
  const char *dir = test_tmpdir();
  char path[800], cmd[2400], *log = NULL, *out = NULL;
  snprintf(path, sizeof path, "%s/fdrun", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p %s/logs && sed -E 's/\"num_hidden_layers\": [0-9]+/\"num_hidden_layers\": 1/' "
           "models/tiny-test.json > %s/tiny-1l.json", path, path);
  CHECK_EQ_INT(system(cmd), 0);
  slow_cluster(path);
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun -np 2 %s/sparsering-exec train --model %s/tiny-1l.json --cluster %s/cal.json "
           "--strategy fpdt --fpdt-chunk 512 --pattern dense --offload-activations --seq 2048 --steps 1 --predict "
           "> %s/logs/t.log 2>&1", test_bin_dir(), path, path, path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(cmd, sizeof cmd, "%s/logs/t.log", path);
  sr_error e;
  CHECK_EQ_INT(sr_read_file(cmd, &log, NULL, &e), SR_OK);
  CHECK_STR_CONTAINS(log, "FPDT in 512-token chunks offloaded");
  const char *at = log ? strstr(log, "simulated step ") : NULL;
  double trainer = 0;
  CHECK(at && sscanf(at, "simulated step %lfs", &trainer) == 1 && trainer > 0.1);
  train_rerun r;
  memset(&r, 0, sizeof r);
  CHECK_EQ_INT(repredict_parse_train_log(log, &r), 0);
  CHECK(strcmp(r.schedule, "fpdt:512+offload") == 0);
  CHECK_EQ_INT(r.offload, 1);
  out = repredict_with(path, "", 0);
  CHECK_STR_CONTAINS(out, "not predicted (1)");  // 'tiny-1l' is no shipped model
  free(out);
  out = repredict_with(path, "--model tiny-1l.json", 0);
  check_step_as_trainer(out, trainer);
  free(out);
  // a --model file that is not there: the run is not predicted, and the message names the file
  out = repredict_with(path, "--model nothere.json", -1);
  CHECK_STR_CONTAINS(out, "nothere.json");
  free(log);
  free(out);
}

// The trainer's header names the schedule, or FPDT's chunks with or without " offloaded" in its place.
TEST(repredict_reads_the_trainers_schedule_or_fpdts_chunks_from_its_header) {
  static const char *const lines[][2] = {
      {"train: m, 1 params, seq 4096 on 2 rank(s) (striped layout, double-ring schedule, pattern vs-topp:0.95, density 0.1)\n",
       "double-ring"},
      {"train: m, 1 params, seq 4096 on 2 rank(s) (contiguous layout, FPDT in 1K-token chunks offloaded, pattern dense, "
       "density 1.0000)\n", "fpdt:1K+offload"},
      {"train: m, 1 params, seq 4096 on 2 rank(s) (contiguous layout, FPDT in 64K-token chunks, pattern dense, density 1)\n",
       "fpdt:64K"},
  };
  for (int i = 0; i < 3; i++) {
    char log[1024];
    snprintf(log, sizeof log, "%spredict: m | simulated step 1.000s | measured step 2.000s (best after the first)\n",
             lines[i][0]);
    train_rerun r;
    memset(&r, 0, sizeof r);
    CHECK_EQ_INT(repredict_parse_train_log(log, &r), 0);
    CHECK(strcmp(r.schedule, lines[i][1]) == 0);
    CHECK(strcmp(r.pattern, i ? "dense" : "vs-topp:0.95") == 0);
    CHECK_EQ_INT(r.world, 2);
  }
}

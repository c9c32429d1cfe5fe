// test_exec_compare.c — `sparsering compare` and the timeline comparison behind it, on hand-made
// timelines whose per-phase and per-step errors are worked out below by hand.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "sim/timeline_compare.h"
#include "tests/test.h"

static const char *write_tmp(const char *name, const char *text) {
  static char path[4][600];
  static int k;
  char *p = path[k++ % 4];
  snprintf(p, 600, "%s/%s", test_tmpdir(), name);
  FILE *f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
  return p;
}

// Two ranks, two steps. Predicted: attn 100 us per (rank, step) and kv 50. Measured: attn takes 100/120
// (ranks 0/1) at step 0 and 80/100 at step 1, so per-step max over ranks is 120 and 100: attn measured
// 220 vs predicted 200 -> -9.09%; kv measured 40 + 60 = 100 vs 100 -> 0%.
static const char *pred_csv =
    "run,layer,rank,step,phase,stream,start_us,dur_us\n"
    "0,0,0,0,attn_fwd,compute,0,100\n0,0,0,0,kv_fwd,comm,0,50\n"
    "0,0,1,0,attn_fwd,compute,0,100\n0,0,1,0,kv_fwd,comm,0,50\n"
    "0,0,0,1,attn_fwd,compute,100,100\n0,0,0,1,kv_fwd,comm,100,50\n"
    "0,0,1,1,attn_fwd,compute,100,100\n0,0,1,1,kv_fwd,comm,100,50\n";
static const char *meas_csv =
    "run,layer,rank,step,phase,stream,start_us,dur_us\n"
    "0,0,0,0,attn_fwd,compute,0,100\n0,0,0,0,kv_fwd,comm,0,40\n"
    "0,0,1,0,attn_fwd,compute,0,120\n0,0,1,0,kv_fwd,comm,0,30\n"
    "0,0,0,1,attn_fwd,compute,120,80\n0,0,0,1,kv_fwd,comm,120,60\n"
    "0,0,1,1,attn_fwd,compute,120,100\n0,0,1,1,kv_fwd,comm,120,20\n"
    "0,0,1,1,a2a_fwd,comm,220,5\n";

TEST(timeline_compare_phase_time_is_sum_over_steps_of_slowest_rank) {
  tlc_timeline p, m;
  sr_error e = {0};
  CHECK_EQ_INT(tlc_read_csv(write_tmp("p.csv", pred_csv), &p, &e), SR_OK);
  CHECK_EQ_INT(tlc_read_csv(write_tmp("m.csv", meas_csv), &m, &e), SR_OK);
  tlc_report r;
  CHECK_EQ_INT(tlc_compare(&p, &m, NULL, NULL, &r, &e), SR_OK);
  CHECK_EQ_INT(r.n_phases, 2);
  for (int i = 0; i < r.n_phases; i++) {
    if (strcmp(r.phases[i].name, "attn_fwd") == 0) {
      CHECK_NEAR(r.phases[i].predicted_us, 200, 1e-9);
      CHECK_NEAR(r.phases[i].measured_us, 220, 1e-9);
      CHECK_NEAR(r.phases[i].rel_err, -20.0 / 220.0, 1e-12);
    } else {
      CHECK(strcmp(r.phases[i].name, "kv_fwd") == 0);
      CHECK_NEAR(r.phases[i].measured_us, 100, 1e-9);
      CHECK_NEAR(r.phases[i].rel_err, 0, 1e-12);
    }
  }
  CHECK_NEAR(r.phase_mean_abs, (20.0 / 220.0) / 2, 1e-12);
  CHECK_NEAR(r.phase_max_abs, 20.0 / 220.0, 1e-12);
  // Steps: predicted spans 100 and 100; measured step 0 max(100, 120) = 120, step 1 rank 1 spans 120..225 = 105.
  CHECK_EQ_INT(r.n_steps, 2);
  CHECK_NEAR(r.steps[0].measured_us, 120, 1e-9);
  CHECK_NEAR(r.steps[1].measured_us, 105, 1e-9);
  CHECK_NEAR(r.step_max_abs, 20.0 / 120.0, 1e-12);
  CHECK_NEAR(r.total.measured_us, 225, 1e-9);
  CHECK_NEAR(r.total.predicted_us, 200, 1e-9);
  CHECK(strcmp(r.only_measured, "a2a_fwd") == 0);
  tlc_report_free(&r);
  tlc_free(&p), tlc_free(&m);
}

TEST(timeline_compare_rejects_a_csv_without_the_timeline_columns) {
  tlc_timeline t;
  sr_error e = {0};
  CHECK_EQ_INT(tlc_read_csv(write_tmp("bad.csv", "run,layer,rank,step,phase\n0,0,0,0,x\n"), &t, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "stream");
  CHECK_EQ_INT(tlc_read_csv(write_tmp("bad2.csv", "run,layer,rank,step,phase,stream,start_us,dur_us\n0,0,0,zero,a,b,1,2\n"), &t, &e),
               SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "line 2: step");
}

TEST(timeline_compare_selects_runs_by_name_as_the_simulator_writes_them) {
  // The simulator names its run ("mtraining"); only that run's rows count.
  const char *p_csv = "run,layer,rank,step,phase,stream,start_us,dur_us\n"
                      "mtraining,0,0,0,attn,compute,0,100\nother,0,0,0,attn,compute,0,900\n";
  const char *m_csv = "run,layer,rank,step,phase,stream,start_us,dur_us\n0,0,0,0,attn,compute,0,80\n";
  tlc_timeline p, m;
  sr_error e = {0};
  CHECK_EQ_INT(tlc_read_csv(write_tmp("p.csv", p_csv), &p, &e), SR_OK);
  CHECK_EQ_INT(tlc_read_csv(write_tmp("m.csv", m_csv), &m, &e), SR_OK);
  tlc_report r;
  CHECK_EQ_INT(tlc_compare(&p, &m, "mtraining", "0", &r, &e), SR_OK);
  CHECK_EQ_INT(r.n_phases, 1);
  CHECK_NEAR(r.phases[0].rel_err, 0.25, 1e-12);  // (100 - 80) / 80
  tlc_report_free(&r);
  tlc_free(&p), tlc_free(&m);
}

TEST(compare_cli_prints_phase_errors_and_their_mean) {
  char cmd[2048], *out = NULL;
  const char *p = write_tmp("p.csv", pred_csv), *m = write_tmp("m.csv", meas_csv);
  snprintf(cmd, sizeof cmd, "%s/sparsering compare %s %s --steps", test_bin_dir(), p, m);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "attn_fwd");
  CHECK_STR_CONTAINS(out, "-9.1%");
  CHECK_STR_CONTAINS(out, "per phase: mean |error| 4.5%, max |error| 9.1%");
  CHECK_STR_CONTAINS(out, "layer 0 step 1");
  free(out);
  snprintf(cmd, sizeof cmd, "%s/sparsering compare %s", test_bin_dir(), p);
  CHECK_EQ_INT(test_run(cmd, NULL), 2);
}

// ---------------------------------------------------------------------------------------------
// predict_attention (sim/predict.c)

#include "sim/predict.h"
#include "plan/pattern_spec.h"

// Predicted forward and backward of layer 0 of a qwen2.5-3b plan on the 2 x H200 cluster.
static void predict_of(const char *schedule, double *fwd, double *bwd) {
  plan_spec sp;
  plan_spec_defaults(&sp);
  snprintf(sp.model, sizeof sp.model, "qwen2.5-3b");
  snprintf(sp.cluster, sizeof sp.cluster, "h200-1x2");
  snprintf(sp.layout, sizeof sp.layout, "zigzag");
  snprintf(sp.schedule, sizeof sp.schedule, "%s", schedule);
  sp.seq = 65536;
  plan p;
  pattern pat;
  sr_error e = {0};
  CHECK_EQ_INT(plan_build(&sp, &p, &e), SR_OK);
  CHECK_EQ_INT(pattern_from_spec("dense", &p.model, sp.seq, 1, 0, &pat, &e), SR_OK);
  CHECK_EQ_INT(predict_attention(&p, &pat, 0, NULL, fwd, bwd, &e), SR_OK);
  pattern_free(&pat);
  plan_free(&p);
}

TEST(predict_attention_keeps_ulysses_backward_all_to_all_out_of_the_forward) {
  // The backward has 2.5x the forward's FLOPs and all-to-alls of more tensors (Q, O, dO, LSE in; dQ,
  // dK, dV out), so its span must be the longer one; and Ulysses computes the same FLOPs as the ring
  // plus its all-to-alls, so neither of its spans can be shorter than the ring's.
  double uf, ub, rf, rb;
  predict_of("ulysses", &uf, &ub);
  predict_of("ring", &rf, &rb);
  CHECK(uf > 0 && ub > 0 && rf > 0 && rb > 0);
  CHECK(ub > uf);
  CHECK(uf < 2 * rf);  // the forward span holds one forward's compute and two all-to-alls, not the backward's
  CHECK(ub >= 0.9 * rb);
}

TEST(compare_a_run_no_row_has_is_an_input_error_not_nan_over_0_phases) {
  char cmd[2048], *out = NULL;
  const char *p = write_tmp("p.csv", pred_csv), *m = write_tmp("m.csv", meas_csv);
  snprintf(cmd, sizeof cmd, "%s/sparsering compare %s %s --run-sim abc", test_bin_dir(), p, m);
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "--run-sim: no row has run 'abc' (the file's runs: '0')");
  CHECK(!strstr(out, "nan"));
  free(out);
  const char *other = write_tmp("o.csv", "run,layer,rank,step,phase,stream,start_us,dur_us\n0,5,0,7,gemm,compute,0,10\n");
  snprintf(cmd, sizeof cmd, "%s/sparsering compare %s %s", test_bin_dir(), p, other);
  CHECK_EQ_INT(test_run(cmd, &out), 2);  // nothing in common: no error to report
  CHECK_STR_CONTAINS(out, "share no phase and no step");
  free(out);
}

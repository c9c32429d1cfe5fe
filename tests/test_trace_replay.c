// test_trace_replay.c — `sparsering replay` simulates the recorded patterns: a trace of dense causal
// attention replays to exactly what the simulator gives for dense causal attention directly.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "sim/strategy.h"
#include "tests/test.h"

// step_s of every row of a replay CSV (step,step_s,...) into out; returns the row count.
static int read_step_times(const char *csv, double *out, int max) {
  int n = 0;
  const char *p = strchr(csv, '\n');
  while (p && p[1] && n < max) {
    int step;
    double t;
    if (sscanf(p + 1, "%d,%lf", &step, &t) != 2) break;
    out[n++] = t;
    p = strchr(p + 1, '\n');
  }
  return n;
}

static void check_dense_replay(const char *strategy, const char *cluster, int64_t seq) {
  const char *d = test_tmpdir();
  char cmd[2000], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering trace gen --model tiny-test --seq %lld --steps 3 --pattern dense --seed 4 "
           "-o %s/dense.safetensors && %s/sparsering replay %s/dense.safetensors --cluster %s --strategy %s "
           "--csv %s/replay.csv", test_bin_dir(), (long long)seq, d, test_bin_dir(), d, cluster, strategy, d);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "summary over 3 steps");
  free(out);
  char path[700], *csv = NULL;
  sr_error e;
  snprintf(path, sizeof path, "%s/replay.csv", d);
  CHECK_EQ_INT(sr_read_file(path, &csv, NULL, &e), SR_OK);
  double got[8];
  int rows = csv ? read_step_times(csv, got, 8) : 0;
  free(csv);
  CHECK_EQ_INT(rows, 3);

  // The direct simulation: the same plan, every head dense causal.
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  s.seq = seq;
  s.seed = 4;
  plan p;
  pattern pat;
  sim_result r;
  sim_options o = {0};
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, strategy, &e), SR_OK);
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  CHECK_EQ_INT(pattern_alloc(&pat, seq, (int)p.model.num_layers, (int)p.model.num_heads, &e), SR_OK);
  CHECK_EQ_INT(sim_run(&p, &pat, &o, &r, NULL, &e), SR_OK);
  for (int i = 0; i < rows; i++) CHECK_REL(got[i], r.step_s, 1e-8);  // the CSV carries 9 significant digits
  pattern_free(&pat);
  plan_free(&p);
}

TEST(trace_replay_of_dense_causal_equals_simulating_dense_causal_ring) {
  check_dense_replay("dense-ring", "h200-1x2", 6000);
}

TEST(trace_replay_of_dense_causal_equals_simulating_dense_causal_striped_double_ring) {
  check_dense_replay("mtraining", "h100-8x8", 9000);  // uneven: 9000 tokens over 64 ranks
}

TEST(trace_replay_rejects_a_trace_for_another_model) {
  const char *d = test_tmpdir();
  char cmd[2000], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering trace gen --model tiny-test --seq 1000 --pattern dense -o %s/t.safetensors "
           "&& %s/sparsering replay %s/t.safetensors --model qwen2.5-0.5b --cluster h200-1x2 --strategy dense-ring",
           test_bin_dir(), d, test_bin_dir(), d);
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "the trace records 2 layers x 4 heads");
  free(out);
}

// Replay simulates the recorded sparse pattern of each step, not the strategy's own pattern: with
// --no-estimate, step 0 equals the simulator given the trace as its pattern source ("trace:PATH" reads
// step 0), and the steps differ as the recorded patterns drift. Without it the strategy's online
// estimation (naive-sparse's vs-topp selection) is charged on top.
TEST(trace_replay_simulates_the_recorded_sparse_steps) {
  const char *trace = "traces/samples/tiny25m-vs-topp-32k.safetensors";
  const char *d = test_tmpdir();
  char cmd[2000], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering replay %s --cluster h200-1x2 --strategy naive-sparse --no-estimate "
           "--csv %s/r.csv && %s/sparsering replay %s --cluster h200-1x2 --strategy naive-sparse --csv %s/online.csv",
           test_bin_dir(), trace, d, test_bin_dir(), trace, d);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  char path[700], *csv = NULL;
  sr_error e;
  snprintf(path, sizeof path, "%s/r.csv", d);
  CHECK_EQ_INT(sr_read_file(path, &csv, NULL, &e), SR_OK);
  double got[8];
  int rows = csv ? read_step_times(csv, got, 8) : 0;
  free(csv);
  CHECK_EQ_INT(rows, 4);
  if (rows != 4) return;

  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-25m");
  snprintf(s.cluster, sizeof s.cluster, "h200-1x2");
  s.seq = 32768;
  s.seed = 1;
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "naive-sparse", &e), SR_OK);
  snprintf(s.pattern, sizeof s.pattern, "trace:%s", trace);
  plan p;
  sim_result r;
  sim_options o = {0};
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  CHECK_EQ_INT(sim_plan(&p, &o, &r, NULL, &e), SR_OK);
  CHECK_REL(got[0], r.step_s, 1e-8);
  CHECK(got[1] != got[0] || got[2] != got[0] || got[3] != got[0]);
  plan_free(&p);
  snprintf(path, sizeof path, "%s/online.csv", d);
  CHECK_EQ_INT(sr_read_file(path, &csv, NULL, &e), SR_OK);
  double online[8];
  CHECK_EQ_INT(csv ? read_step_times(csv, online, 8) : 0, 4);
  free(csv);
  for (int i = 0; i < 4; i++) CHECK(online[i] > got[i]);
}

// --layout balanced deals the layout by recorded step 0; --rebalance-every 2 deals it again at step 2 by that
// step's pattern and charges the re-shard all-to-all there (the last CSV column), only there.
TEST(trace_replay_rebalances_a_balanced_layout_and_charges_the_reshard) {
  const char *trace = "traces/samples/tiny25m-vs-topp-32k.safetensors";
  const char *d = test_tmpdir();
  char cmd[2000], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering replay %s --cluster h200-1x8 --strategy mtraining --no-estimate "
           "--layout balanced --rebalance-every 2 --csv %s/b.csv", test_bin_dir(), trace, d);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "re-balanced, re-shard");
  free(out);
  char path[700], *csv = NULL;
  sr_error e;
  snprintf(path, sizeof path, "%s/b.csv", d);
  CHECK_EQ_INT(sr_read_file(path, &csv, NULL, &e), SR_OK);
  double reshard[4] = {-1, -1, -1, -1};
  const char *p = csv ? strchr(csv, '\n') : NULL;
  for (int i = 0; p && p[1] && i < 4; i++) {
    const char *last = p + 1, *nl = strchr(p + 1, '\n');
    for (const char *q = p + 1; q < nl; q++)
      if (*q == ',') last = q + 1;
    reshard[i] = atof(last);
    p = nl;
  }
  free(csv);
  CHECK_NEAR(reshard[0], 0, 0);
  CHECK_NEAR(reshard[1], 0, 0);
  CHECK(reshard[2] > 0);
  CHECK_NEAR(reshard[3], 0, 0);
  snprintf(cmd, sizeof cmd, "%s/sparsering replay %s --cluster h200-1x8 --strategy mtraining --rebalance-every 2",
           test_bin_dir(), trace);
  CHECK_EQ_INT(test_run(cmd, &out), 2);  // only a balanced layout is re-balanced
  CHECK_STR_CONTAINS(out, "--rebalance-every");
  free(out);
}

// Where striped:128 simulates step 0 faster than the balanced layout (the block trace on 4 nodes of 8 A100s: by 0.3%;
// on 8 nodes of 8 H100s until the kernels' shortest CTAs were modelled, sim/cost.h cost_cta_floor, which made balanced
// 0.2% faster there), replay keeps striped:128, says so, and every step equals the plain striped:128 replay's.
TEST(trace_replay_keeps_striped_when_it_simulates_step_0_faster_than_balanced) {
  const char *trace = "traces/samples/tiny25m-block-16k.safetensors";
  const char *d = test_tmpdir();
  char cmd[2000], *out = NULL, path[700], *csv = NULL;
  sr_error e;
  double got[2][8];
  for (int k = 0; k < 2; k++) {
    snprintf(cmd, sizeof cmd, "%s/sparsering replay %s --cluster a100-4x8 --strategy mtraining --no-estimate %s "
             "--csv %s/s%d.csv", test_bin_dir(), trace, k ? "--layout balanced" : "", d, k);
    CHECK_EQ_INT(test_run(cmd, &out), 0);
    if (k) CHECK_STR_CONTAINS(out, "balanced layout not kept: striped:128 simulates step 0 faster");
    free(out);
    snprintf(path, sizeof path, "%s/s%d.csv", d, k);
    CHECK_EQ_INT(sr_read_file(path, &csv, NULL, &e), SR_OK);
    CHECK_EQ_INT(csv ? read_step_times(csv, got[k], 8) : 0, 2);
    free(csv);
  }
  for (int i = 0; i < 2; i++) CHECK_NEAR(got[1][i], got[0][i], 0);
}

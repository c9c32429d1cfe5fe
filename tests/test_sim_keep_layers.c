// test_sim_keep_layers.c — the simulated step under selective recomputation kept by the first K layers only
// (sim_options.keep_layers, as sparsering-exec train chooses where memory holds no more): the recomputed forward of
// layers K..L-1 reruns attention, so the step slows from K = L down to K = 0, and memory holds K layers' attention
// output and LSE; K = L and K = 0 are the step of every layer keeping and of none exactly.
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/strategy.h"
#include "tests/test.h"

// tiny-test's shape with 6 layers.
static const char *six_layer_model(void) {
  static char path[700];
  snprintf(path, sizeof path, "%s/tiny-6.json", test_tmpdir());
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "sed 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 6/' models/tiny-test.json > %s", path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  return path;
}

// strategy's plan (with recomputation) for the 6-layer model on h200-1x2 ("exec": sparsering-exec train's memory),
// 8192 tokens (FPDT: in chunks of 2048), simulated with o (a timeline into tl when given).
static int run_keep(const char *strategy, const char *trainer, sim_options o, sim_result *r, sim_timeline *tl) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  if (plan_spec_apply_strategy(&s, strategy, &e)) return -1;
  snprintf(s.model, sizeof s.model, "%s", six_layer_model());
  snprintf(s.cluster, sizeof s.cluster, "h200-1x2");
  snprintf(s.trainer, sizeof s.trainer, "%s", trainer);
  s.seq = 8192;
  s.recompute = 1;
  if (strcmp(strategy, "fpdt") == 0) s.fpdt_chunk = 2048;
  plan p;
  if (plan_build(&s, &p, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  o.record_timeline = tl != NULL;
  int rc = sim_plan(&p, &o, r, tl, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  plan_free(&p);
  return rc;
}

// The step with the first k layers keeping (k < 0: keep_attn off; k = 0 with keep_attn: every layer).
static sim_options keeping(int k) {
  sim_options o;
  memset(&o, 0, sizeof o);
  o.keep_attn = k >= 0;
  o.keep_layers = k > 0 ? k : 0;
  return o;
}

TEST(sim_keep_layers_counts_0_and_all_layers_as_no_layer_and_every_layer_keeping) {
  sim_options none = keeping(-1), all = keeping(0), six = keeping(6), nine = keeping(9), two = keeping(2);
  CHECK_EQ_INT(sim_keep_layers(&none, 6), 0);
  CHECK_EQ_INT(sim_keep_layers(&all, 6), 6);
  CHECK_EQ_INT(sim_keep_layers(&six, 6), 6);
  CHECK_EQ_INT(sim_keep_layers(&nine, 6), 6);
  CHECK_EQ_INT(sim_keep_layers(&two, 6), 2);
}

TEST(sim_step_slows_as_fewer_layers_keep_attention_from_every_layer_to_none_in_ring_ulysses_and_fpdt) {
  const char *strategies[] = {"dense-ring", "ulysses", "fpdt"};
  for (int s = 0; s < 3; s++) {
    sim_result none, all, r[7];
    CHECK_EQ_INT(run_keep(strategies[s], "exec", keeping(-1), &none, NULL), 0);
    CHECK_EQ_INT(run_keep(strategies[s], "exec", keeping(0), &all, NULL), 0);
    for (int k = 0; k <= 6; k++) CHECK_EQ_INT(run_keep(strategies[s], "exec", keeping(k), &r[k], NULL), 0);
    // K = L is every layer keeping, K = 0 none (keep_layers 0 with keep_attn: every layer, so compare r[6])
    CHECK(r[6].step_s == all.step_s && r[6].mem.total == all.mem.total && r[6].comm_bytes == all.comm_bytes);
    sim_result n0;
    sim_options zero = keeping(-1);
    zero.keep_layers = 3;  // without keep_attn the count means nothing
    CHECK_EQ_INT(run_keep(strategies[s], "exec", zero, &n0, NULL), 0);
    CHECK(n0.step_s == none.step_s && n0.mem.total == none.mem.total && n0.comm_bytes == none.comm_bytes);
    CHECK(none.step_s > all.step_s);
    for (int k = 1; k <= 6; k++) {
      CHECK(r[k].step_s <= (k == 1 ? none.step_s : r[k - 1].step_s));
      CHECK(r[k].step_s >= all.step_s);
    }
    CHECK(r[3].step_s < none.step_s && r[3].step_s > all.step_s);
  }
}

TEST(sim_memory_grows_by_the_keeping_layers_attention_output_and_lse) {
  // tiny-test: 4 heads of 16; a rank's 4096 tokens: O 2 x 64 B and LSE 4 x 4 B a token and layer, 144 B. The exec
  // trainer's layers that keep take a buffer each (all 6 take 5: layer 0's is the recomputation's own); the mixed
  // trainer's every keeping layer holds them beside its input.
  const double layer = 4096.0 * (2 * 64 + 4 * 4);
  const char *trainers[] = {"exec", "mixed"};
  for (int t = 0; t < 2; t++) {
    sim_result none, r;
    CHECK_EQ_INT(run_keep("dense-ring", trainers[t], keeping(-1), &none, NULL), 0);
    for (int k = 1; k <= 6; k++) {
      CHECK_EQ_INT(run_keep("dense-ring", trainers[t], keeping(k), &r, NULL), 0);
      double own = t == 0 && k == 6 ? 5 : k;
      CHECK_NEAR(r.mem.activations - none.mem.activations, own * layer, 1e-6 * layer);
    }
  }
}

// Attention forward tasks of each layer on rank 0.
static void attn_per_layer(const sim_timeline *tl, int *n) {
  memset(n, 0, 6 * sizeof *n);
  for (int64_t i = 0; i < tl->n; i++)
    if (tl->ev[i].phase == PHASE_ATTN && tl->ev[i].rank == 0 && tl->ev[i].layer >= 0 && tl->ev[i].layer < 6)
      n[tl->ev[i].layer]++;
}

TEST(sim_recomputed_forward_reruns_attention_only_in_the_layers_that_do_not_keep) {
  sim_result ra, r2;
  sim_timeline ta = {0}, t2 = {0};
  CHECK_EQ_INT(run_keep("dense-ring", "exec", keeping(0), &ra, &ta), 0);
  CHECK_EQ_INT(run_keep("dense-ring", "exec", keeping(2), &r2, &t2), 0);
  int na[6], n2[6];
  attn_per_layer(&ta, na);
  attn_per_layer(&t2, n2);
  CHECK(na[0] > 0);
  for (int l = 0; l < 6; l++) {
    CHECK_EQ_INT(na[l], na[0]);                   // every layer keeps: attention's forward once
    CHECK_EQ_INT(n2[l], l < 2 ? na[0] : 2 * na[0]);  // layers 2..5 run it again in their backward
  }
  sim_timeline_free(&ta);
  sim_timeline_free(&t2);
}

TEST(sim_representative_layers_time_a_keeping_layers_backward_apart_from_a_rerunning_ones) {
  // Every layer of a dense model does the same work, so representative mode times one layer and replays it, one
  // layer after another; the backward of a layer that keeps is shorter than one that reruns attention, and is timed
  // on its own: with 3 of 6 layers rerunning, the step is halfway between every layer keeping and none.
  sim_result r[3];
  const int k[3] = {-1, 0, 3};  // none, all, the first 3
  for (int i = 0; i < 3; i++) {
    sim_options o = keeping(k[i]);
    o.representative = 1;
    CHECK_EQ_INT(run_keep("dense-ring", "exec", o, &r[i], NULL), 0);
  }
  CHECK(r[0].step_s > r[1].step_s);
  CHECK_NEAR(r[2].step_s, r[1].step_s + 0.5 * (r[0].step_s - r[1].step_s), 1e-9 * r[1].step_s);
}

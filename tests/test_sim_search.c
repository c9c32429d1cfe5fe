// test_sim_search.c — the simulated cost of AdaSpa's block search (adaspa-online, sim/estimate.c): a layer's
// search is the dense pass (one dense attention forward of the rank's queries) plus the LSE-cached search at
// AdaSpa's half of it, or at the cluster's measured gpu.adaspa_search_ratio; on Hopper with blocks of 64 or 128 the
// executor's pass without output, at its measured share of a dense forward; a mask kept for K steps puts 1/K of
// it in the simulated (average) step; the synthetic adaspa source and a pattern given to the simulator cost none;
// whatif runs the adaspa strategy beside MTraining's and keeps its search when the study's pattern is a VS one.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "sim/strategy.h"
#include "tests/test.h"

enum { SEQ = 4096 };

// One node of `gpus` GPUs named `name`: peak 100 TFLOP/s, full forward tiles at 0.5; ratio > 0 sets
// gpu.adaspa_search_ratio.
static const char *cluster_named(int gpus, double ratio, const char *name) {
  static char path[700];
  snprintf(path, sizeof path, "%s/c-%d-%g-%c.json", test_tmpdir(), gpus, ratio, name[0]);
  char r[64] = "";
  if (ratio > 0) snprintf(r, sizeof r, "\"adaspa_search_ratio\": %g, ", ratio);
  char text[2048];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": %d,\n"
           " \"gpu\": {\"name\": \"%s\", \"peak_tflops\": 100, %s\"hbm_gbps\": 1000, \"mem_gib\": 80,\n"
           "   \"efficiency\": {\"gemm\": 0.5, \"attn_fwd_full\": 0.5, \"mem\": 0.8}},\n"
           " \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},\n"
           " \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 512}}\n",
           gpus, name, r);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

static const char *cluster(int gpus, double ratio) { return cluster_named(gpus, ratio, "test"); }

// Layer 0's compute time in `phase` on rank 0 and the step time, for pattern spec on a striped ring.
static int run(const char *cl, const char *spec, int64_t every, int fixed, int phase, double *phase_s, double *step_s) {
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cl);
  snprintf(s.pattern, sizeof s.pattern, "%s", spec);
  s.seq = SEQ, s.search_every = every;
  plan p;
  sr_error e;
  if (plan_build(&s, &p, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  sim_options o = {0, 1, fixed, 0, 0, 0, 0, 0};
  sim_result r;
  sim_timeline tl = {0};
  int rc = sim_plan(&p, &o, &r, &tl, &e);
  *phase_s = 0;
  for (int64_t i = 0; !rc && i < tl.n; i++) {
    const timeline_event *v = &tl.ev[i];
    if (v->layer == 0 && v->rank == 0 && v->phase == phase && v->stream == STREAM_COMPUTE) *phase_s += v->dur;
  }
  *step_s = r.step_s;
  sim_timeline_free(&tl);
  plan_free(&p);
  return rc;
}

// Dense causal forward of one rank holding every token: N(N+1)/2 pairs a head, as full 128 x 128 tiles of
// 4 * 128^2 * head_dim FLOPs at 100 TFLOP/s x 0.5 (tiny-test: 4 heads of 16).
static double dense_fwd_one_rank(void) {
  double tiles = ceil(4.0 * SEQ * (SEQ + 1) / 2 / (128.0 * 128.0));
  return tiles * 4.0 * 128 * 128 * 16 / (100e12 * 0.5);
}

TEST(sim_search_costs_a_dense_pass_and_half_a_forward_over_the_steps_a_mask_serves) {
  const char *c1 = cluster(1, 0);
  double est1, est4, step1, step4, idx, step_fixed;
  CHECK_EQ_INT(run(c1, "adaspa-online:0.8:128", 1, 0, PHASE_ESTIMATE, &est1, &step1), 0);
  CHECK_REL(est1, 1.5 * dense_fwd_one_rank(), 1e-9);
  CHECK_EQ_INT(run(c1, "adaspa-online:0.8:128", 4, 0, PHASE_ESTIMATE, &est4, &step4), 0);
  CHECK_REL(est4, est1 / 4, 1e-9);
  // the same pattern given (no search) and the synthetic source cost neither the search nor its index
  double none;
  CHECK_EQ_INT(run(c1, "adaspa-online:0.8:128", 1, 1, PHASE_ESTIMATE, &none, &step_fixed), 0);
  CHECK_NEAR(none, 0, 0);
  CHECK_EQ_INT(run(c1, "adaspa:0.8:128", 1, 0, PHASE_ESTIMATE, &none, &step_fixed), 0);
  CHECK_NEAR(none, 0, 0);
  // one rank: the step is serial, so the search (and its index) add up over the layers, a quarter of them at K = 4
  CHECK_EQ_INT(run(c1, "adaspa-online:0.8:128", 1, 0, PHASE_INDEX, &idx, &step1), 0);
  CHECK(idx > 0);
  CHECK_REL(step1 - step4, 0.75 * 2 * (est1 + idx), 1e-6);
}

TEST(sim_search_takes_the_clusters_measured_search_ratio) {
  double a, b, step;
  CHECK_EQ_INT(run(cluster(2, 0), "adaspa-online:0.8", 1, 0, PHASE_ESTIMATE, &a, &step), 0);
  CHECK_EQ_INT(run(cluster(2, 0.25), "adaspa-online:0.8", 1, 0, PHASE_ESTIMATE, &b, &step), 0);
  CHECK_REL(b / a, 1.25 / 1.5, 1e-9);  // dense pass + 0.25 of it, against + 0.5 of it
}

// On Hopper with B = 64 or 128 the executor's search takes its masses from a dense pass without output: the whole
// search at its measured share of a dense forward (0.767 at B = 128, 0.855 at B = 64), the cluster's ratio unused;
// other blocks there, and the same blocks elsewhere, the dense pass + the ratio.
TEST(sim_search_on_hopper_costs_the_pass_without_output_at_blocks_of_64_and_128) {
  // against B = 32 on the same cluster (the dense forward a share of which each is does not depend on B)
  double b128, b64, b32, step;
  const char *h = cluster_named(1, 0.25, "NVIDIA H200");
  CHECK_EQ_INT(run(h, "adaspa-online:0.8:128", 1, 0, PHASE_ESTIMATE, &b128, &step), 0);
  CHECK_EQ_INT(run(h, "adaspa-online:0.8:64", 1, 0, PHASE_ESTIMATE, &b64, &step), 0);
  CHECK_EQ_INT(run(h, "adaspa-online:0.8:32", 1, 0, PHASE_ESTIMATE, &b32, &step), 0);
  CHECK(b32 > 0);
  CHECK_REL(b128 / b32, 0.767 / 1.25, 1e-9);
  CHECK_REL(b64 / b32, 0.855 / 1.25, 1e-9);
  const char *a = cluster_named(1, 0, "A100-SXM4-40GB");
  CHECK_EQ_INT(run(a, "adaspa-online:0.8:128", 1, 0, PHASE_ESTIMATE, &b128, &step), 0);
  CHECK_EQ_INT(run(a, "adaspa-online:0.8:32", 1, 0, PHASE_ESTIMATE, &b32, &step), 0);
  CHECK_REL(b128 / b32, 1.0, 1e-9);
}

TEST(sim_whatif_runs_adaspa_beside_mtraining_and_keeps_its_search_under_a_vs_pattern) {
  strategy_study st;
  memset(&st, 0, sizeof st);
  plan_spec_defaults(&st.base);
  snprintf(st.base.model, sizeof st.base.model, "tiny-test");
  snprintf(st.base.cluster, sizeof st.base.cluster, "%s", cluster(2, 0));
  st.base.seq = SEQ;
  snprintf(st.sparse_pattern, sizeof st.sparse_pattern, "vs-topp:0.9");
  int found = 0;
  for (int i = 0; plan_strategy_names[i]; i++) found += strcmp(plan_strategy_names[i], "adaspa") == 0;
  CHECK_EQ_INT(found, 1);
  CHECK(!plan_strategy_in_default_study("adaspa") && plan_strategy_in_default_study("mtraining"));
  sim_options o = {0, 0, 0, 0, 0, 0, 0, 0};
  sim_result ra, rm;
  sr_error e;
  CHECK_EQ_INT(sim_strategy(&st, "adaspa", &o, &ra, NULL, &e), SR_OK);
  CHECK_EQ_INT(sim_strategy(&st, "mtraining-flat", &o, &rm, NULL, &e), SR_OK);
  CHECK(ra.feasible && rm.feasible);
  CHECK(ra.step_s != rm.step_s);  // AdaSpa's own pattern and search, not the study's VS one
  plan_spec s = st.base;
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "adaspa", &e), SR_OK);
  CHECK_STR_CONTAINS(s.pattern, "adaspa-online:");
}

TEST(plan_refuses_adaspa_online_where_its_search_does_not_run) {
  // the search makes the mask at run time over the ring: no skip map, no Ulysses head split, no FPDT chunks; so
  // tune and whatif never rank a point that the executor refuses and whose search the simulator would not charge
  const struct {
    const char *schedule;
    int ulysses, skip;
    int64_t fpdt;
    const char *field;
  } bad[] = {{"ring", 0, 1, 0, "skip_empty_sends"}, {"ulysses", 0, 0, 0, "pattern"}, {"usp", 2, 0, 0, "pattern"},
             {"ulysses", 0, 0, 1024, "fpdt_chunk"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    plan_spec s;
    plan_spec_defaults(&s);
    snprintf(s.model, sizeof s.model, "tiny-test");
    snprintf(s.cluster, sizeof s.cluster, "%s", cluster(4, 0));
    snprintf(s.pattern, sizeof s.pattern, "adaspa-online:0.8");
    snprintf(s.schedule, sizeof s.schedule, "%s", bad[i].schedule);
    s.seq = SEQ, s.ulysses = bad[i].ulysses, s.skip_empty_sends = bad[i].skip, s.fpdt_chunk = bad[i].fpdt;
    plan p;
    sr_error e = {0};
    const char *field = NULL;
    CHECK_EQ_INT(plan_build_at(&s, &p, &field, &e), SR_EINPUT);
    CHECK(field && strcmp(field, bad[i].field) == 0);
    CHECK_STR_CONTAINS(e.msg, "adaspa-online:0.8");
  }
  plan_spec s;  // the ring and the double ring plan
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster(4, 0));
  snprintf(s.pattern, sizeof s.pattern, "adaspa-online:0.8");
  s.seq = SEQ;
  plan p;
  sr_error e = {0};
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  plan_free(&p);
  snprintf(s.schedule, sizeof s.schedule, "double-ring");
  s.inner = 2;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  plan_free(&p);
}

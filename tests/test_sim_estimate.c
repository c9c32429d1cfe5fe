// test_sim_estimate.c — the simulated cost of MTraining's online estimation follows the estimator as built:
// its scoring pass runs in float64 on the FP64 vector units (gpu.fp64_tflops), so doubling that rate takes
// exactly half the scoring FLOPs' time off every rank's estimation and changes nothing else.
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "sim/strategy.h"
#include "tests/test.h"

// one node of 2 GPUs; fp64 < 0 leaves gpu.fp64_tflops out of the file
static const char *cluster_fp64(double fp64) {
  static char path[700];
  snprintf(path, sizeof path, "%s/c-fp64-%g.json", test_tmpdir(), fp64);
  char f64[64] = "";
  if (fp64 > 0) snprintf(f64, sizeof f64, "\"fp64_tflops\": %g, ", fp64);
  char text[2048];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": 2,\n"
           " \"gpu\": {\"name\": \"test\", \"peak_tflops\": 989, %s\"hbm_gbps\": 1000, \"mem_gib\": 80,\n"
           "   \"efficiency\": {\"gemm\": 0.5, \"mem\": 0.8}},\n"
           " \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},\n"
           " \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 512}}\n",
           f64);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

// Summed duration of each rank's estimation tasks of layer 0 on the compute stream, and the rank counts.
static int estimation_s(const char *cluster, double *per_rank, int64_t *count) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  if (plan_spec_apply_strategy(&s, "mtraining", &e)) return -1;
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  snprintf(s.pattern, sizeof s.pattern, "vs-online:0.9");
  s.seq = 4096;
  plan p;
  if (plan_build(&s, &p, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  sim_options o = {0, 1};
  sim_result r;
  sim_timeline tl = {0};
  int rc = sim_plan(&p, &o, &r, &tl, &e);
  for (int k = 0; k < 2; k++) per_rank[k] = 0, count[k] = p.layout.rank_count[k];
  for (int64_t i = 0; !rc && i < tl.n; i++) {
    const sim_event *v = &tl.ev[i];
    if (v->layer == 0 && v->phase == PHASE_ESTIMATE && v->stream == STREAM_COMPUTE && v->rank < 2)
      per_rank[v->rank] += v->dur;
  }
  sim_timeline_free(&tl);
  plan_free(&p);
  return rc;
}

TEST(sim_estimation_scores_at_the_fp64_rate) {
  double t1[2], t2[2], t0[2];
  int64_t n[2];
  CHECK_EQ_INT(estimation_s(cluster_fp64(20), t1, n), 0);
  CHECK_EQ_INT(estimation_s(cluster_fp64(40), t2, n), 0);
  for (int r = 0; r < 2; r++) {
    // tiny-test: 4 heads of 16; 64 queries; the scoring pass's FLOPs at 0.44 of the FP64 peak
    double flops = 2.0 * 64 * (double)n[r] * 16 * 4;
    double half = flops / (20e12 * 0.44) / 2;
    CHECK(t1[r] > 0);
    CHECK_NEAR(t1[r] - t2[r], half, 1e-9 * t1[r] + 1e-15);
  }
  // without the field: the H100/H200 ratio of bf16 to FP64 peak, 34/989 of peak_tflops = 34 TFLOP/s here
  CHECK_EQ_INT(estimation_s(cluster_fp64(-1), t0, n), 0);
  double t34[2];
  CHECK_EQ_INT(estimation_s(cluster_fp64(34), t34, n), 0);
  for (int r = 0; r < 2; r++) CHECK_NEAR(t0[r], t34[r], 1e-12 * t34[r]);
}

TEST(cluster_fp64_tflops_must_be_positive) {
  char path[700], text[1024];
  snprintf(path, sizeof path, "%s/bad.json", test_tmpdir());
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"x\", \"peak_tflops\": 100, \"fp64_tflops\": -3,"
           " \"hbm_gbps\": 1000, \"mem_gib\": 80}, \"host\": {\"pcie_gbps\": 25, \"mem_gib\": 64}}\n");
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  cluster_desc c;
  CHECK_EQ_INT(cluster_load(path, &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gpu.fp64_tflops");
}

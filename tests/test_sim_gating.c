// test_sim_gating.c — the simulated cost of a gated pattern's selection (sim/gating_cost.c) follows the
// selection as the executor makes it: MoBA's q . mean(K) scores are float64 loads and multiply-adds on the FP64
// units for the rows past their first K - 1 blocks (the GPU gate, kernels/moba_gate.cu),
// token top-k's logits run at the FP8 tensor rate (gpu.fp8_tflops; the bf16 peak where the GPU has none),
// MoBA's form is built and transposed on the GPU on one rank and built once on the host (the GPU gate's bit sets)
// on several, and a given pattern (the simulator told not to estimate) is charged nothing.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "sim/strategy.h"
#include "tests/test.h"

// one node of 2 GPUs at `peak` bf16 TFLOP/s (GEMM efficiency 0.5); fp8 < 0 leaves gpu.fp8_tflops out
static const char *cluster_rates(double peak, double fp8) {
  static char path[700];
  snprintf(path, sizeof path, "%s/c-%g-%g.json", test_tmpdir(), peak, fp8);
  char f8[64] = "";
  if (fp8 > 0) snprintf(f8, sizeof f8, "\"fp8_tflops\": %g, ", fp8);
  char text[2048];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": 2,\n"
           " \"gpu\": {\"name\": \"test\", \"peak_tflops\": %g, %s\"hbm_gbps\": 1000, \"mem_gib\": 80,\n"
           "   \"efficiency\": {\"gemm\": 0.5, \"mem\": 0.8}},\n"
           " \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},\n"
           " \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 512}}\n",
           peak, f8);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

// Each rank's summed PHASE_ESTIMATE compute time in layer 0 (mtraining's layout, tiny-test, 4096 tokens),
// and per rank the sums over its tokens of floor(pos / B) where it exceeds K - 1 (MoBA's scored blocks; K = 0:
// every token's) and pos + 1 (causal keys).
static int gate_s(const char *cluster, const char *spec, int fixed, int64_t B, int64_t K, double *t, double *blocks,
                  double *keys) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  if (plan_spec_apply_strategy(&s, "mtraining", &e)) return -1;
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  snprintf(s.pattern, sizeof s.pattern, "%s", spec);
  s.seq = 4096;
  plan p;
  if (plan_build(&s, &p, &e)) return -1;
  for (int r = 0; r < 2; r++) {
    t[r] = blocks[r] = keys[r] = 0;
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)p.layout.rank_count[r]);
    layout_positions(&p.layout, r, pos);
    for (int64_t i = 0; i < p.layout.rank_count[r]; i++) {
      if (pos[i] / B > K - 1) blocks[r] += (double)(pos[i] / B);
      keys[r] += (double)(pos[i] + 1);
    }
    free(pos);
  }
  sim_options o = {0, 1, fixed, 0, 0, 0, 0, 0};
  sim_result res;
  sim_timeline tl = {0};
  int rc = sim_plan(&p, &o, &res, &tl, &e);
  for (int64_t i = 0; !rc && i < tl.n; i++) {
    const timeline_event *v = &tl.ev[i];
    if (v->layer == 0 && v->phase == PHASE_ESTIMATE && v->stream == STREAM_COMPUTE && v->rank < 2) t[v->rank] += v->dur;
  }
  sim_timeline_free(&tl);
  plan_free(&p);
  return rc;
}

TEST(sim_token_topk_logits_run_at_the_fp8_tensor_rate) {
  double t1[2], t2[2], bl[2], keys[2];
  CHECK_EQ_INT(gate_s(cluster_rates(989, 2000), "token-topk:64:4:16", 0, 1, 0, t1, bl, keys), 0);
  CHECK_EQ_INT(gate_s(cluster_rates(989, 4000), "token-topk:64:4:16", 0, 1, 0, t2, bl, keys), 0);
  for (int r = 0; r < 2; r++) {
    // 4 indexer heads of 16: 2 x 4 x 16 FLOPs a (row, earlier key) pair at 0.5 of the FP8 peak; doubling the
    // peak takes half of that off, nothing else changes (projections at the bf16 rate, logits memory bound)
    double half = 2.0 * 4 * 16 * keys[r] / (2000e12 * 0.5) / 2;
    CHECK(t1[r] > 0);
    CHECK_NEAR(t1[r] - t2[r], half, 1e-9 * t1[r]);
  }
}

TEST(cluster_without_fp8_runs_the_indexer_at_the_bf16_peak) {
  double t0[2], tp[2], bl[2], keys[2];
  CHECK_EQ_INT(gate_s(cluster_rates(312, -1), "token-topk:64:4:16", 0, 1, 0, t0, bl, keys), 0);
  CHECK_EQ_INT(gate_s(cluster_rates(312, 312), "token-topk:64:4:16", 0, 1, 0, tp, bl, keys), 0);
  for (int r = 0; r < 2; r++) CHECK_NEAR(t0[r], tp[r], 1e-12 * tp[r]);
}

TEST(sim_moba_gate_scores_rows_past_their_first_k_minus_1_blocks_one_query_load_a_multiply_add) {
  double t1[2], t2[2], bl[2], keys[2];
  CHECK_EQ_INT(gate_s(cluster_rates(500, -1), "moba:256:3", 0, 256, 3, t1, bl, keys), 0);
  CHECK_EQ_INT(gate_s(cluster_rates(1000, -1), "moba:256:3", 0, 256, 3, t2, bl, keys), 0);
  for (int r = 0; r < 2; r++) {
    // tiny-test: 4 heads of 16; 4 x 16 multiply-adds a scored (row, block), each one L1 wavefront at the FP64 peak
    // / 128 a second (the FP64 peak defaults to the bf16 peak x 34 / 989): doubling the peak halves them
    double half = 4.0 * 16 * bl[r] / (500e12 * 34 / 989 / 128) / 2;
    CHECK(t1[r] > 0 && bl[r] > 0);
    CHECK_NEAR(t1[r] - t2[r], half, 1e-9 * t1[r]);
  }
}

TEST(sim_given_gated_pattern_is_charged_no_gate) {
  double t[2], bl[2], keys[2];
  const char *specs[] = {"moba:256:3", "token-topk:64:4:16"};
  for (int x = 0; x < 2; x++) {
    CHECK_EQ_INT(gate_s(cluster_rates(989, -1), specs[x], 1, 1, 0, t, bl, keys), 0);
    CHECK(t[0] == 0 && t[1] == 0);
  }
}

// Layer 0's PHASE_INDEX compute events of rank 0 (tiny-test, moba:256:3 at 4096 tokens, contiguous ring, no
// recomputation) on `ranks` GPUs of HBM hbm GB/s: how many, and their summed time.
static int index_events(int ranks, double hbm, int *n, double *t) {
  char path[700], text[2048];
  snprintf(path, sizeof path, "%s/c-%d-%g.json", test_tmpdir(), ranks, hbm);
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": %d,\n"
           " \"gpu\": {\"name\": \"test\", \"peak_tflops\": 989, \"hbm_gbps\": %g, \"mem_gib\": 80,\n"
           "   \"efficiency\": {\"gemm\": 0.5, \"mem\": 0.8}},\n"
           " \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},\n"
           " \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 512}}\n",
           ranks, hbm);
  sr_error e;
  if (sr_write_atomic(path, text, strlen(text), &e)) return -1;
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", path);
  snprintf(s.pattern, sizeof s.pattern, "moba:256:3");
  snprintf(s.layout, sizeof s.layout, "contiguous");
  snprintf(s.schedule, sizeof s.schedule, "ring");
  s.seq = 4096, s.recompute = 0;  // one forward a layer
  plan p;
  if (plan_build(&s, &p, &e)) return -1;
  sim_options o = {0, 1, 0, 0, 0, 0, 0, 0};
  sim_result res;
  sim_timeline tl = {0};
  int rc = sim_plan(&p, &o, &res, &tl, &e);
  *n = 0, *t = 0;
  for (int64_t i = 0; !rc && i < tl.n; i++) {
    const timeline_event *v = &tl.ev[i];
    if (v->layer == 0 && v->phase == PHASE_INDEX && v->stream == STREAM_COMPUTE && v->rank == 0) (*n)++, *t += v->dur;
  }
  sim_timeline_free(&tl);
  plan_free(&p);
  return rc;
}

TEST(sim_moba_on_one_rank_builds_and_transposes_its_form_on_the_gpu_and_on_two_builds_it_on_the_host_once) {
  int n1, n1b, n2, n2b;
  double t1, t1b, t2, t2b;
  CHECK_EQ_INT(index_events(1, 1000, &n1, &t1), 0);
  CHECK_EQ_INT(index_events(1, 2000, &n1b, &t1b), 0);
  CHECK_EQ_INT(index_events(2, 1000, &n2, &t2), 0);
  CHECK_EQ_INT(index_events(2, 2000, &n2b, &t2b), 0);
  // one rank: the forward's build and the backward's transpose, both memory passes on the GPU (faster HBM, less time)
  CHECK_EQ_INT(n1, 2);
  CHECK(t1 > 0 && t1b < t1);
  // two ranks: only the forward's build, on the host (the GPU's memory plays no part), the transposes uploaded with it
  CHECK_EQ_INT(n2, 1);
  CHECK(t2 > 0);
  CHECK_NEAR(t2b, t2, 1e-12 * t2);
}

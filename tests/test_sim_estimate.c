// test_sim_estimate.c — the simulated cost of MTraining's online estimation follows the estimator as built:
// its scoring pass runs in float64 on the FP64 vector units (gpu.fp64_tflops), so doubling that rate takes
// exactly half the scoring FLOPs' time off every rank's estimation; its other passes and the selection run at the
// rates measured for ours on the H200 scaled by the FP64 rate (the same time on an H100 and an H200: doubling the
// HBM rate changes only the scores' write), and the conversion to the execution form costs its cells' sweeps
// (sim/estimate.c; results/sim/2026-11-28-cpu-vs-online-terms).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "sim/strategy.h"
#include "tests/test.h"

// one node of 2 GPUs with HBM at hbm GB/s (memory efficiency 0.8); fp64 < 0 leaves gpu.fp64_tflops out
static const char *cluster_with(double fp64, double hbm) {
  static char path[700];
  snprintf(path, sizeof path, "%s/c-fp64-%g-hbm-%g.json", test_tmpdir(), fp64, hbm);
  char f64[64] = "";
  if (fp64 > 0) snprintf(f64, sizeof f64, "\"fp64_tflops\": %g, ", fp64);
  char text[2048];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": 2,\n"
           " \"gpu\": {\"name\": \"test\", \"peak_tflops\": 989, %s\"hbm_gbps\": %g, \"mem_gib\": 80,\n"
           "   \"efficiency\": {\"gemm\": 0.5, \"mem\": 0.8}},\n"
           " \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},\n"
           " \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 512}}\n",
           f64, hbm);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

static const char *cluster_fp64(double fp64) { return cluster_with(fp64, 1000); }

static int phase_fixed_s(const char *cluster, const char *spec, int phase, int first, int fixed, double *per_rank,
                         int64_t *count);

// Summed duration of each rank's tasks of `phase` in layer 0 on the compute stream for the pattern spec
// (first: only each rank's first such task), and the rank counts.
static int phase_s(const char *cluster, const char *spec, int phase, int first, double *per_rank, int64_t *count) {
  return phase_fixed_s(cluster, spec, phase, first, 0, per_rank, count);
}

static int phase_fixed_s(const char *cluster, const char *spec, int phase, int first, int fixed, double *per_rank,
                         int64_t *count) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  if (plan_spec_apply_strategy(&s, "mtraining", &e)) return -1;
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  snprintf(s.pattern, sizeof s.pattern, "%s", spec);
  s.seq = 4096;
  plan p;
  if (plan_build(&s, &p, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  sim_options o = {0, 1, fixed, 0, 0, 0, 0, 0};
  sim_result r;
  sim_timeline tl = {0};
  int rc = sim_plan(&p, &o, &r, &tl, &e);
  for (int k = 0; k < 2; k++) per_rank[k] = 0, count[k] = p.layout.rank_count[k];
  for (int64_t i = 0; !rc && i < tl.n; i++) {
    const timeline_event *v = &tl.ev[i];
    if (v->layer == 0 && v->phase == phase && v->stream == STREAM_COMPUTE && v->rank < 2 &&
        !(first && per_rank[v->rank] > 0))
      per_rank[v->rank] += v->dur;
  }
  sim_timeline_free(&tl);
  plan_free(&p);
  return rc;
}

static int estimation_s(const char *cluster, double *per_rank, int64_t *count) {
  return phase_s(cluster, "vs-online:0.9", PHASE_ESTIMATE, 0, per_rank, count);
}

// The estimation's passes 2-3 (reading and writing the float64 scores twice, at 0.365 of the H200's 0.85 x 4800 GB/s)
// and, on rank 0, the selection (a radix sort of two N-entry score vectors a head, 8-byte entries, 4 passes each
// reading and writing, plus two fp32 reads of them, at 0.0786 of it), scaled by 34 TFLOP/s over the file's FP64 rate.
static double passes_s(double n, double fp64, int root) {
  double h200 = 4800e9 * 0.85, N = 4096, H = 4;
  double passes = 2 * 64 * n * H * 8 / (h200 * 0.365);
  double select = root ? (2 * N * H * 8 * 2 * 4 + 2 * N * H * 4) / (h200 * 0.0786) : 0;
  return (passes + select) * 34 / fp64;
}

TEST(sim_estimation_scores_at_the_fp64_rate) {
  double t1[2], t2[2], t0[2];
  int64_t n[2];
  CHECK_EQ_INT(estimation_s(cluster_fp64(20), t1, n), 0);
  CHECK_EQ_INT(estimation_s(cluster_fp64(40), t2, n), 0);
  for (int r = 0; r < 2; r++) {
    // tiny-test: 4 heads of 16; 64 queries; the scoring pass's FLOPs at 0.44 of the FP64 peak; passes 2-3 and the
    // selection at the FP64 rate too
    double flops = 2.0 * 64 * (double)n[r] * 16 * 4;
    double half = (flops / (20e12 * 0.44) + passes_s((double)n[r], 20, r == 0)) / 2;
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

// Passes 2-3 and the selection took the same time on one H100 and one H200 (Nsight Compute, 2026-11-28): a second
// memory rate changes only the scores' write of pass 1 (64 x n float64 a head), and the passes are as measured.
TEST(sim_estimation_passes_and_selection_follow_the_fp64_rate_not_the_memory_rate) {
  double t1[2], t2[2];
  int64_t n[2];
  CHECK_EQ_INT(phase_s(cluster_with(34, 1000), "vs-online:0.9", PHASE_ESTIMATE, 0, t1, n), 0);
  CHECK_EQ_INT(phase_s(cluster_with(34, 2000), "vs-online:0.9", PHASE_ESTIMATE, 0, t2, n), 0);
  double rate = 1000e9 * 0.8, H = 4;
  for (int r = 0; r < 2; r++) {
    double scores = 64 * (double)n[r] * H * 8 / rate, flops = 2.0 * 64 * (double)n[r] * 16 * H;
    CHECK_NEAR(t1[r] - t2[r], scores / 2, 1e-9 * t1[r]);
    CHECK_NEAR(t1[r], flops / (34e12 * 0.44) + scores + passes_s((double)n[r], 34, r == 0), 1e-9 * t1[r]);
  }
}

// The conversion: each (head, query tile) cell of the rank (tiny-test: 4 heads; 16 query tiles a rank of striped:128
// over 2 ranks) sweeps the key tiles before its queries 128 at a time (the rank's mean position: 1983.5 on rank 0,
// 2111.5 on rank 1), half a sweep more a source (2), then its head's verticals (about half of its 100 indices, half of
// them before the cell) and half a sweep more a source: 0.132 ms + 2.434 ns a (cell, sweep), whatever the memory rate.
// The backward's transposes: 0.299 ms of launches and 16 bytes an entry.
TEST(sim_online_conversion_costs_its_cells_sweeps) {
  double t[2], t2[2], tr[2], first[2];
  int64_t n[2];
  // a fixed budget: every head of every layer keeps 40 verticals and 60 slashes; the forward's conversion is the
  // layer's first index task (the recomputation's comes later)
  CHECK_EQ_INT(phase_s(cluster_with(34, 1000), "vs-online:topk:40:60", PHASE_INDEX, 1, t, n), 0);
  CHECK_EQ_INT(phase_s(cluster_with(34, 2000), "vs-online:topk:40:60", PHASE_INDEX, 1, t2, n), 0);
  double pos[2] = {1983.5, 2111.5};
  for (int r = 0; r < 2; r++) {
    double qt = ceil((double)n[r] / 128), sweeps = pos[r] / 128 / 128 + 1 + 100.0 / 4 / 128 + 1;
    CHECK_NEAR(qt, 16, 0);
    CHECK_NEAR(t[r], 0.132e-3 + 2.434e-9 * qt * 4 * sweeps, 1e-12);
    CHECK(t2[r] == t[r]);
  }
  // every index task of the layer: the conversion, the recomputation's index build (16 bytes an entry: a few
  // microseconds here) and the backward's transposes (their launches and 16 bytes an entry)
  CHECK_EQ_INT(phase_s(cluster_with(34, 1000), "vs-online:topk:40:60", PHASE_INDEX, 0, tr, n), 0);
  CHECK_EQ_INT(phase_s(cluster_with(34, 1000), "vs-online:topk:40:60", PHASE_INDEX, 1, first, n), 0);
  for (int r = 0; r < 2; r++) {
    double rest = tr[r] - first[r];
    CHECK(rest > 0.299e-3 && rest < 0.299e-3 + 0.05e-3);
  }
}

TEST(sim_given_pattern_has_no_estimation_or_conversion) {
  // vs-topp stands for MTraining's online estimate in what-if studies; the executor's own vs-topp runs
  // build their pattern before the step, and their predictions (fixed_pattern) charge no estimation
  double est[2], idx[2], idx_fixed[2];
  int64_t n[2];
  CHECK_EQ_INT(phase_fixed_s(cluster_fp64(34), "vs-topp:0.9", PHASE_ESTIMATE, 0, 1, est, n), 0);
  CHECK(est[0] == 0 && est[1] == 0);
  CHECK_EQ_INT(phase_fixed_s(cluster_fp64(34), "vs-topp:0.9", PHASE_ESTIMATE, 0, 0, est, n), 0);
  CHECK(est[0] > 0 && est[1] > 0);
  // the index build of a given pattern: 16 bytes an entry, below the conversion's fixed 0.132 ms
  CHECK_EQ_INT(phase_fixed_s(cluster_fp64(34), "vs-topp:0.9", PHASE_INDEX, 1, 1, idx_fixed, n), 0);
  CHECK_EQ_INT(phase_fixed_s(cluster_fp64(34), "vs-topp:0.9", PHASE_INDEX, 1, 0, idx, n), 0);
  for (int r = 0; r < 2; r++) CHECK(idx_fixed[r] > 0 && idx_fixed[r] < 0.132e-3 && idx[r] >= 0.132e-3);
}

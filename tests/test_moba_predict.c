// test_moba_predict.c — a MoBA layer is predicted on the selection its run made: the blocks the run's gate kept,
// recomputed from the run's seeded inputs (exec/attn_data.h attn_gated_selection), run as FULL tiles with the
// diagonal PARTIAL, and the gate's scores charged for the rows past their first K - 1 blocks only. The expected
// work is counted here by brute force (block means in plain double sums, each row's top K - 1 by sorting).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/attn_data.h"
#include "plan/plan.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "tests/test.h"
#include "traces/trace.h"

#define N 2048
#define B 256
#define TOPK 3
#define SEED 7

// one GPU of 100 TFLOP/s bf16 and 10 TFLOP/s FP64: FULL tiles at 0.5, PARTIAL at 0.25 of the peak
static const char *one_gpu(void) {
  static char path[700];
  snprintf(path, sizeof path, "%s/moba-1gpu.json", test_tmpdir());
  const char *text =
      "{\"nodes\": 1, \"gpus_per_node\": 1,\n"
      " \"gpu\": {\"name\": \"test\", \"peak_tflops\": 100, \"fp64_tflops\": 10, \"hbm_gbps\": 1000, \"mem_gib\": 80,\n"
      "   \"efficiency\": {\"gemm\": 0.5, \"mem\": 0.8, \"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.25}},\n"
      " \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},\n"
      " \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 512}}\n";
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

static int build(plan *p, pattern *pat) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  snprintf(s.strategy, sizeof s.strategy, "custom");
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", one_gpu());
  snprintf(s.layout, sizeof s.layout, "contiguous");
  snprintf(s.schedule, sizeof s.schedule, "ring");
  snprintf(s.pattern, sizeof s.pattern, "moba:%d:%d", B, TOPK);
  s.seq = N;
  memset(pat, 0, sizeof *pat);
  if (plan_build(&s, p, &e)) return -1;
  p->spec.recompute = 0;  // one forward a step, as sparsering-exec predict simulates it
  if (pattern_source_load(s.pattern, &p->model, N, 0, 0, pat, &e)) return -1;
  return attn_gated_selection(p, 0, ATTN_INPUTS_RANDOM, SEED, 1, pat, &e);
}

// Brute force: per head and 128-row group the union of its rows' top K - 1 earlier blocks; FULL tiles (kept
// blocks whole, the own block's tiles before the diagonal), PARTIAL diagonals; and the (row, head, block) scores.
static void brute_force(const plan *p, double *full, double *partial, double *scored) {
  int H = (int)p->model.num_heads, Hkv = (int)p->model.num_kv_heads, d = (int)p->model.head_dim, nb = N / B;
  float *q = malloc(sizeof(float) * N * H * d), *k = malloc(sizeof(float) * N * Hkv * d);
  int64_t *pos = malloc(sizeof(int64_t) * N);
  for (int t = 0; t < N; t++) pos[t] = t;
  sr_error e;
  CHECK_EQ_INT(attn_inputs_fill(ATTN_INPUTS_RANDOM, SEED, 0, ATTN_Q, pos, N, N, H, Hkv, d, q, &e), SR_OK);
  CHECK_EQ_INT(attn_inputs_fill(ATTN_INPUTS_RANDOM, SEED, 0, ATTN_K, pos, N, N, H, Hkv, d, k, &e), SR_OK);
  attn_round_bf16(q, (int64_t)N * H * d), attn_round_bf16(k, (int64_t)N * Hkv * d);
  double *mean = calloc((size_t)nb * Hkv * d, sizeof *mean);
  for (int t = 0; t < N; t++)
    for (int x = 0; x < Hkv * d; x++) mean[(t / B) * Hkv * d + x] += (double)k[t * Hkv * d + x] / B;
  *full = *partial = *scored = 0;
  for (int h = 0; h < H; h++)
    for (int g = 0; g < N / 128; g++) {
      int own = g * 128 / B, kept[N / B] = {0};
      for (int r = g * 128; r < g * 128 + 128; r++) {
        double sc[N / B];
        for (int c = 0; c < own; c++) {
          sc[c] = 0;
          for (int x = 0; x < d; x++) sc[c] += (double)q[(r * H + h) * d + x] * mean[(c * Hkv + h / (H / Hkv)) * d + x];
        }
        if (own > TOPK - 1) *scored += own;
        for (int pick = 0; pick < TOPK - 1 && pick < own; pick++) {  // the best not yet picked by this row
          int best = -1;
          for (int c = 0; c < own; c++)
            if (sc[c] > -INFINITY && (best < 0 || sc[c] > sc[best])) best = c;
          kept[best] = 1, sc[best] = -INFINITY;
        }
      }
      for (int c = 0; c < own; c++) *full += kept[c] * (B / 128);
      *full += g - own * (B / 128);  // the own block's tiles before the diagonal
      *partial += 1;
    }
  free(q), free(k), free(pos), free(mean);
}

// Layer 0's summed durations of a phase in the simulated timeline (a given pattern: the run's).
static double phase_s(const plan *p, const pattern *pat, int phase) {
  sim_options o = {0, 1, 0, 0, 0, 0, 0, 0};
  sim_result r;
  sim_timeline tl = {0};
  sr_error e;
  CHECK_EQ_INT(sim_run(p, pat, &o, &r, &tl, &e), SR_OK);
  double t = 0;
  for (int64_t i = 0; i < tl.n; i++)
    if (tl.ev[i].layer == 0 && tl.ev[i].phase == phase && tl.ev[i].stream == STREAM_COMPUTE) t += tl.ev[i].dur;
  sim_timeline_free(&tl);
  return t;
}

TEST(moba_forward_is_predicted_on_the_tiles_the_runs_gate_kept) {
  plan p;
  pattern pat;
  CHECK_EQ_INT(build(&p, &pat), 0);
  double full, partial, scored;
  brute_force(&p, &full, &partial, &scored);
  double tile = 4.0 * 128 * 128 * (double)p.model.head_dim;  // FLOPs of a forward tile (FlashAttention-2)
  // and the call's passes around its ring (sim/exec_cost.c): tiny-test's k|v packed, the output cleared and
  // converted, 528 + 384 bytes a token at 0.8 of 1000 GB/s
  double want = full * tile / (100e12 * 0.5) + partial * tile / (100e12 * 0.25) + (528.0 + 384) * N / (1000e9 * 0.8);
  CHECK(full > 0 && partial == (double)p.model.num_heads * N / 128);
  CHECK_NEAR(phase_s(&p, &pat, PHASE_ATTN), want, 1e-6 * want);  // a ring step's seconds are kept as a float
  pattern_free(&pat);
  plan_free(&p);
}

TEST(moba_gate_scores_the_rows_past_their_first_k_minus_1_blocks_one_load_a_multiply_add) {
  plan p;
  pattern pat;
  CHECK_EQ_INT(build(&p, &pat), 0);
  double full, partial, scored;
  brute_force(&p, &full, &partial, &scored);
  // H d multiply-adds a scored (row, head, block) -- scored counts (row, head) pairs already -- one L1 wavefront
  // each at fp64 / 128 a second, which bounds them above the FP64 rate; plus the block sums' read of K (bf16)
  double madds = scored * (double)p.model.head_dim;
  double sums = (double)N * (double)(p.model.num_kv_heads * p.model.head_dim) * 2 / (1000e9 * 0.8);
  double want = madds / (10e12 / 128) + sums;
  CHECK(scored > 0);
  CHECK_NEAR(phase_s(&p, &pat, PHASE_ESTIMATE), want, 1e-9 * want);
  pattern_free(&pat);
  plan_free(&p);
}

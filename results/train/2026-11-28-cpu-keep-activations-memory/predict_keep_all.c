// predict_keep_all.c — what the trainer's memory arithmetic (train_keep_all_fit, plan/model.h's
// model_exec_kept_whole_bytes_per_token) chooses for qwen2.5-3b on one H200 under MTraining (vs-topp:0.95, the
// double ring), and what the simulator predicts for the step: the device's 139.8 GiB (cudaMemGetInfo's total on the
// H200s measured here), minus the simulated memory with every layer keeping attention's output, minus the trainer's
// 3 GiB margin, shared by whole sets of 87560 bytes a token. Build and run from the worktree root: see README.md.
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"
#include "sim/strategy.h"
#include "train/train.h"

static int run(int64_t seq, int keep_all, sim_result *r) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e = {0};
  if (plan_spec_apply_strategy(&s, "mtraining", &e)) goto fail;
  snprintf(s.model, sizeof s.model, "qwen2.5-3b");
  snprintf(s.cluster, sizeof s.cluster, "h200-1x1-calibrated");
  snprintf(s.pattern, sizeof s.pattern, "vs-topp:0.95");
  snprintf(s.trainer, sizeof s.trainer, "exec");
  s.seq = seq;
  s.recompute = 1;
  plan p;
  if (plan_build(&s, &p, &e)) goto fail;
  // as train --predict: the pattern built before the step, attention's output kept by every layer, every plan kept
  sim_options o = {0, 0, 1, 1, 1, 0, 0, keep_all};
  int rc = sim_plan(&p, &o, r, NULL, &e);
  plan_free(&p);
  if (rc) goto fail;
  return 0;
fail:
  fprintf(stderr, "%s\n", e.msg);
  return 1;
}

int main(void) {
  const double G = 1073741824.0, total = 139.8 * G, margin = 3.0 * G;
  model_config m;
  sr_error e = {0};
  if (model_load("qwen2.5-3b", &m, &e)) {
    fprintf(stderr, "%s (run from the worktree root)\n", e.msg);
    return 1;
  }
  const int64_t seqs[3] = {32768, 65536, 131072};
  printf("seq     sim_GiB(K_all=0)  free_GiB  one_layer_GiB  K_all  kept_GiB  sim_GiB(K_all)  step_s(0)  step_s(K_all)  "
         "saved_s\n");
  for (int i = 0; i < 3; i++) {
    sim_result r0, r1;
    if (run(seqs[i], 0, &r0)) return 1;
    double free_b = total - r0.mem.total - margin;
    int k = train_keep_all_fit(&m, (int)m.num_layers, seqs[i], MODEL_EXEC_MLP_AUTO, 2, free_b);
    double one = (double)seqs[i] * model_exec_kept_whole_bytes_per_token(&m, 1, seqs[i], MODEL_EXEC_MLP_AUTO, 2);
    double kept = (double)seqs[i] * model_exec_kept_whole_bytes_per_token(&m, k, seqs[i], MODEL_EXEC_MLP_AUTO, 2);
    if (run(seqs[i], k, &r1)) return 1;
    printf("%-7lld %16.2f  %8.2f  %13.2f  %5d  %8.2f  %14.2f  %9.3f  %13.3f  %7.3f\n", (long long)seqs[i],
           r0.mem.total / G, free_b / G, one / G, k, kept / G, r1.mem.total / G, r0.step_s, r1.step_s,
           r0.step_s - r1.step_s);
  }
  return 0;
}

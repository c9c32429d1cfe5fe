// pin_bench.c — prints bench-sim's two cases' every figure (sim_result, bar its wall times) as hex floats, so that two
// libraries' results can be compared bit for bit. Run from the tree's root after
//   sed 's/"nodes": 8,/"nodes": 128,/' models/clusters/h100-8x8.json > /tmp/h100-128x8.json
#include <stdio.h>
#include <string.h>
#include "plan/plan.h"
#include "sim/sim.h"
#include "sim/strategy.h"
static int one(const char *model, const char *cluster, long long seq, const char *pattern) {
  sr_error e; sr_error_clear(&e);
  plan_spec s; plan_spec_defaults(&s);
  if (plan_spec_apply_strategy(&s, "mtraining", &e)) { printf("%s\n", e.msg); return 1; }
  snprintf(s.model, sizeof s.model, "%s", model);
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  s.seq = seq;
  snprintf(s.pattern, sizeof s.pattern, "%s", pattern);
  plan p;
  if (plan_build(&s, &p, &e)) { printf("%s\n", e.msg); return 1; }
  sim_options o = {0, 0, 0, 0, 0, 0}; sim_result r;
  if (sim_run(&p, NULL, &o, &r, NULL, &e)) { printf("%s\n", e.msg); return 1; }
  printf("%s %s %lld: step %a tok/s %a flops %a %a mfu %a %a imb %a %a exposed %a attn %a %a comm %a dens %a %a "
         "tasks %lld plans %d %d %d %d bytes %a obtain %a exposed %a builder %d %a %a\n",
         model, cluster, seq, r.step_s, r.tokens_per_s, r.model_flops_dense, r.model_flops_sparse, r.mfu_dense,
         r.mfu_sparse, r.worker_imbalance, r.step_imbalance, r.exposed_comm_s, r.attn_fwd_s, r.attn_bwd_s,
         r.comm_bytes, r.density, r.exec_density, (long long)r.n_tasks, r.plans, r.plans_kept, r.plans_rebuilt,
         r.plans_how, r.plan_bytes, r.plan_obtain_s, r.plans_exposed_s, r.builder_fate, r.builder_bytes,
         r.builder_remake_s);
  const double *m = (const double *)&r.mem;
  printf("  mem");
  for (size_t i = 0; i < offsetof(sim_memory, fits) / sizeof(double); i++) printf(" %a", m[i]);
  printf(" fits %d\n", r.mem.fits);
  plan_free(&p);
  return 0;
}
int main(void) {
  return one("qwen2.5-3b", "a100-4x8", 512 * 1024, "vs-preset:qwen2.5-3b") ||
         one("llama-3.1-70b", "/tmp/h100-128x8.json", 4LL << 20, "vs-topp:0.95");
}

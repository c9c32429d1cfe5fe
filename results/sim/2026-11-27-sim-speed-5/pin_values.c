// pin_values.c — prints, as hex floats, the figures tests/test_sim_speed.c pins: the step time, the peak memory per
// GPU and the task count of (1) `sparsering sim --model qwen2.5-3b --cluster a100-4x8 --seq 512K --strategy
// mtraining`, (2) bench-sim's first case (the same with vs-preset:qwen2.5-3b), (3) bench-sim's second case
// (Llama-3.1-70B, 4M tokens, h100-8x8 with 128 nodes, MTraining), with the rest of each result.
// Built against a tree's library, run from that tree's root (it reads models/):
//   mpicc -std=c11 -O2 -I. -D_GNU_SOURCE -o /tmp/pin_values results/sim/2026-11-27-sim-speed-5/pin_values.c
//     build/release/libsparsering.a -lcjson -lgsl -lgslcblas -lm -lpthread && /tmp/pin_values
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/strategy.h"

static int build(plan *p, const char *model, const char *cluster, int64_t seq, const char *pattern, sr_error *e) {
  plan_spec s;
  plan_spec_defaults(&s);
  int rc = plan_spec_apply_strategy(&s, "mtraining", e);
  if (rc) return rc;
  snprintf(s.model, sizeof s.model, "%s", model);
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  s.seq = seq;
  if (pattern) snprintf(s.pattern, sizeof s.pattern, "%s", pattern);
  return plan_build(&s, p, e);
}

static int one(const char *label, const char *model, const char *cluster, int64_t seq, const char *pattern) {
  sr_error e;
  sr_error_clear(&e);
  plan p;
  sim_options o = {0, 0, 0, 0, 0, 0};
  sim_result r;
  if (build(&p, model, cluster, seq, pattern, &e) || sim_plan(&p, &o, &r, NULL, &e)) {
    fprintf(stderr, "%s: %s\n", label, e.msg);
    return 2;
  }
  printf("%s: step %a (%.6f s) memory %a (%.4f GiB) tasks %lld\n", label, r.step_s, r.step_s, r.mem.total,
         r.mem.total / (1024.0 * 1024 * 1024), (long long)r.n_tasks);
  printf("  exposed %a fwd %a bwd %a bytes %a density %a exec %a imbalance %a %a\n", r.exposed_comm_s, r.attn_fwd_s,
         r.attn_bwd_s, r.comm_bytes, r.density, r.exec_density, r.worker_imbalance, r.step_imbalance);
  plan_free(&p);
  return 0;
}

int main(void) {
  // h100-8x8 with 128 nodes, as bench-sim derives it
  char *text = NULL, tmp[] = "/tmp/pin-h100-128x8-XXXXXX.json";
  sr_error e;
  if (sr_read_file("models/clusters/h100-8x8.json", &text, NULL, &e)) return 2;
  char *at = strstr(text, "\"nodes\": 8,");
  int fd = mkstemps(tmp, 5);
  if (!at || fd < 0) return 2;
  FILE *f = fdopen(fd, "w");
  fprintf(f, "%.*s\"nodes\": 128,%s", (int)(at - text), text, at + strlen("\"nodes\": 8,"));
  fclose(f);
  free(text);
  int rc = one("sim 512K qwen2.5-3b a100-4x8 mtraining", "qwen2.5-3b", "a100-4x8", 512 * 1024, NULL) ||
           one("bench-sim 512K vs-preset", "qwen2.5-3b", "a100-4x8", 512 * 1024, "vs-preset:qwen2.5-3b") ||
           one("bench-sim 4M llama-3.1-70b h100-128x8", "llama-3.1-70b", tmp, 4 * 1024 * 1024, NULL);
  unlink(tmp);
  return rc;
}

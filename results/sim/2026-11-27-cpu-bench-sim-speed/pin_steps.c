// pin_steps.c — prints the figures tests/test_sim_speed.c pins (sim_speed_pin_every_kind_of_step_on_eight_gpus_is_
// unchanged): each configuration's step simulated by sim_plan, its figures as hex floats. Built against main's library
// at fbedcb4 (before this branch), from that tree's root:
//   mpicc -I. -D_GNU_SOURCE -std=c11 -O2 pin_steps.c build/release/libsparsering.a -lcjson -lgsl -lgslcblas -lm \
//     -lpthread -o pin_steps && ./pin_steps
// and again against this branch's library, which printed the same lines (bar the timing comments).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plan/plan.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "sim/strategy.h"
static const char *const two_by_four =
    "{\"nodes\": 2, \"gpus_per_node\": 4, \"gpu\": {\"name\": \"H200\", \"peak_tflops\": 989, \"hbm_gbps\": 4800, "
    "\"mem_gib\": 140, \"efficiency\": {\"gemm\": 0.7, \"attn_fwd_full\": 0.6, \"attn_fwd_partial\": 0.45, "
    "\"attn_fwd_bar\": 0.3, \"attn_bwd_full\": 0.5, \"attn_bwd_partial\": 0.4, \"attn_bwd_bar\": 0.25, \"mem\": 0.85}, "
    "\"comm_slowdown\": 1.05, \"bar_walk_us\": 14.2}, \"intra_node\": {\"gbps\": 450, \"latency_us\": 3.0}, "
    "\"inter_node\": {\"nics_per_node\": 4, \"nic_gbps\": 50, \"latency_us\": 5.0}, "
    "\"host\": {\"pcie_gbps\": 50, \"latency_us\": 10.0, \"mem_gib\": 2048}}";
int main(int argc, char **argv) {
  FILE *f = fopen("h200-2x4-walk.json", "w"); fputs(two_by_four, f); fclose(f);
  const char *cases[][5] = {
    {"qwen2.5-0.5b", "65536", "mtraining", "vs-topp:0.95", ""},
    {"qwen2.5-0.5b", "65536", "mtraining-flat", "vs-preset:qwen2.5-3b", ""},
    {"qwen2.5-0.5b", "65536", "mtraining-zigzag", "vs-like:4:2048:512", ""},
    {"qwen2.5-0.5b", "65536", "striped-ring", "window:64:4096", ""},
    {"qwen2.5-0.5b", "65536", "zigzag-ring", "", ""},
    {"qwen2.5-3b", "65536", "usp", "vs-topp:0.9", ""},
    {"qwen2.5-3b", "65536", "fpdt", "vs-topp:0.9", "16384"},
    {"qwen2.5-0.5b", "65536", "adaspa", "", ""},
    {"qwen2.5-0.5b", "65536", "mtraining", "moba:1024:4", ""},
    {"tiny-25m", "32768", "mtraining", "trace:traces/samples/tiny25m-trained-vs-online-p0.9-32k.safetensors", ""},
    {"tiny-25m", "32768", "zigzag-ring", "trace:traces/samples/tiny25m-trained-vs-online-p0.9-32k.safetensors", ""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    sr_error e; sr_error_clear(&e);
    plan_spec s; plan_spec_defaults(&s);
    if (plan_spec_apply_strategy(&s, cases[i][2], &e)) { printf("%s\n", e.msg); return 1; }
    snprintf(s.model, sizeof s.model, "%s", cases[i][0]);
    snprintf(s.cluster, sizeof s.cluster, "h200-2x4-walk.json");
    s.seq = atoll(cases[i][1]);
    if (cases[i][3][0]) snprintf(s.pattern, sizeof s.pattern, "%s", cases[i][3]);
    if (cases[i][4][0]) s.fpdt_chunk = atoll(cases[i][4]);
    plan p; double t0 = sr_now();
    if (plan_build(&s, &p, &e)) { printf("%s: %s\n", cases[i][2], e.msg); return 1; }
    sim_options o = {0, 0, 0, 0, 0, 0}; sim_result r;
    if (sim_plan(&p, &o, &r, NULL, &e)) { printf("%s: %s\n", cases[i][2], e.msg); return 1; }
    printf("    {\"%s\", %s, \"%s\", \"%s\", %s, {\"%a\", \"%a\", \"%a\", \"%a\", \"%a\", \"%a\", \"%a\", \"%a\"}, %lld},  // %.3f s, %.4f s to simulate\n",
           cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4][0] ? cases[i][4] : "0",
           r.step_s, r.attn_fwd_s, r.attn_bwd_s, r.comm_bytes, r.density, r.exec_density, r.worker_imbalance, r.mem.total,
           (long long)r.n_tasks, r.step_s, sr_now() - t0);
    plan_free(&p);
  }
  return 0;
}

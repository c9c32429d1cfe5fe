// passbench.c — the ring passes alone: the 4M / 1024-GPU plan (bench-sim's second case) with routes for every cell, random
// step seconds, a forward and a backward pass in turn; prints the fastest of each (after two). Built against a library
// (main's and this branch's) from the tree's root, with /tmp/h100-128x8.json made as pin_bench.c says (folder -7):
//   mpicc -I. -D_GNU_SOURCE -std=c11 -O2 -o /tmp/passbench passbench.c build/release/libsparsering.a -lcjson -lgsl -lgslcblas -lm -lpthread
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "plan/plan.h"
#include "plan/util.h"
#include "sim/engine.h"
#include "sim/ring.h"
#include "sim/sim.h"
#include "sim/strategy.h"
int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 10;
  sr_error e; sr_error_clear(&e);
  plan_spec s; plan_spec_defaults(&s);
  plan_spec_apply_strategy(&s, "mtraining", &e);
  snprintf(s.model, sizeof s.model, "llama-3.1-70b");
  snprintf(s.cluster, sizeof s.cluster, "/tmp/h100-128x8.json");
  s.seq = 4LL << 20;
  plan p;
  if (plan_build(&s, &p, &e)) { printf("%s\n", e.msg); return 1; }
  int W = p.layout.world, n = p.schedule.n_steps;
  work_count *agg = calloc((size_t)W * W, sizeof *agg);
  for (int64_t i = 0; i < (int64_t)W * W; i++) agg[i].full = 1;
  ring_routes rt;
  if (ring_routes_build(&p, agg, &rt, &e)) { printf("%s\n", e.msg); return 1; }
  float *sec = malloc((size_t)n * W * sizeof *sec);
  srand(1);
  for (int64_t i = 0; i < (int64_t)n * W; i++) sec[i] = 1e-4f * (1 + rand() % 100);
  for (int mode = 0; mode < 1; mode++) {
    sim_engine g;
    if (engine_init(&g, W, 0, NULL, &e)) return 1;
    engine_lean(&g);
    ring_ctx x;
    ring_ctx_init(&x, W, &p.cluster, &e);
    x.step_s = sec;
    (void)0;
    int32_t *start = malloc(W * sizeof *start), *done = malloc(W * sizeof *done);
    for (int r = 0; r < W; r++) start[r] = -1;
    double t0 = sr_now(), mn[2] = {1e9, 1e9}; clock_t c0 = clock();
    for (int k = 0; k < reps; k++) {
      int bwd = k & 1;
      double tp = sr_now();
      if (ring_fast_pass(&g, &x, &rt, NULL, bwd, start, done, &e)) { printf("%s\n", e.msg); return 1; }
      tp = sr_now() - tp;
      if (k >= 2 && tp < mn[bwd]) mn[bwd] = tp;
      engine_clear(&g);
      for (int r = 0; r < W; r++) start[r] = -1;
    }
    double ms = (sr_now() - t0) * 1e3 / reps, cms = (double)(clock() - c0) / CLOCKS_PER_SEC * 1e3 / reps;
    double end = engine_makespan(&g);
    printf("min fwd %.2f bwd %.2f ms | mode=%d: %.2f ms a pass wall, %.2f ms CPU (end %a, tasks %lld)\n", mn[0] * 1e3, mn[1] * 1e3, mode, ms, cms, end, (long long)g.n_tasks);
    ring_ctx_free(&x);
    engine_free(&g);
  }
  return 0;
}

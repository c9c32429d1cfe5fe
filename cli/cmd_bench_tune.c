// cmd_bench_tune.c — `sparsering bench-tune`: wall time of the tuner's full search (bounds, pruning,
// simulation, robustness check) on the standard case, Qwen2.5-3B at 512K tokens on 4 x 8 A100, with
// MTraining's published per-head VS budgets for that model (docs/design.md, "The published Qwen2.5-3B
// budget mix"). Run it under `mpirun -np K` to split the points over K processes.
#include <stdio.h>
#include <time.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cmd_tune.h"
#include "plan/parallel.h"
#include "plan/util.h"

static const cli_flag bench_tune_flags[] = {
    {"model", "NAME|PATH", "qwen2.5-3b", "the model"},
    {"cluster", "NAME|PATH", "a100-4x8", "the cluster"},
    {"seq", "N", "512K", "tokens in the sequence"},
    {"pattern", "P", "vs-preset:qwen2.5-3b", "attention pattern (docs/patterns.md)"},
    {"seed", "X", "0", "seed of synthetic patterns, 0 to 2^53"},
    {"representative", NULL, NULL, "simulate one layer per distinct work pattern and repeat its time"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage bench_tune_usage = {NULL, "mpirun -np 4 sparsering bench-tune", {bench_tune_flags, NULL}};

static int cmd_bench_tune(int argc, char **argv) {
  tune_exchange x;
  tune_mpi_start(&argc, &argv, &x);
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  plan_spec base;
  plan_spec_defaults(&base);
  tune_sim *t = NULL;
  tune_space sp = {0};
  tune_result r;
  memset(&r, 0, sizeof r);
  int64_t seed = 0;
  double t0 = sr_now();
  int rc = cli_parse(argc, argv, &bench_tune_usage, &a, &e);
  if (!rc) {
    snprintf(base.model, sizeof base.model, "%s", cli_get(&a, "model", "qwen2.5-3b"));
    snprintf(base.cluster, sizeof base.cluster, "%s", cli_get(&a, "cluster", "a100-4x8"));
    snprintf(base.pattern, sizeof base.pattern, "%s", cli_get(&a, "pattern", "vs-preset:qwen2.5-3b"));
    rc = sr_parse_tokens(cli_get(&a, "seq", "512K"), "--seq", &base.seq, &e);
  }
  if (!rc) rc = cli_get_int(&a, "seed", 0, 0, (int64_t)1 << 53, &seed, &e);
  base.seed = (uint64_t)seed;
  if (!rc) rc = tune_sim_open(&base, cli_has(&a, "representative"), &t, &e);
  double t_open = sr_now() - t0;
  if (!rc) rc = tune_space_full(tune_sim_model(t), tune_sim_cluster(t), base.seq, &sp, &e);
  tune_options o;
  tune_options_defaults(&o);
  if (!rc) {
    tune_evaluator ev = tune_sim_evaluator(t);
    tune_progress_on_terminal(&o, &sp, x.rank);
    rc = tune_search(&sp, &ev, &x, &o, &r, &e);
  }
  double wall = sr_now() - t0;
  if (!rc && x.rank == 0) {
    char tok[32], label[128] = "none fits";
    if (r.chosen >= 0) tune_point_label(&sp.pt[r.chosen], label, sizeof label);
    printf("bench-tune: %s on %s, %s tokens, pattern %s, %d process%s x %d thread%s\n", base.model, base.cluster,
           sr_format_tokens(base.seq, tok, sizeof tok), base.pattern, x.size, x.size == 1 ? "" : "es", sr_threads(),
           sr_threads() == 1 ? "" : "s");
    printf("  %d points: %d simulated (%d do not fit), %d pruned by memory, %d pruned by the compute bound, %d invalid\n",
           r.n_points, r.n_simulated, r.n_oom, r.n_pruned_memory, r.n_pruned_bound, r.n_invalid);
    printf("  chosen: %s, %.5g s a step\n", label, r.chosen >= 0 ? r.ev[r.chosen].step_s : 0.0);
    // CPU time too (all threads of rank 0): the machine is shared, so wall time alone says little.
    printf("  wall %.2f s (pattern %.2f s, search %.2f s); CPU of rank 0 %.2f s\n", wall, t_open, r.search_wall_s,
           (double)clock() / CLOCKS_PER_SEC);
    int64_t n_heads, bytes;
    tune_sim_store_usage(t, &n_heads, &bytes);
    printf("  accounting store of rank 0: %lld entries (layer sums, head counts), %.1f MiB\n", (long long)n_heads,
           bytes / 1048576.0);
  }
  int status = rc ? (x.rank == 0 ? sr_error_report(&e, "sparsering bench-tune") : (rc == SR_EINPUT ? 2 : 1)) : 0;
  status = tune_mpi_status(status);
  tune_result_free(&r);
  tune_space_free(&sp);
  tune_sim_close(t);
  tune_mpi_finish();
  return status;
}

CLI_COMMAND("bench-tune", cmd_bench_tune,
            "tuner speed: the full search, Qwen2.5-3B, 512K, a100-4x8, vs-preset:qwen2.5-3b (mpirun -np K splits it)",
            &bench_tune_usage)

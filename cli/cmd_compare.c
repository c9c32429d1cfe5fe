// cmd_compare.c — `sparsering compare SIM.csv EXEC.csv`: the simulator's predicted timeline against
// the executor's measured one, per phase and per step, with the mean and max relative error.
#include <math.h>
#include <stdio.h>

#include "cli/cli.h"
#include "sim/timeline_compare.h"

static void print_row(const tlc_row *r) {
  printf("  %-24s %12.1f %12.1f %+9.1f%%\n", r->name, r->predicted_us, r->measured_us, 100 * r->rel_err);
}

static const cli_flag compare_flags[] = {
    {"run-sim", "RUN", "all rows", "compare only this run of the predicted CSV (its run column)"},
    {"run-exec", "RUN", "all rows", "compare only this run of the measured CSV"},
    {"steps", NULL, NULL, "also print the error of every step"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage compare_usage = {"SIM.csv EXEC.csv", "sparsering compare sim.csv exec.csv --steps",
                                        {compare_flags, NULL}};

static int cmd_compare(int argc, char **argv) {
  sr_error e = {0};
  cli_args a;
  if (cli_parse(argc, argv, &compare_usage, &a, &e)) return sr_error_report(&e, "sparsering compare");
  if (a.n_pos != 2) {
    fprintf(stderr, "usage: sparsering compare SIM.csv EXEC.csv [--run-sim RUN] [--run-exec RUN] [--steps]\n");
    return 2;
  }
  tlc_timeline p, m;
  if (tlc_read_csv(a.pos[0], &p, &e)) return sr_error_report(&e, "sparsering compare");
  if (tlc_read_csv(a.pos[1], &m, &e)) {
    tlc_free(&p);
    return sr_error_report(&e, "sparsering compare");
  }
  tlc_report r;
  int rc = tlc_compare(&p, &m, cli_get(&a, "run-sim", NULL), cli_get(&a, "run-exec", NULL), &r, &e);
  tlc_free(&p), tlc_free(&m);
  if (rc) return sr_error_report(&e, "sparsering compare");
  printf("predicted (%s) vs measured (%s), microseconds; error = (predicted - measured) / measured\n", a.pos[0], a.pos[1]);
  printf("  %-24s %12s %12s %10s\n", "phase", "predicted", "measured", "error");
  for (int i = 0; i < r.n_phases; i++) print_row(&r.phases[i]);
  print_row(&r.total);
  if (cli_has(&a, "steps")) {
    printf("  %-24s %12s %12s %10s\n", "step", "predicted", "measured", "error");
    for (int i = 0; i < r.n_steps; i++) print_row(&r.steps[i]);
  }
  printf("per phase: mean |error| %.1f%%, max |error| %.1f%% over %d phases\n", 100 * r.phase_mean_abs,
         100 * r.phase_max_abs, r.n_phases);
  printf("per step:  mean |error| %.1f%%, max |error| %.1f%% over %d steps\n", 100 * r.step_mean_abs,
         100 * r.step_max_abs, r.n_steps);
  if (r.only_predicted[0]) printf("phases only in the prediction: %s\n", r.only_predicted);
  if (r.only_measured[0]) printf("phases only in the measurement: %s\n", r.only_measured);
  tlc_report_free(&r);
  return 0;
}

CLI_COMMAND("compare", cmd_compare, "predicted (sim) vs measured (exec) timeline CSVs: per phase and step errors",
            &compare_usage)

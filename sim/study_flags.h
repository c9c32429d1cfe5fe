// study_flags.h — the simulator commands' flags and what they ask for, defined once for the command line
// (cli/cmd_sim.c, cmd_whatif.c, cmd_tune.c) and for the C API of other languages (api/api.h): the flag
// tables, the parsing of a step, a what-if study and a tuner search from parsed flags, and the what-if
// study itself (the strategies side by side). The commands add their output flags (--csv, --svg, --out).
#ifndef SR_STUDY_FLAGS_H
#define SR_STUDY_FLAGS_H

#include "plan/args.h"
#include "plan/cluster.h"
#include "plan/model.h"
#include "plan/plan.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "sim/strategy.h"
#include "sim/tune.h"

// ---- sim: one training step of a plan ---------------------------------------------------------

// The sim command's flags besides the plan's and the step's (plan/plan_flags.h): --plan FILE, --representative.
extern const cli_flag sim_step_flags[];
// The plan the flags describe: the --plan file, or the plan flags with the step's options. Errors name flags.
int sim_plan_from_flags(const cli_args *a, plan *p, sr_error *e);
// The simulator options of the flags (--representative); record_timeline as the caller needs.
sim_options sim_options_from_flags(const cli_args *a, int record_timeline);

// ---- whatif: the strategies side by side ------------------------------------------------------

#define WHATIF_MAX_STRATEGIES 32

// --model --cluster --seq --pattern --seed --strategies --representative (with the step's flags,
// plan/plan_flags.h's plan_step_flags).
extern const cli_flag whatif_flags[];

typedef struct {
  strategy_study st;
  model_config m;
  cluster_desc c;
  sim_options o;
  int n;
  char names[WHATIF_MAX_STRATEGIES][64];
  sim_result *res;  // [n] after whatif_run
  double wall_s;    // seconds whatif_run took
} whatif_study;

// Read a study from the flags; its model and cluster must load (their errors name --model / --cluster).
int whatif_from_flags(const cli_args *a, whatif_study *w, sr_error *e);
// Simulate every strategy of the study into w->res (a strategy that cannot run is a result with its reason).
int whatif_run(whatif_study *w, sr_error *e);
// Append the study's results as CSV (model, cluster, seq, then report_csv_row's columns) to b; 0 or -1.
int whatif_csv(const whatif_study *w, sr_buf *b);
// Release a study's results.
void whatif_free(whatif_study *w);

// ---- tune: the tuner's search -----------------------------------------------------------------

// --model --cluster --seq --pattern --trace --seed --trainer --top --robust-top --robust-steps --margin
// --batch --no-prune --representative.
extern const cli_flag tune_flags[];
// The base spec, the search options and --representative from the flags.
int tune_spec_from_flags(const cli_args *a, plan_spec *s, tune_options *o, int *representative, sr_error *e);

#endif

// exec_plan.h — the plan an executor command runs: read from --plan FILE, or built from the same
// flags as `sparsering plan` (--strategy, then --model --cluster --seq --layout --schedule --inner --ulysses --pattern
// --seed --skip-empty-sends --fwd-runs), and the layer patterns it implies (pattern_source_load: a recorded trace, or the planner's parser).
#ifndef SR_EXEC_PLAN_H
#define SR_EXEC_PLAN_H

#include "exec/exec.h"
#include "plan/pattern.h"
#include "plan/plan.h"

// Flags and switches exec_plan_load reads (splice into a command's lists).
#define EXEC_PLAN_FLAGS "plan", "strategy", "model", "cluster", "seq", "layout", "schedule", "inner", "ulysses", "pattern", "seed"
#define EXEC_PLAN_SWITCHES "skip-empty-sends", "fwd-runs"

// Read or build the plan, then its pattern (every layer). layout/schedule/pattern, when not NULL,
// replace the flags' values (one entry of a comma-separated list). On error nothing needs freeing.
int exec_plan_load(const cli_args *a, const char *layout, const char *schedule, const char *pattern_src, plan *p,
                   pattern *pat, sr_error *e);

#endif
